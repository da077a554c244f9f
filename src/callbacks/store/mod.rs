//! Where received callbacks wait for delivery: one trait, three backends —
//! [`memory`] (tests), [`redb`] (the default: an embedded, crash-safe file,
//! one process) and [`postgres`] (several replicas share one queue; claims
//! with `FOR UPDATE SKIP LOCKED` and a lease).
//!
//! The rules every backend follows are written once here as plain functions
//! over the events of one run ([`plan_insert`], [`plan_delivered`]), so the
//! backends only load, apply and save:
//! * an event is `(run, status)` on the token it came in on, and the rules
//!   below hold among one token's events of a run (a callback naming the run
//!   on another token, someone else's, neither de-duplicates nor supersedes
//!   the run's own); receiving the same pair again changes nothing;
//! * a status lower than one the run already has (pending or delivered) is
//!   stored as done, and a newer status makes older pending ones done — so
//!   receivers never see a run go backwards;
//! * a delivery that carried a newer status than its event (enrichment read
//!   the run) also records that newer status as delivered;
//! * right before it is sent ([`plan_before_send`]), an event goes out only
//!   if it is still its deliverer's pending claim and no other event of the
//!   run went out with a newer status (one superseded while its attempt was
//!   under way, or an older one redelivered, would take the run back).

use std::future::Future;
use std::pin::Pin;

use super::event::{rank, store_id, Event, State};

pub mod memory;
pub mod postgres;
pub(crate) mod redb;

#[derive(Debug, thiserror::Error)]
#[error("callback store: {0}")]
pub struct StoreError(pub String);

impl StoreError {
    pub fn new(e: impl std::fmt::Display) -> StoreError {
        StoreError(e.to_string())
    }
}

pub type StoreResult<T> = Result<T, StoreError>;
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = StoreResult<T>> + Send + 'a>>;

/// What storing a received event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// Stored; will be delivered.
    New,
    /// The same (run, status) was already there.
    Duplicate,
    /// Stored as done: the run already has a newer status.
    Superseded,
}

/// Queue figures for metrics and the admin API.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    pub pending: u64,
    pub dead: u64,
    /// When the oldest pending event was received (ms).
    pub oldest_pending_ms: Option<u64>,
    /// The earliest `next_ms` of a pending event.
    pub next_due_ms: Option<u64>,
}

/// The callback store.
pub trait Store: Send + Sync + 'static {
    /// Stores a received event durably (committed before this resolves).
    fn insert(&self, event: Event) -> StoreFuture<'_, Inserted>;
    /// Claims up to `limit` pending events due at `now_ms` for `owner`
    /// until `now_ms + lease_ms`, oldest due first.
    fn claim(
        &self,
        now_ms: u64,
        owner: &str,
        lease_ms: u64,
        limit: usize,
    ) -> StoreFuture<'_, Vec<Event>>;
    /// The event was delivered, carrying the run's status `as_status`.
    fn delivered(&self, id: &str, as_status: &str, now_ms: u64) -> StoreFuture<'_, ()>;
    /// An attempt failed: count it and schedule the next at `next_ms`, or
    /// mark the event dead when `next_ms` is `None`.
    fn failed(
        &self,
        id: &str,
        attempts: u32,
        next_ms: Option<u64>,
        error: &str,
        now_ms: u64,
    ) -> StoreFuture<'_, ()>;
    /// Whether the claimed event `id` may go out now carrying `as_status`
    /// ([`plan_before_send`]); one that may not because the run's receiver
    /// has a newer status is made done.
    fn before_send(
        &self,
        id: &str,
        owner: &str,
        as_status: &str,
        now_ms: u64,
    ) -> StoreFuture<'_, bool>;
    /// Gives a claim back without counting an attempt (target busy, shutdown).
    fn release(&self, id: &str, next_ms: u64) -> StoreFuture<'_, ()>;
    fn get(&self, id: &str) -> StoreFuture<'_, Option<Event>>;
    /// Events in `state` received at or after `since_ms`, oldest first.
    fn list(&self, state: State, since_ms: u64, limit: usize) -> StoreFuture<'_, Vec<Event>>;
    /// Makes a dead (or done) event pending again with a fresh schedule.
    fn redeliver(&self, id: &str, now_ms: u64) -> StoreFuture<'_, bool>;
    /// Makes every dead event received at or after `since_ms` pending again
    /// (at most `limit`); returns how many.
    fn redeliver_dead_since(
        &self,
        since_ms: u64,
        now_ms: u64,
        limit: usize,
    ) -> StoreFuture<'_, u64>;
    fn stats(&self) -> StoreFuture<'_, Stats>;
    /// Deletes done events finished before `before_ms`; returns how many.
    fn prune(&self, before_ms: u64) -> StoreFuture<'_, u64>;
    /// Deletes dead events finished before `before_ms`, then the oldest
    /// (first finished first) beyond `keep` ([`plan_prune_dead`]).
    fn prune_dead(&self, before_ms: u64, keep: u64) -> StoreFuture<'_, DeadPruned>;
}

