//! The process's memory budget: the bytes a client can make the gateway
//! hold, counted at both ends of the request path. At the edge
//! (`edge::conn::budget`), request bodies while they are read and answers
//! their clients have not taken yet; at the V2 end (`upstream::client`),
//! V2 answers while they are read and for as long as anything holds them.
//! One [`MemoryBudget`] per process, `connections.memory_budget_bytes`,
//! made with the configuration the process starts with and shared by its
//! listeners and its V2 client.
//!
//! It lives here, below both, because the edge and the upstream client
//! sit in layers that may not import each other's way: it depends on no
//! part of the gateway, and is handed its gauge by whoever makes it.
//!
//! What each kind of charge may take:
//! - a body's bytes past [`SMALL_BODY`] only while bodies hold less than
//!   [`BODY_SHARE`] of the budget ([`Charge::try_add_body`]);
//! - a V2 answer's bytes only while the whole budget holds them
//!   ([`Charge::try_add`]), unless the call may not be refused;
//! - an answer already made always ([`Charge::add`]).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

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
    /// `v1compat_memory_held_bytes`, looked up once by whoever made the
    /// budget: every body and answer sets it, and a lookup by name is a
    /// hash and a lock in the recorder.
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
    /// An answer: one made for a client, or one V2 sent.
    Answer,
}

impl MemoryBudget {
    /// A budget of `limit` bytes whose bytes held are set on `gauge`.
    pub fn new(limit: usize, gauge: metrics::Gauge) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit,
            held: AtomicUsize::new(0),
            bodies: AtomicUsize::new(0),
            gauge,
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

    /// Takes `n` bytes (not a body's) if the budget holds them within its
    /// limit with what it holds already.
    fn try_add(&self, n: usize) -> bool {
        let mut held = self.held.load(Ordering::Acquire);
        loop {
            let now = held.saturating_add(n);
            if now > self.limit {
                return false;
            }
            match self
                .held
                .compare_exchange_weak(held, now, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    self.gauge.set(now as f64);
                    return true;
                }
                Err(seen) => held = seen,
            }
        }
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

    /// Whether the charge is on a budget at all.
    pub fn is_counted(&self) -> bool {
        self.budget.is_some()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The limit of the budget it is on, if it is on one.
    pub fn limit(&self) -> Option<usize> {
        self.budget.as_ref().map(|b| b.limit)
    }

    /// Takes `n` more bytes whatever the budget holds.
    pub fn add(&mut self, n: usize) {
        if let Some(b) = &self.budget {
            b.add(self.what, n);
        }
        self.bytes += n;
    }

    /// Takes `n` more bytes if the budget holds them within its limit.
    /// False when refused (nothing is taken then). Not for bodies, which
    /// have a share of their own ([`Charge::try_add_body`]).
    pub fn try_add(&mut self, n: usize) -> bool {
        debug_assert_ne!(self.what, Held::Body, "bodies take from their share");
        if let Some(b) = &self.budget {
            if !b.try_add(n) {
                return false;
            }
        }
        self.bytes += n;
        true
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

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(limit: usize) -> Arc<MemoryBudget> {
        MemoryBudget::new(limit, metrics::Gauge::noop())
    }

    #[test]
    fn bodies_past_the_small_size_stay_within_their_share_and_answers_are_counted() {
        let budget = budget(400 << 10);
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
    fn a_refusable_charge_takes_only_what_fits_under_the_limit() {
        let budget = budget(100 << 10);
        let mut body = budget.charge(Held::Body);
        assert!(body.try_add_body(30 << 10));
        let mut v2 = budget.charge(Held::Answer);
        assert!(v2.try_add(60 << 10));
        // 90 KiB held: 20 KiB more does not fit, 10 KiB does, exactly.
        assert!(!v2.try_add(20 << 10));
        assert_eq!((v2.bytes(), budget.held()), (60 << 10, 90 << 10));
        assert!(v2.try_add(10 << 10));
        assert!(budget.is_full());
        assert!(!v2.try_add(1));
        // A made answer is counted past the limit; nothing refusable fits then.
        let mut made = budget.charge(Held::Answer);
        made.add(50 << 10);
        let mut other = budget.charge(Held::Answer);
        assert!(!other.try_add(1));
        drop((v2, made));
        assert!(other.try_add(60 << 10));
        drop((body, other));
        assert_eq!(budget.held(), 0);
        // No budget, nothing refused.
        let mut none = Charge::none();
        assert!(!none.is_counted() && none.try_add(usize::MAX / 2));
    }
}
