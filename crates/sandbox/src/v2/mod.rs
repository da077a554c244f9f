//! The V2 reference surface: route table (path → operationId), authentication, the
//! query allow-lists, fault injection, request recording, and the envelopes.
//!
//! Order of work for one request: `/__sandbox/*` goes to `admin`; otherwise route
//! (unknown → 404/11004, wrong method → 405/11000), record, apply a fault if one hits,
//! authenticate (unless public), reject unknown query parameters (422/11000), parse the
//! JSON body (400/11000 if not JSON), then hand over to the operation.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Method, Response, StatusCode};
use percent_encoding::percent_decode_str;
use serde_json::{json, Map, Value};

use super::checks::{parse_body, Query};
use super::faults::{FaultKind, FaultRule};
use super::serve::{bytes_response, json as json_resp, truncated, Body, Dropped, Req};
use super::{admin, lock, Shared};

pub(super) mod catalog;
pub(super) mod runs;
mod tasks;

/// A V2 error: HTTP status, application code, message and details.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    pub status: u16,
    pub code: i64,
    pub message: String,
    pub details: Vec<String>,
}

impl ApiError {
    pub(crate) fn new(status: u16, code: i64, message: &str, details: Vec<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.to_string(),
            details,
        }
    }
    pub(crate) fn bad_request(detail: String) -> Self {
        Self::new(400, 11000, "invalid argument", vec![detail])
    }
    pub(crate) fn invalid(details: Vec<String>) -> Self {
        Self::new(422, 11000, "invalid argument", details)
    }
    pub(crate) fn invalid1(detail: impl Into<String>) -> Self {
        Self::invalid(vec![detail.into()])
    }
    pub(crate) fn not_found() -> Self {
        Self::new(404, 11004, "not found", vec![])
    }
    pub(crate) fn method_not_allowed() -> Self {
        Self::new(
            405,
            11000,
            "invalid argument",
            vec!["method not allowed".into()],
        )
    }
    pub(crate) fn unauthenticated() -> Self {
        Self::new(401, 12001, "authentication required", vec![])
    }
    pub(crate) fn invalid_token() -> Self {
        Self::new(401, 12002, "invalid token", vec![])
    }
    pub(crate) fn worker_not_found() -> Self {
        Self::new(404, 50001, "worker does not exist", vec![])
    }
    pub(crate) fn version_unavailable(v: &str) -> Self {
        Self::new(
            400,
            50003,
            "the worker version is not available",
            vec![format!("version {v:?} is not available")],
        )
    }
    pub(crate) fn task_not_found() -> Self {
        Self::new(404, 60001, "task does not exist", vec![])
    }
    pub(crate) fn run_not_found() -> Self {
        Self::new(404, 70001, "run record does not exist", vec![])
    }
    pub(crate) fn run_op_failed(detail: &str) -> Self {
        Self::new(400, 70002, "run operation failed", vec![detail.to_string()])
    }
}

/// `Ok(None)`: success without a `data` key.
pub(crate) type Outcome = Result<Option<Value>, ApiError>;

/// What an operation does; several operationIds share one action (the `last` forms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Regions,
    Store,
    Account,
    Workers,
    Worker,
    InputSchema,
    RunWorker,
    ListTasks,
    CreateTask,
    GetTask,
    UpdateTask,
    DeleteTask,
    GetTaskInput,
    UpdateTaskInput,
    RunTask,
    ListRuns,
    RunDetail,
    Abort,
    Log,
    Rerun,
    Result,
    Export,
}

impl Action {
    fn public(self) -> bool {
        matches!(self, Action::Regions | Action::Store | Action::InputSchema)
    }

