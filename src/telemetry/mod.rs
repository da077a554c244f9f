//! Logs and metrics: the tracing subscriber (JSON or text), the Prometheus
//! recorder behind `/metrics`, and the one list of metric names. Labels are
//! bounded: `operation` is an [`Operation`](crate::v1::route::Operation) name,
//! never a raw path; keys never appear in either.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;

mod exposition;
mod float_counters;
pub mod handles;
mod histograms;
mod json_lines;
pub mod log_batch;
pub(crate) mod log_filter;
mod series;
mod sleeper;
mod text_fields;

pub use histograms::MetricsHandle;
use histograms::{Bounds, WithHistograms};
pub use series::BUILD_INFO;

/// Bytes held now for request bodies being read, answers not yet taken and
/// V2 answers being read or held (`connections.memory_budget_bytes` bounds
/// them).
pub(crate) const MEMORY_HELD: &str = "v1compat_memory_held_bytes";
/// Requests refused at the memory bound:
/// `{reason="budget"|"connection"|"body"|"v2_answer"}`.
pub(crate) const MEMORY_REFUSALS: &str = "v1compat_memory_refusals_total";

/// V1 requests by `operation` and V1 `status`.
pub const REQUESTS: &str = "v1compat_requests_total";
/// V1 request latency by `operation`.
pub const REQUEST_DURATION: &str = "v1compat_request_duration_seconds";
/// V2 calls made per V1 request, by `operation`.
pub const UPSTREAM_CALLS_PER_REQUEST: &str = "v1compat_upstream_calls_per_request";
/// V1 errors by `operation`, `origin` (client/upstream/gateway) and `cause`.
pub const ERRORS: &str = "v1compat_errors_total";
/// V2 values the translation had to guess at, by `kind`.
pub const TRANSLATION_GAPS: &str = "v1compat_translation_gaps_total";
/// V1 requests in flight.
pub const IN_FLIGHT: &str = "v1compat_requests_in_flight";
/// Open client connections, by `listener` (public, admin).
pub const OPEN_CONNECTIONS: &str = "v1compat_open_connections";
/// Connections refused at `connections.max_connections`, by `listener`.
pub const SHED_CONNECTIONS: &str = "v1compat_connections_shed_total";
/// Connections closed because an answer made no progress towards the client
/// for `connections.write_timeout_ms`, by `listener`.
pub const WRITE_STALLED_CONNECTIONS: &str = "v1compat_connections_write_stalled_total";
/// V2 attempts by `route` and `status_class` (2xx … 5xx, or `error` when no
/// status came back); per attempt, so retries show here too.
pub const UPSTREAM_REQUESTS_TOTAL: &str = "v1compat_upstream_requests_total";
/// Duration of each V2 attempt (headers and body), by `route`.
pub const UPSTREAM_DURATION_SECONDS: &str = "v1compat_upstream_duration_seconds";
/// V2 retries sent, by `route` and `reason` ([`RetryReason`]: unreachable,
/// broken, 429, 5xx; an attempt that timed out is not repeated).
pub const UPSTREAM_RETRIES_TOTAL: &str = "v1compat_upstream_retries_total";
/// Retryable V2 outcomes not retried, by `route` and `cause` (budget, deadline, retry_after).
pub const UPSTREAM_RETRIES_SKIPPED_TOTAL: &str = "v1compat_upstream_retries_skipped_total";
/// Shadow copies by `operation` and `outcome`: `sent` (both answers compared),
/// `skipped` (not sampled, not read-only, loop guard, too large), `dropped`
/// (in-flight cap reached), `failed` (the other side gave no answer in time).
pub const SHADOW_COPIES: &str = "v1compat_shadow_copies_total";
/// Fields that differed between the legacy and the translated answer, by
/// `operation` and `field` (indices normalised to `[*]`, at most
/// [`FIELD_LABELS`](crate::shadow::FIELD_LABELS) distinct, then `other`).
pub const SHADOW_DIFFERENCES: &str = "v1compat_shadow_differences_total";
/// Shadow copies in flight (never above `shadow.max_in_flight`).
pub const SHADOW_IN_FLIGHT: &str = "v1compat_shadow_copies_in_flight";
/// 1 when V2 was last found reachable, else 0: by the periodic check
/// (`upstream.health_check_interval_ms`), `/readyz`, and every V2 attempt
/// (an answer 1, a connection that could not be opened 0).
pub const UPSTREAM_REACHABLE: &str = "v1compat_upstream_reachable";
/// Configuration reloads by `outcome` (`applied`, `rejected`, `truncated`:
/// a smaller file that would move clients' keys elsewhere, refused).
pub const CONFIG_RELOADS: &str = "v1compat_config_reloads_total";
/// 1 when the last configuration load (start-up, or a reload: SIGHUP, file
/// change, certificate files) succeeded, 0 when it was refused: a refused
/// file is still there for the next restart to fail on.
pub const CONFIG_LAST_RELOAD_SUCCESSFUL: &str = "v1compat_config_last_reload_successful";
/// When the configuration was last loaded successfully (Unix seconds).
pub const CONFIG_LAST_RELOAD_SUCCESS_TIMESTAMP: &str =
    "v1compat_config_last_reload_success_timestamp_seconds";
