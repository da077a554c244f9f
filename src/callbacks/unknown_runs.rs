//! Beside the request path, in the deliverer: how many V2 reads one
//! token's callbacks may cost for runs V2 does not know. A token is valid
//! for its client's runs, but the body V2 posts with it names the run; a
//! sender holding a token could post callbacks on made-up runs, each one a
//! V2 read with the client's key before it goes dead. Each token gets
//! `callbacks.unknown_run_reads_per_hour` such reads an hour; past them,
//! its callbacks go dead without a read (counted) until the hour is over.
//! A read is taken from the budget before it is made and given back when
//! it found the run (or V2 did not answer), so reads that find the run
//! cost nothing.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;

/// The window each token's budget is counted over.
pub(crate) const WINDOW_MS: u64 = 3_600_000;

/// Tokens tracked at most; past it, windows that are over are forgotten,
/// and if that is not enough, all are (a reset, not a refusal).
const MAX_TOKENS: usize = 10_000;

/// Unknown-run reads per token in the current window.
pub(crate) struct UnknownRuns {
    per_window: u32,
    /// Tokens are kept by a keyed hash, not by their text (long, and
    /// secret-bearing).
    hasher: RandomState,
    seen: Mutex<HashMap<u64, (u64, u32)>>,
}

impl UnknownRuns {
    pub(crate) fn new(per_window: u32) -> UnknownRuns {
        UnknownRuns {
            per_window,
            hasher: RandomState::new(),
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<u64, (u64, u32)>) -> T) -> T {
        f(&mut self.seen.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Spends one read of `token`'s budget at `now_ms`, if any is left:
    /// taken before the read, so attempts under way at once cannot all
    /// spend the last one. A read that finds the run gives it back
    /// ([`UnknownRuns::found`]).
    pub(crate) fn try_spend(&self, token: &str, now_ms: u64) -> bool {
        let key = self.hasher.hash_one(token);
        self.with(|seen| {
            if seen.len() >= MAX_TOKENS && !seen.contains_key(&key) {
                seen.retain(|_, (start, _)| now_ms.saturating_sub(*start) < WINDOW_MS);
                if seen.len() >= MAX_TOKENS {
                    seen.clear();
                }
            }
            let entry = seen.entry(key).or_insert((now_ms, 0));
            if now_ms.saturating_sub(entry.0) >= WINDOW_MS {
                *entry = (now_ms, 0);
            }
            if entry.1 >= self.per_window {
                return false;
            }
            entry.1 += 1;
            true
        })
    }

    /// The read spent at `now_ms` did not find a run V2 does not know
    /// (it found the run, or V2 gave no answer): given back.
    pub(crate) fn found(&self, token: &str, now_ms: u64) {
        let key = self.hasher.hash_one(token);
        self.with(|seen| {
            if let Some(entry) = seen.get_mut(&key) {
                if now_ms.saturating_sub(entry.0) < WINDOW_MS {
                    entry.1 = entry.1.saturating_sub(1);
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_token_has_its_own_budget_for_an_hour() {
        let limit = UnknownRuns::new(2);
        let t0 = 1_000_000;
        // A read that found its run costs nothing.
        assert!(limit.try_spend("a", t0));
        limit.found("a", t0);
        for _ in 0..2 {
            assert!(limit.try_spend("a", t0));
        }
        assert!(!limit.try_spend("a", t0 + 1));
        assert!(limit.try_spend("b", t0 + 1), "another token's budget");
        // The hour over, the budget is back.
        assert!(limit.try_spend("a", t0 + WINDOW_MS));
        assert!(limit.try_spend("a", t0 + WINDOW_MS));
        assert!(!limit.try_spend("a", t0 + WINDOW_MS));
    }

    #[test]
    fn the_tokens_tracked_are_bounded() {
        let limit = UnknownRuns::new(1);
        for i in 0..MAX_TOKENS + 5 {
            limit.try_spend(&format!("t{i}"), 0);
        }
        assert!(limit.with(|seen| seen.len()) <= MAX_TOKENS);
    }
}
