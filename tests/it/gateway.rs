//! End to end over real HTTP: a V1 client → the gateway on 127.0.0.1:0 →
//! the real `HttpUpstream` → a mock V2 on 127.0.0.1:0. Each test checks the
//! V1 answer (status, envelope, diagnostic headers) and what V2 received.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};

use crate::support::{send, send_json, MockV2, Reply, Seen, TestGateway};

const KEY: &str = "e2e-client-key-5Qx9";
const SERVICE_KEY: &str = "e2e-service-key-Zr7w";
const RUN: &str = "01KS2A1M515HG7PZX9STTB0KPH";
const RUN_PATH: &str = "/api/v2/worker-runs/01KS2A1M515HG7PZX9STTB0KPH";

/// A gateway in front of `v2`; `extra` continues the `[upstream]` section
/// and may open further sections.
async fn gateway(v2: &MockV2, extra: &str) -> TestGateway {
    gateway_at(&v2.url(), extra).await
}

async fn gateway_at(base_url: &str, extra: &str) -> TestGateway {
    TestGateway::over_http(&format!("[upstream]\nbase_url = \"{base_url}\"\n{extra}")).await
}

/// A V1 answer.
struct V1 {
    status: u16,
    headers: HeaderMap,
    body: Value,
}

impl V1 {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A V1 error envelope: exactly `code`, `message` (with this prefix)
    /// and a null `data`, as JSON.
    #[track_caller]
    fn assert_error(&self, status: u16, code: i64, message_prefix: &str) {
        assert_eq!(self.status, status, "{}", self.body);
        assert_eq!(self.body["code"], code, "{}", self.body);
        let message = self.body["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(message_prefix),
            "message {message:?} should start with {message_prefix:?}"
        );
        assert!(self.body["data"].is_null(), "{}", self.body);
        assert_eq!(
            self.body.as_object().map(|o| o.len()),
            Some(3),
            "{}",
            self.body
        );
        assert_eq!(self.header("content-type"), Some("application/json"));
    }

    /// An upstream failure: 500 / 5000 with the origin and cause headers.
    #[track_caller]
    fn assert_upstream_failure(&self, cause: &str) {
        self.assert_error(500, 5000, "Internal server error");
        assert_eq!(self.header("x-v1compat-error-origin"), Some("upstream"));
        assert_eq!(self.header("x-v1compat-error"), Some(cause));
    }

    #[track_caller]
    fn assert_ok(&self) -> &Value {
        assert_eq!(self.status, 200, "{}", self.body);
        assert_eq!(self.body["code"], 0, "{}", self.body);
        assert_eq!(self.body["message"], "success");
        &self.body["data"]
    }
}

/// Sends a raw V1 request.
async fn raw(
    gw: &TestGateway,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> V1 {
    let (status, headers, out) = send(
        gw.addr,
        method,
        path,
        headers,
        body.map(Bytes::copy_from_slice),
    )
    .await;
    let body = serde_json::from_slice(&out)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&out).into_owned()));
    V1 {
        status: status.as_u16(),
        headers,
        body,
    }
}

/// POSTs JSON with the client key in `api-key`.
async fn post(gw: &TestGateway, path: &str, body: Value) -> V1 {
    let bytes = serde_json::to_vec(&body).unwrap();
    raw(
        gw,
        "POST",
        path,
        &[("content-type", "application/json"), ("api-key", KEY)],
        Some(&bytes),
    )
    .await
}

/// A V2 run record as V2 sends it.
fn v2_run(slug: &str) -> Value {
    json!({
        "slug": slug, "status": "succeeded", "err_msg": "", "scraper_title": "News",
        "scraper_slug": "coreclaw~news", "results": 3, "usage": "0.5", "started_at": 1786000780,
        "finished_at": 1786000787, "duration": 7, "origin": "api_v2", "traffic": 0, "version": "v1"
    })
}

fn run_detail_ok(_: &Seen) -> Reply {
    Reply::ok(v2_run(RUN))
}

// 1. Bad input never reaches V2 and never panics.

