//! `HttpUpstream` against tiny in-process hyper servers on 127.0.0.1:0:
//! retries, deadlines, size caps, headers and base URL handling, checked by
//! what the server actually received.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::support::rid;
use v1compat::upstream::{
    ApiKey, AuthStyle, HttpUpstream, RetryPolicy, Upstream, UpstreamFailure, UpstreamSettings,
    V2Call,
};
use v1compat::v2::{Part, Segment, V2Path};

type Body = BoxBody<Bytes, Infallible>;
type Handler =
    Arc<dyn Fn(usize) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> + Send + Sync>;

/// What the test server saw of one request.
#[derive(Debug)]
struct Seen {
    method: Method,
    uri: String,
    headers: HeaderMap,
    body: Bytes,
}

struct TestServer {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
    seen: mpsc::UnboundedReceiver<Seen>,
    /// One message each time a connection ends on the server's side.
    closed: mpsc::UnboundedReceiver<()>,
}

impl TestServer {
    fn url(&self) -> url::Url {
        url::Url::parse(&format!("http://{}", self.addr)).unwrap()
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// Serves HTTP/1.1 on a fresh port; `handler` gets the 0-based request
/// number so a test can script "503, then 200".
async fn serve<F, Fut>(handler: F) -> TestServer
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let handler: Handler = Arc::new(move |n| Box::pin(handler(n)));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let (tx, seen) = mpsc::unbounded_channel();
    let counter = hits.clone();
    let connections = Arc::new(AtomicUsize::new(0));
    let accepted = connections.clone();
    let (closed_tx, closed) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            accepted.fetch_add(1, Ordering::SeqCst);
            let (handler, counter, tx) = (handler.clone(), counter.clone(), tx.clone());
            let closed_tx = closed_tx.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: hyper::Request<Incoming>| {
                    let (handler, counter, tx) = (handler.clone(), counter.clone(), tx.clone());
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let _ = tx.send(Seen {
                            method: parts.method,
                            uri: parts.uri.to_string(),
                            headers: parts.headers,
                            body,
                        });
                        let n = counter.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, Infallible>(handler(n).await)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                let _ = closed_tx.send(());
            });
        }
    });
    TestServer {
        addr,
        hits,
        connections,
        seen,
        closed,
    }
}

fn reply(status: StatusCode, body: &'static str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(body.as_bytes())).boxed())
        .unwrap()
}

const OK_BODY: &str = r#"{"code":0,"message":"ok","data":{}}"#;

/// Settings tuned for tests: tiny backoffs so retries do not slow the suite.
fn settings(base: url::Url) -> UpstreamSettings {
    let mut s = UpstreamSettings::new(base);
    s.retry.base_backoff = Duration::from_millis(1);
    s.retry.max_backoff = Duration::from_millis(5);
    s.attempt_timeout = Duration::from_secs(5);
    s
}

fn run_log_path() -> V2Path {
    let id = Segment::new("01KS2A1M515HG7PZX9STTB0KPH").unwrap();
    V2Path::new(&[Part::Lit("worker-runs"), Part::Id(&id), Part::Lit("log")])
}

fn store_path() -> V2Path {
    V2Path::new(&[Part::Lit("store")]).query("keyword", "maps & more")
}

#[tokio::test]
async fn get_is_retried_after_503_and_returns_the_200() {
    let server = serve(|n| async move {
        if n == 0 {
            reply(StatusCode::SERVICE_UNAVAILABLE, r#"{"code":10000}"#)
        } else {
            reply(StatusCode::OK, OK_BODY)
        }
    })
    .await;
    let up = HttpUpstream::new(settings(server.url())).unwrap();
    let reply = up
        .call(V2Call::get(run_log_path()), &rid("req-1"))
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, OK_BODY.as_bytes());
    assert_eq!(reply.attempts, 2);
    assert_eq!(server.hits(), 2);
}

