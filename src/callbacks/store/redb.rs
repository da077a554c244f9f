//! The default store: one redb file. redb commits with `Durability::Immediate`
//! (the commit slot is flipped and fsynced before `commit` returns), so an
//! event acknowledged to V2 survives a crash or `kill -9`. redb locks the file,
//! so one process owns it; leases left by a process that died are cleared
//! when the next one opens the file.
//!
//! Tables: `events` (id → JSON event), `runs` (`run\nid` → ()), the index
//! that finds a run's other statuses for de-duplication and ordering, and
//! `states` (`state\nid` → ()), so claiming and the queue figures read only
//! pending and dead events, never the delivered ones kept for listing.
//! The blocking redb calls run on tokio's blocking pool.

use std::path::Path;
use std::sync::Arc;

use ::redb::{Database, ReadableTable, TableDefinition};

use super::*;

const EVENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("events");
const RUNS: TableDefinition<&str, ()> = TableDefinition::new("runs");
const STATES: TableDefinition<&str, ()> = TableDefinition::new("states");

pub(crate) struct RedbStore {
    db: Arc<Database>,
}

type Tx<'a> = (
    ::redb::Table<'a, &'static str, &'static [u8]>,
    ::redb::Table<'a, &'static str, ()>,
    ::redb::Table<'a, &'static str, ()>,
);

/// The same tables in a read transaction: what only looks (an event, a
/// listing, the queue figures) commits nothing, so it costs no fsync.
type ReadTx = (
    ::redb::ReadOnlyTable<&'static str, &'static [u8]>,
    ::redb::ReadOnlyTable<&'static str, ()>,
    ::redb::ReadOnlyTable<&'static str, ()>,
);

fn state_key(state: State, id: &str) -> String {
    format!("{}\n{id}", state.as_str())
}

fn e(err: impl std::fmt::Display) -> StoreError {
    StoreError::new(err)
}

fn decode(bytes: &[u8]) -> StoreResult<Event> {
    serde_json::from_slice(bytes).map_err(e)
}

fn put(t: &mut Tx<'_>, ev: &Event) -> StoreResult<()> {
    if let Some(old) = load(t, &ev.id)? {
        if old.state != ev.state {
            t.2.remove(state_key(old.state, &ev.id).as_str())
                .map_err(e)?;
        }
    }
    t.2.insert(state_key(ev.state, &ev.id).as_str(), ())
        .map_err(e)?;
    let bytes = serde_json::to_vec(ev).map_err(e)?;
    t.0.insert(ev.id.as_str(), bytes.as_slice()).map_err(e)?;
    t.1.insert(format!("{}\n{}", ev.run_slug, ev.id).as_str(), ())
        .map_err(e)?;
    Ok(())
}

/// The three tables, as a write or a read transaction opened them: what
/// only reads takes either.
trait Tables {
    fn events(&self) -> &impl ReadableTable<&'static str, &'static [u8]>;
    fn runs(&self) -> &impl ReadableTable<&'static str, ()>;
    fn states(&self) -> &impl ReadableTable<&'static str, ()>;
}

impl Tables for Tx<'_> {
    fn events(&self) -> &impl ReadableTable<&'static str, &'static [u8]> {
        &self.0
    }
    fn runs(&self) -> &impl ReadableTable<&'static str, ()> {
        &self.1
    }
    fn states(&self) -> &impl ReadableTable<&'static str, ()> {
        &self.2
    }
}

impl Tables for ReadTx {
    fn events(&self) -> &impl ReadableTable<&'static str, &'static [u8]> {
        &self.0
    }
    fn runs(&self) -> &impl ReadableTable<&'static str, ()> {
        &self.1
    }
    fn states(&self) -> &impl ReadableTable<&'static str, ()> {
        &self.2
    }
}

fn load(t: &impl Tables, id: &str) -> StoreResult<Option<Event>> {
    match t.events().get(id).map_err(e)? {
        Some(v) => decode(v.value()).map(Some),
        None => Ok(None),
    }
}

