//! Configuration, before anything is bound: TOML text (plus `V1COMPAT_…`
//! environment overrides) → [`RawConfig`] (serde, unknown keys rejected) →
//! validated [`Config`]. One pass reports every problem, type errors
//! included, each with its key path and where it was set (file line or
//! variable).
//!
//! The parts: [`schema`] (sections, keys, defaults), `env` (the environment
//! overlay, values typed by their key), `keys` (unknown keys and types,
//! key by key), `source` (lines and variables of each key), [`validate`]
//! (checks and the runtime values), `print` (`check-config --print`).
//!
//! An environment variable `V1COMPAT_SECTION__KEY=value` overrides `key` in
//! `[section]` (double underscore between levels, names case-insensitive).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::ops::{self, Compat, WorkerIdSettings};
use crate::upstream::{Upstream, UpstreamSettings};
use crate::{edge, pipeline, shadow};

mod env;
mod keys;
pub mod print;
pub(crate) mod schema;
mod source;
mod validate;

pub use schema::*;
pub use validate::{validate, MAX_THREADS};

pub const ENV_PREFIX: &str = "V1COMPAT_";

/// The validated configuration the gateway runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub public_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// TLS on the public / admin listener, when configured.
    pub public_tls: Option<crate::edge::tls::TlsFiles>,
    pub admin_tls: Option<crate::edge::tls::TlsFiles>,
    pub upstream: UpstreamSettings,
    pub service_key: Option<crate::upstream::ApiKey>,
    pub request_timeout: Duration,
    pub sync_run_timeout: Duration,
    pub limits: LimitsSection,
    pub workers: WorkersSection,
    pub compat: Compat,
    pub log: LogSection,
    pub grace_period: Duration,
    pub drain_delay: Duration,
    pub connections: crate::edge::conn::ConnSettings,
    pub runtime: RuntimeSection,
    pub shadow: crate::shadow::ShadowConfig,
    pub callbacks: crate::callbacks::CallbacksConfig,
    /// The migration inventory (`[inventory]`).
    pub inventory: crate::inventory::InventoryConfig,
    /// Who may use the admin listener's operator endpoints (`[admin]`).
    pub operator: crate::edge::server::operator::OperatorAccess,
    /// `upstream.health_check_interval_ms`; `None` = off.
    pub health_check_interval: Option<Duration>,
    /// `listen.trusted_proxies`.
    pub trusted_proxies: Vec<crate::common::cidr::Cidr>,
}

/// Each stage's own settings, built here: the configuration is where they
/// are composed, and no stage reads [`Config`] itself.
impl Config {
    /// The snapshot a request runs on (the pipeline's settings and the
    /// operations' side), on `upstream`.
    pub fn gateway(&self, upstream: Arc<dyn Upstream>) -> pipeline::Gateway {
        pipeline::Gateway::new(upstream, self.pipeline(), self.translation())
    }

    /// What the pipeline reads (see [`pipeline::Settings`]).
    pub fn pipeline(&self) -> pipeline::Settings {
        pipeline::Settings {
            trusted_proxies: self.trusted_proxies.clone(),
            access_log: self.log.access,
            dialect: self.compat.dialect,
            max_body_bytes: self.limits.max_body_bytes,
            max_in_flight: self.limits.max_in_flight,
            request_timeout: self.request_timeout,
            sync_run_timeout: self.sync_run_timeout,
            notices: self.inventory.notices.clone(),
        }
    }

    /// What the listeners read at start (see [`edge::Settings`]).
    pub fn edge(&self) -> edge::Settings {
        edge::Settings {
            connections: self.connections.clone(),
            grace_period: self.grace_period,
        }
    }

    /// What the admin listener reads (see [`edge::AdminSettings`]).
    pub fn admin(&self) -> edge::AdminSettings {
        let upstream = &self.upstream;
        edge::AdminSettings {
            operator: self.operator.clone(),
            upstream_first_hop: upstream.proxy.first_hop(&upstream.base_url),
            health_check_interval: self.health_check_interval,
            inventory: self.inventory.clone(),
        }
    }

    /// What the live shadow mirror reads (see [`shadow::MirrorSettings`]).
    pub fn mirror(&self) -> shadow::MirrorSettings {
        shadow::MirrorSettings {
            shadow: self.shadow.clone(),
            proxy: self.upstream.proxy.clone(),
            max_response_bytes: self.upstream.max_response_bytes,
        }
    }