/// Every attempt sends its own copy of the call's headers, the key and the
/// request id included: a retry must not go out without them.
#[tokio::test]
async fn a_retried_attempt_carries_the_key_and_request_id_again() {
    for style in [AuthStyle::Bearer, AuthStyle::ApiKeyHeader] {
        let mut server = serve(|n| async move {
            if n == 0 {
                reply(StatusCode::SERVICE_UNAVAILABLE, r#"{"code":10000}"#)
            } else {
                reply(StatusCode::OK, OK_BODY)
            }
        })
        .await;
        let mut s = settings(server.url());
        s.auth_style = style;
        let up = HttpUpstream::new(s).unwrap();
        let key = ApiKey::new("sk-retry-789").unwrap();
        let reply = up
            .call(
                V2Call::get(run_log_path()).with_key(Some(key)),
                &rid("req-retry"),
            )
            .await
            .unwrap();
        assert_eq!(reply.attempts, 2);
        for attempt in 0..2 {
            let seen = server.seen.recv().await.unwrap();
            let (name, expected) = match style {
                AuthStyle::Bearer => ("authorization", "Bearer sk-retry-789"),
                AuthStyle::ApiKeyHeader => ("api-key", "sk-retry-789"),
            };
            assert_eq!(seen.headers[name], expected, "attempt {attempt}, {style:?}");
            assert_eq!(seen.headers["x-request-id"], "req-retry");
            assert_eq!(
                seen.headers.len(),
                5,
                "attempt {attempt}: {:?}",
                seen.headers.keys()
            );
        }
    }
}

#[tokio::test]
async fn persistent_503_returns_the_last_reply_after_max_attempts() {
    let server = serve(|_| async { reply(StatusCode::BAD_GATEWAY, r#"{"code":10000}"#) }).await;
    let up = HttpUpstream::new(settings(server.url())).unwrap();
    let reply = up
        .call(V2Call::get(run_log_path()), &rid("req-1"))
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    assert_eq!(reply.attempts, 3);
    assert_eq!(server.hits(), 3);
}

#[tokio::test]
async fn too_many_requests_with_retry_after_zero_is_retried() {
    let server = serve(|n| async move {
        if n == 0 {
            let mut r = reply(StatusCode::TOO_MANY_REQUESTS, r#"{"code":13000}"#);
            r.headers_mut().insert("retry-after", "0".parse().unwrap());
            r
        } else {
            reply(StatusCode::OK, OK_BODY)
        }
    })
    .await;
    let up = HttpUpstream::new(settings(server.url())).unwrap();
    let reply = up
        .call(V2Call::get(store_path()), &rid("req-1"))
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.attempts, 2);
}

#[tokio::test]
async fn retry_after_longer_than_the_cap_is_not_waited_for() {
    let server = serve(|_| async {
        let mut r = reply(StatusCode::TOO_MANY_REQUESTS, r#"{"code":13000}"#);
        r.headers_mut()
            .insert("retry-after", "3600".parse().unwrap());
        r
    })
    .await;
    let up = HttpUpstream::new(settings(server.url())).unwrap();
    let started = Instant::now();
    let reply = up
        .call(V2Call::get(store_path()), &rid("req-1"))
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.attempts, 1);
    assert_eq!(server.hits(), 1);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn post_is_sent_exactly_once_even_on_503() {
    let mut server = serve(|_| async { reply(StatusCode::SERVICE_UNAVAILABLE, "{}") }).await;
    let up = HttpUpstream::new(settings(server.url())).unwrap();
    let path = V2Path::new(&[Part::Lit("worker-runs")]);
    let body = serde_json::json!({"workerId": "coreclaw~maps", "input": {"q": 1}});
    let call = V2Call::post(path, Some(body.clone()));
    assert_eq!(call.retry, RetryPolicy::Never);
    let reply = up.call(call, &rid("req-post")).await.unwrap();
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.attempts, 1);
    assert_eq!(server.hits(), 1);
    let seen = server.seen.recv().await.unwrap();
    assert_eq!(seen.method, Method::POST);
    assert_eq!(seen.headers["content-type"], "application/json");
    let sent: serde_json::Value = serde_json::from_slice(&seen.body).unwrap();
    assert_eq!(sent, body);
    assert!(server.seen.try_recv().is_err(), "a second POST arrived");
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let server = serve(|_| async { reply(StatusCode::NOT_FOUND, r#"{"code":11004}"#) }).await;
    let up = HttpUpstream::new(settings(server.url())).unwrap();
    let reply = up
        .call(V2Call::get(run_log_path()), &rid("req-1"))
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.attempts, 1);
    assert_eq!(server.hits(), 1);
}

#[tokio::test]
async fn no_retry_starts_past_the_retry_window() {
    let server = serve(|_| async { reply(StatusCode::SERVICE_UNAVAILABLE, "{}") }).await;
    let mut s = settings(server.url());
    s.retry.retry_window = Duration::ZERO;
    let up = HttpUpstream::new(s).unwrap();
    let reply = up
        .call(V2Call::get(store_path()), &rid("req-1"))
        .await
        .unwrap();
    assert_eq!(reply.attempts, 1);
    assert_eq!(server.hits(), 1);
}

#[tokio::test]
async fn an_empty_retry_budget_stops_retries() {
    let server = serve(|_| async { reply(StatusCode::SERVICE_UNAVAILABLE, "{}") }).await;
    let mut s = settings(server.url());
    s.retry.budget_percent = 0.0;
    s.retry.budget_min_per_sec = 0;
    let up = HttpUpstream::new(s).unwrap();
    let reply = up
        .call(V2Call::get(store_path()), &rid("req-1"))
        .await
        .unwrap();
    assert_eq!(reply.attempts, 1);
    assert_eq!(server.hits(), 1);
}

#[tokio::test]
async fn a_closed_port_is_unreachable() {
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let base = url::Url::parse(&format!("http://{addr}")).unwrap();
    let up = HttpUpstream::new(settings(base)).unwrap();
    let err = up
        .call(V2Call::get(store_path()), &rid("req-1"))
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamFailure::Unreachable(_)), "{err:?}");
    assert_eq!(err.kind(), "unreachable");
}

#[tokio::test]
async fn a_silent_server_times_out_within_the_attempt_timeout() {
    let server = serve(|_| std::future::pending::<Response<Body>>()).await;
    let up = HttpUpstream::new(settings(server.url())).unwrap();
    let timeout = Duration::from_millis(200);
    let mut call = V2Call::get(store_path()).with_attempt_timeout(timeout);
    call.retry = RetryPolicy::Never;
    let started = Instant::now();
    let err = up.call(call, &rid("req-1")).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        matches!(err, UpstreamFailure::Timeout(t) if t == timeout),
        "{err:?}"
    );
    assert!(elapsed >= timeout, "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    assert_eq!(server.hits(), 1);
}

/// A V2 that is slow past the attempt deadline is not asked again: the V1
/// client waits one attempt, not three, and V2 gets one request.
#[tokio::test]
async fn a_read_that_timed_out_is_not_retried() {
    let server = serve(|n| async move {
        if n == 0 {
            std::future::pending::<()>().await;
        }
        reply(StatusCode::OK, OK_BODY)
    })
    .await;
    let mut s = settings(server.url());
    s.attempt_timeout = Duration::from_millis(200);
    let up = HttpUpstream::new(s).unwrap();
    let started = Instant::now();
    let err = up
        .call(V2Call::get(store_path()), &rid("req-1"))
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamFailure::Timeout(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(server.hits(), 1);
}

/// No retry starts that could not finish inside the retry window.
#[tokio::test]
async fn no_retry_starts_that_would_outlive_the_window() {
    let server = serve(|_| async { reply(StatusCode::SERVICE_UNAVAILABLE, OK_BODY) }).await;
    let mut s = settings(server.url());
    s.attempt_timeout = Duration::from_secs(5);
    s.retry.retry_window = Duration::from_secs(4);
    let up = HttpUpstream::new(s).unwrap();
    let reply = up
        .call(V2Call::get(store_path()), &rid("req-1"))
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.attempts, 1);
}

#[tokio::test]
async fn a_body_over_the_cap_is_too_large() {
    let server =
        serve(|_| async { Response::new(Full::new(Bytes::from(vec![b'x'; 4096])).boxed()) }).await;
    let mut s = settings(server.url());
    s.max_response_bytes = 1024;
    let up = HttpUpstream::new(s).unwrap();
    let err = up
        .call(V2Call::get(store_path()), &rid("req-1"))
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamFailure::TooLarge(1024)), "{err:?}");
    // Too large is not transient: no retry.
    assert_eq!(server.hits(), 1);
}

#[tokio::test]
async fn a_chunked_body_over_the_cap_is_too_large() {
    // No content-length: the cap must hold while reading.
    let server = serve(|_| async {
        let chunks = (0..8).map(|_| Ok::<_, Infallible>(Frame::data(Bytes::from(vec![b'x'; 512]))));
        Response::new(BodyExt::boxed(StreamBody::new(futures_util::stream::iter(
            chunks,
        ))))
    })
    .await;
    let mut s = settings(server.url());
    s.max_response_bytes = 1024;
    let up = HttpUpstream::new(s).unwrap();
    let err = up
        .call(V2Call::get(store_path()), &rid("req-1"))
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamFailure::TooLarge(1024)), "{err:?}");
}

