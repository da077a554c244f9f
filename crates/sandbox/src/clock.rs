//! The simulated clock. It starts at the real wall-clock time, runs at `speed`
//! simulated seconds per real second, and can be pushed forward (`/__sandbox/advance`)
//! so tests never sleep. Waiters are woken when it jumps or when run state changes, so
//! nothing busy-waits.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// Largest single jump of the clock (about 30 years), so time arithmetic never
/// overflows whatever a caller asks for.
pub(crate) const MAX_ADVANCE_SECONDS: f64 = 1e9;

pub(crate) struct SimClock {
    start_real: Instant,
    start_ms: i64,
    speed: f64,
    advanced_ms: AtomicI64,
    /// Bumped on every jump or state change that may end a wait early.
    changed: watch::Sender<u64>,
}

impl SimClock {
    pub(crate) fn new(speed: f64) -> Self {
        let start_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        SimClock {
            start_real: Instant::now(),
            start_ms,
            speed,
            advanced_ms: AtomicI64::new(0),
            changed: watch::Sender::new(0),
        }
    }

    /// Simulated Unix time in milliseconds.
    pub(crate) fn now_ms(&self) -> i64 {
        let real = self.start_real.elapsed().as_secs_f64();
        self.start_ms
            .saturating_add((real * self.speed * 1000.0) as i64)
            .saturating_add(self.advanced_ms.load(Ordering::SeqCst))
    }

    /// Jump forward by `seconds` simulated seconds (negative or non-finite values
    /// are ignored; one jump is capped at `MAX_ADVANCE_SECONDS`).
    pub(crate) fn advance(&self, seconds: f64) {
        if !seconds.is_finite() || seconds <= 0.0 {
            return;
        }
        let ms = (seconds.min(MAX_ADVANCE_SECONDS) * 1000.0).round() as i64;
        let _ = self
            .advanced_ms
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                Some(v.saturating_add(ms))
            });
        self.bump();
    }

    /// Wake waiters because something they may depend on changed.
    pub(crate) fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Real time it takes the clock to move `sim_ms` forward on its own.
    pub(crate) fn real_delay(&self, sim_ms: i64) -> Duration {
        let secs = sim_ms.max(0) as f64 / 1000.0 / self.speed;
        // Capped so a tiny speed cannot overflow; callers re-check after waking anyway.
        Duration::from_secs_f64(secs.min(86_400.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_moves_time() {
        let c = SimClock::new(1.0);
        let a = c.now_ms();
        c.advance(100.0);
        let b = c.now_ms();
        assert!(b - a >= 100_000);
    }

    #[test]
    fn absurd_advances_are_bounded() {
        let c = SimClock::new(1.0);
        let a = c.now_ms();
        c.advance(f64::NAN);
        c.advance(-5.0);
        assert!(c.now_ms() - a < 10_000);
        for _ in 0..100 {
            c.advance(1e300);
        }
        assert!(c.now_ms() > a);
    }

    #[test]
    fn speed_scales_delay() {
        let c = SimClock::new(10.0);
        assert_eq!(c.real_delay(10_000), Duration::from_secs(1));
        assert_eq!(c.real_delay(-5), Duration::ZERO);
    }
}
