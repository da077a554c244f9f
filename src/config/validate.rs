//! Validation: a typed [`RawConfig`] becomes the [`Config`] the gateway runs
//! with, every problem collected rather than the first one returned.

use std::net::SocketAddr;
use std::time::Duration;

use super::{Config, ConfigErrors, RawConfig};
use crate::ops::Compat;
use crate::upstream::{AuthStyle, RetrySettings, UpstreamSettings};

use crate::common::checks::MAX_CONCURRENCY;

/// The most `runtime.threads` may ask for: more is a mistake, not a machine.
pub const MAX_THREADS: usize = 1024;

/// Checks a parsed config, collecting every problem.
pub fn validate(raw: RawConfig) -> Result<Config, ConfigErrors> {
    let mut p = Vec::new();
    let addr = |p: &mut Vec<String>, key: &str, v: &str| -> SocketAddr {
        v.parse().unwrap_or_else(|_| {
            p.push(format!("{key}: {v:?} is not an IP:port address"));
            SocketAddr::from(([127, 0, 0, 1], 0))
        })
    };
    let public_addr = addr(&mut p, "listen.public", &raw.listen.public);
    let admin_addr = addr(&mut p, "listen.admin", &raw.listen.admin);
    let l = &raw.listen;
    let public_tls = tls_files(&mut p, "listen.tls", &l.tls_cert_file, &l.tls_key_file);
    let admin_tls = tls_files(
        &mut p,
        "listen.admin_tls",
        &l.admin_tls_cert_file,
        &l.admin_tls_key_file,
    );
    // The same port on one address, or on any address when either is the
    // wildcard (`0.0.0.0:8080` holds `127.0.0.1:8080` too), cannot be bound
    // twice.
    let overlap = public_addr.port() == admin_addr.port()
        && public_addr.port() != 0
        && (public_addr.ip() == admin_addr.ip()
            || public_addr.ip().is_unspecified()
            || admin_addr.ip().is_unspecified());
    if overlap {
        p.push(format!(
            "listen.admin: {admin_addr} overlaps listen.public ({public_addr}): the two listeners need different ports"
        ));
    }

    let u = &raw.upstream;
    let base_url = crate::upstream::http_client::parse_base_url("upstream.base_url", &u.base_url)
        .map_err(|e| p.push(e))
        .ok();
    let auth_style = match u.auth.as_str() {
        "bearer" => AuthStyle::Bearer,
        "api-key" => AuthStyle::ApiKeyHeader,
        other => {
            p.push(format!(
                "upstream.auth: {other:?} is not one of bearer, api-key"
            ));
            AuthStyle::Bearer
        }
    };
    let service_key = match u.service_key.as_str() {
        "" => None,
        k => {
            let key = crate::upstream::ApiKey::new(k);
            if key.is_none() {
                p.push("upstream.service_key: must be visible ASCII without spaces".into());
            }
            key
        }
    };
    for (key, v) in [
        ("upstream.connect_timeout_ms", u.connect_timeout_ms),
        ("upstream.attempt_timeout_ms", u.attempt_timeout_ms),
        ("upstream.request_timeout_ms", u.request_timeout_ms),
        ("upstream.sync_run_timeout_ms", u.sync_run_timeout_ms),
    ] {
        if v == 0 {
            p.push(format!("{key}: must be greater than 0"));
        }
    }
    if u.attempt_timeout_ms > u.request_timeout_ms {
        p.push("upstream.attempt_timeout_ms: must not exceed upstream.request_timeout_ms".into());
    }
    if u.sync_run_timeout_ms < 300_000 {
        p.push(
            "upstream.sync_run_timeout_ms: must be at least 300000 (V2 holds synchronous runs up to 5 minutes)".into(),
        );
    }
    if u.max_response_bytes < 1024 {
        p.push("upstream.max_response_bytes: must be at least 1024".into());
    }

    let r = &raw.retry;
    let retry = RetrySettings {
        max_attempts: r.max_attempts,
        base_backoff: Duration::from_millis(r.base_backoff_ms),
        max_backoff: Duration::from_millis(r.max_backoff_ms),
        // Out of 0..=1 either way when it was out as f64; f32 is exact
        // enough inside.
        budget_percent: r.budget_percent as f32,
        budget_min_per_sec: r.budget_min_per_sec,
        // No retry may start after the V1 request's own deadline.
        retry_window: Duration::from_millis(u.request_timeout_ms),
    };
    p.extend(retry.validate());

    let l = &raw.limits;
    if l.max_body_bytes == 0 {
        p.push("limits.max_body_bytes: must be greater than 0".into());
    }
    if !(1..=MAX_CONCURRENCY).contains(&l.max_in_flight) {
        p.push(format!(
            "limits.max_in_flight: must be between 1 and {MAX_CONCURRENCY}"
        ));
    }
    if !(1..=10_000).contains(&l.max_page_size) {
        p.push("limits.max_page_size: must be between 1 and 10000".into());
    }
    if !(1..=64).contains(&l.fanout_concurrency) {
        p.push("limits.fanout_concurrency: must be between 1 and 64".into());
    }

    let w = &raw.workers;
    if w.cache_capacity == 0 {
        p.push("workers.cache_capacity: must be greater than 0".into());
    }
    for (from, to) in &w.aliases {
        if crate::v2::Segment::worker(to).is_err() || from.is_empty() {
            p.push(format!(
                "workers.aliases: {from:?} = {to:?} is not a valid worker id mapping"
            ));
        }
    }

    let c = &raw.compat;
    let memory_field = match c.worker_memory_field.as_str() {
        "memory_bytes" => "memory_bytes",
        "memory" => "memory",
        other => {
            p.push(format!(
                "compat.worker_memory_field: {other:?} is not one of memory_bytes, memory"
            ));
            "memory_bytes"
        }
    };
    let traffic_expiration_from_balance = match c.traffic_expiration.as_str() {
        "balance_expiration_at" => true,
        "zero" => false,
        other => {
            p.push(format!(
                "compat.traffic_expiration: {other:?} is not one of balance_expiration_at, zero"
            ));
            true
        }
    };
    for (key, v) in [
        ("compat.aborted_status", c.aborted_status),
        ("compat.unknown_status", c.unknown_status),
    ] {
        if !(1..=5).contains(&v) {
            p.push(format!("{key}: must be a V1 status between 1 and 5"));
        }
    }

    // Typed (and a bad name refused, naming the key) as the file was read.
    let dialect = v1compat_contract::dialect::Dialect {
        business_error_status: c.business_error_status,
        empty_store_search: c.empty_store_search,
        missing_key_status: c.missing_key_status,
    };

    match raw.log.format.as_str() {
        "json" | "text" => {}
        other => p.push(format!("log.format: {other:?} is not one of json, text")),
    }
    p.extend(crate::telemetry::log_filter::problem(&raw.log.level));

    let shadow = crate::shadow::config::validate(&raw.shadow, &mut p);
    let extra_root_pem = read_ca_file(&u.ca_file, &mut p);
    let callbacks = crate::callbacks::config::validate(&raw.callbacks, &mut p);
    let inventory = crate::inventory::config::validate(&raw.inventory, &mut p);
    let connections = crate::edge::conn::settings::validate(&raw.connections, &mut p);
    if raw.runtime.threads > MAX_THREADS {
        p.push(format!(
            "runtime.threads: {} is more than {MAX_THREADS} (0 = one per CPU)",
            raw.runtime.threads
        ));
    }
    let operator = crate::edge::server::operator::validate(&raw.admin, &mut p);
    let trusted_proxies = raw
        .listen
        .trusted_proxies
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            v.parse()
                .map_err(|e| p.push(format!("listen.trusted_proxies[{i}]: {e}")))
                .ok()
        })
        .collect();

    let (Some(base_url), true) = (base_url, p.is_empty()) else {
        return Err(ConfigErrors(p));
    };
    let mut upstream = UpstreamSettings::new(base_url);
    upstream.auth_style = auth_style;
    upstream.connect_timeout = Duration::from_millis(u.connect_timeout_ms);
    upstream.attempt_timeout = Duration::from_millis(u.attempt_timeout_ms);
    upstream.pool_idle_timeout = Duration::from_millis(u.pool_idle_timeout_ms);
    upstream.pool_max_idle_per_host = u.pool_max_idle_per_host;
    upstream.max_response_bytes = u.max_response_bytes;
    upstream.extra_root_pem = extra_root_pem;
    upstream.ca_file = (!u.ca_file.is_empty()).then(|| u.ca_file.clone().into());
    upstream.retry = retry;
    // V2 answers count in the same budget as the edge's bodies and answers.
    upstream.memory = Some(connections.budget.clone());
    Ok(Config {
        public_addr,
        admin_addr,
        public_tls,
        admin_tls,
        upstream,
        service_key,
        request_timeout: Duration::from_millis(u.request_timeout_ms),
        sync_run_timeout: Duration::from_millis(u.sync_run_timeout_ms),
        limits: raw.limits,
        workers: raw.workers,
        compat: Compat {
            memory_field,
            account_traffic: c.account_traffic,
            traffic_expiration_from_balance,
            aborted_status: c.aborted_status,
            unknown_status: c.unknown_status,
            extra_export_formats: c.extra_export_formats,
            origin_rename: c.origin_rename.clone(),
            dialect,
        },
        log: raw.log,
        grace_period: Duration::from_secs(raw.shutdown.grace_period_secs),
        drain_delay: Duration::from_millis(raw.shutdown.drain_delay_ms),
        connections,
        runtime: raw.runtime,
        shadow,
        callbacks,
        inventory,
        operator,
        health_check_interval: (u.health_check_interval_ms > 0)
            .then(|| Duration::from_millis(u.health_check_interval_ms)),
        trusted_proxies,
    })
}