#[tokio::test]
async fn a_body_cut_short_is_broken() {
    // A raw server that promises 100 bytes, sends 10 and hangs up.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        if let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf).await;
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")
                .await;
            let _ = stream.shutdown().await;
        }
    });
    let base = url::Url::parse(&format!("http://{addr}")).unwrap();
    let up = HttpUpstream::new(settings(base)).unwrap();
    let call = V2Call::post(V2Path::new(&[Part::Lit("worker-runs")]), None);
    let err = up.call(call, &rid("req-1")).await.unwrap_err();
    assert!(matches!(err, UpstreamFailure::Broken(_)), "{err:?}");
}

#[tokio::test]
async fn bearer_auth_request_id_and_fixed_headers_arrive() {
    let mut server = serve(|_| async { reply(StatusCode::OK, OK_BODY) }).await;
    let up = HttpUpstream::new(settings(server.url())).unwrap();
    let key = ApiKey::new("sk-test-123").unwrap();
    up.call(
        V2Call::get(store_path()).with_key(Some(key)),
        &rid("01JREQUESTID"),
    )
    .await
    .unwrap();
    let seen = server.seen.recv().await.unwrap();
    assert_eq!(seen.method, Method::GET);
    assert_eq!(seen.uri, "/api/v2/store?keyword=maps%20%26%20more");
    assert_eq!(seen.headers["authorization"], "Bearer sk-test-123");
    assert!(seen.headers.get("api-key").is_none());
    assert_eq!(seen.headers["x-request-id"], "01JREQUESTID");
    assert_eq!(seen.headers["accept"], "application/json");
    assert!(seen.headers["user-agent"]
        .to_str()
        .unwrap()
        .starts_with("v1compat/"));
    assert!(seen.headers.get("content-type").is_none());
    assert!(!seen.uri.contains("sk-test"));
}

