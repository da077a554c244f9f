//! Configuration, before anything is bound: TOML text (plus `V1COMPAT_…`
//! environment overrides) → [`RawConfig`] (serde, unknown keys rejected) →
//! validated [`Config`]. Validation reports every problem at once.
//!
//! An environment variable `V1COMPAT_SECTION__KEY=value` overrides `key` in
//! `[section]` (double underscore between levels, names case-insensitive);
//! the value is read as a TOML scalar (`42`, `true`, `1.5`) or else a string.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::upstream::{AuthStyle, RetrySettings, UpstreamSettings};

pub const ENV_PREFIX: &str = "V1COMPAT_";

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
    pub shadow: crate::shadow::ShadowSection,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenSection {
    /// V1 traffic.
    pub public: String,
    /// `/healthz`, `/readyz`, `/metrics`.
    pub admin: String,
}

impl Default for ListenSection {
    fn default() -> Self {
        ListenSection {
            public: "127.0.0.1:8080".into(),
            admin: "127.0.0.1:9090".into(),
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
    pub pool_max_idle_per_host: usize,
    pub max_response_bytes: usize,
}

impl Default for UpstreamSection {
    fn default() -> Self {
        UpstreamSection {
            base_url: "https://openapi.coreclaw.com".into(),
            service_key: String::new(),
            auth: "bearer".into(),
            connect_timeout_ms: 2_000,
            attempt_timeout_ms: 10_000,
            request_timeout_ms: 30_000,
            sync_run_timeout_ms: 330_000,
            pool_idle_timeout_ms: 90_000,
            pool_max_idle_per_host: 64,
            max_response_bytes: 16 << 20,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySection {
    pub max_attempts: u32,
    pub base_backoff_ms: u64,
    pub max_backoff_ms: u64,
    pub budget_percent: f32,
    pub budget_min_per_sec: u32,
}

impl Default for RetrySection {
    fn default() -> Self {
        RetrySection {
            max_attempts: 3,
            base_backoff_ms: 50,
            max_backoff_ms: 1_000,
            budget_percent: 0.2,
            budget_min_per_sec: 10,
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
    /// HTTP status of V1 error envelopes: `http` (documented per code) or `200`.
    #[serde(deserialize_with = "string_or_integer")]
    pub business_error_status: String,
    /// Store search with `search=`: `refuse` (400 / 4000) or `all`.
    pub empty_store_search: String,
    /// Keyed operation without a key: `401` (20001) or `400` (4000).
    #[serde(deserialize_with = "string_or_integer")]
    pub missing_key_status: String,
}

/// `200` and `"200"` alike: a status reads naturally unquoted, and environment
/// overrides turn digits into integers.
fn string_or_integer<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        S(String),
        I(i64),
    }
    Ok(match Either::deserialize(d)? {
        Either::S(s) => s,
        Either::I(i) => i.to_string(),
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
            business_error_status: "http".into(),
            empty_store_search: "refuse".into(),
            missing_key_status: "401".into(),
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
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection {
            format: "json".into(),
            level: "info".into(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownSection {
    pub grace_period_secs: u64,
}

impl Default for ShutdownSection {
    fn default() -> Self {
        ShutdownSection {
            grace_period_secs: 30,
        }
    }
}

/// The validated configuration the gateway runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub public_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub upstream: UpstreamSettings,
    pub service_key: Option<crate::upstream::ApiKey>,
    pub request_timeout: Duration,
    pub sync_run_timeout: Duration,
    pub limits: LimitsSection,
    pub workers: WorkersSection,
    pub compat: Compat,
    pub log: LogSection,
    pub grace_period: Duration,
    pub shadow: crate::shadow::ShadowConfig,
}

/// [`CompatSection`] with its choices checked.
#[derive(Debug, Clone)]
pub struct Compat {
    pub memory_field: &'static str,
    pub account_traffic: i64,
    pub traffic_expiration_from_balance: bool,
    pub aborted_status: i64,
    pub unknown_status: i64,
    pub extra_export_formats: bool,
    pub origin_rename: BTreeMap<String, String>,
    /// The V1 dialect choices (see [`crate::dialect`]).
    pub dialect: crate::dialect::Dialect,
}

impl Default for Compat {
    fn default() -> Self {
        validate(RawConfig::default())
            .map(|c| c.compat)
            .unwrap_or_else(|_| unreachable!("defaults are valid"))
    }
}

/// Every problem found, one per line.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct ConfigErrors(pub Vec<String>);

/// Reads TOML text, applies `V1COMPAT_…` overrides from `env`, validates.
pub fn load(
    text: &str,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Config, ConfigErrors> {
    let mut table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigErrors(vec![e.to_string()]))?;
    let mut problems = Vec::new();
    for (name, value) in env {
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let path: Vec<String> = rest.split("__").map(|p| p.to_ascii_lowercase()).collect();
        if path.iter().any(String::is_empty) {
            problems.push(format!("{name}: malformed override name"));
            continue;
        }
        set_path(&mut table, &path, scalar(&value));
    }
    if !problems.is_empty() {
        return Err(ConfigErrors(problems));
    }
    // Unknown keys are taken out and reported here rather than left to
    // serde, which would stop at the first one and hide every other problem.
    problems.extend(remove_unknown_keys(&mut table));
    let raw: RawConfig = match toml::Value::Table(table).try_into() {
        Ok(raw) => raw,
        Err(e) => {
            let e: toml::de::Error = e;
            problems.push(e.message().to_owned());
            return Err(ConfigErrors(problems));
        }
    };
    match validate(raw) {
        Ok(config) if problems.is_empty() => Ok(config),
        Ok(_) => Err(ConfigErrors(problems)),
        Err(ConfigErrors(more)) => {
            problems.extend(more);
            Err(ConfigErrors(problems))
        }
    }
}

/// Removes the sections and section keys [`RawConfig`] does not have (the
/// known ones are read off its defaults) and names each one.
fn remove_unknown_keys(table: &mut toml::Table) -> Vec<String> {
    let known = toml::Table::try_from(RawConfig::default()).unwrap_or_default();
    let mut problems = Vec::new();
    table.retain(|section, value| {
        let Some(fields) = known.get(section).and_then(toml::Value::as_table) else {
            problems.push(format!("{section}: unknown key"));
            return false;
        };
        if let Some(keys) = value.as_table_mut() {
            keys.retain(|key, _| {
                let ok = fields.contains_key(key);
                if !ok {
                    problems.push(format!("{section}.{key}: unknown key"));
                }
                ok
            });
        }
        true
    });
    problems
}

fn scalar(text: &str) -> toml::Value {
    let probe = format!("v = {text}");
    match probe
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
    {
        Some(v @ (toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_))) => v,
        _ => toml::Value::String(text.to_owned()),
    }
}

fn set_path(table: &mut toml::Table, path: &[String], value: toml::Value) {
    let (last, parents) = match path.split_last() {
        Some(split) => split,
        None => return,
    };
    let mut cur = table;
    for p in parents {
        let entry = cur
            .entry(p.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        cur = match entry.as_table_mut() {
            Some(t) => t,
            None => return,
        };
    }
    cur.insert(last.clone(), value);
}

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
    if public_addr == admin_addr && public_addr.port() != 0 {
        p.push("listen.admin: must differ from listen.public".into());
    }

    let u = &raw.upstream;
    let base_url = match url::Url::parse(&u.base_url) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {
            if url.query().is_some() || !url.username().is_empty() || url.password().is_some() {
                p.push("upstream.base_url: must not carry a query or credentials".into());
            }
            Some(url)
        }
        _ => {
            p.push(format!(
                "upstream.base_url: {:?} is not an http(s) URL",
                u.base_url
            ));
            None
        }
    };
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
    if !(1..=10).contains(&r.max_attempts) {
        p.push("retry.max_attempts: must be between 1 and 10".into());
    }
    if r.base_backoff_ms > r.max_backoff_ms {
        p.push("retry.base_backoff_ms: must not exceed retry.max_backoff_ms".into());
    }
    if !(0.0..=1.0).contains(&r.budget_percent) {
        p.push("retry.budget_percent: must be between 0.0 and 1.0".into());
    }

    let l = &raw.limits;
    if l.max_body_bytes == 0 {
        p.push("limits.max_body_bytes: must be greater than 0".into());
    }
    if l.max_in_flight == 0 {
        p.push("limits.max_in_flight: must be greater than 0".into());
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

    fn choice<T: Default + for<'de> Deserialize<'de>>(
        p: &mut Vec<String>,
        key: &str,
        value: &str,
        allowed: &str,
    ) -> T {
        crate::dialect::parse_choice(key, value, allowed)
            .map_err(|e| p.push(e))
            .unwrap_or_default()
    }
    let dialect = crate::dialect::Dialect {
        business_error_status: choice(
            &mut p,
            "compat.business_error_status",
            &c.business_error_status,
            "http, 200",
        ),
        empty_store_search: choice(
            &mut p,
            "compat.empty_store_search",
            &c.empty_store_search,
            "refuse, all",
        ),
        missing_key_status: choice(
            &mut p,
            "compat.missing_key_status",
            &c.missing_key_status,
            "401, 400",
        ),
    };

    match raw.log.format.as_str() {
        "json" | "text" => {}
        other => p.push(format!("log.format: {other:?} is not one of json, text")),
    }
    if tracing_subscriber::EnvFilter::try_new(&raw.log.level).is_err() {
        p.push(format!(
            "log.level: {:?} is not a valid filter",
            raw.log.level
        ));
    }

    let shadow = crate::shadow::config::validate(&raw.shadow, &mut p);

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
    upstream.retry = RetrySettings {
        max_attempts: r.max_attempts,
        base_backoff: Duration::from_millis(r.base_backoff_ms),
        max_backoff: Duration::from_millis(r.max_backoff_ms),
        budget_percent: r.budget_percent,
        budget_min_per_sec: r.budget_min_per_sec,
        // No retry may start after the V1 request's own deadline.
        retry_window: Duration::from_millis(u.request_timeout_ms),
    };
    Ok(Config {
        public_addr,
        admin_addr,
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
        shadow,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn empty_text_gives_defaults() {
        let c = load("", env(&[])).unwrap();
        assert_eq!(c.public_addr.port(), 8080);
        assert_eq!(c.compat.memory_field, "memory_bytes");
        assert!(c.service_key.is_none());
    }

    #[test]
    fn unknown_keys_are_errors() {
        let err = load("[upstream]\nbase_ur = \"http://x\"\n", env(&[])).unwrap_err();
        assert!(err.to_string().contains("base_ur"), "{err}");
        let err = load("", env(&[("V1COMPAT_UPSTREAM__NOPE", "1")])).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn unknown_keys_do_not_hide_other_problems() {
        let err = load(
            "top = 1\n[nope]\nx = 1\n[upstream]\nbase_ur = \"x\"\nbase_url = \"ftp://x\"\n[workers.aliases]\nold = \"o/n\"\n",
            env(&[]),
        )
        .unwrap_err();
        let all = err.to_string();
        for part in [
            "top: unknown key",
            "nope: unknown key",
            "upstream.base_ur: unknown key",
            "upstream.base_url:",
        ] {
            assert!(all.contains(part), "{part} missing from:\n{all}");
        }
        assert_eq!(err.0.len(), 4, "{all}");
    }

    #[test]
    fn env_overrides_win_and_are_typed() {
        let c = load(
            "[upstream]\nbase_url = \"http://a.example\"\n",
            env(&[
                ("V1COMPAT_UPSTREAM__BASE_URL", "http://b.example:81"),
                ("V1COMPAT_LIMITS__FANOUT_CONCURRENCY", "4"),
                ("V1COMPAT_COMPAT__EXTRA_EXPORT_FORMATS", "false"),
                ("OTHER_VAR", "ignored"),
            ]),
        )
        .unwrap();
        assert_eq!(c.upstream.base_url.as_str(), "http://b.example:81/");
        assert_eq!(c.limits.fanout_concurrency, 4);
        assert!(!c.compat.extra_export_formats);
    }

    #[test]
    fn dialect_choices_read_quoted_unquoted_and_from_the_environment() {
        use crate::dialect::{BusinessErrorStatus, EmptyStoreSearch, MissingKeyStatus};
        let c = load(
            "[compat]\nbusiness_error_status = 200\nempty_store_search = \"all\"\n",
            env(&[("V1COMPAT_COMPAT__MISSING_KEY_STATUS", "400")]),
        )
        .unwrap();
        assert_eq!(
            c.compat.dialect.business_error_status,
            BusinessErrorStatus::Always200
        );
        assert_eq!(c.compat.dialect.empty_store_search, EmptyStoreSearch::All);
        assert_eq!(
            c.compat.dialect.missing_key_status,
            MissingKeyStatus::BadRequest
        );
        let err = load(
            "[compat]\nbusiness_error_status = \"404\"\nempty_store_search = \"none\"\nmissing_key_status = 403\n",
            env(&[]),
        )
        .unwrap_err();
        assert_eq!(err.0.len(), 3, "{err}");
        assert!(err.to_string().contains("compat.business_error_status"));
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let err = load(
            "[listen]\npublic = \"nope\"\n[upstream]\nbase_url = \"ftp://x\"\nauth = \"basic\"\n[compat]\naborted_status = 9\n",
            env(&[]),
        )
        .unwrap_err();
        assert!(err.0.len() >= 4, "{err}");
    }
}

#[cfg(test)]
mod example_tests {
    /// The documented example must load and match the built-in defaults.
    #[test]
    fn example_config_loads() {
        let text = include_str!("../config/v1compat.toml");
        let c = super::load(text, Vec::new()).unwrap_or_else(|e| panic!("{e}"));
        let d = super::load("", Vec::new()).unwrap();
        assert_eq!(format!("{:?}", c.limits), format!("{:?}", d.limits));
        assert_eq!(c.compat.origin_rename, d.compat.origin_rename);
        assert_eq!(c.upstream.base_url, d.upstream.base_url);
        assert_eq!(format!("{:?}", c.shadow), format!("{:?}", d.shadow));
    }
}
