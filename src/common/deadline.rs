//! Futures under a deadline, for the two every translated request runs
//! under: its own (`pipeline`, a [`Deadline`]) and its V2 attempts'
//! (`upstream::client`, each a [`NestedDeadline`] inside it).
//!
//! One timer serves both. A request's [`Deadline`] holds the only timer:
//! while it polls its future, each attempt inside says when it must end,
//! and the timer is set to the earliest of those and the request's own
//! deadline. When it fires for an attempt, the attempt learns so at its
//! next poll and ends as elapsed; the request goes on (a retry, another
//! call). A timer is a wheel insertion and removal under the time driver's
//! lock, a handle and a waker cloned; a run detail now pays for one, not
//! two. An attempt polled outside any request (the callback relay's
//! enrichment call, a test) keeps a timer of its own.
//!
//! tokio's `Timeout` polls its timer each time the future is polled, and
//! so registers the task's waker with the timer again at every poll of a
//! request (the body arriving, the V2 answer, each step of the connection),
//! with a check of the task's budget around it. [`Deadline`] registers
//! once, and again only if the waker or the time changes; at the other
//! polls it reads whether the timer has fired, one load.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::time::{Instant, Sleep};

/// The deadline passed before the future was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

/// What a request's [`Deadline`] shares with the attempts inside it while
/// it polls them.
#[derive(Clone, Copy)]
struct Scope {
    /// The time the timer fired for, if it has: every attempt due by then
    /// is elapsed.
    fired: Option<Instant>,
    /// The earliest deadline of an attempt still pending, gathered as they
    /// are polled.
    wanted: Option<Instant>,
}

thread_local! {
    /// The scope of the [`Deadline`] polling its future on this thread,
    /// if one is.
    static SCOPE: Cell<Option<Scope>> = const { Cell::new(None) };
}

/// Puts back the scope a [`Deadline`] replaced while it polls its future,
/// however the poll ends: a panic caught above it (the front answers one
/// with a 500) must not leave the thread believing it is inside a request,
/// or an attempt polled alone there would keep no timer.
struct Entered(Option<Scope>);

impl Drop for Entered {
    fn drop(&mut self) {
        SCOPE.set(self.0);
    }
}

pin_project_lite::pin_project! {
    /// `inner`, or [`Elapsed`] once `at` has passed; the timer of the
    /// [`NestedDeadline`]s inside it too.
    pub struct Deadline<F> {
        #[pin]
        inner: F,
        #[pin]
        sleep: Sleep,
        at: Instant,
        // The waker the timer was last given; `None` before the first
        // registration.
        registered: Option<Waker>,
    }
}

/// `inner`, unless `at` passes first.
pub fn deadline_at<F: Future>(at: Instant, inner: F) -> Deadline<F> {
    Deadline {
        inner,
        sleep: tokio::time::sleep_until(at),
        at,
        registered: None,
    }
}

