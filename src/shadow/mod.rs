//! The migration shadow tester. Live, it sits beside the request path, never
//! on it:
//!
//! ```text
//! V1 client ─▶ server ─▶ Mirror::answer ─▶ Pipeline::admit (route, key, body checks)
//!                          ├─▶ Mirror::sample (before answering: cheap checks only)
//!                          ├─▶ primary: Pipeline::translate, or legacy with primary = "legacy"
//!                          └─▶ Mirror::spawn  (after answering: its own task)
//!                       ─▶ the other side (legacy V1, or the translation)
//!                       ─▶ diff ─▶ metrics, capture (JSONL)
//! ```
//!
//! Only read-only operations are mirrored; requests that carry the loop
//! guard `x-v1compat-shadow` are never mirrored again. A copy needs one of
//! `max_in_flight` slots, taken with `try_acquire` (none free: dropped and
//! counted), runs under `copy_timeout` and reads at most `max_body_bytes`.
//! With `baseline`, legacy is called a second time beside the other side.
//!
//! Files: [`config`] (`[shadow]`), [`legacy`] (the V1 client), [`diff`]
//! (the pure diff engine), [`capture`] (JSONL), [`replay`] and [`report`]
//! (the `replay` and `report` commands, whose flags live in [`cli`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::GatewayError;
use crate::ops::V1Request;
use crate::pipeline::{self, Admitted, BodyError, Gateway, Pipeline, RawV1Request, V1Response};
use crate::telemetry;
use crate::upstream::{ProxyEnv, UpstreamFailure};
use crate::v1::route::Operation;

pub(crate) mod capture;
pub(crate) mod config;
pub mod diff;
pub mod legacy;
pub mod replay;
pub mod report;

pub use config::{Primary, SampleBy, ShadowConfig, ShadowSection};

use capture::{body_value, captured_headers, now_ms, CaptureWriter, CapturedRequest, Record, Side};
use legacy::{LegacyClient, Received, V1Call};

/// Distinct `field` label values of `v1compat_shadow_differences_total`;
/// later paths are counted as `other`.
pub const FIELD_LABELS: usize = 200;

/// A request selected for mirroring, owned by its copy task.
pub struct ShadowCopy {
    op: Operation,
    v1: V1Request,
    call: V1Call,
    at_ms: i64,
    started: Instant,
}

/// What the live mirror reads of the configuration, once, when it is
/// built (`[shadow]` needs a restart to change).
#[derive(Debug, Clone)]
pub struct MirrorSettings {
    pub shadow: ShadowConfig,
    /// The proxies the legacy client goes through (the upstream's).
    pub proxy: ProxyEnv,
    /// `upstream.max_response_bytes`: the most of a legacy answer read when
    /// legacy answers the client (`shadow.primary = "legacy"`).
    pub max_response_bytes: usize,
}

/// The live mirror: one per public listener.
pub struct Mirror {
    cfg: ShadowConfig,
    max_response_bytes: usize,
    /// The snapshot the mirror was built with: its translation side and its
    /// deadlines, whatever a reload swaps in for the primary answers.
    gateway: Arc<Gateway>,
    legacy: LegacyClient,
    slots: Arc<Semaphore>,
    capture: Option<CaptureWriter>,
    labels: FieldLabels,
}

/// Keeps the `field` label of the differences metric bounded: the first
/// [`FIELD_LABELS`] distinct normalised paths keep their name, later ones
/// are counted as `other`.
#[derive(Default)]
pub struct FieldLabels(Mutex<HashSet<String>>);

impl FieldLabels {
    pub fn label(&self, field: String) -> String {
        let Ok(mut seen) = self.0.lock() else {
            return "other".into();
        };
        if seen.contains(&field) {
            return field;
        }
        if seen.len() < FIELD_LABELS {
            seen.insert(field.clone());
            return field;
        }
        "other".into()
    }
}

/// Counts a copy's outcome.
fn count(op: Operation, outcome: &'static str) {
    metrics::counter!(telemetry::SHADOW_COPIES, "operation" => op.name(), "outcome" => outcome)
        .increment(1);
}

/// Holds a slot and the in-flight gauge for the life of a copy task, so
/// both come back even if the task is cancelled.
struct Slot {
    _permit: OwnedSemaphorePermit,
}

impl Slot {
    fn new(permit: OwnedSemaphorePermit) -> Slot {
        metrics::gauge!(telemetry::SHADOW_IN_FLIGHT).increment(1.0);
        Slot { _permit: permit }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        metrics::gauge!(telemetry::SHADOW_IN_FLIGHT).decrement(1.0);
    }
}

