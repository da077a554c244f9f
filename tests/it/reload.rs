//! Hot reload, end to end: a gateway started from a configuration file, the
//! file replaced (by rename, and by a Kubernetes-style `..data` symlink
//! swap), SIGHUP, certificate files replaced. Each step waits for the
//! reload's reported outcome, never for time to pass.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc, Notify};
use tokio::task::JoinHandle;

use v1compat::reload::{self, Outcome, Reloader, Source};

use crate::pki::TestCa;
use crate::support::{send, MockV2, Reply};
use crate::tls::https_get;

/// A gateway that reloads `path`.
struct Reloading {
    addr: SocketAddr,
    admin: SocketAddr,
    outcomes: broadcast::Receiver<Outcome>,
    /// What runs now, as the reloads leave it.
    live: Arc<reload::Live>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _task: JoinHandle<std::io::Result<()>>,
}

impl Drop for Reloading {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A gateway reloading from a file of its own that holds `text`: the
/// directory (removed when dropped), the file, and the gateway.
async fn reloading_from(text: &str) -> (tempfile::TempDir, PathBuf, Reloading) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1compat.toml");
    std::fs::write(&path, text).unwrap();
    let gw = Reloading::start(&path).await;
    (dir, path, gw)
}

impl Reloading {
    async fn start(path: &Path) -> Reloading {
        let source = Source {
            path: Some(path.to_owned()),
            env: Vec::new(),
        };
        let reloader = Reloader::start(source, reload::http_upstream()).unwrap();
        let outcomes = reloader.subscribe();
        let live = reloader.live().clone();
        let public = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (addr, admin_addr) = (public.local_addr().unwrap(), admin.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(v1compat::run_reloading(public, admin, reloader, async {
            let _ = rx.await;
        }));
        let gw = Reloading {
            addr,
            admin: admin_addr,
            outcomes,
            live,
            stop: Some(tx),
            _task: task,
        };
        // Answered means serving, and the triggers are installed before that.
        let (status, _, _) = send(gw.admin, "GET", "/healthz", &[], None).await;
        assert_eq!(status, 200);
        gw
    }

    /// The next reload's outcome that is not `Unchanged`. Every reloading
    /// gateway in this process hears the SIGHUP test's signal; the forced
    /// reload it causes reports `Unchanged`, or repeats the last outcome.
    async fn next(&mut self) -> Outcome {
        self.next_any(|o| *o != Outcome::Unchanged).await
    }

    /// The next outcome `wanted` accepts; others are skipped.
    async fn next_any(&mut self, wanted: impl Fn(&Outcome) -> bool) -> Outcome {
        let outcomes = &mut self.outcomes;
        tokio::time::timeout(Duration::from_secs(20), async move {
            loop {
                match outcomes.recv().await {
                    Ok(o) if wanted(&o) => return o,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(e) => panic!("{e}"),
                }
            }
        })
        .await
        .expect("a reload within 20s")
    }

    /// The regions V2 gave this gateway's `/api/proxy/region`.
    async fn regions(&self) -> Value {
        regions(self.addr).await
    }
}

async fn regions(addr: SocketAddr) -> Value {
    let (status, _, body) = send(addr, "GET", "/api/proxy/region", &[], None).await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 200, "{body}");
    body["data"].clone()
}

/// A V2 that names itself in its answer.
async fn v2(name: &'static str) -> MockV2 {
    MockV2::start(move |_| Reply::ok(json!([name]))).await
}

fn config(v2: &MockV2, extra: &str) -> String {
    format!("[upstream]\nbase_url = \"{}\"\n{extra}", v2.url())
}

