//! Logs and metrics: the tracing subscriber (JSON or text), the Prometheus
//! recorder behind `/metrics`, and the one list of metric names. Labels are
//! bounded: `operation` is an [`Operation`](crate::route::Operation) name,
//! never a raw path; keys never appear in either.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

pub mod handles;
mod json_lines;
pub mod log_batch;
mod series;
mod sleeper;

pub use series::BUILD_INFO;
use sleeper::Sleeper;

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
/// V2 attempts by `route` and `status_class` (2xx … 5xx, or `error` when no
/// status came back); per attempt, so retries show here too.
pub const UPSTREAM_REQUESTS_TOTAL: &str = "v1compat_upstream_requests_total";
/// Duration of each V2 attempt (headers and body), by `route`.
pub const UPSTREAM_DURATION_SECONDS: &str = "v1compat_upstream_duration_seconds";
/// V2 retries sent, by `route` and `reason` (unreachable, timeout, broken, 429, 5xx).
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
/// 1 when the last `/readyz` opened a TCP connection to V2, else 0.
pub const UPSTREAM_REACHABLE: &str = "v1compat_upstream_reachable";
/// Configuration reloads by `outcome` (`applied`, `rejected`).
pub const CONFIG_RELOADS: &str = "v1compat_config_reloads_total";
/// Capture lines dropped because the writer fell behind.
pub const SHADOW_CAPTURE_DROPPED: &str = "v1compat_shadow_capture_dropped_total";

static PROMETHEUS: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process-wide Prometheus recorder once and returns its handle.
/// Several gateways in one process (tests) share it.
pub fn prometheus() -> Option<PrometheusHandle> {
    PROMETHEUS
        .get_or_init(|| {
            let buckets = [
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 120.0, 330.0,
            ];
            let builder = PrometheusBuilder::new()
                .set_buckets(&buckets)
                .ok()?
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(UPSTREAM_CALLS_PER_REQUEST.into()),
                    &[0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 11.0, 16.0],
                )
                .ok()?;
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok()?;
            describe();
            series::register_all();
            let process = metrics_process::Collector::default();
            process.describe();
            process.collect();
            spawn_upkeep(handle.clone(), process);
            Some(handle)
        })
        .clone()
}

/// Requests answered since the histogram samples were last drained. Each
/// leaves a few samples waiting in memory (about 24 bytes).
static SINCE_DRAIN: AtomicU32 = AtomicU32::new(0);

/// The upkeep thread, asleep while no request waits (see
/// [`Upkeep::idle_looks`]): the next request counted wakes it.
static UPKEEP: Sleeper = Sleeper::new();

/// Counts one answered request towards the next drain (see `Upkeep`).
#[inline]
pub fn count_request() {
    // Sequentially consistent, as the upkeep thread reads it (see
    // `Sleeper::sleep_while`). On x86 neither costs more than the relaxed
    // forms.
    SINCE_DRAIN.fetch_add(1, Ordering::SeqCst);
    UPKEEP.wake();
}

/// How often the upkeep thread looks at [`SINCE_DRAIN`].
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// The samples are drained once this many requests have left theirs (about
/// 240 KB). Drained only every 5 s, the samples of 40,000 requests a second
/// were about 5 MB of the gateway's peak memory.
const DRAIN_AFTER: u32 = 10_000;

/// Looks after which the samples are drained whatever the load: 5 s. A
/// drain has a cost of its own (each series' name is formatted), so an idle
/// or quiet gateway drains no more often than this.
const DRAIN_AT_LEAST_EVERY: u32 = 20;

/// Looks between two readings of the process metrics
/// (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
/// `process_open_fds`, …): 5 s, whatever the drains.
const PROCESS_EVERY: u32 = 20;

/// What the upkeep thread does at each look: drain the histogram samples
/// (by load, or because [`DRAIN_AT_LEAST_EVERY`] looks passed without a
/// drain) and read the process metrics (every [`PROCESS_EVERY`] looks). The
/// two keep their own counts: a drain by load does not move the process
/// metrics' cadence.
#[derive(Default)]
struct Upkeep {
    looks: u32,
    looks_since_drain: u32,
}

