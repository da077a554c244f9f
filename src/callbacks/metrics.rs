//! Metric names of the callback relay (Prometheus, through the `metrics`
//! facade like the rest of the gateway). Alert rules on them are in
//! `deploy/prometheus/alerts.yaml`.

/// Mode the relay runs in: `{mode="relay"|"passthrough"}` = 1.
pub const MODE: &str = "v1compat_callbacks_mode";
/// V2 callbacks that reached the receiver.
pub const RECEIVED: &str = "v1compat_callbacks_received_total";
/// Stored: `{result="new"|"duplicate"|"superseded"}`.
pub const ACCEPTED: &str = "v1compat_callbacks_accepted_total";
/// Refused: `{reason="token"|"body"|"too_large"|"method"|"store"}`.
pub const REJECTED: &str = "v1compat_callbacks_rejected_total";
/// Delivery attempts: `{outcome="delivered"|"http_error"|"gone"|"timeout"|"refused"|"connect"|"token"}`.
pub const ATTEMPTS: &str = "v1compat_callback_attempts_total";
/// Events that went dead (schedule used up or 410).
pub const DEAD_TOTAL: &str = "v1compat_callbacks_dead_total";
/// Pending events now.
pub const QUEUE_DEPTH: &str = "v1compat_callbacks_queue_depth";
/// Age of the oldest pending event, seconds.
pub const OLDEST_PENDING: &str = "v1compat_callbacks_oldest_pending_seconds";
/// Dead events now.
pub const DEAD: &str = "v1compat_callbacks_dead";
/// Run-detail reads for enrichment that failed (the event's own data was sent).
pub const ENRICH_FAILED: &str = "v1compat_callbacks_enrich_failed_total";
