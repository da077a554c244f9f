//! Wake-ups a task gives itself, absorbed. A connection task wakes itself
//! several times per request without anything arriving from outside: hyper's
//! dispatcher feeding the request body to the service it polls, a request
//! marking the connection busy and then idle ([`super::activity`]), the
//! V2 client handing a request to its connection. Each such wake-up sends
//! the task back through tokio's scheduler, and a task woken while it runs is
//! rescheduled as a yield, which wakes a parked worker thread (a `futex` and
//! an `epoll_wait` each, on the other core). [`Coalesce`] wraps the task's
//! future: a wake-up that arrives while the future is being polled makes it
//! poll again at once, inside the same turn; one from elsewhere (the socket,
//! another task, a timer) wakes the task as before.
//!
//! Used for every connection task on tokio's multi-threaded runtime: the
//! public and admin listeners' (in `edge::conn`) and the V2 client's and
//! HTTP/2 streams', through [`CoalescingExecutor`]; not on the
//! single-threaded one, where a self-wake wakes no other thread
//! ([`worth_coalescing`]). [`WhenWoken`], beside it, spares the connection
//! task's rarely-ready branches, and a request's answer, a poll each time
//! the task runs for something else.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// Polls again in the same turn at most this many times in a row, then
/// yields to the scheduler like any woken task, so a future that always
/// wakes itself cannot keep its worker from other tasks.
const MAX_REPOLLS: usize = 16;

pin_project_lite::pin_project! {
    /// `inner`, with its self-wakes turned into immediate polls.
    pub struct Coalesce<F> {
        #[pin]
        inner: F,
        waker: Option<(Arc<Signal>, Waker)>,
    }
}

impl<F: Future> Coalesce<F> {
    pub(crate) fn new(inner: F) -> Coalesce<F> {
        Coalesce { inner, waker: None }
    }
}

/// The waker the inner future sees.
#[derive(Default)]
struct Signal {
    /// The inner future is being polled.
    polling: AtomicBool,
    /// It was woken during that poll.
    woken: AtomicBool,
    /// The task's own waker, for wake-ups from outside a poll.
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // SeqCst on both flags, here and in `poll`: either this wake sees
        // the poll still running, or the poll sees this wake after it ended.
        self.woken.store(true, Ordering::SeqCst);
        if !self.polling.load(Ordering::SeqCst) {
            self.task.wake();
        }
    }
}

impl<F: Future> Future for Coalesce<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        let (signal, waker) = this.waker.get_or_insert_with(|| {
            let signal = Arc::new(Signal::default());
            let waker = Waker::from(signal.clone());
            (signal, waker)
        });
        signal.task.register(cx.waker());
        let mut inner_cx = Context::from_waker(waker);
        for _ in 0..MAX_REPOLLS {
            signal.woken.store(false, Ordering::SeqCst);
            signal.polling.store(true, Ordering::SeqCst);
            let polled = this.inner.as_mut().poll(&mut inner_cx);
            signal.polling.store(false, Ordering::SeqCst);
            if polled.is_ready() {
                return polled;
            }
            if !signal.woken.load(Ordering::SeqCst) {
                return Poll::Pending;
            }
        }
        // Still waking itself: go round the scheduler like any other task.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

pin_project_lite::pin_project! {
    /// `inner`, polled only when it asked to be: after its first poll, a
    /// poll of the task reaches it only if its waker fired since. For the
    /// branches of the connection task's `select!` that seldom complete (the
    /// stop signal, the idle deadline), and for a request's answer
    /// ([`super::service::ConnFuture`]): the task is polled several times per
    /// request, and each poll went through these too.
    pub struct WhenWoken<F> {
        #[pin]
        inner: F,
        gate: Option<(Arc<Gate>, Waker)>,
    }
}

impl<F: Future> WhenWoken<F> {
    pub(crate) fn new(inner: F) -> WhenWoken<F> {
        WhenWoken { inner, gate: None }
    }
}

/// The waker [`WhenWoken`]'s inner future sees.
#[derive(Default)]
struct Gate {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Gate {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        self.task.wake();
    }
}

