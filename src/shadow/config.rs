//! The `[shadow]` section, read before anything is bound: [`ShadowSection`]
//! (serde, unknown keys rejected) → validated [`ShadowConfig`], every
//! problem reported with the rest of the configuration's.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::diff::{Compare, IgnoreRule, Rules, Thresholds};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShadowSection {
    /// Mirror live traffic (off by default).
    pub enabled: bool,
    /// The legacy V1 service, e.g. `https://legacy.example`.
    pub legacy_base_url: String,
    /// Which answer the client gets: `translated` or `legacy`.
    pub primary: String,
    /// Share of eligible requests mirrored, 0–100.
    pub sample_percent: f64,
    /// `request` (each request drawn on its own) or `key` (a consistent hash
    /// of the API key: a client is always in or always out).
    pub sample_by: String,
    /// Copies in flight; more are dropped and counted.
    pub max_in_flight: usize,
    /// Deadline of the other side of one copy.
    pub copy_timeout_ms: u64,
    /// Larger answers (or request bodies) are not compared.
    pub max_body_bytes: usize,
    /// JSONL capture of every mirrored request; empty = none.
    pub capture_path: String,
    /// Call legacy twice per copy and use the disagreements as a noise floor.
    pub baseline: bool,
    pub baseline_min_count: u64,
    pub baseline_relative: f64,
    pub baseline_absolute: f64,
    /// Ignore rules; the default compares export `download_url` by shape.
    pub ignore: Vec<IgnoreSection>,
    /// Arrays compared without regard to order, e.g. `data.scraper[*]`.
    pub unordered_paths: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct IgnoreSection {
    #[serde(default)]
    pub operation: Option<String>,
    pub path: String,
    /// `skip` (default) or `shape`.
    #[serde(default)]
    pub compare: Compare,
    #[serde(default)]
    pub reason: String,
}

impl Default for ShadowSection {
    fn default() -> Self {
        let th = Thresholds::default();
        ShadowSection {
            enabled: false,
            legacy_base_url: String::new(),
            primary: "translated".into(),
            sample_percent: 100.0,
            sample_by: "request".into(),
            max_in_flight: 100,
            copy_timeout_ms: 5_000,
            max_body_bytes: 4 << 20,
            capture_path: String::new(),
            baseline: false,
            baseline_min_count: th.min_count,
            baseline_relative: th.relative,
            baseline_absolute: th.absolute,
            ignore: default_ignore(),
            unordered_paths: Vec::new(),
        }
    }
}

/// One rule per field the registry of differences does not compare plainly
/// ([`crate::differences::shadow_rules`]), so a fresh replay reports only
/// what nobody has written down yet.
fn default_ignore() -> Vec<IgnoreSection> {
    use crate::differences::Shadow;
    crate::differences::shadow_rules()
        .into_iter()
        .map(|r| IgnoreSection {
            operation: r.operation.map(str::to_owned),
            path: r.path.to_owned(),
            compare: match r.shadow {
                Shadow::Shape => Compare::Shape,
                Shadow::Skip | Shadow::Compared => Compare::Skip,
            },
            reason: r.reason,
        })
        .collect()
}

/// Which side answers the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Primary {
    Translated,
    Legacy,
}

