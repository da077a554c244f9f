//! Shared test plumbing: a scripted V2 double (in-process, or served over
//! HTTP on port 0), a gateway started on port 0, and a tiny HTTP client.

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

use v1compat::upstream::{Upstream, UpstreamFuture, V2Call, V2Reply};

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
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TestGateway {
    pub async fn start(config_toml: &str, upstream: Arc<dyn Upstream>) -> TestGateway {
        let public = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (addr, admin_addr) = (public.local_addr().unwrap(), admin.local_addr().unwrap());
        let config = v1compat::config::load(config_toml, Vec::new()).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(v1compat::run(public, admin, config, upstream, async {
            let _ = rx.await;
        }));
        TestGateway {
            addr,
            admin: admin_addr,
            stop: Some(tx),
        }
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
