//! The memory a client can make the gateway hold, as the connection layer
//! counts and bounds it: request bodies while they are read and answers
//! that their clients have not taken yet, in the process's
//! [`MemoryBudget`] (`connections.memory_budget_bytes`, defined in
//! [`crate::common::memory`] so that the V2 client counts the V2 answers it
//! reads in the same one); and per connection, at most
//! `connections.max_held_streams` streams reading a body or holding an
//! answer not yet taken ([`ConnLoad`]).
//!
//! What happens at the bound:
//! - a new request is answered 429 / 4290 before anything of it is read
//!   when the budget is full, or when its connection already has
//!   `max_held_streams` streams holding bytes (`conn::service`);
//! - a body's bytes past [`SMALL_BODY`](crate::common::memory::SMALL_BODY)
//!   are taken from the budget only while bodies hold less than three
//!   quarters of it (the rest is kept for answers and small requests, so
//!   slow uploads cannot lock out other clients); a body that cannot have
//!   them is refused 429 / 4290;
//! - an answer already made is always counted, never dropped: a client
//!   that takes none of it is closed after `connections.write_timeout_ms`
//!   (`conn::connection`), which frees it.
//!
//! `v1compat_memory_held_bytes` is the bytes held now;
//! `v1compat_memory_refusals_total{reason}` counts the refusals.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub(crate) use crate::common::memory::{Charge, Held, MemoryBudget};
pub(crate) use crate::telemetry::{MEMORY_HELD, MEMORY_REFUSALS};

/// The process's budget of `limit` bytes, its gauge looked up now.
pub(crate) fn process_budget(limit: usize) -> Arc<MemoryBudget> {
    MemoryBudget::new(limit, metrics::gauge!(MEMORY_HELD))
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
    fn a_connection_holds_at_most_its_streams() {
        let load = ConnLoad::new(MemoryBudget::new(1 << 20, metrics::Gauge::noop()), 2);
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