/// FNV-1a: stable across processes and versions, unlike std's hasher, so a
/// key is in or out of the sample on every replica and after restarts.
fn stable_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Whether a draw falls in the sample: `bucket` in `0..10_000`.
fn in_sample(bucket: u64, percent: f64) -> bool {
    (bucket as f64) < percent * 100.0
}

impl Mirror {
    /// The mirror of `settings.shadow`, translating on `gateway`, or `None`
    /// when it is disabled.
    pub fn new(
        settings: MirrorSettings,
        gateway: Arc<Gateway>,
    ) -> std::io::Result<Option<Arc<Mirror>>> {
        let cfg = settings.shadow;
        let Some(base) = cfg.legacy_base_url.as_ref().filter(|_| cfg.enabled) else {
            return Ok(None);
        };
        let legacy = LegacyClient::new(base, &settings.proxy).map_err(std::io::Error::other)?;
        let capture = match &cfg.capture_path {
            Some(path) => Some(CaptureWriter::start(path, true).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("shadow.capture_path {}: {e}", path.display()),
                )
            })?),
            None => None,
        };
        Ok(Some(Arc::new(Mirror {
            slots: Arc::new(Semaphore::new(cfg.max_in_flight)),
            cfg,
            max_response_bytes: settings.max_response_bytes,
            gateway,
            legacy,
            capture,
            labels: FieldLabels::default(),
        })))
    }

    pub fn primary(&self) -> Primary {
        self.cfg.primary
    }

    /// Copies in flight now.
    pub fn in_flight(&self) -> usize {
        self.cfg.max_in_flight - self.slots.available_permits()
    }

    /// Waits until every copy handed over so far is compared, counted and
    /// its capture line (if capturing) flushed to the file. A copy holds
    /// its slot from the moment the client's answer is built until it is
    /// done, so holding every slot at once means none is left running.
    /// Copies started while this waits may be dropped for want of a slot:
    /// meant for tests and tools that read the results, not for live traffic.
    pub async fn flush(&self) {
        let all = u32::try_from(self.cfg.max_in_flight).unwrap_or(u32::MAX);
        // The semaphore is never closed, so this only waits.
        if let Ok(every_slot) = self.slots.acquire_many(all).await {
            drop(every_slot);
        }
        if let Some(capture) = &self.capture {
            capture.flush().await;
        }
    }

    /// Answers one request through `pipeline`, mirroring it: admission as
    /// usual, the sampling decision, the primary side, then the copy handed
    /// to its own task. The client's answer never waits for the copy.
    pub async fn answer<B>(
        self: &Arc<Self>,
        pipeline: &Pipeline,
        req: RawV1Request<B>,
    ) -> V1Response
    where
        B: std::future::Future<Output = Result<Bytes, BodyError>>,
    {
        let admitted = match pipeline.admit(req).await {
            Ok(a) => a,
            Err(refused) => return refused,
        };
        let copy = self.sample(&admitted);
        let response = match self.cfg.primary {
            Primary::Legacy => match self.proxy(&admitted).await {
                Ok(answer) => pipeline.relay(admitted, answer.status, answer.body),
                Err(err) => pipeline.refuse(admitted, err),
            },
            Primary::Translated => pipeline.translate(admitted).await,
        };
        if let Some(copy) = copy {
            self.spawn(copy, &response);
        }
        response
    }

    /// Decides, before the primary answer, whether to mirror this request.
    /// Cheap and synchronous; counts `skipped`.
    fn sample(&self, req: &Admitted) -> Option<ShadowCopy> {
        let op = req.op;
        let eligible = !req.headers.contains_key(legacy::LOOP_GUARD)
            && op.is_read_only()
            && req.body.len() <= self.cfg.max_body_bytes
            && self.sampled(req);
        if !eligible {
            count(op, "skipped");
            return None;
        }
        Some(ShadowCopy {
            op,
            v1: req.v1_request(),
            call: call_of(req),
            at_ms: now_ms(),
            started: Instant::now(),
        })
    }

    fn sampled(&self, req: &Admitted) -> bool {
        let bucket = match self.cfg.sample_by {
            SampleBy::Request => rand::random::<u64>() % 10_000,
            SampleBy::Key => {
                let key = req.key.as_ref().map_or("", |k| k.expose());
                stable_hash(key) % 10_000
            }
        };
        in_sample(bucket, self.cfg.sample_percent)
    }

    /// Sends the client's request to legacy (`primary = "legacy"`): the
    /// request's own deadline, the upstream's answer size cap.
    async fn proxy(&self, req: &Admitted) -> Result<Received, GatewayError> {
        let s = &self.gateway.settings;
        self.legacy
            .send(
                &call_of(req),
                pipeline::deadline(s.request_timeout, s.sync_run_timeout, req.op),
                self.max_response_bytes,
            )
            .await
            .map_err(GatewayError::Upstream)
    }

    /// Hands a copy over after the primary answer is built: takes a slot or
    /// drops the copy, then runs the other side in its own task. Returns at
    /// once; nothing here waits.
    fn spawn(self: &Arc<Self>, copy: ShadowCopy, primary: &V1Response) {
        let op = copy.op;
        // With legacy as primary, an error the gateway rendered itself means
        // legacy did not answer: there is nothing of legacy's to compare.
        if self.cfg.primary == Primary::Legacy && primary.is_gateway_error() {
            count(op, "failed");
            return;
        }
        if primary.body.len() > self.cfg.max_body_bytes {
            count(op, "skipped");
            return;
        }
        let Ok(permit) = self.slots.clone().try_acquire_owned() else {
            count(op, "dropped");
            return;
        };
        let slot = Slot::new(permit);
        let status = primary.status;
        let bytes = primary.body.to_bytes();
        let latency = copy.started.elapsed();
        let this = self.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let primary = side_of(copy.at_ms, Ok((status, bytes, latency)), "");
            this.run_copy(copy, primary).await;
        });
    }

    /// The other side (and the baseline), then compare, count and capture.
    async fn run_copy(&self, copy: ShadowCopy, primary: Side) {
        let timeout = self.cfg.copy_timeout;
        let limit = self.cfg.max_body_bytes;
        let other = async {
            let at = now_ms();
            let started = Instant::now();
            let result = match self.cfg.primary {
                Primary::Translated => self
                    .legacy
                    .send(&copy.call, timeout, limit)
                    .await
                    .map(|r| (r.status, r.body, r.latency)),
                Primary::Legacy => {
                    let v1 = copy.v1.clone();
                    match pipeline::dispatch(&self.gateway, v1, timeout).await {
                        Err(GatewayError::Deadline(_)) => Err(UpstreamFailure::Timeout(timeout)),
                        result => {
                            let (status, body) =
                                pipeline::render(result, &self.gateway.settings.dialect);
                            Ok((status, body, started.elapsed()))
                        }
                    }
                }
            };
            let who = match self.cfg.primary {
                Primary::Translated => LEGACY,
                Primary::Legacy => TRANSLATION,
            };
            side_of(at, result, who)
        };
        let baseline = async {
            if !self.cfg.baseline {
                return None;
            }
            let at = now_ms();
            let r = self.legacy.send(&copy.call, timeout, limit).await;
            Some(side_of(
                at,
                r.map(|r| (r.status, r.body, r.latency)),
                LEGACY,
            ))
        };
        let (other, baseline) = tokio::join!(other, baseline);
        let (legacy, translated) = match self.cfg.primary {
            Primary::Translated => (other, primary),
            Primary::Legacy => (primary, other),
        };
        let op = copy.op;
        match (legacy.status, translated.status) {
            (Some(ls), Some(ts)) => {
                let l = diff::Reply {
                    status: ls,
                    body: &legacy.body,
                };
                let t = diff::Reply {
                    status: ts,
                    body: &translated.body,
                };
                let cmp = diff::compare(op.name(), l, t, &self.cfg.rules);
                // Per request, a field that also differs between the two
                // legacy answers is noise; the report applies the thresholds.
                let noise: HashSet<String> = match baseline.as_ref().and_then(|b| {
                    b.status.map(|s| diff::Reply {
                        status: s,
                        body: &b.body,
                    })
                }) {
                    Some(b) => diff::compare(op.name(), l, b, &self.cfg.rules)
                        .diffs
                        .iter()
                        .map(diff::FieldDiff::normalised)
                        .collect(),
                    None => HashSet::new(),
                };
                let fields: HashSet<String> = cmp
                    .diffs
                    .iter()
                    .map(diff::FieldDiff::normalised)
                    .filter(|p| !noise.contains(p))
                    .collect();
                for field in fields {
                    let label = self.labels.label(field);
                    metrics::counter!(telemetry::SHADOW_DIFFERENCES, "operation" => op.name(), "field" => label)
                        .increment(1);
                }
                // Counted after the differences, so `sent` implies they are in.
                count(op, "sent");
                if !cmp.diffs.is_empty() {
                    tracing::debug!(operation = op.name(), request_id = %copy.v1.request_id, differences = cmp.diffs.len(), "shadow answers differ");
                }
            }
            _ => {
                count(op, "failed");
                tracing::debug!(operation = op.name(), request_id = %copy.v1.request_id, legacy = ?legacy.error, translated = ?translated.error, "shadow copy failed");
            }
        }
        if let Some(w) = &self.capture {
            w.offer(Record {
                id: copy.v1.request_id.to_string(),
                operation: op.name().to_owned(),
                at_ms: copy.at_ms,
                primary: self.cfg.primary.as_str().to_owned(),
                request: captured_request(&copy.call),
                legacy: Some(legacy),
                translated: Some(translated),
                baseline,
            });
        }
    }
}

