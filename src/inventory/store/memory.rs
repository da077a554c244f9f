//! The in-memory store: for tests, and for a gateway that wants the
//! inventory only for as long as it runs.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::{Added, Bounds, InventoryStore, StoreFuture};
use crate::inventory::record::{merge_by_id, over_bound, ClientRecord};

#[derive(Default)]
pub(crate) struct MemoryStore {
    state: Mutex<State>,
}

/// The clients by id, and the fingerprint secret once asked for.
type State = (BTreeMap<String, ClientRecord>, Option<Vec<u8>>);

impl InventoryStore for MemoryStore {
    fn add(&self, batch: Vec<ClientRecord>, bounds: Bounds) -> StoreFuture<'_, Added> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let clients = &mut state.0;
        merge_by_id(clients, &batch, bounds.oldest_hour);
        for c in clients.values_mut() {
            c.hours.retain(|h, _| *h >= bounds.oldest_hour);
        }
        let evict = over_bound(
            clients.values().map(|c| (c.id.as_str(), c.last_seen_ms)),
            bounds.max_clients,
        );
        for id in &evict {
            clients.remove(id);
        }
        let added = Added {
            clients: clients.len() as u64,
            evicted: evict.len() as u64,
        };
        Box::pin(std::future::ready(Ok(added)))
    }

    fn clients(&self) -> StoreFuture<'_, Vec<ClientRecord>> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        Box::pin(std::future::ready(Ok(state.0.values().cloned().collect())))
    }

    fn secret(&self, fresh: Vec<u8>) -> StoreFuture<'_, Vec<u8>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let secret = state.1.get_or_insert(fresh).clone();
        Box::pin(std::future::ready(Ok(secret)))
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn follows_the_store_rules() {
        let store = super::MemoryStore::default();
        super::super::suite::keeps_the_first_secret(&store).await;
        super::super::suite::adds_counts_and_bounds_clients(&store).await;
    }
}
