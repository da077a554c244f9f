//! Integration tests of the embedded sandbox: both surfaces over real HTTP on
//! 127.0.0.1:0, the clock moved with `/__sandbox/advance` (no sleeps).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use v1compat_sandbox::{LogEntries, Sandbox, SandboxConfig};

const MAPS: &str = "coreclaw~google-maps-scraper";
const MAPS_SLUG: &str = "01KBHMS6A8H6A3K5FJY11MQ99Z";
const BROKEN: &str = "coreclaw~broken-news-scraper";
const SLOW: &str = "coreclaw~slow-site-crawler";
const BULK: &str = "coreclaw~tiktok-comments-bulk";

struct Resp {
    status: u16,
    headers: http::HeaderMap,
    text: String,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

struct Env {
    sb: Sandbox,
    client: Client<HttpConnector, Full<Bytes>>,
}

async fn start_with(cfg: SandboxConfig) -> Env {
    let v2 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let v1 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sb = Sandbox::start(cfg, v2, v1).await.unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http();
    Env { sb, client }
}

/// A sandbox whose clock practically stands still unless advanced, so states seen by
/// the tests never depend on how fast the machine is.
async fn start() -> Env {
    start_with(SandboxConfig {
        speed: 0.001,
        ..SandboxConfig::default()
    })
    .await
}

impl Env {
    async fn raw(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> Result<Resp, String> {
        let mut b = http::Request::builder().method(method).uri(url);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        if body.is_some() {
            b = b.header("content-type", "application/json");
        }
        let req = b
            .body(Full::new(Bytes::from(body.unwrap_or("").to_string())))
            .unwrap();
        let resp = self
            .client
            .request(req)
            .await
            .map_err(|e| format!("request: {e}"))?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        Ok(Resp {
            status,
            headers,
            text: String::from_utf8_lossy(&bytes).into_owned(),
        })
    }

    fn v2(&self, path: &str) -> String {
        format!("http://{}{path}", self.sb.v2_addr())
    }

    fn v1(&self, path: &str) -> String {
        format!("http://{}{path}", self.sb.v1_addr())
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.sb.api_key())
    }

    async fn get(&self, path: &str) -> Resp {
        let auth = self.bearer();
        self.raw("GET", &self.v2(path), &[("authorization", &auth)], None)
            .await
            .unwrap()
    }

    async fn post(&self, path: &str, body: Value) -> Resp {
        let auth = self.bearer();
        self.raw(
            "POST",
            &self.v2(path),
            &[("authorization", &auth)],
            Some(&body.to_string()),
        )
        .await
        .unwrap()
    }

    async fn send(&self, method: &str, path: &str, body: Value) -> Resp {
        let auth = self.bearer();
        self.raw(
            method,
            &self.v2(path),
            &[("authorization", &auth)],
            Some(&body.to_string()),
        )
        .await
        .unwrap()
    }

    async fn v1_post(&self, path: &str, body: Value) -> Resp {
        let key = self.sb.api_key().to_string();
        self.raw(
            "POST",
            &self.v1(path),
            &[("api-key", &key)],
            Some(&body.to_string()),
        )
        .await
        .unwrap()
    }

    async fn advance(&self, seconds: f64) {
        let r = self
            .raw(
                "POST",
                &self.v2("/__sandbox/advance"),
                &[],
                Some(&json!({ "seconds": seconds }).to_string()),
            )
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.text);
    }