/// V1 read a JSON body whatever its Content-Type (curl's `-d` sends
/// `application/x-www-form-urlencoded`), and so does the native V1 surface.
#[tokio::test]
async fn json_bodies_are_read_whatever_their_content_type() {
    let v2 = MockV2::start(run_detail_ok).await;
    let gw = gateway(&v2, "").await;
    for content_type in [
        Some("application/x-www-form-urlencoded"),
        Some("text/plain"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        let mut headers = vec![("api-key", KEY)];
        headers.extend(content_type.map(|ct| ("content-type", ct)));
        let body = format!(r#"{{"run_slug":"{RUN}"}}"#);
        let r = raw(
            &gw,
            "POST",
            "/api/v1/run/detail",
            &headers,
            Some(body.as_bytes()),
        )
        .await;
        assert_eq!(r.assert_ok()["slug"], RUN, "{content_type:?}");
    }
    assert_eq!(v2.total(), 4);
}

#[tokio::test]
async fn bad_input_is_refused_before_v2() {
    let v2 = MockV2::untouchable().await;
    let gw = gateway(&v2, "[limits]\nmax_body_bytes = 1024\n").await;
    let json_ct = ("content-type", "application/json");
    let key = ("api-key", KEY);
    let too_big = format!("{{\"run_slug\":\"{}\"}}", "x".repeat(2000));
    // (path, JSON body sent with a key, what the message says after
    // "Invalid request parameters: ")
    let cases: [(&str, &[u8], &str); 14] = [
        (
            "/api/v1/run/detail",
            b"{\"run_slug\": ",
            "body is not valid JSON",
        ),
        (
            "/api/v1/run/detail",
            br#"["R1"]"#,
            "body must be a JSON object",
        ),
        (
            "/api/v1/run/result/list",
            br#"{"run_slug":"R1","page_size":"10"}"#,
            "page_size must be an integer",
        ),
        (
            "/api/v1/scraper/run",
            br#"{"scraper_slug":"owner/name","is_async":"yes","input":{"parameters":{"custom":{}}}}"#,
            "is_async must be a boolean",
        ),
        (
            "/api/v1/run/detail",
            br#"{"run_slug":5}"#,
            "run_slug must be a string",
        ),
        ("/api/v1/run/detail", b"{}", "run_slug is required"),
        (
            "/api/v1/task/run",
            br#"{"callback_url":"https://hooks.example/cb"}"#,
            "task_slug is required",
        ),
        (
            "/api/v1/task/run",
            br#"{"task_slug":"T1"}"#,
            "callback_url is required",
        ),
        (
            "/api/v1/rerun",
            br#"{"run_slug":"R1"}"#,
            "callback_url is required",
        ),
        (
            "/api/v1/run/result/list",
            br#"{"run_slug":"R1","page_size":0}"#,
            "page_size must be between 1 and 1000",
        ),
        (
            "/api/v1/run/result/list",
            br#"{"run_slug":"R1","page_size":1001}"#,
            "page_size must be between 1 and 1000",
        ),
        (
            "/api/v1/run/list",
            br#"{"page_size":0}"#,
            "page_size must be between 1 and 1000",
        ),
        (
            "/api/v1/run/result/list",
            br#"{"run_slug":"R1","page_index":0}"#,
            "page_index must be between 1 and",
        ),
        (
            "/api/v1/run/detail",
            too_big.as_bytes(),
            "body is larger than 1024 bytes",
        ),
    ];
    let mut answers = Vec::new();
    for (path, body, says) in cases {
        let r = raw(&gw, "POST", path, &[json_ct, key], Some(body)).await;
        answers.push((r, says));
    }
    let r = post(&gw, "/api/v1/run/list", json!({"page_size": 1001})).await;
    answers.push((r, "page_size must be between 1 and 1000"));
    // A body that is not JSON is refused whatever its Content-Type.
    let r = raw(
        &gw,
        "POST",
        "/api/v1/run/detail",
        &[("content-type", "application/x-www-form-urlencoded"), key],
        Some(b"run_slug=R1"),
    )
    .await;
    answers.push((r, "body is not valid JSON"));
    for query in ["", "?search=", "?search=%20&limit=5"] {
        let r = raw(&gw, "GET", &format!("/api/store{query}"), &[], None).await;
        answers.push((r, "search is required"));
    }
    for (r, says) in answers {
        r.assert_error(400, 4000, &format!("Invalid request parameters: {says}"));
        assert_eq!(r.header("x-v1compat-error-origin"), Some("client"));
        assert_eq!(r.header("x-v1compat-error"), Some("invalid_request"));
    }

    // Identifiers that could reach another V2 path, in every field that
    // becomes a path segment: not found, as the native V1 service answered an
    // id it did not have (404 with the record's code), and never sent to V2
    // (`last` as a run id: reliability.rs).
    let long = "x".repeat(201);
    let hostile = [
        "../users/account",
        "a/b?x=1",
        "%2e%2e",
        "a\r\nb",
        "a\u{0}b",
        "..",
        "a#b",
        long.as_str(),
    ];
    for id in hostile {
        for (path, body, code) in [
            ("/api/v1/run/detail", json!({"run_slug": id}), 70001),
            ("/api/v1/scraper/abort", json!({"run_slug": id}), 70001),
            ("/api/v1/run/result/list", json!({"run_slug": id}), 70001),
            ("/api/v1/run/last/log", json!({"run_slug": id}), 70001),
            (
                "/api/v1/run/result/export",
                json!({"run_slug": id, "format": "csv"}),
                70001,
            ),
            (
                "/api/v1/rerun",
                json!({"run_slug": id, "callback_url": "https://h.example/cb"}),
                70001,
            ),
            (
                "/api/v1/task/run",
                json!({"task_slug": id, "callback_url": "https://h.example/cb"}),
                60001,
            ),
        ] {
            let r = post(&gw, path, body).await;
            let message = if code == 60001 {
                "Task does not exist"
            } else {
                "Run record does not exist"
            };
            r.assert_error(404, code, message);
        }
        // The rest of the body is still checked first, as V1 did.
        let r = post(&gw, "/api/v1/rerun", json!({"run_slug": id})).await;
        r.assert_error(400, 4000, "Invalid request parameters: callback_url");
    }
    for id in [
        "../users/account",
        "a/b/c",
        "%2e%2e",
        "a\r\nb",
        "a\u{0}b",
        "/x",
        long.as_str(),
    ] {
        let r = post(
            &gw,
            "/api/v1/scraper/run",
            json!({"scraper_slug": id, "input": {"parameters": {"custom": {}}}}),
        )
        .await;
        r.assert_error(404, 50001, "Script does not exist");
        // The same ids in a query string (worker detail) and as the run-list
        // filter, where V1 listed the runs of an unknown worker as none.
        let query: String = url::form_urlencoded::byte_serialize(id.as_bytes()).collect();
        let path = format!("/api/scraper?slug={query}");
        let r = raw(&gw, "GET", &path, &[("api-key", KEY)], None).await;
        r.assert_error(404, 50001, "Script does not exist");
        let r = post(&gw, "/api/v1/run/list", json!({"scraper_slug": id})).await;
        assert_eq!(r.assert_ok(), &json!({"count": 0, "list": []}));
    }
    assert_eq!(v2.total(), 0, "V2 was reached: {:?}", v2.seen());
}

#[tokio::test]
async fn body_limit_is_exact() {
    let v2 = MockV2::start(run_detail_ok).await;
    let gw = gateway(&v2, "[limits]\nmax_body_bytes = 1024\n").await;
    let body = |len: usize| {
        let mut b = format!("{{\"run_slug\":\"{RUN}\",\"pad\":\"");
        let pad = len - b.len() - 2;
        b.push_str(&"x".repeat(pad));
        b.push_str("\"}");
        assert_eq!(b.len(), len);
        b.into_bytes()
    };
    let headers = [("content-type", "application/json"), ("api-key", KEY)];
    let r = raw(
        &gw,
        "POST",
        "/api/v1/run/detail",
        &headers,
        Some(&body(1024)),
    )
    .await;
    assert_eq!(r.assert_ok()["slug"], RUN);
    let r = raw(
        &gw,
        "POST",
        "/api/v1/run/detail",
        &headers,
        Some(&body(1025)),
    )
    .await;
    r.assert_error(
        400,
        4000,
        "Invalid request parameters: body is larger than 1024 bytes",
    );
    assert_eq!(v2.total(), 1);
}

#[tokio::test]
async fn http2_clients_get_the_same_answers() {
    let v2 = MockV2::start(run_detail_ok).await;
    let gw = gateway(&v2, "").await;
    let client: hyper_util::client::legacy::Client<_, http_body_util::Full<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http2_only(true)
            .build_http();
    let body = serde_json::to_vec(&json!({"run_slug": RUN})).unwrap();
    let req = http::Request::post(format!("http://{}/api/v1/run/detail", gw.addr))
        .header("content-type", "application/json")
        .header("api-key", KEY)
        .header("x-request-id", "h2-1")
        .body(http_body_util::Full::new(Bytes::from(body)))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-request-id"], "h2-1");
    let out = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["data"]["slug"], RUN);
    assert_eq!(v2.count("GET", RUN_PATH), 1);
}

// 2. Upstream failures become 500 / 5000 with their cause.

#[tokio::test]
async fn upstream_unreachable() {
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let gw = gateway_at(&format!("http://{dead}"), "[retry]\nmax_attempts = 1\n").await;
    let r = post(&gw, "/api/v1/run/detail", json!({"run_slug": RUN})).await;
    r.assert_upstream_failure("unreachable");
}

#[tokio::test]
async fn upstream_hanging_past_the_attempt_timeout() {
    let v2 = MockV2::start(|_| Reply::Hang).await;
    let gw = gateway(&v2, "attempt_timeout_ms = 200\n[retry]\nmax_attempts = 1\n").await;
    let started = std::time::Instant::now();
    let r = post(&gw, "/api/v1/run/detail", json!({"run_slug": RUN})).await;
    r.assert_upstream_failure("timeout");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(v2.count("GET", RUN_PATH), 1);
}

/// The request's own deadline, when it comes before its V2 attempt's (the
/// attempt starts after the request, with the same time allowed), answers
/// the V1 client as the gateway's failure, not V2's: one timer keeps both.
#[tokio::test]
async fn a_request_past_its_own_deadline_is_the_gateways_failure() {
    let v2 = MockV2::start(|_| Reply::Hang).await;
    let gw = gateway(
        &v2,
        "attempt_timeout_ms = 200\nrequest_timeout_ms = 200\n[retry]\nmax_attempts = 1\n",
    )
    .await;
    let started = std::time::Instant::now();
    let r = post(&gw, "/api/v1/run/detail", json!({"run_slug": RUN})).await;
    r.assert_error(500, 5000, "Internal server error");
    assert_eq!(r.header("x-v1compat-error-origin"), Some("gateway"));
    assert_eq!(r.header("x-v1compat-error"), Some("deadline"));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(v2.count("GET", RUN_PATH), 1);
}

#[tokio::test]
async fn upstream_answers_that_cannot_be_read() {
    for (reply, cause) in [
        (
            (|_: &Seen| Reply::Raw(200, "<html>gateway error</html>")) as fn(&Seen) -> Reply,
            "garbled",
        ),
        (|_: &Seen| Reply::Raw(502, "Bad Gateway"), "garbled"),
        (|_: &Seen| Reply::Truncated, "broken"),
        (
            |_: &Seen| Reply::ok(json!({"slug": "x".repeat(4096)})),
            "too_large",
        ),
        (|_: &Seen| Reply::Drop, "broken"),
        (
            |_: &Seen| Reply::error(500, 10000, "internal error"),
            "refused",
        ),
    ] {
        let v2 = MockV2::start(reply).await;
        let gw = gateway(
            &v2,
            "max_response_bytes = 1024\n[retry]\nmax_attempts = 1\n",
        )
        .await;
        let r = post(&gw, "/api/v1/run/detail", json!({"run_slug": RUN})).await;
        r.assert_upstream_failure(cause);
        assert_eq!(v2.count("GET", RUN_PATH), 1, "{cause}");
    }
}

#[tokio::test]
async fn upstream_500_is_retried_for_reads_until_it_succeeds() {
    let hits = Arc::new(AtomicUsize::new(0));
    let n = hits.clone();
    let v2 = MockV2::start(move |_| {
        if n.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::error(503, 10000, "try again")
        } else {
            Reply::ok(v2_run(RUN))
        }
    })
    .await;
    let gw = gateway(
        &v2,
        "[retry]\nmax_attempts = 3\nbase_backoff_ms = 1\nmax_backoff_ms = 5\n",
    )
    .await;
    let r = post(&gw, "/api/v1/run/detail", json!({"run_slug": RUN})).await;
    assert_eq!(r.assert_ok()["slug"], RUN);
    assert_eq!(v2.count("GET", RUN_PATH), 2);

    // Without retries the same 503 is the V1 client's 500.
    let v2 = MockV2::start(|_| Reply::error(503, 10000, "try again")).await;
    let gw = gateway(&v2, "[retry]\nmax_attempts = 1\n").await;
    let r = post(&gw, "/api/v1/run/detail", json!({"run_slug": RUN})).await;
    r.assert_upstream_failure("refused");
    assert_eq!(v2.count("GET", RUN_PATH), 1);
}

