//! What an operator reads: the built binary's logs (start-up line, one
//! access line per request, one line per failure, no colour off a terminal,
//! drain at shutdown) and `/metrics` before any traffic; the alert rules
//! (promtool) and the Grafana dashboard against the metrics the gateway
//! really exports.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use yaml_rust2::YamlLoader;

use crate::required_tools::tool_missing;
use crate::support::{send, MockV2, Reply, TestGateway};

const KEY: &str = "ops-client-key-Zr7q";

/// A `v1compat serve` child with its stderr read line by line on a thread.
struct Served {
    child: Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    reader: Option<std::thread::JoinHandle<String>>,
    _config: tempfile::NamedTempFile,
}

/// A test that fails before `stop` leaves no gateway running.
impl Drop for Served {
    fn drop(&mut self) {
        if self.reader.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Served {
    fn start(config: &str) -> Served {
        Served::start_with(config, &[])
    }

    fn start_with(config: &str, env: &[(&str, &str)]) -> Served {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(config.as_bytes()).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_v1compat"))
            .args(["serve", "--config", file.path().to_str().unwrap()])
            .env_clear()
            .env(
                crate::support::INVENTORY_STORE.0,
                crate::support::INVENTORY_STORE.1,
            )
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel::<String>();
        let stderr = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(stderr).lines() {
                let line = line.unwrap_or_default();
                let _ = tx.send(line.clone());
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        Served {
            child,
            lines,
            reader: Some(reader),
            _config: file,
        }
    }

    /// The first line containing `needle`, within 10 s.
    async fn line_with(&mut self, needle: &str) -> String {
        tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(line) = self.lines.recv().await {
                if line.contains(needle) {
                    return line;
                }
            }
            panic!("v1compat exited before logging {needle:?}");
        })
        .await
        .unwrap_or_else(|_| panic!("no log line with {needle:?} within 10 s"))
    }

    /// SIGTERM, then the exit code and the whole log.
    fn stop(mut self) -> (Option<i32>, String) {
        let killed = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let status = self.child.wait().unwrap();
        let log = self.reader.take().expect("stopped once").join().unwrap();
        (status.code(), log)
    }
}

fn addr(v: &Value, key: &str) -> std::net::SocketAddr {
    v[key].as_str().unwrap().parse().unwrap()
}

/// The lines of `log` that are JSON objects.
fn events(log: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

/// Every series an alert or a dashboard reads is there, described, from the
/// first scrape: the connection series and, in relay mode, the relay's
/// counters at zero (an `increase()` over a series that appears at 1 misses
/// that first event).
#[tokio::test]
async fn connection_and_relay_series_are_described_and_at_zero_from_the_start() {
    let mut served = Served::start(
        "[listen]\npublic = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n[upstream]\nbase_url = \"http://127.0.0.1:9\"\n[log]\nformat = \"json\"\nlevel = \"info\"\n[callbacks]\npublic_url = \"http://127.0.0.1:9\"\nsecret = \"relay-secret-0123456789\"\nstore = \"memory\"\n",
    );
    let started: Value =
        serde_json::from_str(&served.line_with("v1compat listening").await).unwrap();
    let (_, _, metrics) = send(addr(&started, "admin"), "GET", "/metrics", &[], None).await;
    let metrics = String::from_utf8_lossy(&metrics).into_owned();
    for series in [
        "v1compat_open_connections{listener=\"public\"} 0",
        "v1compat_connections_shed_total{listener=\"public\"} 0",
        "v1compat_connections_write_stalled_total{listener=\"public\"} 0",
        "v1compat_callbacks_received_total 0",
        "v1compat_callbacks_accepted_total{result=\"new\"} 0",
        "v1compat_callbacks_rejected_total{reason=\"store\"} 0",
        "v1compat_callbacks_attempts_total{outcome=\"delivered\"} 0",
        "v1compat_callbacks_attempts_total{outcome=\"superseded\"} 0",
        "v1compat_callbacks_dead_total 0",
        "v1compat_callbacks_enrich_failed_total 0",
        "v1compat_callbacks_queue_depth 0",
    ] {
        assert!(
            metrics.contains(series),
            "{series} missing at start:\n{metrics}"
        );
    }
    // Every series has its help text.
    let described: std::collections::HashSet<&str> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# HELP "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for line in metrics.lines().filter(|l| l.starts_with("v1compat_")) {
        let name = line.split(['{', ' ']).next().unwrap();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .filter(|family| described.contains(family))
            .unwrap_or(name);
        assert!(described.contains(family), "{name} has no # HELP line");
    }
    // V2's reachability is checked once at start, with nothing asking /readyz.
    let admin = addr(&started, "admin");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (_, _, metrics) = send(admin, "GET", "/metrics", &[], None).await;
        if String::from_utf8_lossy(&metrics).contains("v1compat_upstream_reachable 0") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "v1compat_upstream_reachable never set"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (code, log) = served.stop();
    assert_eq!(code, Some(0), "{log}");
}

#[tokio::test]
async fn serve_logs_one_access_line_per_request_and_one_line_per_failure() {
    let v2 = MockV2::start(|req| {
        if req.path.ends_with("/R1") {
            Reply::ok(json!({"slug": "R1", "status": "running"}))
        } else if req.path.ends_with("/GONE") {
            Reply::error(404, 70001, "run not found")
        } else {
            Reply::error(500, 10000, "internal error")
        }
    })
    .await;
    let mut served = Served::start(&format!(
        "[listen]\npublic = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n[upstream]\nbase_url = \"{}\"\n[retry]\nmax_attempts = 1\n[log]\nformat = \"json\"\nlevel = \"info\"\n",
        v2.url()
    ));
    let started: Value =
        serde_json::from_str(&served.line_with("v1compat listening").await).unwrap();
    assert_eq!(started["version"], env!("CARGO_PKG_VERSION"), "{started}");
    assert!(
        started["config"].as_str().unwrap().contains(".tmp"),
        "{started}"
    );
    assert_eq!(started["upstream"], format!("{}/", v2.url()), "{started}");
    let (public, admin) = (addr(&started, "public"), addr(&started, "admin"));

    // Before any V1 request: build info, process metrics and the series at zero.
    let (_, _, metrics) = send(admin, "GET", "/metrics", &[], None).await;
    let metrics = String::from_utf8_lossy(&metrics).into_owned();
    for series in [
        format!("v1compat_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION")),
        "v1compat_requests_total{operation=\"store_search\",status=\"200\"} 0".to_owned(),
        "v1compat_errors_total{operation=\"run_detail\",origin=\"upstream\",cause=\"unreachable\"} 0".to_owned(),
        "v1compat_errors_total{operation=\"run_detail\",origin=\"client\",cause=\"unauthorized\"} 0".to_owned(),
        "v1compat_upstream_requests_total{route=\"/api/v2/worker-runs/{id}\",status_class=\"5xx\"} 0".to_owned(),
        "v1compat_request_duration_seconds_count{operation=\"run_log\"} 0".to_owned(),
        "v1compat_requests_in_flight 0".to_owned(),
    ] {
        assert!(metrics.contains(&series), "{series} missing at start");
    }
    for name in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(&format!("{name} "))),
            "{name} missing"
        );
    }

    let mut ids = Vec::new();
    for run in ["R1", "GONE", "BOOM"] {
        let body = bytes::Bytes::from(format!("{{\"run_slug\":\"{run}\"}}"));
        let (status, headers, _) = send(
            public,
            "POST",
            "/api/v1/run/detail",
            &[("content-type", "application/json"), ("api-key", KEY)],
            Some(body),
        )
        .await;
        let id = headers["x-request-id"].to_str().unwrap().to_owned();
        ids.push((run, status.as_u16(), id));
    }
    // The histograms count every answered request and V2 attempt, each in
    // one bucket (cumulative: the `+Inf` one holds them all).
    let (_, _, metrics) = send(admin, "GET", "/metrics", &[], None).await;
    let metrics = String::from_utf8_lossy(&metrics).into_owned();
    for series in [
        "v1compat_request_duration_seconds_count{operation=\"run_detail\"} 3",
        "v1compat_request_duration_seconds_bucket{operation=\"run_detail\",le=\"+Inf\"} 3",
        "v1compat_upstream_calls_per_request_bucket{operation=\"run_detail\",le=\"0\"} 0",
        "v1compat_upstream_calls_per_request_bucket{operation=\"run_detail\",le=\"1\"} 3",
        "v1compat_upstream_calls_per_request_sum{operation=\"run_detail\"} 3",
        "v1compat_upstream_duration_seconds_count{route=\"/api/v2/worker-runs/{id}\"} 3",
    ] {
        assert!(metrics.contains(series), "{series} missing:\n{metrics}");
    }
    let (code, log) = served.stop();
    assert_eq!(code, Some(0), "{log}");
    assert!(!log.contains(KEY), "the key is in the log:\n{log}");
    let events = events(&log);

    for (run, status, id) in &ids {
        // Every line about this request: exactly one, the access line.
        let about: Vec<&Value> = events
            .iter()
            .filter(|e| e.to_string().contains(id.as_str()))
            .collect();
        assert_eq!(about.len(), 1, "{run}: {about:#?}");
        let line = about[0];
        assert_eq!(line["target"], "v1compat::access", "{line}");
        assert_eq!(line["method"], "POST");
        assert_eq!(line["operation"], "run_detail");
        assert_eq!(line["status"], *status);
        assert_eq!(line["request_id"], id.as_str());
        assert_eq!(line["upstream_calls"], 1, "{line}");
        assert!(line["duration_ms"].as_f64().unwrap() >= 0.0);
        match *run {
            "R1" => {
                assert_eq!(
                    (&line["level"], &line["message"]),
                    (&json!("INFO"), &json!("answered"))
                );
                assert_eq!(line["code"], 0);
                assert!(line.get("origin").is_none(), "{line}");
            }
            "GONE" => {
                assert_eq!(
                    (&line["level"], &line["message"]),
                    (&json!("INFO"), &json!("refused"))
                );
                assert_eq!(
                    (&line["code"], &line["origin"], &line["cause"]),
                    (&json!(70001), &json!("client"), &json!("not_found"))
                );
            }
            _ => {
                assert_eq!(
                    (&line["level"], &line["message"]),
                    (&json!("WARN"), &json!("failed"))
                );
                assert_eq!(
                    (&line["code"], &line["origin"], &line["cause"]),
                    (&json!(5000), &json!("upstream"), &json!("refused"))
                );
                // Words, not Rust values.
                assert_eq!(
                    line["error"], "V2 refused: HTTP 500, code 10000: internal error",
                    "{line}"
                );
            }
        }
    }
    // Drain start and end.
    let messages: Vec<&str> = events
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    let drain = messages
        .iter()
        .position(|m| m.starts_with("shutting down"))
        .unwrap_or_else(|| panic!("no drain start:\n{log}"));
    assert!(messages[drain..].contains(&"drained; stopped"), "{log}");
}