    /// Start an async V2 run and return its slug.
    async fn run(&self, worker: &str, custom: Value) -> String {
        let r = self
            .post(
                &format!("/api/v2/workers/{worker}/runs"),
                json!({"input": {"parameters": {"custom": custom}}}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        r.json()["data"]["run_slug"].as_str().unwrap().to_string()
    }

    async fn status(&self, slug: &str) -> Value {
        let r = self.get(&format!("/api/v2/worker-runs/{slug}")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        r.json()["data"].clone()
    }

    async fn set_faults(&self, rules: Value) {
        let r = self
            .raw(
                "POST",
                &self.v2("/__sandbox/faults"),
                &[],
                Some(&rules.to_string()),
            )
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.text);
    }
}

fn assert_error(r: &Resp, status: u16, code: i64) {
    assert_eq!(r.status, status, "{}", r.text);
    let v = r.json();
    assert_eq!(v["code"], code, "{}", r.text);
    assert!(
        v.get("data").is_none(),
        "V2 errors have no data: {}",
        r.text
    );
    assert!(v["request_id"].as_str().unwrap().starts_with("req-"));
    assert!(v["details"].is_array());
}

/// The commented example starting at `marker`, uncommented, up to the next blank
/// line that is followed by a line not starting with `#`.
fn uncomment_from(text: &str, marker: &str) -> String {
    let start = text.find(marker).unwrap();
    text[start..]
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| l.strip_prefix("# ").unwrap_or(l.trim_start_matches('#')))
        .map(|l| l.split("  #").next().unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn shipped_config_loads() {
    let text = include_str!("../../../config/sandbox.toml");
    let cfg = SandboxConfig::from_toml_str(text).unwrap();
    assert_eq!(cfg.api_key, "sandbox-key");
    assert_eq!(cfg.accounts.len(), 1);
    assert!(cfg.faults.is_empty());
    // The commented examples are valid too.
    let faults = uncomment_from(text, "# [[faults]]");
    let cfg = SandboxConfig::from_toml_str(&faults).unwrap_or_else(|e| panic!("{e}\n{faults}"));
    assert_eq!(cfg.faults.len(), 2);
    let workers = uncomment_from(text, "# [[workers]]");
    let cfg = SandboxConfig::from_toml_str(&workers).unwrap_or_else(|e| panic!("{e}\n{workers}"));
    assert_eq!(cfg.workers.unwrap().len(), 1);
}

#[tokio::test]
async fn auth_forms_and_errors() {
    let env = start().await;
    let key = env.sb.api_key().to_string();
    let url = env.v2("/api/v2/users/account");
    let bearer = env.bearer();
    for headers in [
        vec![("authorization", bearer.as_str())],
        vec![("api-key", key.as_str())],
    ] {
        let r = env.raw("GET", &url, &headers, None).await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text);
        let v = r.json();
        assert_eq!(v["code"], 0);
        assert_eq!(v["message"], "success");
        assert!(v["data"]["balance"].is_string());
        assert!(v["data"]["balance_expiration_at"].is_i64());
        assert!(v["data"].get("traffic").is_none());
    }
    let r = env
        .raw("GET", &format!("{url}?token={key}"), &[], None)
        .await
        .unwrap();
    assert_eq!(
        r.status, 200,
        "token is not an unknown parameter: {}",
        r.text
    );
    assert_error(&env.raw("GET", &url, &[], None).await.unwrap(), 401, 12001);
    assert_error(
        &env.raw("GET", &url, &[("api-key", "wrong")], None)
            .await
            .unwrap(),
        401,
        12002,
    );
    // Worker detail needs a key; the input schema and store do not.
    let r = env
        .raw(
            "GET",
            &env.v2(&format!("/api/v2/workers/{MAPS}")),
            &[],
            None,
        )
        .await
        .unwrap();
    assert_error(&r, 401, 12001);
    let r = env
        .raw(
            "GET",
            &env.v2(&format!("/api/v2/workers/{MAPS}/input-schema")),
            &[],
            None,
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert!(r.json()["data"]["input_schema"]["properties"].is_array());
    let r = env
        .raw("GET", &env.v2("/api/v2/store?keyword=maps"), &[], None)
        .await
        .unwrap();
    assert_eq!(r.json()["data"]["scraper"][0]["path"], MAPS);
    let r = env
        .raw(
            "GET",
            &env.v2("/api/v2/proxy/region?language=de"),
            &[],
            None,
        )
        .await
        .unwrap();
    assert_eq!(r.json()["data"]["list"][0]["code"], "US");
    env.sb.shutdown().await;
}

#[tokio::test]
async fn contract_checks() {
    let env = start().await;
    assert_error(&env.get("/api/v2/worker-runs?bogus=1").await, 422, 11000);
    assert_error(&env.get("/api/v2/worker-runs?limit=0").await, 422, 11000);
    assert_error(&env.get("/api/v2/worker-runs?limit=101").await, 422, 11000);
    assert_error(&env.get("/api/v2/worker-runs?offset=-1").await, 422, 11000);
    assert_error(
        &env.get("/api/v2/worker-runs?status=aborted").await,
        422,
        11000,
    );
    assert_eq!(
        env.get("/api/v2/worker-runs?limit=100&offset=0")
            .await
            .status,
        200
    );
    assert_error(&env.get("/api/v2/nothing-here").await, 404, 11004);
    assert_error(
        &env.get("/api/v2/workers/coreclaw/google-maps-scraper")
            .await,
        404,
        11004,
    );
    assert_error(
        &env.send("DELETE", "/api/v2/store", json!({})).await,
        405,
        11000,
    );
    assert_error(&env.get("/api/v2/workers/nope").await, 404, 50001);
    assert_error(&env.get("/api/v2/worker-runs/01NOPE").await, 404, 70001);
    assert_error(&env.get("/api/v2/worker-tasks/01NOPE").await, 404, 60001);

    let runs = format!("/api/v2/workers/{MAPS}/runs");
    // Flat input, unknown body field, wrong types, V1-only system field.
    assert_error(
        &env.post(&runs, json!({"input": {"keywords": ["x"]}})).await,
        422,
        11000,
    );
    assert_error(
        &env.post(&runs, json!({"scraper_slug": MAPS_SLUG})).await,
        422,
        11000,
    );
    assert_error(
        &env.post(&runs, json!({"is_async": "yes"})).await,
        422,
        11000,
    );
    assert_error(&env.post(&runs, json!({"limit": 500})).await, 422, 11000);
    assert_error(
        &env.post(
            &runs,
            json!({"input": {"parameters": {"custom": {}, "system": {"memory_bytes": 512}}}}),
        )
        .await,
        422,
        11000,
    );
    assert_error(
        &env.post(
            &runs,
            json!({"input": {"parameters": {"custom": {"keywords": "not-an-array"}}}}),
        )
        .await,
        422,
        11000,
    );
    // Malformed JSON.
    let auth = env.bearer();
    let r = env
        .raw(
            "POST",
            &env.v2(&runs),
            &[("authorization", &auth)],
            Some("{not json"),
        )
        .await
        .unwrap();
    assert_error(&r, 400, 11000);
    // Versions.
    assert_error(
        &env.post(&runs, json!({"version": "v9.9.9"})).await,
        400,
        50003,
    );
    let r = env.post(&runs, json!({"version": "latest"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let slug = r.json()["data"]["run_slug"].as_str().unwrap().to_string();
    assert_eq!(env.status(&slug).await["version"], "v1.2.6");
    let r = env
        .post(
            &format!("/api/v2/workers/{MAPS_SLUG}/runs"),
            json!({"version": "v1.0.0"}),
        )
        .await;
    let slug = r.json()["data"]["run_slug"].as_str().unwrap().to_string();
    assert_eq!(env.status(&slug).await["version"], "v1.0.0");
    // Another account does not see the run.
    let mut cfg = SandboxConfig::default();
    cfg.accounts
        .push(v1compat_sandbox::AccountConfig::with_key("other"));
    let env2 = start_with(cfg).await;
    let slug2 = env2.run(MAPS, json!({})).await;
    let r = env2
        .raw(
            "GET",
            &env2.v2(&format!("/api/v2/worker-runs/{slug2}")),
            &[("api-key", "other")],
            None,
        )
        .await
        .unwrap();
    assert_error(&r, 404, 70001);
    // Export checks.
    env.advance(100.0).await;
    assert_error(
        &env.get(&format!(
            "/api/v2/worker-runs/{slug}/result/export?format=pdf"
        ))
        .await,
        422,
        11000,
    );
    assert_error(
        &env.get(&format!(
            "/api/v2/worker-runs/{slug}/result/export?filter_keys=nope"
        ))
        .await,
        422,
        11000,
    );
    env.sb.shutdown().await;
    env2.sb.shutdown().await;
}

#[tokio::test]
async fn lifecycle_and_abort() {
    let env = start().await;
    let slug = env.run(MAPS, json!({"max_results": 30})).await;
    let d = env.status(&slug).await;
    assert_eq!(d["status"], "ready");
    assert_eq!(d["origin"], "api_v2");
    assert_eq!(d["scraper_slug"], MAPS_SLUG);
    assert!(d.get("err_msg").is_none());
    env.advance(1.5).await;
    let d = env.status(&slug).await;
    assert_eq!(d["status"], "running");
    assert_eq!(d["finished_at"], 0);
    assert_eq!(d["duration"], 0);
    env.advance(100.0).await;
    let d = env.status(&slug).await;
    assert_eq!(d["status"], "succeeded");
    assert_eq!(d["results"], 30);
    assert!(d["finished_at"].as_i64().unwrap() > d["started_at"].as_i64().unwrap());
    assert!(d["usage"].is_string());
    // The shortcuts see the latest run.
    assert_eq!(
        env.get("/api/v2/worker-runs/last").await.json()["data"]["slug"],
        slug
    );
    assert_eq!(
        env.get(&format!("/api/v2/workers/{MAPS}/runs/last"))
            .await
            .json()["data"]["slug"],
        slug
    );

    let failing = env.run(BROKEN, json!({})).await;
    env.advance(100.0).await;
    let d = env.status(&failing).await;
    assert_eq!(d["status"], "failed");
    assert!(!d["err_msg"].as_str().unwrap().is_empty());

    let slow = env.run(SLOW, json!({})).await;
    env.advance(30.0).await;
    assert_eq!(env.status(&slow).await["status"], "running");
    let r = env
        .post(&format!("/api/v2/worker-runs/{slow}/abort"), json!({}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.json().get("data").is_none());
    assert_eq!(env.status(&slow).await["status"], "aborting");
    env.advance(3.0).await;
    let d = env.status(&slow).await;
    assert_eq!(d["status"], "failed");
    assert_eq!(d["err_msg"], "run aborted");
    assert_error(
        &env.post(&format!("/api/v2/worker-runs/{slow}/abort"), json!({}))
            .await,
        400,
        70002,
    );

    // Run list: newest first, count = total, status filter.
    let r = env.get("/api/v2/worker-runs?limit=2").await.json();
    assert_eq!(r["data"]["count"], 3);
    assert_eq!(r["data"]["list"][0]["slug"], slow);
    assert_eq!(r["data"]["list"].as_array().unwrap().len(), 2);
    let r = env.get("/api/v2/worker-runs?status=failed").await.json();
    assert_eq!(r["data"]["count"], 2);
    let r = env
        .get(&format!("/api/v2/worker-runs?worker_id={MAPS_SLUG}"))
        .await
        .json();
    assert_eq!(r["data"]["count"], 1);

    // Logs (objects by default).
    let r = env
        .get(&format!("/api/v2/worker-runs/{slug}/log"))
        .await
        .json();
    assert_eq!(r["data"]["result_count"], 30);
    assert!(r["data"]["list"][0]["timestamp"].is_i64());
    let all = r["data"]["all_logs_url"].as_str().unwrap().to_string();
    let txt = env.raw("GET", &all, &[], None).await.unwrap();
    assert!(txt.text.contains("Execution completed."), "{}", txt.text);

    // Rerun copies the run (callback_url is required on V2 rerun).
    assert_error(
        &env.post(&format!("/api/v2/worker-runs/{slug}/rerun"), json!({}))
            .await,
        422,
        11000,
    );
    let r = env
        .post(
            &format!("/api/v2/worker-runs/{slug}/rerun"),
            json!({"callback_url": "http://127.0.0.1:9/cb"}),
        )
        .await;
    let new = r.json()["data"]["run_slug"].as_str().unwrap().to_string();
    assert_ne!(new, slug);
    env.advance(100.0).await;
    assert_eq!(env.status(&new).await["results"], 30);
    env.sb.shutdown().await;
}

#[tokio::test]
async fn pagination() {
    let env = start().await;
    let slug = env.run(MAPS, json!({"max_results": 45})).await;
    env.advance(100.0).await;
    let page = |q: &str| format!("/api/v2/worker-runs/{slug}/result?{q}");
    let p0 = env.get(&page("offset=0&limit=20")).await.json()["data"].clone();
    let p1 = env.get(&page("offset=1&limit=20")).await.json()["data"].clone();
    assert_eq!(p0, p1);
    assert_eq!(p1["page_index"], 1);
    assert_eq!(p1["page_size"], 20);
    assert_eq!(p1["count"], 45);
    assert_eq!(p1["headers"][0], json!({"key": "title", "label": "Title"}));
    let row = &p1["list"][0];
    assert_eq!(row["__coreclaw_data_id__"].as_str().unwrap().len(), 64);
    assert!(row["rating"].is_number());
    let p3 = env.get(&page("offset=3&limit=20")).await.json()["data"].clone();
    assert_eq!(p3["list"].as_array().unwrap().len(), 5);
    let p4 = env.get(&page("offset=4&limit=20")).await.json()["data"].clone();
    assert_eq!(p4["list"], json!([]));
    let d = env.get(&page("")).await.json()["data"].clone();
    assert_eq!(d["page_size"], 20);
    // Same input, same rows.
    let again = env.run(MAPS, json!({"max_results": 45})).await;
    env.advance(100.0).await;
    let other = env
        .get(&format!(
            "/api/v2/worker-runs/{again}/result?offset=1&limit=20"
        ))
        .await
        .json();
    assert_eq!(other["data"]["list"], p1["list"]);
    env.sb.shutdown().await;
}

#[tokio::test]
async fn bulk_worker_and_export_csv() {
    let env = start().await;
    let slug = env.run(BULK, json!({})).await;
    env.advance(100.0).await;
    let d = env.status(&slug).await;
    assert!(d["results"].as_u64().unwrap() > 2500);
    let r = env
        .get(&format!(
            "/api/v2/worker-runs/{slug}/result/export?format=CSV&filter_keys=comment_id,likes"
        ))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let url = r.json()["data"]["download_url"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(url.contains("?sign="));
    let file = env.raw("GET", &url, &[], None).await.unwrap();
    assert_eq!(file.status, 200);
    let lines: Vec<&str> = file.text.lines().collect();
    assert_eq!(lines[0], "comment_id,likes");
    assert_eq!(lines.len() as u64, d["results"].as_u64().unwrap() + 1);
    let first = env
        .get(&format!(
            "/api/v2/worker-runs/{slug}/result?offset=1&limit=1"
        ))
        .await
        .json();
    let row = &first["data"]["list"][0];
    assert_eq!(
        lines[1],
        format!("{},{}", row["comment_id"].as_str().unwrap(), row["likes"])
    );
    // JSON export of the latest run.
    let r = env.get("/api/v2/worker-runs/last/export?format=json").await;
    let url = r.json()["data"]["download_url"]
        .as_str()
        .unwrap()
        .to_string();
    let file = env.raw("GET", &url, &[], None).await.unwrap();
    let rows: Value = serde_json::from_str(&file.text).unwrap();
    assert_eq!(
        rows.as_array().unwrap().len() as u64,
        d["results"].as_u64().unwrap()
    );
    env.sb.shutdown().await;
}

#[tokio::test]
async fn sync_runs() {
    let cfg = SandboxConfig {
        speed: 2000.0,
        ..SandboxConfig::default()
    };
    let env = start_with(cfg).await;
    let r = env
        .post(
            &format!("/api/v2/workers/{MAPS}/runs"),
            json!({"is_async": false, "offset": 2, "limit": 10, "input": {"parameters": {"custom": {"max_results": 25}}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let d = r.json()["data"].clone();
    assert_eq!(d["run_status"], "succeeded");
    assert_eq!(d["error_message"], "");
    assert!(d["execution_end_timestamp"].as_i64().unwrap() > 0);
    assert_eq!(d["results"]["count"], 25);
    assert_eq!(d["results"]["page_index"], 2);
    assert_eq!(d["results"]["list"].as_array().unwrap().len(), 10);
    let slug = d["run_slug"].as_str().unwrap();
    let r = env
        .post(
            &format!("/api/v2/worker-runs/{slug}/rerun"),
            json!({"is_async": false, "callback_url": "http://127.0.0.1:9/x"}),
        )
        .await;
    let d = r.json()["data"].clone();
    assert_eq!(d["is_finished"], true);
    assert!(d.get("error_message").is_none());
    assert_eq!(d["results"]["count"], 25);
    env.sb.shutdown().await;
}

#[tokio::test]
async fn tasks() {
    let env = start().await;
    let r = env
        .post(
            "/api/v2/worker-tasks",
            json!({"worker_id": MAPS, "title": "Coffee", "input": {"parameters": {"custom": {"max_results": 7}}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let task = r.json()["data"]["slug"].as_str().unwrap().to_string();
    assert_error(
        &env.post(
            "/api/v2/worker-tasks",
            json!({"worker_id": MAPS, "title": "x", "input": {"max_results": 7}}),
        )
        .await,
        422,
        11000,
    );
    let t = env
        .get(&format!("/api/v2/worker-tasks/{task}"))
        .await
        .json();
    assert_eq!(t["data"]["worker_slug"], MAPS_SLUG);
    let r = env
        .send(
            "PUT",
            &format!("/api/v2/worker-tasks/{task}"),
            json!({"title": "Tea"}),
        )
        .await;
    assert_eq!(r.json()["data"], json!({}));
    let r = env
        .send(
            "PUT",
            &format!("/api/v2/worker-tasks/{task}/input"),
            json!({"input": {"parameters": {"custom": {"max_results": 9}}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let i = env
        .get(&format!("/api/v2/worker-tasks/{task}/input"))
        .await
        .json();
    assert_eq!(i["data"]["input"]["parameters"]["custom"]["max_results"], 9);
    let l = env.get("/api/v2/worker-tasks").await.json();
    assert_eq!(l["data"]["count"], 1);
    assert_eq!(l["data"]["list"][0]["title"], "Tea");
    let r = env
        .post(&format!("/api/v2/worker-tasks/{task}/runs"), json!({}))
        .await;
    let run = r.json()["data"]["run_slug"].as_str().unwrap().to_string();
    env.advance(100.0).await;
    assert_eq!(env.status(&run).await["results"], 9);
    let r = env
        .send("DELETE", &format!("/api/v2/worker-tasks/{task}"), json!({}))
        .await;
    assert_eq!(r.status, 200);
    assert!(r.json().get("data").is_none());
    assert_error(
        &env.send("DELETE", &format!("/api/v2/worker-tasks/{task}"), json!({}))
            .await,
        404,
        60001,
    );
    env.sb.shutdown().await;
}

/// A tiny server on port 0 that forwards every POSTed JSON body to a channel.
async fn callback_receiver() -> (String, tokio::sync::mpsc::UnboundedReceiver<Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let tx = tx.clone();
                        async move {
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|c| c.to_bytes())
                                .unwrap_or_default();
                            if let Ok(v) = serde_json::from_slice::<Value>(&body) {
                                let _ = tx.send(v);
                            }
                            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                                Bytes::from_static(b"ok"),
                            )))
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (format!("http://{addr}/hook"), rx)
}

/// The first received callback matching `pred` (earlier ones are skipped).
async fn recv_until(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Value>,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    loop {
        let v = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("callback within 5 s")
            .expect("receiver open");
        if pred(&v) {
            return v;
        }
    }
}

#[tokio::test]
async fn callbacks_delivered() {
    let env = start().await;
    let (url, mut rx) = callback_receiver().await;
    let r = env
        .post(
            &format!("/api/v2/workers/{MAPS}/runs"),
            json!({"callback_url": url, "input": {"parameters": {"custom": {"max_results": 3}}}}),
        )
        .await;
    let slug = r.json()["data"]["run_slug"].as_str().unwrap().to_string();
    env.advance(100.0).await;
    // An intermediate `running` callback may come first if the machine is slow.
    let got = recv_until(&mut rx, |v| v["run_status"] == "succeeded").await;
    assert_eq!(got["run_slug"], slug);
    assert_eq!(got["run_status"], "succeeded");
    assert_eq!(got["result_count"], 3);
    for k in [
        "error_message",
        "execution_start_timestamp",
        "execution_end_timestamp",
        "running_duration",
        "result_message",
    ] {
        assert!(got.get(k).is_some(), "{k} missing in {got}");
    }

    // A V1-started run (a V2-saved task run through V1) reports in the V1 form.
    let r = env
        .post(
            "/api/v2/worker-tasks",
            json!({"worker_id": MAPS_SLUG, "title": "t", "input": {"parameters": {"custom": {"max_results": 2}}}}),
        )
        .await;
    let task = r.json()["data"]["slug"].as_str().unwrap().to_string();
    let r = env
        .v1_post(
            "/api/v1/task/run",
            json!({"task_slug": task, "callback_url": url}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v1_slug = r.json()["data"]["run_slug"].as_str().unwrap().to_string();
    env.advance(100.0).await;
    let got = recv_until(&mut rx, |v| {
        v["run_slug"] == v1_slug.as_str() && v["status"] == 3
    })
    .await;
    assert_eq!(
        got,
        json!({"run_slug": v1_slug, "status": 3, "results": 2, "usage": got["usage"].clone()})
    );
    assert!(got["usage"].is_string());
    env.sb.shutdown().await;
}

#[tokio::test]
async fn faults() {
    let env = start().await;
    let acct = "/api/v2/users/account";
    env.set_faults(json!([{"route": "getAccount", "kind": "error", "status": 503, "code": 10000, "message": "down", "times": 1}])).await;
    let r = env.get(acct).await;
    assert_error(&r, 503, 10000);
    assert_eq!(r.json()["message"], "down");
    assert_eq!(env.get(acct).await.status, 200, "times=1 is used up");

    env.set_faults(json!([{"route": "*", "kind": "rate_limit", "retry_after": 7, "times": 1}]))
        .await;
    let r = env.get(acct).await;
    assert_error(&r, 429, 13000);
    assert_eq!(r.headers.get("retry-after").unwrap(), "7");

    env.set_faults(json!([{"route": "getAccount", "kind": "malformed", "times": 1}]))
        .await;
    let r = env.get(acct).await;
    assert_eq!(r.status, 200);
    assert!(serde_json::from_str::<Value>(&r.text).is_err());

    env.set_faults(
        json!([{"route": "getAccount", "kind": "latency", "latency_ms": 150, "times": 1}]),
    )
    .await;
    let t = Instant::now();
    assert_eq!(env.get(acct).await.status, 200);
    assert!(t.elapsed() >= Duration::from_millis(150));

    let auth = env.bearer();
    env.set_faults(json!([{"route": "getAccount", "kind": "truncated", "times": 1}]))
        .await;
    let r = env
        .raw("GET", &env.v2(acct), &[("authorization", &auth)], None)
        .await;
    assert!(
        r.is_err(),
        "truncated body must fail: {:?}",
        r.map(|r| r.text)
    );

    env.set_faults(json!([{"route": "getAccount", "kind": "drop", "times": 1}]))
        .await;
    let r = env
        .raw("GET", &env.v2(acct), &[("authorization", &auth)], None)
        .await;
    assert!(r.is_err(), "dropped connection must fail");
    assert_eq!(env.get(acct).await.status, 200);

    // Listing and clearing; other routes are unaffected by a route-specific rule.
    env.set_faults(json!([{"route": "getWorkerRun", "kind": "drop"}]))
        .await;
    let list = env
        .raw("GET", &env.v2("/__sandbox/faults"), &[], None)
        .await
        .unwrap()
        .json();
    assert_eq!(list[0]["kind"], "drop");
    assert_eq!(env.get(acct).await.status, 200);
    let r = env
        .raw("DELETE", &env.v2("/__sandbox/faults"), &[], None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let bad = env
        .raw(
            "POST",
            &env.v2("/__sandbox/faults"),
            &[],
            Some(r#"[{"route":"*","kind":"explode"}]"#),
        )
        .await
        .unwrap();
    assert_eq!(bad.status, 400);
    env.sb.shutdown().await;
}

#[tokio::test]
async fn request_log_redacts_credentials() {
    let env = start().await;
    let key = env.sb.api_key().to_string();
    env.raw("DELETE", &env.v2("/__sandbox/requests"), &[], None)
        .await
        .unwrap();
    env.get("/api/v2/users/account").await;
    env.raw(
        "GET",
        &env.v2(&format!("/api/v2/users/account?token={key}")),
        &[],
        None,
    )
    .await
    .unwrap();
    env.raw(
        "GET",
        &env.v2("/api/v2/users/account"),
        &[("api-key", &key)],
        None,
    )
    .await
    .unwrap();
    env.post(
        &format!("/api/v2/workers/{MAPS}/runs"),
        json!({"is_async": true}),
    )
    .await;
    let log = env
        .raw("GET", &env.v2("/__sandbox/requests"), &[], None)
        .await
        .unwrap()
        .json();
    let log = log.as_array().unwrap();
    assert_eq!(log.len(), 4);
    assert_eq!(log[0]["auth"], "bearer");
    assert_eq!(log[0]["headers"]["authorization"], "<redacted>");
    assert_eq!(log[0]["operation"], "getAccount");
    assert_eq!(log[1]["auth"], "token");
    assert!(!log[1]["query"].as_str().unwrap().contains(&key));
    assert_eq!(log[2]["auth"], "api-key");
    assert_eq!(log[2]["headers"]["api-key"], "<redacted>");
    assert_eq!(log[3]["body"], json!({"is_async": true}));
    assert_eq!(log[3]["operation"], "runWorker");
    assert!(!serde_json::to_string(&log).unwrap().contains(&key));
    env.sb.shutdown().await;
}

#[tokio::test]
async fn string_logs() {
    let cfg = SandboxConfig {
        log_entries: LogEntries::Strings,
        ..SandboxConfig::default()
    };
    let env = start_with(cfg).await;
    let slug = env.run(MAPS, json!({})).await;
    env.advance(100.0).await;
    let r = env
        .get(&format!("/api/v2/worker-runs/{slug}/log"))
        .await
        .json();
    let first = r["data"]["list"][0].as_str().unwrap().to_string();
    assert!(first.contains("Z INFO SYSTEM: Subtask-["), "{first}");
    assert_eq!(&first[4..5], "-");
    env.sb.shutdown().await;
}

#[tokio::test]
async fn v1_surface() {
    let env = start().await;
    // Public catalog.
    let r = env
        .raw(
            "GET",
            &env.v1("/api/scraper?slug=coreclaw/google-maps-scraper"),
            &[],
            None,
        )
        .await
        .unwrap();
    let d = r.json();
    assert_eq!(d["code"], 0);
    assert_eq!(d["data"]["version"], "v1.2.6");
    assert_eq!(d["data"]["parameters"]["system"]["memory_bytes"], 512);
    assert!(d["data"]["parameters"]["custom"]["properties"].is_array());
    let r = env
        .raw("GET", &env.v1("/api/scraper?slug=nope"), &[], None)
        .await
        .unwrap();
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json(),
        json!({"code": 50001, "message": "Script does not exist", "data": null})
    );
    let r = env
        .raw("GET", &env.v1("/api/store?search=maps"), &[], None)
        .await
        .unwrap();
    assert_eq!(
        r.json()["data"]["scraper"][0],
        json!({"slug": MAPS_SLUG, "title": "Google Maps Scraper", "description": "Extract places, ratings and contact data from Google Maps."})
    );
    assert_eq!(
        env.raw("GET", &env.v1("/api/store?search="), &[], None)
            .await
            .unwrap()
            .status,
        400
    );

    // Auth and unknown paths.
    let r = env
        .raw("POST", &env.v1("/api/v1/account/info"), &[], Some("{}"))
        .await
        .unwrap();
    assert_eq!(r.status, 401);
    assert_eq!(
        r.json(),
        json!({"code": 20001, "message": "Invalid API key", "data": null})
    );
    let r = env.v1_post("/api/v1/nothing", json!({})).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["code"], 4040);
    let r = env.v1_post("/api/v1/account/info", json!({})).await;
    assert!(r.json()["data"]["traffic"].is_i64());

    // A run through V1: detail with integer status, result page with format.
    let r = env
        .v1_post(
            "/api/v1/scraper/run",
            json!({"scraper_slug": "coreclaw/google-maps-scraper", "is_async": true,
                   "input": {"parameters": {"system": {"cpus": 0.125, "memory": 512}, "custom": {"max_results": 12}}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let slug = r.json()["data"]["run_slug"].as_str().unwrap().to_string();
    let d = env
        .v1_post("/api/v1/run/detail", json!({"run_slug": slug}))
        .await
        .json();
    assert_eq!(d["data"]["status"], 1);
    assert_eq!(d["data"]["err_msg"], "");
    assert_eq!(d["data"]["origin"], "api");
    assert_eq!(d["data"].as_object().unwrap().len(), 13);
    env.advance(100.0).await;
    let d = env
        .v1_post("/api/v1/run/detail", json!({"run_slug": slug}))
        .await
        .json();
    assert_eq!(d["data"]["status"], 3);
    let p = env
        .v1_post("/api/v1/run/result/list", json!({"run_slug": slug}))
        .await
        .json();
    assert_eq!(p["data"]["count"], 12);
    assert_eq!(p["data"]["page_size"], 10);
    assert_eq!(p["data"]["list"].as_array().unwrap().len(), 10);
    assert_eq!(
        p["data"]["headers"][2],
        json!({"label": "Rating", "key": "rating", "format": "number"})
    );
    assert_eq!(p["data"]["headers"][0]["format"], "text");
    // The same run seen through V2 has the same rows.
    let v2 = env
        .get(&format!(
            "/api/v2/worker-runs/{slug}/result?offset=1&limit=10"
        ))
        .await
        .json();
    assert_eq!(v2["data"]["list"], p["data"]["list"]);

    let l = env
        .v1_post(
            "/api/v1/run/list",
            json!({"page_index": 1, "page_size": 1000, "status": 0}),
        )
        .await
        .json();
    assert_eq!(l["data"]["count"], 1);
    let log = env
        .v1_post("/api/v1/run/last/log", json!({"run_slug": slug}))
        .await
        .json();
    assert_eq!(log["data"]["list"][0]["type"], 2);
    let e = env
        .v1_post(
            "/api/v1/run/result/export",
            json!({"run_slug": slug, "format": "csv", "filter_keys": ["title"]}),
        )
        .await
        .json();
    let file = env
        .raw(
            "GET",
            e["data"]["download_url"].as_str().unwrap(),
            &[],
            None,
        )
        .await
        .unwrap();
    assert_eq!(file.text.lines().count(), 13);

    // Errors.
    let r = env
        .v1_post("/api/v1/scraper/abort", json!({"run_slug": slug}))
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.json(),
        json!({"code": 70002, "message": "Failed to abort run", "data": null})
    );
    let r = env
        .v1_post("/api/v1/run/detail", json!({"run_slug": "01NOPE"}))
        .await;
    assert_eq!((r.status, r.json()["code"].clone()), (404, json!(70001)));
    let r = env
        .v1_post("/api/v1/task/run", json!({"task_slug": "01NOPE"}))
        .await;
    // The native surface names what was wrong, as V1 did for its own validation.
    assert_eq!(
        r.json(),
        json!({"code": 4000, "message": "Invalid request parameters: callback_url is required", "data": null})
    );
    let r = env
        .v1_post(
            "/api/v1/task/run",
            json!({"task_slug": "01NOPE", "callback_url": "http://127.0.0.1:9/"}),
        )
        .await;
    assert_eq!((r.status, r.json()["code"].clone()), (404, json!(60001)));
    let r = env
        .v1_post("/api/v1/rerun", json!({"run_slug": slug}))
        .await;
    assert_eq!(r.status, 400);
    let r = env
        .v1_post(
            "/api/v1/scraper/run",
            json!({"scraper_slug": "nope", "input": {"parameters": {"custom": {}}}}),
        )
        .await;
    assert_eq!((r.status, r.json()["code"].clone()), (404, json!(50001)));

    // Abort of a running V1 run.
    let r = env
        .v1_post("/api/v1/scraper/run", json!({"scraper_slug": SLOW.replace('~', "/"), "input": {"parameters": {"custom": {}}}}))
        .await;
    let slow = r.json()["data"]["run_slug"].as_str().unwrap().to_string();
    let r = env
        .v1_post("/api/v1/scraper/abort", json!({"run_slug": slow}))
        .await;
    assert_eq!(
        r.json(),
        json!({"code": 0, "message": "success", "data": null})
    );
    let d = env
        .v1_post("/api/v1/run/detail", json!({"run_slug": slow}))
        .await
        .json();
    assert_eq!(d["data"]["status"], 5);
    env.sb.shutdown().await;
}

#[tokio::test]
async fn v1_sync_run() {
    let cfg = SandboxConfig {
        speed: 2000.0,
        ..SandboxConfig::default()
    };
    let env = start_with(cfg).await;
    let r = env
        .v1_post(
            "/api/v1/scraper/run",
            json!({"scraper_slug": MAPS_SLUG, "version": "v1.2.6", "is_async": false, "page_index": 1, "page_size": 5,
                   "input": {"parameters": {"custom": {"max_results": 8}}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let d = r.json()["data"].clone();
    assert_eq!(d["run_status"], "completed");
    assert!(
        d["execution_start_timestamp"].as_i64().unwrap() > 1_000_000_000_000,
        "milliseconds"
    );
    assert_eq!(d["results"]["count"], 8);
    assert_eq!(d["results"]["list"].as_array().unwrap().len(), 5);
    assert_eq!(d["results"]["headers"][0]["format"], "text");
    env.sb.shutdown().await;
}

#[tokio::test]
async fn run_list_time_range() {
    let env = start().await;
    let slug = env.run(MAPS, json!({})).await;
    let started = env.status(&slug).await["started_at"].as_i64().unwrap();
    let day = started - started.rem_euclid(86_400);
    let r = env
        .get(&format!(
            "/api/v2/worker-runs?start_time={day}&end_time={day}"
        ))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["data"]["count"], 1);
    // Only one end given, or a range across months: rejected.
    assert_error(
        &env.get(&format!("/api/v2/worker-runs?start_time={day}"))
            .await,
        422,
        11000,
    );
    let far = day - 90 * 86_400;
    assert_error(
        &env.get(&format!(
            "/api/v2/worker-runs?start_time={far}&end_time={day}"
        ))
        .await,
        422,
        11000,
    );
    env.sb.shutdown().await;
}

#[tokio::test]
async fn shutdown_releases_pending_sync_request() {
    let env = start().await;
    let r = env
        .raw("GET", &env.v2("/__sandbox/healthz"), &[], None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let auth = env.bearer();
    let url = env.v2(&format!("/api/v2/workers/{SLOW}/runs"));
    let client = env.client.clone();
    let pending = tokio::spawn(async move {
        let req = http::Request::post(url)
            .header("authorization", auth)
            .body(Full::new(Bytes::from(
                json!({"is_async": false}).to_string(),
            )))
            .unwrap();
        client.request(req).await.map(|r| r.status().as_u16())
    });
    // Wait until the run exists (the request is then parked), without sleeping.
    let mut tries = 0;
    loop {
        let l = env.get("/api/v2/worker-runs").await.json();
        if l["data"]["count"] == 1 {
            break;
        }
        tries += 1;
        assert!(tries < 10_000);
        tokio::task::yield_now().await;
    }
    let t = Instant::now();
    env.sb.shutdown().await;
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "shutdown waited for the sync run"
    );
    // The parked request was answered (with the run still in progress) or cut.
    let _ = pending.await.unwrap();
}

/// Send one raw HTTP/1.1 request and read until the server closes.
async fn raw_exchange(addr: std::net::SocketAddr, request: &str) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    out
}

#[tokio::test]
async fn truncated_and_drop_on_the_wire() {
    let env = start().await;
    let req = format!(
        "GET /api/v2/users/account HTTP/1.1\r\nhost: x\r\napi-key: {}\r\n\r\n",
        env.sb.api_key()
    );
    env.set_faults(json!([{"route": "getAccount", "kind": "truncated", "times": 1}]))
        .await;
    let out = String::from_utf8_lossy(&raw_exchange(env.sb.v2_addr(), &req).await).into_owned();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    let announced: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        !body.is_empty() && body.len() < announced,
        "{} vs {announced}",
        body.len()
    );

    env.set_faults(json!([{"route": "getAccount", "kind": "drop", "times": 1}]))
        .await;
    assert!(raw_exchange(env.sb.v2_addr(), &req).await.is_empty());
    env.sb.shutdown().await;
}

#[tokio::test]
async fn odd_input_never_breaks_the_service() {
    let env = start().await;
    let slug = env.run(MAPS, json!({})).await;
    let deep = "[".repeat(500) + &"]".repeat(500);
    let huge_page =
        format!("/api/v2/worker-runs/{slug}/result?offset=18446744073709551615&limit=100");
    let cases: Vec<(&str, String, Option<String>)> = vec![
        ("GET", "/api/v2/worker-runs/%FF".into(), None),
        ("GET", "/api/v2//worker-runs".into(), None),
        (
            "GET",
            format!("/api/v2/worker-runs/{}", "A".repeat(5000)),
            None,
        ),
        (
            "GET",
            "/api/v2/worker-runs?offset=%FF%FE&limit=%00".into(),
            None,
        ),
        (
            "GET",
            "/api/v2/worker-runs?start_time=9223372036854775807&end_time=9223372036854775807"
                .into(),
            None,
        ),
        ("GET", huge_page.clone(), None),
        ("GET", "/api/v2/store?limit=1e3".into(), None),
        (
            "POST",
            format!("/api/v2/workers/{MAPS}/runs"),
            Some(deep.clone()),
        ),
        (
            "POST",
            format!("/api/v2/workers/{MAPS}/runs"),
            Some(r#"{"limit": 1e400}"#.into()),
        ),
        (
            "POST",
            format!("/api/v2/workers/{MAPS}/runs"),
            Some(r#"{"limit": 5.0, "offset": -3}"#.into()),
        ),
        (
            "POST",
            format!("/api/v2/workers/{MAPS}/runs"),
            Some(r#"{"input": null}"#.into()),
        ),
        (
            "POST",
            format!("/api/v2/workers/{MAPS}/runs"),
            Some(
                r#"{"input": {"parameters": {"custom": {"max_results": 18446744073709551615}}}}"#
                    .into(),
            ),
        ),
        (
            "POST",
            format!("/api/v2/workers/{MAPS}/runs"),
            Some("\u{0}\u{1}".into()),
        ),
        (
            "POST",
            "/api/v2/worker-tasks".into(),
            Some(r#"{"worker_id": 5, "title": [], "input": "x", "schedule_time": "99:99"}"#.into()),
        ),
        (
            "PUT",
            "/api/v2/worker-tasks/x/input".into(),
            Some("[]".into()),
        ),
        (
            "POST",
            format!("/api/v2/worker-runs/{slug}/rerun"),
            Some(r#"{"callback_url": "not a url"}"#.into()),
        ),
        (
            "GET",
            format!("/api/v2/worker-runs/{slug}/result/export?format=&filter_keys=,,,"),
            None,
        ),
    ];
    let auth = env.bearer();
    for (method, path, body) in &cases {
        let r = env
            .raw(
                method,
                &env.v2(path),
                &[("authorization", &auth)],
                body.as_deref(),
            )
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let v = r.json();
        assert!(v["request_id"].is_string(), "{method} {path}: {}", r.text);
        if r.status != 200 {
            assert!(
                v["code"].as_i64().unwrap() > 0,
                "{method} {path}: {}",
                r.text
            );
        }
    }
    assert_error(&env.get(&huge_page).await, 422, 11000);
    let far_page =
        format!("/api/v2/worker-runs/{slug}/result?offset=9223372036854775807&limit=100");
    let r = env.get(&far_page).await.json();
    assert_eq!(r["data"]["list"], json!([]));
    let v1_cases = [
        (
            "/api/v1/run/result/list",
            r#"{"run_slug": 5, "page_index": -1}"#,
        ),
        (
            "/api/v1/run/list",
            r#"{"page_index": 99999999999999, "page_size": 1000}"#,
        ),
        (
            "/api/v1/run/result/export",
            r#"{"run_slug": "x", "format": "csv", "filter_keys": [1]}"#,
        ),
        (
            "/api/v1/scraper/run",
            r#"{"scraper_slug": "", "input": []}"#,
        ),
        ("/api/v1/account/info", "not json"),
    ];
    let key = env.sb.api_key().to_string();
    for (path, body) in v1_cases {
        let r = env
            .raw("POST", &env.v1(path), &[("api-key", &key)], Some(body))
            .await
            .unwrap();
        let v = r.json();
        assert_eq!(v.as_object().unwrap().len(), 3, "{path}: {}", r.text);
    }
    let r = env
        .raw("GET", &env.v2("/__sandbox/healthz"), &[], None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    env.sb.shutdown().await;
}