    /// Query parameters the operation accepts (`token` is always accepted).
    fn query_allowed(self) -> &'static [&'static str] {
        match self {
            Action::Regions => &["language"],
            Action::Store | Action::Workers => &["keyword", "offset", "limit"],
            Action::ListTasks => &["offset", "limit", "worker_id", "keyword"],
            Action::ListRuns => &[
                "offset",
                "limit",
                "status",
                "worker_id",
                "start_time",
                "end_time",
            ],
            Action::Result => &["offset", "limit"],
            Action::Export => &["format", "filter_keys"],
            _ => &[],
        }
    }

    /// Whether a JSON body is read (abort's body is undocumented and ignored).
    fn takes_body(self) -> bool {
        matches!(
            self,
            Action::RunWorker
                | Action::CreateTask
                | Action::UpdateTask
                | Action::UpdateTaskInput
                | Action::RunTask
                | Action::Rerun
        )
    }
}

/// Which run a run operation targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunRef {
    None,
    Id(String),
    /// Latest run of the account.
    Last,
    /// Latest run of the account for the worker in `Params::worker`.
    WorkerLast,
}

#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub worker: Option<String>,
    pub task: Option<String>,
    pub run: RunRef,
}

#[derive(Debug)]
pub(crate) enum Routed {
    Op(&'static str, Action, Params),
    MethodNotAllowed,
    NotFound,
}

/// The route table of the 34 served V2 operations.
pub(crate) fn route(method: &Method, path: &str) -> Routed {
    let Some(rest) = path.strip_prefix("/api/v2/") else {
        return Routed::NotFound;
    };
    let mut segs = Vec::new();
    for raw in rest.split('/') {
        match percent_decode_str(raw).decode_utf8() {
            // A decoded '/' would silently make a different path: no route has it.
            Ok(s) if !s.contains('/') => segs.push(s.into_owned()),
            _ => return Routed::NotFound,
        }
    }
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    let mut p = Params {
        worker: None,
        task: None,
        run: RunRef::None,
    };
    use Action::*;
    let options: Vec<(Method, &'static str, Action)> = match s.as_slice() {
        ["proxy", "region"] => vec![(Method::GET, "listProxyRegions", Regions)],
        ["store"] => vec![(Method::GET, "listStore", Store)],
        ["users", "account"] => vec![(Method::GET, "getAccount", Account)],
        ["workers"] => vec![(Method::GET, "listWorkers", Workers)],
        ["workers", w] if !w.is_empty() => {
            p.worker = Some(w.to_string());
            vec![(Method::GET, "getWorker", Worker)]
        }
        ["workers", w, "input-schema"] if !w.is_empty() => {
            p.worker = Some(w.to_string());
            vec![(Method::GET, "getWorkerInputSchema", InputSchema)]
        }
        ["workers", w, "runs"] if !w.is_empty() => {
            p.worker = Some(w.to_string());
            vec![(Method::POST, "runWorker", RunWorker)]
        }
        ["workers", w, "runs", "last"] if !w.is_empty() => {
            p.worker = Some(w.to_string());
            p.run = RunRef::WorkerLast;
            vec![(Method::GET, "getWorkerLastRun", RunDetail)]
        }
        ["workers", w, "runs", "last", tail] if !w.is_empty() => {
            p.worker = Some(w.to_string());
            p.run = RunRef::WorkerLast;
            match *tail {
                "abort" => vec![(Method::POST, "abortWorkerLastRun", Abort)],
                "export" => vec![(Method::GET, "exportWorkerLastRunResults", Export)],
                "log" => vec![(Method::GET, "getWorkerLastRunLog", Log)],
                "rerun" => vec![(Method::POST, "rerunWorkerLastRun", Rerun)],
                "result" => vec![(Method::GET, "listWorkerLastRunResults", Result)],
                _ => vec![],
            }
        }
        ["worker-tasks"] => vec![
            (Method::GET, "listWorkerTasks", ListTasks),
            (Method::POST, "createWorkerTask", CreateTask),
        ],
        ["worker-tasks", t] if !t.is_empty() => {
            p.task = Some(t.to_string());
            vec![
                (Method::GET, "getWorkerTask", GetTask),
                (Method::PUT, "updateWorkerTask", UpdateTask),
                (Method::DELETE, "deleteWorkerTask", DeleteTask),
            ]
        }
        ["worker-tasks", t, "input"] if !t.is_empty() => {
            p.task = Some(t.to_string());
            vec![
                (Method::GET, "getWorkerTaskInput", GetTaskInput),
                (Method::PUT, "updateWorkerTaskInput", UpdateTaskInput),
            ]
        }
        ["worker-tasks", t, "runs"] if !t.is_empty() => {
            p.task = Some(t.to_string());
            vec![(Method::POST, "runWorkerTask", RunTask)]
        }
        ["worker-runs"] => vec![(Method::GET, "listWorkerRuns", ListRuns)],
        ["worker-runs", "last"] => {
            p.run = RunRef::Last;
            vec![(Method::GET, "getLastWorkerRun", RunDetail)]
        }
        ["worker-runs", "last", tail] => {
            p.run = RunRef::Last;
            match *tail {
                "abort" => vec![(Method::POST, "abortLastWorkerRun", Abort)],
                "export" => vec![(Method::GET, "exportLastWorkerRunResults", Export)],
                "log" => vec![(Method::GET, "getLastWorkerRunLog", Log)],
                "rerun" => vec![(Method::POST, "rerunLastWorkerRun", Rerun)],
                "result" => vec![(Method::GET, "listLastWorkerRunResults", Result)],
                _ => vec![],
            }
        }
        ["worker-runs", r] if !r.is_empty() => {
            p.run = RunRef::Id(r.to_string());
            vec![(Method::GET, "getWorkerRun", RunDetail)]
        }
        ["worker-runs", r, tail] if !r.is_empty() => {
            p.run = RunRef::Id(r.to_string());
            match *tail {
                "abort" => vec![(Method::POST, "abortWorkerRun", Abort)],
                "log" => vec![(Method::GET, "getWorkerRunLog", Log)],
                "rerun" => vec![(Method::POST, "rerunWorkerRun", Rerun)],
                "result" => vec![(Method::GET, "listWorkerRunResults", Result)],
                _ => vec![],
            }
        }
        ["worker-runs", r, "result", "export"] if !r.is_empty() && *r != "last" => {
            p.run = RunRef::Id(r.to_string());
            vec![(Method::GET, "exportWorkerRunResults", Export)]
        }
        _ => vec![],
    };
    if options.is_empty() {
        return Routed::NotFound;
    }
    match options.into_iter().find(|(m, _, _)| m == method) {
        Some((_, name, action)) => Routed::Op(name, action, p),
        None => Routed::MethodNotAllowed,
    }
}

/// The credential a request carries: (form, key). Bearer wins over `api-key`,
/// which wins over `?token=`.
pub(crate) fn credential(req: &Req, q: &Query) -> Option<(&'static str, String)> {
    if let Some(v) = req.header("authorization") {
        let key = match v.split_once(' ') {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => {
                rest.trim().to_string()
            }
            // Anything but Bearer is a credential we cannot accept.
            _ => String::new(),
        };
        return Some(("bearer", key));
    }
    if let Some(v) = req.header("api-key") {
        return Some(("api-key", v.trim().to_string()));
    }
    q.get("token").map(|t| ("token", t.to_string()))
}

/// An operation call after the generic checks.
pub(crate) struct Call<'a> {
    pub shared: &'a Arc<Shared>,
    /// The authenticated account key ("" on public operations without a key).
    pub account: String,
    pub params: Params,
    pub query: Query,
    /// The JSON object body (empty object when there was none).
    pub body: Map<String, Value>,
}

