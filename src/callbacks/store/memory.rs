//! The in-memory store: for tests and for `v1compat sandbox`. Nothing
//! survives a restart.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::*;

#[derive(Default)]
pub struct MemoryStore {
    events: Mutex<BTreeMap<String, Event>>,
}

impl MemoryStore {
    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<String, Event>) -> T) -> T {
        let mut guard = self.events.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }
}

fn same_run(map: &BTreeMap<String, Event>, run: &str) -> Vec<Event> {
    map.values()
        .filter(|e| e.run_slug == run)
        .cloned()
        .collect()
}

fn ready<T: Send + 'static>(v: T) -> StoreFuture<'static, T> {
    Box::pin(std::future::ready(Ok(v)))
}

impl Store for MemoryStore {
    fn insert(&self, event: Event) -> StoreFuture<'_, Inserted> {
        ready(self.with(|m| {
            let now = event.received_ms;
            let plan = plan_insert(event.clone(), &same_run(m, &event.run_slug), now);
            for w in plan.writes {
                m.insert(w.id.clone(), w);
            }
            plan.outcome
        }))
    }

    fn claim(
        &self,
        now_ms: u64,
        owner: &str,
        lease_ms: u64,
        limit: usize,
    ) -> StoreFuture<'_, Vec<Event>> {
        ready(self.with(|m| {
            let mut due: Vec<&mut Event> =
                m.values_mut().filter(|e| claimable(e, now_ms)).collect();
            due.sort_by_key(|e| e.next_ms);
            due.into_iter()
                .take(limit)
                .map(|e| {
                    e.lease_until_ms = now_ms + lease_ms;
                    e.lease_owner = owner.to_owned();
                    e.clone()
                })
                .collect()
        }))
    }

    fn delivered(&self, id: &str, as_status: &str, now_ms: u64) -> StoreFuture<'_, ()> {
        self.with(|m| {
            let Some(run) = m.get(id).map(|e| e.run_slug.clone()) else {
                return;
            };
            for w in plan_delivered(id, as_status, &same_run(m, &run), now_ms) {
                m.insert(w.id.clone(), w);
            }
        });
        ready(())
    }

    fn before_send(
        &self,
        id: &str,
        owner: &str,
        as_status: &str,
        now_ms: u64,
    ) -> StoreFuture<'_, bool> {
        ready(self.with(|m| {
            let Some(run) = m.get(id).map(|e| e.run_slug.clone()) else {
                return false;
            };
            let (writes, send) = plan_before_send(id, owner, as_status, &same_run(m, &run), now_ms);
            for w in writes {
                m.insert(w.id.clone(), w);
            }
            send
        }))
    }

    fn failed(
        &self,
        id: &str,
        attempts: u32,
        next_ms: Option<u64>,
        error: &str,
        now_ms: u64,
    ) -> StoreFuture<'_, ()> {
        self.with(|m| {
            if let Some(e) = m.get_mut(id) {
                apply_failed(e, attempts, next_ms, error, now_ms);
            }
        });
        ready(())
    }

    fn release(&self, id: &str, next_ms: u64) -> StoreFuture<'_, ()> {
        self.with(|m| {
            if let Some(e) = m.get_mut(id).filter(|e| e.state == State::Pending) {
                e.lease_until_ms = 0;
                e.lease_owner.clear();
                e.next_ms = next_ms;
            }
        });
        ready(())
    }

    fn get(&self, id: &str) -> StoreFuture<'_, Option<Event>> {
        ready(self.with(|m| m.get(id).cloned()))
    }

    fn list(&self, state: State, since_ms: u64, limit: usize) -> StoreFuture<'_, Vec<Event>> {
        ready(self.with(|m| {
            let mut out: Vec<Event> = m
                .values()
                .filter(|e| e.state == state && e.received_ms >= since_ms)
                .cloned()
                .collect();
            out.sort_by_key(|e| e.received_ms);
            out.truncate(limit);
            out
        }))
    }

    fn redeliver(&self, id: &str, now_ms: u64) -> StoreFuture<'_, bool> {
        ready(self.with(|m| match m.get_mut(id) {
            Some(e) if e.state != State::Pending => {
                apply_redeliver(e, now_ms);
                true
            }
            _ => false,
        }))
    }

    fn redeliver_dead_since(
        &self,
        since_ms: u64,
        now_ms: u64,
        limit: usize,
    ) -> StoreFuture<'_, u64> {
        ready(self.with(|m| {
            let mut n = 0;
            for e in m.values_mut() {
                if n as usize >= limit {
                    break;
                }
                if e.state == State::Dead && e.received_ms >= since_ms {
                    apply_redeliver(e, now_ms);
                    n += 1;
                }
            }
            n
        }))
    }

    fn stats(&self) -> StoreFuture<'_, Stats> {
        ready(self.with(|m| stats_of(m.values())))
    }

    fn prune(&self, before_ms: u64) -> StoreFuture<'_, u64> {
        ready(self.with(|m| {
            let n = m.len();
            m.retain(|_, e| !(e.state == State::Done && e.finished_ms < before_ms));
            (n - m.len()) as u64
        }))
    }

    fn prune_dead(&self, before_ms: u64, keep: u64) -> StoreFuture<'_, DeadPruned> {
        ready(self.with(|m| {
            let dead = m.values().filter(|e| e.state == State::Dead).cloned();
            let plan = plan_prune_dead(dead.collect(), before_ms, keep);
            for (e, _) in &plan {
                m.remove(&e.id);
            }
            pruned_of(&plan)
        }))
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn passes_the_store_suite() {
        super::suite::run_all(&super::MemoryStore::default()).await;
    }
}
