//! Where the inventory's counts are kept, beside the request path: the
//! flusher adds each interval's counts ([`InventoryStore::add`]), the report
//! reads them back. Three backends, as for the callback relay: [`memory`]
//! (tests), [`redb`] (the default: an embedded file, one process) and
//! [`postgres`] (several replicas share one inventory; counts are added in
//! SQL, so replicas never overwrite each other).

use std::future::Future;
use std::pin::Pin;

use super::record::ClientRecord;

pub(crate) mod memory;
pub(crate) mod postgres;
pub(crate) mod redb;

pub(crate) type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// What one flush may keep.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// The most clients kept; the oldest-seen beyond it are deleted.
    pub max_clients: usize,
    /// Hourly counts before this hour are deleted.
    pub oldest_hour: u64,
}

/// What a flush did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Added {
    /// Clients in the store after it.
    pub clients: u64,
    /// Clients deleted over [`Bounds::max_clients`].
    pub evicted: u64,
}

pub(crate) trait InventoryStore: Send + Sync + 'static {
    /// Adds `batch` (counts since the last flush, one record per client)
    /// to what is stored, in one transaction.
    fn add(&self, batch: Vec<ClientRecord>, bounds: Bounds) -> StoreFuture<'_, Added>;
    /// Every client stored.
    fn clients(&self) -> StoreFuture<'_, Vec<ClientRecord>>;
    /// The fingerprint secret kept in the store: the one stored, or
    /// `fresh`, stored now, when there is none.
    fn secret(&self, fresh: Vec<u8>) -> StoreFuture<'_, Vec<u8>>;
}

#[cfg(test)]
pub(crate) mod suite {
    //! What every backend must do, run against each.
    use super::*;
    use crate::inventory::record::OpCount;

    fn delta(id: &str, seen: u64, requests: u64) -> ClientRecord {
        ClientRecord {
            id: id.into(),
            keyed: true,
            first_seen_ms: seen,
            last_seen_ms: seen,
            operations: [(
                "run_detail".to_owned(),
                OpCount {
                    requests,
                    errors: 1,
                },
            )]
            .into(),
            differences: [("lenient_input".to_owned(), requests)].into(),
            user_agents: ["sdk/1".to_owned()].into(),
            addresses: ["10.0.0.1".to_owned()].into(),
            hours: [(seen / 3_600_000, requests)].into(),
            brownouts: 1,
        }
    }

    const WIDE: Bounds = Bounds {
        max_clients: 100,
        oldest_hour: 0,
    };

    /// The first secret asked for is the one kept.
    pub(crate) async fn keeps_the_first_secret(store: &dyn InventoryStore) {
        let secret = store
            .secret(b"first-secret-0123456789".to_vec())
            .await
            .unwrap();
        assert_eq!(secret, b"first-secret-0123456789");
        assert_eq!(
            store
                .secret(b"other-secret-0123456789".to_vec())
                .await
                .unwrap(),
            secret,
            "a stored secret is kept"
        );
    }

    pub(crate) async fn adds_counts_and_bounds_clients(store: &dyn InventoryStore) {
        let added = store
            .add(
                vec![delta("k-a", 7_200_000, 3), delta("k-b", 3_600_000, 1)],
                WIDE,
            )
            .await
            .unwrap();
        assert_eq!(
            added,
            Added {
                clients: 2,
                evicted: 0
            }
        );
        let mut more = delta("k-a", 10_800_000, 2);
        more.user_agents.insert("sdk/2".into());
        store.add(vec![more], WIDE).await.unwrap();
        let clients = store.clients().await.unwrap();
        let a = clients.iter().find(|c| c.id == "k-a").unwrap();
        assert_eq!(
            a.operations["run_detail"],
            OpCount {
                requests: 5,
                errors: 2
            }
        );
        assert_eq!(a.differences["lenient_input"], 5);
        assert_eq!((a.first_seen_ms, a.last_seen_ms), (7_200_000, 10_800_000));
        assert_eq!(a.hours, [(2, 3), (3, 2)].into());
        assert_eq!(a.user_agents.len(), 2);
        assert_eq!(a.brownouts, 2);
        assert!(a.keyed);
        // Over the bound, the oldest-seen client goes; old hours go too.
        let added = store
            .add(
                vec![delta("k-c", 14_400_000, 1)],
                Bounds {
                    max_clients: 2,
                    oldest_hour: 3,
                },
            )
            .await
            .unwrap();
        assert_eq!(
            added,
            Added {
                clients: 2,
                evicted: 1
            }
        );
        let mut ids: Vec<_> = store
            .clients()
            .await
            .unwrap()
            .into_iter()
            .map(|c| (c.id, c.hours.keys().copied().collect::<Vec<_>>()))
            .collect();
        ids.sort();
        assert_eq!(
            ids,
            [("k-a".to_owned(), vec![3]), ("k-c".to_owned(), vec![4])]
        );
    }
}