#[tokio::test]
async fn api_key_header_style_arrives_as_configured() {
    let mut server = serve(|_| async { reply(StatusCode::OK, OK_BODY) }).await;
    let mut s = settings(server.url());
    s.auth_style = AuthStyle::ApiKeyHeader;
    let up = HttpUpstream::new(s).unwrap();
    let key = ApiKey::new("sk-test-456").unwrap();
    up.call(V2Call::get(store_path()).with_key(Some(key)), &rid("req-2"))
        .await
        .unwrap();
    let seen = server.seen.recv().await.unwrap();
    assert_eq!(seen.headers["api-key"], "sk-test-456");
    assert!(seen.headers.get("authorization").is_none());
    assert_eq!(seen.headers["x-request-id"], "req-2");
}

#[tokio::test]
async fn no_key_means_no_auth_header() {
    let mut server = serve(|_| async { reply(StatusCode::OK, OK_BODY) }).await;
    let up = HttpUpstream::new(settings(server.url())).unwrap();
    up.call(V2Call::get(store_path()), &rid("req-3"))
        .await
        .unwrap();
    let seen = server.seen.recv().await.unwrap();
    assert!(seen.headers.get("authorization").is_none());
    assert!(seen.headers.get("api-key").is_none());
}

#[tokio::test]
async fn a_base_path_prefix_is_kept() {
    let mut server = serve(|_| async { reply(StatusCode::OK, OK_BODY) }).await;
    for base in [
        format!("http://{}/v2-gateway/coreclaw", server.addr),
        format!("http://{}/v2-gateway/coreclaw/", server.addr),
    ] {
        let up = HttpUpstream::new(settings(url::Url::parse(&base).unwrap())).unwrap();
        up.call(V2Call::get(run_log_path()), &rid("req-1"))
            .await
            .unwrap();
        let seen = server.seen.recv().await.unwrap();
        assert_eq!(
            seen.uri,
            "/v2-gateway/coreclaw/api/v2/worker-runs/01KS2A1M515HG7PZX9STTB0KPH/log"
        );
    }
}