pub(crate) async fn handle(shared: Arc<Shared>, req: Req) -> Result<Response<Body>, Dropped> {
    if req.path == "/__sandbox" || req.path.starts_with("/__sandbox/") {
        return Ok(admin::handle(&shared, req).await);
    }
    let routed = route(&req.method, &req.path);
    let op = match &routed {
        Routed::Op(name, _, _) => Some(*name),
        _ => None,
    };
    admin::record(&shared, &req, op);
    if let Some(rule) = op.and_then(|name| shared.faults.pick(name)) {
        if let Some(answer) = apply_fault(&shared, &rule).await {
            return answer;
        }
    }
    let outcome = match routed {
        Routed::NotFound => Err(ApiError::not_found()),
        Routed::MethodNotAllowed => Err(ApiError::method_not_allowed()),
        Routed::Op(_, action, params) => operate(&shared, &req, action, params).await,
    };
    Ok(render(outcome))
}

/// Act out a fault. `None` means "continue normally" (after a latency fault).
async fn apply_fault(shared: &Shared, rule: &FaultRule) -> Option<Result<Response<Body>, Dropped>> {
    let message = |default: &str| rule.message.clone().unwrap_or_else(|| default.to_string());
    let answer = match rule.kind {
        FaultKind::Latency => {
            let wait = Duration::from_millis(rule.latency_ms.unwrap_or(0));
            let mut stop = shared.stop.clone();
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.wait_for(|s| *s) => {}
            }
            return None;
        }
        FaultKind::Error => {
            let (status, code) = rule.error_status_code();
            render(Err(ApiError::new(
                status,
                code,
                &message("injected fault"),
                vec![],
            )))
        }
        FaultKind::RateLimit => {
            let code = rule.code.unwrap_or(13000);
            let mut resp = render(Err(ApiError::new(
                429,
                code,
                &message("too many requests"),
                vec![],
            )));
            resp.headers_mut().insert(
                http::header::RETRY_AFTER,
                HeaderValue::from(rule.retry_after.unwrap_or(1)),
            );
            resp
        }
        // What a misconfigured proxy in front of the service might answer.
        FaultKind::Malformed => bytes_response(
            StatusCode::OK,
            "application/json",
            "<html><body>502 Bad Gateway</body></html>",
        ),
        FaultKind::Truncated => {
            let body = envelope_ok(Some(json!({"partial": true})), &request_id());
            let text = bytes::Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
            let cut = text.len() / 2;
            truncated(StatusCode::OK, text.slice(..cut))
        }
        FaultKind::Drop => return Some(Err(Dropped)),
    };
    Some(Ok(answer))
}