/// Reads `upstream.ca_file` (empty = none) and proves it holds usable
/// certificates, so a bad file stops start-up or a reload here rather than
/// failing every V2 call later.
fn read_ca_file(path: &str, p: &mut Vec<String>) -> Option<Vec<u8>> {
    if path.is_empty() {
        return None;
    }
    let pem = match std::fs::read(path) {
        Ok(pem) => pem,
        Err(e) => {
            p.push(format!("upstream.ca_file: {path}: {e}"));
            return None;
        }
    };
    if let Err(e) = crate::upstream::http_client::tls_config(Some(&pem)) {
        p.push(format!("upstream.ca_file: {path}: {e}"));
        return None;
    }
    Some(pem)
}

/// A listener's TLS files (`{prefix}_cert_file`, `{prefix}_key_file`): both
/// or neither, and usable now (a key that does not match the certificate is
/// caught here, not at the first handshake).
fn tls_files(
    p: &mut Vec<String>,
    prefix: &str,
    cert: &str,
    key: &str,
) -> Option<crate::edge::tls::TlsFiles> {
    match (cert.is_empty(), key.is_empty()) {
        (true, true) => None,
        (false, false) => {
            let files = crate::edge::tls::TlsFiles {
                cert: cert.into(),
                key: key.into(),
            };
            match crate::edge::tls::check(&files) {
                Ok(()) => Some(files),
                Err((file, e)) => {
                    let which = match file {
                        crate::edge::tls::TlsFile::Cert => "cert",
                        crate::edge::tls::TlsFile::Key => "key",
                    };
                    p.push(format!("{prefix}_{which}_file: {e}"));
                    None
                }
            }
        }
        (false, true) => {
            p.push(format!(
                "{prefix}_key_file: required with {prefix}_cert_file"
            ));
            None
        }
        (true, false) => {
            p.push(format!(
                "{prefix}_cert_file: required with {prefix}_key_file"
            ));
            None
        }
    }
}