/// The request as legacy gets it: method, path, query, the forwarded
/// headers and the body.
fn call_of(req: &Admitted) -> V1Call {
    let mut headers = V1Call::forwarded_headers(&req.headers);
    // The id the client is answered with, whether it sent it or the
    // gateway made it, so that both sides' logs name the same request.
    headers.insert(pipeline::REQUEST_ID, req.request_id.header().clone());
    V1Call {
        method: req.method.clone(),
        path: req.path.clone(),
        query: req.query.clone(),
        headers,
        body: req.body.clone(),
    }
}

/// Names of the sides in failure reasons: a report must say which side did
/// not answer, not "upstream" for both.
pub(crate) const LEGACY: &str = "legacy V1 service";
pub(crate) const TRANSLATION: &str = "translation";

/// A side's failure in words that name the side.
fn failure_text(who: &str, e: &UpstreamFailure) -> String {
    match e {
        UpstreamFailure::Unreachable(why) => format!("{who} unreachable: {why}"),
        UpstreamFailure::Timeout(d) => format!("{who} did not answer within {d:?}"),
        UpstreamFailure::Broken(why) => format!("{who} connection failed mid-answer: {why}"),
        UpstreamFailure::TooLarge(n) => format!("{who} answer larger than {n} bytes"),
        UpstreamFailure::OverBudget(n) => {
            format!("{who} answer refused: no room in the memory budget of {n} bytes")
        }
    }
}