/// What one look decided.
struct Look {
    drain: bool,
    read_process: bool,
}

impl Upkeep {
    /// How many looks may be skipped now, with `waiting` requests counted
    /// since the last drain: none while any is; with none, every look
    /// before the next one due to read the process metrics or to drain by
    /// time (samples no request counts, a shadow copy's V2 timings, wait
    /// for that). An idle gateway's upkeep thread wakes every 5 s, not 4
    /// times a second.
    fn idle_looks(&self, waiting: u32) -> u32 {
        if waiting == 0 {
            let to_reading = PROCESS_EVERY - 1 - self.looks;
            let to_drain = DRAIN_AT_LEAST_EVERY.saturating_sub(self.looks_since_drain + 1);
            to_reading.min(to_drain)
        } else {
            0
        }
    }

    /// `n` looks passed without being made (see [`Upkeep::idle_looks`]),
    /// never as many as reach the next reading.
    fn skip(&mut self, n: u32) {
        debug_assert!(self.looks + n < PROCESS_EVERY);
        self.looks += n;
        self.looks_since_drain += n;
    }

    /// One look, with `waiting` requests counted since the last drain:
    /// whether to drain now, and whether to read the process metrics.
    fn look(&mut self, waiting: u32) -> Look {
        self.looks = (self.looks + 1) % PROCESS_EVERY;
        self.looks_since_drain += 1;
        let drain = self.looks_since_drain >= DRAIN_AT_LEAST_EVERY || waiting >= DRAIN_AFTER;
        if drain {
            self.looks_since_drain = 0;
        }
        Look {
            drain,
            read_process: self.looks == 0,
        }
    }
}

/// Takes the `seen` requests a drain was decided on off `counted`, rather
/// than zeroing it: a request counted since the look counts towards the
/// next drain.
fn take_off(counted: &AtomicU32, seen: u32) {
    counted.fetch_sub(seen, Ordering::Relaxed);
}

