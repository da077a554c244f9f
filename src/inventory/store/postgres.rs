//! The shared store: several gateway replicas flush into one PostgreSQL
//! inventory. Every count is added in SQL (`INSERT … ON CONFLICT DO UPDATE
//! SET n = n + EXCLUDED.n`), so two replicas flushing the same client at
//! once both count; first and last seen take the least and the greatest.
//!
//! One connection per process, opened at the first flush and again when it
//! drops: a database that is down at start or later fails flushes (they
//! are retried, their counts kept in memory), never start-up or requests.
//! The fingerprint secret is configured, not stored, for the same reason.

use tokio::sync::Mutex;
use tokio_postgres::{Client, NoTls};

use super::{Added, Bounds, InventoryStore, StoreFuture};
use crate::inventory::record::{ClientRecord, OpCount};

pub(crate) struct PostgresStore {
    url: String,
    /// Table name prefix (tests use their own).
    prefix: String,
    client: Mutex<Option<Client>>,
}

fn e(err: impl std::fmt::Display) -> String {
    format!("inventory store: {err}")
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn uint(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl PostgresStore {
    /// A store on `url` whose tables start with `prefix` (a plain
    /// identifier); nothing is connected yet.
    pub(crate) fn new(url: &str, prefix: &str) -> Result<PostgresStore, String> {
        let plain = !prefix.is_empty()
            && prefix.len() <= 40
            && prefix
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !plain {
            return Err(e(format!(
                "table prefix {prefix:?} is not a plain identifier"
            )));
        }
        Ok(PostgresStore {
            url: url.to_owned(),
            prefix: prefix.to_owned(),
            client: Mutex::new(None),
        })
    }

    /// The connection (opened, and the tables made, when there is none).
    async fn conn(&self) -> Result<tokio::sync::MutexGuard<'_, Option<Client>>, String> {
        let mut guard = self.client.lock().await;
        if guard.as_ref().is_none_or(Client::is_closed) {
            let (mut client, connection) = tokio_postgres::connect(&self.url, NoTls)
                .await
                .map_err(|err| e(format!("cannot connect to PostgreSQL: {err}")))?;
            tokio::spawn(async move {
                if let Err(err) = connection.await {
                    tracing::warn!(error = %err, "inventory store: PostgreSQL connection ended");
                }
            });
            let p = &self.prefix;
            let schema = format!(
                "CREATE TABLE IF NOT EXISTS {p}_clients (
                    id text PRIMARY KEY,
                    keyed boolean NOT NULL,
                    first_seen_ms bigint NOT NULL,
                    last_seen_ms bigint NOT NULL,
                    brownouts bigint NOT NULL DEFAULT 0
                );
                CREATE TABLE IF NOT EXISTS {p}_counts (
                    id text NOT NULL REFERENCES {p}_clients (id) ON DELETE CASCADE,
                    kind text NOT NULL,
                    name text NOT NULL,
                    n bigint NOT NULL,
                    PRIMARY KEY (id, kind, name)
                );
                CREATE TABLE IF NOT EXISTS {p}_hours (
                    id text NOT NULL REFERENCES {p}_clients (id) ON DELETE CASCADE,
                    hour bigint NOT NULL,
                    n bigint NOT NULL,
                    PRIMARY KEY (id, hour)
                );
                CREATE TABLE IF NOT EXISTS {p}_seen (
                    id text NOT NULL REFERENCES {p}_clients (id) ON DELETE CASCADE,
                    kind text NOT NULL,
                    value text NOT NULL,
                    PRIMARY KEY (id, kind, value)
                );"
            );
            // Replicas starting together must not race on CREATE TABLE.
            let tx = client.transaction().await.map_err(e)?;
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtext($1))",
                &[&self.prefix],
            )
            .await
            .map_err(e)?;
            tx.batch_execute(&schema).await.map_err(e)?;
            tx.commit().await.map_err(e)?;
            *guard = Some(client);
        }
        Ok(guard)
    }

    async fn add_now(&self, batch: Vec<ClientRecord>, bounds: Bounds) -> Result<Added, String> {
        let mut guard = self.conn().await?;
        let client = guard.as_mut().ok_or_else(|| e("no connection"))?;
        let p = &self.prefix;
        let tx = client.transaction().await.map_err(e)?;
        let upsert_client = tx
            .prepare(&format!(
                "INSERT INTO {p}_clients (id, keyed, first_seen_ms, last_seen_ms, brownouts)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (id) DO UPDATE SET
                   first_seen_ms = LEAST({p}_clients.first_seen_ms, EXCLUDED.first_seen_ms),
                   last_seen_ms = GREATEST({p}_clients.last_seen_ms, EXCLUDED.last_seen_ms),
                   brownouts = {p}_clients.brownouts + EXCLUDED.brownouts"
            ))
            .await
            .map_err(e)?;
        let add_count = tx
            .prepare(&format!(
                "INSERT INTO {p}_counts (id, kind, name, n) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (id, kind, name) DO UPDATE SET n = {p}_counts.n + EXCLUDED.n"
            ))
            .await
            .map_err(e)?;
        let add_hour = tx
            .prepare(&format!(
                "INSERT INTO {p}_hours (id, hour, n) VALUES ($1, $2, $3)
                 ON CONFLICT (id, hour) DO UPDATE SET n = {p}_hours.n + EXCLUDED.n"
            ))
            .await
            .map_err(e)?;
        // A client keeps a bounded number of user-agents and addresses.
        let add_seen = tx
            .prepare(&format!(
                "INSERT INTO {p}_seen (id, kind, value)
                 SELECT $1, $2, $3
                 WHERE (SELECT count(*) FROM {p}_seen WHERE id = $1 AND kind = $2) < $4
                 ON CONFLICT DO NOTHING"
            ))
            .await
            .map_err(e)?;
        let max_seen = crate::inventory::record::MAX_SEEN as i64;
        for c in &batch {
            tx.execute(
                &upsert_client,
                &[
                    &c.id,
                    &c.keyed,
                    &int(c.first_seen_ms),
                    &int(c.last_seen_ms),
                    &int(c.brownouts),
                ],
            )
            .await
            .map_err(e)?;
            for (op, n) in &c.operations {
                for (kind, v) in [("requests", n.requests), ("errors", n.errors)] {
                    if v > 0 {
                        tx.execute(&add_count, &[&c.id, &kind, op, &int(v)])
                            .await
                            .map_err(e)?;
                    }
                }
            }
            for (d, n) in &c.differences {
                tx.execute(&add_count, &[&c.id, &"difference", d, &int(*n)])
                    .await
                    .map_err(e)?;
            }
            for (h, n) in &c.hours {
                tx.execute(&add_hour, &[&c.id, &int(*h), &int(*n)])
                    .await
                    .map_err(e)?;
            }
            for (kind, set) in [("user_agent", &c.user_agents), ("address", &c.addresses)] {
                for v in set {
                    tx.execute(&add_seen, &[&c.id, &kind, v, &max_seen])
                        .await
                        .map_err(e)?;
                }
            }
        }
        tx.execute(
            &format!("DELETE FROM {p}_hours WHERE hour < $1"),
            &[&int(bounds.oldest_hour)],
        )
        .await
        .map_err(e)?;
        let evicted = tx
            .execute(
                &format!(
                    "DELETE FROM {p}_clients WHERE id IN (
                       SELECT id FROM {p}_clients ORDER BY last_seen_ms DESC, id OFFSET $1)"
                ),
                &[&int(bounds.max_clients as u64)],
            )
            .await
            .map_err(e)?;
        let clients: i64 = tx
            .query_one(&format!("SELECT count(*) FROM {p}_clients"), &[])
            .await
            .map_err(e)?
            .get(0);
        tx.commit().await.map_err(e)?;
        Ok(Added {
            clients: uint(clients),
            evicted,
        })
    }

    async fn clients_now(&self) -> Result<Vec<ClientRecord>, String> {
        let mut guard = self.conn().await?;
        let client = guard.as_mut().ok_or_else(|| e("no connection"))?;
        let p = &self.prefix;
        let mut by_id = std::collections::BTreeMap::new();
        for r in client
            .query(
                &format!(
                    "SELECT id, keyed, first_seen_ms, last_seen_ms, brownouts FROM {p}_clients"
                ),
                &[],
            )
            .await
            .map_err(e)?
        {
            let id: String = r.get(0);
            by_id.insert(
                id.clone(),
                ClientRecord {
                    id,
                    keyed: r.get(1),
                    first_seen_ms: uint(r.get(2)),
                    last_seen_ms: uint(r.get(3)),
                    brownouts: uint(r.get(4)),
                    ..ClientRecord::default()
                },
            );
        }
        for r in client
            .query(&format!("SELECT id, kind, name, n FROM {p}_counts"), &[])
            .await
            .map_err(e)?
        {
            let Some(c) = by_id.get_mut(r.get::<_, &str>(0)) else {
                continue;
            };
            let (kind, name, n): (&str, String, i64) = (r.get(1), r.get(2), r.get(3));
            match kind {
                "requests" => {
                    c.operations
                        .entry(name)
                        .or_insert_with(OpCount::default)
                        .requests += uint(n)
                }
                "errors" => {
                    c.operations
                        .entry(name)
                        .or_insert_with(OpCount::default)
                        .errors += uint(n)
                }
                _ => *c.differences.entry(name).or_default() += uint(n),
            }
        }
        for r in client
            .query(&format!("SELECT id, hour, n FROM {p}_hours"), &[])
            .await
            .map_err(e)?
        {
            if let Some(c) = by_id.get_mut(r.get::<_, &str>(0)) {
                c.hours.insert(uint(r.get(1)), uint(r.get(2)));
            }
        }
        for r in client
            .query(&format!("SELECT id, kind, value FROM {p}_seen"), &[])
            .await
            .map_err(e)?
        {
            if let Some(c) = by_id.get_mut(r.get::<_, &str>(0)) {
                let set = match r.get::<_, &str>(1) {
                    "user_agent" => &mut c.user_agents,
                    _ => &mut c.addresses,
                };
                set.insert(r.get(2));
            }
        }
        Ok(by_id.into_values().collect())
    }
}

impl InventoryStore for PostgresStore {
    fn add(&self, batch: Vec<ClientRecord>, bounds: Bounds) -> StoreFuture<'_, Added> {
        Box::pin(self.add_now(batch, bounds))
    }

    fn clients(&self) -> StoreFuture<'_, Vec<ClientRecord>> {
        Box::pin(self.clients_now())
    }

    /// Not kept in PostgreSQL: replicas are configured with one secret
    /// (`inventory.secret`), so `fresh` is only this process's.
    fn secret(&self, fresh: Vec<u8>) -> StoreFuture<'_, Vec<u8>> {
        Box::pin(std::future::ready(Ok(fresh)))
    }
}
