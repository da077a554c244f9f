//! A background thread of the telemetry (the log flush) asleep while it has
//! nothing to do, and woken by the first thing that gives it some: a log
//! line appended. Beside the request path, which pays one load for it
//! ([`Sleeper::wake`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::Duration;

/// The thread that sleeps, and whether it does.
pub(super) struct Sleeper {
    thread: OnceLock<Thread>,
    asleep: AtomicBool,
}

impl Sleeper {
    pub(super) const fn new() -> Sleeper {
        Sleeper {
            thread: OnceLock::new(),
            asleep: AtomicBool::new(false),
        }
    }

    /// Makes the calling thread the one that sleeps and is woken. Called by
    /// it before it first sleeps, so no work can miss waking it.
    pub(super) fn adopt_current(&self) {
        let _ = self.thread.set(std::thread::current());
    }

    /// Sleeps the calling thread while `idle()` says there is nothing to do:
    /// until [`Sleeper::wake`], or `limit` if given (or spuriously). `idle`
    /// must read with a sequentially consistent load what the waker stores
    /// sequentially consistently before it calls `wake`: then either this
    /// sees the work, or the waker sees this thread asleep and wakes it.
    pub(super) fn sleep_while(&self, idle: impl FnOnce() -> bool, limit: Option<Duration>) {
        self.asleep.store(true, Ordering::SeqCst);
        if idle() {
            match limit {
                Some(limit) => std::thread::park_timeout(limit),
                None => std::thread::park(),
            }
        }
        self.asleep.store(false, Ordering::SeqCst);
    }

    /// Wakes the thread if it sleeps: one load when it does not (and a
    /// wake-up of a thread already awake is no system call).
    #[inline]
    pub(super) fn wake(&self) {
        if self.asleep.load(Ordering::SeqCst) {
            self.unpark();
        }
    }

    #[cold]
    fn unpark(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }

    /// Whether the thread has said it sleeps (it may be about to).
    #[cfg(test)]
    pub(super) fn is_asleep(&self) -> bool {
        self.asleep.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;

    #[test]
    fn work_given_to_a_sleeper_wakes_it() {
        let sleeper: &'static Sleeper = Box::leak(Box::new(Sleeper::new()));
        let work: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
        let (decided, idle_seen) = mpsc::channel();
        let (done, woken) = mpsc::channel();
        std::thread::spawn(move || {
            sleeper.adopt_current();
            sleeper.sleep_while(
                || {
                    let idle = work.load(Ordering::SeqCst) == 0;
                    let _ = decided.send(idle);
                    idle
                },
                None,
            );
            let _ = done.send(());
        });
        // It found nothing to do and goes to sleep with no limit: only the
        // wake can end that.
        assert!(idle_seen.recv().unwrap());
        work.store(1, Ordering::SeqCst);
        sleeper.wake();
        woken
            .recv_timeout(Duration::from_secs(30))
            .expect("the work woke the sleeper");
    }

    #[test]
    fn a_sleeper_with_work_waiting_does_not_sleep() {
        let sleeper = Sleeper::new();
        sleeper.adopt_current();
        // Unlimited, it would never return unless `idle` is heeded.
        sleeper.sleep_while(|| false, None);
        assert!(!sleeper.is_asleep());
    }
}