/// Replaces `path` the way editors and config management do: a new file
/// renamed over the old one.
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test]
async fn a_good_file_is_swapped_in_a_bad_one_kept_and_in_flight_requests_finish_on_theirs() {
    let release = Arc::new(Notify::new());
    let (arrived_tx, mut arrived) = mpsc::unbounded_channel();
    let held = release.clone();
    let a = MockV2::start(move |_| {
        let _ = arrived_tx.send(());
        Reply::After(held.clone(), Box::new(Reply::ok(json!(["a"]))))
    })
    .await;
    let b = v2("b").await;
    let (_dir, path, mut gw) = reloading_from(&config(&a, "")).await;

    // A request in flight at A when the configuration moves to B.
    let addr = gw.addr;
    let in_flight = tokio::spawn(async move { regions(addr).await });
    arrived.recv().await.unwrap();
    replace(&path, &config(&b, ""));
    assert_eq!(
        gw.next().await,
        Outcome::Applied {
            restart_needed: vec![]
        }
    );
    assert_eq!(gw.regions().await, json!(["b"]));
    release.notify_one();
    assert_eq!(in_flight.await.unwrap(), json!(["a"]), "finished on A");

    // A bad file: rejected with its problems, B stays. (A SIGHUP from the
    // test beside this one would repeat a rejection or an application of
    // the same file; the assertions hold for either.)
    replace(
        &path,
        "[upstream]\nbase_url = \"ftp://nowhere\"\n[limits]\nmax_page_size = \"lots\"\n",
    );
    let Outcome::Rejected(why) = gw.next().await else {
        panic!("a bad file was applied");
    };
    assert!(why.contains("upstream.base_url"), "{why}");
    assert!(why.contains("limits.max_page_size"), "{why}");
    assert_eq!(gw.regions().await, json!(["b"]));
    let (_, _, metrics) = send(gw.admin, "GET", "/metrics", &[], None).await;
    assert!(
        String::from_utf8_lossy(&metrics)
            .contains("v1compat_config_reloads_total{outcome=\"rejected\"}"),
        "rejections are counted"
    );

    // A key that needs a restart: the rest applies, the listener stays.
    replace(
        &path,
        &config(
            &a,
            "[listen]\npublic = \"127.0.0.1:1\"\n[compat]\naccount_traffic = 7\n",
        ),
    );
    assert_eq!(
        gw.next().await,
        Outcome::Applied {
            restart_needed: vec!["listen.public"]
        }
    );
    release.notify_one();
    assert_eq!(
        gw.regions().await,
        json!(["a"]),
        "served on the old address"
    );
    assert_eq!(b.total(), 2);
}

/// `log.access` is read per request from the snapshot, so a reload turns
/// the access lines off at once; the inventory's keys read when it is opened
/// keep their running value, and the warning names them, while the ones read
/// per report apply.
#[tokio::test]
async fn log_access_reloads_live_and_the_inventory_keys_read_at_open_are_named() {
    let a = v2("a").await;
    let (_dir, path, mut gw) = reloading_from(&config(&a, "")).await;
    assert!(gw.live.gateway().load().settings.access_log);

    replace(
        &path,
        &config(
            &a,
            "[log]\naccess = false\n[inventory]\nmax_clients = 5\ngone_after = \"1d\"\n",
        ),
    );
    assert_eq!(
        gw.next().await,
        Outcome::Applied {
            restart_needed: vec!["inventory.max_clients"]
        }
    );
    assert!(!gw.live.gateway().load().settings.access_log);
    let inventory = gw.live.load().config.inventory.clone();
    assert_eq!(inventory.max_clients, 10_000, "the running value");
    assert_eq!(inventory.gone_after, Duration::from_secs(24 * 3600));
}