#[tokio::test]
async fn connections_are_reused_across_calls() {
    let server = serve(|_| async { reply(StatusCode::OK, OK_BODY) }).await;
    let up = HttpUpstream::new(settings(server.url())).unwrap();
    for _ in 0..5 {
        up.call(V2Call::get(store_path()), &rid("req"))
            .await
            .unwrap();
    }
    assert_eq!(server.hits(), 5);
    assert_eq!(server.connections.load(Ordering::SeqCst), 1);
}

/// A burst of more calls at once than the pool once kept (64) leaves every
/// connection it opened idle for the next burst: the default keeps 1,024, so
/// a second burst as large opens none (with 64 kept, it opened 36 more, and
/// at 256 client connections a quarter of all requests paid a handshake).
#[tokio::test]
async fn a_burst_of_calls_keeps_its_connections_for_the_next() {
    const BURST: usize = 100;
    // Every answer waits until the whole burst has arrived, so each call of
    // a burst holds its own connection at once.
    let barrier = Arc::new(tokio::sync::Barrier::new(BURST));
    let server = serve(move |_| {
        let barrier = barrier.clone();
        async move {
            barrier.wait().await;
            reply(StatusCode::OK, OK_BODY)
        }
    })
    .await;
    let up = HttpUpstream::new(settings(server.url())).unwrap();
    for burst in 1..=2 {
        let calls = (0..BURST).map(|_| up.call(V2Call::get(store_path()), &rid("req")));
        for reply in futures_util::future::join_all(calls).await {
            assert_eq!(reply.unwrap().status, StatusCode::OK);
        }
        assert_eq!(server.hits(), BURST * burst);
        assert_eq!(
            server.connections.load(Ordering::SeqCst),
            BURST,
            "burst {burst}"
        );
    }
}

/// No call comes after the first: only the pool's own sweep can close the
/// connection, and the server sees it end.
#[tokio::test]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let mut server = serve(|_| async { reply(StatusCode::OK, OK_BODY) }).await;
    let mut s = settings(server.url());
    s.pool_idle_timeout = Duration::from_millis(100);
    let up = HttpUpstream::new(s).unwrap();
    up.call(V2Call::get(store_path()), &rid("req"))
        .await
        .unwrap();
    // The bound only keeps a broken pool from hanging the suite.
    tokio::time::timeout(Duration::from_secs(30), server.closed.recv())
        .await
        .expect("the idle connection was never closed")
        .unwrap();
    // The upstream itself lives on and connects again.
    up.call(V2Call::get(store_path()), &rid("req"))
        .await
        .unwrap();
    assert_eq!(server.connections.load(Ordering::SeqCst), 2);
    assert_eq!(server.hits(), 2);
}

