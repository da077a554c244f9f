//! The native V1 surface: the 13 operations of the retired V1 service, answered
//! directly from the shared state in V1 shapes (facts §1.1-§1.14). It is written
//! independently of the gateway's translation on purpose: it is the reference the
//! gateway's V1 answers are compared with.
//!
//! Conventions: envelope always exactly `{code, message, data}` (`data: null` on
//! errors and on abort); key in `api-key` or `Authorization: Bearer`; statuses are
//! integers 1-5; timestamps Unix seconds except the sync-run answer (milliseconds).
//! Bodies are read as JSON whatever their `Content-Type`; 4000 messages name the
//! problem after a colon; system limits of `0` mean the worker's default. Where the
//! public record disagrees (error statuses, empty store search, missing key), the
//! sandbox's `[v1]` dialect decides, with the gateway's `[compat]` spellings.

use std::sync::Arc;

use http::{Method, Response, StatusCode};
use serde_json::{json, Map, Value};

use super::catalog::WorkerSpec;
use super::checks::{check_input, parse_body, window, Fields, Query, ZeroLimits};
use super::lifecycle::{AbortError, NewRun, Origin, Run, RunView};
use super::serve::{json as json_resp, Body, Dropped, Req};
use super::v2::catalog::regions_value;
use super::v2::runs::{logs_url, wait_done};
use super::{lock, Shared};
use v1compat_contract::dialect::{Dialect, EmptyStoreSearch, MissingKeyStatus};

/// A V1 error answer. `detail` names what was wrong with the request, after
/// the fixed message and a colon, as V1 did for its own validation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct V1Error {
    pub status: u16,
    pub code: i64,
    pub message: &'static str,
    pub detail: Option<String>,
    /// A key problem (invalid or missing key): it keeps its status in every
    /// dialect ([`Dialect::error_status`]).
    pub about_key: bool,
}

const fn err(status: u16, code: i64, message: &'static str) -> V1Error {
    V1Error {
        status,
        code,
        message,
        detail: None,
        about_key: false,
    }
}

/// 400 / 4000 naming the problems found.
fn invalid(problems: &[String]) -> V1Error {
    V1Error {
        detail: (!problems.is_empty()).then(|| problems.join("; ")),
        ..INVALID
    }
}

const INVALID: V1Error = err(400, 4000, "Invalid request parameters");
const BAD_KEY: V1Error = V1Error {
    status: 401,
    code: 20001,
    message: "Invalid API key",
    detail: None,
    about_key: true,
};
const NO_ROUTE: V1Error = err(404, 4040, "Resource not found");
const NO_SCRIPT: V1Error = err(404, 50001, "Script does not exist");
const NO_VERSION: V1Error = err(400, 50003, "The script version is not available");
const NO_TASK: V1Error = err(404, 60001, "Task does not exist");
const NO_RUN: V1Error = err(404, 70001, "Run record does not exist");
const ABORT_FAILED: V1Error = err(500, 70002, "Failed to abort run");

type V1Result = Result<Value, V1Error>;

/// Largest V1 run-list page.
const MAX_LIST_PAGE: i64 = 1000;
/// Largest V1 result page. `result/list` documents no cap of its own; the one cap
/// V1 documented for a result window is the synchronous run's `page_size` max 1000
/// (facts §1.3, V1-SWAGGER), which this surface already applies there.
const MAX_RESULT_PAGE: i64 = 1000;

fn render(result: V1Result, dialect: &Dialect) -> Response<Body> {
    let (status, body) = match result {
        Ok(data) => (
            StatusCode::OK,
            json!({"code": 0, "message": "success", "data": data}),
        ),
        Err(e) => {
            let message = match &e.detail {
                Some(d) => format!("{}: {d}", e.message),
                None => e.message.to_owned(),
            };
            let documented =
                StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (
                dialect.error_status(documented, e.about_key),
                json!({"code": e.code, "message": message, "data": null}),
            )
        }
    };
    json_resp(status, &body)
}

pub(crate) async fn handle(shared: Arc<Shared>, req: Req) -> Result<Response<Body>, Dropped> {
    Ok(render(dispatch(&shared, &req).await, &shared.v1_dialect))
}

