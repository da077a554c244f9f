//! The memory budget under hostile clients (`conn::budget`): HTTP/2
//! clients that give no flow-control window and hold their answers, and
//! HTTP/1 clients that upload bodies they never finish, at once. The bytes
//! held stay within the budget and each connection within its streams,
//! the rest are refused 429 / 4290 before anything of them is read, and a
//! well-behaved client's requests keep succeeding meanwhile. And V2
//! answers, counted in the same budget by the V2 client
//! (`common::memory`): a read whose answer does not fit is refused 429 /
//! 4290, whether V2 declared its length or not, and everything taken is
//! given back.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{local_metrics, metric, send, MockV2, Reply, TestGateway};

const BUDGET: usize = 8 << 20;
const STREAMS: usize = 4;
const BOUND: Duration = Duration::from_secs(20);

/// `count` requests for the regions on one HTTP/2 connection whose client
/// gives every stream a window of 0 and never reads: the statuses, with
/// the connection kept open (its answers held) until the sender is dropped.
async fn zero_window_client(
    addr: SocketAddr,
    count: usize,
) -> (
    Vec<u16>,
    Vec<http::Response<hyper::body::Incoming>>,
    hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
) {
    let io = TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(0)
        .handshake::<_, Empty<Bytes>>(io)
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut waiting = Vec::new();
    for _ in 0..count {
        let mut sender = sender.clone();
        let req = http::Request::get(format!("http://{addr}/api/proxy/region"))
            .body(Empty::new())
            .unwrap();
        waiting.push(tokio::spawn(async move {
            sender.ready().await.unwrap();
            sender.send_request(req).await.unwrap()
        }));
    }
    let mut statuses = Vec::new();
    let mut held = Vec::new();
    for w in waiting {
        let resp = tokio::time::timeout(BOUND, w).await.unwrap().unwrap();
        statuses.push(resp.status().as_u16());
        held.push(resp);
    }
    statuses.sort_unstable();
    (statuses, held, sender)
}

/// An HTTP/1 upload of `declared` bytes of which only a part is sent: the
/// socket, and `Some(status)` if the gateway answered before it took the
/// body's bytes from the budget (`held` over `held_before`), else `None`.
async fn slow_upload(
    addr: SocketAddr,
    declared: usize,
    held: impl Fn() -> f64,
) -> (TcpStream, Option<u16>) {
    let before = held();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /api/v1/run/detail HTTP/1.1\r\nhost: t\r\napi-key: some-key\r\ncontent-type: application/json\r\ncontent-length: {declared}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&vec![b' '; 64 << 10]).await.unwrap();
    let mut buf = [0u8; 256];
    let outcome = tokio::time::timeout(BOUND, async {
        loop {
            tokio::select! {
                read = s.read(&mut buf) => {
                    let n = read.unwrap();
                    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                    return text
                        .strip_prefix("HTTP/1.1 ")
                        .and_then(|t| t.get(..3))
                        .and_then(|c| c.parse::<u16>().ok());
                }
                () = tokio::task::yield_now() => {
                    if held() >= before + declared as f64 {
                        return None;
                    }
                }
            }
        }
    })
    .await
    .expect("refused, or taken into the budget");
    (s, outcome)
}

