//! What one client connection is doing, shared by its task, its IO and its
//! requests: how many requests (or body discards) are in progress, how many
//! bytes have been read, and since when nothing has happened. The
//! connection task uses it for the idle timeout, to decide, while
//! draining, whether closing now could lose a request the client has sent,
//! and to see an answer the client does not take ([`Activity::write_stalled`]):
//! the IO counts bytes written and whether the socket refused the last
//! write, and each answer's body whether hyper has asked it for more.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
    /// Bytes written to the socket so far (kept by the connection's IO).
    written: AtomicU64,
    /// The socket's last write found no room, and none has succeeded since.
    write_blocked: AtomicBool,
    /// Answer bodies handed to hyper that it has not asked for more yet
    /// ([`Writer`]).
    waiting: AtomicUsize,
    /// How many times a waiting answer body was asked for more, or dropped
    /// while waiting: any change means some answer moved.
    asked: AtomicU64,
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

/// What [`Activity::write_stalled`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stall {
    /// The socket took no byte while the connection had bytes to write.
    Socket,
    /// An answer's body was not asked for more, and no other answer of the
    /// connection moved (HTTP/2: a stream with no flow-control window).
    Answer,
}

/// How many samples [`Activity::write_stalled`] takes per timeout: a stall is
/// seen at most a quarter of the timeout late.
const STALL_SAMPLES: u32 = 4;

/// The connection's writing as seen at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WriteSample {
    written: u64,
    blocked: bool,
    waiting: usize,
    asked: u64,
}

/// Counts, sample after sample, for how many whole intervals each kind of
/// stall has lasted. Two samples show an interval of stall only if the
/// stall held at both and nothing that ends it happened between: a write
/// that succeeded changes `written`, and a waiting answer that was asked
/// for more or dropped changes `asked`; so the answers waiting at the
/// second sample waited since the first.
#[derive(Debug, Default)]
struct StallWatch {
    last: Option<WriteSample>,
    socket: u32,
    answer: u32,
}

impl StallWatch {
    /// Takes the next sample; a stall once one lasted `samples` intervals.
    fn observe(&mut self, now: WriteSample, samples: u32) -> Option<Stall> {
        if let Some(last) = self.last.replace(now) {
            let socket = last.blocked && now.blocked && last.written == now.written;
            self.socket = if socket { self.socket + 1 } else { 0 };
            let answer = last.waiting > 0 && now.waiting > 0 && last.asked == now.asked;
            self.answer = if answer { self.answer + 1 } else { 0 };
        }
        if self.socket >= samples {
            Some(Stall::Socket)
        } else if self.answer >= samples {
            Some(Stall::Answer)
        } else {
            None
        }
    }
}

/// One answer's body, between hyper and the client: whether hyper has yet
/// to ask it for more (counted in [`Activity`] while so). Dropped with the
/// body.
pub struct Writer {
    activity: Arc<Activity>,
    waiting: bool,
}