impl<F: Future> Future for Deadline<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let fired =
            (this.registered.is_some() && this.sleep.is_elapsed()).then(|| this.sleep.deadline());
        let entered = Entered(SCOPE.replace(Some(Scope {
            fired,
            wanted: None,
        })));
        let polled = this.inner.poll(cx);
        let scope = SCOPE.get();
        drop(entered);
        if let Poll::Ready(out) = polled {
            return Poll::Ready(Ok(out));
        }
        if fired.is_some_and(|t| t >= *this.at) {
            return Poll::Ready(Err(Elapsed));
        }
        let due = scope
            .and_then(|s| s.wanted)
            .map_or(*this.at, |wanted| wanted.min(*this.at));
        let moved = due != this.sleep.deadline();
        match this.registered {
            Some(waker) if !moved && fired.is_none() && waker.will_wake(cx.waker()) => {
                return Poll::Pending
            }
            _ => {}
        }
        if moved || fired.is_some() {
            // Later: tokio only notes it (the wheel entry, found early,
            // is moved then). Earlier, or fired: the entry is moved now.
            this.sleep.as_mut().reset(due);
        }
        // Registered whatever the task's budget: a timer left unregistered
        // because the inner future spent the budget would never fire.
        let sleep = std::pin::pin!(tokio::task::unconstrained(this.sleep.as_mut()));
        match sleep.poll(cx) {
            Poll::Ready(()) if due >= *this.at => Poll::Ready(Err(Elapsed)),
            Poll::Ready(()) => {
                // An attempt's deadline has passed already: poll again at
                // once, for the attempt to see it.
                *this.registered = Some(cx.waker().clone());
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Poll::Pending => {
                *this.registered = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// `inner`, or [`Elapsed`] once `at` has passed, kept by the timer of
    /// the [`Deadline`] polling it, or by one of its own when none is.
    pub struct NestedDeadline<F> {
        #[pin]
        inner: F,
        at: Instant,
        // Made only when polled outside a request's deadline.
        own: Option<Pin<Box<Deadline<std::future::Pending<()>>>>>,
    }
}

/// `inner`, unless `at` passes first; see [`NestedDeadline`].
pub fn nested_deadline_at<F: Future>(at: Instant, inner: F) -> NestedDeadline<F> {
    NestedDeadline {
        inner,
        at,
        own: None,
    }
}

impl<F: Future> Future for NestedDeadline<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(out) = this.inner.poll(cx) {
            return Poll::Ready(Ok(out));
        }
        let at = *this.at;
        match SCOPE.get() {
            Some(scope) => {
                if scope.fired.is_some_and(|t| t >= at) {
                    return Poll::Ready(Err(Elapsed));
                }
                SCOPE.set(Some(Scope {
                    wanted: Some(scope.wanted.map_or(at, |wanted| wanted.min(at))),
                    ..scope
                }));
                Poll::Pending
            }
            None => {
                let own = this
                    .own
                    .get_or_insert_with(|| Box::pin(deadline_at(at, std::future::pending::<()>())));
                match own.as_mut().poll(cx) {
                    Poll::Ready(_) => Poll::Ready(Err(Elapsed)),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use std::time::Duration;

    // Real time, in milliseconds: the timers under test are the waiting.
    // (tokio's paused time needs its `test-util` feature, which a build of
    // the binary beside an example would then carry too.)
    const SHORT: Duration = Duration::from_millis(30);

    /// A future woken often by itself (a request's future is polled many
    /// times), never done.
    async fn busy() {
        loop {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    #[tokio::test]
    async fn the_answer_of_a_future_done_in_time() {
        let at = Instant::now() + Duration::from_secs(60);
        let done = deadline_at(at, async {
            tokio::task::yield_now().await;
            7
        });
        assert_eq!(done.await, Ok(7));
    }

    #[tokio::test]
    async fn a_future_still_pending_at_the_deadline_is_elapsed() {
        let started = Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(60),
            deadline_at(started + SHORT, busy()),
        )
        .await;
        assert_eq!(
            answer.expect("elapsed at the deadline"),
            Err::<(), _>(Elapsed)
        );
        assert!(started.elapsed() >= SHORT);
    }

    #[tokio::test]
    async fn a_deadline_already_past_is_elapsed_at_the_first_poll() {
        let never = std::future::pending::<()>();
        let past = Instant::now() - Duration::from_millis(10);
        let mut fut = Box::pin(deadline_at(past, never));
        assert_eq!(fut.as_mut().now_or_never(), Some(Err(Elapsed)));
    }

    /// A request under a long deadline, its attempts under short ones.
    fn request<F: Future>(inner: F) -> Deadline<F> {
        deadline_at(Instant::now() + Duration::from_secs(60), inner)
    }

    #[tokio::test]
    async fn an_attempt_ends_at_its_deadline_and_the_request_goes_on() {
        let started = Instant::now();
        let answer = request(async {
            let first = nested_deadline_at(started + SHORT, std::future::pending::<()>()).await;
            // The retry, given longer, is done in time.
            let second = nested_deadline_at(started + SHORT * 10, async {
                tokio::time::sleep(SHORT).await;
                7
            })
            .await;
            (first, second)
        });
        let answer = tokio::time::timeout(Duration::from_secs(60), answer).await;
        assert_eq!(answer.expect("done"), Ok((Err(Elapsed), Ok(7))));
        assert!(started.elapsed() >= SHORT * 2);
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[tokio::test]
    async fn attempts_inside_a_request_keep_no_timer_of_their_own() {
        let mut attempt = Box::pin(nested_deadline_at(
            Instant::now() + SHORT,
            std::future::pending::<()>(),
        ));
        let mut polled = Box::pin(request(std::future::poll_fn(|cx| {
            assert!(attempt.as_mut().poll(cx).is_pending());
            Poll::Ready(attempt.own.is_none())
        })));
        assert_eq!(polled.as_mut().now_or_never(), Some(Ok(true)));
        // Polled alone, it makes one.
        let mut alone = Box::pin(nested_deadline_at(
            Instant::now() + SHORT,
            std::future::pending::<()>(),
        ));
        assert!(alone.as_mut().now_or_never().is_none());
        assert!(alone.own.is_some());
    }

    #[tokio::test]
    async fn a_panic_inside_a_request_leaves_no_scope_behind() {
        let mut panicking = Box::pin(request(async {
            panic!("an operation's bug");
        }));
        let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = panicking.as_mut().poll(&mut cx);
        }));
        assert!(caught.is_err());
        assert!(SCOPE.get().is_none());
        let mut alone = Box::pin(nested_deadline_at(
            Instant::now() + SHORT,
            std::future::pending::<()>(),
        ));
        assert!(alone.as_mut().now_or_never().is_none());
        assert!(alone.own.is_some(), "an attempt alone keeps its own timer");
    }

    #[tokio::test]
    async fn the_request_deadline_before_the_attempts_ends_the_request() {
        let started = Instant::now();
        let answer = deadline_at(
            started + SHORT,
            nested_deadline_at(
                started + Duration::from_secs(60),
                std::future::pending::<()>(),
            ),
        );
        let answer = tokio::time::timeout(Duration::from_secs(60), answer).await;
        assert_eq!(answer.expect("elapsed at the deadline"), Err(Elapsed));
        assert!(started.elapsed() >= SHORT);
    }

    #[tokio::test]
    async fn attempts_side_by_side_each_end_at_their_own_deadline() {
        let started = Instant::now();
        let answer = request(async {
            let short = nested_deadline_at(started + SHORT, std::future::pending::<()>());
            let long = nested_deadline_at(started + SHORT * 10, async {
                tokio::time::sleep(SHORT * 3).await;
                "in time"
            });
            tokio::join!(short, long)
        });
        let answer = tokio::time::timeout(Duration::from_secs(60), answer).await;
        assert_eq!(answer.expect("done"), Ok((Err(Elapsed), Ok("in time"))));
        // At the attempts' deadlines, not the request's.
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[tokio::test]
    async fn an_attempt_alone_is_elapsed_at_its_deadline() {
        let started = Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(60),
            nested_deadline_at(started + SHORT, busy()),
        )
        .await;
        assert_eq!(answer.expect("elapsed"), Err::<(), _>(Elapsed));
        assert!(started.elapsed() >= SHORT);
    }

    #[tokio::test]
    async fn the_timer_follows_the_future_to_another_waker() {
        let mut fut = Box::pin(deadline_at(
            Instant::now() + SHORT,
            std::future::pending::<()>(),
        ));
        // Polled once with a waker that wakes nothing: registered with it.
        assert!(fut.as_mut().now_or_never().is_none());
        // Then awaited by a task, whose waker the timer must wake instead
        // (kept to the first one, the task would never be woken).
        let other = tokio::spawn(fut);
        let answer = tokio::time::timeout(Duration::from_secs(60), other).await;
        assert_eq!(
            answer.expect("woken at the deadline").unwrap(),
            Err(Elapsed)
        );
    }
}
