//! A future under a deadline, for the two every translated request runs
//! under: its own (`pipeline`) and its V2 attempt's (`upstream::client`).
//! tokio's `Timeout` polls its timer each time the future is polled, and
//! so registers the task's waker with the timer again at every poll of a
//! request (the body arriving, the V2 answer, each step of the connection),
//! with a check of the task's budget around it. [`Deadline`] registers
//! once, and again only if the waker changes; at the other polls it reads
//! whether the timer has fired, one load.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::time::{Instant, Sleep};

/// The deadline passed before the future was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

pin_project_lite::pin_project! {
    /// `inner`, or [`Elapsed`] once `sleep` has fired.
    pub struct Deadline<F> {
        #[pin]
        inner: F,
        #[pin]
        sleep: Sleep,
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
        registered: None,
    }
}

impl<F: Future> Future for Deadline<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(out) = this.inner.poll(cx) {
            return Poll::Ready(Ok(out));
        }
        match this.registered {
            Some(waker) if waker.will_wake(cx.waker()) => {
                if this.sleep.is_elapsed() {
                    Poll::Ready(Err(Elapsed))
                } else {
                    Poll::Pending
                }
            }
            _ => {
                // Registered whatever the task's budget: a timer left
                // unregistered because the inner future spent the budget
                // would never fire.
                let sleep = std::pin::pin!(tokio::task::unconstrained(this.sleep.as_mut()));
                match sleep.poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
                    Poll::Pending => {
                        *this.registered = Some(cx.waker().clone());
                        Poll::Pending
                    }
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
        // Woken often by itself (a request's future is polled many times),
        // never done.
        let busy = async {
            loop {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        let answer =
            tokio::time::timeout(Duration::from_secs(60), deadline_at(started + SHORT, busy)).await;
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