/// The events of one run, through the `runs` index.
fn run_events(t: &impl Tables, run: &str) -> StoreResult<Vec<Event>> {
    indexed(t, t.runs(), run)
}

/// The events in `state`, through the `states` index.
fn in_state(t: &impl Tables, state: State) -> StoreResult<Vec<Event>> {
    indexed(t, t.states(), state.as_str())
}

/// [`plan_before_send`] over the run of `id` as `t` has it.
fn before_send_plan(
    t: &impl Tables,
    id: &str,
    owner: &str,
    as_status: &str,
    now_ms: u64,
) -> StoreResult<(Vec<Event>, bool)> {
    let Some(ev) = load(t, id)? else {
        return Ok((Vec::new(), false));
    };
    let same = run_events(t, &ev.run_slug)?;
    Ok(plan_before_send(id, owner, as_status, &same, now_ms))
}

/// The events an index lists under `prefix`: its keys are `{prefix}\n{id}`,
/// so the range `{prefix}\n..{prefix}\u{b}` (the next character) holds them all.
fn indexed(
    t: &impl Tables,
    index: &impl ReadableTable<&'static str, ()>,
    prefix: &str,
) -> StoreResult<Vec<Event>> {
    let from = format!("{prefix}\n");
    let to = format!("{prefix}\u{b}");
    let mut ids: Vec<String> = Vec::new();
    for item in index.range(from.as_str()..to.as_str()).map_err(e)? {
        let (k, _) = item.map_err(e)?;
        if let Some((_, id)) = k.value().split_once('\n') {
            ids.push(id.to_owned());
        }
    }
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(ev) = load(t, &id)? {
            out.push(ev);
        }
    }
    Ok(out)
}

/// What holds a redb file that is "already open": a redb file serves one
/// process, and the lock says no more than that. The processes that have
/// it open are named when `/proc` shows them (Linux).
fn already_open(path: &Path) -> String {
    let holders = holders(path);
    let who = if holders.is_empty() {
        "another process holds it (another v1compat serving with the same callbacks.store?)"
            .to_owned()
    } else {
        format!("held by {}", holders.join(", "))
    };
    format!(
        "callbacks.store {}: the file is already open: {who}. A redb store serves one process: stop the other one, give this one a file of its own, or use a PostgreSQL store for several replicas",
        path.display()
    )
}

/// The processes with `path` open, as `pid 123 (v1compat)`; this one as
/// `this process`. Empty where `/proc` cannot say.
fn holders(path: &Path) -> Vec<String> {
    let Ok(target) = std::fs::canonicalize(path) else {
        return Vec::new();
    };
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        if !fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == target))
        {
            continue;
        }
        found.push(if pid == me {
            "this process".to_owned()
        } else {
            let name = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            format!("pid {pid} ({})", name.trim())
        });
        if found.len() == 8 {
            break;
        }
    }
    found
}

