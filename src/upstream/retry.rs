//! When the upstream client may send a V2 call again, and how long it waits
//! first. Sits between attempts inside [`super::HttpUpstream`]: the client
//! asks [`retry_reason`] whether an outcome is retryable at all, then
//! [`plan_wait`] for the wait, and the shared [`RetryBudget`] for permission.
//! Everything but the budget is pure so the bounds can be tested directly.

use std::time::{Duration, SystemTime};

use http::StatusCode;
use rand::Rng;
use tower::retry::budget::{Budget, TpsBudget};

use super::UpstreamFailure;

/// How idempotent V2 reads are retried. Calls marked
/// [`super::RetryPolicy::Never`] ignore all of this.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrySettings {
    /// Total attempts including the first (1 disables retries).
    pub max_attempts: u32,
    /// Ceiling of the first retry's jittered wait; doubles per retry.
    pub base_backoff: Duration,
    /// Largest jittered wait. A `Retry-After` may ask for up to 4× this;
    /// anything longer is not waited for (the last answer is returned).
    pub max_backoff: Duration,
    /// Share of first attempts that may be retried, over a 10 s window
    /// (0.2 = retries add at most 20% to the upstream request rate).
    pub budget_percent: f32,
    /// Retries per second allowed regardless of traffic, so a quiet gateway
    /// can still retry.
    pub budget_min_per_sec: u32,
    /// No retry starts (its wait included) later than this after the first
    /// attempt started. Keeps retries inside the V1 request's own deadline.
    pub retry_window: Duration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            max_attempts: 3,
            base_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
            budget_percent: 0.2,
            budget_min_per_sec: 10,
            retry_window: Duration::from_secs(10),
        }
    }
}

impl RetrySettings {
    /// The one check of the retry bounds, for `[retry]` in the configuration
    /// and for a client built in code alike; each problem names its
    /// `[retry]` key. Also catches the values `TpsBudget` would assert on,
    /// so a bad setting is an error at startup rather than a panic.
    pub(crate) fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !(1..=10).contains(&self.max_attempts) {
            problems.push("retry.max_attempts: must be between 1 and 10".to_owned());
        }
        if self.base_backoff > self.max_backoff {
            problems.push("retry.base_backoff_ms: must not exceed retry.max_backoff_ms".to_owned());
        }
        // NaN is in no range.
        if !(0.0..=1.0).contains(&self.budget_percent) {
            problems.push("retry.budget_percent: must be between 0.0 and 1.0".to_owned());
        }
        if self.budget_min_per_sec >= i32::MAX as u32 {
            problems.push(format!(
                "retry.budget_min_per_sec: must be below {}",
                i32::MAX
            ));
        }
        problems
    }
}

/// Shared by all calls of one client: every call deposits on its first
/// attempt, every retry must withdraw. Under a V2 outage this turns the
/// retry storm into at most `budget_percent` extra load.
pub(crate) struct RetryBudget(TpsBudget);

impl RetryBudget {
    /// `settings` must have passed [`RetrySettings::validate`].
    pub(crate) fn new(settings: &RetrySettings) -> RetryBudget {
        RetryBudget(TpsBudget::new(
            Duration::from_secs(10),
            settings.budget_min_per_sec,
            settings.budget_percent,
        ))
    }

    pub(crate) fn deposit(&self) {
        self.0.deposit();
    }

    pub(crate) fn withdraw(&self) -> bool {
        self.0.withdraw()
    }
}

impl std::fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RetryBudget")
    }
}

/// Why an attempt is worth repeating; the `reason` label of
/// `v1compat_upstream_retries_total`, listed beside the metrics.
pub(crate) use crate::telemetry::RetryReason;

/// Whether an attempt's outcome may be retried (for a call that is safe to
/// retry at all). A too-large answer would be too large again.
pub(crate) fn retry_reason(outcome: Result<StatusCode, &UpstreamFailure>) -> Option<RetryReason> {
    match outcome {
        Ok(StatusCode::TOO_MANY_REQUESTS) => Some(RetryReason::TooManyRequests),
        Ok(status) if status.is_server_error() => Some(RetryReason::ServerError),
        Ok(_) => None,
        Err(UpstreamFailure::Unreachable(_)) => Some(RetryReason::Unreachable),
        // V2 took the whole attempt deadline: it is slow, not flaky, and
        // the first attempt may still be running there. Asking again would
        // triple both the wait of the V1 client and the load on V2.
        Err(UpstreamFailure::Timeout(_)) => None,
        Err(UpstreamFailure::Broken(_)) => Some(RetryReason::Broken),
        Err(UpstreamFailure::TooLarge(_)) => None,
        // The memory is the gateway's, not V2's: another attempt would
        // read the same answer into the same full budget.
        Err(UpstreamFailure::OverBudget(_)) => None,
    }
}

