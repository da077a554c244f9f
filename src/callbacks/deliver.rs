//! The deliverer: beside the request path, never on it. It claims due events
//! from the store, turns each into the V1 notification (re-reading V2 run
//! detail first when the token allows it), POSTs it to the client's URL and
//! records the outcome: delivered, retry later (schedule, jitter,
//! `Retry-After`), or dead (schedule used up, or 410 Gone).
//!
//! Bounds: `callbacks.concurrency` attempts in flight in all and
//! `callbacks.per_target_concurrency` per host:port (a busy target's events
//! wait without using up attempts), a per-attempt timeout, redirects never
//! followed, response bodies never read. Each attempt runs in its own task,
//! so one slow receiver cannot hold up the others.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{header, HeaderValue, Request, StatusCode};
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use serde_json::{json, Value};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use super::clock::Clock;
use super::config::CallbacksConfig;
use super::event::{event_id, rank, Event};
use super::guard::Resolver;
use super::metrics as m;
use super::schedule::parse_retry_after;
use super::sign;
use super::store::Store;
use super::token::{Claims, Sealer};
use super::unknown_runs::UnknownRuns;
use crate::common::request_id::RequestId;
use crate::ops::run_records::{detail_call, v1_status};
use crate::ops::Compat;
use crate::ops::{int_of, string_of};
use crate::upstream::http_client;
use crate::upstream::{ApiKey, Upstream};
use crate::v2::Segment;

type DeliveryClient = Client<HttpsConnector<HttpConnector<Resolver>>, Full<Bytes>>;

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Delivered {
        status: String,
        webhook_id: String,
    },
    /// Will be retried at this time (ms).
    Retry {
        at_ms: u64,
        why: String,
    },
    Dead {
        why: String,
    },
    /// Not attempted: the target was busy; back in the queue.
    Deferred,
    /// Not sent: a newer status of the run went out first, or the claim
    /// was no longer this deliverer's (see `Store::before_send`).
    Superseded,
}

pub struct Deliverer {
    store: Arc<dyn Store>,
    sealer: Arc<Sealer>,
    cfg: Arc<CallbacksConfig>,
    upstream: Arc<dyn Upstream>,
    compat: Compat,
    clock: Arc<dyn Clock>,
    client: DeliveryClient,
    owner: String,
    slots: Arc<Semaphore>,
    /// The events whose attempts this deliverer has under way: a claim of
    /// one of them again (its lease ran out meanwhile) is not a second send.
    in_flight: Mutex<HashSet<String>>,
    targets: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Each token's V2 reads for runs V2 does not know ([`UnknownRuns`]).
    unknown_runs: UnknownRuns,
    pub(crate) wake: Notify,
}

/// What a V2 run detail told the enrichment.
enum Detail {
    Found(Value),
    /// V2 answered that the client's key sees no such run (404), or the
    /// slug cannot be one.
    Unknown,
    /// No answer to go by (unreachable, an error, garbled): the callback's
    /// own data is sent.
    Unavailable,
}

/// The V1 notification and the status it reports.
struct Notification {
    status: String,
    body: Bytes,
}

impl Deliverer {
    pub fn new(
        store: Arc<dyn Store>,
        sealer: Arc<Sealer>,
        cfg: Arc<CallbacksConfig>,
        upstream: Arc<dyn Upstream>,
        compat: Compat,
        clock: Arc<dyn Clock>,
    ) -> Result<Deliverer, String> {
        // The shared TCP, TLS and pool plumbing, with two deliberate
        // differences from the upstream's client: the address-checking
        // resolver, and no proxy (a proxy would resolve the name itself,
        // past the check). HTTP/1.1 only: one POST per attempt.
        let http = http_client::tcp_connector(
            Resolver {
                policy: Arc::new(cfg.policy.clone()),
            },
            cfg.attempt_timeout,
        );
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(http_client::tls_config(None)?)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = http_client::pool(
            https,
            http_client::SIDE_IDLE_TIMEOUT,
            cfg.per_target_concurrency,
        );
        Ok(Deliverer {
            slots: Arc::new(Semaphore::new(cfg.concurrency)),
            unknown_runs: UnknownRuns::new(cfg.unknown_run_reads_per_hour),
            owner: format!("{}-{}", hostname(), ulid::Ulid::new()),
            store,
            sealer,
            cfg,
            upstream,
            compat,
            clock,
            client,
            in_flight: Mutex::new(HashSet::new()),
            targets: Mutex::new(HashMap::new()),
            wake: Notify::new(),
        })
    }