/// `runtime.threads = 1`: the single-threaded runtime serves, and says so
/// at start-up; a request's access line is written inside its span, which
/// carries the settled request id and the operation.
#[tokio::test]
async fn serve_on_one_thread_answers_inside_the_request_span() {
    let v2 = MockV2::start(|_| Reply::ok(json!({"slug": "R1", "status": "running"}))).await;
    let mut served = Served::start_with(
        &format!(
            "[listen]\npublic = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n[upstream]\nbase_url = \"{}\"\n[log]\nformat = \"json\"\nlevel = \"info\"\n",
            v2.url()
        ),
        &[("V1COMPAT_RUNTIME__THREADS", "1")],
    );
    let started: Value =
        serde_json::from_str(&served.line_with("v1compat listening").await).unwrap();
    assert_eq!(started["threads"], 1, "{started}");
    let public = addr(&started, "public");
    let mut ids = Vec::new();
    for sent_id in [None, Some("client-id-7")] {
        let mut headers = vec![("content-type", "application/json"), ("api-key", KEY)];
        headers.extend(sent_id.map(|id| ("x-request-id", id)));
        let body = bytes::Bytes::from_static(b"{\"run_slug\":\"R1\"}");
        let (status, answer, _) =
            send(public, "POST", "/api/v1/run/detail", &headers, Some(body)).await;
        assert_eq!(status, 200);
        let id = answer["x-request-id"].to_str().unwrap().to_owned();
        if let Some(sent) = sent_id {
            assert_eq!(id, sent);
        }
        ids.push(id);
    }
    let (code, log) = served.stop();
    assert_eq!(code, Some(0), "{log}");
    let events = events(&log);
    for id in &ids {
        let line = events
            .iter()
            .find(|e| e["target"] == "v1compat::access" && e["request_id"] == id.as_str())
            .unwrap_or_else(|| panic!("no access line for {id}:\n{log}"));
        assert_eq!(line["span"]["name"], "request", "{line}");
        assert_eq!(line["span"]["request_id"], id.as_str(), "{line}");
        assert_eq!(line["span"]["operation"], "run_detail", "{line}");
        assert_eq!(line["span"]["path"], "/api/v1/run/detail", "{line}");
    }
}

