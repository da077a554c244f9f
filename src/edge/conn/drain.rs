//! The shutdown signals of one listener, in the order they fire:
//!
//! 1. **draining** — `/readyz` answers 503, so a load balancer stops sending
//!    new traffic; the listener still accepts (for `shutdown.drain_delay_ms`),
//!    and HTTP/1 answers carry `Connection: close`, so keep-alive clients
//!    move to new connections (elsewhere, behind a load balancer) while the
//!    listener still takes them.
//! 2. **stop** — the listener stops accepting (connections already in the
//!    kernel's backlog are still taken and served), every connection ends
//!    after the request it is serving, or at once if it is idle and the
//!    client has sent nothing more.
//! 3. **cut** — at the grace deadline, requests still in progress are
//!    answered with a V1 envelope and their connections closed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

#[derive(Clone)]
pub struct Drain {
    inner: Arc<Signals>,
}

struct Signals {
    draining: watch::Sender<bool>,
    /// `draining`'s value, read by every answer without the channel's lock.
    draining_now: AtomicBool,
    stop: watch::Sender<bool>,
    /// `stop`'s value, read by every answer without the channel's lock.
    stopping: AtomicBool,
    cut: watch::Sender<bool>,
}

impl Default for Drain {
    fn default() -> Self {
        Drain::new()
    }
}

impl Drain {
    pub fn new() -> Drain {
        Drain {
            inner: Arc::new(Signals {
                draining: watch::channel(false).0,
                draining_now: AtomicBool::new(false),
                stop: watch::channel(false).0,
                stopping: AtomicBool::new(false),
                cut: watch::channel(false).0,
            }),
        }
    }

    /// Step 1: readiness goes false.
    pub fn begin(&self) {
        self.inner.draining_now.store(true, Ordering::Release);
        self.inner.draining.send_replace(true);
    }

    /// Step 2 (implies step 1).
    pub fn stop(&self) {
        self.begin();
        self.inner.stopping.store(true, Ordering::Release);
        self.inner.stop.send_replace(true);
    }

    /// Step 3 (implies steps 1 and 2).
    pub fn cut(&self) {
        self.stop();
        self.inner.cut.send_replace(true);
    }

    pub fn is_draining(&self) -> bool {
        self.inner.draining_now.load(Ordering::Acquire)
    }

    pub fn is_stopping(&self) -> bool {
        self.inner.stopping.load(Ordering::Acquire)
    }

    pub async fn stopped(&self) {
        let mut rx = self.inner.stop.subscribe();
        let _ = rx.wait_for(|v| *v).await;
    }

    pub async fn cut_now(&self) {
        let mut rx = self.inner.cut.subscribe();
        let _ = rx.wait_for(|v| *v).await;
    }
}
