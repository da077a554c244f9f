//! What every settings check shares, whichever part of the gateway owns the
//! settings: the bound on any concurrency a setting asks for, and the
//! "did you mean" hint for a misspelt name. Below everything; uses nothing
//! of the gateway.

/// The most any concurrency setting may ask for (`limits.max_in_flight`,
/// `shadow.max_in_flight`, the callback relay's): far above what one
/// process can use, and far below what a semaphore refuses.
pub const MAX_CONCURRENCY: usize = 1_000_000;

/// ` (did you mean `x`?)` for the closest of `names`, when one is close.
pub fn suggestion<'a>(name: &str, names: impl Iterator<Item = &'a str>) -> String {
    names
        .map(|n| (strsim::damerau_levenshtein(name, n), n))
        .filter(|(d, n)| *d <= 2 && *d < n.len())
        .min()
        .map(|(_, n)| format!(" (did you mean `{n}`?)"))
        .unwrap_or_default()
}
