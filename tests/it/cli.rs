//! The built `v1compat` binary: `check-config` and `serve` refuse an
//! invalid configuration with exit code 64, listing every problem, before
//! anything is bound.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

use crate::support::{send, MockV2, Reply};

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
fn check_config_takes_the_file_as_a_positional_argument() {
    let f = config_file("[upstream]\nconnect_timeout_ms = \"lots\"\n[limits]\nmax_in_flight = 0\n");
    let out = v1compat(&["check-config", f.path().to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(
        err.contains("line 2: upstream.connect_timeout_ms: expected a whole number"),
        "{err}"
    );
    assert!(
        err.contains("line 4: limits.max_in_flight: must be greater than 0"),
        "{err}"
    );
}

/// `--print`: file, defaults and environment merged, keys masked; a stray
/// `V1COMPAT_` variable is a warning, not a failure.
#[test]
fn check_config_prints_the_effective_configuration_with_secrets_masked() {
    let f = config_file("[upstream]\nbase_url = \"https://v2.example\"\n");
    let out = Command::new(env!("CARGO_BIN_EXE_v1compat"))
        .args(["check-config", f.path().to_str().unwrap(), "--print"])
        .env_clear()
        .env("V1COMPAT_UPSTREAM__SERVICE_KEY", "12345")
        .env("V1COMPAT_LIMITS__MAX_IN_FLIGHT", "77")
        .env("V1COMPAT_BIN", "target/debug/v1compat")
        .output()
        .unwrap();
    let (stdout, err) = (String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{err}");
    let printed: toml::Table = stdout.parse().unwrap();
    assert_eq!(
        printed["upstream"]["base_url"].as_str(),
        Some("https://v2.example")
    );
    assert_eq!(
        printed["upstream"]["service_key"].as_str(),
        Some("********")
    );
    assert_eq!(printed["limits"]["max_in_flight"].as_integer(), Some(77));
    assert!(!stdout.contains("12345") && !err.contains("12345"));
    assert!(
        err.contains("V1COMPAT_BIN is not a configuration override"),
        "{err}"
    );
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
fn a_taken_port_fails_with_a_hint() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let f = config_file(&format!(
        "[listen]\npublic = \"127.0.0.1:{port}\"\nadmin = \"127.0.0.1:0\"\n[upstream]\nbase_url = \"http://127.0.0.1:1\"\n"
    ));
    let out = v1compat(&["serve", "--config", f.path().to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("127.0.0.1:{port} (listen.public)")),
        "{err}"
    );
    assert!(
        err.contains("hint:") && err.contains("V1COMPAT_LISTEN__PUBLIC"),
        "{err}"
    );
}

#[test]
fn missing_config_file_is_a_config_error() {
    let out = v1compat(&["check-config", "--config", "/nonexistent/v1compat.toml"]);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(stderr(&out).contains("/nonexistent/v1compat.toml"));
}

/// The binary end to end: `serve` on port 0 in front of a mock V2, logging
/// at trace level, answers V1 traffic, never writes a key to its logs, and
/// exits 0 on SIGTERM.
#[tokio::test]
async fn serve_answers_and_never_logs_keys() {
    const KEY: &str = "cli-client-key-Jq4v";
    const SERVICE_KEY: &str = "cli-service-key-Wm2p";
    let v2 = MockV2::start(|req| {
        if req.path.ends_with("/input-schema") {
            Reply::ok(json!({"input_schema": {"properties": []}}))
        } else if req.path.starts_with("/api/v2/workers/") {
            Reply::ok(json!({"version": "v1", "parameters": {}}))
        } else {
            Reply::ok(json!({"slug": "R1", "status": "running"}))
        }
    })
    .await;
    let f = config_file(&format!(
        "[listen]\npublic = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n[upstream]\nbase_url = \"{}\"\nservice_key = \"{SERVICE_KEY}\"\n[log]\nformat = \"json\"\nlevel = \"trace\"\n",
        v2.url()
    ));
    let mut child = Command::new(env!("CARGO_BIN_EXE_v1compat"))
        .args(["serve", "--config", f.path().to_str().unwrap()])
        .env_clear()
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Read the log on a thread: the listening line carries the addresses.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
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
    let (public, admin) = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while let Some(line) = rx.recv().await {
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if v["message"] == "v1compat listening" {
                let addr = |k: &str| {
                    v[k].as_str()
                        .unwrap()
                        .parse::<std::net::SocketAddr>()
                        .unwrap()
                };
                return (addr("public"), addr("admin"));
            }
        }
        panic!("v1compat exited without listening");
    })
    .await
    .expect("v1compat did not start listening");

    let body = bytes::Bytes::from_static(br#"{"run_slug":"R1"}"#);
    let ct = ("content-type", "application/json");
    let bearer = format!("Bearer {KEY}");
    let (status, _, _) = send(
        public,
        "POST",
        "/api/v1/run/detail",
        &[ct, ("api-key", KEY)],
        Some(body.clone()),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _, _) = send(
        public,
        "POST",
        "/api/v1/run/detail",
        &[ct, ("authorization", &bearer)],
        Some(body),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _, _) = send(public, "GET", "/api/scraper?slug=w", &[], None).await;
    assert_eq!(status, 200);
    let (status, _, metrics) = send(admin, "GET", "/metrics", &[], None).await;
    assert_eq!(status, 200);
    let metrics = String::from_utf8_lossy(&metrics).into_owned();
    assert!(metrics.contains("v1compat_requests_total"), "{metrics}");

    // SIGHUP reloads (nothing changed) and the gateway keeps serving.
    let hup = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while let Some(line) = rx.recv().await {
            if line.contains("configuration reloaded") {
                return;
            }
        }
        panic!("v1compat exited on SIGHUP");
    })
    .await
    .expect("no reload logged after SIGHUP");
    let (status, _, _) = send(public, "GET", "/api/scraper?slug=w", &[], None).await;
    assert_eq!(status, 200);

    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    let log = reader.join().unwrap();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        log.contains("R1") || log.contains("run_detail"),
        "the log is empty?\n{log}"
    );
    for secret in [KEY, SERVICE_KEY] {
        assert!(!log.contains(secret), "{secret} appears in the log:\n{log}");
        assert!(!metrics.contains(secret), "{secret} appears in /metrics");
    }
    assert_eq!(v2.count("GET", "/api/v2/worker-runs/R1"), 2);
}

