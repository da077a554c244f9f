//! Which differences shaped one answer: a set of registry entries, marked
//! on the request path where each one's condition is decided (the
//! operations, the pipeline) and read once the answer is made, by the
//! migration inventory and the `v1compat_differences_applied_total`
//! counter. A bit per entry of [`ALL`](super::ALL), in one atomic word, so
//! marking costs an `or` and a request that hits nothing costs nothing.

use std::sync::atomic::{AtomicU32, Ordering};

use super::{Difference, ALL};

// One bit per entry: the registry must fit in the word.
const _: () = assert!(ALL.len() <= 32);

/// The differences applied to one request's answer.
#[derive(Debug, Default)]
pub struct Applied(AtomicU32);

impl Applied {
    pub fn new() -> Applied {
        Applied(AtomicU32::new(0))
    }

    /// Marks `difference` as applied. Shared by reference: the operation's
    /// futures mark it as they decide, the pipeline reads it after.
    pub fn note(&self, difference: &Difference) {
        if let Some(bit) = bit_of(difference) {
            self.0.fetch_or(1 << bit, Ordering::Relaxed);
        }
    }

    /// Marks every difference of `set`.
    pub fn add(&self, set: AppliedSet) {
        if !set.is_empty() {
            self.0.fetch_or(set.0, Ordering::Relaxed);
        }
    }

    /// What has been marked so far.
    pub fn get(&self) -> AppliedSet {
        AppliedSet(self.0.load(Ordering::Relaxed))
    }
}

/// A set of differences, read out of [`Applied`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppliedSet(pub u32);

impl AppliedSet {
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The set with `difference` added.
    pub fn with(self, difference: &Difference) -> AppliedSet {
        match bit_of(difference) {
            Some(bit) => AppliedSet(self.0 | 1 << bit),
            None => self,
        }
    }

    /// The union of two sets.
    pub fn union(self, other: AppliedSet) -> AppliedSet {
        AppliedSet(self.0 | other.0)
    }

    /// Each difference in the set with its position in [`ALL`], in
    /// registry order.
    pub fn iter(self) -> impl Iterator<Item = (usize, &'static Difference)> {
        ALL.iter()
            .enumerate()
            .filter(move |(i, _)| self.0 & (1 << i) != 0)
    }
}

/// `difference`'s place in the registry (its bit). An entry not in [`ALL`]
/// has none: a test keeps every entry there.
fn bit_of(difference: &Difference) -> Option<usize> {
    ALL.iter().position(|d| d.id == difference.id)
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;

    #[test]
    fn marks_are_kept_once_each_in_registry_order() {
        let a = Applied::new();
        assert!(a.get().is_empty());
        a.note(&LENIENT_INPUT);
        a.note(&ZERO_SYSTEM_LIMITS);
        a.note(&LENIENT_INPUT);
        let ids: Vec<_> = a.get().iter().map(|(_, d)| d.id).collect();
        assert_eq!(ids, ["zero_system_limits", "lenient_input"]);
        let more = a.get().with(&ACCOUNT_TRAFFIC);
        assert_eq!(more.iter().count(), 3);
        assert_eq!(more.union(AppliedSet::default()), more);
    }

    #[test]
    fn every_entry_has_a_bit_of_its_own() {
        let mut seen = 0u32;
        for d in ALL {
            let bit = bit_of(d).expect("in the registry");
            assert_eq!(seen & (1 << bit), 0, "{} shares a bit", d.id);
            seen |= 1 << bit;
        }
    }
}