    /// What the operations read of this configuration (see
    /// [`ops::Settings`]); built once per configuration snapshot.
    pub fn translation(&self) -> ops::Settings {
        let w = &self.workers;
        ops::Settings {
            compat: self.compat.clone(),
            service_key: self.service_key.clone(),
            sync_run_timeout: self.sync_run_timeout,
            max_page_size: self.limits.max_page_size,
            fanout_concurrency: self.limits.fanout_concurrency,
            workers: WorkerIdSettings {
                verify: w.verify,
                positive_ttl: Duration::from_secs(w.positive_ttl_secs),
                negative_ttl: Duration::from_secs(w.negative_ttl_secs),
                cache_capacity: w.cache_capacity,
                aliases: w.aliases.clone(),
            },
        }
    }
}

/// The configuration's defaults, validated: the settings types that other
/// layers own take their defaults from here, so each default is written once
/// (in [`schema`]).
fn defaults() -> Config {
    validate(RawConfig::default()).unwrap_or_else(|_| unreachable!("defaults are valid"))
}

impl Default for Compat {
    fn default() -> Self {
        defaults().compat
    }
}

impl Default for ops::Settings {
    fn default() -> Self {
        defaults().translation()
    }
}

impl Default for WorkerIdSettings {
    fn default() -> Self {
        defaults().translation().workers
    }
}

/// Every problem found, one per line, each naming its key and where it was
/// set (`line 12: …` in the file, or the environment variable).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct ConfigErrors(pub Vec<String>);

/// A configuration that loaded, with what the operator should hear about it.
#[derive(Debug)]
pub struct Loaded {
    pub config: Config,
    /// File, defaults and environment merged: what `check-config --print` shows.
    pub effective: RawConfig,
    /// Things that did not stop the load (ignored `V1COMPAT_…` variables).
    pub warnings: Vec<String>,
}

