//! The migration inventory, beside the request path: which clients still
//! call V1, on which operations, relying on which of the registry's
//! differences, and what each must change to call V2 directly.
//!
//! ```text
//! pipeline ─▶ Inventory::record   (per answer: client, operation, error,
//!                                  differences applied; in memory)
//! flusher  ─▶ Inventory::flush    (every inventory.flush_interval_ms, off
//!                                  the request path) ─▶ store (redb,
//!                                  PostgreSQL, memory)
//! GET /inventory, `v1compat inventory` ─▶ report (text, JSON, HTML)
//! ```
//!
//! A client is a fingerprint of its key ([`fingerprint`]); the key itself
//! is never stored. A store that is down fails flushes, never requests:
//! the counts wait in memory (bounded by `inventory.max_clients`) for the
//! next flush. A crash loses at most one flush interval.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::Mutex;

pub(crate) mod config;
pub(crate) mod fingerprint;
pub mod notice;
pub(crate) mod record;
mod recorder;
pub mod report;
pub(crate) mod store;

pub use config::{InventoryConfig, InventorySection};
pub use record::ClientRecord;
pub use recorder::Seen;

use record::merge_by_id;
use recorder::Recorder;
use store::{Bounds, InventoryStore};

use crate::telemetry;

/// The table prefix of the PostgreSQL store.
const POSTGRES_PREFIX: &str = "v1compat_inventory";

/// One gateway's inventory: the counts since the last flush, and the store.
pub struct Inventory {
    recorder: Recorder,
    store: Box<dyn InventoryStore>,
    flush_interval: Duration,
    max_clients: usize,
    keep_history: Duration,
    /// Counts a flush could not store yet, retried with the next; also
    /// what serialises flushes.
    unstored: Mutex<BTreeMap<String, ClientRecord>>,
}

impl Inventory {
    /// Opens the configured store, or `None` when the inventory is off. A
    /// redb file that cannot be opened stops start-up; a PostgreSQL server
    /// is only reached at the first flush.
    pub async fn open(cfg: &InventoryConfig) -> Result<Option<Arc<Inventory>>, String> {
        if !cfg.enabled {
            return Ok(None);
        }
        let store: Box<dyn InventoryStore> = match &cfg.store {
            config::StoreKind::Memory => Box::<store::memory::MemoryStore>::default(),
            config::StoreKind::Redb(path) => {
                let path = path.clone();
                Box::new(
                    tokio::task::spawn_blocking(move || store::redb::RedbStore::open(&path))
                        .await
                        .map_err(|e| e.to_string())??,
                )
            }
            config::StoreKind::Postgres(url) => {
                Box::new(store::postgres::PostgresStore::new(url, POSTGRES_PREFIX)?)
            }
        };
        Ok(Some(Arc::new(Inventory::with_store(cfg, store).await?)))
    }

    async fn with_store(
        cfg: &InventoryConfig,
        store: Box<dyn InventoryStore>,
    ) -> Result<Inventory, String> {
        let secret = match &cfg.secret {
            Some(s) => s.clone(),
            None => store.secret(fingerprint::new_secret()).await?,
        };
        Ok(Inventory {
            recorder: Recorder::new(fingerprint::Fingerprints::new(&secret), cfg.max_clients),
            store,
            flush_interval: cfg.flush_interval,
            max_clients: cfg.max_clients,
            keep_history: cfg.keep_history,
            unstored: Mutex::new(BTreeMap::new()),
        })
    }

    /// Counts one answered V1 request (in memory; never waits on the store).
    pub fn record(&self, seen: &Seen<'_>) {
        self.recorder.record(seen);
    }

    /// The fingerprint of the client holding `key`.
    pub fn fingerprint_of_key(&self, key: &str) -> String {
        self.recorder.fingerprints().of_key(key)
    }

    /// The fingerprint of a keyless client.
    pub fn fingerprint_of_keyless(
        &self,
        user_agent: &[u8],
        address: Option<std::net::IpAddr>,
    ) -> String {
        self.recorder.fingerprints().of_keyless(user_agent, address)
    }

    /// Writes what was counted since the last flush (and what earlier
    /// flushes could not) to the store.
    pub async fn flush(&self) -> Result<(), String> {
        let now = now_ms();
        let (fresh, dropped) = self.recorder.take(now);
        if dropped > 0 {
            metrics::counter!(telemetry::INVENTORY_EVICTED, "reason" => "memory")
                .increment(dropped as u64);
        }
        let oldest_hour = now.saturating_sub(self.keep_history.as_millis() as u64) / 3_600_000;
        let mut unstored = self.unstored.lock().await;
        merge_by_id(&mut unstored, &fresh, oldest_hour);
        if unstored.is_empty() {
            return Ok(());
        }
        let batch: Vec<ClientRecord> = unstored.values().cloned().collect();
        let bounds = Bounds {
            max_clients: self.max_clients,
            oldest_hour,
        };
        match self.store.add(batch, bounds).await {
            Ok(added) => {
                unstored.clear();
                metrics::counter!(telemetry::INVENTORY_FLUSHES, "outcome" => "ok").increment(1);
                metrics::gauge!(telemetry::INVENTORY_CLIENTS).set(added.clients as f64);
                if added.evicted > 0 {
                    metrics::counter!(telemetry::INVENTORY_EVICTED, "reason" => "store")
                        .increment(added.evicted);
                }
                Ok(())
            }
            Err(e) => {
                metrics::counter!(telemetry::INVENTORY_FLUSHES, "outcome" => "failed").increment(1);
                // What waits for the store is bounded like the store.
                let evict = record::over_bound(
                    unstored.values().map(|c| (c.id.as_str(), c.last_seen_ms)),
                    self.max_clients,
                );
                for id in &evict {
                    unstored.remove(id);
                }
                if !evict.is_empty() {
                    metrics::counter!(telemetry::INVENTORY_EVICTED, "reason" => "memory")
                        .increment(evict.len() as u64);
                }
                Err(e)
            }
        }
    }