impl<F: Future> Future for WhenWoken<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let first = this.gate.is_none();
        let (gate, waker) = this.gate.get_or_insert_with(|| {
            let gate = Arc::new(Gate::default());
            let waker = Waker::from(gate.clone());
            (gate, waker)
        });
        gate.task.register(cx.waker());
        // A wake-up that lands between this check and the poll below makes
        // the next poll look again: one poll too many, never one too few.
        if !first && !gate.woken.swap(false, Ordering::SeqCst) {
            return Poll::Pending;
        }
        this.inner.poll(&mut Context::from_waker(waker))
    }
}

/// Whether tasks spawned from here are worth wrapping in [`Coalesce`]: on
/// tokio's multi-threaded runtime a self-wake can wake another worker; on
/// the single-threaded one (the gateway's on one CPU) there is none to
/// wake, the task is simply polled again in the same turn of the
/// scheduler, and the wrapper's own bookkeeping is all it would add (about
/// 200 instructions a run detail, the same system calls:
/// `deploy/bench/RESULTS.md`).
pub(crate) fn worth_coalescing() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|handle| handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread)
}

/// hyper's executor for what it spawns (the V2 client's connection tasks,
/// HTTP/2 streams): tokio tasks, each wrapped in [`Coalesce`] where that
/// is [worth it](worth_coalescing).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CoalescingExecutor;

impl<F> hyper::rt::Executor<F> for CoalescingExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        if worth_coalescing() {
            tokio::spawn(Coalesce::new(fut));
        } else {
            tokio::spawn(fut);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Wakes itself `n` times, then is ready; counts its polls.
    struct SelfWaking {
        left: usize,
        polls: Arc<AtomicUsize>,
    }

    impl Future for SelfWaking {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.left == 0 {
                return Poll::Ready(());
            }
            self.left -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// Counts the wake-ups of the outer task.
    #[derive(Default)]
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn self_wakes_are_polled_again_in_the_same_turn() {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut fut = Box::pin(Coalesce::new(SelfWaking {
            left: 3,
            polls: polls.clone(),
        }));
        let outer = Arc::new(Count::default());
        let waker = Waker::from(outer.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(fut.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 4);
        assert_eq!(
            outer.0.load(Ordering::SeqCst),
            0,
            "the task was never woken"
        );
    }

    #[test]
    fn a_future_that_keeps_waking_itself_yields_to_the_scheduler() {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut fut = Box::pin(Coalesce::new(SelfWaking {
            left: usize::MAX,
            polls: polls.clone(),
        }));
        let outer = Arc::new(Count::default());
        let waker = Waker::from(outer.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), MAX_REPOLLS);
        assert_eq!(outer.0.load(Ordering::SeqCst), 1);
    }

    /// Pending until released; counts its polls.
    struct Latch {
        open: Arc<AtomicBool>,
        waker: Arc<std::sync::Mutex<Option<Waker>>>,
        polls: Arc<AtomicUsize>,
    }

    impl Future for Latch {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.open.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn when_woken_polls_its_future_only_after_a_wake() {
        let (open, waker, polls) = Default::default();
        let latch = Latch {
            open: Arc::clone(&open),
            waker: Arc::clone(&waker),
            polls: Arc::clone(&polls),
        };
        let mut fut = Box::pin(WhenWoken::new(latch));
        let outer = Arc::new(Count::default());
        let outer_waker = Waker::from(outer.clone());
        let mut cx = Context::from_waker(&outer_waker);
        for _ in 0..5 {
            assert!(fut.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::SeqCst), 1, "only the first poll");
        open.store(true, Ordering::SeqCst);
        let inner_waker: Waker = waker.lock().unwrap().take().unwrap();
        inner_waker.wake();
        assert_eq!(outer.0.load(Ordering::SeqCst), 1, "the task was woken");
        assert!(fut.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_wake_from_elsewhere_reaches_the_task() {
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let task = tokio::spawn(Coalesce::new(rx));
        tokio::task::yield_now().await;
        tx.send(7).unwrap();
        assert_eq!(task.await.unwrap().unwrap(), 7);
    }

    /// Wrapped only where a self-wake could wake another worker.
    #[test]
    fn tasks_are_wrapped_on_the_multi_threaded_runtime_only() {
        assert!(!worth_coalescing(), "outside a runtime");
        let single = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(!single.block_on(async { worth_coalescing() }));
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        assert!(multi.block_on(async { worth_coalescing() }));
    }
}