/// Upper bound of the wait before retry number `retry` (1 = first retry):
/// `base · 2^(retry-1)`, capped at `max`.
pub(crate) fn backoff_ceiling(retry: u32, base: Duration, max: Duration) -> Duration {
    let exp = retry.saturating_sub(1).min(31);
    base.saturating_mul(1u32 << exp).min(max)
}

/// "Full jitter": uniform in `[0, ceiling]`, which spreads clients that
/// failed together better than a fixed backoff plus a little noise.
pub(crate) fn full_jitter<R: Rng + ?Sized>(ceiling: Duration, rng: &mut R) -> Duration {
    let micros = u64::try_from(ceiling.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(rng.gen_range(0..=micros))
}

/// `Retry-After` as delta-seconds or an HTTP date (RFC 9110 §10.2.3). A
/// date in the past means "now". Unparseable values are ignored.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Absurdly long digit strings saturate rather than fail: they are
        // over any cap anyway.
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Why no further attempt is made although the outcome was retryable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GiveUp {
    /// V2 asked to wait longer than `4 × max_backoff`; retrying earlier
    /// would ignore its request, waiting longer would hold the V1 client.
    RetryAfterTooLong,
    /// The wait would end past the retry window.
    Deadline,
    /// The shared retry budget is spent.
    Budget,
}

impl GiveUp {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            GiveUp::RetryAfterTooLong => "retry_after",
            GiveUp::Deadline => "deadline",
            GiveUp::Budget => "budget",
        }
    }
}

