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

/// What [`Activity::quiet_for`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quiet {
    /// No request has been in progress for the idle timeout.
    Idle,
    /// An HTTP/1 connection has had no request in progress for the head
    /// deadline: the next request's head is overdue (or the connection has
    /// waited idle as long as keep-alive allows).
    Head,
}

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

impl Busy {
    /// The connection it keeps busy.
    pub fn activity(&self) -> &Activity {
        &self.0
    }
}

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
        // `since` is left as it is: no deadline counts from it while a
        // request is in progress, and the request's end sets it.
        self.lock().active += 1;
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

    /// Resolves once the connection has had nothing in progress for `idle`:
    /// [`Activity::quiet_for`] with no head deadline.
    pub async fn idle_for(&self, idle: Duration) {
        self.quiet_for(Duration::MAX, Some(idle)).await;
    }

    /// Resolves once the connection has had nothing in progress for `idle`
    /// ([`Quiet::Idle`]; `None`: not waited for) or, unless it is HTTP/2, for
    /// `head` ([`Quiet::Head`]: the next request's head was due by then),
    /// whichever comes first.
    ///
    /// One timer, moved only when it fires: it is first due at the nearer
    /// deadline after the last change, and on firing either one has passed,
    /// or it is set again from the last change (or from now, while a
    /// request is in progress). A request that starts or ends neither
    /// touches the timer nor wakes the connection's task, and the head
    /// deadline of HTTP/1 costs a request no timer of its own (hyper's took
    /// one for every request, and a wake-up to arm it).
    pub async fn quiet_for(&self, head: Duration, idle: Option<Duration>) -> Quiet {
        // The nearest deadline counted from `since`; none if neither applies
        // (or cannot be represented).
        let due = |since: Instant| {
            let head = (!self.is_http2())
                .then(|| since.checked_add(head))
                .flatten();
            let idle = idle.and_then(|idle| since.checked_add(idle));
            match (head, idle) {
                (Some(head), Some(idle)) => Some(head.min(idle)),
                (head, idle) => head.or(idle),
            }
        };
        let Some(first) = due(self.lock().since) else {
            return std::future::pending().await;
        };
        let sleep = tokio::time::sleep_until(first);
        tokio::pin!(sleep);
        loop {
            sleep.as_mut().await;
            let (active, since) = {
                let s = self.lock();
                (s.active, s.since)
            };
            let now = Instant::now();
            if active > 0 {
                // Nothing is due while a request is in progress: look again
                // a whole deadline from now.
                match due(now) {
                    Some(next) => sleep.as_mut().reset(next),
                    None => return std::future::pending().await,
                }
                continue;
            }
            let passed = |d: Duration| since.checked_add(d).is_some_and(|at| at <= now);
            if idle.is_some_and(passed) {
                return Quiet::Idle;
            }
            if !self.is_http2() && passed(head) {
                return Quiet::Head;
            }
            match due(since) {
                Some(next) => sleep.as_mut().reset(next),
                None => return std::future::pending().await,
            }
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

    #[tokio::test]
    async fn the_head_is_due_before_the_idle_deadline_unless_http2() {
        let (head, idle) = (Duration::from_millis(40), Duration::from_millis(80));
        let a = Activity::new();
        let started = Instant::now();
        assert_eq!(a.quiet_for(head, Some(idle)).await, Quiet::Head);
        assert!(started.elapsed() >= head);
        // A request in progress holds both off; they count from its end.
        let busy = a.begin();
        let waiting = a.quiet_for(head, Some(idle));
        tokio::pin!(waiting);
        assert!(tokio::time::timeout(idle * 2, waiting.as_mut())
            .await
            .is_err());
        drop(busy);
        let ended = Instant::now();
        assert_eq!(waiting.await, Quiet::Head);
        assert!(ended.elapsed() >= head);
        // HTTP/2 has no head deadline; without the idle one, nothing is due.
        a.saw_http2();
        assert_eq!(a.quiet_for(head, Some(idle)).await, Quiet::Idle);
        assert!(ended.elapsed() >= idle);
        assert!(tokio::time::timeout(idle * 2, a.quiet_for(head, None))
            .await
            .is_err());
        // A head deadline longer than the idle one comes second.
        let b = Activity::new();
        assert_eq!(b.quiet_for(idle * 2, Some(idle)).await, Quiet::Idle);
        assert_eq!(b.quiet_for(idle * 2, None).await, Quiet::Head);
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
