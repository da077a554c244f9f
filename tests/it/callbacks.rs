//! The callback relay end to end and under a controlled clock.
//!
//! * Through the sandbox: scraper run, task run and rerun started through the
//!   gateway and on the native V1 surface; a local receiver must get the same
//!   V1 bodies from both, once per status change, statuses never going back.
//! * With a [`ManualClock`]: a receiver that fails several times then
//!   recovers gets every attempt with the same `webhook-id`, at the scheduled
//!   times (`Retry-After` honoured within bounds); 410 stops; a used-up
//!   schedule leaves the event dead, and the admin API redelivers it; private
//!   targets are refused unless allowed; forged and altered tokens get 404 and
//!   store nothing.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use v1compat::callbacks::clock::ManualClock;
use v1compat::callbacks::deliver::Outcome;
use v1compat::callbacks::event::State;
use v1compat::callbacks::store::memory::MemoryStore;
use v1compat::callbacks::store::Store;
use v1compat::callbacks::Relay;
use v1compat::ops::CallbackUrls;
use v1compat::upstream::{ApiKey, HttpUpstream};
use v1compat_sandbox::{Sandbox, SandboxConfig};

use crate::support::{fresh_database, postgres_url, serve_binary, MockV2, Reply, INVENTORY_STORE};

const SECRET: &str = "integration-test-secret-0123";

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Got {
    path: String,
    /// The status the receiver answered.
    answered: u16,
    webhook_id: String,
    /// `webhook-timestamp` and `webhook-signature`, when sent.
    timestamp: String,
    signature: String,
    raw: Bytes,
    body: Value,
}