/// A V2 slower than the attempt deadline costs the V1 client one attempt
/// deadline and V2 one request, however many attempts retries allow.
#[tokio::test]
async fn a_hanging_v2_costs_one_attempt() {
    let v2 = MockV2::start(|_| Reply::Hang).await;
    let gw = gateway(
        &v2,
        "attempt_timeout_ms = 150\nrequest_timeout_ms = 400\n[retry]\nmax_attempts = 10\nbase_backoff_ms = 1\nmax_backoff_ms = 5\n",
    )
    .await;
    let started = std::time::Instant::now();
    let r = post(&gw, "/api/v1/run/detail", json!({"run_slug": RUN})).await;
    r.assert_error(500, 5000, "Internal server error");
    assert_eq!(r.header("x-v1compat-error"), Some("timeout"));
    assert!(started.elapsed() < Duration::from_millis(390));
    assert_eq!(v2.count("GET", RUN_PATH), 1);
}

#[tokio::test]
async fn requests_over_the_in_flight_limit_get_429() {
    let release = Arc::new(Notify::new());
    let (arrived_tx, mut arrived) = mpsc::unbounded_channel();
    let hits = AtomicUsize::new(0);
    let held = release.clone();
    let v2 = MockV2::start(move |req| {
        if hits.fetch_add(1, Ordering::SeqCst) == 0 {
            let _ = arrived_tx.send(());
            Reply::After(held.clone(), Box::new(run_detail_ok(req)))
        } else {
            run_detail_ok(req)
        }
    })
    .await;
    let gw = gateway(&v2, "[limits]\nmax_in_flight = 1\n").await;
    let addr = gw.addr;
    let body = Bytes::from(serde_json::to_vec(&json!({"run_slug": RUN})).unwrap());
    let first = tokio::spawn({
        let body = body.clone();
        async move {
            let h = [("content-type", "application/json"), ("api-key", KEY)];
            send(addr, "POST", "/api/v1/run/detail", &h, Some(body)).await
        }
    });
    arrived.recv().await.expect("V2 received the first request");

    let r = post(&gw, "/api/v1/run/detail", json!({"run_slug": RUN})).await;
    r.assert_error(429, 4290, "Too many requests");
    assert_eq!(r.header("x-v1compat-error-origin"), Some("gateway"));
    assert_eq!(v2.total(), 1);

    release.notify_one();
    assert_eq!(first.await.unwrap().0, 200);
    let r = post(&gw, "/api/v1/run/detail", json!({"run_slug": RUN})).await;
    r.assert_ok();
    assert_eq!(v2.total(), 2);
}

