//! v1compat: a gateway that keeps legacy V1 clients of the Worker Run Service
//! (the CoreClaw Open API) working against its V2 API.
//!
//! The request path, one way through:
//!
//! ```text
//! V1 client ─▶ server    HTTP in: listeners, tower stack (request id,
//!                        sensitive headers, trace, catch-panic), body read
//!           ─▶ pipeline  one raw V1 request → one V1 answer:
//!              admit       route (unknown → V1 404), in-flight slot (held by
//!                          a drop guard), key header, Content-Type, body size
//!              translate   per-operation deadline ─▶ ops
//!              finish      envelope + diagnostic headers, request metrics
//!           ─▶ ops       decode V1 input → pure mapping → V2 call(s) through
//!                        Upstream → pure mapping back → V1 `data`
//!           ─▶ error     every failure → one V1 envelope (the only place)
//! V1 client ◀─ server    HTTP out
//! ```
//!
//! Around the pipeline, never inside it: [`shadow::Mirror`] wraps
//! `admit`/`translate` when `[shadow]` is on; `replay --upstream` and the
//! golden tests call [`pipeline::Pipeline::answer`] in-process, so they see
//! exactly what a live client sees.
//!
//! Modules: [`config`] (TOML + env → validated config), [`server`],
//! [`pipeline`], [`route`], [`ops`] (one module per operation family),
//! [`paging`] (V1 page windows → V2 page plans), [`upstream`] (the V2
//! client), [`v1`]/[`v2`] (wire types), [`error`], [`telemetry`] (logs,
//! metric names), [`sandbox`] (an embedded V2 reference service with a native
//! V1 surface, for demos and tests), [`shadow`] (the migration shadow tester:
//! live mirror, diff engine, capture, replay, report — beside the request
//! path, never on it), [`differences`] (every V1↔V2 difference, once, as
//! data: feeds shadow defaults, the differential test and `COMPATIBILITY.md`).

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

pub mod bind;
pub mod callbacks;
pub mod config;
pub mod conn;
pub mod demo;
pub mod dialect;
pub mod differences;
pub mod error;
pub mod openapi;
pub mod ops;
pub mod paging;
pub mod pipeline;
pub mod probe;
pub mod route;
pub mod sandbox;
pub mod server;
pub mod shadow;
pub mod telemetry;
pub mod upstream;
pub mod v1;
pub mod v2;

/// Runs the gateway on already-bound listeners until `shutdown` resolves,
/// then drains in-flight requests within the configured grace period.
pub async fn run(
    public: TcpListener,
    admin: TcpListener,
    config: config::Config,
    upstream: Arc<dyn upstream::Upstream>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    // The callback relay (its store opened, its deliverer started) before
    // anything serves: a store that cannot be opened stops start-up.
    let relay = callbacks::Relay::start(
        &config.callbacks,
        upstream.clone(),
        config.compat.clone(),
        stop_rx.clone(),
    )
    .await
    .map_err(std::io::Error::other)?;
    let gateway = Arc::new(ops::Gateway::new(upstream, Arc::new(config)).with_callbacks(relay));
    let pipeline = Arc::new(pipeline::Pipeline::new(gateway.clone()));
    let in_flight = pipeline.clone();
    // Built before anything serves: a capture file that cannot be opened
    // stops start-up instead of leaving a gateway without its public side.
    let mirror = shadow::Mirror::new(gateway.clone())?;
    // The drain sequence (see `conn::drain`): readiness false, then after
    // `shutdown.drain_delay_ms` the public listener stops and drains within
    // the grace period; the admin listener stays up until it is done, so
    // probes see "draining" rather than a refused connection.
    let public_drain = conn::Drain::new();
    let admin_drain = conn::Drain::new();
    let drain_delay = gateway.config.drain_delay;
    let public = tokio::spawn(server::serve_public(
        public,
        pipeline,
        mirror,
        public_drain.clone(),
    ));
    let grace = gateway.config.grace_period;
    let admin = tokio::spawn(server::serve_admin(
        admin,
        gateway,
        public_drain.clone(),
        admin_drain.clone(),
    ));
    shutdown.await;
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
    admin_drain.stop();
    let b = admin.await;
    tracing::info!(
        took_ms = draining.elapsed().as_millis() as u64,
        left_in_flight = in_flight.in_flight(),
        "drained; stopped"
    );
    a.map_err(std::io::Error::other)??;
    b.map_err(std::io::Error::other)??;
    Ok(())
}
