//! `/__sandbox/*` on the V2 listener: what tests use to observe and steer the sandbox
//! (not V2 operations, never recorded, never faulted).
//!
//! * `GET|POST|DELETE /__sandbox/faults` — list, replace, clear fault rules
//! * `GET|DELETE /__sandbox/requests` — last 1000 V2 requests (secrets redacted), clear
//! * `POST /__sandbox/advance` `{"seconds": N}` — move the simulated clock forward
//! * `GET /__sandbox/clock` — simulated now (ms)
//! * `GET /__sandbox/healthz`
//! * `GET /__sandbox/exports/{name}` — export files (`download_url`)
//! * `GET /__sandbox/logs/{runSlug}.txt` — full log files (`all_logs_url`)

use std::sync::Arc;

use http::{Method, Response, StatusCode};
use serde_json::{json, Map, Value};

use super::checks::{parse_body, Query};
use super::faults::FaultRule;
use super::serve::{bytes_response, json, Body, Req};
use super::v2::credential;
use super::{lock, Shared};

/// Requests kept for `/__sandbox/requests`.
const KEEP_REQUESTS: usize = 1000;

fn problem(status: StatusCode, msg: &str) -> Response<Body> {
    json(status, &json!({ "error": msg }))
}

pub(crate) async fn handle(shared: &Arc<Shared>, req: Req) -> Response<Body> {
    let path = req.path.trim_start_matches("/__sandbox");
    match (&req.method, path) {
        (&Method::GET, "/healthz") => json(StatusCode::OK, &json!({"status": "ok"})),
        (&Method::GET, "/clock") => json(StatusCode::OK, &json!({"now_ms": shared.clock.now_ms()})),
        (&Method::POST, "/advance") => advance(shared, &req),
        (&Method::GET, "/faults") => json(StatusCode::OK, &json!(shared.faults.list())),
        (&Method::DELETE, "/faults") => {
            shared.faults.replace(Vec::new());
            json(StatusCode::OK, &json!([]))
        }
        (&Method::POST, "/faults") => set_faults(shared, &req),
        (&Method::GET, "/requests") => {
            let list: Vec<Value> = lock(&shared.requests).iter().cloned().collect();
            json(StatusCode::OK, &Value::Array(list))
        }
        (&Method::DELETE, "/requests") => {
            lock(&shared.requests).clear();
            json(StatusCode::OK, &json!([]))
        }
        (&Method::GET, p) if p.starts_with("/exports/") => export_file(shared, p),
        (&Method::GET, p) if p.starts_with("/logs/") => log_file(shared, p),
        _ => problem(StatusCode::NOT_FOUND, "unknown sandbox endpoint"),
    }
}

fn export_file(shared: &Shared, path: &str) -> Response<Body> {
    let found = path
        .strip_prefix("/exports/")
        .and_then(|name| shared.exports.get(name));
    match found {
        Some((ct, body)) => bytes_response(StatusCode::OK, ct, body),
        None => problem(StatusCode::NOT_FOUND, "no such export"),
    }
}

/// The full log of a run as text (what `all_logs_url` points at).
fn log_file(shared: &Shared, path: &str) -> Response<Body> {
    let slug = path
        .strip_prefix("/logs/")
        .and_then(|p| p.strip_suffix(".txt"))
        .unwrap_or("");
    let now = shared.clock.now_ms();
    let text = lock(&shared.state).run_any(slug).map(|r| {
        r.logs(now)
            .iter()
            .map(|l| l.to_text() + "\n")
            .collect::<String>()
    });
    match text {
        Some(t) => bytes_response(StatusCode::OK, "text/plain; charset=utf-8", t),
        None => problem(StatusCode::NOT_FOUND, "no such run"),
    }
}

fn advance(shared: &Arc<Shared>, req: &Req) -> Response<Body> {
    let seconds = match parse_body(&req.body) {
        Ok(Some(v)) => v.get("seconds").and_then(Value::as_f64),
        _ => None,
    };
    match seconds {
        Some(s) if s.is_finite() && s >= 0.0 => {
            shared.clock.advance(s);
            json(StatusCode::OK, &json!({"now_ms": shared.clock.now_ms()}))
        }
        _ => problem(
            StatusCode::BAD_REQUEST,
            "body must be {\"seconds\": N} with N >= 0",
        ),
    }
}

fn set_faults(shared: &Arc<Shared>, req: &Req) -> Response<Body> {
    let rules: Vec<FaultRule> = match serde_json::from_slice(&req.body) {
        Ok(r) => r,
        Err(e) => {
            return problem(
                StatusCode::BAD_REQUEST,
                &format!("expected an array of fault rules: {e}"),
            )
        }
    };
    let problems: Vec<String> = rules.iter().flat_map(FaultRule::problems).collect();
    if !problems.is_empty() {
        return problem(StatusCode::BAD_REQUEST, &problems.join("; "));
    }
    shared.faults.replace(rules);
    json(StatusCode::OK, &json!(shared.faults.list()))
}

/// Remember a V2 request, with credentials redacted.
pub(crate) fn record(shared: &Shared, req: &Req, operation: Option<&str>) {
    let query = Query::parse(&req.query);
    let auth = credential(req, &query).map(|(kind, _)| kind);
    let mut headers = Map::new();
    for (name, value) in &req.headers {
        let n = name.as_str().to_ascii_lowercase();
        let v = if n == "authorization" || n == "api-key" {
            "<redacted>".to_string()
        } else {
            String::from_utf8_lossy(value.as_bytes()).into_owned()
        };
        headers.insert(n, Value::String(v));
    }
    let body = match parse_body(&req.body) {
        Ok(Some(v)) => v,
        _ => Value::Null,
    };
    let entry = json!({
        "method": req.method.as_str(),
        "path": req.path,
        "query": redact_token(&req.query),
        "headers": headers,
        "auth": auth,
        "body": body,
        "operation": operation,
    });
    let mut log = lock(&shared.requests);
    log.push_back(entry);
    while log.len() > KEEP_REQUESTS {
        log.pop_front();
    }
}

/// The raw query with the value of `token=` replaced, so keys never leave the sandbox.
fn redact_token(raw: &str) -> String {
    raw.split('&')
        .map(|pair| {
            if pair.starts_with("token=") {
                "token=<redacted>".to_string()
            } else {
                pair.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::redact_token;

    #[test]
    fn token_is_redacted() {
        assert_eq!(
            redact_token("limit=5&token=abc"),
            "limit=5&token=<redacted>"
        );
        assert_eq!(redact_token(""), "");
    }
}
