//! The shared store: one PostgreSQL table for several gateway replicas.
//!
//! * Any replica receives (the token needs no lookup) and inserts; a per-run
//!   advisory lock serialises the de-duplication and ordering rules of
//!   [`plan_insert`]/[`plan_delivered`] across replicas.
//! * Claims are `UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED)`
//!   setting a lease (`lease_until_ms`, `lease_owner`): replicas never wait
//!   for each other, no transaction is held across the HTTP call, and a
//!   replica that dies loses its claims when the lease runs out — another
//!   takes them over.
//! * Delivered rows are deleted after `callbacks.keep_delivered_secs`
//!   ([`Store::prune`]), so the queue table stays small and cheap to vacuum.
//!
//! One connection per process (callback volume is one row per run status
//! change), re-opened when it drops. The connection is plain TCP: run the
//! database on a private network or loopback (TLS is not built in).

use tokio::sync::Mutex;
use tokio_postgres::{Client, NoTls, Row};

use super::*;

/// The default table name.
pub const TABLE: &str = "v1compat_callbacks";

pub struct PostgresStore {
    url: String,
    table: String,
    client: Mutex<Option<Client>>,
}

fn e(err: impl std::fmt::Display) -> StoreError {
    StoreError::new(err)
}

const COLUMNS: &str = "id, run_slug, status, token, results, received_ms, attempts, next_ms, state, last_error, delivered_status, lease_until_ms, lease_owner, finished_ms";

