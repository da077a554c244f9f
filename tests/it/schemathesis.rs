//! Contract test of the V1 surface: schemathesis (pinned, from PyPI, in
//! `target/schemathesis-venv`, provisioned like the client conformance venv)
//! generates requests from `openapi/v1.json` with a fixed seed and sends them to
//! the gateway of a `v1compat sandbox` started on port 0. Every check runs
//! (server errors, status codes and content types the document does not list,
//! response schemas, schema-valid data refused, schema-invalid data accepted,
//! requests without the key) except where `conformance/schemathesis/schemathesis.toml`
//! says why not. The run must find nothing over at least 1,000 generated
//! requests; its summary is printed whether it passes or fails.
//!
//! Each failure a run found has a regression test next to the code it fixed
//! (`ops::run_actions`, `ops::results`, `sandbox::checks`).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::python_sdk::{provision_venv, run, target_dir};

/// The fixed seed of the generated requests.
const SEED: &str = "20261123";
/// Test cases per operation (13 operations; examples, coverage and fuzzing phases).
const MAX_EXAMPLES: &str = "100";
/// At least this many generated requests.
const MIN_REQUESTS: u64 = 1000;
/// Longest the run may take (about a minute on a busy 2-core machine).
const RUN_TIMEOUT: Duration = Duration::from_secs(420);
/// Longest the sandbox may take to bind its listeners.
const START_TIMEOUT: Duration = Duration::from_secs(30);

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `v1compat sandbox`, killed when dropped.
struct SandboxProcess {
    child: Child,
    gateway: String,
}

impl SandboxProcess {
    fn start(dir: &Path) -> SandboxProcess {
        let ready = dir.join("ready");
        let log = std::fs::File::create(dir.join("sandbox.log")).unwrap();
        let any = "127.0.0.1:0";
        let child = Command::new(env!("CARGO_BIN_EXE_v1compat"))
            .args(["sandbox", "--listen", any, "--admin-listen", any])
            .args(["--upstream-listen", any, "--legacy-listen", any])
            // Runs finish in simulated seconds; at this speed a synchronous start
            // answers within milliseconds.
            .args(["--speed", "1000"])
            .arg("--ready-file")
            .arg(&ready)
            .env("V1COMPAT_LOG__LEVEL", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start v1compat sandbox");
        let mut process = SandboxProcess {
            child,
            gateway: String::new(),
        };
        let started = Instant::now();
        // The ready file is written (atomically) once every listener is bound.
        let line = loop {
            if let Ok(line) = std::fs::read_to_string(&ready) {
                break line;
            }
            if let Ok(Some(status)) = process.child.try_wait() {
                panic!(
                    "v1compat sandbox exited ({status}):\n{}",
                    std::fs::read_to_string(dir.join("sandbox.log")).unwrap_or_default()
                );
            }
            assert!(started.elapsed() < START_TIMEOUT, "sandbox not ready");
            std::thread::sleep(Duration::from_millis(20));
        };
        process.gateway = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("gateway="))
            .expect("gateway= in the ready line")
            .to_owned();
        process
    }
}

impl Drop for SandboxProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `N` of the summary's `N generated` line.
fn generated(summary: &str) -> Option<u64> {
    summary
        .lines()
        .find_map(|l| l.trim().split_once(" generated"))
        .and_then(|(n, _)| n.trim().parse().ok())
}

/// The run's closing summary (from its `SUMMARY` banner on).
fn summary_of(text: &str) -> &str {
    text.find("SUMMARY")
        .and_then(|at| text[..at].rfind('\n').map(|nl| &text[nl + 1..]))
        .unwrap_or(text)
}

#[test]
fn the_v1_contract_holds_under_schemathesis() {
    let venv = target_dir().join("schemathesis-venv");
    let requirements = manifest_dir().join("conformance/schemathesis/requirements.txt");
    let python =
        provision_venv(&requirements, &venv).unwrap_or_else(|e| panic!("schemathesis: {e}"));
    let bin = python.parent().expect("venv bin").join("schemathesis");

    let dir = tempfile::tempdir().unwrap();
    let sandbox = SandboxProcess::start(dir.path());
    let mut cmd = Command::new(&bin);
    cmd.arg("--config-file")
        .arg(manifest_dir().join("conformance/schemathesis/schemathesis.toml"))
        .arg("run")
        .arg(manifest_dir().join("openapi/v1.json"))
        .args(["--url", &sandbox.gateway])
        .args(["--header", "api-key: sandbox-key"])
        .args(["--seed", SEED, "--max-examples", MAX_EXAMPLES])
        .args(["--workers", "1", "--generation-database", "none"])
        .args(["--no-color", "--output-sanitize", "false"])
        .current_dir(dir.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("SCHEMATHESIS_TELEMETRY", "false");
    let started = Instant::now();
    let out = run(cmd, RUN_TIMEOUT).unwrap_or_else(|e| panic!("schemathesis: {e}"));
    let summary = summary_of(&out.text);
    // Written past the test harness's capture, so the summary shows in the
    // output of `cargo test` (and `.ci/run`) when the test passes too.
    let _ = writeln!(
        std::io::stderr(),
        "\nschemathesis on the V1 contract ({:.1}s, seed {SEED}):\n{}",
        started.elapsed().as_secs_f64(),
        summary.trim_end()
    );
    assert!(
        out.success,
        "schemathesis found problems ({}):\n{}",
        out.status, out.text
    );
    let n = generated(summary).unwrap_or(0);
    assert!(
        n >= MIN_REQUESTS,
        "only {n} generated requests (want {MIN_REQUESTS}):\n{summary}"
    );
    assert!(!summary.contains("Failures:"), "{summary}");
}

#[test]
fn the_summary_is_read() {
    let text = "noise\n===== SUMMARY =====\n\nTest cases:\n  1816 generated, 1816 passed\n";
    assert_eq!(generated(summary_of(text)), Some(1816));
    assert!(summary_of(text).starts_with("====="));
}
