//! The inventory's side of the request path: one call per answered V1
//! request ([`Recorder::record`]) adds it to its client's counts in memory;
//! the flusher takes everything counted since the last flush
//! ([`Recorder::take`]) and writes it to the store off the request path.
//!
//! Kept cheap because every request pays it: the client is found by a
//! keyed in-process hash of its key (or user-agent and address) in one of
//! a few locked maps, so a request takes one uncontended lock and a lookup;
//! its fingerprint (an HMAC) is made only when the client is first seen in
//! a flush interval, and the wall clock is read by the flusher, not here.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use super::fingerprint::Fingerprints;
use super::record::{ClientRecord, OpCount, MAX_SEEN};
use crate::differences::{AppliedSet, ALL};
use crate::upstream::ApiKey;
use crate::v1::route::Operation;

/// The most of a user-agent kept (the access line shows as much).
const MAX_USER_AGENT: usize = 256;

/// Maps, each behind its own lock, so requests on different threads seldom
/// wait for each other.
const SHARDS: usize = 8;

/// One answered V1 request, as the inventory counts it.
pub struct Seen<'a> {
    pub op: Operation,
    /// The client's key; `None` for a keyless call.
    pub key: Option<&'a ApiKey>,
    pub user_agent: Option<&'a [u8]>,
    /// The client's address (a trusted proxy's word for it, else the peer).
    pub address: Option<IpAddr>,
    /// Answered with an error envelope.
    pub failed: bool,
    /// The differences its answer relied on.
    pub applied: AppliedSet,
    /// Refused by a brownout window.
    pub browned_out: bool,
}

/// Counts since the last flush, by client.
pub(crate) struct Recorder {
    shards: [Mutex<Shard>; SHARDS],
    /// Keys the maps: random per process, so a client cannot pick keys
    /// that pile into one bucket.
    hasher: RandomState,
    fingerprints: Fingerprints,
    max_clients: usize,
    /// Clients in the maps now.
    held: AtomicUsize,
    /// Requests of new clients not counted because the maps were full
    /// (since the last take).
    dropped: AtomicUsize,
}

type Shard = HashMap<u64, Pending, BuildHasherDefault<Prehashed>>;

/// A map key that is a hash already.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `u64`s are written; fold anything else in all the same.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// One client's counts since the last flush.
struct Pending {
    id: String,
    keyed: bool,
    operations: [OpCount; Operation::ALL.len()],
    differences: [u64; ALL.len()],
    user_agents: Vec<Box<[u8]>>,
    addresses: Vec<IpAddr>,
    brownouts: u64,
}

impl Pending {
    fn new(id: String, keyed: bool) -> Pending {
        Pending {
            id,
            keyed,
            operations: [OpCount::default(); Operation::ALL.len()],
            differences: [0; ALL.len()],
            user_agents: Vec::new(),
            addresses: Vec::new(),
            brownouts: 0,
        }
    }

    fn count(&mut self, seen: &Seen<'_>, user_agent: &[u8]) {
        // `Operation::ALL` lists the variants in declaration order.
        let c = &mut self.operations[seen.op as usize];
        c.requests += 1;
        c.errors += u64::from(seen.failed);
        for (i, _) in seen.applied.iter() {
            self.differences[i] += 1;
        }
        if seen.browned_out {
            self.brownouts += 1;
        }
        if !user_agent.is_empty()
            && self.user_agents.len() < MAX_SEEN
            && !self.user_agents.iter().any(|u| **u == *user_agent)
        {
            self.user_agents.push(user_agent.into());
        }
        if let Some(a) = seen.address {
            if self.addresses.len() < MAX_SEEN && !self.addresses.contains(&a) {
                self.addresses.push(a);
            }
        }
    }

    /// The counts as a record seen at `now_ms`, in hour `hour`.
    fn into_record(self, now_ms: u64, hour: u64) -> ClientRecord {
        let operations = Operation::ALL
            .iter()
            .zip(self.operations)
            .filter(|(_, c)| c.requests > 0)
            .map(|(op, c)| (op.name().to_owned(), c))
            .collect();
        let differences = ALL
            .iter()
            .zip(self.differences)
            .filter(|(_, n)| *n > 0)
            .map(|(d, n)| (d.id.to_owned(), n))
            .collect();
        let requests = self.operations.iter().map(|c| c.requests).sum();
        ClientRecord {
            id: self.id,
            keyed: self.keyed,
            first_seen_ms: now_ms,
            last_seen_ms: now_ms,
            operations,
            differences,
            user_agents: self
                .user_agents
                .iter()
                .map(|u| String::from_utf8_lossy(u).into_owned())
                .collect(),
            addresses: self.addresses.iter().map(IpAddr::to_string).collect(),
            hours: [(hour, requests)].into(),
            brownouts: self.brownouts,
        }
    }
}

impl Recorder {
    pub(crate) fn new(fingerprints: Fingerprints, max_clients: usize) -> Recorder {
        Recorder {
            shards: std::array::from_fn(|_| Mutex::new(Shard::default())),
            hasher: RandomState::new(),
            fingerprints,
            max_clients,
            held: AtomicUsize::new(0),
            dropped: AtomicUsize::new(0),
        }
    }