impl Writer {
    /// The body has more to give, and hyper will ask for it when it can
    /// write it.
    pub fn wait(&mut self) {
        if !self.waiting {
            self.waiting = true;
            self.activity.waiting.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Hyper asked the body for more.
    pub fn asked(&mut self) {
        if self.waiting {
            self.waiting = false;
            self.activity.asked.fetch_add(1, Ordering::AcqRel);
            self.activity.waiting.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Gone unasked (a stream reset, a connection ended): not a stall.
        self.asked();
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

    /// A [`Writer`] for the answer of the request it keeps busy.
    pub fn writer(&self) -> Writer {
        self.0.writer()
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

    /// `n` bytes written to the socket: it has room again.
    pub fn add_written(&self, n: usize) {
        self.written.fetch_add(n as u64, Ordering::AcqRel);
        if self.write_blocked.load(Ordering::Acquire) {
            self.write_blocked.store(false, Ordering::Release);
        }
    }

    /// A write found the socket's buffer full.
    pub fn write_blocked(&self) {
        self.write_blocked.store(true, Ordering::Release);
    }

    /// A [`Writer`] for one answer's body, not yet waiting.
    pub fn writer(self: &Arc<Self>) -> Writer {
        Writer {
            activity: self.clone(),
            waiting: false,
        }
    }

    fn write_sample(&self) -> WriteSample {
        WriteSample {
            written: self.written.load(Ordering::Acquire),
            blocked: self.write_blocked.load(Ordering::Acquire),
            waiting: self.waiting.load(Ordering::Acquire),
            asked: self.asked.load(Ordering::Acquire),
        }
    }

    /// Resolves once the connection's answers have made no progress towards
    /// the client for `timeout`: the socket refused every write
    /// ([`Stall::Socket`]), or some answer's body was waiting for hyper to
    /// ask for more and none was asked ([`Stall::Answer`]). Found between
    /// `timeout` and a quarter more after the stall began.
    ///
    /// An answer still being computed has no body yet, and a body waiting on
    /// its own source is not waiting for hyper: neither is a stall. The
    /// check is a sample of four counters every quarter of `timeout`, for as
    /// long as the connection is open; the requests themselves only count,
    /// and take no timer.
    pub async fn write_stalled(&self, timeout: Duration) -> Stall {
        let period = (timeout / STALL_SAMPLES).max(Duration::from_millis(1));
        let mut tick = tokio::time::interval(period);
        // Late ticks make intervals longer, never shorter: a stall is
        // never found early.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut watch = StallWatch::default();
        loop {
            tick.tick().await;
            if let Some(stall) = watch.observe(self.write_sample(), STALL_SAMPLES) {
                return stall;
            }
        }
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

    fn sample(written: u64, blocked: bool, waiting: usize, asked: u64) -> WriteSample {
        WriteSample {
            written,
            blocked,
            waiting,
            asked,
        }
    }

    #[test]
    fn a_stall_is_whole_intervals_with_nothing_moving() {
        let mut w = StallWatch::default();
        // Blocked at four samples in a row with nothing written: three
        // intervals, not yet a stall of three.
        for _ in 0..3 {
            assert_eq!(w.observe(sample(10, true, 0, 0), 3), None);
        }
        assert_eq!(w.observe(sample(10, true, 0, 0), 3), Some(Stall::Socket));
        // A byte written between two blocked samples starts it again.
        let mut w = StallWatch::default();
        for written in [10, 10, 11, 11, 11] {
            assert_eq!(w.observe(sample(written, true, 0, 0), 3), None);
        }
        assert_eq!(w.observe(sample(11, true, 0, 0), 3), Some(Stall::Socket));
        // Not blocked: a connection with nothing to write never stalls.
        let mut w = StallWatch::default();
        for _ in 0..10 {
            assert_eq!(w.observe(sample(10, false, 0, 0), 3), None);
        }
        // An answer waiting, never asked, while the socket writes (pings).
        let mut w = StallWatch::default();
        for (i, asked) in [0, 0, 0].into_iter().enumerate() {
            assert_eq!(w.observe(sample(i as u64, false, 1, asked), 3), None);
        }
        assert_eq!(w.observe(sample(9, false, 2, 0), 3), Some(Stall::Answer));
        // Any answer asked for more (or dropped) between samples restarts
        // it, and so does a sample with none waiting.
        let mut w = StallWatch::default();
        for (waiting, asked) in [(1, 0), (1, 0), (1, 1), (0, 1), (1, 1), (1, 1)] {
            assert_eq!(w.observe(sample(0, false, waiting, asked), 3), None);
        }
    }

    #[test]
    fn writers_count_while_waiting() {
        let a = Activity::new();
        let mut w = a.writer();
        assert_eq!(a.write_sample().waiting, 0);
        w.wait();
        w.wait();
        assert_eq!((a.write_sample().waiting, a.write_sample().asked), (1, 0));
        w.asked();
        w.asked();
        assert_eq!((a.write_sample().waiting, a.write_sample().asked), (0, 1));
        w.wait();
        drop(w);
        assert_eq!((a.write_sample().waiting, a.write_sample().asked), (0, 2));
        a.write_blocked();
        assert!(a.write_sample().blocked);
        a.add_written(3);
        assert_eq!(a.write_sample(), sample(3, false, 0, 2));
    }

    #[tokio::test]
    async fn a_stall_is_found_after_the_timeout_not_before() {
        let a = Activity::new();
        a.write_blocked();
        let started = Instant::now();
        let timeout = Duration::from_millis(400);
        assert_eq!(a.write_stalled(timeout).await, Stall::Socket);
        assert!(started.elapsed() >= timeout, "{:?}", started.elapsed());
        // Writing, slowly but a few bytes every interval: never a stall.
        let b = Activity::new();
        b.write_blocked();
        let watch = b.write_stalled(timeout);
        tokio::pin!(watch);
        for _ in 0..20 {
            assert!(
                tokio::time::timeout(Duration::from_millis(60), watch.as_mut())
                    .await
                    .is_err()
            );
            b.add_written(1);
            b.write_blocked();
        }
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