impl RedbStore {
    /// Opens (or creates) the file and clears leases a dead process left.
    pub(crate) fn open(path: &Path) -> StoreResult<RedbStore> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|err| e(format!("{}: {err}", dir.display())))?;
        }
        let db = Database::create(path).map_err(|err| match err {
            ::redb::DatabaseError::DatabaseAlreadyOpen => e(already_open(path)),
            err => e(format!("{}: {err}", path.display())),
        })?;
        let store = RedbStore { db: Arc::new(db) };
        store.write_now(|t| {
            for mut ev in in_state(t, State::Pending)? {
                if ev.lease_until_ms != 0 {
                    ev.lease_until_ms = 0;
                    ev.lease_owner.clear();
                    put(t, &ev)?;
                }
            }
            Ok(())
        })?;
        Ok(store)
    }

    fn write_now<T>(&self, f: impl FnOnce(&mut Tx<'_>) -> StoreResult<T>) -> StoreResult<T> {
        let tx = self.db.begin_write().map_err(e)?;
        let out = {
            let mut t = (
                tx.open_table(EVENTS).map_err(e)?,
                tx.open_table(RUNS).map_err(e)?,
                tx.open_table(STATES).map_err(e)?,
            );
            f(&mut t)?
        };
        tx.commit().map_err(e)?;
        Ok(out)
    }

    /// Runs `f` in one read transaction on the blocking pool.
    fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&ReadTx) -> StoreResult<T> + Send + 'static,
    ) -> StoreFuture<'_, T> {
        let db = self.db.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let tx = db.begin_read().map_err(e)?;
                let t = (
                    tx.open_table(EVENTS).map_err(e)?,
                    tx.open_table(RUNS).map_err(e)?,
                    tx.open_table(STATES).map_err(e)?,
                );
                f(&t)
            })
            .await
            .map_err(e)?
        })
    }

    /// Runs `f` in one write transaction on the blocking pool.
    fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Tx<'_>) -> StoreResult<T> + Send + 'static,
    ) -> StoreFuture<'_, T> {
        let db = self.db.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || RedbStore { db }.write_now(f))
                .await
                .map_err(e)?
        })
    }
}

impl Store for RedbStore {
    fn insert(&self, event: Event) -> StoreFuture<'_, Inserted> {
        self.write(move |t| {
            let now = event.received_ms;
            let plan = plan_insert(event.clone(), &run_events(t, &event.run_slug)?, now);
            for w in &plan.writes {
                put(t, w)?;
            }
            Ok(plan.outcome)
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
        self.write(move |t| {
            let mut due: Vec<Event> = in_state(t, State::Pending)?
                .into_iter()
                .filter(|e| claimable(e, now_ms))
                .collect();
            due.sort_by_key(|e| e.next_ms);
            due.truncate(limit);
            for ev in &mut due {
                ev.lease_until_ms = now_ms + lease_ms;
                ev.lease_owner = owner.clone();
                put(t, ev)?;
            }
            Ok(due)
        })
    }

    fn delivered(&self, id: &str, as_status: &str, now_ms: u64) -> StoreFuture<'_, ()> {
        let (id, as_status) = (id.to_owned(), as_status.to_owned());
        self.write(move |t| {
            let Some(ev) = load(t, &id)? else {
                return Ok(());
            };
            for w in plan_delivered(&id, &as_status, &run_events(t, &ev.run_slug)?, now_ms) {
                put(t, &w)?;
            }
            Ok(())
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
        // Read first: the usual answer, "send", writes nothing, so it costs
        // no commit (and no fsync) a delivery.
        Box::pin(async move {
            let (writes, send) = {
                let (id, owner, as_status) = (id.clone(), owner.clone(), as_status.clone());
                self.read(move |t| before_send_plan(t, &id, &owner, &as_status, now_ms))
                    .await?
            };
            if writes.is_empty() {
                return Ok(send);
            }
            // Made done: planned again under the write lock, as things are now.
            self.write(move |t| {
                let (writes, send) = before_send_plan(t, &id, &owner, &as_status, now_ms)?;
                for w in &writes {
                    put(t, w)?;
                }
                Ok(send)
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
        self.write(move |t| {
            if let Some(mut ev) = load(t, &id)? {
                apply_failed(&mut ev, attempts, next_ms, &error, now_ms);
                put(t, &ev)?;
            }
            Ok(())
        })
    }

    fn release(&self, id: &str, next_ms: u64) -> StoreFuture<'_, ()> {
        let id = id.to_owned();
        self.write(move |t| {
            if let Some(mut ev) = load(t, &id)?.filter(|e| e.state == State::Pending) {
                ev.lease_until_ms = 0;
                ev.lease_owner.clear();
                ev.next_ms = next_ms;
                put(t, &ev)?;
            }
            Ok(())
        })
    }

    fn get(&self, id: &str) -> StoreFuture<'_, Option<Event>> {
        let id = id.to_owned();
        self.read(move |t| load(t, &id))
    }

    fn list(&self, state: State, since_ms: u64, limit: usize) -> StoreFuture<'_, Vec<Event>> {
        self.read(move |t| {
            let mut out: Vec<Event> = in_state(t, state)?
                .into_iter()
                .filter(|e| e.received_ms >= since_ms)
                .collect();
            out.sort_by_key(|e| e.received_ms);
            out.truncate(limit);
            Ok(out)
        })
    }

    fn redeliver(&self, id: &str, now_ms: u64) -> StoreFuture<'_, bool> {
        let id = id.to_owned();
        self.write(move |t| match load(t, &id)? {
            Some(mut ev) if ev.state != State::Pending => {
                apply_redeliver(&mut ev, now_ms);
                put(t, &ev)?;
                Ok(true)
            }
            _ => Ok(false),
        })
    }

    fn redeliver_dead_since(
        &self,
        since_ms: u64,
        now_ms: u64,
        limit: usize,
    ) -> StoreFuture<'_, u64> {
        self.write(move |t| {
            let mut n = 0;
            for mut ev in in_state(t, State::Dead)? {
                if n as usize >= limit {
                    break;
                }
                if ev.state == State::Dead && ev.received_ms >= since_ms {
                    apply_redeliver(&mut ev, now_ms);
                    put(t, &ev)?;
                    n += 1;
                }
            }
            Ok(n)
        })
    }

    fn stats(&self) -> StoreFuture<'_, Stats> {
        self.read(|t| {
            let mut live = in_state(t, State::Pending)?;
            live.extend(in_state(t, State::Dead)?);
            Ok(stats_of(live.iter()))
        })
    }