/// `log.access = false`: answered and refused requests are quiet; a failure
/// still gets its one line.
#[tokio::test]
async fn access_lines_can_be_switched_off_but_failures_are_still_logged() {
    let v2 = MockV2::start(|req| {
        if req.path.ends_with("/R1") {
            Reply::ok(json!({"slug": "R1", "status": "running"}))
        } else {
            Reply::error(503, 10000, "unavailable")
        }
    })
    .await;
    let mut served = Served::start(&format!(
        "[listen]\npublic = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n[upstream]\nbase_url = \"{}\"\n[retry]\nmax_attempts = 1\n[log]\nformat = \"json\"\naccess = false\n",
        v2.url()
    ));
    let started: Value =
        serde_json::from_str(&served.line_with("v1compat listening").await).unwrap();
    let public = addr(&started, "public");
    for run in ["R1", "DOWN"] {
        let body = bytes::Bytes::from(format!("{{\"run_slug\":\"{run}\"}}"));
        send(
            public,
            "POST",
            "/api/v1/run/detail",
            &[("api-key", KEY)],
            Some(body),
        )
        .await;
    }
    let (_, log) = served.stop();
    let access: Vec<Value> = events(&log)
        .into_iter()
        .filter(|e| e["target"] == "v1compat::access")
        .collect();
    assert_eq!(access.len(), 1, "{access:#?}");
    assert_eq!(access[0]["message"], "failed");
    assert_eq!(access[0]["cause"], "refused");
}

