//! What one client connection is doing, shared by its task, its IO and its
//! requests: how many requests (or body discards) are in progress, how many
//! bytes have been read, and since when nothing has happened. The
//! connection task uses it for the idle timeout and to decide, while
//! draining, whether closing now could lose a request the client has sent.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Default)]
pub struct Activity {
    state: Mutex<State>,
    changed: Notify,
    /// Bytes read from the socket so far (kept by the connection's IO).
    read: AtomicU64,
    /// The connection carried an HTTP/2 request.
    http2: AtomicBool,
    /// The grace deadline passed: a request in progress is to be answered
    /// with the cut envelope now.
    cut: AtomicBool,
}

struct State {
    active: usize,
    /// `read` when the last request or discard ended: more than this means
    /// the client has sent something not yet turned into a request.
    mark: u64,
    since: Instant,
}

impl Default for State {
    fn default() -> Self {
        State {
            active: 0,
            mark: 0,
            since: Instant::now(),
        }
    }
}

/// Keeps the connection busy while alive: a request being served, or the
/// rest of a refused body being read and thrown away.
pub struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.active -= 1;
        s.mark = self.0.read.load(Ordering::Acquire);
        s.since = Instant::now();
        drop(s);
        self.0.changed.notify_waiters();
    }
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity::default())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a pair of counters; a panic elsewhere cannot leave
        // it half-written, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn begin(self: &Arc<Self>) -> Busy {
        let mut s = self.lock();
        s.active += 1;
        s.since = Instant::now();
        drop(s);
        self.changed.notify_waiters();
        Busy(self.clone())
    }

    pub fn add_read(&self, n: usize) {
        self.read.fetch_add(n as u64, Ordering::AcqRel);
    }

    pub fn saw_http2(&self) {
        self.http2.store(true, Ordering::Release);
    }

    pub fn is_http2(&self) -> bool {
        self.http2.load(Ordering::Acquire)
    }

    /// Marks the connection cut (see [`Activity::is_cut`]).
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
    }

    pub fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }

    pub fn active(&self) -> usize {
        self.lock().active
    }

    /// Nothing in progress and every byte read so far was part of a
    /// finished request.
    pub fn is_clean(&self) -> bool {
        let s = self.lock();
        s.active == 0 && s.mark == self.read.load(Ordering::Acquire)
    }

    /// Resolves once the connection has had nothing in progress for `idle`.
    ///
    /// One timer, moved only when it fires: it is first due `idle` after
    /// the last change, and on firing either the connection has been idle
    /// that long, or it is set again to `idle` after the last change (or
    /// from now, while a request is in progress). A request that starts or
    /// ends neither touches the timer nor wakes the connection's task, which
    /// used to cost a timer and a wake-up per request.
    pub async fn idle_for(&self, idle: Duration) {
        let since = self.lock().since;
        let sleep = tokio::time::sleep_until(since + idle);
        tokio::pin!(sleep);
        loop {
            sleep.as_mut().await;
            let (active, since) = {
                let s = self.lock();
                (s.active, s.since)
            };
            let next = if active > 0 {
                Instant::now() + idle
            } else {
                since + idle
            };
            if next <= Instant::now() {
                return;
            }
            sleep.as_mut().reset(next);
        }
    }

    /// Resolves on the next change of the in-progress count.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_waits_for_the_last_request_to_end() {
        let a = Activity::new();
        let busy = a.begin();
        let idle = Duration::from_millis(40);
        // Busy: never idle, however long.
        assert!(
            tokio::time::timeout(Duration::from_millis(120), a.idle_for(idle))
                .await
                .is_err()
        );
        drop(busy);
        let started = Instant::now();
        a.idle_for(idle).await;
        assert!(started.elapsed() >= idle);
    }

    #[test]
    fn clean_means_every_byte_read_belonged_to_a_finished_request() {
        let a = Activity::new();
        assert!(a.is_clean());
        a.add_read(10);
        assert!(!a.is_clean(), "bytes read, no request yet");
        let busy = a.begin();
        assert!(!a.is_clean());
        drop(busy);
        assert!(a.is_clean());
        assert_eq!(a.active(), 0);
    }
}
