//! Shared test plumbing: a gateway started on port 0 that can be shut down
//! and awaited, a tiny HTTP client, a metrics recorder local to one test,
//! and [`MockV2`], the one V2 double: built
//! from a closure or a script of expected exchanges, used in process as the
//! gateway's `Upstream` or served over HTTP on port 0, answering (or
//! hanging, holding, slowing, dropping, truncating) and recording what it
//! received either way.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use metrics::LocalRecorderGuard;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::net::TcpListener;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use v1compat::common::request_id::RequestId;
use v1compat::shadow::Mirror;
use v1compat::upstream::{
    HttpUpstream, Upstream, UpstreamFailure, UpstreamFuture, V2Call, V2Reply,
};

/// For a `v1compat serve` the tests spawn: the migration inventory in
/// memory, so that parallel gateways do not share (and leave behind) its
/// default file in the working directory.
pub(crate) const INVENTORY_STORE: (&str, &str) = ("V1COMPAT_INVENTORY__STORE", "memory");

/// A gateway on 127.0.0.1:0 in front of `upstream`.
pub(crate) struct TestGateway {
    pub addr: SocketAddr,
    #[allow(dead_code)] // plumbing for tests of the admin listener
    pub admin: SocketAddr,
    /// The live shadow mirror, when the configuration enables one.
    mirror: Option<Arc<Mirror>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestGateway {
    pub(crate) async fn start(config_toml: &str, upstream: Arc<dyn Upstream>) -> TestGateway {
        let config = v1compat::config::load(config_toml, Vec::new()).unwrap();
        TestGateway::start_loaded(config, upstream, false).await
    }

    /// [`TestGateway::start`] with the configuration already loaded, and
    /// the migration inventory opened when `inventory` (as `serve` and
    /// `sandbox` open it).
    async fn start_loaded(
        config: v1compat::config::Config,
        upstream: Arc<dyn Upstream>,
        inventory: bool,
    ) -> TestGateway {
        let public = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (addr, admin_addr) = (public.local_addr().unwrap(), admin.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (mirror_tx, mirror_rx) = tokio::sync::oneshot::channel();
        let extras = v1compat::Extras {
            mirror: Some(mirror_tx),
            inventory,
        };
        let task = tokio::spawn(v1compat::run_with(
            public,
            admin,
            config,
            upstream,
            extras,
            async {
                let _ = rx.await;
            },
        ));
        // Resolves before anything is served: with the mirror, or without
        // one (shadow off, or start-up failed and the task says why).
        let mirror = mirror_rx.await.ok();
        TestGateway {
            addr,
            admin: admin_addr,
            mirror,
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// The live shadow mirror; panics when the configuration has none.
    /// Whether a live mirror was built (only with `[shadow]` enabled).
    pub(crate) fn has_mirror(&self) -> bool {
        self.mirror.is_some()
    }

    pub(crate) fn mirror(&self) -> &Mirror {
        self.mirror.as_deref().expect("[shadow] is enabled")
    }

    /// A gateway in front of the real [`HttpUpstream`], both made from one
    /// loading of the text, as `serve` makes them: the listeners and the V2
    /// client count in one memory budget.
    pub(crate) async fn over_http(config_toml: &str) -> TestGateway {
        TestGateway::over_http_with(config_toml, false).await
    }

    /// [`TestGateway::over_http`], with the migration inventory opened
    /// when `inventory`.
    pub(crate) async fn over_http_with(config_toml: &str, inventory: bool) -> TestGateway {
        let config = v1compat::config::load(config_toml, Vec::new()).unwrap();
        let upstream = Arc::new(HttpUpstream::new(config.upstream.clone()).unwrap());
        TestGateway::start_loaded(config, upstream, inventory).await
    }

    /// Asks the gateway to stop (as SIGTERM would) and returns its server
    /// task, which ends once in-flight requests are answered.
    pub(crate) fn shutdown(mut self) -> JoinHandle<std::io::Result<()>> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.task
            .take()
            .expect("the server task is kept until shutdown")
    }
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// A request id for a V2 call made by hand.
pub(crate) fn rid(id: &str) -> RequestId {
    RequestId::usable(&http::HeaderValue::from_str(id).unwrap()).expect("a usable request id")
}

/// The metrics of one test alone: a recorder local to the test's thread.
/// Tests that read it run on a current-thread runtime, so every task of
/// their gateway records here and no other test's does. The recorder is
/// leaked: the guard must borrow it for the rest of the test.
pub(crate) fn local_metrics() -> (Snapshotter, LocalRecorderGuard<'static>) {
    let recorder: &'static DebuggingRecorder = Box::leak(Box::new(DebuggingRecorder::new()));
    (
        recorder.snapshotter(),
        metrics::set_default_local_recorder(recorder),
    )
}

/// Sum of the series of `name` whose labels include every `labels` pair.
pub(crate) fn metric(m: &Snapshotter, name: &str, labels: &[(&str, &str)]) -> f64 {
    m.snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| {
            let key = key.key();
            key.name() == name
                && labels
                    .iter()
                    .all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v))
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => n as f64,
            DebugValue::Gauge(g) => g.0,
            DebugValue::Histogram(h) => h.len() as f64,
        })
        .sum()
}

/// A plain HTTP exchange: returns status, headers and body.
pub(crate) async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Bytes>,
) -> (StatusCode, http::HeaderMap, Bytes) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut req = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client
        .request(req.body(Full::new(body.unwrap_or_default())).unwrap())
        .await
        .unwrap();
    let (parts, body) = resp.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

