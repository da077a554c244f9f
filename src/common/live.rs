//! A value the request path reads while a reload may replace it: one
//! atomic load gives a reader the whole value, which it keeps for as long
//! as it needs a consistent view (one V1 request); a store swaps in the
//! next one whole. The pipeline's snapshot and the admin listener's
//! settings live in one each; the reload stores into both. Uses nothing of
//! the gateway.

use std::sync::Arc;

use arc_swap::ArcSwap;

/// A swap cell: read without a lock, replaced whole.
pub struct Live<T> {
    current: ArcSwap<T>,
}

impl<T> Live<T> {
    pub fn new(value: Arc<T>) -> Arc<Live<T>> {
        Arc::new(Live {
            current: ArcSwap::new(value),
        })
    }

    /// The value now, kept by the caller for as long as it needs it.
    pub fn load(&self) -> Arc<T> {
        self.current.load_full()
    }

    /// Swaps in `value`; readers that loaded the old one keep it.
    pub fn store(&self, value: Arc<T>) {
        self.current.store(value);
    }
}