/// Capture lines dropped because the writer fell behind.
pub const SHADOW_CAPTURE_DROPPED: &str = "v1compat_shadow_capture_dropped_total";
/// Answers shaped by a registry difference, by difference (`src/differences`).
pub const DIFFERENCES_APPLIED: &str = "v1compat_differences_applied_total";
/// Clients the migration inventory holds, as of its last flush.
pub const INVENTORY_CLIENTS: &str = "v1compat_inventory_clients";
/// Inventory flushes into its store, by outcome (`ok`, `failed`).
pub const INVENTORY_FLUSHES: &str = "v1compat_inventory_flushes_total";
/// Client records the inventory let go, by reason (`memory`: more new
/// clients in one flush interval than `inventory.max_clients`; `store`: the
/// oldest-seen clients over that bound in the store).
pub const INVENTORY_EVICTED: &str = "v1compat_inventory_evicted_total";
/// V1 requests refused by a brownout window, by operation.
pub const BROWNOUT_REFUSALS: &str = "v1compat_brownout_refusals_total";

static PROMETHEUS: OnceLock<Option<MetricsHandle>> = OnceLock::new();

/// Bucket bounds of the latency histograms, in seconds.
const SECONDS: Bounds = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    120.0, 330.0,
];

/// Bucket bounds of [`UPSTREAM_CALLS_PER_REQUEST`].
const CALLS: Bounds = &[0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 11.0, 16.0];

fn bounds(name: &str) -> Bounds {
    if name == UPSTREAM_CALLS_PER_REQUEST {
        CALLS
    } else {
        SECONDS
    }
}

/// Installs the process-wide recorder once and returns its handle. Several
/// gateways in one process (tests) share it.
pub fn prometheus() -> Option<MetricsHandle> {
    PROMETHEUS
        .get_or_init(|| {
            let recorder = WithHistograms::new(PrometheusBuilder::new().build_recorder(), bounds);
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok()?;
            // From a thread of its own: on a thread with a local recorder
            // set (a test's, in the integration suite) the descriptions and
            // the series at zero would go to that one, not to this.
            let registered = std::thread::spawn(|| {
                describe();
                series::register_all();
                let process = metrics_process::Collector::default();
                process.describe();
                process.collect();
                process
            })
            .join();
            spawn_process_reader(registered.ok()?);
            Some(handle)
        })
        .clone()
}

/// How old the process metrics (`process_cpu_seconds_total`,
/// `process_resident_memory_bytes`, `process_open_fds`, …) may be.
const PROCESS_EVERY: Duration = Duration::from_secs(5);

