//! Shared test plumbing: a scripted V2 double (in-process, or served over
//! HTTP on port 0), a mock V2 over HTTP that answers from a closure (and can
//! hang, hold, drop or truncate) while recording what it received, a gateway
//! started on port 0 that can be shut down and awaited, and a tiny HTTP
//! client.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::net::TcpListener;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use v1compat::shadow::Mirror;
use v1compat::upstream::{HttpUpstream, Upstream, UpstreamFuture, V2Call, V2Reply};

/// One expected V2 call and the answer to give.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Exchange {
    pub request: V2Expect,
    pub response: V2Answer,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct V2Expect {
    pub method: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// The key V2 must receive, or null for none.
    #[serde(default)]
    pub key: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct V2Answer {
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// A raw (non-JSON) body instead of `body`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
}

impl V2Answer {
    pub fn bytes(&self) -> Bytes {
        match (&self.raw, &self.body) {
            (Some(raw), _) => Bytes::from(raw.clone()),
            (None, Some(v)) => Bytes::from(serde_json::to_vec(v).unwrap()),
            (None, None) => Bytes::new(),
        }
    }
}

/// What V2 actually received.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub body: Option<Value>,
    pub key: Option<String>,
}

/// A scripted V2: each expected exchange answers one matching call (matched
/// by method and path, since fan-out calls run concurrently); anything else
/// is recorded as unexpected and answered 599.
#[derive(Clone, Default)]
pub struct ScriptedV2 {
    pending: Arc<Mutex<Vec<Exchange>>>,
    pub received: Arc<Mutex<Vec<Received>>>,
}

impl ScriptedV2 {
    pub fn new(exchanges: Vec<Exchange>) -> ScriptedV2 {
        ScriptedV2 {
            pending: Arc::new(Mutex::new(exchanges)),
            received: Arc::default(),
        }
    }

    pub fn answer(&self, got: Received) -> (u16, Bytes) {
        self.received.lock().unwrap().push(got.clone());
        let mut pending = self.pending.lock().unwrap();
        match pending
            .iter()
            .position(|e| e.request.method == got.method && e.request.path == got.path)
        {
            Some(i) => {
                let e = pending.remove(i);
                (e.response.status, e.response.bytes())
            }
            None => (599, Bytes::from_static(b"unexpected call")),
        }
    }