    /// Claims what is due now and starts an attempt for each; the handles
    /// resolve when the attempts are recorded (tests await them).
    pub async fn dispatch(self: &Arc<Self>) -> Vec<JoinHandle<Outcome>> {
        let free = self.slots.available_permits();
        if free == 0 {
            return Vec::new();
        }
        let now = self.clock.now_ms();
        let lease = self.cfg.lease.as_millis() as u64;
        let claimed = match self.store.claim(now, &self.owner, lease, free).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "callback store: claim failed");
                return Vec::new();
            }
        };
        let mut handles = Vec::with_capacity(claimed.len());
        for ev in claimed {
            let Some(under_way) = UnderWay::start(self, &ev.id) else {
                // Still under way here: the claim only renewed its lease.
                continue;
            };
            let Ok(slot) = self.slots.clone().try_acquire_owned() else {
                drop(under_way);
                let _ = self.store.release(&ev.id, now).await;
                continue;
            };
            let this = self.clone();
            handles.push(tokio::spawn(async move {
                let outcome = this.attempt(ev, slot).await;
                drop(under_way);
                this.wake.notify_one();
                outcome
            }));
        }
        handles
    }

    /// The background loop: dispatch, prune now and then, publish queue
    /// figures, sleep until the next due event, a new event, or the poll tick.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut last_prune = 0u64;
        loop {
            if *stop.borrow() {
                break;
            }
            self.dispatch().await;
            let now = self.clock.now_ms();
            if now.saturating_sub(last_prune) >= 60_000 {
                last_prune = now;
                let cut = now.saturating_sub(self.cfg.keep_delivered.as_millis() as u64);
                if let Err(e) = self.store.prune(cut).await {
                    tracing::warn!(error = %e, "callback store: prune failed");
                }
                self.prune_dead(now).await;
            }
            let mut stats = self.store.stats().await;
            // Dead events over their bound between the minutely prunes (a
            // burst of callbacks on made-up runs): pruned at once.
            if stats
                .as_ref()
                .is_ok_and(|s| s.dead > self.cfg.max_dead_events)
            {
                self.prune_dead(now).await;
                stats = self.store.stats().await;
            }
            let mut next_due = None;
            if let Ok(stats) = stats {
                metrics::gauge!(m::QUEUE_DEPTH).set(stats.pending as f64);
                metrics::gauge!(m::DEAD).set(stats.dead as f64);
                let age = stats.oldest_pending_ms.map_or(0, |t| now.saturating_sub(t));
                metrics::gauge!(m::OLDEST_PENDING).set(age as f64 / 1000.0);
                next_due = stats.next_due_ms;
            }
            let free = self.slots.available_permits() > 0;
            let wait = idle_wait(self.cfg.poll_interval, now, next_due, free);
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
    }

    /// Prunes dead events older than `callbacks.keep_dead_secs` and the
    /// oldest beyond `callbacks.max_dead_events`; counted.
    pub async fn prune_dead(&self, now: u64) {
        let cut = now.saturating_sub(self.cfg.keep_dead.as_millis() as u64);
        match self.store.prune_dead(cut, self.cfg.max_dead_events).await {
            Ok(pruned) => {
                metrics::counter!(m::DEAD_PRUNED, "reason" => "age").increment(pruned.aged);
                metrics::counter!(m::DEAD_PRUNED, "reason" => "count").increment(pruned.over_count);
                if pruned.over_count > 0 {
                    tracing::warn!(
                        pruned = pruned.over_count,
                        kept = self.cfg.max_dead_events,
                        "callback store: dead events over callbacks.max_dead_events; the oldest were pruned"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "callback store: prune of dead events failed"),
        }
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // Plain bookkeeping: a panic under the lock leaves it consistent.
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn target_slot(&self, url: &url::Url) -> Option<OwnedSemaphorePermit> {
        let key = format!(
            "{}:{}",
            url.host_str().unwrap_or_default(),
            url.port_or_known_default().unwrap_or(0)
        );
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        // Forget idle targets so the map stays bounded.
        if targets.len() > 10_000 {
            let limit = self.cfg.per_target_concurrency;
            targets.retain(|_, s| s.available_permits() < limit);
        }
        let sem = targets
            .entry(key)
            .or_insert_with(|| Arc::new(Semaphore::new(self.cfg.per_target_concurrency)))
            .clone();
        sem.try_acquire_owned().ok()
    }

    async fn attempt(&self, ev: Event, _slot: OwnedSemaphorePermit) -> Outcome {
        let now = self.clock.now_ms();
        let Some(claims) = self.sealer.open_stored(&ev.token) else {
            // Only a secret removed from the configuration gets here.
            metrics::counter!(m::ATTEMPTS, "outcome" => "token").increment(1);
            return self
                .dead(
                    &ev,
                    ev.attempts,
                    "the token no longer opens (secret removed?)",
                    now,
                )
                .await;
        };
        let url = match url::Url::parse(&claims.url) {
            Ok(u) => u,
            Err(_) => {
                return self
                    .dead(&ev, ev.attempts, "unusable target URL", now)
                    .await
            }
        };
        if let Err(why) = self
            .cfg
            .policy
            .check_host(url.host_str().unwrap_or_default())
        {
            metrics::counter!(m::ATTEMPTS, "outcome" => "refused").increment(1);
            return self
                .fail(&ev, &format!("refused target: {why}"), None, now)
                .await;
        }
        let Some(_target) = self.target_slot(&url) else {
            let _ = self.store.release(&ev.id, now + 1_000).await;
            return Outcome::Deferred;
        };
        let note = match self.notification(&ev, &claims).await {
            Ok(note) => note,
            Err(why) => return self.dead(&ev, ev.attempts + 1, &why, now).await,
        };
        // Decided last, after the enrichment read, which may take a while:
        // a newer status that went out meanwhile wins.
        match self
            .store
            .before_send(&ev.id, &self.owner, &note.status, self.clock.now_ms())
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                metrics::counter!(m::ATTEMPTS, "outcome" => "superseded").increment(1);
                tracing::info!(run = %ev.run_slug, status = %note.status, "callback not sent: the run's receiver has a newer status");
                return Outcome::Superseded;
            }
            Err(e) => {
                tracing::warn!(error = %e, "callback store: could not check a claim before sending");
                let _ = self.store.release(&ev.id, now + 1_000).await;
                return Outcome::Deferred;
            }
        }
        let webhook_id = event_id(&ev.run_slug, &note.status);
        let request = match self.request(&url, &webhook_id, now, &note.body) {
            Ok(r) => r,
            Err(why) => return self.dead(&ev, ev.attempts + 1, &why, now).await,
        };
        let sent =
            tokio::time::timeout(self.cfg.attempt_timeout, self.client.request(request)).await;
        let now = self.clock.now_ms();
        match sent {
            Ok(Ok(resp)) if resp.status().is_success() => {
                metrics::counter!(m::ATTEMPTS, "outcome" => "delivered").increment(1);
                if let Err(e) = self.store.delivered(&ev.id, &note.status, now).await {
                    tracing::warn!(error = %e, "callback store: could not record a delivery (it may be sent again)");
                }
                tracing::info!(run = %ev.run_slug, status = %note.status, webhook_id, "callback delivered");
                Outcome::Delivered {
                    status: note.status,
                    webhook_id,
                }
            }
            Ok(Ok(resp)) if resp.status() == StatusCode::GONE => {
                metrics::counter!(m::ATTEMPTS, "outcome" => "gone").increment(1);
                self.dead(&ev, ev.attempts + 1, "HTTP 410: the receiver is gone", now)
                    .await
            }
            Ok(Ok(resp)) => {
                metrics::counter!(m::ATTEMPTS, "outcome" => "http_error").increment(1);
                let retry_after = resp
                    .headers()
                    .get(header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| {
                        parse_retry_after(v, SystemTime::UNIX_EPOCH + Duration::from_millis(now))
                    });
                let why = format!("HTTP {}", resp.status().as_u16());
                self.fail(&ev, &why, retry_after, now).await
            }
            Ok(Err(e)) => {
                // The guard's reason sits at the bottom of the error chain.
                let mut why = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    why = format!("{why}: {s}");
                    source = s.source();
                }
                let outcome = if why.contains("refused target") {
                    "refused"
                } else {
                    "connect"
                };
                metrics::counter!(m::ATTEMPTS, "outcome" => outcome).increment(1);
                self.fail(&ev, &why, None, now).await
            }
            Err(_) => {
                metrics::counter!(m::ATTEMPTS, "outcome" => "timeout").increment(1);
                let why = format!("no answer within {:?}", self.cfg.attempt_timeout);
                self.fail(&ev, &why, None, now).await
            }
        }
    }

    fn request(
        &self,
        url: &url::Url,
        webhook_id: &str,
        now_ms: u64,
        body: &Bytes,
    ) -> Result<Request<Full<Bytes>>, String> {
        let ts = now_ms / 1000;
        let mut req = Request::post(url.as_str())
            .header(header::CONTENT_TYPE, "application/json")
            .header(
                header::USER_AGENT,
                concat!("v1compat/", env!("CARGO_PKG_VERSION")),
            )
            .header("webhook-id", webhook_id)
            .header("webhook-timestamp", ts);
        if let Some(key) = &self.cfg.signing_key {
            let sig = sign::signature(key, webhook_id, ts, body);
            req = req.header(
                "webhook-signature",
                HeaderValue::from_str(&sig).map_err(|e| e.to_string())?,
            );
        }
        req.body(Full::new(body.clone()))
            .map_err(|e| format!("unusable target URL: {e}"))
    }

    /// The V1 body `{run_slug, status, results, usage}`: from a fresh V2 run
    /// detail when enrichment is on and the token carries a key, else from
    /// the callback itself (`usage` is then `"0"`: V2's callback has none).
    /// A run V2 does not know for the client's key is not notified at all:
    /// the callback named a run that is not the client's (a token can be
    /// replayed with another body), and the error says so.
    async fn notification(&self, ev: &Event, claims: &Claims) -> Result<Notification, String> {
        let mut status = ev.status.clone();
        let mut results = ev.results;
        let mut usage = "0".to_owned();
        if self.cfg.enrich {
            if let Some(key) = claims.key.as_deref().and_then(ApiKey::new) {
                let now = self.clock.now_ms();
                if !self.unknown_runs.try_spend(&ev.token, now) {
                    metrics::counter!(m::UNKNOWN_RUN_READS_LIMITED).increment(1);
                    return Err(
                        "this token's callbacks named too many runs V2 does not know within the hour: not read, not notified".into()
                    );
                }
                match self.run_detail(&ev.run_slug, key).await {
                    Detail::Unknown => {
                        metrics::counter!(m::ENRICH_FAILED).increment(1);
                        return Err(
                            "V2 knows no such run for the client's key: not notified".into()
                        );
                    }
                    Detail::Found(detail) => {
                        self.unknown_runs.found(&ev.token, now);
                        let fresh = string_of(detail.get("status")).unwrap_or_default();
                        // V2's read may lag its own callback; never go back.
                        if !fresh.is_empty() && rank(&fresh) >= rank(&status) {
                            status = fresh.to_ascii_lowercase();
                        }
                        results = int_of(detail.get("results")).unwrap_or(results);
                        usage = string_of(detail.get("usage")).unwrap_or(usage);
                    }
                    Detail::Unavailable => {
                        self.unknown_runs.found(&ev.token, now);
                        metrics::counter!(m::ENRICH_FAILED).increment(1);
                    }
                }
            }
        }
        let body = json!({
            "run_slug": ev.run_slug,
            "status": v1_status(Some(&Value::String(status.clone())), &self.compat),
            "results": results,
            "usage": usage,
        });
        Ok(Notification {
            status,
            body: Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
        })
    }

    async fn run_detail(&self, run: &str, key: ApiKey) -> Detail {
        let Ok(run) = Segment::run(run) else {
            return Detail::Unknown;
        };
        let call = detail_call(&run).with_key(Some(key));
        // Bounded as the POST is, so an attempt fits its lease (twice this).
        let read = self.upstream.call(call, &RequestId::generate());
        let Ok(Ok(reply)) = tokio::time::timeout(self.cfg.attempt_timeout, read).await else {
            return Detail::Unavailable;
        };
        if reply.status == StatusCode::NOT_FOUND {
            return Detail::Unknown;
        }
        let Ok(env) = serde_json::from_slice::<v1compat_json::v2::Envelope>(&reply.body) else {
            return Detail::Unavailable;
        };
        match (reply.status.is_success(), env.code, env.data) {
            (true, Some(0), Some(data)) if data.is_object() => Detail::Found(data),
            _ => Detail::Unavailable,
        }
    }

    /// Records a failed attempt: retry per schedule, or dead when used up.
    async fn fail(
        &self,
        ev: &Event,
        why: &str,
        retry_after: Option<Duration>,
        now: u64,
    ) -> Outcome {
        let made = ev.attempts + 1;
        match self
            .cfg
            .schedule
            .after_failure(made, retry_after, rand::random::<f64>())
        {
            Some(delay) => {
                let at_ms = now + delay.as_millis() as u64;
                if let Err(e) = self.store.failed(&ev.id, made, Some(at_ms), why, now).await {
                    tracing::warn!(error = %e, "callback store: could not record a failed attempt");
                }
                tracing::info!(run = %ev.run_slug, attempt = made, why, retry_in_ms = delay.as_millis() as u64, "callback attempt failed");
                Outcome::Retry {
                    at_ms,
                    why: why.to_owned(),
                }
            }
            None => self.dead(ev, made, why, now).await,
        }
    }

    async fn dead(&self, ev: &Event, attempts: u32, why: &str, now: u64) -> Outcome {
        metrics::counter!(m::DEAD_TOTAL).increment(1);
        if let Err(e) = self.store.failed(&ev.id, attempts, None, why, now).await {
            tracing::warn!(error = %e, "callback store: could not record a dead event");
        }
        tracing::warn!(run = %ev.run_slug, attempts, why, "callback dead; redeliver through the admin API");
        Outcome::Dead {
            why: why.to_owned(),
        }
    }
}

