//! V2's reachability, beside the request path: a TCP connection to V2 (or
//! to the proxy in front of it) opened at start, every
//! `upstream.health_check_interval_ms` and on each `/readyz`, which sets
//! `v1compat_upstream_reachable`. Real V2 calls set the gauge too
//! (`upstream::client`: a connect failure 0, an answer 1), so it holds on a
//! sidecar or VM that nothing probes.

use std::time::Duration;

use crate::edge::{AdminSettings, LiveAdmin};
use crate::telemetry;

/// Bounds `/readyz`'s V2 check below a probe's default one-second timeout.
const UPSTREAM_PROBE_TIMEOUT: Duration = Duration::from_millis(700);

/// With the periodic check off, how often the configuration is read again
/// (a reload may turn it on).
const WHILE_OFF: Duration = Duration::from_secs(1);

/// Checks at once, then every `upstream.health_check_interval_ms` of the
/// live configuration (read again each time: a reload changes it), until
/// dropped. A change of state is logged once: a warning when V2 stops
/// answering, a line when it is back.
pub(super) async fn every_interval(live: &LiveAdmin) {
    let mut last: Option<bool> = None;
    let mut first = true;
    loop {
        let settings = live.load();
        let every = settings.health_check_interval;
        if first || every.is_some() {
            let outcome = check(&settings).await;
            let now = outcome.is_ok();
            match (&outcome, last) {
                (Err(why), Some(true) | None) => {
                    tracing::warn!(problem = %why, "V2 is unreachable")
                }
                (Ok(()), Some(false)) => tracing::info!("V2 is reachable again"),
                _ => {}
            }
            last = Some(now);
            first = false;
        }
        drop(settings);
        tokio::time::sleep(every.unwrap_or(WHILE_OFF)).await;
    }
}

/// Checks V2's reachability and sets `v1compat_upstream_reachable`; what
/// `/readyz` says of it.
pub(super) async fn record(settings: &AdminSettings) -> String {
    match check(settings).await {
        Ok(()) => "reachable".to_owned(),
        Err(why) => why,
    }
}

/// [`upstream_reachable`], its outcome set on the gauge.
async fn check(settings: &AdminSettings) -> Result<(), String> {
    let outcome = upstream_reachable(settings).await;
    let value = if outcome.is_ok() { 1.0 } else { 0.0 };
    metrics::gauge!(telemetry::UPSTREAM_REACHABLE).set(value);
    outcome
}

/// Whether a TCP connection to the upstream opens, within a deadline short
/// enough for a readiness probe's own timeout (one second by default).
async fn upstream_reachable(settings: &AdminSettings) -> Result<(), String> {
    // Behind HTTPS_PROXY the first hop is the proxy, not V2.
    let (host, port) = settings
        .upstream_first_hop
        .as_ref()
        .ok_or("upstream has no host or port")?;
    let (host, port) = (host.as_str(), *port);
    match tokio::time::timeout(
        UPSTREAM_PROBE_TIMEOUT,
        tokio::net::TcpStream::connect((host, port)),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("upstream {host}:{port} unreachable: {e}")),
        Err(_) => Err(format!(
            "upstream {host}:{port} did not accept within {UPSTREAM_PROBE_TIMEOUT:?}"
        )),
    }
}