/// Splits one shell command line into words, honouring single quotes (all
/// the banner uses).
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut cur, mut quoted, mut any) = (Vec::new(), String::new(), false, false);
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(cur);
    }
    words
}

#[tokio::test]
async fn sandbox_banner_commands_work_as_printed() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_v1compat"))
        .args([
            "sandbox",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .args([
            "--upstream-listen",
            "127.0.0.1:0",
            "--legacy-listen",
            "127.0.0.1:0",
        ])
        .env_clear()
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // The banner ends with the ctrl-c line; read it on a thread, bounded.
    let banner = std::thread::spawn(move || {
        let mut text = String::new();
        for line in BufReader::new(stdout).lines().take(40) {
            let line = line.unwrap_or_default();
            let done = line.starts_with("Stop with ctrl-c");
            text.push_str(&line);
            text.push('\n');
            if done {
                break;
            }
        }
        text
    })
    .join()
    .unwrap();
    assert!(banner.contains("Stop with ctrl-c"), "{banner}");

    // The curl commands, continuation lines joined.
    let joined = banner.replace("\\\n", " ");
    let commands: Vec<Vec<String>> = joined
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("curl "))
        .map(shell_words)
        .collect();
    assert_eq!(commands.len(), 2, "{banner}");
    for words in commands {
        let (mut method, mut url, mut headers, mut body) =
            ("GET".to_owned(), None, Vec::new(), None);
        let mut it = words.into_iter().skip(1);
        while let Some(w) = it.next() {
            match w.as_str() {
                "-s" => {}
                "-X" => method = it.next().unwrap(),
                "-H" => {
                    let h = it.next().unwrap();
                    let (k, v) = h.split_once(':').unwrap();
                    headers.push((k.trim().to_owned(), v.trim().to_owned()));
                }
                "-d" => body = Some(bytes::Bytes::from(it.next().unwrap())),
                other => url = Some(other.to_owned()),
            }
        }
        let url: url::Url = url.expect("a URL").parse().unwrap();
        let addr = url.socket_addrs(|| None).unwrap()[0];
        let path = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        };
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let (status, _, out) = send(addr, &method, &path, &headers, body).await;
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            (status.as_u16(), &v["code"]),
            (200, &json!(0)),
            "{method} {url}: {v}"
        );
        assert!(v["data"].is_object(), "{v}");
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}
