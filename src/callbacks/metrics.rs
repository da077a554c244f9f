//! Metric names of the callback relay (Prometheus, through the `metrics`
//! facade like the rest of the gateway). Alert rules on them are in
//! `deploy/prometheus/alerts.yaml`.

/// Mode the relay runs in: `{mode="relay"|"passthrough"}` = 1.
pub(crate) const MODE: &str = "v1compat_callbacks_mode";
/// V2 callbacks that reached the receiver.
pub(crate) const RECEIVED: &str = "v1compat_callbacks_received_total";
/// Stored: `{result="new"|"duplicate"|"superseded"}`.
pub(crate) const ACCEPTED: &str = "v1compat_callbacks_accepted_total";
/// Refused: `{reason="token"|"body"|"body_timeout"|"too_large"|"method"|"store"}`.
pub(crate) const REJECTED: &str = "v1compat_callbacks_rejected_total";
/// Delivery attempts: `{outcome="delivered"|"http_error"|"gone"|"timeout"|"refused"|"connect"|"token"|"superseded"}`.
pub(crate) const ATTEMPTS: &str = "v1compat_callbacks_attempts_total";
/// Events that went dead (schedule used up or 410).
pub(crate) const DEAD_TOTAL: &str = "v1compat_callbacks_dead_total";
/// Pending events now.
pub(crate) const QUEUE_DEPTH: &str = "v1compat_callbacks_queue_depth";
/// Age of the oldest pending event, seconds.
pub(crate) const OLDEST_PENDING: &str = "v1compat_callbacks_oldest_pending_seconds";
/// Dead events now.
pub(crate) const DEAD: &str = "v1compat_callbacks_dead";
/// Run-detail reads for enrichment that failed (the event's own data was sent).
pub(crate) const ENRICH_FAILED: &str = "v1compat_callbacks_enrich_failed_total";
/// Dead events pruned: `{reason="age"|"count"}`.
pub(crate) const DEAD_PRUNED: &str = "v1compat_callbacks_dead_pruned_total";
/// Callbacks on runs V2 does not know that went dead without a V2 read,
/// their token's hourly budget of such reads used up.
pub(crate) const UNKNOWN_RUN_READS_LIMITED: &str =
    "v1compat_callbacks_unknown_run_reads_limited_total";

const ACCEPTED_RESULTS: &[&str] = &["new", "duplicate", "superseded"];
const REJECTED_REASONS: &[&str] = &[
    "token",
    "body",
    "body_timeout",
    "too_large",
    "method",
    "store",
];
const ATTEMPT_OUTCOMES: &[&str] = &[
    "delivered",
    "http_error",
    "gone",
    "timeout",
    "refused",
    "connect",
    "token",
    "superseded",
];

/// Describes the relay's series and sets the mode's; in relay mode also
/// registers each series at zero, as the relay starts: an alert on
/// `increase(…[10m])` sees the first store failure only if the series was
/// there, at 0, before it.
pub(crate) fn register(relay: bool) {
    use metrics::{counter, describe_counter, describe_gauge, gauge};
    describe_gauge!(
        MODE,
        "1 for the mode the callback relay runs in (relay or passthrough)"
    );
    let mode = if relay { "relay" } else { "passthrough" };
    gauge!(MODE, "mode" => mode).set(1.0);
    describe_counter!(RECEIVED, "V2 callbacks that reached the relay");
    describe_counter!(
        ACCEPTED,
        "V2 callbacks stored, by result (new, duplicate, superseded)"
    );
    describe_counter!(
        REJECTED,
        "V2 callbacks refused, by reason (token, body, body_timeout, too_large, method, store)"
    );
    describe_counter!(ATTEMPTS, "V1 notification delivery attempts, by outcome");
    describe_counter!(
        DEAD_TOTAL,
        "Events that went dead (schedule used up, or 410)"
    );
    describe_gauge!(QUEUE_DEPTH, "Events waiting for delivery");
    describe_gauge!(
        OLDEST_PENDING,
        "Age of the oldest event waiting for delivery, seconds"
    );
    describe_gauge!(DEAD, "Dead events kept for redelivery");
    describe_counter!(
        ENRICH_FAILED,
        "V2 run reads for a notification that failed (the callback's own data was sent)"
    );
    describe_counter!(
        DEAD_PRUNED,
        "Dead events pruned, by reason (age: older than keep_dead_secs; count: beyond max_dead_events, oldest first)"
    );
    describe_counter!(
        UNKNOWN_RUN_READS_LIMITED,
        "Callbacks on runs V2 does not know that went dead without a V2 read (the token's unknown_run_reads_per_hour used up)"
    );
    if !relay {
        return;
    }
    counter!(RECEIVED).increment(0);
    for result in ACCEPTED_RESULTS {
        counter!(ACCEPTED, "result" => *result).increment(0);
    }
    for reason in REJECTED_REASONS {
        counter!(REJECTED, "reason" => *reason).increment(0);
    }
    for outcome in ATTEMPT_OUTCOMES {
        counter!(ATTEMPTS, "outcome" => *outcome).increment(0);
    }
    counter!(DEAD_TOTAL).increment(0);
    counter!(ENRICH_FAILED).increment(0);
    counter!(UNKNOWN_RUN_READS_LIMITED).increment(0);
    for reason in ["age", "count"] {
        counter!(DEAD_PRUNED, "reason" => reason).increment(0);
    }
    for gauge in [QUEUE_DEPTH, OLDEST_PENDING, DEAD] {
        gauge!(gauge).set(0.0);
    }
}
