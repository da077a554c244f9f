//! The embedded store (the default): one redb file, one process. Each
//! client is one row (its record as JSON), read, merged and written back
//! in the flush's transaction, on the blocking pool.

use std::path::Path;
use std::sync::Arc;

use ::redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::{Added, Bounds, InventoryStore, StoreFuture};
use crate::common::allocator::give_back_free_memory;
use crate::inventory::record::{over_bound, ClientRecord};

const CLIENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("inventory_clients");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("inventory_meta");

pub(crate) struct RedbStore {
    db: Arc<Database>,
}

fn e(err: impl std::fmt::Display) -> String {
    format!("inventory store: {err}")
}

impl RedbStore {
    /// Opens (or creates) the file.
    pub(crate) fn open(path: &Path) -> Result<RedbStore, String> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|err| e(format!("{}: {err}", dir.display())))?;
        }
        let db = Database::create(path).map_err(|err| match err {
            ::redb::DatabaseError::DatabaseAlreadyOpen => e(format!(
                "{}: the file is already open in another process (a running gateway?). A redb store serves one process: ask the gateway (GET /inventory on its admin listener, or `v1compat inventory --gateway`), or use a PostgreSQL store for several",
                path.display()
            )),
            err => e(format!("{}: {err}", path.display())),
        })?;
        let tx = db.begin_write().map_err(e)?;
        tx.open_table(CLIENTS).map_err(e)?;
        tx.open_table(META).map_err(e)?;
        tx.commit().map_err(e)?;
        // Creating the file's regions and the first commit free a few MB
        // that would stay resident on the idle thread that did them.
        give_back_free_memory();
        Ok(RedbStore { db: Arc::new(db) })
    }

    fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Database) -> Result<T, String> + Send + 'static,
    ) -> StoreFuture<'_, T> {
        let db = self.db.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let done = f(&db);
                // A flush or a report, seconds apart: what it freed goes
                // back before its thread idles.
                give_back_free_memory();
                done
            })
            .await
            .map_err(e)?
        })
    }
}

fn decode(bytes: &[u8]) -> Result<ClientRecord, String> {
    serde_json::from_slice(bytes).map_err(e)
}

impl InventoryStore for RedbStore {
    fn add(&self, batch: Vec<ClientRecord>, bounds: Bounds) -> StoreFuture<'_, Added> {
        self.blocking(move |db| {
            let tx = db.begin_write().map_err(e)?;
            let added = {
                let mut t = tx.open_table(CLIENTS).map_err(e)?;
                for delta in &batch {
                    let mut record = match t.get(delta.id.as_str()).map_err(e)? {
                        Some(v) => decode(v.value())?,
                        None => ClientRecord::default(),
                    };
                    record.merge(delta, bounds.oldest_hour);
                    let bytes = serde_json::to_vec(&record).map_err(e)?;
                    t.insert(delta.id.as_str(), bytes.as_slice()).map_err(e)?;
                }
                // Every client's old hours go, and the bound is applied.
                let mut seen = Vec::new();
                let mut aged = Vec::new();
                for row in t.iter().map_err(e)? {
                    let (k, v) = row.map_err(e)?;
                    let mut record = decode(v.value())?;
                    seen.push((k.value().to_owned(), record.last_seen_ms));
                    if record.hours.range(..bounds.oldest_hour).next().is_some() {
                        record.hours.retain(|h, _| *h >= bounds.oldest_hour);
                        aged.push(record);
                    }
                }
                for record in &aged {
                    let bytes = serde_json::to_vec(record).map_err(e)?;
                    t.insert(record.id.as_str(), bytes.as_slice()).map_err(e)?;
                }
                let evict = over_bound(
                    seen.iter().map(|(id, at)| (id.as_str(), *at)),
                    bounds.max_clients,
                );
                for id in &evict {
                    t.remove(id.as_str()).map_err(e)?;
                }
                Added {
                    clients: t.len().map_err(e)?,
                    evicted: evict.len() as u64,
                }
            };
            tx.commit().map_err(e)?;
            Ok(added)
        })
    }

    fn clients(&self) -> StoreFuture<'_, Vec<ClientRecord>> {
        self.blocking(|db| {
            let tx = db.begin_read().map_err(e)?;
            let t = tx.open_table(CLIENTS).map_err(e)?;
            let mut out = Vec::new();
            for row in t.iter().map_err(e)? {
                out.push(decode(row.map_err(e)?.1.value())?);
            }
            Ok(out)
        })
    }

    fn secret(&self, fresh: Vec<u8>) -> StoreFuture<'_, Vec<u8>> {
        self.blocking(move |db| {
            let tx = db.begin_write().map_err(e)?;
            let secret = {
                let mut t = tx.open_table(META).map_err(e)?;
                let stored = t.get("secret").map_err(e)?.map(|v| v.value().to_vec());
                match stored {
                    Some(s) => s,
                    None => {
                        t.insert("secret", fresh.as_slice()).map_err(e)?;
                        fresh
                    }
                }
            };
            tx.commit().map_err(e)?;
            Ok(secret)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn follows_the_store_rules_and_keeps_them_across_an_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inventory.redb");
        let store = RedbStore::open(&path).unwrap();
        super::super::suite::keeps_the_first_secret(&store).await;
        super::super::suite::adds_counts_and_bounds_clients(&store).await;
        let secret = store.secret(b"x".repeat(20)).await.unwrap();
        drop(store);
        let again = RedbStore::open(&path).unwrap();
        assert_eq!(again.clients().await.unwrap().len(), 2);
        assert_eq!(again.secret(b"y".repeat(20)).await.unwrap(), secret);
        // One process at a time.
        let held = RedbStore::open(&path).err().unwrap();
        assert!(held.contains("already open"), "{held}");
    }
}