    fn prune(&self, before_ms: u64) -> StoreFuture<'_, u64> {
        self.write(move |t| {
            let mut n = 0;
            for ev in in_state(t, State::Done)? {
                if ev.finished_ms < before_ms {
                    t.0.remove(ev.id.as_str()).map_err(e)?;
                    t.2.remove(state_key(State::Done, &ev.id).as_str())
                        .map_err(e)?;
                    t.1.remove(format!("{}\n{}", ev.run_slug, ev.id).as_str())
                        .map_err(e)?;
                    n += 1;
                }
            }
            Ok(n)
        })
    }

    fn prune_dead(&self, before_ms: u64, keep: u64) -> StoreFuture<'_, DeadPruned> {
        self.write(move |t| {
            let plan = plan_prune_dead(in_state(t, State::Dead)?, before_ms, keep);
            for (ev, _) in &plan {
                t.0.remove(ev.id.as_str()).map_err(e)?;
                t.2.remove(state_key(State::Dead, &ev.id).as_str())
                    .map_err(e)?;
                t.1.remove(format!("{}\n{}", ev.run_slug, ev.id).as_str())
                    .map_err(e)?;
            }
            Ok(pruned_of(&plan))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_already_open_is_named_with_what_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cb.redb");
        let _first = RedbStore::open(&path).unwrap();
        let Err(err) = RedbStore::open(&path) else {
            panic!("opened twice");
        };
        let err = err.to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains("already open"), "{err}");
        assert!(err.contains("held by this process"), "{err}");
    }

    #[tokio::test]
    async fn passes_the_store_suite() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(&dir.path().join("cb.redb")).unwrap();
        suite::run_all(&store).await;
    }

    #[tokio::test]
    async fn events_and_their_schedule_survive_reopening_and_leases_are_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/cb.redb");
        {
            let store = RedbStore::open(&path).unwrap();
            store
                .insert(Event::new("R", "succeeded", "tok", 2, 10, 0))
                .await
                .unwrap();
            assert_eq!(store.claim(10, "gone", 60_000, 5).await.unwrap().len(), 1);
        }
        let store = RedbStore::open(&path).unwrap();
        let again = store.claim(11, "new", 60_000, 5).await.unwrap();
        assert_eq!(again.len(), 1, "the dead owner's lease was cleared");
        assert_eq!(again[0].token, "tok");
    }
}