    /// The fingerprints this recorder makes.
    pub(crate) fn fingerprints(&self) -> &Fingerprints {
        &self.fingerprints
    }

    /// Counts one request. A client first seen when the maps already hold
    /// `max_clients` is not counted (and the drop is).
    pub(crate) fn record(&self, seen: &Seen<'_>) {
        let user_agent = seen
            .user_agent
            .map_or(&b""[..], |u| &u[..u.len().min(MAX_USER_AGENT)]);
        let hash = match seen.key {
            Some(key) => self.hasher.hash_one((0u8, key.expose())),
            None => self.hasher.hash_one((1u8, user_agent, seen.address)),
        };
        let shard = &self.shards[(hash >> 61) as usize % SHARDS];
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        let pending = match shard.entry(hash) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                if self.held.fetch_add(1, Ordering::Relaxed) >= self.max_clients {
                    self.held.fetch_sub(1, Ordering::Relaxed);
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                let id = match seen.key {
                    Some(key) => self.fingerprints.of_key(key.expose()),
                    None => self.fingerprints.of_keyless(user_agent, seen.address),
                };
                e.insert(Pending::new(id, seen.key.is_some()))
            }
        };
        pending.count(seen, user_agent);
    }

    /// Everything counted since the last take, as records seen at
    /// `now_ms`, and the requests dropped meanwhile.
    pub(crate) fn take(&self, now_ms: u64) -> (Vec<ClientRecord>, usize) {
        let hour = now_ms / 3_600_000;
        let mut out = Vec::new();
        for shard in &self.shards {
            let taken = std::mem::take(&mut *shard.lock().unwrap_or_else(PoisonError::into_inner));
            self.held.fetch_sub(taken.len(), Ordering::Relaxed);
            out.extend(taken.into_values().map(|p| p.into_record(now_ms, hour)));
        }
        (out, self.dropped.swap(0, Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::differences::{LENIENT_INPUT, ZERO_SYSTEM_LIMITS};

    fn recorder(max: usize) -> Recorder {
        Recorder::new(Fingerprints::new(b"a-test-secret-0123"), max)
    }

    fn seen<'a>(op: Operation, key: Option<&'a ApiKey>, ua: &'a [u8]) -> Seen<'a> {
        Seen {
            op,
            key,
            user_agent: Some(ua),
            address: Some("10.1.2.3".parse().unwrap()),
            failed: false,
            applied: AppliedSet::default(),
            browned_out: false,
        }
    }

    #[test]
    fn requests_add_up_per_client_and_the_key_is_kept_nowhere() {
        let r = recorder(10);
        let a = ApiKey::new("key-a-secret").unwrap();
        let b = ApiKey::new("key-b-secret").unwrap();
        r.record(&seen(Operation::RunDetail, Some(&a), b"sdk/1"));
        r.record(&Seen {
            failed: true,
            applied: AppliedSet::default().with(&LENIENT_INPUT),
            ..seen(Operation::RunDetail, Some(&a), b"sdk/2")
        });
        r.record(&Seen {
            applied: AppliedSet::default().with(&ZERO_SYSTEM_LIMITS),
            ..seen(Operation::StartRun, Some(&b), b"n8n")
        });
        r.record(&seen(Operation::StoreSearch, None, b"curl/8"));
        let (mut records, dropped) = r.take(7_200_000);
        assert_eq!(dropped, 0);
        records.sort_by_key(|c| (!c.keyed, c.requests()));
        assert_eq!(records.len(), 3);
        let fa = r.fingerprints().of_key("key-a-secret");
        let a_rec = records.iter().find(|c| c.id == fa).unwrap();
        assert_eq!(
            a_rec.operations["run_detail"],
            OpCount {
                requests: 2,
                errors: 1
            }
        );
        assert_eq!(a_rec.differences["lenient_input"], 1);
        assert_eq!(a_rec.user_agents.len(), 2);
        assert_eq!(a_rec.hours, [(2, 2)].into());
        let anon = records.iter().find(|c| !c.keyed).unwrap();
        assert!(anon.id.starts_with("anon-"));
        let text = serde_json::to_string(&records).unwrap();
        assert!(!text.contains("key-a-secret") && !text.contains("key-b-secret"));
        // Taken means gone.
        assert!(r.take(7_200_000).0.is_empty());
    }

    #[test]
    fn new_clients_beyond_the_bound_are_dropped_and_counted() {
        let r = recorder(2);
        let keys: Vec<_> = (0..5)
            .map(|i| ApiKey::new(&format!("k{i}")).unwrap())
            .collect();
        for k in &keys {
            r.record(&seen(Operation::RunList, Some(k), b"x"));
        }
        // A client already held is still counted.
        r.record(&seen(Operation::RunList, Some(&keys[0]), b"x"));
        let (records, dropped) = r.take(0);
        assert_eq!(records.len(), 2);
        assert_eq!(dropped, 3);
        assert_eq!(records.iter().map(ClientRecord::requests).sum::<u64>(), 3);
        // Room again after the take.
        r.record(&seen(Operation::RunList, Some(&keys[4]), b"x"));
        assert_eq!(r.take(0).0.len(), 1);
    }
}