async fn dispatch(shared: &Arc<Shared>, req: &Req) -> V1Result {
    let q = Query::parse(&req.query);
    match (&req.method, req.path.as_str()) {
        (&Method::GET, "/api/store") => {
            return store(shared, &q, shared.v1_dialect.empty_store_search)
        }
        (&Method::GET, "/api/scraper") => return scraper(shared, &q),
        (&Method::GET, "/api/proxy/region") => return Ok(regions_value()),
        (&Method::POST, p) if OPS.contains(&p) => {}
        _ => return Err(NO_ROUTE),
    }
    let account = authenticate(shared, req)?;
    if req.body_error {
        return Err(INVALID);
    }
    let body = match parse_body(&req.body) {
        Ok(None) => Map::new(),
        Ok(Some(Value::Object(m))) => m,
        _ => return Err(INVALID),
    };
    let c = Ctx {
        shared,
        account,
        body,
    };
    match req.path.as_str() {
        "/api/v1/scraper/run" => run_scraper(&c).await,
        "/api/v1/task/run" => run_task(&c),
        "/api/v1/rerun" => rerun(&c),
        "/api/v1/run/detail" => detail(&c),
        "/api/v1/run/list" => list(&c),
        "/api/v1/run/result/list" => results(&c),
        "/api/v1/run/result/export" => export(&c),
        "/api/v1/run/last/log" => log(&c),
        "/api/v1/scraper/abort" => abort(&c),
        "/api/v1/account/info" => account_info(&c),
        _ => Err(NO_ROUTE),
    }
}

const OPS: &[&str] = &[
    "/api/v1/scraper/run",
    "/api/v1/task/run",
    "/api/v1/rerun",
    "/api/v1/run/detail",
    "/api/v1/run/list",
    "/api/v1/run/result/list",
    "/api/v1/run/result/export",
    "/api/v1/run/last/log",
    "/api/v1/scraper/abort",
    "/api/v1/account/info",
];

/// The caller's account key. An empty or blank `api-key` (what a client
/// form with an empty key field sends) or a Bearer without a token is no
/// key: the request is answered as one sent without any.
fn authenticate(shared: &Shared, req: &Req) -> Result<String, V1Error> {
    let api_key = req.header("api-key").map(str::trim);
    let key = if let Some(k) = api_key.filter(|k| !k.is_empty()) {
        k.to_string()
    } else if let Some(v) = req.header("authorization") {
        let v = v.trim();
        let (scheme, token) = v.split_once(' ').unwrap_or((v, ""));
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(BAD_KEY);
        }
        match token.trim() {
            "" => return Err(missing_key(shared)),
            k => k.to_string(),
        }
    } else {
        return Err(missing_key(shared));
    };
    if lock(&shared.state).account(&key).is_some() {
        Ok(key)
    } else {
        Err(BAD_KEY)
    }
}

/// The answer to a keyed operation without a key, by the dialect.
fn missing_key(shared: &Shared) -> V1Error {
    match shared.v1_dialect.missing_key_status {
        MissingKeyStatus::Unauthorized => BAD_KEY,
        MissingKeyStatus::BadRequest => V1Error {
            about_key: true,
            ..invalid(&["the api-key header is missing".into()])
        },
    }
}

struct Ctx<'a> {
    shared: &'a Arc<Shared>,
    account: String,
    body: Map<String, Value>,
}

impl Ctx<'_> {
    fn fields(&self) -> Fields<'_> {
        // V1 ignored fields it did not know.
        Fields::new(&self.body, None)
    }
    fn now(&self) -> i64 {
        self.shared.clock.now_ms()
    }
}

fn ok_or_invalid(errs: &[String]) -> Result<(), V1Error> {
    if errs.is_empty() {
        Ok(())
    } else {
        Err(invalid(errs))
    }
}