// 3. A call that starts, reruns or aborts a run is never sent twice.

#[tokio::test]
async fn posts_are_never_replayed() {
    let v2 = MockV2::start(|req| {
        if req.method == "GET" {
            // The worker verification before a run.
            Reply::ok(json!({"input_schema": {"properties": []}}))
        } else {
            Reply::error(503, 10000, "unavailable")
        }
    })
    .await;
    let gw = gateway(
        &v2,
        "[retry]\nmax_attempts = 3\nbase_backoff_ms = 1\nmax_backoff_ms = 5\n",
    )
    .await;
    let cb = "https://hooks.example/cb";
    let cases = [
        (
            "/api/v1/scraper/run",
            json!({"scraper_slug": "owner/name", "input": {"parameters": {"custom": {}}}}),
            "/api/v2/workers/owner~name/runs",
            5000,
        ),
        (
            "/api/v1/task/run",
            json!({"task_slug": "T1", "callback_url": cb}),
            "/api/v2/worker-tasks/T1/runs",
            5000,
        ),
        (
            "/api/v1/rerun",
            json!({"run_slug": RUN, "callback_url": cb}),
            "/api/v2/worker-runs/01KS2A1M515HG7PZX9STTB0KPH/rerun",
            5000,
        ),
        (
            "/api/v1/scraper/abort",
            json!({"run_slug": RUN}),
            "/api/v2/worker-runs/01KS2A1M515HG7PZX9STTB0KPH/abort",
            70002,
        ),
    ];
    for (path, body, v2_path, code) in cases {
        let r = post(&gw, path, body).await;
        assert_eq!(r.status, 500, "{path}: {}", r.body);
        assert_eq!(r.body["code"], code, "{path}");
        assert!(r.body["data"].is_null());
        assert_eq!(
            v2.count("POST", v2_path),
            1,
            "{path} was sent more than once"
        );
    }
    assert_eq!(
        v2.count("GET", "/api/v2/workers/owner~name/input-schema"),
        1
    );
    assert_eq!(v2.total(), 5, "{:?}", v2.seen());
    let bodies: Vec<(String, Value)> = v2
        .seen()
        .into_iter()
        .filter(|s| s.method == "POST")
        .map(|s| (s.path.clone(), s.json()))
        .collect();
    assert!(bodies.contains(&(
        "/api/v2/worker-tasks/T1/runs".into(),
        json!({"callback_url": cb, "is_async": true})
    )));
    assert!(bodies.contains(&(
        "/api/v2/worker-runs/01KS2A1M515HG7PZX9STTB0KPH/abort".into(),
        Value::Null
    )));
}

// 4. Fan-out windows.

const TOTAL_ROWS: u64 = 2500;

/// The rows `offset`/`limit` select from `total` (1-based pages, 0 = 1).
fn page(seen: &Seen, total: u64) -> std::ops::Range<u64> {
    let limit = seen.param("limit").unwrap_or(10);
    let offset = seen.param("offset").unwrap_or(1).max(1);
    let start = (offset - 1).saturating_mul(limit).min(total);
    start..(start + limit).min(total)
}

fn result_row(i: u64) -> Value {
    json!({"__coreclaw_data_id__": format!("{i:064x}"), "title": format!("row {i}"), "n": i})
}

#[tokio::test]
async fn result_list_fans_out_and_slices_exact_windows() {
    let v2 = MockV2::start(|req| {
        let rows: Vec<Value> = page(req, TOTAL_ROWS).map(result_row).collect();
        Reply::ok(json!({
            "count": TOTAL_ROWS,
            "headers": [{"key": "title", "label": "Title"}, {"key": "n", "label": "N"}],
            "list": rows,
        }))
    })
    .await;
    let gw = gateway(&v2, "").await;
    for (index, size, expected) in [
        (3u64, 250u64, 500..750u64),
        (1, 1000, 0..1000),
        (2, 1000, 1000..2000),
        (3, 1000, 2000..2500),
        (4, 1000, 0..0),
        (2, 100, 100..200),
        (26, 100, 0..0),
    ] {
        let before = v2.total();
        let r = post(
            &gw,
            "/api/v1/run/result/list",
            json!({"run_slug": RUN, "page_index": index, "page_size": size}),
        )
        .await;
        let data = r.assert_ok();
        let want: Vec<Value> = expected.clone().map(result_row).collect();
        let got = data["list"].as_array().unwrap();
        assert_eq!(got.len(), want.len(), "page {index} of {size}");
        assert!(got == &want, "page {index} of {size}: wrong rows");
        assert_eq!(data["count"], TOTAL_ROWS);
        assert_eq!(data["page_index"], index);
        assert_eq!(data["page_size"], size);
        // A column's format is inferred from the rows of the window, or for
        // a page past the end, from the run's first row.
        assert_eq!(data["headers"][1]["format"], "number");
        let calls = &v2.seen()[before..];
        let reported = r.header("x-v1compat-upstream-calls").map(str::to_owned);
        assert_eq!(reported, Some(calls.len().to_string()));
        assert!(!calls.is_empty());
        for c in calls {
            assert_eq!(
                c.path,
                "/api/v2/worker-runs/01KS2A1M515HG7PZX9STTB0KPH/result"
            );
            assert!(c.param("limit").unwrap() <= 100, "{:?}", c.query);
            assert_eq!(c.header("authorization"), Some(&*format!("Bearer {KEY}")));
        }
        let sample_call = u64::from(want.is_empty());
        assert_eq!(
            calls.len() as u64,
            size.div_ceil(100) + sample_call,
            "page {index} of {size}: V2 calls"
        );
    }
}