/// A V2 (or a load balancer before it) that closes each kept-alive
/// connection right after its answer: every call still succeeds at its
/// first attempt, POSTs included, and each request arrives exactly once.
#[tokio::test]
async fn calls_succeed_when_the_server_closes_connections_after_each_answer() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, mut requests) = mpsc::unbounded_channel::<String>();
    let connections = Arc::new(AtomicUsize::new(0));
    let accepted = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            accepted.fetch_add(1, Ordering::SeqCst);
            let tx = tx.clone();
            tokio::spawn(async move {
                let Some(line) = read_request(&mut stream).await else {
                    return;
                };
                let _ = tx.send(line);
                // A keep-alive answer (no `connection: close`), then the
                // connection is closed all the same.
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{OK_BODY}",
                    OK_BODY.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    let base = url::Url::parse(&format!("http://{addr}")).unwrap();
    let up = HttpUpstream::new(settings(base)).unwrap();
    for _ in 0..5 {
        let reply = up
            .call(V2Call::get(store_path()), &rid("req"))
            .await
            .unwrap();
        assert_eq!((reply.status, reply.attempts), (StatusCode::OK, 1));
        let post = V2Call::post(
            V2Path::new(&[Part::Lit("worker-runs")]),
            Some(serde_json::json!({"workerId": "coreclaw~maps"})),
        );
        let reply = up.call(post, &rid("req")).await.unwrap();
        assert_eq!((reply.status, reply.attempts), (StatusCode::OK, 1));
    }
    let mut lines = Vec::new();
    while let Ok(line) = requests.try_recv() {
        lines.push(line);
    }
    assert_eq!(lines.len(), 10, "{lines:?}");
    let posts = lines.iter().filter(|l| l.starts_with("POST ")).count();
    assert_eq!(posts, 5, "{lines:?}");
    // HTTP/1.1 in origin-form, the requests given back unsent and sent on
    // a new connection too.
    assert!(
        lines.iter().all(|l| l
            .split(' ')
            .nth(1)
            .is_some_and(|target| target.starts_with("/api/v2/"))),
        "{lines:?}"
    );
    assert_eq!(connections.load(Ordering::SeqCst), 10);
}

/// Reads one HTTP/1.1 request (head and `content-length` body) and returns
/// its request line; `None` if the connection ends first.
async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let length = head
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + length {
                let n = stream.read(&mut chunk).await.ok().filter(|n| *n > 0)?;
                buf.extend_from_slice(&chunk[..n]);
            }
            return head.lines().next().map(str::to_owned);
        }
        let n = stream.read(&mut chunk).await.ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test]
async fn an_https_base_url_builds() {
    let base = url::Url::parse("https://v2.example.invalid/prefix").unwrap();
    assert!(HttpUpstream::new(UpstreamSettings::new(base)).is_ok());
}