fn store(shared: &Shared, q: &Query, empty: EmptyStoreSearch) -> V1Result {
    let search = q.get("search").map(|s| s.trim().to_lowercase());
    let search = match search {
        Some(s) if !s.is_empty() => s,
        // The n8n V1 node's list dropdown: `search=` lists every worker.
        Some(_) if empty == EmptyStoreSearch::All => String::new(),
        _ => return Err(invalid(&["search is required".into()])),
    };
    let limit = match q.get("limit") {
        None => 10,
        Some(l) => match l.trim().parse::<u64>() {
            Ok(n) if n >= 1 => n,
            _ => return Err(INVALID),
        },
    };
    let st = lock(&shared.state);
    let items: Vec<Value> = st
        .workers
        .iter()
        .filter(|w| {
            w.title.to_lowercase().contains(&search)
                || w.slug.to_lowercase().contains(&search)
                || w.slash_path().to_lowercase().contains(&search)
        })
        .take(limit as usize)
        .map(|w| json!({"slug": w.slug, "title": w.title, "description": w.description}))
        .collect();
    Ok(json!({ "scraper": items }))
}

fn scraper(shared: &Shared, q: &Query) -> V1Result {
    let slug = q.get("slug").unwrap_or("").trim();
    if slug.is_empty() {
        return Err(INVALID);
    }
    let st = lock(&shared.state);
    let w = st
        .find_worker_v1(slug)
        .and_then(|i| st.worker(i))
        .ok_or(NO_SCRIPT)?;
    Ok(json!({
        "version": w.latest_version(),
        "parameters": {
            "system": {
                "cpus": w.system.cpus,
                "memory_bytes": w.system.memory,
                "max_total_charge": w.system.max_total_charge,
                "max_total_traffic": w.system.max_total_traffic,
                "execute_limit_time_seconds": w.system.execute_limit_time_seconds,
            },
            "custom": w.input_schema,
        },
        "readme": w.readme,
    }))
}

/// The 13-field V1 run record; `err_msg` always present.
fn record(run: &Run, w: &WorkerSpec, v: &RunView) -> Value {
    json!({
        "status": v.status.v1_code(),
        "err_msg": v.err_msg.clone().unwrap_or_default(),
        "slug": run.slug,
        "scraper_title": w.title,
        "scraper_slug": w.slug,
        "results": v.results,
        "usage": v.usage,
        "started_at": v.started_at,
        "finished_at": v.finished_at,
        "duration": v.duration,
        "origin": run.origin.as_str(),
        "traffic": v.traffic,
        "version": run.version,
    })
}

fn headers(w: &WorkerSpec) -> Vec<Value> {
    w.columns
        .iter()
        .map(|c| json!({"label": c.label, "key": c.key, "format": c.kind.as_str()}))
        .collect()
}

fn page(run: &Run, w: &WorkerSpec, now: i64, page_index: u64, page_size: u64) -> Value {
    let (from, to) = window(page_index, page_size);
    json!({
        "count": run.view(now).results,
        "headers": headers(w),
        "list": run.rows(w, now, from, to),
        "page_index": page_index,
        "page_size": page_size,
    })
}

/// A `callback_url` that, when present and non-empty, must be an http(s) URL.
fn callback(f: &mut Fields) -> Option<String> {
    match f.value("callback_url") {
        Some(Value::String(s)) if s.is_empty() => None,
        Some(_) => f.url("callback_url"),
        None => None,
    }
}

fn run_slug(f: &mut Fields) -> Option<String> {
    f.req_str("run_slug")
}