/// Statuses to answer, each with an optional `Retry-After`.
type Script = Arc<Mutex<VecDeque<(u16, Option<&'static str>)>>>;

/// A V1 callback receiver on 127.0.0.1:0 answering from a script of statuses
/// (200 once the script is used up); each entry may carry a `Retry-After`.
struct Hook {
    base: String,
    rx: mpsc::UnboundedReceiver<Got>,
    script: Script,
    /// While set, every request is answered 503.
    down: Arc<AtomicBool>,
    /// While set, requests are recorded and never answered.
    hang: Arc<AtomicBool>,
}

async fn hook() -> Hook {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let script: Script = Arc::default();
    let s = script.clone();
    let down = Arc::new(AtomicBool::new(false));
    let is_down = down.clone();
    let hang = Arc::new(AtomicBool::new(false));
    let is_hung = hang.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (tx, s, is_down, is_hung) =
                (tx.clone(), s.clone(), is_down.clone(), is_hung.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (tx, s, is_down, is_hung) =
                        (tx.clone(), s.clone(), is_down.clone(), is_hung.clone());
                    async move {
                        let path = req.uri().path().to_owned();
                        let webhook_id = req
                            .headers()
                            .get("webhook-id")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        let header = |name: &str| {
                            req.headers()
                                .get(name)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                                .to_owned()
                        };
                        let (timestamp, signature) =
                            (header("webhook-timestamp"), header("webhook-signature"));
                        let bytes = req.into_body().collect().await.unwrap().to_bytes();
                        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                        if is_hung.load(Ordering::SeqCst) {
                            let _ = tx.send(Got {
                                path,
                                answered: 0,
                                webhook_id,
                                timestamp,
                                signature,
                                raw: bytes,
                                body,
                            });
                            std::future::pending::<()>().await;
                            unreachable!();
                        }
                        let (status, retry_after) = if is_down.load(Ordering::SeqCst) {
                            (503, None)
                        } else {
                            s.lock().unwrap().pop_front().unwrap_or((200, None))
                        };
                        let _ = tx.send(Got {
                            path,
                            answered: status,
                            webhook_id,
                            timestamp,
                            signature,
                            raw: bytes,
                            body,
                        });
                        let mut resp = http::Response::new(Full::new(Bytes::from_static(b"ok")));
                        *resp.status_mut() = http::StatusCode::from_u16(status).unwrap();
                        if let Some(ra) = retry_after {
                            resp.headers_mut()
                                .insert("retry-after", http::HeaderValue::from_static(ra));
                        }
                        Ok::<_, std::convert::Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Hook {
        base: format!("http://{addr}"),
        rx,
        script,
        down,
        hang,
    }
}

impl Hook {
    /// Collects requests until `done` holds for what was received (10 s at most).
    async fn until(&mut self, seen: &mut Vec<Got>, done: impl Fn(&[Got]) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !done(seen) {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(g)) => seen.push(g),
                _ => panic!("receiver did not see what was expected; got {seen:#?}"),
            }
        }
    }
}

async fn post(url: &str, key: &str, body: Value) -> (u16, Value) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = Request::post(url)
        .header("api-key", key)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn get(url: &str) -> Value {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let resp = client.get(url.parse().unwrap()).await.unwrap();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

/// The status sequence a path received, and its bodies without `run_slug`.
fn per_path(seen: &[Got], path: &str) -> (Vec<i64>, Vec<Value>) {
    let mine: Vec<&Got> = seen.iter().filter(|g| g.path == path).collect();
    let statuses = mine
        .iter()
        .map(|g| g.body["status"].as_i64().unwrap())
        .collect();
    let bodies = mine
        .iter()
        .map(|g| {
            let mut b = g.body.clone();
            b.as_object_mut().unwrap().remove("run_slug");
            b
        })
        .collect();
    (statuses, bodies)
}

fn has_status(seen: &[Got], path: &str, status: i64) -> bool {
    seen.iter()
        .any(|g| g.path == path && g.body["status"] == status)
}

#[tokio::test]
async fn sandbox_runs_get_the_native_v1_notifications() {
    let sb = Sandbox::start(
        SandboxConfig {
            speed: 0.001,
            ..SandboxConfig::default()
        },
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
    .await
    .unwrap();
    let key = sb.api_key().to_owned();
    let public = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gw: SocketAddr = public.local_addr().unwrap();
    let text = format!(
        "[upstream]\nbase_url = \"http://{}\"\n[callbacks]\npublic_url = \"http://{gw}\"\nsecret = \"{SECRET}\"\nstore = \"memory\"\nallow_cidrs = [\"127.0.0.0/8\"]\n",
        sb.v2_addr()
    );
    let config = v1compat::config::load(&text, Vec::new()).unwrap();
    let upstream = Arc::new(HttpUpstream::new(config.upstream.clone()).unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(v1compat::run(public, admin, config, upstream, async {
        let _ = stopped.await;
    }));
    let mut hook = hook().await;
    let (gw, v1, v2) = (
        format!("http://{gw}"),
        format!("http://{}", sb.v1_addr()),
        format!("http://{}", sb.v2_addr()),
    );
    let advance = |s: f64| {
        let (v2, key) = (v2.clone(), key.clone());
        async move {
            let (st, _) = post(
                &format!("{v2}/__sandbox/advance"),
                &key,
                json!({"seconds": s}),
            )
            .await;
            assert_eq!(st, 200);
        }
    };
    let run_body = |cb: &str| {
        json!({"scraper_slug": "coreclaw/google-maps-scraper", "is_async": true,
               "callback_url": format!("{}{cb}", hook.base),
               "input": {"parameters": {"custom": {"max_results": 4}}}})
    };
    let slug = |v: &Value| v["data"]["run_slug"].as_str().unwrap().to_owned();

    // Scraper runs.
    let (st, a) = post(
        &format!("{gw}/api/v1/scraper/run"),
        &key,
        run_body("/gw/run"),
    )
    .await;
    assert_eq!(st, 200, "{a}");
    let (st, b) = post(
        &format!("{v1}/api/v1/scraper/run"),
        &key,
        run_body("/v1/run"),
    )
    .await;
    assert_eq!(st, 200, "{b}");
    // V2 was given the gateway's sealed URL, never the client's.
    let log = get(&format!("{v2}/__sandbox/requests")).await;
    assert!(
        !log.to_string().contains("/gw/run"),
        "client URL leaked to V2: {log}"
    );
    // Task runs.
    let (st, t) = post(
        &format!("{v2}/api/v2/worker-tasks"),
        &key,
        json!({"worker_id": "01KBHMS6A8H6A3K5FJY11MQ99Z", "title": "t", "input": {"parameters": {"custom": {"max_results": 2}}}}),
    )
    .await;
    assert_eq!(st, 200, "{t}");
    let task = t["data"]["slug"].as_str().unwrap().to_owned();
    for (base, path) in [(&gw, "/gw/task"), (&v1, "/v1/task")] {
        let body = json!({"task_slug": task, "callback_url": format!("{}{path}", hook.base)});
        let (st, r) = post(&format!("{base}/api/v1/task/run"), &key, body).await;
        assert_eq!(st, 200, "{r}");
    }

    let mut seen = Vec::new();
    let paths = ["/gw/run", "/v1/run", "/gw/task", "/v1/task"];
    advance(2.0).await;
    hook.until(&mut seen, |s| paths.iter().all(|p| has_status(s, p, 2)))
        .await;
    advance(100.0).await;
    hook.until(&mut seen, |s| paths.iter().all(|p| has_status(s, p, 3)))
        .await;

    // Reruns of the two scraper runs.
    for (base, run, path) in [(&gw, slug(&a), "/gw/rerun"), (&v1, slug(&b), "/v1/rerun")] {
        let body = json!({"run_slug": run, "callback_url": format!("{}{path}", hook.base)});
        let (st, r) = post(&format!("{base}/api/v1/rerun"), &key, body).await;
        assert_eq!(st, 200, "{r}");
    }
    advance(100.0).await;
    hook.until(&mut seen, |s| {
        has_status(s, "/gw/rerun", 3) && has_status(s, "/v1/rerun", 3)
    })
    .await;

    for kind in ["run", "task", "rerun"] {
        let (gw_statuses, gw_bodies) = per_path(&seen, &format!("/gw/{kind}"));
        let (v1_statuses, v1_bodies) = per_path(&seen, &format!("/v1/{kind}"));
        assert!(
            gw_statuses.windows(2).all(|w| w[0] < w[1]),
            "{kind}: statuses went back or repeated: {gw_statuses:?}"
        );
        assert_eq!(
            gw_bodies.last(),
            v1_bodies.last(),
            "{kind}: final V1 body differs"
        );
        if kind != "rerun" {
            assert_eq!(gw_statuses, v1_statuses, "{kind}");
            assert_eq!(gw_bodies, v1_bodies, "{kind}");
        }
    }
    for g in seen.iter().filter(|g| g.path.starts_with("/gw/")) {
        let keys: Vec<&String> = g.body.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["run_slug", "status", "results", "usage"],
            "{:?}",
            g.body
        );
        assert!(g.webhook_id.starts_with("msg_"), "{g:?}");
        assert!(g.body["usage"].is_string() && g.body["results"].is_i64());
    }
    let done = seen
        .iter()
        .find(|g| g.path == "/gw/run" && g.body["status"] == 3)
        .unwrap();
    assert_eq!(done.body["run_slug"], slug(&a).as_str());
    assert_eq!(done.body["results"], 4);

    let _ = stop.send(());
    serving.await.unwrap().unwrap();
    sb.shutdown().await;
}

/// A relay with a manual clock and an in-memory store, no background loop.
fn make_relay(extra: &str, clock: Arc<ManualClock>) -> (Arc<Relay>, Arc<MemoryStore>) {
    relay_of(&format!("[callbacks]\nenrich = false\n{extra}"), clock)
}

/// [`make_relay`] reading each run's detail from the V2 at `v2_url`.
fn make_enriching_relay(
    v2_url: &str,
    extra: &str,
    clock: Arc<ManualClock>,
) -> (Arc<Relay>, Arc<MemoryStore>) {
    let text = format!("[upstream]\nbase_url = \"{v2_url}\"\n[callbacks]\nenrich = true\n{extra}");
    relay_of(&text, clock)
}

/// `text` (whose last section is `[callbacks]`) with the relay's own keys.
fn relay_of(text: &str, clock: Arc<ManualClock>) -> (Arc<Relay>, Arc<MemoryStore>) {
    let text = format!(
        "{text}public_url = \"https://gw.example\"\nsecret = \"{SECRET}\"\nstore = \"memory\"\n"
    );
    let config = v1compat::config::load(&text, Vec::new()).unwrap();
    let store = Arc::new(MemoryStore::default());
    let upstream = Arc::new(HttpUpstream::new(config.upstream.clone()).unwrap());
    let relay = Relay::new(
        config.callbacks.clone(),
        store.clone(),
        upstream,
        config.compat.clone(),
        clock,
    )
    .unwrap()
    .expect("relay mode");
    (relay, store)
}

/// V2 posting its callback to the URL the relay gave it; the answer's status.
async fn v2_posts(relay: &Relay, v2_url: &str, body: Value) -> u16 {
    let path = v2_url.strip_prefix("https://gw.example").unwrap();
    let req = Request::post(path)
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    relay
        .receive(req, Duration::from_secs(30))
        .await
        .status()
        .as_u16()
}

/// Found by a review: a callback with a valid token and a body that never
/// came (or came a byte at a time) held its slot for over a minute, while
/// a V1 request's body had 3 s. The configured body deadline now cuts it
/// off: 408, counted.
#[tokio::test]
async fn a_stalled_callback_body_is_cut_off_by_the_body_deadline() {
    let (m, _local) = crate::support::local_metrics();
    let clock = Arc::new(ManualClock::new(T0));
    let (relay, store) = make_relay("", clock);
    let url = relay
        .v2_callback_url("https://client.example/hook", None)
        .unwrap();
    let path = url.strip_prefix("https://gw.example").unwrap();
    let deadline =
        v1compat::config::load("[connections]\nbody_read_timeout_ms = 250\n", Vec::new())
            .unwrap()
            .connections
            .body_read_timeout;
    // One byte of the body arrives, then nothing.
    use futures_util::StreamExt;
    let first = hyper::body::Frame::data(Bytes::from_static(b"{"));
    let stalled = futures_util::stream::iter([Ok::<_, std::io::Error>(first)])
        .chain(futures_util::stream::pending());
    let req = Request::post(path)
        .body(http_body_util::StreamBody::new(stalled))
        .unwrap();
    let started = std::time::Instant::now();
    // The outer bound only keeps a regression from hanging the suite.
    let answer = tokio::time::timeout(Duration::from_secs(20), relay.receive(req, deadline))
        .await
        .expect("the body deadline, not the test's, ends the read");
    assert_eq!(answer.status().as_u16(), 408);
    assert!(started.elapsed() >= deadline, "{:?}", started.elapsed());
    let body = answer.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["code"], 4000, "{body}");
    let stored = store.list(State::Pending, 0, 10).await.unwrap();
    assert!(stored.is_empty(), "nothing stored: {stored:?}");
    assert_eq!(
        crate::support::metric(
            &m,
            "v1compat_callbacks_rejected_total",
            &[("reason", "body_timeout")]
        ),
        1.0
    );
}

async fn dispatch(relay: &Relay) -> Vec<Outcome> {
    let mut out = Vec::new();
    for h in relay.deliverer.dispatch().await {
        out.push(h.await.unwrap());
    }
    out
}

const T0: u64 = 1_800_000_000_000;
/// The signing secret of the Standard Webhooks specification's example.
const WHSEC_B64: &str = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// An older status redelivered after a newer one went out is made done,
/// not sent: the receiver never sees the run go back.
#[tokio::test]
async fn a_redelivered_older_status_is_superseded_not_sent() {
    let clock = Arc::new(ManualClock::new(T0));
    let (relay, store) = make_relay("allow_cidrs = [\"127.0.0.0/8\"]\n", clock.clone());
    let mut hook = hook().await;
    let url = relay
        .v2_callback_url(&format!("{}/order", hook.base), None)
        .unwrap();
    let mut seen = Vec::new();
    for (n, status) in [(1, "running"), (2, "succeeded")] {
        let body = json!({"run_slug": "ORDER1", "run_status": status, "result_count": 1});
        assert_eq!(v2_posts(&relay, &url, body).await, 200);
        assert!(matches!(
            dispatch(&relay).await[..],
            [Outcome::Delivered { .. }]
        ));
        hook.until(&mut seen, |s| s.len() == n).await;
    }
    let done = store.list(State::Done, 0, 10).await.unwrap();
    let running = done
        .iter()
        .find(|e| e.run_slug == "ORDER1" && e.status == "running")
        .unwrap();
    assert!(store.redeliver(&running.id, T0).await.unwrap());
    assert_eq!(dispatch(&relay).await, [Outcome::Superseded]);
    assert!(hook.rx.try_recv().is_err(), "an older status was sent");
    let again = store.get(&running.id).await.unwrap().unwrap();
    assert_eq!(again.state, State::Done);
}

/// An attempt still under way when its lease runs out (a receiver slower
/// than the lease) is not sent a second time by the same deliverer.
#[tokio::test]
async fn an_attempt_under_way_is_not_claimed_and_sent_again() {
    let clock = Arc::new(ManualClock::new(T0));
    let (relay, store) = make_relay("allow_cidrs = [\"127.0.0.0/8\"]\n", clock.clone());
    let mut hook = hook().await;
    hook.hang.store(true, Ordering::SeqCst);
    let url = relay
        .v2_callback_url(&format!("{}/slow", hook.base), None)
        .unwrap();
    let body = json!({"run_slug": "SLOW1", "run_status": "succeeded", "result_count": 1});
    assert_eq!(v2_posts(&relay, &url, body).await, 200);
    let first = relay.deliverer.dispatch().await;
    assert_eq!(first.len(), 1);
    let mut seen = Vec::new();
    hook.until(&mut seen, |s| s.len() == 1).await;
    // The lease (60 s) runs out while the receiver holds the POST.
    clock.set(T0 + 61_000);
    assert!(
        relay.deliverer.dispatch().await.is_empty(),
        "claimed again while its attempt is under way"
    );
    assert_eq!(store.stats().await.unwrap().pending, 1);
    for h in first {
        h.abort();
    }
}

#[tokio::test]
async fn retries_follow_the_schedule_with_one_webhook_id_and_410_stops() {
    let clock = Arc::new(ManualClock::new(T0));
    let (relay, store) = make_relay(
        &format!("allow_cidrs = [\"127.0.0.0/8\"]\nretry_schedule = [\"0s\", \"5s\", \"5m\", \"30m\"]\nsigning_secret = \"whsec_{WHSEC_B64}\"\n"),
        clock.clone(),
    );
    let mut hook = hook().await;
    hook.script
        .lock()
        .unwrap()
        .extend([(500, None), (429, Some("600")), (503, None)]);
    let url = relay
        .v2_callback_url(&format!("{}/cb", hook.base), None)
        .unwrap();
    let body = json!({"run_slug": "RUN1", "run_status": "succeeded", "result_count": 7});
    assert_eq!(v2_posts(&relay, &url, body.clone()).await, 200);
    assert_eq!(
        v2_posts(&relay, &url, body).await,
        200,
        "a repeat is accepted"
    );
    assert_eq!(store.stats().await.unwrap().pending, 1, "and stored once");

    // Attempt 1 at once: 500 → next in 5 s ± 20 %.
    let out = dispatch(&relay).await;
    let Outcome::Retry { at_ms, .. } = out[0] else {
        panic!("{out:?}")
    };
    assert!((T0 + 4_000..=T0 + 6_000).contains(&at_ms), "{at_ms}");
    clock.set(at_ms - 1);
    assert!(
        dispatch(&relay).await.is_empty(),
        "nothing before it is due"
    );
    // Attempt 2: 429 with Retry-After 600 s, within [5 min, 10 min] → 600 s.
    clock.set(at_ms);
    let out = dispatch(&relay).await;
    assert_eq!(
        out,
        [Outcome::Retry {
            at_ms: at_ms + 600_000,
            why: "HTTP 429".into()
        }]
    );
    // Attempt 3: 503 → 30 min ± 20 %.
    clock.set(at_ms + 600_000);
    let out = dispatch(&relay).await;
    let Outcome::Retry { at_ms: third, .. } = out[0] else {
        panic!("{out:?}")
    };
    let since = third - (at_ms + 600_000);
    assert!((1_440_000..=2_160_000).contains(&since), "{since}");
    // Attempt 4: the receiver is back.
    clock.set(third);
    let out = dispatch(&relay).await;
    assert!(
        matches!(&out[0], Outcome::Delivered { status, .. } if status == "succeeded"),
        "{out:?}"
    );

    let mut seen = Vec::new();
    hook.until(&mut seen, |s| s.len() == 4).await;
    let ids: Vec<&str> = seen.iter().map(|g| g.webhook_id.as_str()).collect();
    assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
    // Standard Webhooks: v1,<base64 HMAC-SHA256 of "id.timestamp.body"> over
    // the exact bytes received, verified here independently of the sender.
    let key = ring::hmac::Key::new(
        ring::hmac::HMAC_SHA256,
        &base64::Engine::decode(&base64::engine::general_purpose::STANDARD, WHSEC_B64).unwrap(),
    );
    for g in &seen {
        let signed = [
            g.webhook_id.as_bytes(),
            b".",
            g.timestamp.as_bytes(),
            b".",
            &g.raw,
        ]
        .concat();
        let sig = g.signature.strip_prefix("v1,").expect("a v1 signature");
        let sig = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, sig).unwrap();
        ring::hmac::verify(&key, &signed, &sig).expect("signature verifies");
    }
    assert_eq!(seen[0].timestamp, (T0 / 1000).to_string());
    assert_eq!(
        seen[3].body,
        json!({"run_slug": "RUN1", "status": 3, "results": 7, "usage": "0"})
    );
    clock.advance(100_000_000);
    assert!(dispatch(&relay).await.is_empty(), "delivered once");

    // 410 Gone stops at once; the event is dead, not dropped, and redeliverable.
    hook.script.lock().unwrap().push_back((410, None));
    let body = json!({"run_slug": "RUN2", "run_status": "failed"});
    assert_eq!(v2_posts(&relay, &url, body).await, 200);
    let out = dispatch(&relay).await;
    assert!(
        matches!(&out[0], Outcome::Dead { why } if why.contains("410")),
        "{out:?}"
    );
    clock.advance(100_000_000);
    assert!(dispatch(&relay).await.is_empty(), "410 stops");
    let dead = store.list(State::Dead, 0, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    // The operator's list says which `webhook-id` the client saw and which
    // host was called, never the token or the rest of the client's URL.
    let listed = relay
        .admin(&Method::GET, "/callbacks/events", Some("state=dead"))
        .await
        .unwrap();
    let listed = listed.into_body().collect().await.unwrap().to_bytes();
    let listed: Value = serde_json::from_slice(&listed).unwrap();
    let event = &listed["events"][0];
    let listed_id = event["webhook_id"].as_str().unwrap().to_owned();
    assert_eq!(event["target_host"], "127.0.0.1", "{listed}");
    let text = listed.to_string();
    assert!(
        !text.contains(&dead[0].token) && !text.contains("/cb"),
        "{text}"
    );
    let admin = relay
        .admin(
            &Method::POST,
            &format!("/callbacks/events/{}/redeliver", dead[0].id),
            None,
        )
        .await
        .unwrap();
    assert_eq!(admin.status(), 200);
    let out = dispatch(&relay).await;
    assert!(matches!(&out[0], Outcome::Delivered { .. }), "{out:?}");
    hook.until(&mut seen, |s| s.len() == 6).await;
    assert_eq!(seen[4].webhook_id, seen[5].webhook_id);
    assert_eq!(seen[5].webhook_id, listed_id);
}

/// Found by an operations review: a callback token replayed with the slug
/// of a run V2 does not know for the client's key was delivered as that
/// run's news. With enrichment on, such a run is not notified: the event
/// is dead, with the reason; a run V2 knows is notified with its detail.
#[tokio::test]
async fn a_run_v2_does_not_know_for_the_clients_key_is_not_notified() {
    let v2 = MockV2::start(|req| {
        if req.path.ends_with("/REAL") {
            Reply::ok(json!({"slug": "REAL", "status": "succeeded", "results": 7, "usage": "0.25"}))
        } else {
            Reply::error(404, 11004, "run not found")
        }
    })
    .await;
    let clock = Arc::new(ManualClock::new(T0));
    let (relay, store) = make_enriching_relay(
        &v2.url(),
        "allow_cidrs = [\"127.0.0.0/8\"]\nretry_schedule = [\"0s\", \"1m\"]\njitter_percent = 0\n",
        clock,
    );
    let mut hook = hook().await;
    let key = ApiKey::new("client-key").unwrap();
    let url = relay
        .v2_callback_url(&format!("{}/cb", hook.base), Some(&key))
        .unwrap();

    let ghost = json!({"run_slug": "GHOST", "run_status": "succeeded"});
    assert_eq!(v2_posts(&relay, &url, ghost).await, 200);
    let Outcome::Dead { why } = &dispatch(&relay).await[0] else {
        panic!("a run V2 does not know was notified");
    };
    assert!(why.contains("no such run"), "{why}");
    assert_eq!(store.stats().await.unwrap().dead, 1);

    let real = json!({"run_slug": "REAL", "run_status": "running"});
    assert_eq!(v2_posts(&relay, &url, real).await, 200);
    assert!(matches!(
        dispatch(&relay).await[..],
        [Outcome::Delivered { .. }]
    ));
    let mut seen = Vec::new();
    hook.until(&mut seen, |s| !s.is_empty()).await;
    assert_eq!(seen.len(), 1, "only the known run reached the client");
    assert_eq!(
        seen[0].body,
        json!({"run_slug": "REAL", "status": 3, "results": 7, "usage": "0.25"})
    );
}

#[tokio::test]
async fn a_used_up_schedule_leaves_the_event_dead_until_redelivered() {
    let clock = Arc::new(ManualClock::new(T0));
    let (relay, store) = make_relay(
        "allow_cidrs = [\"127.0.0.0/8\"]\nretry_schedule = [\"0s\", \"1m\"]\njitter_percent = 0\n",
        clock.clone(),
    );
    let mut hook = hook().await;
    hook.script
        .lock()
        .unwrap()
        .extend([(302, None), (502, None)]);
    let url = relay
        .v2_callback_url(&format!("{}/cb", hook.base), None)
        .unwrap();
    let body = json!({"run_id": "RUN3", "run_status": "succeeded"});
    assert_eq!(v2_posts(&relay, &url, body).await, 200);
    // A redirect is a failure, not followed.
    assert_eq!(
        dispatch(&relay).await,
        [Outcome::Retry {
            at_ms: T0 + 60_000,
            why: "HTTP 302".into()
        }]
    );
    clock.set(T0 + 60_000);
    assert!(matches!(dispatch(&relay).await[..], [Outcome::Dead { .. }]));
    let stats = relay
        .admin(&Method::GET, "/callbacks/stats", None)
        .await
        .unwrap();
    let stats: Value =
        serde_json::from_slice(&stats.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(stats["dead"], 1);
    let since = format!("since={}", T0 / 1000 - 1);
    let r = relay
        .admin(&Method::POST, "/callbacks/redeliver", Some(&since))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(matches!(
        dispatch(&relay).await[..],
        [Outcome::Delivered { .. }]
    ));
    let mut seen = Vec::new();
    hook.until(&mut seen, |s| s.len() == 3).await;
    assert_eq!(store.stats().await.unwrap().dead, 0);
    let bad = relay
        .admin(&Method::POST, "/callbacks/redeliver", Some("since=later"))
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
}

#[tokio::test]
async fn private_targets_are_refused_unless_allowed() {
    let clock = Arc::new(ManualClock::new(T0));
    let (relay, _) = make_relay("retry_schedule = [\"0s\", \"5s\"]\n", clock.clone());
    let mut hook = hook().await;
    let port = hook.base.rsplit(':').next().unwrap().to_owned();
    for (i, target) in [
        format!("{}/cb", hook.base),
        format!("http://localhost:{port}/cb"),
    ]
    .iter()
    .enumerate()
    {
        let url = relay.v2_callback_url(target, None).unwrap();
        let body = json!({"run_slug": format!("P{i}"), "run_status": "succeeded"});
        assert_eq!(v2_posts(&relay, &url, body).await, 200);
    }
    let out = dispatch(&relay).await;
    assert_eq!(out.len(), 2);
    for o in &out {
        assert!(
            matches!(o, Outcome::Retry { why, .. } if why.contains("refused")),
            "{o:?}"
        );
    }
    assert!(
        hook.rx.try_recv().is_err(),
        "nothing reached the private target"
    );
    // Allowed by CIDR, the same target is reached.
    let (open, _) = make_relay("allow_cidrs = [\"127.0.0.1/32\"]\n", clock);
    let url = open
        .v2_callback_url(&format!("{}/cb", hook.base), None)
        .unwrap();
    let body = json!({"run_slug": "P9", "run_status": "succeeded"});
    assert_eq!(v2_posts(&open, &url, body).await, 200);
    assert!(matches!(
        dispatch(&open).await[..],
        [Outcome::Delivered { .. }]
    ));
}

#[tokio::test]
async fn forged_altered_and_expired_tokens_get_404_and_store_nothing() {
    let clock = Arc::new(ManualClock::new(T0));
    let (relay, store) = make_relay("token_ttl_secs = 3600\n", clock.clone());
    let url = relay
        .v2_callback_url("https://client.example/cb", None)
        .unwrap();
    let token = url.rsplit('/').next().unwrap().to_owned();
    let body = json!({"run_slug": "F1", "run_status": "succeeded"});
    let mut altered = token.clone().into_bytes();
    let i = altered.len() / 2;
    altered[i] = if altered[i] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    for bad in [
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        altered.as_str(),
    ] {
        let forged = format!("https://gw.example/callbacks/v2/{bad}");
        assert_eq!(v2_posts(&relay, &forged, body.clone()).await, 404);
    }
    // Sealed with another secret.
    let (other, _) = {
        let text = "[callbacks]\npublic_url = \"https://gw.example\"\nsecret = \"some-other-secret-entirely\"\nstore = \"memory\"\n";
        let c = v1compat::config::load(text, Vec::new()).unwrap();
        let up = Arc::new(HttpUpstream::new(c.upstream.clone()).unwrap());
        let s = Arc::new(MemoryStore::default());
        (
            Relay::new(c.callbacks, s.clone(), up, c.compat, clock.clone())
                .unwrap()
                .unwrap(),
            s,
        )
    };
    let foreign = other
        .v2_callback_url("https://client.example/cb", None)
        .unwrap();
    assert_eq!(v2_posts(&relay, &foreign, body.clone()).await, 404);
    clock.advance(3_601_000);
    assert_eq!(v2_posts(&relay, &url, body.clone()).await, 404, "expired");
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.pending, stats.dead), (0, 0));
    // A genuine token with a bad body: 400.
    let fresh = relay
        .v2_callback_url("https://client.example/cb", None)
        .unwrap();
    assert_eq!(
        v2_posts(&relay, &fresh, json!({"run_status": "x"})).await,
        400
    );
    assert!(!fresh.contains("client.example"));
    // The client's URL is checked when the run starts.
    for bad in ["ftp://x/y", "https://user:pw@client.example/cb"] {
        let e = relay.v2_callback_url(bad, None).unwrap_err().render();
        assert_eq!((e.status.as_u16(), e.envelope.code), (400, 4000));
        assert!(e.envelope.message.contains("callback_url"));
    }
}

/// V2's callback accepted, the process killed with SIGKILL before it could
/// deliver, started again on the same redb file: the notification arrives.
#[tokio::test]
async fn a_callback_accepted_before_kill_9_is_delivered_after_restart() {
    let sb = Sandbox::start(
        SandboxConfig {
            speed: 0.001,
            ..SandboxConfig::default()
        },
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
    .await
    .unwrap();
    let key = sb.api_key().to_owned();
    let v2 = format!("http://{}", sb.v2_addr());
    let mut hook = hook().await;
    hook.down.store(true, Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("v1compat.toml");
    // public_url points nowhere: the test posts V2's callback itself, so it
    // knows the moment the gateway acknowledged it.
    std::fs::write(
        &config,
        format!(
            "[listen]\npublic = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n[upstream]\nbase_url = \"{v2}\"\n[log]\nformat = \"json\"\n[callbacks]\npublic_url = \"http://127.0.0.1:9\"\nsecret = \"{SECRET}\"\nstore = \"redb:{}\"\nallow_cidrs = [\"127.0.0.0/8\"]\nretry_schedule = [\"0s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\", \"1s\"]\njitter_percent = 0\npoll_interval_ms = 100\n",
            dir.path().join("callbacks.redb").display()
        ),
    )
    .unwrap();

    let (mut first, gw) = serve_binary(&config, &[INVENTORY_STORE]).await;
    let body = json!({"scraper_slug": "coreclaw/google-maps-scraper", "is_async": true,
                      "callback_url": format!("{}/crash", hook.base),
                      "input": {"parameters": {"custom": {"max_results": 5}}}});
    let (st, started) = post(&format!("http://{gw}/api/v1/scraper/run"), &key, body).await;
    assert_eq!(st, 200, "{started}");
    let run = started["data"]["run_slug"].as_str().unwrap().to_owned();
    let log = get(&format!("{v2}/__sandbox/requests")).await;
    let v2_url = log
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["body"]["callback_url"].as_str())
        .find(|u| u.contains("/callbacks/v2/"))
        .expect("V2 was given the relay URL")
        .to_owned();
    let path = v2_url.strip_prefix("http://127.0.0.1:9").unwrap();
    let (st, _) = post(
        &format!("{v2}/__sandbox/advance"),
        &key,
        json!({"seconds": 100}),
    )
    .await;
    assert_eq!(st, 200);
    let v2_body = json!({"run_slug": run, "run_status": "succeeded", "result_count": 5});
    let (st, ack) = post(&format!("http://{gw}{path}"), "", v2_body).await;
    assert_eq!(st, 200, "{ack}");
    first.kill().unwrap();
    first.wait().unwrap();
    let mut seen = Vec::new();
    while let Ok(g) = hook.rx.try_recv() {
        seen.push(g);
    }
    assert!(
        seen.iter().all(|g| g.answered != 200),
        "delivered before the kill"
    );

    hook.down.store(false, Ordering::SeqCst);
    let (mut second, _) = serve_binary(&config, &[INVENTORY_STORE]).await;
    hook.until(&mut seen, |s| s.iter().any(|g| g.answered == 200))
        .await;
    let delivered = seen.iter().find(|g| g.answered == 200).unwrap();
    assert_eq!(delivered.path, "/crash");
    assert_eq!(delivered.body["run_slug"], run.as_str());
    assert_eq!(delivered.body["status"], 3);
    assert_eq!(delivered.body["results"], 5);
    let ids: Vec<&str> = seen.iter().map(|g| g.webhook_id.as_str()).collect();
    assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
    second.kill().unwrap();
    second.wait().unwrap();
    sb.shutdown().await;
}

#[tokio::test]
async fn postgres_store_passes_the_store_suite() {
    let Some(url) = postgres_url("callbacks::postgres_store_passes_the_store_suite") else {
        return;
    };
    let db = fresh_database(&url).await;
    let store = v1compat::callbacks::store::postgres::PostgresStore::connect(&db, "callbacks")
        .await
        .unwrap();
    v1compat::callbacks::store::suite::run_all(&store).await;
}

/// A token for `url` sealed with the test secret, as a gateway would make it.
fn seal(url: &str) -> String {
    use v1compat::callbacks::token::{Claims, Sealer};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    Sealer::new(&[SECRET.to_owned()], 3600)
        .seal(&Claims {
            url: url.to_owned(),
            key: None,
            issued: now,
        })
        .unwrap()
}

/// Two gateway processes on one database deliver every event once; when the
/// one holding a claim is killed, another takes the claim over after its lease.
#[tokio::test]
async fn gateway_replicas_share_one_postgres_queue_and_take_over_claims() {
    let Some(url) =
        postgres_url("callbacks::gateway_replicas_share_one_postgres_queue_and_take_over_claims")
    else {
        return;
    };
    let db = fresh_database(&url).await;
    let mut hook = hook().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("v1compat.toml");
    std::fs::write(
        &config,
        format!(
            "[listen]\npublic = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n[upstream]\nbase_url = \"http://127.0.0.1:9\"\n[log]\nformat = \"json\"\n[callbacks]\npublic_url = \"http://127.0.0.1:9\"\nsecret = \"{SECRET}\"\nstore = \"{db}\"\nenrich = false\nallow_cidrs = [\"127.0.0.0/8\"]\nretry_schedule = [\"0s\", \"1s\", \"1s\", \"1s\", \"1s\"]\njitter_percent = 0\npoll_interval_ms = 100\nlease_secs = 2\nattempt_timeout_ms = 900\n"
        ),
    )
    .unwrap();
    let (mut a, gw_a) = serve_binary(&config, &[INVENTORY_STORE]).await;
    let (mut b, gw_b) = serve_binary(&config, &[INVENTORY_STORE]).await;
    let token = seal(&format!("{}/shared", hook.base));
    for i in 0..10 {
        let gw = if i % 2 == 0 { gw_a } else { gw_b };
        let body =
            json!({"run_slug": format!("RUN{i}"), "run_status": "succeeded", "result_count": i});
        let (st, r) = post(&format!("http://{gw}/callbacks/v2/{token}"), "", body).await;
        assert_eq!(st, 200, "{r}");
    }
    let mut seen = Vec::new();
    hook.until(&mut seen, |s| {
        s.iter().filter(|g| g.answered == 200).count() >= 10
    })
    .await;
    for i in 0..10 {
        let n = seen
            .iter()
            .filter(|g| g.answered == 200 && g.body["run_slug"] == format!("RUN{i}").as_str())
            .count();
        assert_eq!(n, 1, "RUN{i} delivered {n} times: {seen:#?}");
    }

    // The receiver answered; wait until the replicas have also recorded every
    // delivery (a kill in between would rightly cause a redelivery).
    let (client, conn) = tokio_postgres::connect(&db, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let row = client
            .query_one(
                "SELECT count(*) FROM v1compat_callbacks WHERE state <> 'done'",
                &[],
            )
            .await
            .unwrap();
        if row.get::<_, i64>(0) == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "deliveries never recorded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Takeover: only A runs; its attempt hangs; A is killed holding the claim.
    b.kill().unwrap();
    b.wait().unwrap();
    hook.hang.store(true, Ordering::SeqCst);
    let body = json!({"run_slug": "RUN_TAKEOVER", "run_status": "failed"});
    let (st, _) = post(&format!("http://{gw_a}/callbacks/v2/{token}"), "", body).await;
    assert_eq!(st, 200);
    let mut held = Vec::new();
    hook.until(&mut held, |s| {
        s.iter().any(|g| g.body["run_slug"] == "RUN_TAKEOVER")
    })
    .await;
    a.kill().unwrap();
    a.wait().unwrap();
    hook.hang.store(false, Ordering::SeqCst);
    let (mut c, _) = serve_binary(&config, &[INVENTORY_STORE]).await;
    hook.until(&mut held, |s| {
        s.iter()
            .any(|g| g.answered == 200 && g.body["run_slug"] == "RUN_TAKEOVER")
    })
    .await;
    let stray: Vec<&Got> = held
        .iter()
        .filter(|g| g.body["run_slug"] != "RUN_TAKEOVER")
        .collect();
    assert!(
        stray.is_empty(),
        "deliveries after the first ten: {stray:#?}"
    );
    let delivered = held.iter().find(|g| g.answered == 200).unwrap();
    assert_eq!(delivered.body["status"], 4);
    c.kill().unwrap();
    c.wait().unwrap();
}

/// Found by a review: 3,000 callbacks with made-up run slugs on one valid
/// token made 3,000 dead events and 3,000 V2 reads; only delivered events
/// were ever pruned. A token's reads for runs V2 does not know are now
/// limited an hour, and dead events are bounded in count (oldest first)
/// and age, both counted.
#[tokio::test]
async fn callbacks_on_made_up_runs_cost_bounded_reads_and_bounded_dead_events() {
    let (m, _local) = crate::support::local_metrics();
    let now = |c: &Arc<ManualClock>| {
        use v1compat::callbacks::clock::Clock;
        c.now_ms()
    };
    let v2 = MockV2::start(|_| Reply::error(404, 11004, "run not found")).await;
    let clock = Arc::new(ManualClock::new(T0));
    let (relay, store) = make_enriching_relay(
        &v2.url(),
        "allow_cidrs = [\"127.0.0.0/8\"]\nunknown_run_reads_per_hour = 3\nmax_dead_events = 4\nkeep_dead_secs = 600\nper_target_concurrency = 16\n",
        clock.clone(),
    );
    let mut hook = hook().await;
    let key = ApiKey::new("client-key").unwrap();
    let url = relay
        .v2_callback_url(&format!("{}/cb", hook.base), Some(&key))
        .unwrap();
    for i in 0..10 {
        let body = json!({"run_slug": format!("MADEUP{i}"), "run_status": "succeeded"});
        assert_eq!(v2_posts(&relay, &url, body).await, 200);
        clock.advance(1);
    }
    let out = dispatch(&relay).await;
    assert_eq!(out.len(), 10);
    assert!(
        out.iter().all(|o| matches!(o, Outcome::Dead { .. })),
        "{out:?}"
    );
    assert_eq!(v2.total(), 3, "three reads, then none for this token");
    let limited = crate::support::metric(
        &m,
        "v1compat_callbacks_unknown_run_reads_limited_total",
        &[],
    );
    assert_eq!(limited, 7.0);
    assert!(hook.rx.try_recv().is_err(), "nobody notified");

    // Ten dead, four kept: the oldest six pruned.
    assert_eq!(store.stats().await.unwrap().dead, 10);
    relay.deliverer.prune_dead(now(&clock)).await;
    let dead = store.list(State::Dead, 0, 100).await.unwrap();
    let runs: Vec<&str> = dead.iter().map(|e| e.run_slug.as_str()).collect();
    assert_eq!(runs, ["MADEUP6", "MADEUP7", "MADEUP8", "MADEUP9"]);
    let pruned = |reason| {
        crate::support::metric(
            &m,
            "v1compat_callbacks_dead_pruned_total",
            &[("reason", reason)],
        )
    };
    assert_eq!(pruned("count"), 6.0);
    // Past keep_dead_secs, the rest go for their age.
    clock.advance(601_000);
    relay.deliverer.prune_dead(now(&clock)).await;
    assert_eq!(store.stats().await.unwrap().dead, 0);
    assert_eq!(pruned("age"), 4.0);

    // An hour on, the token's reads are back.
    clock.advance(3_600_000);
    let body = json!({"run_slug": "MADEUP99", "run_status": "succeeded"});
    assert_eq!(v2_posts(&relay, &url, body).await, 200);
    dispatch(&relay).await;
    assert_eq!(v2.total(), 4);
}