async fn operate(shared: &Arc<Shared>, req: &Req, action: Action, params: Params) -> Outcome {
    let query = Query::parse(&req.query);
    let account = match credential(req, &query) {
        Some((_, key)) => {
            if lock(&shared.state).account(&key).is_some() {
                key
            } else if action.public() {
                // Public operations do not look at the key.
                String::new()
            } else {
                return Err(ApiError::invalid_token());
            }
        }
        None if action.public() => String::new(),
        None => return Err(ApiError::unauthenticated()),
    };
    let mut allowed: Vec<&str> = action.query_allowed().to_vec();
    allowed.push("token");
    let unknown = query.unknown(&allowed);
    if !unknown.is_empty() {
        return Err(ApiError::invalid(
            unknown
                .iter()
                .map(|k| format!("unknown query parameter: {k}"))
                .collect(),
        ));
    }
    let body = if action.takes_body() {
        if req.body_error {
            return Err(ApiError::bad_request(
                "request body could not be read".into(),
            ));
        }
        match parse_body(&req.body).map_err(ApiError::bad_request)? {
            None => Map::new(),
            Some(Value::Object(m)) => m,
            Some(_) => return Err(ApiError::invalid1("request body must be a JSON object")),
        }
    } else {
        Map::new()
    };
    let call = Call {
        shared,
        account,
        params,
        query,
        body,
    };
    match action {
        Action::Regions => catalog::regions(&call),
        Action::Store | Action::Workers => catalog::store(&call),
        Action::Account => catalog::account(&call),
        Action::Worker => catalog::worker(&call),
        Action::InputSchema => catalog::input_schema(&call),
        Action::RunWorker => runs::run_worker(&call).await,
        Action::RunTask => runs::run_task(&call).await,
        Action::Rerun => runs::rerun(&call).await,
        Action::ListRuns => runs::list(&call),
        Action::RunDetail => runs::detail(&call),
        Action::Abort => runs::abort(&call),
        Action::Log => runs::log(&call),
        Action::Result => runs::result(&call),
        Action::Export => runs::export(&call),
        Action::ListTasks => tasks::list(&call),
        Action::CreateTask => tasks::create(&call),
        Action::GetTask => tasks::get(&call),
        Action::UpdateTask => tasks::update(&call),
        Action::DeleteTask => tasks::delete(&call),
        Action::GetTaskInput => tasks::get_input(&call),
        Action::UpdateTaskInput => tasks::update_input(&call),
    }
}

