//! `v1compat replay`, off the request path: sends recorded V1 traffic (a
//! capture, or a plain JSONL list of V1 requests) both to the legacy V1
//! service and through the translation — a running gateway (`--gateway`) or
//! an in-process one against a V2 upstream (`--upstream`) — and writes a
//! capture of what it saw, for `report`.
//!
//! Pacing: the recorded pace (`at_ms` of each line) divided by `speed`
//! (0 = no pacing), never faster than `max_rate`, with at most
//! `concurrency` requests in flight. Operations that start, rerun or abort
//! runs are never replayed.
//!
//! A plain request line: `{"method": "POST", "path": "/api/v1/run/detail",
//! "body": {"run_slug": "…"}}`, or `{"operation": "run_detail", "body": …}`;
//! optional `query`, `headers`, `at_ms`.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::Semaphore;

use super::capture::{now_ms, CaptureWriter, CapturedRequest, Record, Side, REDACTED};
use super::legacy::{LegacyClient, V1Call};
use super::{captured_request, side_of, LEGACY, TRANSLATION};
use crate::pipeline::{Pipeline, RawV1Request};
use crate::upstream::UpstreamFailure;
use crate::v1::route::{self, Operation};

/// Where the translated answers come from.
#[derive(Clone)]
pub enum TranslatedSide {
    /// A running v1compat gateway (requests carry the loop guard, so it does
    /// not mirror them again).
    Gateway(url::Url),
    /// The translation in this process, against a V2 upstream: the same
    /// pipeline the live gateway answers with.
    InProcess(Arc<Pipeline>),
}

/// Everything `replay` needs.
#[derive(Clone)]
pub struct ReplayOptions {
    pub input: PathBuf,
    pub out: PathBuf,
    pub legacy: url::Url,
    pub translated: TranslatedSide,
    /// Multiplier of the recorded pace; 0 sends as fast as allowed.
    pub speed: f64,
    /// Requests per second at most.
    pub max_rate: Option<f64>,
    pub concurrency: usize,
    /// Sent as `api-key` where the line's key is redacted or absent.
    pub api_key: Option<String>,
    /// Call legacy twice per request (noise baseline).
    pub baseline: bool,
    pub timeout: Duration,
    pub max_body_bytes: usize,
    pub progress: bool,
    /// Proxy variables for both sides' connections.
    pub proxy: crate::upstream::ProxyEnv,
}

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayStats {
    /// Lines read.
    pub lines: u64,
    /// Requests sent to both sides.
    pub sent: u64,
    /// Requests where a side gave no answer.
    pub failed: u64,
    /// Lines not replayed: unreadable, unknown route, or an operation that
    /// starts, reruns or aborts runs.
    pub skipped: u64,
}

/// One line of input, either form.
#[derive(Deserialize)]
struct Line {
    #[serde(default)]
    request: Option<CapturedRequest>,
    #[serde(default)]
    at_ms: Option<i64>,
    #[serde(flatten)]
    plain: CapturedRequest,
}

/// A request ready to replay.
struct Planned {
    op: Operation,
    call: V1Call,
    at_ms: Option<i64>,
}

fn plan(line: &str, api_key: Option<&str>) -> Result<Planned, String> {
    let line: Line = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let req = line.request.unwrap_or(line.plain);
    let (op, method, path) = match (&req.path, &req.operation) {
        (Some(path), _) => {
            let method = req.method.as_deref().unwrap_or("").to_ascii_uppercase();
            let method = match Method::from_bytes(method.as_bytes()) {
                Ok(m) if !method.is_empty() => m,
                _ => route::Operation::ALL
                    .into_iter()
                    .map(|o| o.v1_endpoint())
                    .find(|(_, p)| p == path)
                    .map(|(m, _)| m)
                    .ok_or_else(|| format!("unknown V1 path {path}"))?,
            };
            let op =
                route::route(&method, path).ok_or_else(|| format!("no V1 operation at {path}"))?;
            (op, method, path.clone())
        }
        (None, Some(name)) => {
            let op = Operation::ALL
                .into_iter()
                .find(|o| o.name() == name)
                .ok_or_else(|| format!("unknown operation {name}"))?;
            let (m, p) = op.v1_endpoint();
            (op, m, p.to_owned())
        }
        (None, None) => return Err("neither path nor operation".into()),
    };
    let mut headers = HeaderMap::new();
    for (name, value) in &req.headers {
        let usable = value != REDACTED && !value.is_empty();
        if let (true, Ok(n), Ok(mut v)) = (
            usable,
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            v.set_sensitive(super::capture::SECRET_HEADERS.contains(&n.as_str()));
            headers.insert(n, v);
        }
    }
    let has_key = headers.contains_key("api-key") || headers.contains_key("authorization");
    if let (false, Some(key)) = (has_key, api_key) {
        let mut v = HeaderValue::from_str(key).map_err(|_| "unusable --api-key".to_owned())?;
        v.set_sensitive(true);
        headers.insert("api-key", v);
    }
    let body = match &req.body {
        Value::Null => Bytes::new(),
        Value::String(s) => Bytes::from(s.clone()),
        v => Bytes::from(serde_json::to_vec(v).map_err(|e| e.to_string())?),
    };
    if !body.is_empty() && !headers.contains_key("content-type") {
        headers.insert("content-type", HeaderValue::from_static("application/json"));
    }
    Ok(Planned {
        op,
        call: V1Call {
            method,
            path,
            query: req.query.clone().filter(|q| !q.is_empty()),
            headers,
            body,
        },
        at_ms: line.at_ms,
    })
}