impl Primary {
    pub fn as_str(self) -> &'static str {
        match self {
            Primary::Translated => "translated",
            Primary::Legacy => "legacy",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleBy {
    Request,
    Key,
}

/// The validated `[shadow]` section.
#[derive(Debug, Clone)]
pub struct ShadowConfig {
    pub enabled: bool,
    pub legacy_base_url: Option<url::Url>,
    pub primary: Primary,
    pub sample_percent: f64,
    pub sample_by: SampleBy,
    pub max_in_flight: usize,
    pub copy_timeout: Duration,
    pub max_body_bytes: usize,
    pub capture_path: Option<PathBuf>,
    pub baseline: bool,
    pub thresholds: Thresholds,
    pub rules: Rules,
}

impl Default for ShadowConfig {
    fn default() -> Self {
        let mut p = Vec::new();
        validate(&ShadowSection::default(), &mut p)
    }
}

/// Checks the section, pushing every problem onto `p`.
pub fn validate(s: &ShadowSection, p: &mut Vec<String>) -> ShadowConfig {
    let legacy_base_url = match s.legacy_base_url.as_str() {
        "" => {
            if s.enabled {
                p.push("shadow.legacy_base_url: required when shadow.enabled = true".into());
            }
            None
        }
        text => crate::upstream::http_client::parse_base_url("shadow.legacy_base_url", text)
            .map_err(|e| p.push(e))
            .ok(),
    };
    let primary = match s.primary.as_str() {
        "translated" => Primary::Translated,
        "legacy" => Primary::Legacy,
        other => {
            p.push(format!(
                "shadow.primary: {other:?} is not one of translated, legacy"
            ));
            Primary::Translated
        }
    };
    let sample_by = match s.sample_by.as_str() {
        "request" => SampleBy::Request,
        "key" => SampleBy::Key,
        other => {
            p.push(format!(
                "shadow.sample_by: {other:?} is not one of request, key"
            ));
            SampleBy::Request
        }
    };
    if !(0.0..=100.0).contains(&s.sample_percent) {
        p.push("shadow.sample_percent: must be between 0 and 100".into());
    }
    let most = crate::common::checks::MAX_CONCURRENCY;
    if !(1..=most).contains(&s.max_in_flight) {
        p.push(format!(
            "shadow.max_in_flight: must be between 1 and {most}"
        ));
    }
    if s.copy_timeout_ms == 0 {
        p.push("shadow.copy_timeout_ms: must be greater than 0".into());
    }
    if s.max_body_bytes < 1024 {
        p.push("shadow.max_body_bytes: must be at least 1024".into());
    }
    if !(s.baseline_relative.is_finite() && s.baseline_relative >= 1.0) {
        p.push("shadow.baseline_relative: must be at least 1.0".into());
    }
    if !(s.baseline_absolute.is_finite() && s.baseline_absolute >= 0.0) {
        p.push("shadow.baseline_absolute: must be 0 or more".into());
    }
    let known_ops: Vec<&str> = crate::v1::route::Operation::ALL
        .iter()
        .map(|o| o.name())
        .collect();
    let mut ignore = Vec::new();
    for (i, r) in s.ignore.iter().enumerate() {
        let at = format!("shadow.ignore[{i}]");
        if let Some(op) = &r.operation {
            if !known_ops.contains(&op.as_str()) {
                p.push(format!("{at}.operation: {op:?} is not an operation name"));
            }
        }
        if !valid_path(&r.path) {
            p.push(format!(
                "{at}.path: {:?} is not a field path like data.list[*].status",
                r.path
            ));
        }
        ignore.push(IgnoreRule {
            operation: r.operation.clone(),
            path: super::diff::normalise(&r.path),
            compare: r.compare,
            reason: if r.reason.is_empty() {
                "no reason given".into()
            } else {
                r.reason.clone()
            },
        });
    }
    for u in &s.unordered_paths {
        if !valid_path(u) {
            p.push(format!(
                "shadow.unordered_paths: {u:?} is not a field path like data.scraper[*]"
            ));
        }
    }
    ShadowConfig {
        enabled: s.enabled,
        legacy_base_url,
        primary,
        sample_percent: s.sample_percent,
        sample_by,
        max_in_flight: s.max_in_flight,
        copy_timeout: Duration::from_millis(s.copy_timeout_ms),
        max_body_bytes: s.max_body_bytes,
        capture_path: (!s.capture_path.is_empty()).then(|| PathBuf::from(&s.capture_path)),
        baseline: s.baseline,
        thresholds: Thresholds {
            min_count: s.baseline_min_count,
            relative: s.baseline_relative,
            absolute: s.baseline_absolute,
        },
        rules: Rules::new(
            ignore,
            s.unordered_paths.iter().map(|u| super::diff::normalise(u)),
        ),
    }
}

/// `http_status`, `code`, `message`, `body`, or `data…` made of names and
/// `[N]`/`[*]` indices.
fn valid_path(path: &str) -> bool {
    let top = path.split(['.', '[']).next().unwrap_or("");
    let top_ok = matches!(top, "http_status" | "code" | "message" | "body" | "data");
    top_ok
        && !path.contains("..")
        && !path.ends_with('.')
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '[' | ']' | '*'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_disabled() {
        let mut p = Vec::new();
        let c = validate(&ShadowSection::default(), &mut p);
        assert!(p.is_empty(), "{p:?}");
        assert!(!c.enabled);
        assert_eq!(c.max_in_flight, 100);
        assert_eq!(
            c.rules.ignore.len(),
            crate::differences::shadow_rules().len()
        );
        let url = c
            .rules
            .ignore
            .iter()
            .find(|r| r.path == "data.download_url")
            .unwrap();
        assert_eq!(url.compare, Compare::Shape);
    }

    #[test]
    fn every_problem_is_reported() {
        let s = ShadowSection {
            enabled: true,
            primary: "both".into(),
            sample_by: "ip".into(),
            sample_percent: 101.0,
            max_in_flight: 0,
            ignore: vec![IgnoreSection {
                operation: Some("nope".into()),
                path: "headers.x".into(),
                compare: Compare::Skip,
                reason: String::new(),
            }],
            unordered_paths: vec!["data..x".into()],
            ..ShadowSection::default()
        };
        let mut p = Vec::new();
        validate(&s, &mut p);
        assert_eq!(p.len(), 8, "{p:#?}");
        assert!(p[0].contains("legacy_base_url"));
    }

    #[test]
    fn paths_are_normalised() {
        let s = ShadowSection {
            ignore: vec![IgnoreSection {
                operation: None,
                path: "data.list[0].started_at".into(),
                compare: Compare::Skip,
                reason: "x".into(),
            }],
            unordered_paths: vec!["data.scraper[*]".into()],
            ..ShadowSection::default()
        };
        let mut p = Vec::new();
        let c = validate(&s, &mut p);
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(c.rules.ignore[0].path, "data.list[*].started_at");
        assert!(c.rules.unordered.contains("data.scraper"));
    }
}
