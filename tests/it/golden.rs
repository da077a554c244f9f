//! Golden V1↔V2 cases from `tests/golden/<operation>/*.json`, one folder per
//! [`Operation::name`] (`route/` for requests no operation matches). Each file holds a V1
//! request, the V2 calls it must cause (with V2's answers) and the V1 answer
//! expected. Every case runs twice: through the operations in-process with a
//! scripted upstream (no network), and end to end over HTTP against a mock V2
//! that checks what it received. `V1COMPAT_BLESS=1` rewrites `expect` from
//! what the in-process run produced, for review in the diff.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use v1compat::pipeline::{Pipeline, RawV1Request};
use v1compat::upstream::HttpUpstream;
use v1compat::v1::route::Operation;

use crate::support::{send, Exchange, MockV2, TestGateway};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Case {
    pub(crate) about: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) config: String,
    pub(crate) v1: V1Call,
    #[serde(default)]
    v2: Vec<Exchange>,
    pub(crate) expect: Expect,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct V1Call {
    pub(crate) method: String,
    pub(crate) path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    raw_body: Option<String>,
}

impl V1Call {
    fn bytes(&self) -> Bytes {
        match (&self.raw_body, &self.body) {
            (Some(raw), _) => Bytes::from(raw.clone()),
            (None, Some(b)) => Bytes::from(serde_json::to_vec(b).unwrap()),
            _ => Bytes::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Expect {
    pub(crate) status: u16,
    pub(crate) body: Value,
}

pub(crate) fn cases() -> Vec<(PathBuf, Case)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut files = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "json") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let case: Case =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, case)
        })
        .collect()
}

fn config(case: &Case, base_url: &str) -> String {
    format!("[upstream]\nbase_url = \"{base_url}\"\n{}", case.config)
}

/// The in-process run: the gateway's own pipeline (routing, checks,
/// operations and rendering), with the same headers as the HTTP run, no
/// network.
async fn run_in_process(case: &Case) -> (Expect, MockV2) {
    let v2 = MockV2::scripted(case.v2.clone());
    let cfg = v1compat::config::load(&config(case, "http://v2.invalid"), Vec::new()).unwrap();
    let pipeline = Pipeline::new(Arc::new(cfg.gateway(Arc::new(v2.clone()))));
    let method = Method::from_bytes(case.v1.method.as_bytes()).unwrap();
    let (path, query) = match case.v1.path.split_once('?') {
        Some((p, q)) => (p, Some(q.to_owned())),
        None => (case.v1.path.as_str(), None),
    };
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert("x-request-id", HeaderValue::from_static("golden"));
    if let Some(k) = &case.v1.key {
        headers.insert("api-key", HeaderValue::from_str(k).unwrap());
    }
    let body = if case.v1.method == "GET" {
        Bytes::new()
    } else {
        case.v1.bytes()
    };
    let answer = pipeline
        .answer(RawV1Request::with_bytes(method, path, query, headers, body))
        .await;
    let expect = Expect {
        status: answer.status.as_u16(),
        body: serde_json::from_slice(&answer.body.to_bytes()).unwrap(),
    };
    (expect, v2)
}

/// The end-to-end run: V1 over HTTP to a gateway on port 0, V2 over HTTP to
/// the scripted mock.
async fn run_over_http(case: &Case) -> (Expect, MockV2) {
    let v2 = MockV2::scripted(case.v2.clone()).serve().await;
    let cfg_text = config(case, &v2.url());
    let cfg = v1compat::config::load(&cfg_text, Vec::new()).unwrap();
    let upstream = Arc::new(HttpUpstream::new(cfg.upstream.clone()).unwrap());
    let gw = TestGateway::start(&cfg_text, upstream).await;
    let mut headers = vec![("content-type", "application/json")];
    if let Some(k) = &case.v1.key {
        headers.push(("api-key", k.as_str()));
    }
    let body = (case.v1.method != "GET").then(|| case.v1.bytes());
    let (status, _, out) = send(gw.addr, &case.v1.method, &case.v1.path, &headers, body).await;
    let body = serde_json::from_slice(&out)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&out).into()));
    (
        Expect {
            status: status.as_u16(),
            body,
        },
        v2,
    )
}

fn check_v2(name: &str, case: &Case, v2: &MockV2) -> Vec<String> {
    let mut problems = Vec::new();
    let unused = v2.unused();
    if !unused.is_empty() {
        problems.push(format!("{name}: expected V2 calls not made: {unused:?}"));
    }
    let seen = v2.seen();
    for got in &seen {
        let Some(want) = case
            .v2
            .iter()
            .find(|e| e.request.method == got.method && e.request.path == got.target)
        else {
            problems.push(format!(
                "{name}: unexpected V2 call {} {}",
                got.method, got.target
            ));
            continue;
        };
        // No body and an empty one are the same call.
        let body = (!got.body.is_empty()).then(|| got.json());
        if want.request.body != body {
            problems.push(format!(
                "{name}: V2 body for {} {}\n  want {:?}\n  got  {:?}",
                got.method, got.target, want.request.body, body
            ));
        }
        if want.request.key != got.key {
            problems.push(format!(
                "{name}: V2 key for {} {}: want {:?}, got {:?}",
                got.method, got.target, want.request.key, got.key
            ));
        }
    }
    if seen.len() != case.v2.len() {
        problems.push(format!(
            "{name}: {} V2 calls made, {} expected",
            seen.len(),
            case.v2.len()
        ));
    }
    problems
}