#[tokio::test]
async fn a_kubernetes_style_symlink_swap_is_picked_up() {
    let (a, b) = (v2("a").await, v2("b").await);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // What a ConfigMap volume looks like: the file is a symlink through
    // `..data`, which points at a timestamped directory.
    std::fs::create_dir(d.join("..v1")).unwrap();
    std::fs::write(d.join("..v1/v1compat.toml"), config(&a, "")).unwrap();
    std::os::unix::fs::symlink("..v1", d.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/v1compat.toml", d.join("v1compat.toml")).unwrap();
    let mut gw = Reloading::start(&d.join("v1compat.toml")).await;
    assert_eq!(gw.regions().await, json!(["a"]));

    // The update: a new directory, a new link, renamed over `..data`.
    std::fs::create_dir(d.join("..v2")).unwrap();
    std::fs::write(d.join("..v2/v1compat.toml"), config(&b, "")).unwrap();
    std::os::unix::fs::symlink("..v2", d.join("..data_tmp")).unwrap();
    std::fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
    std::fs::remove_dir_all(d.join("..v1")).unwrap();
    assert!(matches!(gw.next().await, Outcome::Applied { .. }));
    assert_eq!(gw.regions().await, json!(["b"]));
}

#[tokio::test]
async fn sighup_reloads() {
    let a = v2("a").await;
    let (_dir, _path, mut gw) = reloading_from(&config(&a, "")).await;
    // The handler is installed (the gateway answered); the signal goes to
    // this test process, where every reloading gateway hears it.
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // Nothing changed, and a SIGHUP reports that anyway.
    let outcome = gw.next_any(|_| true).await;
    assert_eq!(outcome, Outcome::Unchanged);
    assert_eq!(gw.regions().await, json!(["a"]));
}

#[tokio::test]
async fn replaced_certificate_files_are_presented_after_the_watch_sees_them() {
    let (old_ca, new_ca) = (TestCa::new("old CA"), TestCa::new("new CA"));
    let a = v2("a").await;
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let (cert, key) = old_ca.leaf(&["localhost"]).write(&certs);
    let path: PathBuf = dir.path().join("v1compat.toml");
    std::fs::write(
        &path,
        config(
            &a,
            &format!(
                "[listen]\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
                cert.display(),
                key.display()
            ),
        ),
    )
    .unwrap();
    let mut gw = Reloading::start(&path).await;
    assert!(
        https_get(gw.addr, old_ca.client_config(), "/api/proxy/region")
            .await
            .is_ok()
    );

    let leaf = new_ca.leaf(&["localhost"]);
    replace(&key, &leaf.key_pem);
    replace(&cert, &leaf.cert_pem);
    // Between the two renames the pair does not match; whichever reload
    // sees that is refused, and one sees the finished pair.
    loop {
        match gw.next().await {
            Outcome::Applied { .. } => break,
            Outcome::Rejected(_) | Outcome::Unchanged => continue,
        }
    }
    let (status, _, _) = https_get(gw.addr, new_ca.client_config(), "/api/proxy/region")
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(
        https_get(gw.addr, old_ca.client_config(), "/api/proxy/region")
            .await
            .is_err()
    );
}

/// Found by a review: with the log written into the configuration's
/// directory, each rejection's error line was a file event that read the
/// same bad file and was rejected again, without end. The same refused
/// file read again is now silent (and uncounted) unless SIGHUP asks; a
/// new problem, or the file put right, is reported.
#[tokio::test]
async fn the_same_refused_file_read_again_is_not_a_new_rejection() {
    let a = v2("a").await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1compat.toml");
    let good = config(&a, "");
    std::fs::write(&path, &good).unwrap();
    let source = Source {
        path: Some(path.clone()),
        env: Vec::new(),
    };
    let reloader = Reloader::start(source, reload::http_upstream()).unwrap();
    let mut outcomes = reloader.subscribe();
    let reload = |forced| {
        let reloader = reloader.clone();
        tokio::task::spawn_blocking(move || reloader.reload(forced))
    };

    replace(&path, &config(&a, "[limits]\nmax_page_size = \"lots\"\n"));
    assert!(matches!(reload(false).await.unwrap(), Outcome::Rejected(_)));
    // A file event elsewhere in the directory: the same file, the same
    // problem.
    assert_eq!(reload(false).await.unwrap(), Outcome::Unchanged);
    // SIGHUP asks, and is told again.
    assert!(matches!(reload(true).await.unwrap(), Outcome::Rejected(_)));
    // Another problem is a new rejection.
    replace(&path, &config(&a, "[limits]\nmax_page_size = \"many\"\n"));
    let Outcome::Rejected(why) = reload(false).await.unwrap() else {
        panic!("a second bad file was not refused");
    };
    assert!(why.contains("limits.max_page_size"), "{why}");
    // Put right as it runs: nothing to apply, and the next bad file is
    // reported again.
    replace(&path, &good);
    assert_eq!(reload(false).await.unwrap(), Outcome::Unchanged);
    replace(&path, &config(&a, "[limits]\nmax_page_size = \"lots\"\n"));
    assert!(matches!(reload(false).await.unwrap(), Outcome::Rejected(_)));

    // Told to listeners: four rejections (the repeated read was silent).
    let mut told = Vec::new();
    while let Ok(o) = outcomes.try_recv() {
        told.push(o);
    }
    let rejections = told
        .iter()
        .filter(|o| matches!(o, Outcome::Rejected(_)))
        .count();
    assert_eq!(rejections, 4, "{told:?}");
}

/// Found by a review: `head -3 v1compat.toml > p; cat p > v1compat.toml`
/// and `: > v1compat.toml` were applied, the base URL falling back to the
/// production default and the service key dropped. A file that sets fewer
/// keys than the running one and would move clients' keys elsewhere is now
/// refused and counted; the running configuration keeps serving.
#[tokio::test]
async fn a_truncated_or_empty_file_leaves_the_running_configuration_in_place() {
    let (a, b) = (v2("a").await, v2("b").await);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1compat.toml");
    let whole = config(
        &a,
        "service_key = \"staging-key-0123\"\n[compat]\naccount_traffic = 3\n",
    );
    std::fs::write(&path, &whole).unwrap();
    let source = Source {
        path: Some(path.clone()),
        env: Vec::new(),
    };
    let reloader = Reloader::start(source, reload::http_upstream()).unwrap();
    let reload = |forced| {
        let reloader = reloader.clone();
        tokio::task::spawn_blocking(move || reloader.reload(forced))
    };
    let base = |r: &Arc<Reloader>| r.live().load().config.upstream.base_url.to_string();
    let running = base(&reloader);
    assert!(running.starts_with(&a.url()), "{running}");

    // The first line only: the base URL stays, the service key would go.
    let head: String = whole.lines().take(2).map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, &head).unwrap();
    let Outcome::Rejected(why) = reload(false).await.unwrap() else {
        panic!("a truncated file was applied");
    };
    assert!(why.contains("upstream.service_key"), "{why}");
    assert!(!why.contains("staging-key-0123"), "{why}");
    assert_eq!(base(&reloader), running);
    let key = reloader.live().load().config.service_key.clone();
    assert_eq!(
        key.map(|k| k.expose().to_owned()).as_deref(),
        Some("staging-key-0123")
    );

    // Emptied: the base URL would fall back to the default. SIGHUP too.
    std::fs::write(&path, "").unwrap();
    let Outcome::Rejected(why) = reload(true).await.unwrap() else {
        panic!("an empty file was applied");
    };
    assert!(why.contains("upstream.base_url"), "{why}");
    assert_eq!(base(&reloader), running);

    // A smaller file that keeps where keys go applies.
    std::fs::write(&path, config(&a, "service_key = \"staging-key-0123\"\n")).unwrap();
    assert!(matches!(
        reload(false).await.unwrap(),
        Outcome::Applied { .. }
    ));
    // A whole file may move them on purpose.
    std::fs::write(&path, config(&b, "service_key = \"other-key-4567\"\n")).unwrap();
    assert!(matches!(
        reload(false).await.unwrap(),
        Outcome::Applied { .. }
    ));
    assert!(base(&reloader).starts_with(&b.url()));
}

/// The same refusal through the directory watch, counted on `/metrics`.
#[tokio::test]
async fn an_emptied_file_seen_by_the_watch_is_refused_and_counted() {
    let a = v2("a").await;
    let (_dir, path, mut gw) = reloading_from(&config(&a, "[compat]\naccount_traffic = 3\n")).await;
    std::fs::write(&path, "").unwrap();
    let Outcome::Rejected(why) = gw.next().await else {
        panic!("an empty file was applied");
    };
    assert!(why.contains("looks truncated"), "{why}");
    assert_eq!(gw.regions().await, json!(["a"]));
    let (_, _, metrics) = send(gw.admin, "GET", "/metrics", &[], None).await;
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        metrics.lines().any(|l| l
            .starts_with("v1compat_config_reloads_total{outcome=\"truncated\"}")
            && !l.ends_with(" 0")),
        "{metrics}"
    );
}