/// One side's [`Side`] from what came back; `who` names the side in a
/// failure.
fn side_of(
    at_ms: i64,
    result: Result<(StatusCode, Bytes, Duration), UpstreamFailure>,
    who: &str,
) -> Side {
    match result {
        Ok((status, body, latency)) => Side {
            at_ms,
            latency_ms: latency.as_secs_f64() * 1000.0,
            status: Some(status.as_u16()),
            body: body_value(&body),
            error: None,
        },
        Err(e) => Side {
            at_ms,
            latency_ms: (now_ms() - at_ms) as f64,
            status: None,
            body: serde_json::Value::Null,
            error: Some(failure_text(who, &e)),
        },
    }
}

/// The request as captured: keys redacted.
pub fn captured_request(call: &V1Call) -> CapturedRequest {
    CapturedRequest {
        method: Some(call.method.to_string()),
        path: Some(call.path.clone()),
        operation: None,
        query: call.query.as_deref().map(capture::redact_text),
        headers: captured_headers(&call.headers),
        body: body_value(&call.body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_sampling_is_stable_and_proportional() {
        assert_eq!(stable_hash("abc"), stable_hash("abc"));
        let inside = (0..10_000)
            .filter(|i| in_sample(stable_hash(&format!("key-{i}")) % 10_000, 25.0))
            .count();
        assert!((2_000..3_000).contains(&inside), "{inside}");
        assert!(in_sample(9_999, 100.0));
        assert!(!in_sample(0, 0.0));
    }

    #[test]
    fn a_failed_side_is_named_not_called_the_upstream() {
        let side = side_of(
            0,
            Err(UpstreamFailure::Unreachable("connection refused".into())),
            LEGACY,
        );
        assert_eq!(
            side.error.as_deref(),
            Some("legacy V1 service unreachable: connection refused")
        );
        let side = side_of(
            0,
            Err(UpstreamFailure::Timeout(Duration::from_secs(5))),
            TRANSLATION,
        );
        assert_eq!(
            side.error.as_deref(),
            Some("translation did not answer within 5s")
        );
    }

    #[test]
    fn field_labels_are_capped() {
        let labels = FieldLabels::default();
        for i in 0..FIELD_LABELS {
            assert_eq!(labels.label(format!("data.f{i}")), format!("data.f{i}"));
        }
        assert_eq!(labels.label("data.new".into()), "other");
        assert_eq!(labels.label("data.f0".into()), "data.f0");
    }
}