/// Reads the process metrics every [`PROCESS_EVERY`] on a thread of its
/// own, so a scrape never waits on `/proc`. A plain thread, so it runs
/// whichever runtime (or none) first asked for the recorder.
fn spawn_process_reader(process: metrics_process::Collector) {
    let spawned = std::thread::Builder::new()
        .name("metrics-process".into())
        .spawn(move || loop {
            std::thread::sleep(PROCESS_EVERY);
            process.collect();
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the process metrics thread; they keep their first reading");
    }
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        REQUESTS,
        "V1 requests answered, by operation and V1 HTTP status"
    );
    describe_histogram!(
        REQUEST_DURATION,
        Unit::Seconds,
        "V1 request latency, by operation"
    );
    describe_histogram!(
        UPSTREAM_CALLS_PER_REQUEST,
        "V2 calls made per V1 request, by operation"
    );
    describe_counter!(ERRORS, "V1 error answers, by operation, origin and cause");
    describe_counter!(
        TRANSLATION_GAPS,
        "V2 values the translation had to map by a fallback rule"
    );
    describe_gauge!(IN_FLIGHT, "V1 requests in flight");
    describe_counter!(
        UPSTREAM_REQUESTS_TOTAL,
        "V2 attempts, by route and status class"
    );
    describe_histogram!(
        UPSTREAM_DURATION_SECONDS,
        Unit::Seconds,
        "V2 attempt latency, by route"
    );
    describe_counter!(
        UPSTREAM_RETRIES_TOTAL,
        "V2 retries sent, by route and reason"
    );
    describe_counter!(
        UPSTREAM_RETRIES_SKIPPED_TOTAL,
        "Retryable V2 outcomes not retried, by route and cause"
    );
    describe_counter!(
        SHADOW_COPIES,
        "Shadow copies, by operation and outcome (sent, skipped, dropped, failed)"
    );
    describe_counter!(
        SHADOW_DIFFERENCES,
        "Fields differing between legacy and translated V1 answers, by operation and field path"
    );
    describe_gauge!(SHADOW_IN_FLIGHT, "Shadow copies in flight");
    describe_counter!(
        DIFFERENCES_APPLIED,
        "V1 answers shaped by a V1/V2 difference of the registry, by difference"
    );
    describe_gauge!(
        INVENTORY_CLIENTS,
        "Clients in the migration inventory's store, as of its last flush"
    );
    describe_counter!(
        INVENTORY_FLUSHES,
        "Migration inventory flushes into its store, by outcome"
    );
    describe_counter!(
        INVENTORY_EVICTED,
        "Client records the migration inventory let go over inventory.max_clients, by reason"
    );
    describe_counter!(
        BROWNOUT_REFUSALS,
        "V1 requests refused inside a configured brownout window, by operation"
    );
    describe_gauge!(
        UPSTREAM_REACHABLE,
        "1 when V2 was last found reachable (periodic check, readiness, V2 calls), else 0"
    );
    describe_counter!(
        CONFIG_RELOADS,
        "Configuration reloads, by outcome (applied, rejected, truncated: refused as a half-written file)"
    );
    describe_gauge!(
        CONFIG_LAST_RELOAD_SUCCESSFUL,
        "1 when the last configuration load or reload succeeded, 0 when it was refused"
    );
    describe_gauge!(
        CONFIG_LAST_RELOAD_SUCCESS_TIMESTAMP,
        Unit::Seconds,
        "When the configuration was last loaded successfully, in Unix seconds"
    );
    describe_counter!(
        SHADOW_CAPTURE_DROPPED,
        "Shadow capture lines dropped because the writer fell behind"
    );
    describe_gauge!(OPEN_CONNECTIONS, "Client connections open, by listener");
    describe_gauge!(
        MEMORY_HELD,
        "Bytes held for request bodies being read, answers not yet taken by their clients and V2 answers being read or held (bounded by connections.memory_budget_bytes)"
    );
    describe_counter!(
        MEMORY_REFUSALS,
        "Requests answered 429 at the memory bound, by reason (budget: the process's budget full; connection: connections.max_held_streams reached; body: no room for the body; v2_answer: no room for a V2 answer)"
    );
    describe_counter!(
        SHED_CONNECTIONS,
        "Connections refused over connections.max_connections, by listener"
    );
    describe_counter!(
        WRITE_STALLED_CONNECTIONS,
        "Connections closed because the client took no answer bytes within connections.write_timeout_ms, by listener"
    );
}

/// Sets up structured logging. `format` is `json` or `text`; `level` a
/// tracing filter ([`log_filter`]). Calling it twice is harmless (the second is ignored).
/// Text is coloured only when stderr is a terminal (and `NO_COLOR` is
/// unset): escape codes in a file or a log collector are noise. Lines go
/// to stderr in batches ([`log_batch`]).
pub fn init_logging(format: &str, level: &str) {
    let filter = log_filter::filter(level);
    log_batch::install();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour(std::io::IsTerminal::is_terminal(&std::io::stderr())))
        .with_writer(log_batch::BatchedStderr);
    let _ = if format == "json" {
        // tracing-subscriber's `json()` layout (flattened event, current
        // span), written without re-reading span fields (see `json_lines`).
        builder
            .fmt_fields(json_lines::JsonFields)
            .event_format(json_lines::JsonLines::with_timer(json_lines::UtcMicros))
            .try_init()
    } else {
        // Control characters in field values escaped (`text_fields`).
        builder.fmt_fields(text_fields::EscapedFields).try_init()
    };
}

/// Whether text logs may carry colour codes: only on a terminal, and never
/// when `NO_COLOR` is set (<https://no-color.org>).
fn colour(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Who is to blame for a failed request: the `origin` label of the error
/// metrics and the `x-v1compat-error-origin` header. Listed here, with the
/// names it labels, so the metrics need nothing of `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Client,
    Upstream,
    Gateway,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Client => "client",
            Origin::Upstream => "upstream",
            Origin::Gateway => "gateway",
        }
    }
}

/// Why a V2 attempt is sent again: the `reason` label of
/// [`UPSTREAM_RETRIES_TOTAL`]. Listed here, with the names it labels, so
/// the series registered at zero are the ones a retry can move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryReason {
    Unreachable,
    Broken,
    TooManyRequests,
    ServerError,
}

impl RetryReason {
    /// Every reason. None for an attempt that timed out: V2 is slow then,
    /// not flaky, and the attempt is not repeated.
    pub(crate) const ALL: [RetryReason; 4] = [
        RetryReason::Unreachable,
        RetryReason::Broken,
        RetryReason::TooManyRequests,
        RetryReason::ServerError,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RetryReason::Unreachable => "unreachable",
            RetryReason::Broken => "broken",
            RetryReason::TooManyRequests => "429",
            RetryReason::ServerError => "5xx",
        }
    }
}