/// What pruning dead events removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeadPruned {
    /// Finished before the age cut.
    pub aged: u64,
    /// The oldest beyond the count kept.
    pub over_count: u64,
}

/// The dead events to delete: those finished before `before_ms`, then the
/// oldest beyond `keep` (by time finished, then received, then id, so
/// every backend picks the same ones). Each comes back with whether it went for its age.
pub fn plan_prune_dead(mut dead: Vec<Event>, before_ms: u64, keep: u64) -> Vec<(Event, bool)> {
    dead.sort_by(|a, b| {
        (a.finished_ms, a.received_ms, &a.id).cmp(&(b.finished_ms, b.received_ms, &b.id))
    });
    let over = (dead.len() as u64).saturating_sub(keep) as usize;
    dead.into_iter()
        .enumerate()
        .filter_map(|(i, e)| {
            let aged = e.finished_ms < before_ms;
            (aged || i < over).then_some((e, aged))
        })
        .collect()
}

/// Counts what [`plan_prune_dead`] chose.
pub fn pruned_of(plan: &[(Event, bool)]) -> DeadPruned {
    let aged = plan.iter().filter(|(_, aged)| *aged).count() as u64;
    DeadPruned {
        aged,
        over_count: plan.len() as u64 - aged,
    }
}

/// What to write for a received event, given the run's stored events.
pub struct InsertPlan {
    pub outcome: Inserted,
    /// Rows to write (the new event, and older pending ones made done).
    pub writes: Vec<Event>,
}

/// The events of `same_run` that came in on `token`: the ones the rules
/// weigh against each other.
fn on_token<'a>(same_run: &'a [Event], token: &'a str) -> impl Iterator<Item = &'a Event> + 'a {
    same_run.iter().filter(move |e| e.token == token)
}

pub fn plan_insert(mut new: Event, same_run: &[Event], now_ms: u64) -> InsertPlan {
    let same_run: Vec<Event> = on_token(same_run, &new.token).cloned().collect();
    // The same status on the same token: V2 repeating itself. Told by the
    // status, not the id, so that an event stored under an earlier form of
    // the id (before the token was part of it) is still the one it repeats.
    if same_run.iter().any(|e| e.status == new.status) {
        return InsertPlan {
            outcome: Inserted::Duplicate,
            writes: Vec::new(),
        };
    }
    let r = new.rank();
    let newer_known = same_run
        .iter()
        .any(|e| e.rank() > r || e.delivered_status.as_deref().is_some_and(|d| rank(d) > r));
    if newer_known {
        finish(
            &mut new,
            now_ms,
            "superseded: the run already has a newer status",
        );
        return InsertPlan {
            outcome: Inserted::Superseded,
            writes: vec![new],
        };
    }
    let mut writes: Vec<Event> = same_run
        .iter()
        .filter(|e| e.state == State::Pending && e.rank() < r)
        .cloned()
        .map(|mut e| {
            finish(&mut e, now_ms, "superseded by a newer status");
            e
        })
        .collect();
    writes.push(new);
    InsertPlan {
        outcome: Inserted::New,
        writes,
    }
}