#[tokio::test]
async fn run_list_fans_out_and_slices_exact_windows() {
    let v2 = MockV2::start(|req| {
        let rows: Vec<Value> = page(req, TOTAL_ROWS)
            .map(|i| v2_run(&format!("run-{i:05}")))
            .collect();
        Reply::ok(json!({"count": TOTAL_ROWS, "list": rows}))
    })
    .await;
    let gw = gateway(&v2, "").await;
    for (index, expected) in [
        (1u64, 0..1000u64),
        (2, 1000..2000),
        (3, 2000..2500),
        (4, 0..0),
    ] {
        let before = v2.total();
        let r = post(
            &gw,
            "/api/v1/run/list",
            json!({"page_index": index, "page_size": 1000, "status": 3}),
        )
        .await;
        let data = r.assert_ok();
        assert_eq!(data["count"], TOTAL_ROWS);
        let slugs: Vec<&str> = data["list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["slug"].as_str().unwrap())
            .collect();
        let want: Vec<String> = expected.map(|i| format!("run-{i:05}")).collect();
        assert!(slugs == want, "page {index}: wrong rows");
        if let Some(first) = data["list"].get(0) {
            assert_eq!(first["status"], 3);
            assert_eq!(first["origin"], "api");
            assert_eq!(first.as_object().unwrap().len(), 13);
        }
        let calls = &v2.seen()[before..];
        let reported = r.header("x-v1compat-upstream-calls").map(str::to_owned);
        assert_eq!(reported, Some(calls.len().to_string()));
        assert_eq!(calls.len(), 10);
        for c in calls {
            assert_eq!(c.path, "/api/v2/worker-runs");
            assert!(c.param("limit").unwrap() <= 100);
            assert!(c.query.contains(&("status".into(), "succeeded".into())));
        }
    }
}

#[tokio::test]
async fn synchronous_run_fetches_the_rest_of_a_large_window_from_results() {
    const ROWS: u64 = 430;
    let v2 = MockV2::start(|req| {
        if req.path == "/api/v2/workers/owner~sync/input-schema" {
            return Reply::ok(json!({"input_schema": {"properties": []}}));
        }
        let (offset, limit) = if req.method == "POST" {
            let body = req.json();
            (
                body["offset"].as_u64().unwrap(),
                body["limit"].as_u64().unwrap(),
            )
        } else {
            (req.param("offset").unwrap(), req.param("limit").unwrap())
        };
        let start = ((offset.max(1) - 1) * limit).min(ROWS);
        let results = json!({
            "count": ROWS,
            "headers": [{"key": "title", "label": "Title"}],
            "list": (start..(start + limit).min(ROWS)).map(result_row).collect::<Vec<_>>(),
        });
        match (req.method.as_str(), req.path.as_str()) {
            ("POST", _) => Reply::ok(json!({
                "run_slug": RUN, "run_status": "succeeded", "execution_start_timestamp": 1786000780,
                "execution_end_timestamp": 1786000787, "running_duration": 7, "results": results,
            })),
            _ => Reply::ok(results),
        }
    })
    .await;
    let gw = gateway(&v2, "").await;
    for (index, size, expected) in [
        (2u64, 250u64, 250..430u64),
        (1, 250, 0..250),
        (1, 10, 0..10),
    ] {
        let before = v2.total();
        let r = post(
            &gw,
            "/api/v1/scraper/run",
            json!({"scraper_slug": "owner/sync", "is_async": false, "page_index": index,
                   "page_size": size, "input": {"parameters": {"custom": {}}}}),
        )
        .await;
        let data = r.assert_ok();
        assert_eq!(data["run_status"], "completed");
        assert_eq!(data["execution_start_timestamp"], 1786000780000i64);
        let want: Vec<Value> = expected.map(result_row).collect();
        assert!(
            data["results"]["list"].as_array().unwrap() == &want,
            "page {index} of {size}"
        );
        assert_eq!(data["results"]["count"], ROWS);
        assert_eq!(data["results"]["page_index"], index);
        assert_eq!(data["results"]["page_size"], size);
        let calls = &v2.seen()[before..];
        let posts: Vec<&Seen> = calls.iter().filter(|c| c.method == "POST").collect();
        assert_eq!(posts.len(), 1);
        assert_eq!(posts[0].path, "/api/v2/workers/owner~sync/runs");
        assert_eq!(posts[0].json()["is_async"], false);
        for c in calls
            .iter()
            .filter(|c| c.method == "GET" && c.path.ends_with("/result"))
        {
            assert!(c.param("limit").unwrap() <= 100);
        }
    }
    assert_eq!(
        v2.count("GET", "/api/v2/workers/owner~sync/input-schema"),
        1
    );
}

// 5. Auth.

#[tokio::test]
async fn client_keys_are_forwarded_as_bearer() {
    let v2 = MockV2::start(|req| {
        if req.path.ends_with("/input-schema") {
            Reply::ok(json!({"input_schema": {"properties": []}}))
        } else if req.path.starts_with("/api/v2/workers/") {
            Reply::ok(json!({"version": "v1", "readme": "", "parameters": {}}))
        } else {
            Reply::ok(v2_run(RUN))
        }
    })
    .await;
    let gw = gateway(&v2, &format!("service_key = \"{SERVICE_KEY}\"\n")).await;
    let body = serde_json::to_vec(&json!({"run_slug": RUN})).unwrap();
    let json_ct = ("content-type", "application/json");
    let bearer = format!("Bearer {KEY}");

    // A run detail with one key header.
    let detail = |header: (&'static str, String)| {
        let (gw, body) = (&gw, &body);
        async move {
            let headers = [json_ct, (header.0, header.1.as_str())];
            raw(gw, "POST", "/api/v1/run/detail", &headers, Some(body)).await
        }
    };

    // Authorization: Bearer from the client (the scheme in any case, as
    // HTTP reads it), or api-key.
    for header in [
        ("authorization", bearer.clone()),
        ("authorization", format!("BEARER {KEY}")),
        ("api-key", KEY.to_owned()),
    ] {
        detail(header).await.assert_ok();
    }
    let seen = v2.seen();
    assert_eq!(seen.len(), 3);
    for s in &seen {
        assert_eq!(s.header("authorization"), Some(bearer.as_str()));
        assert_eq!(s.header("api-key"), None);
    }

    // A keyed operation without a key: 401 and no V2 call, even though a
    // service key is configured.
    let r = raw(&gw, "POST", "/api/v1/run/detail", &[json_ct], Some(&body)).await;
    let missing = "Invalid API key: send your key in the api-key header";
    r.assert_error(401, 20001, missing);
    // An empty or blank key header is no key (a form's empty key field).
    for (name, value) in [
        ("api-key", ""),
        ("api-key", "   "),
        ("authorization", "Bearer "),
        ("authorization", "bearer"),
    ] {
        let r = detail((name, value.to_owned())).await;
        r.assert_error(401, 20001, missing);
    }
    // A malformed key header.
    for (name, value) in [("authorization", "Basic x"), ("api-key", "a b")] {
        let r = detail((name, value.to_owned())).await;
        r.assert_error(401, 20001, "Invalid API key: the key header is malformed");
    }
    assert_eq!(v2.total(), 3);

    // A public operation without a client key uses the service key.
    let r = raw(&gw, "GET", "/api/scraper?slug=x", &[], None).await;
    r.assert_ok();
    let detail: Vec<Seen> = v2
        .seen()
        .into_iter()
        .filter(|s| s.path == "/api/v2/workers/x")
        .collect();
    assert_eq!(detail.len(), 1);
    assert_eq!(
        detail[0].header("authorization"),
        Some(&*format!("Bearer {SERVICE_KEY}"))
    );
    // A worker detail with these headers: the V2 worker details asked for
    // so far, and the key the last one carried.
    let worker_detail = |headers: Vec<(&'static str, &str)>| {
        let (gw, v2) = (&gw, &v2);
        let headers: Vec<(&'static str, String)> = headers
            .into_iter()
            .map(|(n, v)| (n, v.to_owned()))
            .collect();
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            raw(gw, "GET", "/api/scraper?slug=x", &headers, None)
                .await
                .assert_ok();
            let seen = v2.seen().into_iter();
            let details: Vec<Seen> = seen.filter(|s| s.path == "/api/v2/workers/x").collect();
            let key = details
                .last()
                .and_then(|s| s.header("authorization").map(str::to_owned));
            (details.len(), key)
        }
    };
    let service = Some(format!("Bearer {SERVICE_KEY}"));
    // …but the client's key when it sent one.
    let (_, key) = worker_detail(vec![("api-key", KEY)]).await;
    assert_eq!(key.as_deref(), Some(bearer.as_str()));
    // A key header a keyless operation cannot use (a proxy's Basic
    // credentials, an empty Bearer, a key with a blank) is ignored there, as
    // V1 ignored credentials on it: the service key is sent.
    for header in [
        ("authorization", "Basic dXNlcjpwdw=="),
        ("authorization", "Bearer "),
        ("api-key", "a b"),
    ] {
        let (before, _) = worker_detail(vec![]).await;
        let (after, key) = worker_detail(vec![header]).await;
        assert_eq!((after, &key), (before + 1, &service), "{header:?}");
    }
    // …and an unusable api-key does not hide a usable Bearer key beside it.
    let headers = vec![("api-key", "a b"), ("authorization", bearer.as_str())];
    let (_, key) = worker_detail(headers).await;
    assert_eq!(key.as_deref(), Some(bearer.as_str()));

    // Keys never reach the metrics.
    let (status, _, metrics) = send(gw.admin, "GET", "/metrics", &[], None).await;
    assert_eq!(status, 200);
    let metrics = String::from_utf8(metrics.to_vec()).unwrap();
    assert!(!metrics.contains(KEY), "client key in /metrics");
    assert!(!metrics.contains(SERVICE_KEY), "service key in /metrics");
    assert!(!metrics.contains("Bearer"), "a Bearer header in /metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("v1compat_requests_total{")
                && l.contains("operation=\"run_detail\"")),
        "no run_detail request counter:\n{metrics}"
    );
}

#[tokio::test]
async fn public_operation_without_any_key_says_what_to_configure() {
    let v2 = MockV2::untouchable().await;
    let gw = gateway(&v2, "").await;
    let (status, body) = send_json(gw.addr, "GET", "/api/scraper?slug=x", None, None).await;
    assert_eq!((status, &body["code"]), (401, &json!(20001)));
    assert!(body["message"].as_str().unwrap().contains("service_key"));
    assert!(body["data"].is_null());
    assert_eq!(v2.total(), 0);
}

// 6. Request ids.

/// An answer carries its own headers and none of the request's (an
/// answer's headers, a success's or an error's, are written into the
/// request's header map, cleared): no key, nothing else the client sent,
/// on a success or a refusal.
#[tokio::test]
async fn no_request_header_comes_back_in_the_answer() {
    let v2 = MockV2::start(run_detail_ok).await;
    let gw = gateway(&v2, "").await;
    let allowed = [
        "content-type",
        "content-length",
        "date",
        "x-request-id",
        "x-v2-request-id",
        "x-v1compat-upstream-calls",
        "x-v1compat-error",
        "x-v1compat-error-origin",
    ];
    let detail = serde_json::to_vec(&json!({"run_slug": RUN})).unwrap();
    for (body, key, status) in [
        (&detail[..], ("api-key", KEY), 200),
        (
            &b"{\"run_slug\": 5}"[..],
            ("authorization", "Bearer sk-other"),
            400,
        ),
    ] {
        let sent = [
            ("content-type", "application/json"),
            key,
            ("x-extra", "echo-me"),
            ("accept-language", "de"),
        ];
        let r = raw(&gw, "POST", "/api/v1/run/detail", &sent, Some(body)).await;
        assert_eq!(r.status, status, "{:?}", r.body);
        for (name, value) in &r.headers {
            assert!(allowed.contains(&name.as_str()), "{name} came back");
            for (_, secret) in [key, ("", "echo-me")] {
                assert!(
                    !value
                        .as_bytes()
                        .windows(secret.len())
                        .any(|w| w == secret.as_bytes()),
                    "{name}: {value:?}"
                );
            }
        }
    }
}

#[tokio::test]
async fn request_ids_travel_both_ways() {
    let v2 = MockV2::start(|_| {
        Reply::Json(
            200,
            json!({"code": 0, "message": "success", "request_id": "v2-req-77", "data": v2_run(RUN)}),
        )
    })
    .await;
    let gw = gateway(&v2, "").await;
    let body = serde_json::to_vec(&json!({"run_slug": RUN})).unwrap();
    let json_ct = ("content-type", "application/json");

    let r = raw(
        &gw,
        "POST",
        "/api/v1/run/detail",
        &[json_ct, ("api-key", KEY), ("x-request-id", "abc-123")],
        Some(&body),
    )
    .await;
    r.assert_ok();
    assert_eq!(r.header("x-request-id"), Some("abc-123"));
    assert_eq!(r.header("x-v2-request-id"), Some("v2-req-77"));
    assert_eq!(v2.seen()[0].header("x-request-id"), Some("abc-123"));
    // V1 clients get exactly the V1 envelope fields.
    assert_eq!(r.body.as_object().unwrap().len(), 3);

    // Without one, a generated id comes back, and it is the one V2 saw.
    let r = raw(
        &gw,
        "POST",
        "/api/v1/run/detail",
        &[json_ct, ("api-key", KEY)],
        Some(&body),
    )
    .await;
    r.assert_ok();
    let id = r.header("x-request-id").expect("a generated request id");
    assert_eq!(id.len(), 26, "{id}");
    assert_eq!(v2.seen()[1].header("x-request-id"), Some(id));

    // An id the gateway will not use (too long, or with characters that do
    // not belong in logs) is replaced, and the client is told the one used.
    let long = "x".repeat(200);
    for bad in ["has space", "semi;colon", long.as_str()] {
        let before = v2.total();
        let r = raw(
            &gw,
            "POST",
            "/api/v1/run/detail",
            &[json_ct, ("api-key", KEY), ("x-request-id", bad)],
            Some(&body),
        )
        .await;
        r.assert_ok();
        let id = r.header("x-request-id").expect("a request id");
        assert_ne!(id, bad);
        assert_eq!(v2.seen()[before].header("x-request-id"), Some(id));
    }

    // Errors carry it too.
    let r = raw(&gw, "GET", "/nope", &[("x-request-id", "err-1")], None).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.header("x-request-id"), Some("err-1"));
}