/// The recorder keeps every histogram sample (three per request) until they are
/// drained into buckets, which only a scrape of `/metrics` or an upkeep does:
/// without this thread a gateway nobody scrapes grows by about 24 bytes per
/// request, and a scrape after a busy hour walks millions of samples. A plain
/// thread, so it runs whichever runtime (or none) first asked for the recorder.
///
/// The same thread reads the process metrics, so a scrape never waits on
/// `/proc` and they are at most [`PROCESS_EVERY`] looks old.
fn spawn_upkeep(handle: PrometheusHandle, process: metrics_process::Collector) {
    let spawned = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            UPKEEP.adopt_current();
            let mut upkeep = Upkeep::default();
            loop {
                match upkeep.idle_looks(SINCE_DRAIN.load(Ordering::SeqCst)) {
                    0 => std::thread::sleep(LOOK_EVERY),
                    idle => {
                        let from = Instant::now();
                        // Until the look that reads the process, or a
                        // request (or spuriously: then a look early).
                        UPKEEP.sleep_while(
                            || SINCE_DRAIN.load(Ordering::SeqCst) == 0,
                            Some(LOOK_EVERY * (idle + 1)),
                        );
                        let passed = from.elapsed().as_millis() / LOOK_EVERY.as_millis();
                        upkeep.skip(idle.min(passed as u32));
                    }
                }
                let waiting = SINCE_DRAIN.load(Ordering::Relaxed);
                let look = upkeep.look(waiting);
                if look.drain {
                    take_off(&SINCE_DRAIN, waiting);
                    handle.run_upkeep();
                }
                if look.read_process {
                    process.collect();
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the metrics upkeep thread; histograms drain only on scrape");
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
    describe_gauge!(
        UPSTREAM_REACHABLE,
        "1 when the last readiness check reached V2 over TCP, else 0"
    );
    describe_counter!(
        CONFIG_RELOADS,
        "Configuration reloads, by outcome (applied, rejected)"
    );
    describe_counter!(
        SHADOW_CAPTURE_DROPPED,
        "Shadow capture lines dropped because the writer fell behind"
    );
}

/// Sets up structured logging. `format` is `json` or `text`; `level` a
/// tracing filter. Calling it twice is harmless (the second is ignored).
/// Text is coloured only when stderr is a terminal (and `NO_COLOR` is
/// unset): escape codes in a file or a log collector are noise. Lines go
/// to stderr in batches ([`log_batch`]).
pub fn init_logging(format: &str, level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
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
        builder.try_init()
    };
}

/// Whether text logs may carry colour codes: only on a terminal, and never
/// when `NO_COLOR` is set (<https://no-color.org>).
fn colour(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").map_or(true, |v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The looks (1-based) at which `upkeep` drains and reads the process
    /// metrics over `n` looks, with `waiting(look)` requests waiting.
    fn run(n: u32, waiting: impl Fn(u32) -> u32) -> (Vec<u32>, Vec<u32>) {
        let mut upkeep = Upkeep::default();
        let (mut drains, mut reads) = (Vec::new(), Vec::new());
        for look in 1..=n {
            let decided = upkeep.look(waiting(look));
            if decided.drain {
                drains.push(look);
            }
            if decided.read_process {
                reads.push(look);
            }
        }
        (drains, reads)
    }

    #[test]
    fn a_quiet_gateway_drains_and_reads_every_five_seconds() {
        assert_eq!(run(60, |_| 0), (vec![20, 40, 60], vec![20, 40, 60]));
        assert_eq!(
            run(60, |_| DRAIN_AFTER - 1),
            (vec![20, 40, 60], vec![20, 40, 60])
        );
    }

    #[test]
    fn an_idle_gateway_skips_the_looks_before_the_next_reading() {
        let mut upkeep = Upkeep::default();
        // Just started: 19 looks to skip, the 20th reads and drains.
        assert_eq!(upkeep.idle_looks(0), 19);
        upkeep.skip(19);
        let look = upkeep.look(0);
        assert!(look.read_process && look.drain);
        // Then the next 19.
        assert_eq!(upkeep.idle_looks(0), 19);
        // A request waiting: every look is made.
        assert_eq!(upkeep.idle_looks(1), 0);
        // Woken early, three looks' time later (the look made on waking
        // counts as one), by a burst drained by load: the rest lead to the
        // next reading, 20 looks after the last.
        upkeep.skip(3);
        let look = upkeep.look(DRAIN_AFTER);
        assert!(look.drain && !look.read_process);
        assert_eq!(upkeep.idle_looks(0), 15);
        upkeep.skip(15);
        let look = upkeep.look(0);
        assert!(look.read_process && !look.drain);
        // The drain due by time, 20 looks after the last one, comes
        // before the next reading: a doze ends there.
        assert_eq!(upkeep.idle_looks(0), 3);
        upkeep.skip(3);
        let look = upkeep.look(0);
        assert!(look.drain && !look.read_process);
        assert_eq!(upkeep.idle_looks(0), 15);
    }

    #[test]
    fn a_busy_gateway_drains_by_load_and_reads_as_before() {
        // Busy from look 5 to look 7: a drain at each, and the next drain
        // without load 5 s after the last one.
        let busy = |look| {
            if (5..=7).contains(&look) {
                DRAIN_AFTER
            } else {
                0
            }
        };
        assert_eq!(run(40, busy), (vec![5, 6, 7, 27], vec![20, 40]));
    }

    #[test]
    fn requests_counted_after_the_look_wait_for_the_next_drain() {
        // 10,000 looked at; 3 more counted before the drain.
        let counted = AtomicU32::new(DRAIN_AFTER + 3);
        take_off(&counted, DRAIN_AFTER);
        assert_eq!(counted.load(Ordering::Relaxed), 3);
    }
}