/// Rows to write when `id` was delivered as `as_status`.
pub fn plan_delivered(id: &str, as_status: &str, same_run: &[Event], now_ms: u64) -> Vec<Event> {
    let Some(event) = same_run.iter().find(|e| e.id == id) else {
        return Vec::new();
    };
    let same_run: Vec<Event> = on_token(same_run, &event.token).cloned().collect();
    let as_status = as_status.trim().to_ascii_lowercase();
    let r = rank(&as_status);
    let mut writes = Vec::new();
    let mut delivered = event.clone();
    delivered.state = State::Done;
    delivered.delivered_status = Some(as_status.clone());
    delivered.last_error.clear();
    delivered.lease_until_ms = 0;
    delivered.lease_owner.clear();
    delivered.finished_ms = now_ms;
    delivered.attempts += 1;
    // The newer status went out now: its own row (present or still to come
    // from V2) must not go out again.
    let newer_row = same_run.iter().find(|e| e.status == as_status);
    let newer_id = newer_row.map_or_else(
        || store_id(&event.run_slug, &as_status, &event.token),
        |e| e.id.clone(),
    );
    if newer_id != event.id {
        let mut row = newer_row.cloned().unwrap_or_else(|| {
            Event::new(
                &event.run_slug,
                &as_status,
                &event.token,
                event.results,
                now_ms,
                0,
            )
        });
        if row.state != State::Done {
            finish(&mut row, now_ms, "");
            row.delivered_status = Some(as_status.clone());
            writes.push(row);
        }
    }
    for e in &same_run {
        if e.id != event.id && e.id != newer_id && e.state == State::Pending && e.rank() < r {
            let mut e = e.clone();
            finish(&mut e, now_ms, "superseded by a newer status");
            writes.push(e);
        }
    }
    writes.push(delivered);
    writes
}

/// Whether the event `id`, claimed by `owner`, may go out now carrying
/// `as_status`, and the rows to write when it may not. It may not when it
/// is no longer `owner`'s pending claim (a newer status superseded it
/// while its attempt was under way, or it was given up), nor when another
/// event of the run already went out with a newer status (an older event
/// redelivered, or one whose enrichment read failed and fell back to its
/// own status): that one is done, superseded. The same status again may go
/// out (a redelivery the operator asked for).
pub fn plan_before_send(
    id: &str,
    owner: &str,
    as_status: &str,
    same_run: &[Event],
    now_ms: u64,
) -> (Vec<Event>, bool) {
    let Some(event) = same_run.iter().find(|e| e.id == id) else {
        return (Vec::new(), false);
    };
    if event.state != State::Pending || event.lease_owner != owner {
        return (Vec::new(), false);
    }
    let r = rank(as_status);
    let newer_sent = on_token(same_run, &event.token)
        .any(|e| e.id != id && e.delivered_status.as_deref().is_some_and(|d| rank(d) > r));
    if newer_sent {
        let mut done = event.clone();
        finish(
            &mut done,
            now_ms,
            "superseded: the run's receiver already has a newer status",
        );
        return (vec![done], false);
    }
    (Vec::new(), true)
}

fn finish(e: &mut Event, now_ms: u64, note: &str) {
    e.state = State::Done;
    e.lease_until_ms = 0;
    e.lease_owner.clear();
    e.finished_ms = now_ms;
    e.last_error = note.to_owned();
}

/// Applies a failed attempt to `e` (only a pending event changes).
pub fn apply_failed(e: &mut Event, attempts: u32, next_ms: Option<u64>, error: &str, now_ms: u64) {
    if e.state != State::Pending {
        return;
    }
    e.attempts = attempts;
    e.last_error = error.chars().take(500).collect();
    e.lease_until_ms = 0;
    e.lease_owner.clear();
    match next_ms {
        Some(n) => e.next_ms = n,
        None => {
            e.state = State::Dead;
            e.finished_ms = now_ms;
        }
    }
}

/// Makes `e` pending again with a fresh schedule.
pub fn apply_redeliver(e: &mut Event, now_ms: u64) {
    e.state = State::Pending;
    e.attempts = 0;
    e.next_ms = now_ms;
    e.lease_until_ms = 0;
    e.lease_owner.clear();
    e.finished_ms = 0;
    e.delivered_status = None;
}

/// Whether `e` may be claimed at `now_ms`.
pub fn claimable(e: &Event, now_ms: u64) -> bool {
    e.state == State::Pending && e.next_ms <= now_ms && e.lease_until_ms <= now_ms
}