/// Replays `opts.input` and writes `opts.out`.
pub async fn replay(opts: ReplayOptions) -> Result<ReplayStats, String> {
    let open = || {
        std::fs::File::open(&opts.input)
            .map(std::io::BufReader::new)
            .map_err(|e| format!("{}: {e}", opts.input.display()))
    };
    // A first pass only counts lines, for the progress bar; the second one
    // streams, so a large capture is never held in memory.
    let total = open()?
        .lines()
        .map_while(Result::ok)
        .filter(|l| !l.trim().is_empty())
        .count();

    let legacy = LegacyClient::new(&opts.legacy, &opts.proxy)?;
    let gateway = match &opts.translated {
        TranslatedSide::Gateway(url) => Some(LegacyClient::new(url, &opts.proxy)?),
        TranslatedSide::InProcess(_) => None,
    };
    let writer = CaptureWriter::start(&opts.out, false)
        .map_err(|e| format!("{}: {e}", opts.out.display()))?;
    let writer = Arc::new(writer);
    let bar = if opts.progress {
        indicatif::ProgressBar::new(total as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} ({rate}, eta {eta}) {msg}",
        )
        .map(|style| {
            // Whole requests per second: indicatif's own `per_sec` prints
            // four decimals.
            style.with_key(
                "rate",
                |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{:.0}/s", state.per_sec());
                },
            )
        })
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );

    let mut stats = ReplayStats::default();
    let slots = Arc::new(Semaphore::new(opts.concurrency.max(1)));
    let mut first_at = None;
    let mut sent = 0u64;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (n, line) in open()?.lines().enumerate() {
        let line = line.map_err(|e| format!("{}: {e}", opts.input.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        stats.lines += 1;
        let p = match plan(&line, opts.api_key.as_deref()) {
            Ok(p) if p.op.is_read_only() => p,
            Ok(p) => {
                stats.skipped += 1;
                bar.inc(1);
                tracing::warn!(
                    line = n + 1,
                    operation = p.op.name(),
                    "not replayed: the operation changes runs"
                );
                continue;
            }
            Err(e) => {
                stats.skipped += 1;
                bar.inc(1);
                tracing::warn!(line = n + 1, error = %e, "not replayed: unreadable line");
                continue;
            }
        };
        // Recorded pace (from the first timestamp seen), scaled; then the rate cap.
        let mut due = Duration::ZERO;
        if let (true, Some(at)) = (opts.speed > 0.0, p.at_ms) {
            let first = *first_at.get_or_insert(at);
            due = Duration::from_secs_f64((at - first).max(0) as f64 / 1000.0 / opts.speed);
        }
        if let Some(rate) = opts.max_rate.filter(|r| *r > 0.0) {
            due = due.max(Duration::from_secs_f64(sent as f64 / rate));
        }
        sent += 1;
        tokio::time::sleep_until((started + due).into()).await;
        let permit = slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| e.to_string())?;
        let (legacy, gateway, writer, task_bar, opts2) = (
            legacy.clone(),
            gateway.clone(),
            writer.clone(),
            bar.clone(),
            opts.clone(),
        );
        tasks.spawn(async move {
            let _permit = permit;
            let ok = one(&opts2, &legacy, gateway.as_ref(), &writer, p).await;
            task_bar.inc(1);
            ok
        });
        // Collect finished tasks as we go so the set stays small.
        while let Some(done) = tasks.try_join_next() {
            count(&mut stats, done, &bar);
        }
    }
    while let Some(done) = tasks.join_next().await {
        count(&mut stats, done, &bar);
    }
    // Cleared rather than left drawn: the caller prints the totals on a line
    // of its own, and a bar left on screen ran into that summary.
    bar.finish_and_clear();
    let writer = Arc::try_unwrap(writer).map_err(|_| "capture writer still in use".to_owned())?;
    writer
        .finish()
        .await
        .map_err(|e| format!("{}: {e}", opts.out.display()))?;
    Ok(stats)
}

fn count(
    stats: &mut ReplayStats,
    done: Result<bool, tokio::task::JoinError>,
    bar: &indicatif::ProgressBar,
) {
    stats.sent += 1;
    if !matches!(done, Ok(true)) {
        stats.failed += 1;
        bar.set_message(format!("{} failed", stats.failed));
    }
}