/// Sends JSON and parses a JSON answer.
#[allow(dead_code)] // plumbing kept for tests that need it
pub(crate) async fn send_json(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut headers = vec![("content-type", "application/json")];
    if let Some(k) = key {
        headers.push(("api-key", k));
    }
    let bytes = body.map(|b| Bytes::from(serde_json::to_vec(b).unwrap()));
    let (status, _, out) = send(addr, method, path, &headers, bytes).await;
    let v = serde_json::from_slice(&out)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&out).into_owned()));
    (status.as_u16(), v)
}

/// One expected V2 call and the answer to give (golden cases).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Exchange {
    pub request: V2Expect,
    pub response: V2Answer,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct V2Expect {
    pub method: String,
    /// Path and query.
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// The key V2 must receive, or null for none.
    #[serde(default)]
    pub key: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct V2Answer {
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// A raw (non-JSON) body instead of `body`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
}

impl V2Answer {
    pub(crate) fn bytes(&self) -> Bytes {
        match (&self.raw, &self.body) {
            (Some(raw), _) => Bytes::from(raw.clone()),
            (None, Some(v)) => Bytes::from(serde_json::to_vec(v).unwrap()),
            (None, None) => Bytes::new(),
        }
    }
}

/// One request as a [`MockV2`] saw it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub method: String,
    /// The path without the query.
    pub path: String,
    /// Path and query as sent.
    pub target: String,
    pub query: Vec<(String, String)>,
    /// The key presented (`Authorization: Bearer` or `api-key`).
    pub key: Option<String>,
    /// The HTTP headers; empty in process, where there are none.
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Seen {
    fn new(
        method: &Method,
        target: String,
        key: Option<String>,
        headers: http::HeaderMap,
        body: Bytes,
    ) -> Seen {
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        Seen {
            method: method.to_string(),
            path: path.to_owned(),
            query: url::form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect(),
            target: target.clone(),
            key,
            headers,
            body,
        }
    }

    /// A query parameter read as an integer.
    pub(crate) fn param(&self, name: &str) -> Option<u64> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.parse().ok())
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON (`Null` when empty or not JSON).
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// How a [`MockV2`] answers one request.
pub(crate) enum Reply {
    Json(u16, Value),
    /// A body that is not JSON.
    Raw(u16, &'static str),
    /// Any body, as given.
    Bytes(u16, Bytes),
    /// Waits for the notification, then answers with the inner reply.
    After(Arc<Notify>, Box<Reply>),
    /// Takes this long (a slow V2), then answers with the inner reply.
    Slow(Duration, Box<Reply>),
    /// The inner reply with a `Retry-After`: exact in process, whole
    /// seconds rounded up over HTTP.
    RetryAfter(Duration, Box<Reply>),
    /// Never answers.
    Hang,
    /// Closes the connection without answering.
    Drop,
    /// Promises a longer body than it sends, then closes the connection.
    Truncated,
}

impl Reply {
    /// A V2 success envelope around `data`.
    pub(crate) fn ok(data: Value) -> Reply {
        Reply::Json(
            200,
            serde_json::json!({"code": 0, "message": "success", "data": data}),
        )
    }

    /// A V2 error envelope.
    pub(crate) fn error(status: u16, code: i64, message: &str) -> Reply {
        Reply::Json(
            status,
            serde_json::json!({"code": code, "message": message}),
        )
    }
}

/// What a reply comes to once its waits are over.
enum Outcome {
    Answer {
        status: u16,
        body: Bytes,
        retry_after: Option<Duration>,
    },
    Drop,
    Truncated,
}

impl Reply {
    async fn settle(self) -> Outcome {
        let mut reply = self;
        let mut retry_after = None;
        let (status, body) = loop {
            match reply {
                Reply::After(notify, inner) => {
                    notify.notified().await;
                    reply = *inner;
                }
                Reply::Slow(delay, inner) => {
                    tokio::time::sleep(delay).await;
                    reply = *inner;
                }
                Reply::RetryAfter(after, inner) => {
                    retry_after = Some(after);
                    reply = *inner;
                }
                Reply::Json(status, v) => {
                    break (status, Bytes::from(serde_json::to_vec(&v).unwrap()))
                }
                Reply::Raw(status, text) => break (status, Bytes::from_static(text.as_bytes())),
                Reply::Bytes(status, bytes) => break (status, bytes),
                Reply::Hang => std::future::pending().await,
                Reply::Drop => return Outcome::Drop,
                Reply::Truncated => return Outcome::Truncated,
            }
        };
        Outcome::Answer {
            status,
            body,
            retry_after,
        }
    }
}

type Handler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// The V2 double of the suite, one builder for both ways of reaching it:
/// in process as the gateway's [`Upstream`] (`Arc::new(mock.clone())`, no
/// network, no HTTP client), or over HTTP on 127.0.0.1:0 after
/// [`MockV2::serve`] (through the real client). It answers from a closure,
/// or from a script of expected exchanges ([`MockV2::scripted`]), and
/// records every request it received.
#[derive(Clone)]
pub(crate) struct MockV2 {
    handler: Handler,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// In-process calls whose caller dropped them before the answer.
    abandoned: Arc<AtomicUsize>,
    /// Signalled on every request received and every call abandoned.
    changed: Arc<Notify>,
    /// The exchanges a scripted mock has not used yet.
    script: Arc<Mutex<Vec<Exchange>>>,
    addr: Option<SocketAddr>,
}

impl MockV2 {
    /// A mock answering each request from `handler`, not yet served.
    pub(crate) fn new(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> MockV2 {
        MockV2 {
            handler: Arc::new(handler),
            seen: Arc::default(),
            abandoned: Arc::default(),
            changed: Arc::default(),
            script: Arc::default(),
            addr: None,
        }
    }

    /// A mock where each expected exchange answers one matching call
    /// (matched by method, path and query, since fan-out calls run
    /// concurrently); anything else is answered 599 and shows in
    /// [`MockV2::seen`] without a match.
    pub(crate) fn scripted(exchanges: Vec<Exchange>) -> MockV2 {
        let script = Arc::new(Mutex::new(exchanges));
        let pending = script.clone();
        let mut mock = MockV2::new(move |seen| {
            let mut pending = pending.lock().unwrap();
            let found = pending
                .iter()
                .position(|e| e.request.method == seen.method && e.request.path == seen.target);
            match found {
                Some(i) => {
                    let e = pending.remove(i);
                    Reply::Bytes(e.response.status, e.response.bytes())
                }
                None => Reply::Raw(599, "unexpected call"),
            }
        });
        mock.script = script;
        mock
    }

    /// Starts serving over HTTP on 127.0.0.1:0.
    pub(crate) async fn serve(mut self) -> MockV2 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        self.addr = Some(listener.local_addr().unwrap());
        let mock = self.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let mock = mock.clone();
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let mock = mock.clone();
                    async move { mock.answer_http(req).await }
                });
                tokio::spawn(async move {
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        self
    }

    /// [`MockV2::new`], served over HTTP.
    pub(crate) async fn start(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> MockV2 {
        MockV2::new(handler).serve().await
    }

    /// A served mock that answers every request with HTTP 599, for tests
    /// where V2 must not be reached.
    pub(crate) async fn untouchable() -> MockV2 {
        MockV2::start(|_| Reply::Raw(599, "unexpected call")).await
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr.expect("MockV2::serve first")
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Requests received with this method and path (query ignored).
    pub(crate) fn count(&self, method: &str, path: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.method == method && s.path == path)
            .count()
    }

    pub(crate) fn total(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Waits until at least `n` requests have arrived.
    pub(crate) async fn arrived(&self, n: usize) {
        self.until(|m| m.total() >= n).await;
    }

    /// Waits until the gateway has given up (dropped) at least `n`
    /// in-process calls before they were answered.
    pub(crate) async fn abandoned(&self, n: usize) {
        self.until(|m| m.abandoned.load(Ordering::SeqCst) >= n)
            .await;
    }

    async fn until(&self, done: impl Fn(&MockV2) -> bool) {
        loop {
            // Created before the check: a change in between still wakes it.
            let next = self.changed.notified();
            if done(self) {
                return;
            }
            next.await;
        }
    }

    /// The scripted exchanges no call has used.
    pub(crate) fn unused(&self) -> Vec<Exchange> {
        self.script.lock().unwrap().clone()
    }

    /// Records a request and picks its reply.
    fn receive(&self, seen: Seen) -> Reply {
        self.seen.lock().unwrap().push(seen.clone());
        self.changed.notify_waiters();
        (self.handler)(&seen)
    }

    async fn answer_http(
        &self,
        req: Request<hyper::body::Incoming>,
    ) -> Result<Response<MockBody>, std::io::Error> {
        let (parts, body) = req.into_parts();
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        let key = header("authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .or_else(|| header("api-key"))
            .map(str::to_owned);
        let target = parts
            .uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default();
        let seen = Seen::new(&parts.method, target, key, parts.headers.clone(), body);
        match self.receive(seen).settle().await {
            Outcome::Answer {
                status,
                body,
                retry_after,
            } => {
                let mut resp = Response::new(
                    Full::new(body)
                        .map_err(|never: Infallible| match never {})
                        .boxed(),
                );
                *resp.status_mut() = StatusCode::from_u16(status).unwrap();
                resp.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
                if let Some(after) = retry_after {
                    let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
                    resp.headers_mut()
                        .insert(http::header::RETRY_AFTER, secs.into());
                }
                Ok(resp)
            }
            Outcome::Drop => Err(std::io::Error::other("mock V2 drops the connection")),
            Outcome::Truncated => {
                let frames: Vec<Result<hyper::body::Frame<Bytes>, std::io::Error>> = vec![
                    Ok(hyper::body::Frame::data(Bytes::from_static(
                        b"{\"code\":0,\"da",
                    ))),
                    Err(std::io::Error::other("mock V2 cuts the body short")),
                ];
                let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
                let mut resp = Response::new(BodyExt::boxed(body));
                resp.headers_mut().insert(
                    http::header::CONTENT_LENGTH,
                    http::HeaderValue::from_static("1000"),
                );
                Ok(resp)
            }
        }
    }
}

/// In process: the call as the operation made it, the reply as the
/// upstream client would have returned it.
impl Upstream for MockV2 {
    fn call(&self, call: V2Call, _request_id: &RequestId) -> UpstreamFuture<'_> {
        let body = call
            .body
            .as_ref()
            .map(|b| Bytes::from(serde_json::to_vec(b).unwrap()))
            .unwrap_or_default();
        let key = call.key.as_ref().map(|k| k.expose().to_owned());
        let seen = Seen::new(
            &call.method,
            call.path.path_and_query().to_owned(),
            key,
            http::HeaderMap::new(),
            body,
        );
        let reply = self.receive(seen);
        let mut abandon = Abandon(Some(self.clone()));
        Box::pin(async move {
            let outcome = reply.settle().await;
            abandon.answered();
            match outcome {
                Outcome::Answer {
                    status,
                    body,
                    retry_after,
                } => Ok(V2Reply {
                    status: StatusCode::from_u16(status).unwrap(),
                    body,
                    attempts: 1,
                    retry_after,
                }),
                Outcome::Drop => Err(UpstreamFailure::Broken(
                    "mock V2 drops the connection".into(),
                )),
                Outcome::Truncated => Err(UpstreamFailure::Broken(
                    "mock V2 cuts the body short".into(),
                )),
            }
        })
    }
}

/// Counts an in-process call as abandoned if its future is dropped before
/// the answer (the gateway gave up on it).
struct Abandon(Option<MockV2>);

impl Abandon {
    fn answered(&mut self) {
        self.0 = None;
    }
}

impl Drop for Abandon {
    fn drop(&mut self) {
        if let Some(mock) = self.0.take() {
            mock.abandoned.fetch_add(1, Ordering::SeqCst);
            mock.changed.notify_waiters();
        }
    }
}

type MockBody = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

/// A `v1compat serve` process, killed if a test fails while it runs (after
/// the test's own kill and wait, std knows it exited and sends nothing).
pub(crate) struct Running(std::process::Child, Arc<Mutex<String>>);

impl Running {
    /// Its log so far, every line.
    pub(crate) fn log(&self) -> String {
        self.1.lock().unwrap().clone()
    }
}

impl std::ops::Deref for Running {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `v1compat serve` and returns it with its public address once the
/// listening line is logged.
/// `env` is the whole environment it gets.
pub(crate) async fn serve_binary(
    config: &std::path::Path,
    env: &[(&str, &str)],
) -> (Running, SocketAddr) {
    use std::io::BufRead;
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_v1compat"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .env_clear()
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let mut child = Running(child, log.clone());
    let stderr = child.stderr.take().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.unwrap_or_default();
            let mut kept = log.lock().unwrap();
            kept.push_str(&line);
            kept.push('\n');
            drop(kept);
            let _ = tx.send(line);
        }
    });
    let public = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(line) = rx.recv().await {
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if v["message"] == "v1compat listening" {
                return v["public"].as_str().unwrap().parse::<SocketAddr>().unwrap();
            }
        }
        panic!("v1compat exited without listening");
    })
    .await
    .expect("v1compat did not start listening");
    // Keep draining the log so the child never blocks on a full pipe.
    tokio::spawn(async move { while rx.recv().await.is_some() {} });
    (child, public)
}

/// The PostgreSQL server of `TEST_POSTGRES_URL`, or `None` after saying
/// the test was skipped (it fails instead where `.ci/run` set
/// `V1COMPAT_REQUIRE_TOOLS`, having started a server).
pub(crate) fn postgres_url(test: &str) -> Option<String> {
    match std::env::var("TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            crate::required_tools::skip_or_fail(
                test,
                "TEST_POSTGRES_URL is not set",
                "it needs a PostgreSQL server: run with TEST_POSTGRES_URL=postgres://user@127.0.0.1:5432/postgres, as .ci/run does",
            );
            None
        }
    }
}

/// A fresh database on that server, so tests never see each other's rows.
pub(crate) async fn fresh_database(url: &str) -> String {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let name = format!(
        "cbtest_{}",
        ulid::Ulid::new().to_string().to_ascii_lowercase()
    );
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let mut u = url::Url::parse(url).unwrap();
    u.set_path(&format!("/{name}"));
    u.to_string()
}
