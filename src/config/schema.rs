//! The configuration file's schema: every section and key with its default,
//! as serde reads them ([`RawConfig`]). Nothing here is checked beyond its
//! type; [`validate`](super::validate) turns a `RawConfig` into the
//! [`Config`](super::Config) the gateway runs with. The V1 dialect choices
//! are typed by the contract's own types ([`Choice`]): their names and
//! defaults are spelled there, once.
//!
//! Every key has a concrete default (an empty string or list stands for
//! "none"), so the defaults, serialised, list every key there is.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use v1compat_contract::dialect::{
    BusinessErrorStatus, Choice, Dialect, EmptyStoreSearch, MissingKeyStatus,
};

use crate::common::checks::suggestion;
use crate::upstream::{RetrySettings, UpstreamSettings};

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawConfig {
    pub listen: ListenSection,
    pub upstream: UpstreamSection,
    pub retry: RetrySection,
    pub limits: LimitsSection,
    pub workers: WorkersSection,
    pub compat: CompatSection,
    pub log: LogSection,
    pub shutdown: ShutdownSection,
    pub connections: crate::edge::conn::ConnectionSection,
    pub runtime: RuntimeSection,
    pub shadow: crate::shadow::ShadowSection,
    /// The callback relay (issue 9); checked in `callbacks::config`.
    pub callbacks: crate::callbacks::CallbacksSection,
    /// The migration inventory; checked in `inventory::config`.
    pub inventory: crate::inventory::InventorySection,
    /// The admin listener's operator endpoints; checked in `server::operator`.
    pub admin: crate::edge::server::operator::AdminSection,
}

/// The async runtime, read once at start-up (see [`crate::cli::runtime`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeSection {
    /// Threads that serve requests: 0 for one per CPU the process may use
    /// (its CPU affinity and cgroup quota), a single-threaded runtime when
    /// that is one CPU, or `TOKIO_WORKER_THREADS` workers when that is set;
    /// 1 for a single-threaded runtime; more for that many.
    pub threads: usize,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenSection {
    /// V1 traffic.
    pub public: String,
    /// `/healthz`, `/readyz`, `/metrics`.
    pub admin: String,
    /// PEM certificate chain and key for TLS on `public`; both or neither.
    pub tls_cert_file: String,
    pub tls_key_file: String,
    /// The same for `admin`.
    pub admin_tls_cert_file: String,
    pub admin_tls_key_file: String,
    /// Peers (addresses or CIDRs) whose `X-Forwarded-For` / `Forwarded`
    /// is believed for the access line's `forwarded_for`. Empty = none.
    pub trusted_proxies: Vec<String>,
}

