//! The embedded sandbox: an in-process fake of the Worker Run Service.
//!
//! It serves the V2 reference API (with strict contract checks, fault injection and
//! observation endpoints under `/__sandbox/`) on one listener and the retired native V1
//! API on another, both backed by the same in-memory state and a simulated clock. The
//! `v1compat sandbox` command, the integration tests and the benchmarks use it as the
//! upstream, so a gateway mistake shows up as a failing test instead of in production.
//!
//! The seeded workers (`SandboxConfig::workers` replaces them), by role:
//!
//! | Slug | Path (V2 / V1 uses `/`) | Role |
//! |---|---|---|
//! | `01KBHMS6A8H6A3K5FJY11MQ99Z` | `coreclaw~google-maps-scraper` | typical; rows = `max_results` (default 50) |
//! | `01KC2X8Q3R5T7V9W1Y3Z5B7D9F` | `coreclaw~amazon-product-by-asin` | small; rows = `max_items` (default 8) |
//! | `01KD4N6P8R0T2V4W6Y8Z0B2D4F` | `coreclaw~tiktok-comments-bulk` | bulk; 2600 rows by default (`max_comments`) |
//! | `01KE6Q8S0T2V4W6Y8Z0A2C4E6G` | `coreclaw~broken-news-scraper` | every run fails (non-empty `err_msg`) |
//! | `01KF8S0T2V4W6Y8Z0A2B4D6F8H` | `coreclaw~slow-site-crawler` | runs take 600 simulated seconds (abort) |
//! | `01KG0A2B4C6D8E0F2G4H6J8K0M` | `acme~price-monitor` | another owner; 12 rows |
//!
//! Runs are `ready` for 1 simulated second, then `running` for their duration (5-20 s,
//! deterministic from seed + input), then `succeeded` or `failed`; an abort shows
//! `aborting` for 3 s, then `failed` with `err_msg` "run aborted".
//!
//! Files: `config` (what can be set), `catalog` (workers and the seed), `clock`
//! (simulated time), `state` (the store: accounts, tasks, runs), `lifecycle`
//! (what a run is made of and shows over time), `data` (deterministic rows and
//! logs), `checks` (request contract checks shared by both surfaces), `v2`
//! (routing and envelopes, with `v2::catalog`, `v2::runs`, `v2::tasks`), `legacy_v1`,
//! `admin` (`/__sandbox/*`), `faults`, `exports`, `callbacks`, `serve` (the accept
//! loop and body helpers; not named `http`, which would shadow the crate).

mod admin;
mod callbacks;
mod catalog;
mod checks;
mod clock;
mod config;
mod data;
mod exports;
mod faults;
mod legacy_v1;
mod lifecycle;
mod serve;
mod state;
mod v2;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use catalog::{seed_workers, Column, ColumnType, SystemDefaults, WorkerSpec};
pub use config::{AccountConfig, LogEntries, SandboxConfig};
pub use faults::{FaultKind, FaultRule};

/// Lock a mutex, ignoring poisoning: every critical section leaves the data usable,
/// and the sandbox must not panic because another request did.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Everything the request handlers and background tasks share.
pub(crate) struct Shared {
    pub log_entries: LogEntries,
    pub state: Mutex<state::State>,
    pub clock: clock::SimClock,
    pub faults: faults::Faults,
    /// Last requests seen by the V2 surface (for `/__sandbox/requests`).
    pub requests: Mutex<VecDeque<serde_json::Value>>,
    pub exports: exports::Exports,
    pub v2_addr: SocketAddr,
    /// Turns true on shutdown; long waits (sync runs, latency faults) watch it.
    pub stop: watch::Receiver<bool>,
    /// How the native V1 surface reads the points the V1 record disagrees on.
    pub v1_dialect: v1compat_contract::dialect::Dialect,
}

/// A running sandbox (both listeners and the callback sender).
pub struct Sandbox {
    shared: Arc<Shared>,
    api_key: String,
    v1_addr: SocketAddr,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Sandbox {
    /// Start serving on already-bound listeners (tests bind `127.0.0.1:0`).
    pub async fn start(
        cfg: SandboxConfig,
        v2: TcpListener,
        v1: TcpListener,
    ) -> std::io::Result<Sandbox> {
        cfg.validate()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let v2_addr = v2.local_addr()?;
        let v1_addr = v1.local_addr()?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            log_entries: cfg.log_entries,
            state: Mutex::new(state::State::new(&cfg)),
            clock: clock::SimClock::new(cfg.speed),
            faults: faults::Faults::new(cfg.seed, cfg.faults.clone()),
            requests: Mutex::new(VecDeque::new()),
            exports: exports::Exports::default(),
            v2_addr,
            stop: stop_rx.clone(),
            v1_dialect: cfg.v1,
        });
        let s2 = shared.clone();
        let v2_task = serve::serve(v2, stop_rx.clone(), move |req, _| {
            v2::handle(s2.clone(), req)
        });
        let s1 = shared.clone();
        let v1_task = serve::serve(v1, stop_rx, move |req, _| {
            legacy_v1::handle(s1.clone(), req)
        });
        let cb_task = tokio::spawn(callbacks::run(shared.clone()));
        Ok(Sandbox {
            shared,
            api_key: cfg.api_key,
            v1_addr,
            stop: stop_tx,
            tasks: vec![v2_task, v1_task, cb_task],
        })
    }

    /// Address of the V2 reference service (and the `/__sandbox/` endpoints).
    pub fn v2_addr(&self) -> SocketAddr {
        self.shared.v2_addr
    }

    /// Address of the native V1 surface.
    pub fn v1_addr(&self) -> SocketAddr {
        self.v1_addr
    }

    /// The demo account's key.
    pub fn api_key(&self) -> &str {
        &self.api_key
    }

    /// Stop both servers and the background tasks, and wait for them.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // A sandbox dropped without `shutdown` still stops serving.
        self.stop.send_replace(true);
    }
}
