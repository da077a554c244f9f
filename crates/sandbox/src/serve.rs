//! A tiny HTTP server helper: accept loop on an already-bound listener, hyper-util's
//! auto (HTTP/1 + HTTP/2) connections, a whole-body read before the handler runs, and
//! graceful shutdown with a short deadline. Also the response body type, which must
//! be able to fail mid-way (the `truncated` fault) and the handler's way to drop a
//! connection without answering (the `drop` fault).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub(crate) type Body = BoxBody<Bytes, BoxError>;

/// Largest request body the sandbox reads.
const MAX_BODY: usize = 8 * 1024 * 1024;
/// How long shutdown waits for in-flight requests before cutting them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Returned by a handler to close the connection without any answer.
#[derive(Debug)]
pub(crate) struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped on purpose")
    }
}
impl std::error::Error for Dropped {}

/// A request with its body already read.
#[derive(Debug)]
pub(crate) struct Req {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The body could not be read (too large or broken).
    pub body_error: bool,
}

impl Req {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|e: Infallible| match e {})
        .boxed()
}

/// A JSON response.
pub(crate) fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let text = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    bytes_response(status, "application/json", text)
}

pub(crate) fn bytes_response(
    status: StatusCode,
    content_type: &str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    if let Ok(v) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    resp
}

/// A response with a Content-Length longer than the bytes that follow: the head and
/// the partial body are sent, then (after a short pause, so they are flushed) the body
/// fails and the connection is closed instead of waiting for the missing bytes.
pub(crate) fn truncated(status: StatusCode, body: Bytes) -> Response<Body> {
    let announced = body.len() + 64;
    // States: Some(Some(data)) → send data; Some(None) → pause, then fail; None → end.
    let stream = futures_util::stream::unfold(Some(Some(body)), |state| async move {
        match state? {
            Some(data) => Some((Ok::<_, BoxError>(Frame::data(data)), Some(None))),
            None => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Some((Err(Box::new(Dropped) as BoxError), None))
            }
        }
    });
    let mut resp = Response::new(StreamBody::new(stream).boxed());
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(http::header::CONTENT_LENGTH, HeaderValue::from(announced));
    resp
}

/// Serve `listener` until `stop` turns true; then stop accepting, give in-flight
/// requests a short grace period and cut what remains.
pub(crate) fn serve<H, F>(
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
    handler: H,
) -> tokio::task::JoinHandle<()>
where
    H: Fn(Req, SocketAddr) -> F + Send + Sync + 'static,
    F: Future<Output = Result<Response<Body>, Dropped>> + Send + 'static,
{
    let handler = Arc::new(handler);
    tokio::spawn(async move {
        let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        let graceful = GracefulShutdown::new();
        let mut conns = JoinSet::new();
        loop {
            while conns.try_join_next().is_some() {}
            let accepted = tokio::select! {
                _ = stop.wait_for(|s| *s) => None,
                accepted = listener.accept() => Some(accepted),
            };
            let (stream, peer) = match accepted {
                None => break,
                Some(Ok(x)) => x,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "sandbox accept failed");
                    // Avoid a hot loop on persistent errors (e.g. fd exhaustion).
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let handler = handler.clone();
            let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                let handler = handler.clone();
                async move {
                    let req = read_request(req).await;
                    handler(req, peer).await
                }
            });
            let conn = builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            let conn = graceful.watch(conn);
            conns.spawn(async move {
                let _ = conn.await;
            });
        }
        drop(listener);
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await;
        conns.abort_all();
        while conns.join_next().await.is_some() {}
    })
}

async fn read_request(req: http::Request<Incoming>) -> Req {
    let (parts, body) = req.into_parts();
    let (body, body_error) = match Limited::new(body, MAX_BODY).collect().await {
        Ok(c) => (c.to_bytes(), false),
        Err(_) => (Bytes::new(), true),
    };
    Req {
        method: parts.method,
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or("").to_string(),
        headers: parts.headers,
        body,
        body_error,
    }
}