/// An event's attempt under way in this deliverer, in its `in_flight` set
/// until dropped (an attempt that panics included).
struct UnderWay {
    deliverer: Arc<Deliverer>,
    id: String,
}

impl UnderWay {
    /// `None` when the event is under way already.
    fn start(deliverer: &Arc<Deliverer>, id: &str) -> Option<UnderWay> {
        deliverer
            .in_flight()
            .insert(id.to_owned())
            .then(|| UnderWay {
                deliverer: deliverer.clone(),
                id: id.to_owned(),
            })
    }
}

impl Drop for UnderWay {
    fn drop(&mut self) {
        self.deliverer.in_flight().remove(&self.id);
    }
}

/// How long the loop sleeps when nothing wakes it: the poll interval, or
/// less when an event falls due sooner, at least 5 ms. With every slot
/// taken (`free` false) a due event waits for one to free up, whose
/// attempt's end wakes the loop, not for its time: that would spin.
fn idle_wait(poll: Duration, now_ms: u64, next_due_ms: Option<u64>, free: bool) -> Duration {
    let due = next_due_ms
        .filter(|_| free)
        .map(|due| Duration::from_millis(due.saturating_sub(now_ms)));
    due.map_or(poll, |due| poll.min(due))
        .max(Duration::from_millis(5))
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty() && h.len() <= 64 && h.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or_else(|| "v1compat".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_due_event_shortens_the_wait_only_while_a_slot_is_free() {
        let poll = Duration::from_secs(1);
        assert_eq!(idle_wait(poll, 1_000, None, true), poll);
        assert_eq!(
            idle_wait(poll, 1_000, Some(1_300), true),
            Duration::from_millis(300)
        );
        // Due now (or overdue) with a slot free: dispatch again soon.
        assert_eq!(
            idle_wait(poll, 1_000, Some(900), true),
            Duration::from_millis(5)
        );
        // Due now with every slot taken: the loop would spin; it waits for
        // an attempt to end (which wakes it) or the poll interval.
        assert_eq!(idle_wait(poll, 1_000, Some(900), false), poll);
    }
}
