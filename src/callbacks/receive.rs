//! `POST /callbacks/v2/{token}` on the public listener: where V2 reports a
//! run's status change. The token is opened first — a forged, altered or
//! expired one is answered 404 before the body is read or the store touched.
//! The body (bounded) must be V2's callback object: `run_slug` (or the older
//! `run_id`) and `run_status`. The event is committed to the store before the
//! 2xx goes back, so an acknowledged callback is never lost. The whole
//! body must arrive within the connections' body deadline
//! (`connections.body_read_timeout_ms`), as a V1 request's must: a sender
//! that stalls or trickles is answered 408 and its slot freed.

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use serde_json::{json, Value};

use super::event::Event;
use super::metrics as m;
use super::store::Inserted;
use super::Relay;
use crate::ops::{int_of, string_of};
use crate::v1::Envelope;
use crate::v2::Segment;

/// The path prefix V2 posts to.
pub(crate) const PATH_PREFIX: &str = "/callbacks/v2/";

/// The token of a callback path, if `path` is one.
pub fn token_of(path: &str) -> Option<&str> {
    path.strip_prefix(PATH_PREFIX)
        .filter(|t| !t.is_empty() && !t.contains('/'))
}

fn answer(status: StatusCode, envelope: Envelope) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(envelope.to_bytes()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn refuse(
    status: StatusCode,
    code: i64,
    reason: &'static str,
    message: &str,
) -> Response<Full<Bytes>> {
    metrics::counter!(m::REJECTED, "reason" => reason).increment(1);
    answer(status, Envelope::error(code, message))
}

/// The run and status a V2 callback body reports, and its result count.
pub(crate) fn parse_body(bytes: &[u8]) -> Result<(String, String, i64), String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("body is not JSON ({e})"))?;
    if !v.is_object() {
        return Err("body must be a JSON object".into());
    }
    let run = string_of(v.get("run_slug"))
        .or_else(|| string_of(v.get("run_id")))
        .ok_or("run_slug: is required (or the older run_id)")?;
    // A run id, not a V2 shortcut word (`last`): enrichment reads
    // `worker-runs/{run_slug}` with the client's key.
    if Segment::run(&run).is_err() || run.len() > 128 {
        return Err("run_slug: is not a usable run id".into());
    }
    let status = v
        .get("run_status")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty() && s.len() <= 32 && s.bytes().all(|b| b.is_ascii_alphabetic()))
        .ok_or("run_status: is required and must be a status word")?;
    let results = int_of(v.get("result_count")).unwrap_or(0);
    Ok((run, status.to_ascii_lowercase(), results))
}

impl Relay {
    /// Answers one request to [`PATH_PREFIX`]`{token}`, its body read
    /// within `body_deadline`.
    pub async fn receive<B>(
        &self,
        req: Request<B>,
        body_deadline: std::time::Duration,
    ) -> Response<Full<Bytes>>
    where
        B: http_body::Body,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        metrics::counter!(m::RECEIVED).increment(1);
        let now = self.clock.now_ms();
        let token = token_of(req.uri().path()).unwrap_or_default().to_owned();
        if self.sealer.open(&token, now / 1000).is_none() {
            return refuse(StatusCode::NOT_FOUND, 4040, "token", "Resource not found");
        }
        if req.method() != Method::POST {
            let mut r = refuse(
                StatusCode::METHOD_NOT_ALLOWED,
                4000,
                "method",
                "callbacks are POSTed",
            );
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST"));
            return r;
        }
        let limit = self.cfg.max_body_bytes;
        let read = Limited::new(req.into_body(), limit).collect();
        let body = match tokio::time::timeout(body_deadline, read).await {
            Ok(Ok(b)) => b.to_bytes(),
            Err(_) => {
                return refuse(
                    StatusCode::REQUEST_TIMEOUT,
                    4000,
                    "body_timeout",
                    &format!("body was not received within {body_deadline:?}"),
                )
            }
            Ok(Err(_)) => {
                return refuse(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    4000,
                    "too_large",
                    &format!("body is larger than {limit} bytes or could not be read"),
                )
            }
        };
        let (run, status, results) = match parse_body(&body) {
            Ok(p) => p,
            Err(why) => return refuse(StatusCode::BAD_REQUEST, 4000, "body", &why),
        };
        let first = self.cfg.schedule.first().as_millis() as u64;
        let event = Event::new(&run, &status, &token, results, now, first);
        let id = event.id.clone();
        match self.store.insert(event).await {
            Ok(outcome) => {
                let result = match outcome {
                    Inserted::New => "new",
                    Inserted::Duplicate => "duplicate",
                    Inserted::Superseded => "superseded",
                };
                metrics::counter!(m::ACCEPTED, "result" => result).increment(1);
                tracing::info!(run = %run, status = %status, result, "callback received");
                if outcome == Inserted::New {
                    self.deliverer.wake.notify_one();
                }
                answer(
                    StatusCode::OK,
                    Envelope::success(json!({"id": id, "result": result})),
                )
            }
            Err(e) => {
                tracing::error!(error = %e, "callback could not be stored; V2 will retry");
                refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    5000,
                    "store",
                    "callback could not be stored, retry later",
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies() {
        let ok = |b: &str| parse_body(b.as_bytes()).unwrap();
        assert_eq!(
            ok(r#"{"run_slug":"R1","run_status":"succeeded","result_count":3}"#),
            ("R1".into(), "succeeded".into(), 3)
        );
        assert_eq!(
            ok(r#"{"run_id":"R2","run_status":"Running"}"#),
            ("R2".into(), "running".into(), 0)
        );
        assert_eq!(ok(r#"{"run_id":42,"run_status":"failed"}"#).0, "42");
        for bad in [
            "",
            "[]",
            r#"{"run_status":"succeeded"}"#,
            r#"{"run_slug":"../x","run_status":"succeeded"}"#,
            // V2's shortcut word, not a run: enrichment would read the
            // client's latest run instead.
            r#"{"run_slug":"last","run_status":"succeeded"}"#,
            r#"{"run_slug":"LAST","run_status":"succeeded"}"#,
            r#"{"run_slug":"R"}"#,
            r#"{"run_slug":"R","run_status":"a b"}"#,
        ] {
            assert!(parse_body(bad.as_bytes()).is_err(), "{bad}");
        }
        assert!(parse_body(br#"{"run_slug":"R"}"#)
            .unwrap_err()
            .starts_with("run_status"));
    }

    #[test]
    fn paths() {
        assert_eq!(token_of("/callbacks/v2/abc"), Some("abc"));
        assert_eq!(token_of("/callbacks/v2/"), None);
        assert_eq!(token_of("/callbacks/v2/a/b"), None);
        assert_eq!(token_of("/api/v1/run"), None);
    }
}