    /// Flushes every `inventory.flush_interval_ms` until `stop` turns true
    /// (the last flush is the caller's, once the requests have drained).
    pub async fn flush_every_interval(&self, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.flush_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut failing = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
            match self.flush().await {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!("inventory store: flushing again");
                }
                Ok(()) => {}
                // Said once per outage, not at every interval.
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "inventory store: flush failed; the counts are kept in memory and retried");
                }
                Err(_) => {}
            }
        }
    }

    /// Every client: the store's records with what is not stored yet
    /// (flushed first, so the answer is current).
    pub async fn clients(&self) -> Result<Vec<ClientRecord>, String> {
        // A flush that fails leaves its counts in `unstored`, merged below.
        let _ = self.flush().await;
        let stored = self.store.clients().await?;
        let unstored = self.unstored.lock().await;
        let mut all: BTreeMap<String, ClientRecord> =
            stored.into_iter().map(|c| (c.id.clone(), c)).collect();
        for pending in unstored.values() {
            all.entry(pending.id.clone()).or_default().merge(pending, 0);
        }
        Ok(all.into_values().collect())
    }
}

impl Inventory {
    /// The report of every client as of now, as `cfg` names and ages them.
    pub async fn report(&self, cfg: &InventoryConfig) -> Result<report::Report, String> {
        let clients = self.clients().await?;
        Ok(report::Report::build(
            clients,
            &cfg.names,
            cfg.gone_after,
            now_ms(),
        ))
    }
}

/// Where `cfg` keeps the inventory, as it may be shown (a PostgreSQL
/// password masked).
pub fn store_shown(cfg: &InventoryConfig) -> String {
    config::redacted_store(&cfg.store)
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::differences::{AppliedSet, ZERO_SYSTEM_LIMITS};
    use crate::upstream::ApiKey;
    use crate::v1::route::Operation;

    /// A store that fails while `down` is set.
    struct Flaky {
        down: Arc<std::sync::atomic::AtomicBool>,
        inner: Arc<store::memory::MemoryStore>,
    }

    impl InventoryStore for Flaky {
        fn add(
            &self,
            batch: Vec<ClientRecord>,
            bounds: Bounds,
        ) -> store::StoreFuture<'_, store::Added> {
            if self.down.load(std::sync::atomic::Ordering::Relaxed) {
                return Box::pin(std::future::ready(Err("down".into())));
            }
            self.inner.add(batch, bounds)
        }
        fn clients(&self) -> store::StoreFuture<'_, Vec<ClientRecord>> {
            self.inner.clients()
        }
        fn secret(&self, fresh: Vec<u8>) -> store::StoreFuture<'_, Vec<u8>> {
            self.inner.secret(fresh)
        }
    }

    #[tokio::test]
    async fn counts_wait_for_a_store_that_is_down_and_are_stored_once_it_is_back() {
        let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let inner = Arc::new(store::memory::MemoryStore::default());
        let flaky = Box::new(Flaky {
            down: down.clone(),
            inner: inner.clone(),
        });
        let section = InventorySection {
            store: "memory".into(),
            ..Default::default()
        };
        let cfg = config::validate(&section, &mut Vec::new());
        let inv = Inventory::with_store(&cfg, flaky).await.unwrap();
        let key = ApiKey::new("the-key").unwrap();
        let seen = Seen {
            op: Operation::StartRun,
            key: Some(&key),
            user_agent: None,
            address: None,
            failed: false,
            applied: AppliedSet::default().with(&ZERO_SYSTEM_LIMITS),
            browned_out: false,
        };
        inv.record(&seen);
        assert!(inv.flush().await.is_err());
        inv.record(&seen);
        assert!(inv.flush().await.is_err());
        assert!(inner.clients().await.unwrap().is_empty());
        inv.record(&seen);
        down.store(false, std::sync::atomic::Ordering::Relaxed);
        inv.flush().await.unwrap();
        let stored = inner.clients().await.unwrap();
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].requests(), 3);
        assert_eq!(stored[0].differences["zero_system_limits"], 3);
        assert_eq!(stored[0].id, inv.fingerprint_of_key("the-key"));
        assert_eq!(inv.clients().await.unwrap(), stored);
    }
}
