//! Run callbacks: a background task that notices status changes of runs that have a
//! `callback_url` and POSTs a payload for each, fire-and-forget with a short timeout.
//! V2-started runs get the V2 payload of facts §5; V1-started runs get the V1 async
//! notification body (`run_slug`, numeric `status`, `results`, `usage`).
//!
//! Statuses are derived lazily from the clock, so the task re-checks on a short tick
//! and whenever the clock jumps or a run changes; if several changes happened between
//! two checks, only the current status is reported (the terminal one is never skipped).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

use super::lifecycle::Origin;
use super::{lock, Shared};

/// How often statuses are re-checked in real time.
const TICK: Duration = Duration::from_millis(20);
/// Deadline of one callback delivery.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) async fn run(shared: Arc<Shared>) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut changed = shared.clock.subscribe();
    let mut stop = shared.stop.clone();
    loop {
        changed.borrow_and_update();
        for (url, payload) in due(&shared) {
            let client = client.clone();
            tokio::spawn(async move {
                let body = serde_json::to_vec(&payload).unwrap_or_default();
                let Ok(req) = http::Request::post(url.as_str())
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Full::new(Bytes::from(body)))
                else {
                    return;
                };
                match tokio::time::timeout(DELIVERY_TIMEOUT, client.request(req)).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => tracing::debug!(%url, error = %e, "callback delivery failed"),
                    Err(_) => tracing::debug!(%url, "callback delivery timed out"),
                }
            });
        }
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            r = changed.changed() => if r.is_err() { break },
            _ = stop.wait_for(|s| *s) => break,
        }
    }
}

/// Payloads to send now (and mark them as sent).
fn due(shared: &Shared) -> Vec<(String, Value)> {
    let now = shared.clock.now_ms();
    let mut st = lock(&shared.state);
    let mut out = Vec::new();
    st.for_pending_callbacks(|run| {
        let Some(url) = run.callback_url.clone() else {
            return false;
        };
        let v = run.view(now);
        if v.status == run.notified {
            return true;
        }
        run.notified = v.status;
        let payload = match run.origin {
            Origin::V2 => json!({
                "run_slug": run.slug,
                "run_status": v.status.as_str(),
                "error_message": v.err_msg.clone().unwrap_or_default(),
                "execution_start_timestamp": v.started_at,
                "execution_end_timestamp": v.finished_at,
                "running_duration": v.duration,
                "result_count": v.results,
                "result_message": if v.status.is_completed() { "done" } else { "" },
            }),
            Origin::V1 => json!({
                "run_slug": run.slug,
                "status": v.status.v1_code(),
                "results": v.results,
                "usage": v.usage,
            }),
        };
        out.push((url, payload));
        !v.status.is_completed()
    });
    out
}