#[test]
fn upstream_metrics_have_bounded_labels() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A current-thread runtime keeps every emit on this thread, where the
    // local recorder is installed.
    metrics::with_local_recorder(&recorder, || {
        rt.block_on(async {
            let server = serve(|n| async move {
                if n == 0 {
                    reply(StatusCode::SERVICE_UNAVAILABLE, "{}")
                } else {
                    reply(StatusCode::OK, OK_BODY)
                }
            })
            .await;
            let up = HttpUpstream::new(settings(server.url())).unwrap();
            up.call(V2Call::get(run_log_path()), &rid("req-1"))
                .await
                .unwrap();
        })
    });
    let text = handle.render();
    let route = r#"route="/api/v2/worker-runs/{id}/log""#;
    let has = |needle: &str| {
        text.lines()
            .any(|l| l.contains(needle) && l.contains(route))
    };
    assert!(has("v1compat_upstream_requests_total{"), "{text}");
    assert!(text.contains(r#"status_class="5xx""#), "{text}");
    assert!(text.contains(r#"status_class="2xx""#), "{text}");
    assert!(has("v1compat_upstream_retries_total{"), "{text}");
    assert!(text.contains(r#"reason="5xx""#), "{text}");
    assert!(has("v1compat_upstream_duration_seconds"), "{text}");
    assert!(!text.contains("01KS2A1M515HG7PZX9STTB0KPH"), "{text}");
}

/// An HTTPS server (HTTP/1.1 and HTTP/2 by ALPN) with a fresh self-signed
/// certificate for `localhost`; returns its address, the certificate PEM and
/// a channel of the HTTP versions requests arrived with.
/// A TLS server offering h2: its address, its certificate, the version of
/// each request it receives, and how many TLS connections it accepted.
async fn serve_tls() -> (
    SocketAddr,
    String,
    mpsc::UnboundedReceiver<http::Version>,
    Arc<AtomicUsize>,
) {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert_pem = certified.cert.pem();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, versions) = mpsc::unbounded_channel();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, tx, counted) = (acceptor.clone(), tx.clone(), counted.clone());
            tokio::spawn(async move {
                // A client that refuses the certificate ends the handshake.
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                let service = service_fn(move |req: hyper::Request<Incoming>| {
                    let _ = tx.send(req.version());
                    async { Ok::<_, Infallible>(reply(StatusCode::OK, OK_BODY)) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(TokioIo::new(tls), service)
                .await;
            });
        }
    });
    (addr, cert_pem, versions, accepted)
}

#[tokio::test]
async fn https_with_an_extra_root_negotiates_http2() {
    let (addr, cert_pem, mut versions, _) = serve_tls().await;
    let base = url::Url::parse(&format!("https://localhost:{}/", addr.port())).unwrap();
    let mut s = settings(base);
    s.extra_root_pem = Some(cert_pem.into_bytes());
    let up = HttpUpstream::new(s).unwrap();
    let reply = up
        .call(V2Call::get(store_path()), &rid("req-tls"))
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, OK_BODY.as_bytes());
    assert_eq!(versions.recv().await.unwrap(), http::Version::HTTP_2);
}

/// An HTTP/2 connection is shared: once one is open, calls one after the
/// other and calls at the same time all go over it.
#[tokio::test]
async fn calls_share_one_http2_connection() {
    let (addr, cert_pem, mut versions, accepted) = serve_tls().await;
    let base = url::Url::parse(&format!("https://localhost:{}/", addr.port())).unwrap();
    let mut s = settings(base);
    s.extra_root_pem = Some(cert_pem.into_bytes());
    let up = HttpUpstream::new(s).unwrap();
    for i in 0..3 {
        let reply = up
            .call(V2Call::get(store_path()), &rid(&format!("seq-{i}")))
            .await;
        assert_eq!(reply.unwrap().status, StatusCode::OK);
    }
    let together = (0..8).map(|i| {
        let up = up.clone();
        async move {
            up.call(V2Call::get(store_path()), &rid(&format!("par-{i}")))
                .await
        }
    });
    for reply in futures_util::future::join_all(together).await {
        assert_eq!(reply.unwrap().status, StatusCode::OK);
    }
    for _ in 0..11 {
        assert_eq!(versions.recv().await.unwrap(), http::Version::HTTP_2);
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn https_with_an_untrusted_certificate_is_unreachable() {
    let (addr, _, mut versions, _) = serve_tls().await;
    let base = url::Url::parse(&format!("https://localhost:{}/", addr.port())).unwrap();
    let up = HttpUpstream::new(settings(base)).unwrap();
    let err = up
        .call(V2Call::get(store_path()), &rid("req-tls"))
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamFailure::Unreachable(_)), "{err:?}");
    assert!(versions.try_recv().is_err(), "a request got through");
}