fn from_row(r: &Row) -> StoreResult<Event> {
    let state: String = r.try_get("state").map_err(e)?;
    let ms = |name: &str| -> StoreResult<u64> {
        Ok(r.try_get::<_, i64>(name).map_err(e)?.max(0) as u64)
    };
    Ok(Event {
        id: r.try_get("id").map_err(e)?,
        run_slug: r.try_get("run_slug").map_err(e)?,
        status: r.try_get("status").map_err(e)?,
        token: r.try_get("token").map_err(e)?,
        results: r.try_get("results").map_err(e)?,
        received_ms: ms("received_ms")?,
        attempts: r.try_get::<_, i32>("attempts").map_err(e)?.max(0) as u32,
        next_ms: ms("next_ms")?,
        state: State::parse(&state).ok_or_else(|| e(format!("unknown state {state:?}")))?,
        last_error: r.try_get("last_error").map_err(e)?,
        delivered_status: r.try_get("delivered_status").map_err(e)?,
        lease_until_ms: ms("lease_until_ms")?,
        lease_owner: r.try_get("lease_owner").map_err(e)?,
        finished_ms: ms("finished_ms")?,
    })
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl PostgresStore {
    /// Connects and creates the table if needed. `table` must be a plain
    /// identifier (tests use their own tables).
    pub async fn connect(url: &str, table: &str) -> StoreResult<PostgresStore> {
        if table.is_empty()
            || table.len() > 60
            || !table
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(e(format!("table name {table:?} is not a plain identifier")));
        }
        let store = PostgresStore {
            url: url.to_owned(),
            table: table.to_owned(),
            client: Mutex::new(None),
        };
        let t = &store.table;
        let schema = format!(
            "CREATE TABLE IF NOT EXISTS {t} (
                id text PRIMARY KEY,
                run_slug text NOT NULL,
                status text NOT NULL,
                token text NOT NULL,
                results bigint NOT NULL,
                received_ms bigint NOT NULL,
                attempts integer NOT NULL,
                next_ms bigint NOT NULL,
                state text NOT NULL,
                last_error text NOT NULL DEFAULT '',
                delivered_status text,
                lease_until_ms bigint NOT NULL DEFAULT 0,
                lease_owner text NOT NULL DEFAULT '',
                finished_ms bigint NOT NULL DEFAULT 0
            );
            CREATE INDEX IF NOT EXISTS {t}_due ON {t} (next_ms) WHERE state = 'pending';
            CREATE INDEX IF NOT EXISTS {t}_run ON {t} (run_slug);"
        );
        let mut guard = store.conn().await?;
        let client = guard.as_mut().ok_or_else(|| e("no connection"))?;
        // Replicas starting together must not race on CREATE TABLE.
        let tx = client.transaction().await.map_err(e)?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1))",
            &[&store.table],
        )
        .await
        .map_err(e)?;
        tx.batch_execute(&schema).await.map_err(e)?;
        tx.commit().await.map_err(e)?;
        drop(guard);
        Ok(store)
    }

    /// The connection, opened again if it dropped.
    async fn conn(&self) -> StoreResult<tokio::sync::MutexGuard<'_, Option<Client>>> {
        let mut guard = self.client.lock().await;
        if guard.as_ref().is_none_or(Client::is_closed) {
            let (client, connection) = tokio_postgres::connect(&self.url, NoTls)
                .await
                .map_err(|err| e(format!("cannot connect to PostgreSQL: {err}")))?;
            tokio::spawn(async move {
                if let Err(err) = connection.await {
                    tracing::warn!(error = %err, "callback store: PostgreSQL connection ended");
                }
            });
            *guard = Some(client);
        }
        Ok(guard)
    }

    async fn upsert(&self, tx: &tokio_postgres::Transaction<'_>, ev: &Event) -> StoreResult<()> {
        let sql = format!(
            "INSERT INTO {} ({COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14)
             ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, token = EXCLUDED.token,
               results = EXCLUDED.results, attempts = EXCLUDED.attempts, next_ms = EXCLUDED.next_ms,
               state = EXCLUDED.state, last_error = EXCLUDED.last_error,
               delivered_status = EXCLUDED.delivered_status, lease_until_ms = EXCLUDED.lease_until_ms,
               lease_owner = EXCLUDED.lease_owner, finished_ms = EXCLUDED.finished_ms",
            self.table
        );
        let attempts = i32::try_from(ev.attempts).unwrap_or(i32::MAX);
        tx.execute(
            &sql,
            &[
                &ev.id,
                &ev.run_slug,
                &ev.status,
                &ev.token,
                &ev.results,
                &ms(ev.received_ms),
                &attempts,
                &ms(ev.next_ms),
                &ev.state.as_str(),
                &ev.last_error,
                &ev.delivered_status,
                &ms(ev.lease_until_ms),
                &ev.lease_owner,
                &ms(ev.finished_ms),
            ],
        )
        .await
        .map_err(e)?;
        Ok(())
    }

    /// Runs `plan` over one run's rows under that run's advisory lock and
    /// writes what it returns, in one transaction.
    async fn with_run<T>(
        &self,
        run: &str,
        plan: impl FnOnce(Vec<Event>) -> (Vec<Event>, T),
    ) -> StoreResult<T> {
        let mut guard = self.conn().await?;
        let client = guard.as_mut().ok_or_else(|| e("no connection"))?;
        let tx = client.transaction().await.map_err(e)?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1))",
            &[&format!("{}:{run}", self.table)],
        )
        .await
        .map_err(e)?;
        let sql = format!(
            "SELECT {COLUMNS} FROM {} WHERE run_slug = $1 FOR UPDATE",
            self.table
        );
        let rows = tx.query(&sql, &[&run]).await.map_err(e)?;
        let events = rows.iter().map(from_row).collect::<StoreResult<Vec<_>>>()?;
        let (writes, out) = plan(events);
        for w in &writes {
            self.upsert(&tx, w).await?;
        }
        tx.commit().await.map_err(e)?;
        Ok(out)
    }

    async fn by_id(&self, id: &str) -> StoreResult<Option<Event>> {
        let mut guard = self.conn().await?;
        let client = guard.as_mut().ok_or_else(|| e("no connection"))?;
        let sql = format!("SELECT {COLUMNS} FROM {} WHERE id = $1", self.table);
        match client.query_opt(&sql, &[&id]).await.map_err(e)? {
            Some(r) => from_row(&r).map(Some),
            None => Ok(None),
        }
    }

    /// Changes one row with `f` under a row lock; returns whether it existed.
    async fn update_one(&self, id: &str, f: impl FnOnce(&mut Event) -> bool) -> StoreResult<bool> {
        let mut guard = self.conn().await?;
        let client = guard.as_mut().ok_or_else(|| e("no connection"))?;
        let tx = client.transaction().await.map_err(e)?;
        let sql = format!(
            "SELECT {COLUMNS} FROM {} WHERE id = $1 FOR UPDATE",
            self.table
        );
        let Some(row) = tx.query_opt(&sql, &[&id]).await.map_err(e)? else {
            return Ok(false);
        };
        let mut ev = from_row(&row)?;
        let changed = f(&mut ev);
        if changed {
            self.upsert(&tx, &ev).await?;
        }
        tx.commit().await.map_err(e)?;
        Ok(changed)
    }
}