pub fn stats_of<'a>(events: impl Iterator<Item = &'a Event>) -> Stats {
    let mut s = Stats::default();
    for e in events {
        match e.state {
            State::Pending => {
                s.pending += 1;
                s.oldest_pending_ms = Some(
                    s.oldest_pending_ms
                        .map_or(e.received_ms, |o| o.min(e.received_ms)),
                );
                let due = e.next_ms.max(e.lease_until_ms);
                s.next_due_ms = Some(s.next_due_ms.map_or(due, |o| o.min(due)));
            }
            State::Dead => s.dead += 1,
            State::Done => {}
        }
    }
    s
}

/// The store suite every backend must pass (memory and redb in unit tests,
/// PostgreSQL in the integration suite when a server is available).
pub mod suite {
    use super::*;

    fn ev(run: &str, status: &str, now: u64) -> Event {
        Event::new(run, status, "tok", 3, now, 0)
    }

    /// The stored event of `run` and `status` on `token`; it must be there.
    async fn stored(store: &dyn Store, run: &str, status: &str, token: &str) -> Event {
        store
            .get(&store_id(run, status, token))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no event {run}/{status} on {token}"))
    }

    pub async fn run_all(store: &dyn Store) {
        insert_dedupes_and_supersedes(store).await;
        claim_leases_and_failures(store).await;
        delivered_newer_status_blocks_the_older_and_the_later(store).await;
        dead_redelivery_and_prune(store).await;
        nothing_older_goes_out_after_a_newer_status(store).await;
        another_tokens_callbacks_stay_apart(store).await;
        an_event_stored_under_the_earlier_id_form_is_still_a_duplicate(store).await;
        dead_events_are_bounded_by_age_and_count(store).await;
    }

    /// The state of `run`'s `failed` event on `tok`, if it is stored.
    async fn state_of(store: &dyn Store, run: &str) -> Option<State> {
        let id = store_id(run, "failed", "tok");
        store.get(&id).await.unwrap().map(|e| e.state)
    }

    async fn dead_events_are_bounded_by_age_and_count(store: &dyn Store) {
        let before = store.list(State::Dead, 0, 1_000).await.unwrap().len();
        assert_eq!(before, 0, "the suite leaves no dead event before this");
        for (i, run) in ["X1", "X2", "X3", "X4", "X5"].iter().enumerate() {
            let now = 50_000 + i as u64;
            store.insert(ev(run, "failed", now)).await.unwrap();
            let id = store_id(run, "failed", "tok");
            store
                .failed(&id, 1, None, "unknown run", now)
                .await
                .unwrap();
        }
        // Nothing old enough, room for all: nothing goes.
        let none = store.prune_dead(0, 5).await.unwrap();
        assert_eq!(none, DeadPruned::default());
        // X1 by age; then two more beyond the three kept, oldest first.
        let pruned = store.prune_dead(50_001, 2).await.unwrap();
        assert_eq!(pruned.aged, 1, "{pruned:?}");
        assert_eq!(pruned.over_count, 2, "{pruned:?}");
        for run in ["X1", "X2", "X3"] {
            assert_eq!(state_of(store, run).await, None, "{run} pruned");
        }
        for run in ["X4", "X5"] {
            assert_eq!(state_of(store, run).await, Some(State::Dead), "{run} kept");
        }
        assert_eq!(store.stats().await.unwrap().dead, 2);
        // A pruned run's callback is a new event again (its rows are gone
        // from the run's index too).
        assert_eq!(
            store.insert(ev("X1", "failed", 60_000)).await.unwrap(),
            Inserted::New
        );
        // Pending and done events are never touched.
        assert!(!store.list(State::Pending, 0, 100).await.unwrap().is_empty());
    }

    async fn an_event_stored_under_the_earlier_id_form_is_still_a_duplicate(store: &dyn Store) {
        // Stored before the token was part of the id: (run, status) only.
        let mut old = Event::new("U", "running", "tok", 1, 10, 0);
        old.id = super::super::event::event_id("U", "running");
        assert_eq!(store.insert(old).await.unwrap(), Inserted::New);
        assert_eq!(
            store.insert(ev("U", "running", 11)).await.unwrap(),
            Inserted::Duplicate
        );
    }