async fn run_scraper(c: &Ctx<'_>) -> V1Result {
    let mut f = c.fields();
    let slug = f.req_str("scraper_slug");
    let version = f.str("version").filter(|v| !v.is_empty());
    let is_async = f.bool("is_async").unwrap_or(true);
    let callback_url = callback(&mut f);
    let page_index = f.int("page_index", 1, i64::MAX).unwrap_or(1) as u64;
    let page_size = f.int("page_size", 1, MAX_LIST_PAGE).unwrap_or(10) as u64;
    let input = f.value("input").cloned();
    if input.is_none() {
        f.errors.push("input is required".into());
    }
    let mut errs = f.errors;
    let new = {
        let st = lock(&c.shared.state);
        let worker = match &slug {
            Some(s) => st.find_worker_v1(s).ok_or(NO_SCRIPT)?,
            None => return Err(INVALID),
        };
        if let (Some(input), Some(w)) = (&input, st.worker(worker)) {
            check_input(input, w, ZeroLimits::MeanDefault, &mut errs);
        }
        ok_or_invalid(&errs)?;
        let version = st
            .resolve_version(worker, version.as_deref())
            .ok_or(NO_VERSION)?;
        NewRun {
            account: c.account.clone(),
            worker,
            version,
            input: input.unwrap_or(Value::Null),
            origin: Origin::V1,
            callback_url,
        }
    };
    let slug = lock(&c.shared.state).create_run(new, c.now());
    c.shared.clock.bump();
    if is_async {
        return Ok(json!({ "run_slug": slug }));
    }
    wait_done(c.shared, &c.account, &slug).await;
    let (run, w) = lock(&c.shared.state)
        .snapshot(&c.account, &slug)
        .ok_or(NO_RUN)?;
    let (run, w) = (&run, &w);
    let now = c.now();
    let v = run.view(now);
    let done = v.status.is_completed();
    Ok(json!({
        "run_slug": slug,
        "run_status": if done { "completed" } else { "running" },
        "error_message": v.err_msg.clone().unwrap_or_default(),
        "result_message": "",
        "execution_start_timestamp": v.started_at * 1000,
        "execution_end_timestamp": v.finished_at * 1000,
        "running_duration": if done { v.duration } else { (now / 1000 - v.started_at).max(0) },
        "results": page(run, w, now, page_index, page_size),
    }))
}

fn run_task(c: &Ctx) -> V1Result {
    let mut f = c.fields();
    let task = f.req_str("task_slug");
    let callback_url = f.req_str("callback_url").and_then(|_| callback(&mut f));
    ok_or_invalid(&f.errors)?;
    let (Some(task), Some(callback_url)) = (task, callback_url) else {
        return Err(INVALID);
    };
    let mut st = lock(&c.shared.state);
    let t = st.task(&c.account, &task).cloned().ok_or(NO_TASK)?;
    let version = st
        .resolve_version(t.worker, Some(&t.version))
        .ok_or(NO_VERSION)?;
    if let Some(tm) = st.task_mut(&c.account, &task) {
        tm.run_times += 1;
    }
    let slug = st.create_run(
        NewRun {
            account: c.account.clone(),
            worker: t.worker,
            version,
            input: t.input,
            origin: Origin::V1,
            callback_url: Some(callback_url),
        },
        c.now(),
    );
    drop(st);
    c.shared.clock.bump();
    Ok(json!({ "run_slug": slug }))
}

fn rerun(c: &Ctx) -> V1Result {
    let mut f = c.fields();
    let run = run_slug(&mut f);
    let callback_url = f.req_str("callback_url").and_then(|_| callback(&mut f));
    ok_or_invalid(&f.errors)?;
    let (Some(run), Some(callback_url)) = (run, callback_url) else {
        return Err(INVALID);
    };
    let mut st = lock(&c.shared.state);
    let orig = st.run(&c.account, &run).ok_or(NO_RUN)?;
    let new = NewRun {
        account: c.account.clone(),
        worker: orig.worker,
        version: orig.version.clone(),
        input: orig.input.clone(),
        origin: Origin::V1,
        callback_url: Some(callback_url),
    };
    let slug = st.create_run(new, c.now());
    drop(st);
    c.shared.clock.bump();
    Ok(json!({ "run_slug": slug }))
}

/// Run of the body's `run_slug` with its worker (copies, used outside the lock),
/// or the V1 error.
fn with_run<T>(
    c: &Ctx,
    f: impl FnOnce(&Run, &WorkerSpec) -> Result<T, V1Error>,
) -> Result<T, V1Error> {
    let mut fields = c.fields();
    let slug = run_slug(&mut fields).ok_or(INVALID)?;
    ok_or_invalid(&fields.errors)?;
    let (run, w) = lock(&c.shared.state)
        .snapshot(&c.account, &slug)
        .ok_or(NO_RUN)?;
    f(&run, &w)
}

fn detail(c: &Ctx) -> V1Result {
    let now = c.now();
    with_run(c, |run, w| Ok(record(run, w, &run.view(now))))
}