/// Text logs into a pipe carry no escape codes; the test suite's own
/// `V1COMPAT_` variables are a warning, not a reason to stop.
#[tokio::test]
async fn text_logs_off_a_terminal_have_no_colour() {
    let v2 = MockV2::untouchable().await;
    let mut served = Served::start_with(
        &format!(
            "[listen]\npublic = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n[upstream]\nbase_url = \"{}\"\n[log]\nformat = \"text\"\n",
            v2.url()
        ),
        &[("V1COMPAT_BLESS", "1"), ("V1COMPAT_LOG__ACCESS", "false")],
    );
    let warning = served.line_with("V1COMPAT_BLESS").await;
    assert!(
        warning.contains("WARN") && warning.contains("ignored"),
        "{warning}"
    );
    let line = served.line_with("v1compat listening").await;
    assert!(
        line.contains(&format!("version={}", env!("CARGO_PKG_VERSION"))),
        "{line}"
    );
    // The override, typed as the boolean it sets.
    assert!(line.contains("access_log=false"), "{line}");
    let (_, log) = served.stop();
    assert!(
        !log.contains('\u{1b}'),
        "escape codes in a piped log:\n{log:?}"
    );
    assert!(log.contains("drained; stopped"), "{log}");
}

/// Every metric name the gateway exports: a render of its recorder (every
/// series it knows in advance is registered at start, so this does not
/// depend on what traffic ran), plus the names `src/telemetry.rs` declares
/// for gauges set only on an event (`v1compat_upstream_reachable`, set by
/// the first `/readyz`).
fn exported() -> BTreeSet<String> {
    let handle = v1compat::telemetry::prometheus().expect("the recorder installs");
    let mut names: BTreeSet<String> = handle
        .render()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect();
    let declared = concat!(
        include_str!("../../src/telemetry/mod.rs"),
        include_str!("../../src/callbacks/metrics.rs")
    );
    for literal in declared.split('"').skip(1).step_by(2) {
        if literal.starts_with("v1compat_") && !literal.contains(' ') {
            names.insert(literal.to_owned());
        }
    }
    names
}

/// The metric names in a PromQL expression (ours and the process ones).
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut token = String::new();
    for c in expr.chars().chain([' ']) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            token.push(c);
            continue;
        }
        if token.starts_with("v1compat_") || token.starts_with("process_") {
            names.push(std::mem::take(&mut token));
        }
        token.clear();
    }
    names
}

