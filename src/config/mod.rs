//! Configuration, before anything is bound: TOML text (plus `V1COMPAT_…`
//! environment overrides) → [`RawConfig`] (serde, unknown keys rejected) →
//! validated [`Config`]. Validation reports every problem at once.
//!
//! The parts: [`schema`] (sections, keys, defaults), [`env`] (the
//! environment overlay), [`validate`] (checks and the runtime values).
//!
//! An environment variable `V1COMPAT_SECTION__KEY=value` overrides `key` in
//! `[section]` (double underscore between levels, names case-insensitive);
//! the value is read as a TOML scalar (`42`, `true`, `1.5`) or else a string.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::upstream::UpstreamSettings;

mod env;
pub mod schema;
mod validate;

pub use schema::*;
pub use validate::validate;

pub const ENV_PREFIX: &str = "V1COMPAT_";

/// The validated configuration the gateway runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub public_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// TLS on the public / admin listener, when configured.
    pub public_tls: Option<crate::tls::TlsFiles>,
    pub admin_tls: Option<crate::tls::TlsFiles>,
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
    let env: Vec<(String, String)> = env.into_iter().collect();
    let proxy = crate::upstream::ProxyEnv::from_vars(env.iter().map(|(k, v)| (&**k, &**v)));
    let mut problems = env::overlay(&mut table, env);
    if !problems.is_empty() {
        return Err(ConfigErrors(problems));
    }
    problems.extend(proxy.problems());
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
        Ok(mut config) if problems.is_empty() => {
            config.upstream.proxy = proxy;
            Ok(config)
        }
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
        let text = include_str!("../../config/v1compat.toml");
        let c = super::load(text, Vec::new()).unwrap_or_else(|e| panic!("{e}"));
        let d = super::load("", Vec::new()).unwrap();
        assert_eq!(format!("{:?}", c.limits), format!("{:?}", d.limits));
        assert_eq!(c.compat.origin_rename, d.compat.origin_rename);
        assert_eq!(c.upstream.base_url, d.upstream.base_url);
        assert_eq!(format!("{:?}", c.shadow), format!("{:?}", d.shadow));
    }
}