    async fn another_tokens_callbacks_stay_apart(store: &dyn Store) {
        // Someone's own token posted with this run's slug, newest first.
        let stranger = |status: &str, now| Event::new("T", status, "their-token", 3, now, 0);
        assert_eq!(
            store.insert(stranger("succeeded", 10)).await.unwrap(),
            Inserted::New
        );
        // The run's own callbacks are neither duplicates nor superseded.
        let own = |status: &str, now| Event::new("T", status, "tok", 3, now, 0);
        assert_eq!(
            store.insert(own("running", 11)).await.unwrap(),
            Inserted::New
        );
        assert_eq!(
            store.insert(own("succeeded", 12)).await.unwrap(),
            Inserted::New
        );
        let running = stored(store, "T", "running", "tok").await;
        assert_eq!(
            running.state,
            State::Done,
            "superseded by its own token's newer status"
        );
        let succeeded = stored(store, "T", "succeeded", "tok").await;
        assert_eq!(succeeded.state, State::Pending);
        // Delivered, the stranger's does not keep it from going out.
        let theirs = store_id("T", "succeeded", "their-token");
        let claimed = store.claim(13, "me", 60_000, 10).await.unwrap();
        assert!(claimed.iter().any(|e| e.id == theirs));
        store.delivered(&theirs, "succeeded", 14).await.unwrap();
        assert!(store
            .before_send(&succeeded.id, "me", "succeeded", 15)
            .await
            .unwrap());
    }

    async fn nothing_older_goes_out_after_a_newer_status(store: &dyn Store) {
        // Superseded while its attempt was under way: not sent.
        store.insert(ev("S", "running", 10)).await.unwrap();
        let claimed = store.claim(10, "me", 60_000, 10).await.unwrap();
        let running = claimed.iter().find(|e| e.run_slug == "S").unwrap();
        store.insert(ev("S", "succeeded", 11)).await.unwrap();
        assert!(!store
            .before_send(&running.id, "me", "running", 12)
            .await
            .unwrap());
        // The newer one goes out; only its claimant may send it.
        let claimed = store.claim(13, "me", 60_000, 10).await.unwrap();
        let succeeded = claimed.iter().find(|e| e.run_slug == "S").unwrap();
        assert!(!store
            .before_send(&succeeded.id, "other", "succeeded", 14)
            .await
            .unwrap());
        assert!(store
            .before_send(&succeeded.id, "me", "succeeded", 14)
            .await
            .unwrap());
        store
            .delivered(&succeeded.id, "succeeded", 15)
            .await
            .unwrap();
        // The older one redelivered: it would take the run back, so it is
        // done without being sent; sent as the newest status, it may go.
        assert!(store.redeliver(&running.id, 16).await.unwrap());
        let again = store.claim(16, "me", 60_000, 10).await.unwrap();
        let again = again.iter().find(|e| e.run_slug == "S").unwrap();
        assert_eq!(again.id, running.id);
        assert!(store
            .before_send(&again.id, "me", "succeeded", 17)
            .await
            .unwrap());
        assert!(!store
            .before_send(&again.id, "me", "running", 17)
            .await
            .unwrap());
        let done = store.get(&running.id).await.unwrap().unwrap();
        assert_eq!(done.state, State::Done);
        assert!(done.last_error.contains("newer status"), "{done:?}");
    }

    async fn insert_dedupes_and_supersedes(store: &dyn Store) {
        assert_eq!(
            store.insert(ev("A", "running", 10)).await.unwrap(),
            Inserted::New
        );
        assert_eq!(
            store.insert(ev("A", "running", 11)).await.unwrap(),
            Inserted::Duplicate
        );
        assert_eq!(
            store.insert(ev("A", "succeeded", 12)).await.unwrap(),
            Inserted::New
        );
        let running = stored(store, "A", "running", "tok").await;
        assert_eq!(
            running.state,
            State::Done,
            "older pending status superseded"
        );
        assert_eq!(
            store.insert(ev("A", "ready", 13)).await.unwrap(),
            Inserted::Superseded
        );
        let pending = store.list(State::Pending, 0, 100).await.unwrap();
        assert_eq!(
            pending
                .iter()
                .map(|e| e.status.as_str())
                .collect::<Vec<_>>(),
            ["succeeded"]
        );
    }