fn list(c: &Ctx) -> V1Result {
    let mut f = c.fields();
    let page_index = f.int("page_index", 1, i64::MAX).unwrap_or(1) as u64;
    let page_size = f.int("page_size", 1, MAX_LIST_PAGE).unwrap_or(20) as u64;
    let status = f.int("status", 0, 5).unwrap_or(0);
    let scraper = f.str("scraper_slug").unwrap_or_default();
    ok_or_invalid(&f.errors)?;
    let st = lock(&c.shared.state);
    let worker = if scraper.is_empty() {
        None
    } else {
        match st.find_worker_v1(&scraper) {
            Some(w) => Some(w),
            None => return Ok(json!({"count": 0, "list": []})),
        }
    };
    let now = c.now();
    let matching: Vec<(&Run, RunView)> = st
        .runs_of(&c.account, worker)
        .map(|r| (r, r.view(now)))
        .filter(|(_, v)| status == 0 || v.status.v1_code() == status)
        .collect();
    let (from, to) = window(page_index, page_size);
    let list: Vec<Value> = matching
        .iter()
        .skip(from as usize)
        .take((to - from) as usize)
        .filter_map(|(r, v)| st.worker(r.worker).map(|w| record(r, w, v)))
        .collect();
    Ok(json!({"count": matching.len(), "list": list}))
}

fn results(c: &Ctx) -> V1Result {
    let mut f = c.fields();
    let page_index = f.int("page_index", 1, i64::MAX).unwrap_or(1) as u64;
    let page_size = f.int("page_size", 1, MAX_RESULT_PAGE).unwrap_or(10) as u64;
    ok_or_invalid(&f.errors)?;
    let now = c.now();
    with_run(c, |run, w| Ok(page(run, w, now, page_index, page_size)))
}

fn export(c: &Ctx) -> V1Result {
    let mut f = c.fields();
    let format = f.req_str("format");
    let keys: Vec<String> = match f.value("filter_keys") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => {
            let mut out = Vec::new();
            for k in a {
                match k.as_str() {
                    Some(s) => out.push(s.to_string()),
                    None => return Err(INVALID),
                }
            }
            out
        }
        Some(_) => return Err(INVALID),
    };
    ok_or_invalid(&f.errors)?;
    let format = match format.as_deref() {
        Some("csv") => "csv",
        Some("json") => "json",
        _ => return Err(INVALID),
    };
    let now = c.now();
    let (columns, rows) = with_run(c, |run, w| {
        if keys.iter().any(|k| !w.columns.iter().any(|c| &c.key == k)) {
            return Err(INVALID);
        }
        let columns: Vec<_> = w
            .columns
            .iter()
            .filter(|col| keys.is_empty() || keys.contains(&col.key))
            .cloned()
            .collect();
        Ok((columns, run.rows(w, now, 0, run.view(now).results)))
    })?;
    let url = c
        .shared
        .exports
        .create(c.shared.v2_addr, format, &columns, &rows);
    Ok(json!({ "download_url": url }))
}

fn log(c: &Ctx) -> V1Result {
    let now = c.now();
    with_run(c, |run, _| {
        let list: Vec<Value> = run.logs(now).iter().map(|l| l.to_object()).collect();
        Ok(json!({
            "all_logs_url": logs_url(c.shared, &run.slug),
            "list": list,
            "result_count": run.view(now).results,
        }))
    })
}

fn abort(c: &Ctx) -> V1Result {
    let mut f = c.fields();
    let slug = run_slug(&mut f).ok_or(INVALID)?;
    ok_or_invalid(&f.errors)?;
    let now = c.now();
    let r = lock(&c.shared.state).abort(&c.account, &slug, now);
    match r {
        Ok(()) => {
            c.shared.clock.bump();
            Ok(Value::Null)
        }
        Err(AbortError::NotFound) => Err(NO_RUN),
        Err(AbortError::Completed) => Err(ABORT_FAILED),
    }
}

fn account_info(c: &Ctx) -> V1Result {
    let st = lock(&c.shared.state);
    let a = st.account(&c.account).ok_or(BAD_KEY)?;
    Ok(json!({
        "balance": a.balance,
        "traffic": a.traffic,
        "traffic_expiration_at": a.traffic_expiration_at,
    }))
}
