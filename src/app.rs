//! Starting and draining the process, on listeners the binary (or a test)
//! has already bound: the callback relay, the migration inventory's flusher
//! and the shadow mirror built before anything serves, the public and admin
//! listeners started, and on shutdown the drain sequence (readiness false,
//! the drain delay, the public listener drained within the grace period, the
//! inventory's last flush, then the admin listener).

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::edge::{conn, server, tls};
use crate::{config, pipeline, reload, shadow, upstream};

/// Keeps a timer due within the second, for as long as the gateway runs.
///
/// Every request arms two timers (its deadline and its V2 attempt's). When a
/// new timer is due before the time driver's next wake-up, tokio wakes the
/// driver through its eventfd: a `write` and an extra `epoll_wait` per timer,
/// four system calls a request that nginx does not make. With this tick
/// pending, request timers, seconds away, are never the earliest; the price
/// is one wake-up a second.
async fn pace_timers() {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
    }
}

/// Runs the gateway on already-bound listeners until `shutdown` resolves,
/// then drains in-flight requests within the configured grace period.
pub async fn run(
    public: TcpListener,
    admin: TcpListener,
    config: config::Config,
    upstream: Arc<dyn upstream::Upstream>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> std::io::Result<()> {
    run_with(public, admin, config, upstream, Extras::default(), shutdown).await
}

/// What a gateway started in process opens beside its listeners, when
/// asked: the plain [`run`] opens neither.
#[derive(Default)]
pub struct Extras {
    /// Open the migration inventory (when `[inventory]` is on), as
    /// `v1compat sandbox` does. Off by default, so that gateways started in
    /// process (tests) do not share its default file.
    pub inventory: bool,
    /// Handed the live shadow mirror once it is built, before anything is
    /// served (dropped when `[shadow]` is off or start-up fails). Tests
    /// await [`shadow::Mirror::flush`] with it rather than polling for what
    /// the copies leave behind.
    pub mirror: Option<tokio::sync::oneshot::Sender<Arc<shadow::Mirror>>>,
}

/// [`run`], with the [`Extras`] asked for.
pub async fn run_with(
    public: TcpListener,
    admin: TcpListener,
    config: config::Config,
    upstream: Arc<dyn upstream::Upstream>,
    extras: Extras,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let tls = (
        tls_acceptor(&config.public_tls)?,
        tls_acceptor(&config.admin_tls)?,
    );
    let live = reload::Live::new(upstream, config);
    if extras.inventory {
        live.open_inventory().await.map_err(std::io::Error::other)?;
    }
    serve_live(public, admin, live, tls, None, extras.mirror, shutdown).await
}

/// Whether the configuration starts without `upstream.service_key`, so
/// that V1's keyless operations cannot be served to a client sending no key.
fn started_without_service_key(live: &reload::Live) -> bool {
    live.load().config.service_key.is_none()
}

fn tls_acceptor(files: &Option<tls::TlsFiles>) -> std::io::Result<Option<tls::Acceptor>> {
    files
        .as_ref()
        .map(tls::Acceptor::new)
        .transpose()
        .map_err(std::io::Error::other)
}

/// [`run`] for a configuration that reloads: on SIGHUP and when its file
/// (or a file it names) changes. The triggers are installed before anything
/// is served.
pub async fn run_reloading(
    public: TcpListener,
    admin: TcpListener,
    reloader: Arc<reload::Reloader>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let triggers = reload::triggers::Triggers::install(reloader.clone());
    let live = reloader.live().clone();
    let tls = reloader.tls();
    serve_live(public, admin, live, tls, Some(triggers), None, shutdown).await
}

async fn serve_live(
    public: TcpListener,
    admin: TcpListener,
    live: Arc<reload::Live>,
    (public_tls, admin_tls): (Option<tls::Acceptor>, Option<tls::Acceptor>),
    triggers: Option<reload::triggers::Triggers>,
    on_mirror: Option<tokio::sync::oneshot::Sender<Arc<shadow::Mirror>>>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    // The configuration it starts with loaded: the reload gauges' first value.
    reload::record_success();
    if started_without_service_key(&live) {
        tracing::warn!("upstream.service_key is not set: V1 requests that need no key (store, worker detail, proxy regions) are refused with a V1 401 when the client sends none; set it (V1COMPAT_UPSTREAM__SERVICE_KEY) to serve them");
    }
    // The callback relay (its store opened, its deliverer started) before
    // anything serves: a store that cannot be opened stops start-up. `serve`
    // opens it before binding (`Live::open_callbacks`); otherwise here. It
    // keeps the V2 client and settings it starts with; reloads carry it over.
    live.open_callbacks().await.map_err(std::io::Error::other)?;
    let relay = live.relay();
    if let Some(relay) = &relay {
        relay.deliver(stop_rx.clone());
    }
    // The inventory (when opened: `serve`, `sandbox`) flushes on its
    // interval; the last flush follows the drain, below.
    let inventory = live.inventory();
    if let Some(inventory) = &inventory {
        let inventory = inventory.clone();
        let stop = stop_rx.clone();
        tokio::spawn(async move { inventory.flush_every_interval(stop).await });
    }
    // What runs now: each stage is handed its own settings, built from the
    // configuration here, and the cell it reads the live ones from.
    let running = live.load();
    let config = &running.config;
    let pipeline = Arc::new(pipeline::Pipeline::live(live.gateway().clone()));
    let in_flight = pipeline.clone();
    // Built before anything serves: a capture file that cannot be opened
    // stops start-up instead of leaving a gateway without its public side.
    let mirror = shadow::Mirror::new(config.mirror(), running.gateway.clone())?;
    if let (Some(tx), Some(mirror)) = (on_mirror, &mirror) {
        let _ = tx.send(mirror.clone());
    }
    // The drain sequence (see `conn::drain`): readiness false, then after
    // `shutdown.drain_delay_ms` the public listener stops and drains within
    // the grace period; the admin listener stays up until it is done, so
    // probes see "draining" rather than a refused connection.
    let public_drain = conn::Drain::new();
    let admin_drain = conn::Drain::new();
    let drain_delay = config.drain_delay;
    // Reloads run until the admin listener is done.
    let reloads = triggers.map(|t| {
        let admin_drain = admin_drain.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = t.run() => {}
                () = admin_drain.stopped() => {}
            }
        })
    });
    let public = tokio::spawn(server::serve_public(
        public,
        public_tls,
        config.edge(),
        pipeline,
        mirror,
        relay.clone(),
        public_drain.clone(),
    ));
    let grace = config.grace_period;
    let admin = tokio::spawn(server::serve_admin(
        admin,
        admin_tls,
        config.edge(),
        live.admin().clone(),
        server::OperatorEndpoints {
            relay,
            inventory: inventory.clone(),
        },
        public_drain.clone(),
        admin_drain.clone(),
    ));
    let pacer = tokio::spawn(pace_timers());
    // Started: what start-up freed (the configuration read, TLS roots
    // parsed, the stores opened) is given back rather than kept for reuse
    // on a thread that may now idle (about 1 MB of an idle gateway).
    crate::common::allocator::give_back_free_memory();
    shutdown.await;
    pacer.abort();
    public_drain.begin();
    let draining = std::time::Instant::now();
    tracing::info!(
        in_flight = in_flight.in_flight(),
        drain_delay = %humantime::format_duration(drain_delay),
        grace_period = %humantime::format_duration(grace),
        "shutting down: readiness is false; draining after the drain delay"
    );
    tokio::time::sleep(drain_delay).await;
    public_drain.stop();
    // The callback deliverer stops claiming; a claim in flight is either
    // recorded or taken over after its lease.
    let _ = stop_tx.send(true);
    let a = public.await;
    // Every answered request is counted by now: the inventory's last flush.
    if let Some(inventory) = &inventory {
        if let Err(e) = inventory.flush().await {
            tracing::warn!(error = %e, "inventory store: the last flush failed; the counts since the previous one are lost");
        }
    }
    admin_drain.stop();
    let b = admin.await;
    if let Some(reloads) = reloads {
        let _ = reloads.await;
    }
    tracing::info!(
        took_ms = draining.elapsed().as_millis() as u64,
        left_in_flight = in_flight.in_flight(),
        "drained; stopped"
    );
    a.map_err(std::io::Error::other)??;
    b.map_err(std::io::Error::other)??;
    Ok(())
}