    async fn claim_leases_and_failures(store: &dyn Store) {
        store.insert(ev("B", "failed", 100)).await.unwrap();
        let got = store.claim(100, "one", 1_000, 10).await.unwrap();
        let ids: Vec<_> = got.iter().map(|e| e.run_slug.as_str()).collect();
        assert!(ids.contains(&"B"), "{ids:?}");
        assert!(
            store.claim(500, "two", 1_000, 10).await.unwrap().is_empty(),
            "leased"
        );
        let b = store_id("B", "failed", "tok");
        store
            .failed(&b, 1, Some(5_000), "HTTP 500", 600)
            .await
            .unwrap();
        let e = store.get(&b).await.unwrap().unwrap();
        assert_eq!((e.attempts, e.next_ms, e.lease_until_ms), (1, 5_000, 0));
        assert!(store
            .claim(4_999, "two", 1_000, 10)
            .await
            .unwrap()
            .iter()
            .all(|e| e.id != b));
        // A lease that runs out lets another deliverer take the event over.
        let again = store.claim(5_000, "two", 1_000, 10).await.unwrap();
        assert!(again.iter().any(|e| e.id == b));
        let taken = store.claim(6_001, "three", 1_000, 10).await.unwrap();
        assert!(taken.iter().any(|e| e.id == b && e.lease_owner == "three"));
        store.release(&b, 9_000).await.unwrap();
        assert_eq!(store.get(&b).await.unwrap().unwrap().attempts, 1);
        let s = store.stats().await.unwrap();
        assert!(s.pending >= 1 && s.oldest_pending_ms.is_some() && s.next_due_ms.is_some());
    }

    async fn delivered_newer_status_blocks_the_older_and_the_later(store: &dyn Store) {
        store.insert(ev("C", "running", 10)).await.unwrap();
        let id = store_id("C", "running", "tok");
        // Enrichment found the run already succeeded and delivered that.
        store.delivered(&id, "succeeded", 20).await.unwrap();
        let e = store.get(&id).await.unwrap().unwrap();
        assert_eq!(
            (e.state, e.delivered_status.as_deref()),
            (State::Done, Some("succeeded"))
        );
        // V2's own `succeeded` callback arriving later is not sent again.
        let later = store.insert(ev("C", "succeeded", 30)).await.unwrap();
        assert_eq!(later, Inserted::Duplicate);
        assert!(store
            .list(State::Pending, 0, 100)
            .await
            .unwrap()
            .iter()
            .all(|e| e.run_slug != "C"));
    }

    async fn dead_redelivery_and_prune(store: &dyn Store) {
        store.insert(ev("D", "failed", 1_000)).await.unwrap();
        let d = store_id("D", "failed", "tok");
        store.failed(&d, 8, None, "HTTP 503", 2_000).await.unwrap();
        let e = store.get(&d).await.unwrap().unwrap();
        assert_eq!(e.state, State::Dead, "dead, never dropped");
        assert_eq!(store.stats().await.unwrap().dead, 1);
        // A failure report after death changes nothing.
        store.failed(&d, 9, Some(1), "late", 2_001).await.unwrap();
        assert_eq!(store.get(&d).await.unwrap().unwrap().state, State::Dead);
        assert_eq!(store.list(State::Dead, 0, 10).await.unwrap().len(), 1);
        assert!(store.list(State::Dead, 1_001, 10).await.unwrap().is_empty());
        assert_eq!(store.redeliver_dead_since(0, 3_000, 10).await.unwrap(), 1);
        let e = store.get(&d).await.unwrap().unwrap();
        assert_eq!((e.state, e.attempts, e.next_ms), (State::Pending, 0, 3_000));
        store.failed(&d, 1, None, "HTTP 410", 3_100).await.unwrap();
        assert!(store.redeliver(&d, 4_000).await.unwrap());
        assert!(!store.redeliver("msg_unknown", 4_000).await.unwrap());
        store.delivered(&d, "failed", 4_100).await.unwrap();
        // Done rows finished before the cut are pruned; pending ones never.
        let pruned = store.prune(u64::MAX).await.unwrap();
        assert!(pruned >= 1);
        assert!(store.get(&d).await.unwrap().is_none());
        assert!(!store.list(State::Pending, 0, 100).await.unwrap().is_empty());
    }
}