#[tokio::test]
async fn v2_request_id_comes_back_on_errors_too() {
    let v2 = MockV2::start(|_| {
        Reply::Json(
            404,
            json!({"code": 70001, "message": "run record does not exist", "request_id": "v2-req-404", "details": null}),
        )
    })
    .await;
    let gw = gateway(&v2, "").await;
    let r = post(&gw, "/api/v1/run/detail", json!({"run_slug": RUN})).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["code"], 70001);
    assert_eq!(r.header("x-v2-request-id"), Some("v2-req-404"));
}

// 7. Worker verification cache.

#[tokio::test]
async fn worker_ids_are_verified_once_and_unknown_ones_remembered() {
    let v2 = MockV2::start(|req| match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/api/v2/workers/owner~fresh/input-schema") => {
            Reply::ok(json!({"input_schema": {"properties": []}}))
        }
        ("GET", _) => Reply::error(404, 50001, "worker not found"),
        _ => Reply::ok(json!({"run_slug": RUN})),
    })
    .await;
    let gw = gateway(&v2, "").await;
    let start = |slug: &str| json!({"scraper_slug": slug, "input": {"parameters": {"custom": {}}}});

    for _ in 0..2 {
        let r = post(&gw, "/api/v1/scraper/run", start("owner/fresh")).await;
        assert_eq!(r.assert_ok()["run_slug"], RUN);
    }
    assert_eq!(
        v2.count("GET", "/api/v2/workers/owner~fresh/input-schema"),
        1
    );
    assert_eq!(v2.count("POST", "/api/v2/workers/owner~fresh/runs"), 2);

    let r = post(&gw, "/api/v1/scraper/run", start("owner/gone")).await;
    r.assert_error(404, 50001, "Script does not exist");
    assert_eq!(
        v2.count("GET", "/api/v2/workers/owner~gone/input-schema"),
        1
    );
    assert_eq!(v2.count("POST", "/api/v2/workers/owner~gone/runs"), 0);
    // An unknown worker's start also checks the key (one account call, V1
    // having checked the key first); the worker is not asked about again.
    assert_eq!(v2.count("GET", "/api/v2/users/account"), 1);
    let before = v2.total();
    let r = post(&gw, "/api/v1/scraper/run", start("owner/gone")).await;
    r.assert_error(404, 50001, "Script does not exist");
    assert_eq!(
        v2.count("GET", "/api/v2/workers/owner~gone/input-schema"),
        1,
        "the negative answer was not cached"
    );
    assert_eq!(v2.count("GET", "/api/v2/users/account"), 2);
    assert_eq!(v2.total(), before + 1);
}

