//! The built `v1compat` binary: `check-config` and `serve` refuse an
//! invalid configuration with exit code 64, listing every problem, before
//! anything is bound.

use std::io::Write;
use std::process::{Command, Output};

fn config_file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

/// Runs the binary with a clean environment, so no `V1COMPAT_*` variable of
/// the caller changes the outcome.
fn v1compat(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_v1compat"))
        .args(args)
        .env_clear()
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn check_config_lists_every_problem_and_exits_64() {
    let f = config_file(
        "[upstream]\nbase_url = \"not a url\"\nbase_ur = \"http://typo.example\"\n\n[limits]\nmax_in_flight = 0\n",
    );
    let out = v1compat(&["check-config", "--config", f.path().to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(64), "{err}");
    for problem in [
        "upstream.base_ur: unknown key",
        "upstream.base_url",
        "limits.max_in_flight",
    ] {
        assert!(err.contains(problem), "{problem} not reported:\n{err}");
    }
}

#[test]
fn check_config_reports_two_validation_problems() {
    let f = config_file("[upstream]\nbase_url = \"ftp://v2.example\"\n[retry]\nmax_attempts = 0\n");
    let out = v1compat(&["check-config", "--config", f.path().to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("upstream.base_url"), "{err}");
    assert!(err.contains("retry.max_attempts"), "{err}");
}

#[test]
fn check_config_accepts_a_valid_file() {
    let f = config_file(
        "[listen]\npublic = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n[upstream]\nbase_url = \"https://v2.example\"\nservice_key = \"svc-1\"\n[retry]\nmax_attempts = 2\n",
    );
    let out = v1compat(&["check-config", "--config", f.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
    // The service key is never echoed.
    assert!(!stderr(&out).contains("svc-1"));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("svc-1"));
}

#[test]
fn serve_with_an_invalid_config_exits_64_before_binding() {
    // A port that is free now: if `serve` bound it before validating, it
    // would be listening there; it must exit instead.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let f = config_file(&format!(
        "[listen]\npublic = \"127.0.0.1:{port}\"\nadmin = \"127.0.0.1:0\"\n[upstream]\nbase_url = \"http://127.0.0.1:1\"\nauth = \"basic\"\nnope = 1\n"
    ));
    let out = v1compat(&["serve", "--config", f.path().to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("invalid configuration"), "{err}");
    assert!(err.contains("nope"), "{err}");
    assert!(!err.contains("listening"), "{err}");
    // Nothing was left bound on the port.
    std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
}

#[test]
fn missing_config_file_is_a_config_error() {
    let out = v1compat(&["check-config", "--config", "/nonexistent/v1compat.toml"]);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(stderr(&out).contains("/nonexistent/v1compat.toml"));
}