/// Reads TOML text, applies `V1COMPAT_…` overrides from `env`, validates.
pub fn load(
    text: &str,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Config, ConfigErrors> {
    read(text, env).map(|loaded| loaded.config)
}

/// [`load`], keeping the effective raw configuration and the warnings.
///
/// One pass finds every problem: unknown keys and keys of the wrong type
/// are named and set aside (their defaults stand in), so the rest is still
/// typed and validated and its problems reported too.
pub fn read(
    text: &str,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Loaded, ConfigErrors> {
    let doc =
        toml_edit::ImDocument::parse(text).map_err(|e| ConfigErrors(vec![syntax(text, &e)]))?;
    let mut origins = source::Origins::of_file(text, &doc);
    let mut table: toml::Table = toml::from_str(text)
        .map_err(|e: toml::de::Error| ConfigErrors(vec![keys::plain(e.message())]))?;
    let defaults = toml::Table::try_from(RawConfig::default()).unwrap_or_default();
    // The proxy variables are not keys; they are read with the rest of the
    // environment so a reload and a test see the same values as start-up.
    let env: Vec<(String, String)> = env.into_iter().collect();
    let proxy = crate::upstream::ProxyEnv::from_vars(env.iter().map(|(k, v)| (&**k, &**v)));
    let env = env::overlay(&mut table, &defaults, env);
    origins.variables.extend(env.set);
    let mut problems = env.problems;
    problems.extend(proxy.problems());
    problems.extend(keys::remove_unknown(&mut table, &defaults));
    problems.extend(keys::remove_mistyped(&mut table));
    let raw: RawConfig = match toml::Value::Table(table).try_into() {
        Ok(raw) => raw,
        // Every key typed on its own; a failure here is one of combination.
        Err(e) => {
            let e: toml::de::Error = e;
            problems.push(keys::plain(e.message()));
            return Err(ConfigErrors(problems));
        }
    };
    let effective = raw.clone();
    match validate(raw) {
        Ok(mut config) if problems.is_empty() => {
            config.upstream.proxy = proxy;
            Ok(Loaded {
                config,
                effective,
                warnings: env.warnings,
            })
        }
        Ok(_) => Err(ConfigErrors(in_file_order(&origins, problems))),
        Err(ConfigErrors(more)) => {
            problems.extend(more);
            Err(ConfigErrors(in_file_order(&origins, problems)))
        }
    }
}

/// Places each problem (line or variable) and orders them as the file
/// reads: by line, then those from the environment or defaults.
fn in_file_order(origins: &source::Origins, problems: Vec<String>) -> Vec<String> {
    let mut placed: Vec<(usize, String)> = problems.into_iter().map(|p| origins.place(p)).collect();
    placed.sort_by_key(|(line, _)| *line);
    placed.into_iter().map(|(_, p)| p).collect()
}

/// A TOML syntax error on one line: `line 3, column 9: …`.
fn syntax(text: &str, e: &toml_edit::TomlError) -> String {
    let message = e.message().trim().replace('\n', "; ");
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: invalid TOML: {message}")
        }
        None => format!("invalid TOML: {message}"),
    }
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
    fn concurrency_settings_are_bounded_and_listeners_may_not_overlap() {
        let err = load(
            "[listen]\npublic = \"0.0.0.0:18081\"\nadmin = \"127.0.0.1:18081\"\n[limits]\nmax_in_flight = 2305843009213693952\n[shadow]\nmax_in_flight = 2000000\n[callbacks]\nconcurrency = 2000000\n",
            Vec::new(),
        )
        .unwrap_err()
        .to_string();
        for says in [
            "listen.admin: 127.0.0.1:18081 overlaps listen.public (0.0.0.0:18081)",
            "limits.max_in_flight: must be between 1 and 1000000",
            "shadow.max_in_flight: must be between 1 and 1000000",
            "callbacks.concurrency: must be at most 1000000",
        ] {
            assert!(err.contains(says), "{says}: {err}");
        }
        assert!(load(
            "[listen]\npublic = \"127.0.0.1:18081\"\nadmin = \"127.0.0.2:18081\"\n",
            Vec::new()
        )
        .is_ok());
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
        assert_eq!(
            err.0,
            ["V1COMPAT_UPSTREAM__NOPE: upstream.nope: unknown key"]
        );
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
    fn runtime_threads_default_to_one_per_cpu_and_are_bounded() {
        assert_eq!(load("", env(&[])).unwrap().runtime.threads, 0);
        let c = load("", env(&[("V1COMPAT_RUNTIME__THREADS", "1")])).unwrap();
        assert_eq!(c.runtime.threads, 1);
        let err = load("[runtime]\nthreads = 5000\n", env(&[])).unwrap_err();
        assert!(err.to_string().contains("runtime.threads: 5000"), "{err}");
    }

    #[test]
    fn dialect_choices_read_quoted_unquoted_and_from_the_environment() {
        use v1compat_contract::dialect::{BusinessErrorStatus, EmptyStoreSearch, MissingKeyStatus};
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
        // Each names its key, its line, the allowed values (the contract's
        // names) and the closest one when one is close.
        assert_eq!(
            err.0,
            [
                "line 2: compat.business_error_status: \"404\" is not one of http, 200 (did you mean `200`?)",
                "line 3: compat.empty_store_search: \"none\" is not one of refuse, all",
                "line 4: compat.missing_key_status: \"403\" is not one of 401, 400 (did you mean `400`?)",
            ]
        );
        let err = load("[compat]\nempty_store_search = \"al\"\n", env(&[])).unwrap_err();
        assert_eq!(
            err.0,
            ["line 2: compat.empty_store_search: \"al\" is not one of refuse, all (did you mean `all`?)"]
        );
        let err = load(
            "",
            env(&[("V1COMPAT_COMPAT__BUSINESS_ERROR_STATUS", "201")]),
        )
        .unwrap_err();
        assert_eq!(
            err.0,
            ["V1COMPAT_COMPAT__BUSINESS_ERROR_STATUS: compat.business_error_status: \"201\" is not one of http, 200 (did you mean `200`?)"]
        );
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
mod one_pass_tests {
    use super::*;

    /// A file with a problem of every class: each is reported, with its key
    /// and line, in file order, in one pass.
    #[test]
    fn every_class_of_problem_with_key_and_line() {
        let text = "\
[listen]
public = \"nope\"
admin = 9090
[upstream]
base_url = \"ftp://x\"
connect_timeout_ms = \"lots\"
auth = \"basic\"
bogus = 1
[retry]
budget_percent = 3.0
[workers.aliases]
old = 7
[compat]
aborted_status = 9
[shadow]
unordered_paths = [\"ok\", 2]
[[shadow.ignore]]
path = \"data.x\"
compare = \"fuzzy\"
[nope]
x = 1
";
        let err = load(text, Vec::new()).unwrap_err();
        let expected = [
            "line 2: listen.public: \"nope\" is not an IP:port address",
            "line 3: listen.admin: expected a string, found integer `9090`",
            "line 5: upstream.base_url: \"ftp://x\" is not an http(s) URL",
            "line 6: upstream.connect_timeout_ms: expected a whole number (0 or more), found string \"lots\"",
            "line 7: upstream.auth: \"basic\" is not one of bearer, api-key",
            "line 8: upstream.bogus: unknown key",
            "line 10: retry.budget_percent: must be between 0.0 and 1.0",
            "line 12: workers.aliases.old: expected a string, found integer `7`",
            "line 14: compat.aborted_status: must be a V1 status between 1 and 5",
            "line 16: shadow.unordered_paths[1]: expected a string, found integer `2`",
            "line 19: shadow.ignore[0].compare: unknown variant `fuzzy`, expected `skip` or `shape`",
            "line 20: nope: unknown key",
        ];
        assert_eq!(err.0.len(), expected.len(), "{err}");
        for (got, want) in err.0.iter().zip(expected) {
            assert!(
                got.starts_with(want),
                "{got:?} does not start with {want:?}\n{err}"
            );
        }
    }

    #[test]
    fn environment_problems_name_their_variable_beside_file_problems() {
        let env = [
            ("V1COMPAT_LIMITS__MAX_IN_FLIGHT", "many"),
            ("V1COMPAT_LIMITS__FANOUT_CONCURRENCY", "0"),
            ("V1COMPAT_BIN", "target/debug/v1compat"),
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()));
        let err = load("[upstream]\nauth = \"x\"\n", env).unwrap_err();
        assert_eq!(
            err.0,
            [
                "line 2: upstream.auth: \"x\" is not one of bearer, api-key",
                "V1COMPAT_LIMITS__MAX_IN_FLIGHT: limits.max_in_flight takes a whole number, not \"many\"",
                "V1COMPAT_LIMITS__FANOUT_CONCURRENCY: limits.fanout_concurrency: must be between 1 and 64",
            ]
        );
    }

    #[test]
    fn a_string_key_takes_digits_and_stray_variables_only_warn() {
        let env = [
            ("V1COMPAT_UPSTREAM__SERVICE_KEY", "123"),
            ("V1COMPAT_BLESS", "1"),
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()));
        let loaded = read("", env).unwrap();
        assert_eq!(
            loaded
                .config
                .service_key
                .map(|k| k.expose().to_owned())
                .as_deref(),
            Some("123")
        );
        assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
        assert!(loaded.warnings[0].contains("V1COMPAT_BLESS"));
    }

    #[test]
    fn a_syntax_error_names_its_line_and_column() {
        let err = load("[upstream]\nbase_url = \"x\n", Vec::new()).unwrap_err();
        assert_eq!(err.0.len(), 1);
        assert!(err.0[0].starts_with("line 2, column "), "{err}");
    }
}

#[cfg(test)]
mod example_tests {
    /// The documented example must load and match the built-in defaults.
    #[test]
    fn example_config_loads() {
        let text = include_str!("../../config/v1compat.toml");
        let c = super::load(text, Vec::new()).unwrap_or_else(|e| panic!("{e}"));
        let d = super::load("", Vec::new()).unwrap();
        assert_eq!(format!("{:?}", c.limits), format!("{:?}", d.limits));
        assert_eq!(c.compat.origin_rename, d.compat.origin_rename);
        assert_eq!(c.upstream.base_url, d.upstream.base_url);
        assert_eq!(format!("{:?}", c.shadow), format!("{:?}", d.shadow));
        assert_eq!(format!("{:?}", c.callbacks), format!("{:?}", d.callbacks));
        assert_eq!(
            format!("{:?}", c.connections),
            format!("{:?}", d.connections)
        );
        assert_eq!(
            (c.grace_period, c.drain_delay),
            (d.grace_period, d.drain_delay)
        );
    }

    /// The example documents every key there is, and no key that is not.
    #[test]
    fn example_config_names_every_key() {
        let text = include_str!("../../config/v1compat.toml");
        let example: toml::Table = text.parse().unwrap();
        let defaults = toml::Table::try_from(super::RawConfig::default()).unwrap();
        for (section, keys) in &defaults {
            let documented = example.get(section).and_then(toml::Value::as_table);
            let documented =
                documented.unwrap_or_else(|| panic!("[{section}] is not in the example"));
            for key in keys.as_table().into_iter().flat_map(|t| t.keys()) {
                assert!(
                    documented.contains_key(key),
                    "{section}.{key} is not documented in config/v1compat.toml"
                );
            }
        }
    }
}
