//! When the next delivery attempt happens: the configured schedule (delay
//! before each attempt, the first included), ± jitter so retries after an
//! outage do not arrive in one burst, and a receiver's `Retry-After` honoured
//! within [scheduled delay, twice that] so a receiver can slow us down but not
//! park an event forever. Pure functions of their inputs; the deliverer
//! supplies the clock and the random draw, so tests need no sleeps.

use std::time::{Duration, SystemTime};

#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    delays: Vec<Duration>,
    jitter_percent: u32,
}

impl Default for Schedule {
    /// Immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h (≈ 27.6 h in all).
    fn default() -> Self {
        let s = |secs: u64| Duration::from_secs(secs);
        Schedule {
            delays: vec![
                s(0),
                s(5),
                s(300),
                s(1800),
                s(7200),
                s(18000),
                s(36000),
                s(36000),
            ],
            jitter_percent: 20,
        }
    }
}

impl Schedule {
    pub fn parse(items: &[String], jitter_percent: u32) -> Result<Schedule, String> {
        if items.is_empty() {
            return Err("needs at least one entry (the first attempt)".into());
        }
        if items.len() > 50 {
            return Err("at most 50 attempts".into());
        }
        let mut delays = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let d = humantime::parse_duration(item.trim())
                .map_err(|e| format!("entry {i} ({item:?}): {e}"))?;
            if d > Duration::from_secs(7 * 24 * 3600) {
                return Err(format!("entry {i} ({item:?}): longer than 7 days"));
            }
            delays.push(d);
        }
        Ok(Schedule {
            delays,
            jitter_percent: jitter_percent.min(50),
        })
    }

    /// Attempts in all.
    pub fn len(&self) -> usize {
        self.delays.len()
    }

    pub fn is_empty(&self) -> bool {
        self.delays.is_empty()
    }

    /// Delay before the first attempt.
    pub fn first(&self) -> Duration {
        self.delays.first().copied().unwrap_or_default()
    }

    /// The delay before the next attempt after `made` failed attempts, or
    /// `None` when the schedule is used up (the event is dead). `unit` is a
    /// uniform draw from [0, 1).
    pub fn after_failure(
        &self,
        made: u32,
        retry_after: Option<Duration>,
        unit: f64,
    ) -> Option<Duration> {
        let base = *self.delays.get(made as usize)?;
        if let Some(asked) = retry_after {
            return Some(asked.clamp(base, base * 2));
        }
        let spread = f64::from(self.jitter_percent) / 100.0;
        let factor = 1.0 + spread * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        Some(base.mul_f64(factor.max(0.0)))
    }

    /// The bounds `after_failure` keeps to without `Retry-After`.
    pub fn bounds(&self, made: u32) -> Option<(Duration, Duration)> {
        let base = *self.delays.get(made as usize)?;
        let spread = f64::from(self.jitter_percent) / 100.0;
        Some((base.mul_f64(1.0 - spread), base.mul_f64(1.0 + spread)))
    }
}

/// A `Retry-After` value: delay seconds or an HTTP date.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn default_matches_the_documented_schedule() {
        let parsed = Schedule::parse(
            &strings(&["0s", "5s", "5m", "30m", "2h", "5h", "10h", "10h"]),
            20,
        )
        .unwrap();
        assert_eq!(parsed, Schedule::default());
        let total: Duration = parsed.delays.iter().sum();
        assert_eq!(total.as_secs(), 99_305); // ≈ 27.6 h
    }

    #[test]
    fn bad_schedules_are_refused() {
        assert!(Schedule::parse(&[], 20).is_err());
        assert!(Schedule::parse(&strings(&["0s", "often"]), 20).is_err());
        assert!(Schedule::parse(&strings(&["8d"]), 20).is_err());
        assert!(Schedule::parse(&strings(&["0s"; 51]), 20).is_err());
    }

    #[test]
    fn every_jittered_delay_stays_within_its_bounds() {
        let s = Schedule::default();
        for made in 1..8u32 {
            let (lo, hi) = s.bounds(made).unwrap();
            for i in 0..=100 {
                let d = s.after_failure(made, None, f64::from(i) / 100.0).unwrap();
                assert!(
                    d >= lo && d <= hi,
                    "attempt {made}: {d:?} not in {lo:?}..{hi:?}"
                );
            }
        }
        assert_eq!(s.after_failure(8, None, 0.5), None, "schedule used up");
    }

    #[test]
    fn retry_after_is_clamped_to_between_the_delay_and_twice_it() {
        let s = Schedule::default();
        let five_min = Duration::from_secs(300);
        let asked = |d| s.after_failure(2, Some(d), 0.9).unwrap();
        assert_eq!(asked(Duration::from_secs(1)), five_min);
        assert_eq!(asked(Duration::from_secs(400)), Duration::from_secs(400));
        assert_eq!(asked(Duration::from_secs(99_999)), five_min * 2);
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(
            parse_retry_after(&later, now),
            Some(Duration::from_secs(90))
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
