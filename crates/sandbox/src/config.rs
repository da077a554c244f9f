//! Sandbox configuration: parsed from TOML (unknown keys rejected), every field has a
//! default, and `Default` is the built-in seed. Validation reports every problem at
//! once so a bad file is fixed in one pass.

use serde::Deserialize;

use super::catalog::{seed_workers, WorkerSpec};
use super::faults::FaultRule;

/// How V2 run-log entries are rendered (both forms are documented for V2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogEntries {
    /// `{type, group, content, timestamp}` objects, like V1.
    #[default]
    Objects,
    /// `"2026-11-22T14:05:12.123Z INFO SYSTEM: ..."` strings.
    Strings,
}

/// An extra account (the main one is `api_key`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountConfig {
    pub key: String,
    #[serde(default = "default_balance")]
    pub balance: String,
    #[serde(default = "default_expiration")]
    pub balance_expiration_at: i64,
    #[serde(default = "default_traffic")]
    pub traffic: i64,
    #[serde(default = "default_expiration")]
    pub traffic_expiration_at: i64,
}

fn default_balance() -> String {
    "100.00".to_string()
}
fn default_expiration() -> i64 {
    1_893_456_000 // 2030-01-01T00:00:00Z
}
fn default_traffic() -> i64 {
    10_737_418_240
}

impl AccountConfig {
    pub fn with_key(key: &str) -> Self {
        AccountConfig {
            key: key.to_string(),
            balance: default_balance(),
            balance_expiration_at: default_expiration(),
            traffic: default_traffic(),
            traffic_expiration_at: default_expiration(),
        }
    }
}

/// Everything the sandbox can be told. See `config/sandbox.toml` for a commented copy.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// Seeds row data, run durations and fault probabilities.
    pub seed: u64,
    /// Simulated seconds per real second.
    pub speed: f64,
    /// The demo account's key.
    pub api_key: String,
    /// Further accounts (runs and tasks are private to the account that made them).
    pub accounts: Vec<AccountConfig>,
    pub log_entries: LogEntries,
    /// Replaces the built-in worker list when given.
    pub workers: Option<Vec<WorkerSpec>>,
    /// Fault rules active from the start.
    pub faults: Vec<FaultRule>,
    /// The native V1 surface's dialect where the V1 record disagrees (the same
    /// choices and spellings as the gateway's `[compat]`).
    pub v1: v1compat_contract::dialect::Dialect,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            seed: 7,
            speed: 1.0,
            api_key: "sandbox-key".to_string(),
            accounts: Vec::new(),
            log_entries: LogEntries::Objects,
            workers: None,
            faults: Vec::new(),
            v1: v1compat_contract::dialect::Dialect::default(),
        }
    }
}

impl SandboxConfig {
    /// Parse and validate a TOML document.
    pub fn from_toml_str(s: &str) -> Result<Self, String> {
        let cfg: SandboxConfig = toml::from_str(s).map_err(|e| e.to_string())?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The workers in effect (configured or seeded).
    pub fn effective_workers(&self) -> Vec<WorkerSpec> {
        self.workers.clone().unwrap_or_else(seed_workers)
    }

    /// All problems, joined with "; ".
    pub fn validate(&self) -> Result<(), String> {
        let mut p = Vec::new();
        if !(self.speed.is_finite() && self.speed > 0.0) {
            p.push(format!(
                "speed must be a positive number, got {}",
                self.speed
            ));
        }
        if self.api_key.trim().is_empty() {
            p.push("api_key must not be empty".to_string());
        }
        let mut keys = std::collections::HashSet::new();
        keys.insert(self.api_key.as_str());
        for a in &self.accounts {
            if a.key.trim().is_empty() {
                p.push("accounts: key must not be empty".to_string());
            } else if !keys.insert(a.key.as_str()) {
                p.push(format!("accounts: duplicate key {:?}", a.key));
            }
        }
        if let Some(workers) = &self.workers {
            validate_workers(workers, &mut p);
        }
        for f in &self.faults {
            p.extend(f.problems());
        }
        if p.is_empty() {
            Ok(())
        } else {
            Err(p.join("; "))
        }
    }
}

fn is_version(v: &str) -> bool {
    let Some(rest) = v.strip_prefix('v') else {
        return false;
    };
    let parts: Vec<&str> = rest.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|x| !x.is_empty() && x.chars().all(|c| c.is_ascii_digit()))
}

fn validate_workers(workers: &[WorkerSpec], p: &mut Vec<String>) {
    if workers.is_empty() {
        p.push("workers: the list must not be empty".to_string());
    }
    let mut slugs = std::collections::HashSet::new();
    for w in workers {
        let at = format!("workers[{}]", w.slug);
        if w.slug.is_empty() || w.slug.contains(['/', '~']) {
            p.push(format!("{at}: slug must be non-empty without '/' or '~'"));
        }
        if !slugs.insert(w.slug.clone()) {
            p.push(format!("{at}: duplicate slug"));
        }
        if w.owner.is_empty() || w.name.is_empty() || w.owner.contains(['/', '~']) {
            p.push(format!("{at}: owner and name must be non-empty"));
        }
        if w.versions.is_empty() {
            p.push(format!("{at}: versions must not be empty"));
        }
        for v in &w.versions {
            if !is_version(v) {
                p.push(format!("{at}: version {v:?} is not vX.Y.Z"));
            }
        }
        if w.columns.is_empty() {
            p.push(format!("{at}: columns must not be empty"));
        }
        if !w
            .input_schema
            .get("properties")
            .is_some_and(|v| v.is_array())
        {
            p.push(format!("{at}: input_schema.properties must be an array"));
        }
        if w.min_duration_seconds == 0 || w.min_duration_seconds > w.max_duration_seconds {
            p.push(format!(
                "{at}: need 0 < min_duration_seconds <= max_duration_seconds"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_document_is_the_default() {
        let cfg = SandboxConfig::from_toml_str("").expect("empty config");
        assert_eq!(cfg.seed, 7);
        assert_eq!(cfg.api_key, "sandbox-key");
        assert!(cfg.effective_workers().len() >= 5);
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err = SandboxConfig::from_toml_str("sped = 2.0").unwrap_err();
        assert!(err.contains("sped"), "{err}");
    }

    #[test]
    fn all_problems_reported() {
        let err = SandboxConfig::from_toml_str(
            "speed = 0.0\napi_key = \"\"\n[[faults]]\nroute = \"*\"\nkind = \"error\"\nprobability = 3.0\n",
        )
        .unwrap_err();
        assert!(err.contains("speed") && err.contains("api_key") && err.contains("probability"));
    }

    #[test]
    fn integer_speed_is_accepted() {
        let cfg = SandboxConfig::from_toml_str("speed = 10").expect("integer speed");
        assert_eq!(cfg.speed, 10.0);
    }

    #[test]
    fn version_format() {
        assert!(is_version("v1.2.3"));
        assert!(!is_version("1.2.3"));
        assert!(!is_version("v1.2"));
        assert!(!is_version("latest"));
    }
}
