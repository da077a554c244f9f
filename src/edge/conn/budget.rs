//! The memory a client can make the gateway hold, counted at the edge of
//! the request path: request bodies while they are read and answers that
//! their clients have not taken yet. One [`MemoryBudget`] per process
//! (made with the configuration it starts with, shared by its listeners),
//! `connections.memory_budget_bytes`; and per connection, at most
//! `connections.max_held_streams` streams reading a body or holding an
//! answer not yet taken ([`ConnLoad`]).
//!
//! What happens at the bound:
//! - a new request is answered 429 / 4290 before anything of it is read
//!   when the budget is full, or when its connection already has
//!   `max_held_streams` streams holding bytes (`conn::service`);
//! - a body's bytes past [`SMALL_BODY`] are taken from the budget only
//!   while bodies hold less than [`BODY_SHARE`] of it (the rest is kept
//!   for answers and small requests, so slow uploads cannot lock out
//!   other clients); a body that cannot have them is refused 429 / 4290;
//! - an answer already made is always counted, never dropped: a client
//!   that takes none of it is closed after `connections.write_timeout_ms`
//!   (`conn::connection`), which frees it.
//!
//! `v1compat_memory_held_bytes` is the bytes held now;
//! `v1compat_memory_refusals_total{reason}` counts the refusals.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub(crate) use crate::telemetry::{MEMORY_HELD, MEMORY_REFUSALS};

/// The first bytes of every body are counted but never refused: a V1
/// request is a small JSON object, and one of that size always gets in.
pub(crate) const SMALL_BODY: usize = 16 << 10;

/// The share of the budget bodies past [`SMALL_BODY`] may hold, in
/// quarters of it.
pub(crate) const BODY_SHARE: usize = 3;

/// The process-wide count of bytes held, and its bound.
pub struct MemoryBudget {
    limit: usize,
    held: AtomicUsize,
    /// What bodies hold of `held`.
    bodies: AtomicUsize,
    /// `v1compat_memory_held_bytes`, looked up once: every body and answer
    /// sets it, and a lookup by name is a hash and a lock in the recorder.
    gauge: metrics::Gauge,
}

impl fmt::Debug for MemoryBudget {
    // The limit only: the bytes held change all the time, and a reload
    // compares configurations by their text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("limit", &self.limit)
            .finish()
    }
}

/// What a charge is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    Body,
    Answer,
}

impl MemoryBudget {
    pub fn new(limit: usize) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit,
            held: AtomicUsize::new(0),
            bodies: AtomicUsize::new(0),
            gauge: metrics::gauge!(MEMORY_HELD),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Whether a new request is to be refused.
    pub fn is_full(&self) -> bool {
        self.held() >= self.limit
    }

    fn add(&self, what: Held, n: usize) {
        let now = self.held.fetch_add(n, Ordering::AcqRel) + n;
        if what == Held::Body {
            self.bodies.fetch_add(n, Ordering::AcqRel);
        }
        self.gauge.set(now as f64);
    }

    fn sub(&self, what: Held, n: usize) {
        let now = self.held.fetch_sub(n, Ordering::AcqRel) - n;
        if what == Held::Body {
            self.bodies.fetch_sub(n, Ordering::AcqRel);
        }
        self.gauge.set(now as f64);
    }

    /// Takes `n` bytes for a body if bodies hold less than their share of
    /// the budget with them.
    fn try_add_body(&self, n: usize) -> bool {
        let share = self.limit / 4 * BODY_SHARE;
        let mut bodies = self.bodies.load(Ordering::Acquire);
        loop {
            if bodies.saturating_add(n) > share {
                return false;
            }
            match self.bodies.compare_exchange_weak(
                bodies,
                bodies + n,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => bodies = now,
            }
        }
        let now = self.held.fetch_add(n, Ordering::AcqRel) + n;
        self.gauge.set(now as f64);
        true
    }

    /// A charge of nothing yet, for `what`.
    pub fn charge(self: &Arc<Self>, what: Held) -> Charge {
        Charge {
            budget: Some(self.clone()),
            what,
            bytes: 0,
        }
    }
}

/// Bytes taken from a [`MemoryBudget`], given back when dropped.
pub struct Charge {
    budget: Option<Arc<MemoryBudget>>,
    what: Held,
    bytes: usize,
}

