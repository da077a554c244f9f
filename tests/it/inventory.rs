//! The migration inventory end to end: clients calling through a gateway on
//! the sandbox are listed with the operations they call, the V2 calls that
//! replace them and the differences their answers relied on — from redb
//! after a restart, and from PostgreSQL shared by two gateway processes —
//! and their keys are written nowhere. The deprecation headers and the
//! brownout windows, on when configured and touching only whom they select.

use std::net::SocketAddr;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::support::{fresh_database, postgres_url, send, serve_binary, TestGateway};
use v1compat_sandbox::{Sandbox, SandboxConfig};

/// The second account's key (the first is the sandbox's own).
const KEY2: &str = "inventory-second-key-7Qw";
const TOKEN: &str = "inventory-operator-token-0123";

async fn sandbox() -> Sandbox {
    let cfg = SandboxConfig::from_toml_str(&format!(
        "speed = 1e-9\n[[accounts]]\nkey = \"{KEY2}\"\nbalance = \"5\"\n"
    ))
    .unwrap();
    Sandbox::start(
        cfg,
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
    .await
    .unwrap()
}

/// A gateway on the sandbox with the inventory opened, as `serve` and
/// `sandbox` run it.
struct Gateway {
    public: SocketAddr,
    admin: SocketAddr,
    running: TestGateway,
}

impl Gateway {
    async fn start(sb: &Sandbox, extra: &str) -> Gateway {
        let toml = format!(
            "[upstream]\nbase_url = \"http://{}\"\nservice_key = \"{}\"\n[retry]\nmax_attempts = 1\n[admin]\noperator_token = \"{TOKEN}\"\n{extra}",
            sb.v2_addr(),
            sb.api_key()
        );
        let running = TestGateway::over_http_with(&toml, true).await;
        let gw = Gateway {
            public: running.addr,
            admin: running.admin,
            running,
        };
        // Serving once its admin listener answers.
        let (ready, _, _) = send(gw.admin, "GET", "/healthz", &[], None).await;
        assert_eq!(ready, 200);
        gw
    }

    /// Stops it the way SIGTERM does (the drain, then the last flush).
    async fn stop(self) {
        self.running.shutdown().await.unwrap().unwrap();
    }

    async fn inventory(&self) -> Value {
        let bearer = format!("Bearer {TOKEN}");
        let (status, headers, body) = send(
            self.admin,
            "GET",
            "/inventory?format=json",
            &[("authorization", &bearer)],
            None,
        )
        .await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert_eq!(headers["content-type"], "application/json");
        serde_json::from_slice(&body).unwrap()
    }
}

async fn post(gw: SocketAddr, path: &str, key: &str, ua: &str, body: Value) -> (u16, Value) {
    let (status, _, out) = send(
        gw,
        "POST",
        path,
        &[
            ("content-type", "application/json"),
            ("api-key", key),
            ("user-agent", ua),
        ],
        Some(Bytes::from(body.to_string())),
    )
    .await;
    (status.as_u16(), serde_json::from_slice(&out).unwrap())
}

async fn get(gw: SocketAddr, path: &str, ua: &str) -> (u16, Value) {
    let (status, _, out) = send(gw, "GET", path, &[("user-agent", ua)], None).await;
    (status.as_u16(), serde_json::from_slice(&out).unwrap())
}

/// The start-run body of the n8n V1 templates: every system limit 0.
fn zero_limits_run() -> Value {
    json!({
        "scraper_slug": "coreclaw/google-maps-scraper",
        "is_async": true,
        "input": {"parameters": {
            "custom": {"max_results": 5},
            "system": {"cpus": 0, "memory": 0, "execute_limit_time_seconds": 0}
        }}
    })
}

/// Three clients: the first key sends zero system limits, the second key
/// trims its run ids, the keyless one searches the store badly under the
/// `200` dialect.
async fn three_clients(gw: SocketAddr, key1: &str) {
    let (status, started) = post(
        gw,
        "/api/v1/scraper/run",
        key1,
        "billing/1.0",
        zero_limits_run(),
    )
    .await;
    assert_eq!((status, &started["code"]), (200, &json!(0)), "{started}");
    let plain_run = json!({
        "scraper_slug": "coreclaw/google-maps-scraper",
        "is_async": true,
        "input": {"parameters": {"custom": {"max_results": 5}}}
    });
    let (_, own) = post(gw, "/api/v1/scraper/run", KEY2, "reports/2.3", plain_run).await;
    let slug = own["data"]["run_slug"].as_str().unwrap().to_owned();
    for _ in 0..2 {
        let (status, detail) = post(
            gw,
            "/api/v1/run/detail",
            KEY2,
            "reports/2.3",
            json!({"run_slug": format!("  {slug} ")}),
        )
        .await;
        assert_eq!((status, &detail["code"]), (200, &json!(0)), "{detail}");
    }
    let (status, found) = get(gw, "/api/store?search=maps", "curl/8.5").await;
    assert_eq!((status, &found["code"]), (200, &json!(0)), "{found}");
    // No `search`: a 4000 error, sent with HTTP 200 in this dialect.
    let (status, refused) = get(gw, "/api/store", "curl/8.5").await;
    assert_eq!((status, &refused["code"]), (200, &json!(4000)), "{refused}");
}

fn client(inventory: &Value, pred: impl Fn(&Value) -> bool) -> &Value {
    inventory["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| pred(c))
        .unwrap_or_else(|| panic!("no such client in {inventory:#}"))
}

fn difference(c: &Value, id: &str) -> u64 {
    c["differences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == id)
        .map_or(0, |d| d["answers"].as_u64().unwrap())
}

fn operation<'a>(c: &'a Value, name: &str) -> &'a Value {
    c["operations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["operation"] == name)
        .unwrap_or_else(|| panic!("{name} not in {c:#}"))
}

/// What the three clients must show, wherever the inventory was kept.
fn check_three(inventory: &Value, key1: &str, times: u64) {
    assert_eq!(inventory["clients_total"], 3, "{inventory:#}");
    assert_eq!(inventory["clients_active"], 3);
    let has_agent = |ua: &'static str| {
        move |c: &Value| c["user_agents"].as_array().unwrap().iter().any(|u| u == ua)
    };
    let billing = client(inventory, has_agent("billing/1.0"));
    assert_eq!(billing["keyed"], true);
    assert!(billing["fingerprint"].as_str().unwrap().starts_with("k-"));
    let start = operation(billing, "start_run");
    assert_eq!(start["v1"], "POST /api/v1/scraper/run");
    assert_eq!(start["v2"], json!(["POST /api/v2/workers/{workerId}/runs"]));
    assert_eq!(start["requests"], times);
    assert_eq!(difference(billing, "zero_system_limits"), times);
    let d = billing["differences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == "zero_system_limits")
        .unwrap();
    assert!(
        d["fix"]
            .as_str()
            .unwrap()
            .contains("leave a `system` limit out"),
        "{d}"
    );

    let reports = client(inventory, has_agent("reports/2.3"));
    let detail = operation(reports, "run_detail");
    assert_eq!(detail["v2"], json!(["GET /api/v2/worker-runs/{runId}"]));
    assert_eq!(detail["requests"], 2 * times);
    assert_eq!(difference(reports, "lenient_input"), 2 * times);
    assert_eq!(difference(reports, "zero_system_limits"), 0);

    let curl = client(inventory, has_agent("curl/8.5"));
    assert_eq!(curl["keyed"], false);
    assert!(curl["fingerprint"].as_str().unwrap().starts_with("anon-"));
    let search = operation(curl, "store_search");
    assert_eq!(search["v2"], json!(["GET /api/v2/store"]));
    assert_eq!(
        (&search["requests"], &search["errors"]),
        (&json!(2 * times), &json!(times))
    );
    assert_eq!(difference(curl, "business_error_status"), times);
    assert_eq!(difference(curl, "public_catalog_key"), 2 * times);
    assert_eq!(curl["addresses"], json!(["127.0.0.1"]));

    let text = inventory.to_string();
    for key in [key1, KEY2] {
        assert!(!text.contains(key), "a key in the report");
    }
}

#[tokio::test]
async fn clients_are_listed_from_redb_after_a_restart_and_their_keys_are_stored_nowhere() {
    let sb = sandbox().await;
    let key1 = sb.api_key().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("inventory.redb");
    let extra = format!(
        "[compat]\nbusiness_error_status = \"200\"\n[inventory]\nstore = \"redb:{}\"\nflush_interval_ms = 3600000\n",
        file.display()
    );
    let gw = Gateway::start(&sb, &extra).await;
    three_clients(gw.public, &key1).await;
    // Without the operator token, the inventory stays closed.
    let (status, _, _) = send(gw.admin, "GET", "/inventory", &[], None).await;
    assert_eq!(status, 401);
    let (status, _, _) = send(
        gw.admin,
        "GET",
        "/inventory",
        &[("authorization", "Bearer not-the-operator-token")],
        None,
    )
    .await;
    assert_eq!(status, 401);
    gw.stop().await;

    // The file holds the counts, not the keys.
    let bytes = std::fs::read(&file).unwrap();
    for key in [key1.as_bytes(), KEY2.as_bytes()] {
        assert!(
            !bytes.windows(key.len()).any(|w| w == key),
            "a key in the store"
        );
    }

    // Started again on the same file: what the first one counted, and more.
    let gw = Gateway::start(&sb, &extra).await;
    check_three(&gw.inventory().await, &key1, 1);
    three_clients(gw.public, &key1).await;
    let inventory = gw.inventory().await;
    check_three(&inventory, &key1, 2);

    // The page and the text say the same.
    let bearer = format!("Bearer {TOKEN}");
    let (status, headers, page) = send(
        gw.admin,
        "GET",
        "/inventory",
        &[("authorization", &bearer), ("accept", "text/html")],
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert!(headers["content-security-policy"]
        .to_str()
        .unwrap()
        .starts_with("default-src 'none'"));
    let page = String::from_utf8_lossy(&page);
    assert!(
        page.contains("<svg") && page.contains("zero_system_limits"),
        "{page}"
    );
    let (_, _, text) = send(
        gw.admin,
        "GET",
        "/inventory",
        &[("authorization", &bearer)],
        None,
    )
    .await;
    let text = String::from_utf8_lossy(&text);
    assert!(text.starts_with("V1 clients: 3 active, 0 gone"), "{text}");
    assert!(
        text.contains("POST /api/v1/run/detail x4 -> GET /api/v2/worker-runs/{runId}"),
        "{text}"
    );

    // Counted for Prometheus as well, by difference only.
    // The gateway's admin listener installed the process-wide recorder
    // before the first request resolved its handles.
    let (status, _, metrics) = send(gw.admin, "GET", "/metrics", &[], None).await;
    assert_eq!(status, 200);
    let m = String::from_utf8_lossy(&metrics);
    assert!(
        m.lines().any(|l| l
            .starts_with("v1compat_differences_applied_total{difference=\"zero_system_limits\"}")
            && !l.ends_with(" 0")),
        "{m}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn deprecation_headers_only_when_configured() {
    let sb = sandbox().await;
    let key = sb.api_key().to_owned();
    let plain = Gateway::start(&sb, "[inventory]\nstore = \"memory\"\n").await;
    let body = || Some(Bytes::from_static(b"{}"));
    let (_, headers, _) = send(
        plain.public,
        "POST",
        "/api/v1/account/info",
        &[("api-key", &key)],
        body(),
    )
    .await;
    for h in ["deprecation", "sunset", "link"] {
        assert!(!headers.contains_key(h), "{h} without configuration");
    }
    plain.stop().await;

    let told = Gateway::start(
        &sb,
        "[inventory]\nstore = \"memory\"\n[inventory.deprecation]\ndeprecated_at = \"2026-06-30T00:00:00Z\"\nsunset_at = \"2027-01-31T00:00:00Z\"\nlink = \"https://example.com/v2-migration\"\nsuccessor_link = true\n",
    )
    .await;
    // On an answer, and on a refusal at admission alike.
    for (headers, op_link) in [
        (
            send(told.public, "POST", "/api/v1/account/info", &[("api-key", &key)], body()).await.1,
            "</api/v2/users/account>; rel=\"successor-version\"; title=\"GET /api/v2/users/account\"",
        ),
        (
            send(told.public, "POST", "/api/v1/run/detail", &[("api-key", "x y")], body()).await.1,
            "</api/v2/worker-runs/>; rel=\"successor-version\"; title=\"GET /api/v2/worker-runs/{runId}\"",
        ),
    ] {
        assert_eq!(headers["deprecation"], "@1782777600");
        assert_eq!(headers["sunset"], "Sun, 31 Jan 2027 00:00:00 GMT");
        let links: Vec<_> = headers.get_all("link").iter().map(|v| v.to_str().unwrap()).collect();
        assert!(links.contains(&"<https://example.com/v2-migration>; rel=\"deprecation\"; type=\"text/html\""), "{links:?}");
        assert!(links.contains(&op_link), "{links:?}");
    }
    told.stop().await;
}

/// The fingerprint `v1compat inventory --fingerprint` prints for `key`.
fn fingerprint(config: &std::path::Path, key: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_v1compat"))
        .args([
            "inventory",
            "--fingerprint",
            "--config",
            config.to_str().unwrap(),
        ])
        .env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{key}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn a_brownout_refuses_only_the_selected_client_and_operation() {
    let sb = sandbox().await;
    let key1 = sb.api_key().to_owned();
    let dir = tempfile::tempdir().unwrap();
    // The fingerprint secret is configured, so the command makes the same
    // fingerprints the gateway will.
    let base = "[inventory]\nstore = \"memory\"\nsecret = \"brownout-test-secret-0123\"\n";
    let config = dir.path().join("v1compat.toml");
    std::fs::write(&config, base).unwrap();
    let selected = fingerprint(&config, &key1);
    assert!(selected.starts_with("k-"), "{selected}");
    let now = std::time::SystemTime::now();
    let at = |d: i64| {
        let t = if d < 0 {
            now - std::time::Duration::from_secs(d.unsigned_abs())
        } else {
            now + std::time::Duration::from_secs(d as u64)
        };
        humantime::format_rfc3339_seconds(t).to_string()
    };
    let gw = Gateway::start(
        &sb,
        &format!(
            "{base}[inventory.names]\n\"{selected}\" = \"billing-service\"\n[[inventory.brownouts]]\nstart = \"{}\"\nend = \"{}\"\nclients = [\"billing-service\"]\noperations = [\"account_info\"]\n",
            at(-3600),
            at(3600)
        ),
    )
    .await;
    let body = || Some(Bytes::from_static(b"{}"));
    let (status, _, out) = send(
        gw.public,
        "POST",
        "/api/v1/account/info",
        &[("api-key", &key1)],
        body(),
    )
    .await;
    assert_eq!(status, 410);
    let out: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(out["code"], 4000);
    let message = out["message"].as_str().unwrap();
    assert!(
        message.starts_with("V1 API brownout") && message.contains("GET /api/v2/users/account"),
        "{message}"
    );
    // Another operation of the selected client, and the same operation of
    // another client: untouched.
    let (status, _, _) = send(
        gw.public,
        "POST",
        "/api/v1/run/list",
        &[("api-key", &key1)],
        body(),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _, _) = send(
        gw.public,
        "POST",
        "/api/v1/account/info",
        &[("api-key", KEY2)],
        body(),
    )
    .await;
    assert_eq!(status, 200);
    let inventory = gw.inventory().await;
    let billing = client(&inventory, |c| c["name"] == "billing-service");
    assert_eq!(billing["fingerprint"], selected.as_str());
    assert_eq!(billing["brownout_refusals"], 1);
    let other = client(&inventory, |c| c["fingerprint"] != selected.as_str());
    assert_eq!(other["brownout_refusals"], 0);
    gw.stop().await;
}

#[tokio::test]
async fn two_gateway_processes_share_one_postgres_inventory() {
    let Some(url) = postgres_url("inventory::two_gateway_processes_share_one_postgres_inventory")
    else {
        return;
    };
    let db = fresh_database(&url).await;
    let sb = sandbox().await;
    let key1 = sb.api_key().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("v1compat.toml");
    std::fs::write(
        &config,
        format!(
            "[listen]\npublic = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n[upstream]\nbase_url = \"http://{}\"\nservice_key = \"{key1}\"\n[retry]\nmax_attempts = 1\n[log]\nformat = \"json\"\n[compat]\nbusiness_error_status = \"200\"\n[inventory]\nstore = \"{db}\"\nsecret = \"shared-inventory-secret-0123\"\nflush_interval_ms = 3600000\n",
            sb.v2_addr()
        ),
    )
    .unwrap();
    let (mut a, gw_a) = serve_binary(&config, &[]).await;
    let (mut b, gw_b) = serve_binary(&config, &[]).await;
    three_clients(gw_a, &key1).await;
    three_clients(gw_b, &key1).await;
    // SIGTERM: each drains and flushes into the shared store.
    for child in [&mut a, &mut b] {
        let pid = child.id().to_string();
        assert!(std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        assert!(child.wait().unwrap().success());
        // Keys are logged nowhere, the inventory's work included.
        let log = child.log();
        assert!(log.contains("v1compat listening"), "{log}");
        for key in [key1.as_str(), KEY2] {
            assert!(!log.contains(key), "a key in the log: {log}");
        }
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_v1compat"))
        .args([
            "inventory",
            "--format",
            "json",
            "--config",
            config.to_str().unwrap(),
        ])
        .env_clear()
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let inventory: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Both processes' counts, added, not one overwriting the other.
    check_three(&inventory, &key1, 2);
}