// 8. Unknown routes.

#[tokio::test]
async fn unknown_routes_are_v1_404s() {
    let v2 = MockV2::untouchable().await;
    let gw = gateway(&v2, "").await;
    for (method, path) in [
        ("GET", "/"),
        ("POST", "/api/v1/nope"),
        ("GET", "/api/v1/run/detail"),
        ("POST", "/api/store"),
        ("GET", "/api/v2/store"),
        ("DELETE", "/api/v1/run/detail"),
    ] {
        let r = raw(&gw, method, path, &[("api-key", KEY)], None).await;
        r.assert_error(404, 4040, "Resource not found");
        assert_eq!(
            r.header("x-v1compat-error"),
            Some("unknown_route"),
            "{method} {path}"
        );
    }
    assert_eq!(v2.total(), 0);
}

// 9. Admin listener.

#[tokio::test]
async fn admin_health_readiness_and_unknown_paths() {
    let v2 = MockV2::untouchable().await;
    let gw = gateway(&v2, "").await;
    let (status, _, body) = send(gw.admin, "GET", "/healthz", &[], None).await;
    assert_eq!((status.as_u16(), &body[..]), (200, &b"ok\n"[..]));
    let (status, _, body) = send(gw.admin, "GET", "/readyz", &[], None).await;
    assert_eq!(status, 200);
    assert_eq!(&body[..], &b"ready\nupstream: reachable\n"[..]);
    let (status, _, _) = send(gw.admin, "GET", "/nope", &[], None).await;
    assert_eq!(status, 404);
    // The V1 routes are not served on the admin port.
    let (status, _, _) = send(gw.admin, "POST", "/api/v1/run/detail", &[], None).await;
    assert_eq!(status, 404);
    // HEAD is GET without a body; another method is refused, naming both.
    for path in ["/healthz", "/readyz", "/metrics"] {
        let (status, headers, body) = send(gw.admin, "HEAD", path, &[], None).await;
        assert_eq!(status, 200, "HEAD {path}");
        assert!(body.is_empty(), "HEAD {path}: {body:?}");
        assert!(headers.contains_key("content-length"), "HEAD {path}");
        let (status, headers, _) = send(gw.admin, "POST", path, &[], None).await;
        assert_eq!(status, 405, "POST {path}");
        assert_eq!(headers["allow"], "GET, HEAD", "POST {path}");
    }

    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    // V2 down is the same for every replica: it is reported, but the replica
    // stays ready (it still answers V1 clients, with error envelopes) rather
    // than all of them leaving the Service at once.
    let gw = gateway_at(&format!("http://{dead}"), "").await;
    let (status, _, body) = send(gw.admin, "GET", "/readyz", &[], None).await;
    assert_eq!(status, 200, "{body:?}");
    let body = String::from_utf8_lossy(&body);
    assert!(body.starts_with("ready\nupstream: "), "{body}");
    assert!(body.contains("unreachable"), "{body}");

    let (status, _, _) = send(gw.admin, "GET", "/healthz", &[], None).await;
    assert_eq!(status, 200);
    assert_eq!(v2.total(), 0);
}