impl Charge {
    /// A charge on no budget (tests, and callers outside a listener).
    pub fn none() -> Charge {
        Charge {
            budget: None,
            what: Held::Answer,
            bytes: 0,
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes `n` more bytes whatever the budget holds.
    pub fn add(&mut self, n: usize) {
        if let Some(b) = &self.budget {
            b.add(self.what, n);
        }
        self.bytes += n;
    }

    /// Takes `n` more bytes of a body: the first [`SMALL_BODY`] always,
    /// the rest only within the bodies' share. False when refused (nothing
    /// is taken then).
    pub fn try_add_body(&mut self, n: usize) -> bool {
        let Some(b) = &self.budget else {
            self.bytes += n;
            return true;
        };
        let free = SMALL_BODY.saturating_sub(self.bytes).min(n);
        let rest = n - free;
        if rest > 0 && !b.try_add_body(rest) {
            return false;
        }
        if free > 0 {
            b.add(Held::Body, free);
        }
        self.bytes += n;
        true
    }

    /// Gives `n` bytes back (an answer's bytes taken by the client).
    pub fn release(&mut self, n: usize) {
        let n = n.min(self.bytes);
        if let Some(b) = &self.budget {
            b.sub(self.what, n);
        }
        self.bytes -= n;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.release(self.bytes);
    }
}

/// One connection's streams that hold bytes: reading a body, or holding an
/// answer not yet taken.
pub(crate) struct ConnLoad {
    pub budget: Arc<MemoryBudget>,
    holding: AtomicUsize,
    max: usize,
}

impl ConnLoad {
    pub(crate) fn new(budget: Arc<MemoryBudget>, max_held_streams: usize) -> Arc<ConnLoad> {
        Arc::new(ConnLoad {
            budget,
            holding: AtomicUsize::new(0),
            max: max_held_streams,
        })
    }

    /// Why a new request on this connection is refused, if it is.
    pub(crate) fn refusal(&self) -> Option<&'static str> {
        if self.budget.is_full() {
            Some("budget")
        } else if self.holding.load(Ordering::Acquire) >= self.max {
            Some("connection")
        } else {
            None
        }
    }

    /// Marks one stream as holding bytes until the mark is dropped.
    pub(crate) fn hold(self: &Arc<Self>) -> Holding {
        self.holding.fetch_add(1, Ordering::AcqRel);
        Holding(self.clone())
    }
}

/// A stream counted in its connection's [`ConnLoad`] while alive.
pub(crate) struct Holding(Arc<ConnLoad>);

impl Drop for Holding {
    fn drop(&mut self) {
        self.0.holding.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Counts a refusal at the bound.
pub(crate) fn refused(reason: &'static str) {
    metrics::counter!(MEMORY_REFUSALS, "reason" => reason).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_past_the_small_size_stay_within_their_share_and_answers_are_counted() {
        let budget = MemoryBudget::new(400 << 10);
        // Bodies may hold 300 KiB past their small parts.
        let mut a = budget.charge(Held::Body);
        assert!(a.try_add_body(200 << 10));
        let mut b = budget.charge(Held::Body);
        assert!(!b.try_add_body(200 << 10), "over the bodies' share");
        assert_eq!(b.bytes(), 0);
        // A small body always gets in.
        assert!(b.try_add_body(SMALL_BODY));
        assert_eq!(budget.held(), (200 << 10) + SMALL_BODY);
        assert!(!budget.is_full());
        // Answers are counted whatever the share.
        let mut answer = budget.charge(Held::Answer);
        answer.add(300 << 10);
        assert!(budget.is_full());
        answer.release(100 << 10);
        assert_eq!(budget.held(), (400 << 10) + SMALL_BODY);
        drop((a, b, answer));
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn a_connection_holds_at_most_its_streams() {
        let load = ConnLoad::new(MemoryBudget::new(1 << 20), 2);
        let one = load.hold();
        assert_eq!(load.refusal(), None);
        let two = load.hold();
        assert_eq!(load.refusal(), Some("connection"));
        drop(one);
        assert_eq!(load.refusal(), None);
        drop(two);
        let mut full = load.budget.charge(Held::Answer);
        full.add(1 << 20);
        assert_eq!(load.refusal(), Some("budget"));
    }
}
