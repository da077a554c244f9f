//! The shadow report in a real browser: a replay of the sandbox through a
//! gateway with two `[compat]` settings changed (`worker_memory_field =
//! "memory"`, `business_error_status = "200"`), its HTML page rendered by
//! headless Chromium (`--dump-dom`, and a screenshot), and the rendered page
//! checked for the latency charts, the samples with their request and both
//! answers, the marked fields, the explanations and what the ignore rules
//! hid. Needs Debian's `chromium`, which `.ci/run` installs.
//!
//! `V1COMPAT_REPORT_OUT=<dir>` keeps the page and the screenshot there.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use v1compat::shadow::replay::{replay, TranslatedSide};
use v1compat::upstream::HttpUpstream;

use crate::required_tools::tool_missing;
use crate::shadow::{report_of, write_lines, World};
use crate::support::TestGateway;

const TEST: &str = "shadow_report::the_report_renders_in_headless_chromium";

/// Runs headless Chromium on `page` with `args`, each run with its own
/// empty profile and none of its background connections (the network is
/// closed), bounded in time. Returns stdout.
async fn chromium(page: &Path, args: &[String]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .args(args)
    .arg(format!("file://{}", page.display()))
    .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("chromium did not finish within 120 s")
        .expect("chromium did not start");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn count(s: &str, what: &str) -> usize {
    s.matches(what).count()
}

/// The text of the first element opening with `open`, up to `close`.
fn element<'a>(dom: &'a str, open: &str, close: &str) -> &'a str {
    let start = dom
        .find(open)
        .unwrap_or_else(|| panic!("no {open} in the page"));
    let rest = &dom[start..];
    &rest[..rest.find(close).map_or(rest.len(), |e| e + close.len())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_renders_in_headless_chromium() {
    if tool_missing(
        TEST,
        "chromium",
        "Debian's chromium is not installed (`apt-get install -y chromium`; .ci/run installs it)",
    ) {
        return;
    }
    let w = World::start().await;
    let extra = "[compat]\nworker_memory_field = \"memory\"\nbusiness_error_status = \"200\"\n";
    let text = w.config(extra);
    let cfg = v1compat::config::load(&text, Vec::new()).unwrap();
    let upstream = Arc::new(HttpUpstream::new(cfg.upstream.clone()).unwrap());
    let gw = TestGateway::start(&text, upstream).await;

    // Every read-only operation, and enough run lists for percentiles.
    let mut lines: Vec<Value> = std::fs::read_to_string(w.requests())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for i in 0..24 {
        lines.push(
            json!({"operation": "run_list", "body": {"page_index": 1, "page_size": 1 + i % 5}}),
        );
    }
    let input = w.path("browser-requests.jsonl");
    write_lines(&input, &lines);
    let gateway_url: url::Url = format!("http://{}", gw.addr).parse().unwrap();
    let opts = w.options(
        &input,
        "browser.jsonl",
        TranslatedSide::Gateway(gateway_url),
    );
    let stats = replay(opts.clone()).await.unwrap();
    assert_eq!((stats.sent, stats.failed), (59, 0), "{stats:?}");

    let report = report_of(&opts.out, &cfg);
    let summary = report.text();
    // The model first: one rename, and the status differences each named
    // with the setting that causes them.
    let rename = "data.parameters.system.memory_bytes → data.parameters.system.memory";
    let real = report.real_fields();
    assert!(
        real.iter()
            .any(|(op, k, n)| op == "worker_detail" && k == rename && *n == 2),
        "{summary}"
    );
    let statuses: Vec<&(String, String, u64)> =
        real.iter().filter(|(_, k, _)| k == "http_status").collect();
    assert!(!statuses.is_empty(), "{summary}");
    for (op, key, _) in &statuses {
        let why = report.explanations(op, key);
        assert!(
            why.first().is_some_and(|e| e.checked
                && e.setting.as_deref() == Some("compat.business_error_status = \"200\"")),
            "{op}: {why:?}\n{summary}"
        );
    }
    assert!(
        summary.contains("Besides, ignore rules hid"),
        "what the rules hid is told under the verdict\n{summary}"
    );

    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    std::fs::write(&page, report.html()).unwrap();
    let dom = chromium(&page, &["--dump-dom".to_owned()]).await;

    // What the browser built: one chart per operation, the run list's with
    // a box (28 answers a side), the others saying they have too few.
    let ops = report.tally.ops.len();
    assert_eq!(ops, 9);
    assert_eq!(count(&dom, "<svg class=\"latency\""), ops, "{dom}");
    let run_list = element(
        &dom,
        "<figure class=\"chart\" id=\"latency-f-run_list-\"",
        "</figure>",
    );
    assert_eq!(count(run_list, "class=\"box\""), 2, "{run_list}");
    assert_eq!(count(run_list, "class=\"dot\""), 2 * 28, "{run_list}");
    assert!(dom.contains("too few for percentiles (fewer than 20)"));
    assert!(!dom.contains("<script"));

    // The verdict, and right under it what the ignore rules hid.
    let verdict = dom.find("id=\"verdict\"").unwrap();
    let hidden = dom.find("id=\"hidden\"").unwrap();
    assert!(verdict < hidden && hidden < dom.find("class=\"cards\"").unwrap());
    let note = element(&dom, "<div class=\"hidden-note\" id=\"hidden\">", "</div>");
    assert!(note.contains("ignore rules hid"), "{note}");
    assert!(note.contains("account_info:data.traffic"), "{note}");

    // The rename as one difference, explained, with its sample: the
    // request and both answers side by side, the two names marked.
    let section = element(
        &dom,
        "<section class=\"finding\" id=\"f-worker_detail-data.parameters.system.memory_bytes",
        "</section>",
    );
    assert!(section.contains("explained by"), "{section}");
    assert!(
        section.contains("compat.worker_memory_field = \"memory\""),
        "{section}"
    );
    let request = element(section, "<pre class=\"request\">", "</pre>");
    assert!(request.contains("GET /api/scraper?slug="), "{request}");
    assert!(request.contains("api-key: &lt;redacted&gt;"), "{request}");
    let legacy = element(section, "<div class=\"pane legacy\">", "</pre>");
    let translated = element(section, "<div class=\"pane translated\">", "</pre>");
    assert!(legacy.contains("HTTP 200") && translated.contains("HTTP 200"));
    assert!(
        legacy.contains("<mark>") && legacy.contains("\"memory_bytes\""),
        "{legacy}"
    );
    assert!(
        translated.contains("<mark>") && translated.contains("\"memory\""),
        "{translated}"
    );
    assert!(!translated.contains("memory_bytes"), "{translated}");

    // A 404 against a 200, named by the setting that causes it.
    let status = element(
        &dom,
        "<section class=\"finding\" id=\"f-run_detail-http_status\"",
        "</section>",
    );
    assert!(
        status.contains("compat.business_error_status = \"200\""),
        "{status}"
    );
    // (the unknown run; the run detail without a slug is a 400 against a 200)
    assert!(status.contains("status diff\">HTTP 404"), "{status}");
    let translated = element(status, "<div class=\"pane translated\">", "</pre>");
    assert!(
        translated.contains("status diff\">HTTP 200"),
        "{translated}"
    );
    assert!(!dom.contains(w.key()), "the key reached the page");

    // And a picture of it.
    let png = dir.path().join("report.png");
    chromium(
        &page,
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1280,2000".to_owned(),
        ],
    )
    .await;
    let image = std::fs::read(&png).unwrap();
    assert!(
        image.starts_with(b"\x89PNG\r\n\x1a\n") && image.len() > 20_000,
        "{} bytes",
        image.len()
    );
    if let Some(keep) = std::env::var_os("V1COMPAT_REPORT_OUT") {
        let keep = Path::new(&keep);
        std::fs::create_dir_all(keep).unwrap();
        std::fs::copy(&page, keep.join("report.html")).unwrap();
        std::fs::copy(&png, keep.join("report.png")).unwrap();
        std::fs::write(keep.join("report.txt"), &summary).unwrap();
    }
}