    pub fn unused(&self) -> Vec<Exchange> {
        self.pending.lock().unwrap().clone()
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

impl Upstream for ScriptedV2 {
    fn call(&self, call: V2Call, _request_id: &str) -> UpstreamFuture<'_> {
        let got = Received {
            method: call.method.to_string(),
            path: call.path.path_and_query(),
            body: call.body.clone(),
            key: call.key.as_ref().map(|k| k.expose().to_owned()),
        };
        let (status, body) = self.answer(got);
        Box::pin(async move {
            Ok(V2Reply {
                status: StatusCode::from_u16(status).unwrap(),
                body,
                attempts: 1,
                retry_after: None,
            })
        })
    }
}

/// Serves a [`ScriptedV2`] over HTTP on 127.0.0.1:0.
pub async fn serve_scripted(v2: ScriptedV2) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let v2 = v2.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let v2 = v2.clone();
                    async move {
                        let method = req.method().to_string();
                        let path = req
                            .uri()
                            .path_and_query()
                            .map(|p| p.to_string())
                            .unwrap_or_default();
                        let key = req
                            .headers()
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.strip_prefix("Bearer "))
                            .map(str::to_owned);
                        let bytes = req.into_body().collect().await.unwrap().to_bytes();
                        let body = if bytes.is_empty() {
                            None
                        } else {
                            serde_json::from_slice(&bytes).ok()
                        };
                        let (status, out) = v2.answer(Received {
                            method,
                            path,
                            body,
                            key,
                        });
                        let mut resp = Response::new(Full::new(out));
                        *resp.status_mut() = StatusCode::from_u16(status).unwrap();
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// A gateway on 127.0.0.1:0 in front of `upstream`.
pub struct TestGateway {
    pub addr: SocketAddr,
    #[allow(dead_code)] // plumbing for tests of the admin listener
    pub admin: SocketAddr,
    /// The live shadow mirror, when the configuration enables one.
    mirror: Option<Arc<Mirror>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestGateway {
    pub async fn start(config_toml: &str, upstream: Arc<dyn Upstream>) -> TestGateway {
        let public = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (addr, admin_addr) = (public.local_addr().unwrap(), admin.local_addr().unwrap());
        let config = v1compat::config::load(config_toml, Vec::new()).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (mirror_tx, mirror_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(v1compat::run_with_mirror(
            public,
            admin,
            config,
            upstream,
            mirror_tx,
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
    #[allow(dead_code)] // plumbing for the shadow tests
    pub fn mirror(&self) -> &Mirror {
        self.mirror.as_deref().expect("[shadow] is enabled")
    }

    /// A gateway in front of the real [`HttpUpstream`], configured from the
    /// same text.
    pub async fn over_http(config_toml: &str) -> TestGateway {
        let config = v1compat::config::load(config_toml, Vec::new()).unwrap();
        let upstream = Arc::new(HttpUpstream::new(config.upstream.clone()).unwrap());
        TestGateway::start(config_toml, upstream).await
    }

    /// Asks the gateway to stop (as SIGTERM would) and returns its server
    /// task, which ends once in-flight requests are answered.
    pub fn shutdown(mut self) -> JoinHandle<std::io::Result<()>> {
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

/// A plain HTTP exchange: returns status, headers and body.
pub async fn send(
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
pub async fn send_json(
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

/// One request as a [`MockV2`] saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// The path without the query.
    pub path: String,
    pub query: Vec<(String, String)>,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Seen {
    /// A query parameter read as an integer.
    pub fn param(&self, name: &str) -> Option<u64> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.parse().ok())
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON (`Null` when empty or not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// How a [`MockV2`] answers one request.
pub enum Reply {
    Json(u16, Value),
    /// A body that is not JSON.
    Raw(u16, &'static str),
    /// Waits for the notification, then answers with the inner reply.
    After(Arc<Notify>, Box<Reply>),
    /// Never answers.
    Hang,
    /// Closes the connection without answering.
    Drop,
    /// Promises a longer body than it sends, then closes the connection.
    Truncated,
}

impl Reply {
    /// A V2 success envelope around `data`.
    pub fn ok(data: Value) -> Reply {
        Reply::Json(
            200,
            serde_json::json!({"code": 0, "message": "success", "data": data}),
        )
    }

    /// A V2 error envelope.
    pub fn error(status: u16, code: i64, message: &str) -> Reply {
        Reply::Json(
            status,
            serde_json::json!({"code": code, "message": message}),
        )
    }
}

type MockBody = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;
type MockHandler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// A V2 double over HTTP on 127.0.0.1:0 that answers each request from a
/// closure and records every request it received, headers included.
#[derive(Clone)]
pub struct MockV2 {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl MockV2 {
    pub async fn start(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> MockV2 {
        let handler: MockHandler = Arc::new(handler);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (handler, log) = (handler.clone(), log.clone());
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (handler, log) = (handler.clone(), log.clone());
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let seen = Seen {
                            method: parts.method.to_string(),
                            path: parts.uri.path().to_owned(),
                            query: url::form_urlencoded::parse(
                                parts.uri.query().unwrap_or("").as_bytes(),
                            )
                            .into_owned()
                            .collect(),
                            headers: parts.headers,
                            body,
                        };
                        log.lock().unwrap().push(seen.clone());
                        let reply = handler(&seen);
                        mock_response(reply).await
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        MockV2 { addr, seen }
    }

    /// A mock that answers every request with HTTP 599, for tests where V2
    /// must not be reached.
    pub async fn untouchable() -> MockV2 {
        MockV2::start(|_| Reply::Raw(599, "unexpected call")).await
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Requests received with this method and path (query ignored).
    pub fn count(&self, method: &str, path: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.method == method && s.path == path)
            .count()
    }

    pub fn total(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

async fn mock_response(reply: Reply) -> Result<Response<MockBody>, std::io::Error> {
    let mut reply = reply;
    let reply = loop {
        match reply {
            Reply::After(notify, inner) => {
                notify.notified().await;
                reply = *inner;
            }
            other => break other,
        }
    };
    let full = |status: u16, bytes: Bytes| {
        let mut resp = Response::new(
            Full::new(bytes)
                .map_err(|never: Infallible| match never {})
                .boxed(),
        );
        *resp.status_mut() = StatusCode::from_u16(status).unwrap();
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        resp
    };
    match reply {
        Reply::Json(status, v) => Ok(full(status, Bytes::from(serde_json::to_vec(&v).unwrap()))),
        Reply::Raw(status, text) => Ok(full(status, Bytes::from_static(text.as_bytes()))),
        Reply::Hang => std::future::pending().await,
        Reply::Drop => Err(std::io::Error::other("mock V2 drops the connection")),
        Reply::Truncated => {
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
        Reply::After(..) => unreachable!("unwrapped above"),
    }
}
