//! The request pipeline as one function: the live gateway and an in-process
//! caller (what `replay --upstream` and the golden tests use) answer byte for
//! byte alike, and no exit path leaks an in-flight count.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use v1compat::pipeline::{Pipeline, RawV1Request, V1Response};
use v1compat::upstream::HttpUpstream;
use v1compat_sandbox::{Sandbox, SandboxConfig};

use crate::support::{local_metrics, metric, send, MockV2, Reply, TestGateway};

/// One V1 request, sent both ways.
struct Probe {
    method: Method,
    path: String,
    query: Option<String>,
    headers: Vec<(&'static str, String)>,
    body: Bytes,
}

impl Probe {
    fn new(method: Method, path: &str) -> Probe {
        Probe {
            method,
            path: path.to_owned(),
            query: None,
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }

    fn header(mut self, name: &'static str, value: &str) -> Probe {
        self.headers.push((name, value.to_owned()));
        self
    }

    fn body(mut self, body: impl Into<Bytes>) -> Probe {
        self.body = body.into();
        self
    }
}

/// The example request list, read the way `replay` reads a plain line: a
/// `path` (method from the V1 table) or an `operation`, plus query and body.
fn example_probes(key: &str) -> Vec<Probe> {
    let text = include_str!("../../config/shadow-requests.example.jsonl");
    let mut probes = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        let op = match (v["path"].as_str(), v["operation"].as_str()) {
            (Some(path), _) => v1compat::v1::route::Operation::ALL
                .into_iter()
                .find(|o| o.v1_endpoint().1 == path),
            (None, Some(name)) => v1compat::v1::route::Operation::ALL
                .into_iter()
                .find(|o| o.name() == name),
            (None, None) => None,
        }
        .unwrap_or_else(|| panic!("no operation for {line}"));
        let (method, path) = op.v1_endpoint();
        let mut probe = Probe::new(method, path).header("api-key", key);
        probe.query = v["query"].as_str().map(str::to_owned);
        if !v["body"].is_null() {
            probe = probe
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&v["body"]).unwrap());
        }
        probes.push(probe);
    }
    assert!(probes.len() >= 9, "{} example requests", probes.len());
    probes
}