// 10. Graceful shutdown.

#[tokio::test]
async fn shutdown_lets_in_flight_requests_finish() {
    let release = Arc::new(Notify::new());
    let (arrived_tx, mut arrived) = mpsc::unbounded_channel();
    let held = release.clone();
    let v2 = MockV2::start(move |req| {
        let _ = arrived_tx.send(());
        Reply::After(held.clone(), Box::new(run_detail_ok(req)))
    })
    .await;
    let gw = gateway(&v2, "").await;
    let addr = gw.addr;
    let in_flight = tokio::spawn({
        let body = serde_json::to_vec(&json!({"run_slug": RUN})).unwrap();
        async move {
            send(
                addr,
                "POST",
                "/api/v1/run/detail",
                &[("content-type", "application/json"), ("api-key", KEY)],
                Some(Bytes::from(body)),
            )
            .await
        }
    });
    arrived.recv().await.expect("V2 received the request");

    let server = gw.shutdown();
    // The listener closes while the request is still held by V2.
    tokio::time::timeout(Duration::from_secs(5), async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the public listener closes on shutdown");
    assert!(!server.is_finished(), "the server stopped before draining");
    assert!(!in_flight.is_finished());

    release.notify_one();
    let (status, _, body) = in_flight.await.unwrap();
    assert_eq!(status, 200);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["data"]["slug"], RUN);
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server drains and stops")
        .unwrap()
        .unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    assert_eq!(v2.total(), 1);
}

#[tokio::test]
async fn shutdown_does_not_wait_for_idle_connections() {
    let v2 = MockV2::start(run_detail_ok).await;
    let gw = gateway(&v2, "").await;
    // A keep-alive HTTP/1.1 connection left idle in a client's pool, an
    // HTTP/2 one, and a TCP connection that never sends a byte.
    let h1: hyper_util::client::legacy::Client<_, http_body_util::Full<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    let h2: hyper_util::client::legacy::Client<_, http_body_util::Full<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http2_only(true)
            .build_http();
    for client in [&h1, &h2] {
        let req = http::Request::get(format!("http://{}/", gw.addr))
            .body(http_body_util::Full::new(Bytes::new()))
            .unwrap();
        let resp = client.request(req).await.unwrap();
        assert_eq!(resp.status(), 404);
        http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap();
    }
    let _silent = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let server = gw.shutdown();
    // The default grace period is 30 s; idle connections must not use it up.
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("idle connections held the shutdown")
        .unwrap()
        .unwrap();
    drop((h1, h2));
}

/// A V2 refusal of what the client sent (its key, an unknown run) is the
/// client's error, not the upstream's: the upstream alerts must not fire on
/// client mistakes. A V2 5xx stays the upstream's.
#[tokio::test]
async fn refusals_of_the_clients_key_or_input_have_client_origin() {
    for (reply, status, origin, cause) in [
        (
            (|_: &Seen| Reply::error(401, 12002, "invalid key")) as fn(&Seen) -> Reply,
            401,
            "client",
            "unauthorized",
        ),
        (
            |_: &Seen| Reply::error(404, 70001, "run not found"),
            404,
            "client",
            "not_found",
        ),
        (
            |_: &Seen| Reply::error(400, 11000, "bad params"),
            400,
            "client",
            "invalid_request",
        ),
        (
            |_: &Seen| Reply::error(500, 10000, "internal"),
            500,
            "upstream",
            "refused",
        ),
    ] {
        let v2 = MockV2::start(reply).await;
        let gw = gateway(&v2, "[retry]\nmax_attempts = 1\n").await;
        let r = post(&gw, "/api/v1/run/detail", json!({"run_slug": RUN})).await;
        assert_eq!(r.status, status, "{}", r.body);
        assert_eq!(r.header("x-v1compat-error-origin"), Some(origin), "{cause}");
        assert_eq!(r.header("x-v1compat-error"), Some(cause));
    }
}
