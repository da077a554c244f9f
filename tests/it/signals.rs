//! Signals that hold with nothing probing: `v1compat_upstream_reachable`
//! falls when V2 stops (the periodic check, and a real V2 call that cannot
//! connect) with no `/readyz` asked; `v1compat_config_last_reload_successful`
//! falls on a refused reload and rises on a good one. Each test reads the
//! metrics of its own thread-local recorder (a current-thread runtime), and
//! waits for a value with a bound, polling, never for a fixed time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use metrics_util::debugging::Snapshotter;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use v1compat::ops::run_records::detail_call;
use v1compat::reload::{self, Outcome, Reloader, Source};
use v1compat::telemetry::{
    CONFIG_LAST_RELOAD_SUCCESSFUL, CONFIG_LAST_RELOAD_SUCCESS_TIMESTAMP, UPSTREAM_REACHABLE,
};
use v1compat::upstream::{HttpUpstream, Upstream};
use v1compat::v2::Segment;

use crate::support::{local_metrics, metric, rid, MockV2, TestGateway};

/// A stand-in for V2 that answers every request `{"code":0,"data":{}}`
/// and closes the connection after it, so each call connects anew; it
/// stops accepting (its listener closed) when the handle is aborted.
async fn stoppable_v2() -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    let body = http_body_util::Full::new(bytes::Bytes::from_static(
                        br#"{"code":0,"data":{"slug":"R1","status":"running"}}"#,
                    ));
                    let mut r = http::Response::new(body);
                    r.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("application/json"),
                    );
                    Ok::<_, std::convert::Infallible>(r)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .keep_alive(false)
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, task)
}

/// Waits, at most 10 s, polling, until `name` reads `want`.
async fn until_gauge(m: &Snapshotter, name: &str, want: f64) {
    let reached = tokio::time::timeout(Duration::from_secs(10), async {
        while metric(m, name, &[]) != want {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(
        reached.is_ok(),
        "{name} stayed at {} (wanted {want})",
        metric(m, name, &[])
    );
}

#[tokio::test]
async fn upstream_reachable_falls_when_v2_stops_with_no_probe() {
    let (m, _guard) = local_metrics();
    let (v2, server) = stoppable_v2().await;
    let config = format!("[upstream]\nbase_url = \"http://{v2}\"\nhealth_check_interval_ms = 20\n");
    // The in-process V2 double is never called: only the periodic check runs.
    let gw = TestGateway::start(&config, Arc::new(MockV2::new(|_| unreachable!()))).await;
    until_gauge(&m, UPSTREAM_REACHABLE, 1.0).await;
    server.abort();
    let _ = server.await;
    until_gauge(&m, UPSTREAM_REACHABLE, 0.0).await;
    drop(gw);
}

#[tokio::test]
async fn real_v2_calls_say_whether_v2_is_reachable() {
    let (m, _guard) = local_metrics();
    let (v2, server) = stoppable_v2().await;
    let config = v1compat::config::load(
        &format!("[upstream]\nbase_url = \"http://{v2}\"\n[retry]\nmax_attempts = 1\n"),
        Vec::new(),
    )
    .unwrap();
    let upstream = HttpUpstream::new(config.upstream).unwrap();
    let run = Segment::new("01M8B35ENF3QHQVJCEJAR20SCG").unwrap();
    let answered = upstream
        .call(detail_call(&run), &rid("01M8B35ENF3QHQVJCEJAR20SC1"))
        .await;
    assert!(answered.is_ok(), "{answered:?}");
    assert_eq!(metric(&m, UPSTREAM_REACHABLE, &[]), 1.0);

    server.abort();
    let _ = server.await;
    let refused = upstream
        .call(detail_call(&run), &rid("01M8B35ENF3QHQVJCEJAR20SC2"))
        .await;
    assert!(refused.is_err(), "V2 stopped, yet {refused:?}");
    assert_eq!(metric(&m, UPSTREAM_REACHABLE, &[]), 0.0);
}

#[test]
fn a_refused_reload_sets_the_gauge_to_zero_and_a_good_one_back_to_one() {
    let (m, _guard) = local_metrics();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1compat.toml");
    let good = |traffic: u32| {
        format!("[upstream]\nbase_url = \"http://127.0.0.1:9\"\n[compat]\naccount_traffic = {traffic}\n")
    };
    std::fs::write(&path, good(1)).unwrap();
    let reloader = Reloader::start(
        Source {
            path: Some(path.clone()),
            env: Vec::new(),
        },
        reload::http_upstream(),
    )
    .unwrap();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();

    std::fs::write(&path, "[upstream]\nbase_url = \"ftp://nowhere\"\n").unwrap();
    assert!(matches!(reloader.reload(false), Outcome::Rejected(_)));
    assert_eq!(metric(&m, CONFIG_LAST_RELOAD_SUCCESSFUL, &[]), 0.0);
    // Read again as it is: still refused, still 0.
    assert!(matches!(reloader.reload(true), Outcome::Rejected(_)));
    assert_eq!(metric(&m, CONFIG_LAST_RELOAD_SUCCESSFUL, &[]), 0.0);

    std::fs::write(&path, good(2)).unwrap();
    assert!(matches!(reloader.reload(false), Outcome::Applied { .. }));
    assert_eq!(metric(&m, CONFIG_LAST_RELOAD_SUCCESSFUL, &[]), 1.0);
    let at = metric(&m, CONFIG_LAST_RELOAD_SUCCESS_TIMESTAMP, &[]);
    assert!(at >= before.floor(), "{at} < {before}");

    // Refused again, then the running file put back: valid again, 1.
    std::fs::write(&path, "[limits]\nmax_page_size = \"lots\"\n").unwrap();
    assert!(matches!(reloader.reload(false), Outcome::Rejected(_)));
    assert_eq!(metric(&m, CONFIG_LAST_RELOAD_SUCCESSFUL, &[]), 0.0);
    std::fs::write(&path, good(2)).unwrap();
    assert_eq!(reloader.reload(false), Outcome::Unchanged);
    assert_eq!(metric(&m, CONFIG_LAST_RELOAD_SUCCESSFUL, &[]), 1.0);
}