#[tokio::test]
async fn zero_window_and_slow_upload_clients_stay_within_the_budget() {
    let (m, _local) = local_metrics();
    // About 100 KB of V1 answer a request.
    let regions: Vec<String> = (0..1500).map(|i| format!("region-{i:058}")).collect();
    let v2 = MockV2::start(move |_| Reply::ok(json!(regions.clone()))).await;
    let config = format!(
        "[upstream]\nbase_url = \"{}\"\n[connections]\nmemory_budget_bytes = {BUDGET}\nmax_held_streams = {STREAMS}\nwrite_timeout_ms = 60000\nbody_read_timeout_ms = 60000\n",
        v2.url()
    );
    let gw = TestGateway::over_http(&config).await;
    let held = || metric(&m, "v1compat_memory_held_bytes", &[]);
    let refusals = |reason| metric(&m, "v1compat_memory_refusals_total", &[("reason", reason)]);

    // Three zero-window HTTP/2 clients, ten streams each: four answered
    // per connection (held, never taken), the rest refused at once.
    let mut attackers = Vec::new();
    for _ in 0..3 {
        let (statuses, answers, sender) = zero_window_client(gw.addr, 10).await;
        assert_eq!(statuses, [200, 200, 200, 200, 429, 429, 429, 429, 429, 429]);
        attackers.push((answers, sender));
    }
    assert_eq!(refusals("connection"), 18.0);
    let answers_held = held();
    assert!(
        answers_held > 1_000_000.0 && answers_held < 1_500_000.0,
        "twelve answers of about 100 KB held: {answers_held}"
    );

    // Nine uploads of 1 MB that never finish: six fit the bodies' share of
    // the budget (three quarters), three are refused before being read.
    let mut uploads = Vec::new();
    let mut refused = 0;
    for _ in 0..9 {
        let (s, status) = slow_upload(gw.addr, 1_000_000, held).await;
        if let Some(status) = status {
            assert_eq!(status, 429);
            refused += 1;
        }
        uploads.push(s);
    }
    assert_eq!(refused, 3);
    assert_eq!(refusals("body"), 3.0);
    let now = held();
    assert!(
        now <= BUDGET as f64,
        "{now} held over the budget of {BUDGET}"
    );
    assert!(now > 6_000_000.0, "six bodies and twelve answers: {now}");

    // A well-behaved client is served meanwhile, over both protocols.
    for _ in 0..5 {
        let (status, _, body) = send(gw.addr, "GET", "/api/proxy/region", &[], None).await;
        assert_eq!(status, 200);
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["data"].as_array().map(Vec::len), Some(1500));
    }
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<Empty<Bytes>>();
    let resp = client
        .get(
            format!("http://{}/api/proxy/region", gw.addr)
                .parse()
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(body.len() > 90_000);
    assert!(held() <= BUDGET as f64);

    // The attackers gone, everything they held is given back.
    drop((attackers, uploads));
    tokio::time::timeout(BOUND, async {
        while held() > 0.0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the budget emptied once the clients left");
}

/// How [`v2_stub`] answers the proxy regions.
const DECLARED: u8 = 0;
const CHUNKED: u8 = 1;
const SMALL: u8 = 2;

/// A V2 envelope around `rows` region names of 60 bytes each.
fn regions(rows: usize) -> Bytes {
    let data: Vec<String> = (0..rows).map(|i| format!("region-{i:053}")).collect();
    Bytes::from(
        serde_json::to_vec(&json!({"code": 0, "message": "success", "data": data})).unwrap(),
    )
}

/// A V2 service on 127.0.0.1:0: the proxy regions as `mode` says (2 MB
/// with its length declared, 2 MB in 64 KiB chunks with none, or a few
/// bytes), any worker's input schema, and a started run of 2 MB to any
/// POST.
async fn v2_stub(mode: Arc<AtomicU8>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let big = regions(33_000);
    let run = Bytes::from(
        serde_json::to_vec(&json!({"code": 0, "message": "success", "data": {
            "run_slug": "R1", "padding": "x".repeat(2_000_000),
        }}))
        .unwrap(),
    );
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (mode, big, run) = (mode.clone(), big.clone(), run.clone());
            let svc = hyper::service::service_fn(
                move |req: http::Request<hyper::body::Incoming>| {
                    let body: BoxBody<Bytes, Infallible> = if req.method() == http::Method::POST {
                        Full::new(run.clone()).boxed()
                    } else if req.uri().path().ends_with("/input-schema") {
                        // The worker a run is started for, looked up first.
                        Full::new(Bytes::from_static(
                        br#"{"code":0,"message":"success","data":{"input_schema":{"properties":[]}}}"#,
                    ))
                    .boxed()
                    } else {
                        match mode.load(Ordering::SeqCst) {
                            DECLARED => Full::new(big.clone()).boxed(),
                            CHUNKED => {
                                let frames: Vec<Result<Frame<Bytes>, Infallible>> = big
                                    .chunks(64 << 10)
                                    .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
                                    .collect();
                                StreamBody::new(futures_util::stream::iter(frames)).boxed()
                            }
                            _ => Full::new(regions(3)).boxed(),
                        }
                    };
                    let answer = http::Response::builder()
                        .header("content-type", "application/json")
                        .body(body)
                        .unwrap();
                    async move { Ok::<_, Infallible>(answer) }
                },
            );
            tokio::spawn(async move {
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn v2_answers_count_in_the_budget_and_a_read_that_does_not_fit_is_refused() {
    let (m, _local) = local_metrics();
    let mode = Arc::new(AtomicU8::new(DECLARED));
    let v2 = v2_stub(mode.clone()).await;
    // The smallest budget there is, 1 MiB, under V2 answers of 2 MB.
    let config = format!(
        "[upstream]\nbase_url = \"http://{v2}\"\nservice_key = \"k-service\"\n[connections]\nmemory_budget_bytes = 1048576\n"
    );
    let gw = TestGateway::over_http(&config).await;
    let held = || metric(&m, "v1compat_memory_held_bytes", &[]);
    let refused = || {
        metric(
            &m,
            "v1compat_memory_refusals_total",
            &[("reason", "v2_answer")],
        )
    };
    let emptied = || async {
        tokio::time::timeout(BOUND, async {
            while held() > 0.0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the budget emptied once the answer was given")
    };

    // Declared and not: refused as the overload it is, with nothing kept.
    for (which, refusals) in [(DECLARED, 1.0), (CHUNKED, 2.0)] {
        mode.store(which, Ordering::SeqCst);
        let (status, headers, body) = send(gw.addr, "GET", "/api/proxy/region", &[], None).await;
        assert_eq!(status, 429, "mode {which}");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["code"], 4290, "mode {which}: {body}");
        assert_eq!(headers["x-v1compat-error"], "memory_budget");
        assert_eq!(headers["x-v1compat-error-origin"], "gateway");
        assert_eq!(headers["retry-after"], "1");
        assert_eq!(refused(), refusals);
        emptied().await;
    }

    // A small answer is served, and what it held is given back.
    mode.store(SMALL, Ordering::SeqCst);
    let (status, _, body) = send(gw.addr, "GET", "/api/proxy/region", &[], None).await;
    assert_eq!(status, 200);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["data"].as_array().map(Vec::len), Some(3));
    emptied().await;

    // A started run is never refused (V2 has started it): its 2 MB answer
    // is counted past the budget, and given back.
    let (status, headers, body) = send(
        gw.addr,
        "POST",
        "/api/v1/scraper/run",
        &[
            ("content-type", "application/json"),
            ("api-key", "k-client"),
        ],
        Some(Bytes::from_static(
            br#"{"scraper_slug":"owner/name","input":{"parameters":{"custom":{}}}}"#,
        )),
    )
    .await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (status.as_u16(), &body["data"]["run_slug"]),
        (200, &json!("R1")),
        "{body} {headers:?}"
    );
    assert_eq!(refused(), 2.0);
    emptied().await;
}