#[test]
fn dashboard_queries_name_exported_metrics() {
    let exported = exported();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/v1compat-dashboard.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries.push(target["expr"].as_str().unwrap().to_owned());
        }
    }
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(q) = var["query"]["query"].as_str() {
            queries.push(q.to_owned());
        }
    }
    assert!(queries.len() >= 15, "{}", queries.len());
    for q in &queries {
        let names = metric_names(q);
        assert!(!names.is_empty(), "names no metric: {q}");
        for name in names {
            assert!(exported.contains(&name), "{name} (in {q}) is not exported");
        }
    }
}

#[test]
fn alert_rules_have_severity_and_runbook_and_name_exported_metrics() {
    let exported = exported();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/alerts.yaml");
    let doc = &YamlLoader::load_from_str(&std::fs::read_to_string(path).unwrap()).unwrap()[0];
    let rules = doc["groups"][0]["rules"].as_vec().unwrap();
    let names: Vec<&str> = rules.iter().map(|r| r["alert"].as_str().unwrap()).collect();
    for wanted in [
        "V1compatUpstreamDown",
        "V1compatOverloaded",
        "V1compatUpstreamErrors",
    ] {
        assert!(names.contains(&wanted), "{wanted} missing");
    }
    for rule in rules {
        let alert = rule["alert"].as_str().unwrap();
        let severity = rule["labels"]["severity"].as_str();
        assert!(
            matches!(severity, Some("critical" | "warning" | "info")),
            "{alert}: severity {severity:?}"
        );
        let runbook = rule["annotations"]["runbook"].as_str().unwrap_or_default();
        assert!(runbook.len() > 20, "{alert}: no runbook line");
        for name in metric_names(rule["expr"].as_str().unwrap()) {
            assert!(exported.contains(&name), "{alert}: {name} is not exported");
        }
    }
}

const PROMTOOL: &str = "Debian package `prometheus`; .ci/run installs it";