/// Sends one request to every side and writes its record; true if both
/// sides answered.
async fn one(
    opts: &ReplayOptions,
    legacy: &LegacyClient,
    gateway: Option<&LegacyClient>,
    writer: &CaptureWriter,
    p: Planned,
) -> bool {
    let id = ulid::Ulid::new().to_string();
    let at = now_ms();
    let (timeout, limit) = (opts.timeout, opts.max_body_bytes);
    let mut call = p.call;
    if let Ok(v) = HeaderValue::from_str(&id) {
        call.headers.insert("x-request-id", v);
    }
    let send_legacy = || async {
        let at = now_ms();
        let r = legacy.send(&call, timeout, limit).await;
        side_of(at, r.map(|r| (r.status, r.body, r.latency)), LEGACY)
    };
    let translated = async {
        let at = now_ms();
        let result: Result<(StatusCode, Bytes, Duration), UpstreamFailure> =
            match (&opts.translated, gateway) {
                (_, Some(gw)) => gw
                    .send(&call, timeout, limit)
                    .await
                    .map(|r| (r.status, r.body, r.latency)),
                (TranslatedSide::InProcess(pipeline), None) => {
                    let started = Instant::now();
                    let raw = RawV1Request::with_bytes(
                        call.method.clone(),
                        call.path.clone(),
                        call.query.clone(),
                        call.headers.clone(),
                        call.body.clone(),
                    );
                    match tokio::time::timeout(timeout, pipeline.answer(raw)).await {
                        Ok(answer) => {
                            Ok((answer.status, answer.body.to_bytes(), started.elapsed()))
                        }
                        Err(_) => Err(UpstreamFailure::Timeout(timeout)),
                    }
                }
                (TranslatedSide::Gateway(_), None) => {
                    Err(UpstreamFailure::Unreachable("no gateway client".into()))
                }
            };
        let who = match opts.translated {
            TranslatedSide::Gateway(_) => "gateway",
            TranslatedSide::InProcess(_) => TRANSLATION,
        };
        side_of(at, result, who)
    };
    let baseline = async {
        if opts.baseline {
            Some(send_legacy().await)
        } else {
            None
        }
    };
    let (l, t, b): (Side, Side, Option<Side>) = tokio::join!(send_legacy(), translated, baseline);
    let ok = l.status.is_some() && t.status.is_some();
    let mut request = captured_request(&call);
    // The replay's own id header is not part of the recorded request.
    request.headers = request
        .headers
        .into_iter()
        .filter(|(k, _)| k != "x-request-id")
        .collect::<BTreeMap<_, _>>();
    writer
        .write(Record {
            id,
            operation: p.op.name().to_owned(),
            at_ms: at,
            primary: "replay".into(),
            request,
            legacy: Some(l),
            translated: Some(t),
            baseline: b,
        })
        .await;
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_and_capture_lines_plan_the_same_call() {
        let plain = r#"{"path": "/api/v1/run/detail", "body": {"run_slug": "r1"}}"#;
        let by_op = r#"{"operation": "run_detail", "body": {"run_slug": "r1"}}"#;
        let captured = r#"{"id":"1","operation":"run_detail","at_ms":5,"primary":"translated","request":{"method":"POST","path":"/api/v1/run/detail","headers":{"api-key":"<redacted>"},"body":{"run_slug":"r1"}}}"#;
        for line in [plain, by_op, captured] {
            let p = plan(line, Some("k-123")).unwrap();
            assert_eq!(p.op, Operation::RunDetail);
            assert_eq!(p.call.method, Method::POST);
            assert_eq!(p.call.headers["api-key"], "k-123");
            assert_eq!(&p.call.body[..], br#"{"run_slug":"r1"}"#);
        }
        assert_eq!(plan(captured, None).unwrap().at_ms, Some(5));
    }

    #[test]
    fn get_operations_keep_their_query_and_unknown_paths_fail() {
        let p = plan(
            r#"{"path": "/api/store", "query": "search=maps&limit=5"}"#,
            None,
        )
        .unwrap();
        assert_eq!(p.op, Operation::StoreSearch);
        assert_eq!(p.call.method, Method::GET);
        assert_eq!(p.call.query.as_deref(), Some("search=maps&limit=5"));
        assert!(!p.call.headers.contains_key("api-key"));
        assert!(plan(r#"{"path": "/api/nope"}"#, None).is_err());
        assert!(plan("not json", None).is_err());
    }

    #[test]
    fn the_example_request_list_plans() {
        let text = include_str!("../../config/shadow-requests.example.jsonl");
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let p = plan(line, Some("k")).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert!(p.op.is_read_only(), "{line}");
        }
    }

    #[test]
    fn a_key_sent_in_clear_is_kept() {
        let p = plan(
            r#"{"operation": "account_info", "headers": {"api-key": "own"}}"#,
            Some("other"),
        )
        .unwrap();
        assert_eq!(p.call.headers["api-key"], "own");
    }
}