/// The wait before retry number `retry` (1 = first retry): the jittered
/// backoff, raised to V2's `Retry-After` if it asked for more.
pub(crate) fn plan_wait<R: Rng + ?Sized>(
    retry: u32,
    settings: &RetrySettings,
    retry_after: Option<Duration>,
    rng: &mut R,
) -> Result<Duration, GiveUp> {
    let cap = settings.max_backoff.saturating_mul(4);
    let asked = retry_after.unwrap_or(Duration::ZERO);
    if asked > cap {
        return Err(GiveUp::RetryAfterTooLong);
    }
    let ceiling = backoff_ceiling(retry, settings.base_backoff, settings.max_backoff);
    Ok(full_jitter(ceiling, rng).max(asked))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn ceiling_doubles_then_caps() {
        let (base, max) = (50 * MS, 1000 * MS);
        assert_eq!(backoff_ceiling(1, base, max), 50 * MS);
        assert_eq!(backoff_ceiling(2, base, max), 100 * MS);
        assert_eq!(backoff_ceiling(3, base, max), 200 * MS);
        assert_eq!(backoff_ceiling(5, base, max), 800 * MS);
        assert_eq!(backoff_ceiling(6, base, max), max);
        assert_eq!(backoff_ceiling(u32::MAX, base, max), max);
        // retry 0 is treated like the first retry rather than underflowing.
        assert_eq!(backoff_ceiling(0, base, max), 50 * MS);
    }

    #[test]
    fn jitter_stays_within_bounds_and_varies() {
        let mut rng = StdRng::seed_from_u64(7);
        let ceiling = 200 * MS;
        let waits: Vec<_> = (0..1000).map(|_| full_jitter(ceiling, &mut rng)).collect();
        assert!(waits.iter().all(|w| *w <= ceiling));
        assert!(waits.iter().any(|w| *w < 50 * MS));
        assert!(waits.iter().any(|w| *w > 150 * MS));
        assert_eq!(full_jitter(Duration::ZERO, &mut rng), Duration::ZERO);
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after(" 3 ", now), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(5));
        assert_eq!(parse_retry_after(&later, now), Some(Duration::from_secs(5)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(5));
        assert_eq!(parse_retry_after(&earlier, now), Some(Duration::ZERO));
        for bad in ["", "-1", "1.5", "soon", "Mon, 99 Foo 2020"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn retry_after_is_a_floor_with_a_cap() {
        let settings = RetrySettings::default();
        let mut rng = StdRng::seed_from_u64(1);
        for _ in 0..100 {
            let w = plan_wait(1, &settings, Some(3 * Duration::from_secs(1)), &mut rng).unwrap();
            assert_eq!(w, Duration::from_secs(3));
            let w = plan_wait(1, &settings, None, &mut rng).unwrap();
            assert!(w <= settings.base_backoff);
        }
        assert_eq!(
            plan_wait(1, &settings, Some(Duration::from_secs(4)), &mut rng),
            Ok(Duration::from_secs(4))
        );
        assert_eq!(
            plan_wait(1, &settings, Some(Duration::from_millis(4001)), &mut rng),
            Err(GiveUp::RetryAfterTooLong)
        );
    }

    #[test]
    fn only_transient_outcomes_are_retryable() {
        assert_eq!(
            retry_reason(Ok(StatusCode::SERVICE_UNAVAILABLE)),
            Some(RetryReason::ServerError)
        );
        assert_eq!(
            retry_reason(Ok(StatusCode::TOO_MANY_REQUESTS)),
            Some(RetryReason::TooManyRequests)
        );
        for ok in [
            StatusCode::OK,
            StatusCode::NOT_FOUND,
            StatusCode::BAD_REQUEST,
        ] {
            assert_eq!(retry_reason(Ok(ok)), None);
        }
        let unreachable = UpstreamFailure::Unreachable("refused".into());
        assert_eq!(
            retry_reason(Err(&unreachable)),
            Some(RetryReason::Unreachable)
        );
        assert_eq!(retry_reason(Err(&UpstreamFailure::TooLarge(10))), None);
        let slow = UpstreamFailure::Timeout(Duration::from_secs(10));
        assert_eq!(retry_reason(Err(&slow)), None);
    }

    /// One of each failure an attempt can end in. The `match` fails to
    /// compile when a variant is added, so the list cannot fall behind.
    fn every_failure() -> Vec<UpstreamFailure> {
        let all = vec![
            UpstreamFailure::Unreachable("x".into()),
            UpstreamFailure::Timeout(Duration::from_secs(1)),
            UpstreamFailure::Broken("x".into()),
            UpstreamFailure::TooLarge(1),
            UpstreamFailure::OverBudget(1),
        ];
        for f in &all {
            match f {
                UpstreamFailure::Unreachable(_)
                | UpstreamFailure::Timeout(_)
                | UpstreamFailure::Broken(_)
                | UpstreamFailure::TooLarge(_)
                | UpstreamFailure::OverBudget(_) => {}
            }
        }
        all
    }

    /// A `reason` registered at zero that no retry can carry would read as
    /// "never happens" on a dashboard; one a retry carries but that is not
    /// registered would appear only at its first retry.
    #[test]
    fn the_registered_retry_reasons_are_those_a_retry_is_sent_for() {
        let statuses = (100..=599).filter_map(|s| StatusCode::from_u16(s).ok());
        let mut sent_for: std::collections::BTreeSet<&str> = statuses
            .filter_map(|s| retry_reason(Ok(s)))
            .map(RetryReason::as_str)
            .collect();
        let failures = every_failure();
        sent_for.extend(
            failures
                .iter()
                .filter_map(|f| retry_reason(Err(f)))
                .map(RetryReason::as_str),
        );
        let metrics = crate::telemetry::prometheus()
            .expect("the recorder")
            .render();
        let registered: std::collections::BTreeSet<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("v1compat_upstream_retries_total{"))
            .filter_map(|l| l.split("reason=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(registered, sent_for);
    }

    #[test]
    fn out_of_bounds_settings_are_errors_not_panics() {
        assert!(RetrySettings::default().validate().is_empty());
        for bad in [
            RetrySettings {
                budget_percent: f32::NAN,
                ..RetrySettings::default()
            },
            RetrySettings {
                budget_percent: -0.1,
                ..RetrySettings::default()
            },
            RetrySettings {
                max_attempts: 0,
                ..RetrySettings::default()
            },
            RetrySettings {
                max_attempts: 11,
                ..RetrySettings::default()
            },
            RetrySettings {
                budget_percent: 1.5,
                ..RetrySettings::default()
            },
            RetrySettings {
                base_backoff: Duration::from_secs(2),
                ..RetrySettings::default()
            },
            RetrySettings {
                budget_min_per_sec: u32::MAX,
                ..RetrySettings::default()
            },
        ] {
            assert_eq!(bad.validate().len(), 1, "{bad:?}");
        }
    }

    #[test]
    fn an_empty_budget_refuses_and_deposits_refill_it() {
        let budget = RetryBudget::new(&RetrySettings {
            budget_percent: 1.0,
            budget_min_per_sec: 0,
            ..RetrySettings::default()
        });
        assert!(!budget.withdraw());
        budget.deposit();
        assert!(budget.withdraw());
        assert!(!budget.withdraw());
    }
}
