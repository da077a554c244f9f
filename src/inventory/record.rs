//! One client's inventory record, as every store keeps it and the report
//! reads it: its requests and errors by V1 operation, the differences its
//! answers relied on, the user-agents and addresses it came with, first
//! and last seen, and its requests by hour for the chart. The same type is
//! a flush's delta (counts since the last flush) and a stored total;
//! [`ClientRecord::merge`] adds one into the other, so stores only load,
//! merge and save (PostgreSQL adds in SQL, to the same effect).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// User-agents and addresses kept per client: a client that sends a new
/// one with every request must not grow its record without bound.
pub(crate) const MAX_SEEN: usize = 8;

/// Requests and errors of one V1 operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpCount {
    pub requests: u64,
    pub errors: u64,
}

/// One client.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientRecord {
    /// Its fingerprint (`k-…` for a key, `anon-…` for a keyless caller).
    pub id: String,
    pub keyed: bool,
    /// Unix milliseconds, to the flush interval.
    pub first_seen_ms: u64,
    pub last_seen_ms: u64,
    /// By V1 operation name.
    pub operations: BTreeMap<String, OpCount>,
    /// By difference id: answers that relied on it.
    pub differences: BTreeMap<String, u64>,
    pub user_agents: BTreeSet<String>,
    pub addresses: BTreeSet<String>,
    /// Requests by hour (hours since the Unix epoch).
    pub hours: BTreeMap<u64, u64>,
    /// Requests a brownout window refused.
    pub brownouts: u64,
}

impl ClientRecord {
    /// Adds `delta` (the counts of one or more flushes) into this record;
    /// hours before `oldest_hour` are dropped.
    pub fn merge(&mut self, delta: &ClientRecord, oldest_hour: u64) {
        if self.id.is_empty() {
            self.id.clone_from(&delta.id);
            self.keyed = delta.keyed;
            self.first_seen_ms = delta.first_seen_ms;
        } else {
            self.first_seen_ms = self.first_seen_ms.min(delta.first_seen_ms);
        }
        self.last_seen_ms = self.last_seen_ms.max(delta.last_seen_ms);
        for (op, n) in &delta.operations {
            let c = self.operations.entry(op.clone()).or_default();
            c.requests += n.requests;
            c.errors += n.errors;
        }
        for (d, n) in &delta.differences {
            *self.differences.entry(d.clone()).or_default() += n;
        }
        for (set, more) in [
            (&mut self.user_agents, &delta.user_agents),
            (&mut self.addresses, &delta.addresses),
        ] {
            for v in more {
                if set.len() >= MAX_SEEN {
                    break;
                }
                set.insert(v.clone());
            }
        }
        for (h, n) in &delta.hours {
            *self.hours.entry(*h).or_default() += n;
        }
        self.hours.retain(|h, _| *h >= oldest_hour);
        self.brownouts += delta.brownouts;
    }

    /// Every V1 request counted.
    pub fn requests(&self) -> u64 {
        self.operations.values().map(|c| c.requests).sum()
    }

    pub fn errors(&self) -> u64 {
        self.operations.values().map(|c| c.errors).sum()
    }
}

/// Merges `batch` into `into` by client id.
pub(crate) fn merge_by_id(
    into: &mut BTreeMap<String, ClientRecord>,
    batch: &[ClientRecord],
    oldest_hour: u64,
) {
    for delta in batch {
        into.entry(delta.id.clone())
            .or_default()
            .merge(delta, oldest_hour);
    }
}

/// The ids of the oldest-seen clients beyond `max` (to evict).
pub(crate) fn over_bound<'a>(
    clients: impl Iterator<Item = (&'a str, u64)>,
    max: usize,
) -> Vec<String> {
    let mut all: Vec<(u64, &str)> = clients.map(|(id, seen)| (seen, id)).collect();
    if all.len() <= max {
        return Vec::new();
    }
    all.sort_unstable();
    let excess = all.len() - max;
    all.into_iter()
        .take(excess)
        .map(|(_, id)| id.to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(id: &str, at: u64, op: &str, hour: u64) -> ClientRecord {
        ClientRecord {
            id: id.into(),
            keyed: true,
            first_seen_ms: at,
            last_seen_ms: at,
            operations: [(
                op.to_owned(),
                OpCount {
                    requests: 2,
                    errors: 1,
                },
            )]
            .into(),
            differences: [("lenient_input".to_owned(), 2)].into(),
            user_agents: ["ua".to_owned()].into(),
            addresses: ["10.0.0.1".to_owned()].into(),
            hours: [(hour, 2)].into(),
            brownouts: 0,
        }
    }

    #[test]
    fn merging_adds_counts_and_keeps_the_span_seen() {
        let mut r = ClientRecord::default();
        r.merge(&delta("k-1", 2000, "run_detail", 10), 0);
        r.merge(&delta("k-1", 1000, "run_detail", 11), 0);
        r.merge(&delta("k-1", 3000, "run_list", 11), 0);
        assert_eq!((r.first_seen_ms, r.last_seen_ms), (1000, 3000));
        assert_eq!(
            r.operations["run_detail"],
            OpCount {
                requests: 4,
                errors: 2
            }
        );
        assert_eq!(r.requests(), 6);
        assert_eq!(r.errors(), 3);
        assert_eq!(r.differences["lenient_input"], 6);
        assert_eq!(r.hours, [(10, 2), (11, 4)].into());
        assert_eq!(r.user_agents.len(), 1);
        // Old hours go.
        r.merge(&delta("k-1", 4000, "run_list", 12), 11);
        assert_eq!(r.hours.keys().copied().collect::<Vec<_>>(), [11, 12]);
    }

    #[test]
    fn agents_and_addresses_are_bounded() {
        let mut r = ClientRecord::default();
        for i in 0..50 {
            let mut d = delta("k-1", 1, "run_detail", 1);
            d.user_agents = [format!("agent/{i}")].into();
            r.merge(&d, 0);
        }
        assert_eq!(r.user_agents.len(), MAX_SEEN);
    }

    #[test]
    fn the_oldest_seen_go_first() {
        let seen = [("a", 5), ("b", 1), ("c", 3), ("d", 4)];
        assert_eq!(over_bound(seen.into_iter(), 2), ["b", "c"]);
        assert!(over_bound(seen.into_iter(), 4).is_empty());
    }
}