pub(crate) fn request_id() -> String {
    format!("req-{}", ulid::Ulid::new())
}

fn envelope_ok(data: Option<Value>, rid: &str) -> Value {
    let mut m = Map::new();
    m.insert("code".into(), json!(0));
    m.insert("message".into(), json!("success"));
    m.insert("request_id".into(), json!(rid));
    if let Some(d) = data {
        m.insert("data".into(), d);
    }
    Value::Object(m)
}

/// The one place a V2 outcome becomes a response.
pub(crate) fn render(outcome: Outcome) -> Response<Body> {
    let rid = request_id();
    let (status, body) = match outcome {
        Ok(data) => (StatusCode::OK, envelope_ok(data, &rid)),
        Err(e) => (
            StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            json!({"code": e.code, "message": e.message, "request_id": rid, "details": e.details}),
        ),
    };
    let mut resp = json_resp(status, &body);
    if let Ok(v) = HeaderValue::from_str(&rid) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(m: Method, p: &str) -> Option<&'static str> {
        match route(&m, p) {
            Routed::Op(n, _, _) => Some(n),
            _ => None,
        }
    }

    #[test]
    fn routes_resolve() {
        assert_eq!(
            name(Method::GET, "/api/v2/worker-runs/last"),
            Some("getLastWorkerRun")
        );
        assert_eq!(
            name(Method::GET, "/api/v2/worker-runs/last/export"),
            Some("exportLastWorkerRunResults")
        );
        assert_eq!(
            name(Method::GET, "/api/v2/worker-runs/01ABC/result/export"),
            Some("exportWorkerRunResults")
        );
        assert_eq!(name(Method::GET, "/api/v2/worker-runs/01ABC/export"), None);
        assert_eq!(
            name(Method::POST, "/api/v2/workers/a~b/runs/last/rerun"),
            Some("rerunWorkerLastRun")
        );
        assert_eq!(
            name(Method::DELETE, "/api/v2/worker-tasks/T1"),
            Some("deleteWorkerTask")
        );
        assert_eq!(
            name(Method::GET, "/api/v2/workers/coreclaw/google-maps-scraper"),
            None
        );
        assert_eq!(
            name(
                Method::GET,
                "/api/v2/workers/coreclaw%2Fgoogle-maps-scraper"
            ),
            None
        );
        assert_eq!(
            name(Method::GET, "/api/v2/workers/coreclaw~google-maps-scraper"),
            Some("getWorker")
        );
        assert!(matches!(
            route(&Method::POST, "/api/v2/store"),
            Routed::MethodNotAllowed
        ));
        assert!(matches!(
            route(&Method::GET, "/api/v2/store/"),
            Routed::NotFound
        ));
        assert!(matches!(
            route(&Method::GET, "/api/v1/store"),
            Routed::NotFound
        ));
    }
}
