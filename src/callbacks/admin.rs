//! Operator endpoints for the relay, on the admin listener (never public):
//!
//! * `GET  /callbacks/events?state=pending|dead|done&since=T&limit=N` — events
//!   in one state, `pending` when none is given, each with the `webhook-id`
//!   its deliveries carry and the host they go to (not the token: the
//!   target's path and query and the client's key stay sealed)
//! * `GET  /callbacks/stats` — queue depth, dead count, oldest pending age
//! * `POST /callbacks/events/{id}/redeliver` — one event, fresh schedule
//! * `POST /callbacks/redeliver?since=T[&limit=N]` — every dead event received
//!   since T (RFC 3339 or Unix seconds), at most 10,000 per call
//!
//! Answers are JSON; bad parameters get 400 naming the parameter.

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};
use http_body_util::Full;
use serde_json::{json, Value};

use super::event::{Event, State};
use super::Relay;

/// Most events one list or redelivery call touches.
const MAX_BATCH: usize = 10_000;

fn reply(status: StatusCode, v: Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn bad(param: &str, problem: &str) -> Response<Full<Bytes>> {
    reply(
        StatusCode::BAD_REQUEST,
        json!({"error": format!("{param}: {problem}")}),
    )
}

/// One event as the operator sees it: the `webhook-id` its deliveries
/// carry and the host they go to (read from the sealed token; the rest of
/// the URL, its path and query, and the client's key are never shown).
fn view(relay: &Relay, e: &Event) -> Value {
    let host = relay
        .sealer
        .open_stored(&e.token)
        .and_then(|claims| url::Url::parse(&claims.url).ok())
        .and_then(|url| url.host_str().map(str::to_owned));
    json!({
        "id": e.id,
        "webhook_id": super::event::event_id(&e.run_slug, &e.status),
        "target_host": host,
        "run_slug": e.run_slug,
        "status": e.status,
        "state": e.state.as_str(),
        "attempts": e.attempts,
        "received_ms": e.received_ms,
        "next_attempt_ms": (e.state == State::Pending).then_some(e.next_ms),
        "last_error": e.last_error,
        "delivered_status": e.delivered_status,
    })
}

fn param<'q>(query: Option<&'q str>, name: &str) -> Option<std::borrow::Cow<'q, str>> {
    url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// A time parameter: RFC 3339 or Unix seconds → ms.
fn time_ms(v: &str) -> Option<u64> {
    if let Ok(secs) = v.parse::<u64>() {
        return secs.checked_mul(1000);
    }
    humantime::parse_rfc3339_weak(v)
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis() as u64)
}

impl Relay {
    /// Answers an admin request under `/callbacks/`, or `None` for other paths.
    pub async fn admin(
        &self,
        method: &Method,
        path: &str,
        query: Option<&str>,
    ) -> Option<Response<Full<Bytes>>> {
        let rest = path.strip_prefix("/callbacks/")?;
        let now = self.clock.now_ms();
        let limit = match param(query, "limit").map(|v| v.parse::<usize>()) {
            None => 100,
            Some(Ok(n)) if (1..=MAX_BATCH).contains(&n) => n,
            Some(_) => return Some(bad("limit", "must be 1..=10000")),
        };
        let since = match param(query, "since") {
            None => None,
            Some(v) => match time_ms(&v) {
                Some(t) => Some(t),
                None => return Some(bad("since", "must be RFC 3339 or Unix seconds")),
            },
        };
        let failed = |e: super::store::StoreError| {
            reply(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": e.to_string()}),
            )
        };
        Some(match (method, rest) {
            (&Method::GET, "stats") => match self.store.stats().await {
                Ok(s) => reply(
                    StatusCode::OK,
                    json!({
                        "pending": s.pending,
                        "dead": s.dead,
                        "oldest_pending_age_secs": s.oldest_pending_ms.map(|t| now.saturating_sub(t) / 1000),
                    }),
                ),
                Err(e) => failed(e),
            },
            (&Method::GET, "events") => {
                let state = match param(query, "state").as_deref().map(State::parse) {
                    None => State::Pending,
                    Some(Some(s)) => s,
                    Some(None) => return Some(bad("state", "must be pending, dead or done")),
                };
                match self.store.list(state, since.unwrap_or(0), limit).await {
                    Ok(events) => reply(
                        StatusCode::OK,
                        json!({"events": events.iter().map(|e| view(self, e)).collect::<Vec<_>>()}),
                    ),
                    Err(e) => failed(e),
                }
            }
            (&Method::POST, "redeliver") => {
                let Some(since) = since else {
                    return Some(bad("since", "is required"));
                };
                let limit = if param(query, "limit").is_some() {
                    limit
                } else {
                    MAX_BATCH
                };
                match self.store.redeliver_dead_since(since, now, limit).await {
                    Ok(n) => {
                        self.deliverer.wake.notify_one();
                        reply(StatusCode::OK, json!({"redelivering": n}))
                    }
                    Err(e) => failed(e),
                }
            }
            (&Method::POST, r) => {
                let Some(id) = r
                    .strip_prefix("events/")
                    .and_then(|r| r.strip_suffix("/redeliver"))
                else {
                    return Some(reply(StatusCode::NOT_FOUND, json!({"error": "not found"})));
                };
                match self.store.redeliver(id, now).await {
                    Ok(true) => {
                        self.deliverer.wake.notify_one();
                        reply(StatusCode::OK, json!({"redelivering": 1, "id": id}))
                    }
                    Ok(false) => reply(
                        StatusCode::NOT_FOUND,
                        json!({"error": "no such event, or it is still pending"}),
                    ),
                    Err(e) => failed(e),
                }
            }
            _ => reply(StatusCode::NOT_FOUND, json!({"error": "not found"})),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(time_ms("1700000000"), Some(1_700_000_000_000));
        assert_eq!(time_ms("2023-11-14T22:13:20Z"), Some(1_700_000_000_000));
        assert_eq!(time_ms("yesterday"), None);
    }
}