impl Store for PostgresStore {
    fn insert(&self, event: Event) -> StoreFuture<'_, Inserted> {
        Box::pin(async move {
            let run = event.run_slug.clone();
            let now = event.received_ms;
            self.with_run(&run, move |same| {
                let plan = plan_insert(event, &same, now);
                (plan.writes, plan.outcome)
            })
            .await
        })
    }

    fn claim(
        &self,
        now_ms: u64,
        owner: &str,
        lease_ms: u64,
        limit: usize,
    ) -> StoreFuture<'_, Vec<Event>> {
        let owner = owner.to_owned();
        Box::pin(async move {
            let mut guard = self.conn().await?;
            let client = guard.as_mut().ok_or_else(|| e("no connection"))?;
            let t = &self.table;
            let sql = format!(
                "UPDATE {t} SET lease_until_ms = $2, lease_owner = $3
                 WHERE id IN (SELECT id FROM {t}
                              WHERE state = 'pending' AND next_ms <= $1 AND lease_until_ms <= $1
                              ORDER BY next_ms LIMIT $4 FOR UPDATE SKIP LOCKED)
                 RETURNING {COLUMNS}"
            );
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let rows = client
                .query(&sql, &[&ms(now_ms), &ms(now_ms + lease_ms), &owner, &limit])
                .await
                .map_err(e)?;
            let mut out = rows.iter().map(from_row).collect::<StoreResult<Vec<_>>>()?;
            out.sort_by_key(|e| e.next_ms);
            Ok(out)
        })
    }

    fn delivered(&self, id: &str, as_status: &str, now_ms: u64) -> StoreFuture<'_, ()> {
        let (id, as_status) = (id.to_owned(), as_status.to_owned());
        Box::pin(async move {
            let Some(ev) = self.by_id(&id).await? else {
                return Ok(());
            };
            self.with_run(&ev.run_slug, |same| {
                (plan_delivered(&id, &as_status, &same, now_ms), ())
            })
            .await
        })
    }

    fn before_send(
        &self,
        id: &str,
        owner: &str,
        as_status: &str,
        now_ms: u64,
    ) -> StoreFuture<'_, bool> {
        let (id, owner, as_status) = (id.to_owned(), owner.to_owned(), as_status.to_owned());
        Box::pin(async move {
            let Some(ev) = self.by_id(&id).await? else {
                return Ok(false);
            };
            self.with_run(&ev.run_slug, |same| {
                plan_before_send(&id, &owner, &as_status, &same, now_ms)
            })
            .await
        })
    }

    fn failed(
        &self,
        id: &str,
        attempts: u32,
        next_ms: Option<u64>,
        error: &str,
        now_ms: u64,
    ) -> StoreFuture<'_, ()> {
        let (id, error) = (id.to_owned(), error.to_owned());
        Box::pin(async move {
            self.update_one(&id, |ev| {
                apply_failed(ev, attempts, next_ms, &error, now_ms);
                true
            })
            .await
            .map(|_| ())
        })
    }

    fn release(&self, id: &str, next_ms: u64) -> StoreFuture<'_, ()> {
        let id = id.to_owned();
        Box::pin(async move {
            self.update_one(&id, |ev| {
                if ev.state != State::Pending {
                    return false;
                }
                ev.lease_until_ms = 0;
                ev.lease_owner.clear();
                ev.next_ms = next_ms;
                true
            })
            .await
            .map(|_| ())
        })
    }

    fn get(&self, id: &str) -> StoreFuture<'_, Option<Event>> {
        let id = id.to_owned();
        Box::pin(async move { self.by_id(&id).await })
    }

    fn list(&self, state: State, since_ms: u64, limit: usize) -> StoreFuture<'_, Vec<Event>> {
        Box::pin(async move {
            let mut guard = self.conn().await?;
            let client = guard.as_mut().ok_or_else(|| e("no connection"))?;
            let sql = format!(
                "SELECT {COLUMNS} FROM {} WHERE state = $1 AND received_ms >= $2 ORDER BY received_ms LIMIT $3",
                self.table
            );
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let rows = client
                .query(&sql, &[&state.as_str(), &ms(since_ms), &limit])
                .await
                .map_err(e)?;
            rows.iter().map(from_row).collect()
        })
    }

    fn redeliver(&self, id: &str, now_ms: u64) -> StoreFuture<'_, bool> {
        let id = id.to_owned();
        Box::pin(async move {
            self.update_one(&id, |ev| {
                if ev.state == State::Pending {
                    return false;
                }
                apply_redeliver(ev, now_ms);
                true
            })
            .await
        })
    }

    fn redeliver_dead_since(
        &self,
        since_ms: u64,
        now_ms: u64,
        limit: usize,
    ) -> StoreFuture<'_, u64> {
        Box::pin(async move {
            let mut guard = self.conn().await?;
            let client = guard.as_mut().ok_or_else(|| e("no connection"))?;
            let t = &self.table;
            let sql = format!(
                "UPDATE {t} SET state = 'pending', attempts = 0, next_ms = $2, lease_until_ms = 0,
                   lease_owner = '', finished_ms = 0, delivered_status = NULL
                 WHERE id IN (SELECT id FROM {t} WHERE state = 'dead' AND received_ms >= $1
                              ORDER BY received_ms LIMIT $3 FOR UPDATE SKIP LOCKED)"
            );
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            client
                .execute(&sql, &[&ms(since_ms), &ms(now_ms), &limit])
                .await
                .map_err(e)
        })
    }

    fn stats(&self) -> StoreFuture<'_, Stats> {
        Box::pin(async move {
            let mut guard = self.conn().await?;
            let client = guard.as_mut().ok_or_else(|| e("no connection"))?;
            let sql = format!(
                "SELECT count(*) FILTER (WHERE state = 'pending'),
                        count(*) FILTER (WHERE state = 'dead'),
                        min(received_ms) FILTER (WHERE state = 'pending'),
                        min(greatest(next_ms, lease_until_ms)) FILTER (WHERE state = 'pending')
                 FROM {}",
                self.table
            );
            let r = client.query_one(&sql, &[]).await.map_err(e)?;
            let opt = |i: usize| -> StoreResult<Option<u64>> {
                Ok(r.try_get::<_, Option<i64>>(i)
                    .map_err(e)?
                    .map(|v| v.max(0) as u64))
            };
            Ok(Stats {
                pending: r.try_get::<_, i64>(0).map_err(e)?.max(0) as u64,
                dead: r.try_get::<_, i64>(1).map_err(e)?.max(0) as u64,
                oldest_pending_ms: opt(2)?,
                next_due_ms: opt(3)?,
            })
        })
    }

    fn prune(&self, before_ms: u64) -> StoreFuture<'_, u64> {
        Box::pin(async move {
            let mut guard = self.conn().await?;
            let client = guard.as_mut().ok_or_else(|| e("no connection"))?;
            let sql = format!(
                "DELETE FROM {} WHERE state = 'done' AND finished_ms < $1",
                self.table
            );
            client.execute(&sql, &[&ms(before_ms)]).await.map_err(e)
        })
    }

    fn prune_dead(&self, before_ms: u64, keep: u64) -> StoreFuture<'_, DeadPruned> {
        Box::pin(async move {
            let mut guard = self.conn().await?;
            let client = guard.as_mut().ok_or_else(|| e("no connection"))?;
            let t = &self.table;
            // One transaction: another replica pruning at once sees the
            // count after this one's deletions, not before.
            let tx = client.transaction().await.map_err(e)?;
            let aged = tx
                .execute(
                    &format!("DELETE FROM {t} WHERE state = 'dead' AND finished_ms < $1"),
                    &[&ms(before_ms)],
                )
                .await
                .map_err(e)?;
            let over_count = tx
                .execute(
                    &format!(
                        "DELETE FROM {t} WHERE id IN (
                           SELECT id FROM {t} WHERE state = 'dead'
                           ORDER BY finished_ms, received_ms, id
                           LIMIT greatest((SELECT count(*) FROM {t} WHERE state = 'dead') - $1, 0))"
                    ),
                    &[&ms(keep)],
                )
                .await
                .map_err(e)?;
            tx.commit().await.map_err(e)?;
            Ok(DeadPruned { aged, over_count })
        })
    }
}