impl Default for ListenSection {
    fn default() -> Self {
        ListenSection {
            public: "127.0.0.1:8080".into(),
            admin: "127.0.0.1:9090".into(),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            admin_tls_cert_file: String::new(),
            admin_tls_key_file: String::new(),
            trusted_proxies: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamSection {
    pub base_url: String,
    /// Used only for V1 operations that needed no key (store, worker detail,
    /// proxy regions) when the client sent none. Empty = none.
    pub service_key: String,
    /// `bearer` (Authorization: Bearer) or `api-key` (legacy header).
    pub auth: String,
    pub connect_timeout_ms: u64,
    pub attempt_timeout_ms: u64,
    pub request_timeout_ms: u64,
    /// Synchronous runs: V2 holds them up to 5 minutes.
    pub sync_run_timeout_ms: u64,
    pub pool_idle_timeout_ms: u64,
    /// Idle V2 connections kept for reuse; beyond it a returned connection
    /// is closed (see [`crate::upstream::UpstreamSettings`]).
    pub pool_max_idle_per_host: usize,
    pub max_response_bytes: usize,
    /// PEM file of CA certificates trusted for V2 besides the Mozilla roots
    /// (a private CA in front of V2). Empty = none.
    pub ca_file: String,
    /// How often V2's reachability is checked (a TCP connect), so that
    /// `v1compat_upstream_reachable` holds with nothing probing. 0 = off.
    pub health_check_interval_ms: u64,
}

impl Default for UpstreamSection {
    /// The client's own defaults ([`UpstreamSettings::new`]), in the file's
    /// units, so the two cannot drift apart.
    fn default() -> Self {
        let base_url = "https://openapi.coreclaw.com";
        let client = UpstreamSettings::new(url::Url::parse(base_url).expect("a valid URL"));
        UpstreamSection {
            base_url: base_url.into(),
            service_key: String::new(),
            auth: "bearer".into(),
            connect_timeout_ms: millis(client.connect_timeout),
            attempt_timeout_ms: millis(client.attempt_timeout),
            request_timeout_ms: 30_000,
            sync_run_timeout_ms: 330_000,
            pool_idle_timeout_ms: millis(client.pool_idle_timeout),
            pool_max_idle_per_host: client.pool_max_idle_per_host,
            max_response_bytes: client.max_response_bytes,
            ca_file: String::new(),
            health_check_interval_ms: 10_000,
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySection {
    pub max_attempts: u32,
    pub base_backoff_ms: u64,
    pub max_backoff_ms: u64,
    pub budget_percent: f64,
    pub budget_min_per_sec: u32,
}

impl Default for RetrySection {
    /// [`RetrySettings::default`] in the file's units.
    fn default() -> Self {
        let d = RetrySettings::default();
        RetrySection {
            max_attempts: d.max_attempts,
            base_backoff_ms: millis(d.base_backoff),
            max_backoff_ms: millis(d.max_backoff),
            // Through its shortest decimal form: 0.2f32 widened directly
            // would print as 0.20000000298023224.
            budget_percent: d.budget_percent.to_string().parse().unwrap_or(0.2),
            budget_min_per_sec: d.budget_min_per_sec,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    pub max_body_bytes: usize,
    pub max_in_flight: usize,
    /// Largest V1 `page_size` / store `limit` served (V1 documented 1000).
    pub max_page_size: u64,
    /// V2 page calls in flight for one V1 request.
    pub fanout_concurrency: usize,
}

impl Default for LimitsSection {
    fn default() -> Self {
        LimitsSection {
            max_body_bytes: 1 << 20,
            max_in_flight: 1024,
            max_page_size: 1000,
            fanout_concurrency: 16,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkersSection {
    /// Check an unseen worker id against V2 before starting a run with it.
    pub verify: bool,
    pub positive_ttl_secs: u64,
    pub negative_ttl_secs: u64,
    pub cache_capacity: usize,
    /// Old V1 `scraper_slug` → V2 `workerId`, for ids V2 no longer knows.
    pub aliases: BTreeMap<String, String>,
}

impl Default for WorkersSection {
    fn default() -> Self {
        WorkersSection {
            verify: true,
            positive_ttl_secs: 600,
            negative_ttl_secs: 30,
            cache_capacity: 10_000,
            aliases: BTreeMap::new(),
        }
    }
}

/// Where the spec and the public record disagree, or V2 lacks what V1 had.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompatSection {
    /// Name of the memory field in V1 worker detail: `memory_bytes` (spec)
    /// or `memory` (the last V1 docs).
    pub worker_memory_field: String,
    /// V1 `traffic` in account info; V2 dropped the field.
    pub account_traffic: i64,
    /// V1 `traffic_expiration_at`: `balance_expiration_at` or `zero`.
    pub traffic_expiration: String,
    /// V1 status for a V2 `aborted`/`cancelled` (not in the contract): 4
    /// (failed, the completed state a cancelled run ends in) or 5.
    pub aborted_status: i64,
    /// V1 status for any other unknown V2 status: 2 keeps pollers polling.
    pub unknown_status: i64,
    /// Accept V2's extra export formats (jsonl, xlsx, …) beyond csv/json.
    pub extra_export_formats: bool,
    /// V2 `origin` values rewritten for V1 clients.
    pub origin_rename: BTreeMap<String, String>,
    /// HTTP status of V1 error envelopes (see [`BusinessErrorStatus`]).
    #[serde(deserialize_with = "choice")]
    pub business_error_status: BusinessErrorStatus,
    /// Store search with `search=` (see [`EmptyStoreSearch`]).
    #[serde(deserialize_with = "choice")]
    pub empty_store_search: EmptyStoreSearch,
    /// Keyed operation without a key (see [`MissingKeyStatus`]).
    #[serde(deserialize_with = "choice")]
    pub missing_key_status: MissingKeyStatus,
}

/// A dialect choice by its name; a name that is a status reads naturally
/// unquoted (`200` and `"200"` alike). A name that is none of the choice's
/// is refused with the allowed ones and the closest, if one is close.
fn choice<'de, D, C>(d: D) -> Result<C, D::Error>
where
    D: serde::Deserializer<'de>,
    C: Choice,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        S(String),
        I(i64),
    }
    let name = match Either::deserialize(d)? {
        Either::S(s) => s,
        Either::I(i) => i.to_string(),
    };
    C::parse(&name).map_err(|why| {
        let hint = suggestion(&name, C::ALL.iter().map(|c| c.name()));
        serde::de::Error::custom(format!("{why}{hint}"))
    })
}

impl Default for CompatSection {
    fn default() -> Self {
        CompatSection {
            worker_memory_field: "memory_bytes".into(),
            account_traffic: 0,
            traffic_expiration: "balance_expiration_at".into(),
            aborted_status: 4,
            unknown_status: 2,
            extra_export_formats: true,
            origin_rename: [("api_v2", "api"), ("openapi", "api")]
                .into_iter()
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .collect(),
            business_error_status: Dialect::default().business_error_status,
            empty_store_search: Dialect::default().empty_store_search,
            missing_key_status: Dialect::default().missing_key_status,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    /// `json` or `text`.
    pub format: String,
    /// A tracing filter, e.g. `info` or `v1compat=debug`.
    pub level: String,
    /// One `info` access line per V1 request. Off, only failures (origin
    /// upstream or gateway) are logged, still once each.
    pub access: bool,
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection {
            format: "json".into(),
            level: "info".into(),
            access: true,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownSection {
    /// From the stop of the listener until requests still in progress are
    /// cut (answered with a V1 envelope).
    pub grace_period_secs: u64,
    /// From SIGTERM (readiness false) until the listener stops accepting,
    /// so a load balancer has seen `/readyz` fail before connections are
    /// refused. 0 stops at once.
    pub drain_delay_ms: u64,
}

impl Default for ShutdownSection {
    fn default() -> Self {
        ShutdownSection {
            grace_period_secs: 30,
            drain_delay_ms: 0,
        }
    }
}