/// Requests every check of the pipeline refuses, one check each.
fn bad_probes(key: &str) -> Vec<Probe> {
    let detail = "/api/v1/run/detail";
    vec![
        // Unknown route and wrong method.
        Probe::new(Method::GET, "/api/v1/nowhere").header("api-key", key),
        Probe::new(Method::GET, detail).header("api-key", key),
        // A key header that is present but unusable.
        Probe::new(Method::POST, detail)
            .header("authorization", "Basic abc")
            .header("content-type", "application/json")
            .body(r#"{"run_slug":"r"}"#),
        // No key on an operation that needs one.
        Probe::new(Method::POST, detail)
            .header("content-type", "application/json")
            .body(r#"{"run_slug":"r"}"#),
        // A form body: not JSON (the Content-Type alone refuses nothing, as in V1).
        Probe::new(Method::POST, detail)
            .header("api-key", key)
            .header("content-type", "application/x-www-form-urlencoded")
            .body("run_slug=r"),
        // A body over `limits.max_body_bytes` (1 KiB below).
        Probe::new(Method::POST, detail)
            .header("api-key", key)
            .header("content-type", "application/json")
            .body(format!(r#"{{"run_slug":"{}"}}"#, "r".repeat(2048))),
        // Not JSON at all, and JSON of the wrong shape.
        Probe::new(Method::POST, detail)
            .header("api-key", key)
            .header("content-type", "application/json")
            .body("{not json"),
        Probe::new(Method::POST, "/api/v1/run/list")
            .header("api-key", key)
            .header("content-type", "application/json")
            .body(r#"{"page_size":"many"}"#),
        // A bad query on a GET operation.
        {
            let mut p = Probe::new(Method::GET, "/api/store").header("api-key", key);
            p.query = Some("limit=-3".into());
            p
        },
    ]
}

/// Headers the HTTP layer adds on the way out, not part of the V1 answer.
const TRANSPORT: [&str; 3] = ["content-length", "date", "connection"];

/// The V1 answer's headers, minus what carries V2's own per-call ids.
fn comparable(headers: &HeaderMap) -> Vec<(String, String)> {
    let mut out: Vec<_> = headers
        .iter()
        .filter(|(k, _)| !TRANSPORT.contains(&k.as_str()))
        .map(|(k, v)| {
            let v = if k == "x-v2-request-id" {
                "<present>".to_owned()
            } else {
                v.to_str().unwrap_or("<binary>").to_owned()
            };
            (k.as_str().to_owned(), v)
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn in_process_and_live_gateway_answer_byte_for_byte_alike() {
    let v2 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let v1 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sandbox = Sandbox::start(SandboxConfig::default(), v2, v1)
        .await
        .unwrap();
    let key = sandbox.api_key().to_owned();
    let config = format!(
        "[upstream]\nbase_url = \"http://{}\"\n[limits]\nmax_body_bytes = 1024\n[log]\nlevel = \"warn\"\n",
        sandbox.v2_addr()
    );
    let live = TestGateway::over_http(&config).await;
    let cfg = v1compat::config::load(&config, Vec::new()).unwrap();
    let upstream = Arc::new(HttpUpstream::new(cfg.upstream.clone()).unwrap());
    let pipeline = Pipeline::new(Arc::new(cfg.gateway(upstream)));

    let mut probes = example_probes(&key);
    let examples = probes.len();
    probes.extend(bad_probes(&key));
    let mut refused = 0;
    for (n, probe) in probes.into_iter().enumerate() {
        let id = format!("probe-{n}");
        let mut headers = HeaderMap::new();
        headers.insert("x-request-id", HeaderValue::from_str(&id).unwrap());
        for (k, v) in &probe.headers {
            headers.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        let in_process: V1Response = pipeline
            .answer(RawV1Request::with_bytes(
                probe.method.clone(),
                probe.path.clone(),
                probe.query.clone(),
                headers,
                probe.body.clone(),
            ))
            .await;

        let target = match &probe.query {
            Some(q) => format!("{}?{q}", probe.path),
            None => probe.path.clone(),
        };
        let mut sent: Vec<(&str, &str)> = vec![("x-request-id", &id)];
        sent.extend(probe.headers.iter().map(|(k, v)| (*k, v.as_str())));
        let body = (!probe.body.is_empty()).then(|| probe.body.clone());
        let (status, live_headers, live_body) =
            send(live.addr, probe.method.as_str(), &target, &sent, body).await;

        let what = format!("{} {target}", probe.method);
        assert_eq!(in_process.status, status, "{what}");
        let in_process_body = in_process.body.to_bytes();
        assert_eq!(
            in_process_body,
            live_body,
            "{what}: in-process {} vs live {}",
            String::from_utf8_lossy(&in_process_body),
            String::from_utf8_lossy(&live_body)
        );
        assert_eq!(
            comparable(&in_process.headers),
            comparable(&live_headers),
            "{what}"
        );
        if n >= examples {
            assert!(!status.is_success(), "{what} was not refused");
            refused += 1;
        }
    }
    assert_eq!(refused, bad_probes(&key).len());
}

// A current-thread runtime: the gateway's tasks run on this thread, so the
// thread's local recorder sees their metrics and no other test's.
#[tokio::test(flavor = "current_thread")]
async fn a_client_hanging_up_mid_request_leaves_nothing_in_flight() {
    let (m, _local) = local_metrics();
    let in_flight = || metric(&m, "v1compat_requests_in_flight", &[]);
    // A V2 that never answers.
    let v2 = MockV2::new(|_| Reply::Hang);
    let gw = TestGateway::start(
        "[upstream]\nbase_url = \"http://127.0.0.1:9\"\n[log]\nlevel = \"warn\"\n",
        Arc::new(v2.clone()),
    )
    .await;

    let mut client = TcpStream::connect(gw.addr).await.unwrap();
    let body = r#"{"run_slug":"r1"}"#;
    let request = format!(
        "POST /api/v1/run/detail HTTP/1.1\r\nhost: gw\r\napi-key: k-1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    client.write_all(request.as_bytes()).await.unwrap();
    v2.arrived(1).await;
    assert_eq!(in_flight(), 1.0, "the request is in flight");

    drop(client);
    // The gateway drops the request's future when it sees the hang-up; the
    // V2 call goes with it, and on this one thread so has everything else
    // the request held by the time this wakes.
    v2.abandoned(1).await;
    assert_eq!(in_flight(), 0.0, "in-flight leaked");
}