/// `promtool check rules` and the rule unit tests in alerts.test.yaml
/// (the upstream alerts stay quiet on client errors; the gateway-down
/// alerts fire under the shipped ServiceMonitor's job and under any other;
/// a rejected reload alerts for as long as the file stays broken).
#[test]
fn alert_rules_pass_promtool() {
    if tool_missing("alert_rules_pass_promtool", "promtool", PROMTOOL) {
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus");
    for args in [
        ["check", "rules", "alerts.yaml"],
        ["test", "rules", "alerts.test.yaml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The access line says who called: the client's address, the address a
/// proxy forwarded only when that proxy is trusted, the user-agent, and
/// the body bytes in and out; in both log formats.
#[tokio::test]
async fn the_access_line_says_who_called_in_json_and_in_text() {
    const UA: &str = "legacy-client/1.2 (\"quoted\")";
    let v2 = MockV2::start(|_| Reply::ok(json!({"slug": "R1", "status": "running"}))).await;
    let body = br#"{"run_slug":"R1"}"#;
    for (format, trusted) in [("json", "127.0.0.1/32"), ("text", "10.0.0.0/8")] {
        let mut served = Served::start(&format!(
            "[listen]\npublic = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\ntrusted_proxies = [\"{trusted}\"]\n[upstream]\nbase_url = \"{}\"\n[log]\nformat = \"{format}\"\n",
            v2.url()
        ));
        let listening = served.line_with("v1compat listening").await;
        let public: std::net::SocketAddr = if format == "json" {
            addr(&serde_json::from_str(&listening).unwrap(), "public")
        } else {
            let at = listening.find("public=").unwrap() + "public=".len();
            listening[at..]
                .split_whitespace()
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        let (status, headers, answer) = send(
            public,
            "POST",
            "/api/v1/run/detail",
            &[
                ("content-type", "application/json"),
                ("api-key", KEY),
                ("user-agent", UA),
                ("x-forwarded-for", "203.0.113.9, 127.0.0.1"),
            ],
            Some(bytes::Bytes::from_static(body)),
        )
        .await;
        assert_eq!(status, 200);
        let id = headers["x-request-id"].to_str().unwrap().to_owned();
        let (code, log) = served.stop();
        assert_eq!(code, Some(0), "{log}");
        // No service key: the operator hears at start what cannot be served.
        assert!(
            log.lines()
                .any(|l| l.contains("WARN") && l.contains("upstream.service_key is not set")),
            "{log}"
        );
        let line = log
            .lines()
            .find(|l| l.contains(&id) && l.contains("answered"))
            .unwrap_or_else(|| panic!("no access line for {id}:\n{log}"));
        if format == "json" {
            // From 127.0.0.1, trusted: the forwarded address is believed.
            let line: Value = serde_json::from_str(line).unwrap();
            assert_eq!(line["client"], "127.0.0.1", "{line}");
            assert_eq!(line["forwarded_for"], "203.0.113.9", "{line}");
            assert_eq!(line["user_agent"], UA, "{line}");
            assert_eq!(line["bytes_in"], body.len(), "{line}");
            assert_eq!(line["bytes_out"], answer.len(), "{line}");
        } else {
            // 127.0.0.1 is not a trusted proxy here: its header is ignored.
            assert!(line.contains("client=127.0.0.1"), "{line}");
            assert!(!line.contains("forwarded_for"), "{line}");
            assert!(!line.contains("203.0.113.9"), "{line}");
            assert!(
                line.contains(r#"user_agent="legacy-client/1.2 (\"quoted\")""#),
                "{line}"
            );
            assert!(line.contains(&format!("bytes_in={}", body.len())), "{line}");
            assert!(
                line.contains(&format!("bytes_out={}", answer.len())),
                "{line}"
            );
        }
    }
}

/// A second gateway on the callback store file of a running one stops
/// before it listens, naming the file and the process that holds it.
#[tokio::test]
async fn a_second_gateway_on_the_same_redb_store_says_who_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("callbacks.redb");
    let config = format!(
        "[listen]\npublic = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n[upstream]\nbase_url = \"http://127.0.0.1:9\"\nservice_key = \"svc-key-0123\"\n[log]\nformat = \"json\"\n[callbacks]\npublic_url = \"http://127.0.0.1:9\"\nsecret = \"relay-secret-0123456789\"\nstore = \"redb:{}\"\n",
        store.display()
    );
    let mut first = Served::start(&config);
    first.line_with("v1compat listening").await;
    let first_pid = first.child.id();

    let mut second = Served::start(&config);
    let status = second.child.wait().unwrap();
    let log = second.reader.take().unwrap().join().unwrap();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        !log.contains("v1compat listening"),
        "bound before failing:\n{log}"
    );
    assert!(log.contains(&store.display().to_string()), "{log}");
    assert!(log.contains("already open"), "{log}");
    assert!(log.contains(&format!("pid {first_pid}")), "{log}");

    let (code, _) = first.stop();
    assert_eq!(code, Some(0));
}

/// `promtool check metrics` on a live `/metrics`: a gateway with the
/// callback relay on (so its series are there too) and the process
/// metrics (read as the recorder installs). Every series must be valid and
/// named as its type wants (a `_total` is a counter, fractional or not).
#[tokio::test]
async fn live_metrics_pass_promtool_check_metrics() {
    if tool_missing(
        "live_metrics_pass_promtool_check_metrics",
        "promtool",
        PROMTOOL,
    ) {
        return;
    }
    let v2 = MockV2::untouchable().await;
    let gw = TestGateway::over_http(&format!(
        "[upstream]\nbase_url = \"{}\"\n[callbacks]\npublic_url = \"http://127.0.0.1:9\"\nsecret = \"relay-secret-0123456789\"\nstore = \"memory\"\n",
        v2.url()
    ))
    .await;
    let (status, _, metrics) = send(gw.admin, "GET", "/metrics", &[], None).await;
    assert_eq!(status, 200);
    let text = String::from_utf8(metrics.to_vec()).unwrap();
    for family in [
        "# TYPE process_cpu_seconds_total counter",
        "# TYPE v1compat_callbacks_attempts_total counter",
        "# TYPE v1compat_requests_total counter",
        "# TYPE v1compat_request_duration_seconds histogram",
    ] {
        assert!(text.contains(family), "{family} missing:\n{text}");
    }
    let out = tokio::task::spawn_blocking(move || {
        let mut child = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = gw.shutdown().await;
}