/// Whether a case's answer is a key problem: an invalid key (20001), or the
/// 400 / 4000 of a missing key under `compat.missing_key_status = "400"`.
fn about_key(expect: &Expect) -> bool {
    let message = expect.body["message"].as_str().unwrap_or_default();
    expect.body["code"] == 20001 || message.ends_with("the api-key header is missing")
}

/// The case under `compat.business_error_status = "200"`: every V1 error
/// envelope is the same, sent with HTTP 200, except key problems, which keep
/// their status.
fn with_errors_as_200(case: &Case) -> Case {
    let mut out = case.clone();
    let key = "business_error_status = \"200\"\n";
    out.config = match out.config.find("[compat]\n") {
        Some(at) => {
            let after = at + "[compat]\n".len();
            format!("{}{key}{}", &out.config[..after], &out.config[after..])
        }
        None => format!("{}[compat]\n{key}", out.config),
    };
    if out.expect.body["code"] != 0 && !about_key(&out.expect) {
        out.expect.status = 200;
    }
    out
}

/// Every golden error answer again under `compat.business_error_status =
/// "200"`, in process and over HTTP: same V2 calls, same envelope, HTTP 200
/// (a key problem: its own status). Cases that set the choice themselves
/// are checked as written by [`golden_cases`].
#[tokio::test]
async fn golden_errors_under_the_200_dialect() {
    let mut problems = Vec::new();
    let (mut errors, mut key_problems) = (0, 0);
    for (path, case) in cases() {
        if case.expect.body["code"] == 0 || case.config.contains("business_error_status") {
            continue;
        }
        errors += 1;
        key_problems += usize::from(about_key(&case.expect));
        let name = format!(
            "{} (errors as 200)",
            path.file_name().unwrap().to_string_lossy()
        );
        let case = with_errors_as_200(&case);
        for (how, (got, v2)) in [
            ("in-process", run_in_process(&case).await),
            ("http", run_over_http(&case).await),
        ] {
            problems.extend(check_v2(&format!("{name} ({how})"), &case, &v2));
            if got != case.expect {
                problems.push(format!(
                    "{name} ({how}): want {} {}, got {} {}",
                    case.expect.status, case.expect.body, got.status, got.body
                ));
            }
        }
    }
    assert!(errors >= 30, "only {errors} golden error cases");
    assert!(key_problems >= 5, "only {key_problems} golden key problems");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The operation a case's request routes to, by name (`route` for none).
fn operation_of(case: &Case) -> &'static str {
    let method = Method::from_bytes(case.v1.method.as_bytes()).unwrap();
    let path = case.v1.path.split('?').next().unwrap_or_default();
    v1compat::v1::route::route(&method, path).map_or("route", Operation::name)
}

/// Every case sits in its operation's folder, and every operation has at
/// least one answered (200) and one refused case.
fn coverage(cases: &[(PathBuf, Case)]) -> Vec<String> {
    let mut problems = Vec::new();
    for (path, case) in cases {
        let folder = path
            .parent()
            .and_then(Path::file_name)
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let op = operation_of(case);
        if folder != op {
            problems.push(format!(
                "{}: a {op} request belongs in tests/golden/{op}/",
                path.display()
            ));
        }
    }
    for op in Operation::ALL {
        let statuses: Vec<u16> = cases
            .iter()
            .filter(|(_, c)| operation_of(c) == op.name())
            .map(|(_, c)| c.expect.status)
            .collect();
        if !statuses.contains(&200) {
            problems.push(format!("{}: no golden case answered 200", op.name()));
        }
        if !statuses.iter().any(|s| *s != 200) {
            problems.push(format!("{}: no golden case refused", op.name()));
        }
    }
    problems
}

#[tokio::test]
async fn golden_cases() {
    let bless = std::env::var_os("V1COMPAT_BLESS").is_some();
    let cases = cases();
    let mut problems = coverage(&cases);
    for (path, case) in cases {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let (got, v2) = run_in_process(&case).await;
        problems.extend(check_v2(&format!("{name} (in-process)"), &case, &v2));
        if bless && got != case.expect {
            let mut blessed = case.clone();
            blessed.expect = got.clone();
            std::fs::write(
                &path,
                serde_json::to_string_pretty(&blessed).unwrap() + "\n",
            )
            .unwrap();
        } else if got != case.expect {
            problems.push(format!(
                "{name} (in-process): {}\n  want {} {}\n  got  {} {}",
                case.about, case.expect.status, case.expect.body, got.status, got.body
            ));
        }
        let (got, v2) = run_over_http(&case).await;
        problems.extend(check_v2(&format!("{name} (http)"), &case, &v2));
        if got != case.expect && !bless {
            problems.push(format!(
                "{name} (http): {}\n  want {} {}\n  got  {} {}",
                case.about, case.expect.status, case.expect.body, got.status, got.body
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{} golden problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
