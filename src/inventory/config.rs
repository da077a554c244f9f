//! The `[inventory]` section: where the migration inventory keeps its
//! counts, how often it writes them, how many clients it holds, the names
//! operators give clients, and the optional notices (deprecation headers,
//! brownout windows). Checked once, every problem reported, like the rest
//! of the configuration.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::v1::route::Operation;

/// The raw `[inventory]` table (see config/v1compat.toml for each key).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct InventorySection {
    /// `false` turns the inventory off: nothing recorded, nothing stored.
    pub enabled: bool,
    /// `memory`, `redb:PATH` or `postgres://…`.
    pub store: String,
    /// The HMAC secret client fingerprints are made with. Empty: one is
    /// made and kept in the store (redb, memory); required for PostgreSQL,
    /// so that every replica fingerprints a key alike.
    pub secret: String,
    /// How often counts are written to the store: a crash loses at most
    /// this much.
    pub flush_interval_ms: u64,
    /// The most clients kept; beyond it the oldest-seen go (counted).
    pub max_clients: usize,
    /// A client not seen for this long (humantime) is listed as gone.
    pub gone_after: String,
    /// How long the hourly request counts behind each client's chart are
    /// kept (humantime).
    pub keep_history: String,
    /// Fingerprint → a name to show for that client.
    pub names: BTreeMap<String, String>,
    /// `Deprecation`, `Sunset` and `Link` headers on every V1 answer.
    pub deprecation: DeprecationSection,
    /// Windows in which selected clients or operations are refused.
    pub brownouts: Vec<BrownoutSection>,
}

impl Default for InventorySection {
    fn default() -> Self {
        InventorySection {
            enabled: true,
            store: "redb:v1compat-inventory.redb".into(),
            secret: String::new(),
            flush_interval_ms: 10_000,
            max_clients: 10_000,
            gone_after: "30d".into(),
            keep_history: "30d".into(),
            names: BTreeMap::new(),
            deprecation: DeprecationSection::default(),
            brownouts: Vec::new(),
        }
    }
}

/// `[inventory.deprecation]`: headers that tell V1 clients the V1 API is
/// going, off until a date or link is set.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeprecationSection {
    /// RFC 3339 time the V1 API was (or will be) deprecated: the
    /// `Deprecation` header (RFC 9745). Empty = no header.
    pub deprecated_at: String,
    /// RFC 3339 time the V1 API goes away: the `Sunset` header (RFC 8594).
    pub sunset_at: String,
    /// The operator's migration page: `Link: <…>; rel="deprecation"`.
    pub link: String,
    /// `Link: <V2 path>; rel="successor-version"` naming the V2 operation
    /// that replaces the one called.
    pub successor_link: bool,
}

/// One `[[inventory.brownouts]]` window.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BrownoutSection {
    /// RFC 3339 start and end of the window.
    pub start: String,
    pub end: String,
    /// Fingerprints or configured names of the clients refused; empty =
    /// every client.
    pub clients: Vec<String>,
    /// V1 operation names refused (`run_detail`, …); empty = every one.
    pub operations: Vec<String>,
}

pub(crate) use crate::common::store_kind::StoreKind;

/// The checked `[inventory]` section.
#[derive(Clone)]
pub struct InventoryConfig {
    pub enabled: bool,
    pub store: StoreKind,
    /// `None`: made and kept in the store.
    pub secret: Option<Vec<u8>>,
    pub flush_interval: Duration,
    pub max_clients: usize,
    pub gone_after: Duration,
    pub keep_history: Duration,
    pub names: BTreeMap<String, String>,
    pub notices: Notices,
}

impl std::fmt::Debug for InventoryConfig {
    // The secret never reaches a log line, nor a PostgreSQL password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InventoryConfig")
            .field("enabled", &self.enabled)
            .field("store", &redacted_store(&self.store))
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("flush_interval", &self.flush_interval)
            .field("max_clients", &self.max_clients)
            .field("gone_after", &self.gone_after)
            .finish_non_exhaustive()
    }
}

pub(crate) use crate::common::store_kind::shown as redacted_store;

/// What V1 answers tell their clients (`[inventory.deprecation]`,
/// `[[inventory.brownouts]]`), checked.
#[derive(Debug, Clone, Default)]
pub struct Notices {
    /// `@<unix seconds>` (RFC 9745's structured date).
    pub deprecation: Option<String>,
    /// An HTTP date (RFC 8594).
    pub sunset: Option<String>,
    pub link: Option<String>,
    pub successor_link: bool,
    pub brownouts: Vec<Brownout>,
}

impl Notices {
    /// Whether any header is configured.
    pub fn has_headers(&self) -> bool {
        self.deprecation.is_some()
            || self.sunset.is_some()
            || self.link.is_some()
            || self.successor_link
    }
}

/// A brownout window, checked.
#[derive(Debug, Clone)]
pub struct Brownout {
    pub start: SystemTime,
    pub end: SystemTime,
    /// Fingerprints (names resolved); empty = every client.
    pub clients: Vec<String>,
    /// Empty = every operation.
    pub operations: Vec<Operation>,
}

impl Brownout {
    /// Whether the window refuses `op` for the client `fingerprint` at
    /// `now` (`fingerprint` is worked out only when asked).
    pub fn refuses(
        &self,
        now: SystemTime,
        op: Operation,
        fingerprint: &mut dyn FnMut() -> String,
    ) -> bool {
        now >= self.start
            && now < self.end
            && (self.operations.is_empty() || self.operations.contains(&op))
            && (self.clients.is_empty() || self.clients.contains(&fingerprint()))
    }
}

/// Checks `[inventory]`, adding each problem to `p`.
pub(crate) fn validate(s: &InventorySection, p: &mut Vec<String>) -> InventoryConfig {
    let store = match parse_store(&s.store) {
        Ok(store) => store,
        Err(e) => {
            p.push(format!("inventory.store: {e}"));
            StoreKind::Memory
        }
    };
    let secret = match s.secret.trim() {
        "" => None,
        t if t.len() < 16 => {
            p.push("inventory.secret: must be at least 16 characters (fingerprints made with a guessable secret could be matched to keys)".into());
            None
        }
        t => Some(t.as_bytes().to_vec()),
    };
    if s.enabled && secret.is_none() && matches!(store, StoreKind::Postgres(_)) {
        p.push("inventory.secret: required with a PostgreSQL store, so that every replica fingerprints a key alike (V1COMPAT_INVENTORY__SECRET)".into());
    }
    if s.flush_interval_ms == 0 || s.flush_interval_ms > 3_600_000 {
        p.push("inventory.flush_interval_ms: must be between 1 and 3600000".into());
    }
    if s.max_clients == 0 || s.max_clients > 1_000_000 {
        p.push("inventory.max_clients: must be between 1 and 1000000".into());
    }
    let duration =
        |key: &str, text: &str, p: &mut Vec<String>| match humantime::parse_duration(text) {
            Ok(d) if !d.is_zero() => d,
            _ => {
                p.push(format!(
                    "inventory.{key}: {text:?} is not a duration such as 30d or 12h"
                ));
                Duration::from_secs(30 * 24 * 3600)
            }
        };
    let gone_after = duration("gone_after", &s.gone_after, p);
    let keep_history = duration("keep_history", &s.keep_history, p);
    for (fingerprint, name) in &s.names {
        if !super::fingerprint::looks_like(fingerprint) {
            p.push(format!(
                "inventory.names: {fingerprint:?} is not a client fingerprint (k-… or anon-…, as the inventory lists them)"
            ));
        }
        if name.trim().is_empty() || name.len() > 100 || name.chars().any(char::is_control) {
            p.push(format!(
                "inventory.names.{fingerprint}: the name must be 1 to 100 printable characters"
            ));
        }
    }
    let notices = notices(s, p);
    InventoryConfig {
        enabled: s.enabled,
        store,
        secret,
        flush_interval: Duration::from_millis(s.flush_interval_ms.clamp(1, 3_600_000)),
        max_clients: s.max_clients.clamp(1, 1_000_000),
        gone_after,
        keep_history,
        names: s.names.clone(),
        notices,
    }
}

fn notices(s: &InventorySection, p: &mut Vec<String>) -> Notices {
    let d = &s.deprecation;
    let time = |key: &str, text: &str, p: &mut Vec<String>| -> Option<SystemTime> {
        if text.trim().is_empty() {
            return None;
        }
        match humantime::parse_rfc3339_weak(text.trim()) {
            Ok(t) => Some(t),
            Err(_) => {
                p.push(format!(
                    "inventory.{key}: {text:?} is not an RFC 3339 time such as 2027-01-31T00:00:00Z"
                ));
                None
            }
        }
    };
    let unix = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    };
    let deprecation =
        time("deprecation.deprecated_at", &d.deprecated_at, p).map(|t| format!("@{}", unix(t)));
    let sunset = time("deprecation.sunset_at", &d.sunset_at, p).map(httpdate::fmt_http_date);
    let link = match d.link.trim() {
        "" => None,
        l => match url::Url::parse(l) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && !l.contains(['<', '>', '"']) => {
                Some(u.to_string())
            }
            _ => {
                p.push(format!(
                    "inventory.deprecation.link: {l:?} must be an absolute http(s) URL"
                ));
                None
            }
        },
    };
    let by_name: BTreeMap<&str, &str> = s
        .names
        .iter()
        .map(|(fp, name)| (name.as_str(), fp.as_str()))
        .collect();
    let mut brownouts = Vec::new();
    for (i, b) in s.brownouts.iter().enumerate() {
        let key = |k: &str| format!("brownouts[{i}].{k}");
        let (start, end) = (
            time(&key("start"), &b.start, p),
            time(&key("end"), &b.end, p),
        );
        let (Some(start), Some(end)) = (start, end) else {
            p.push(format!(
                "inventory.{}: a brownout needs a start and an end (RFC 3339)",
                key("start")
            ));
            continue;
        };
        if end <= start {
            p.push(format!("inventory.{}: must be after start", key("end")));
        }
        let mut clients = Vec::new();
        for c in &b.clients {
            match by_name.get(c.as_str()) {
                Some(fp) => clients.push((*fp).to_owned()),
                None if super::fingerprint::looks_like(c) => clients.push(c.clone()),
                None => p.push(format!(
                    "inventory.{}: {c:?} is neither a fingerprint nor a name in inventory.names",
                    key("clients")
                )),
            }
        }
        let mut operations = Vec::new();
        for o in &b.operations {
            match Operation::ALL.into_iter().find(|op| op.name() == o) {
                Some(op) => operations.push(op),
                None => p.push(format!(
                    "inventory.{}: {o:?} is not a V1 operation ({})",
                    key("operations"),
                    Operation::ALL.map(Operation::name).join(", ")
                )),
            }
        }
        brownouts.push(Brownout {
            start,
            end,
            clients,
            operations,
        });
    }
    Notices {
        deprecation,
        sunset,
        link,
        successor_link: d.successor_link,
        brownouts,
    }
}

/// `memory`, `redb:PATH` or a PostgreSQL URL.
fn parse_store(s: &str) -> Result<StoreKind, String> {
    crate::common::store_kind::parse(s, "inventory.redb")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(s: InventorySection) -> (InventoryConfig, Vec<String>) {
        let mut p = Vec::new();
        let c = validate(&s, &mut p);
        (c, p)
    }

    #[test]
    fn defaults_are_valid_and_on() {
        let (c, p) = checked(InventorySection::default());
        assert!(p.is_empty(), "{p:?}");
        assert!(c.enabled);
        assert_eq!(c.store, StoreKind::Redb("v1compat-inventory.redb".into()));
        assert!(!c.notices.has_headers());
    }

    #[test]
    fn postgres_needs_a_secret_and_every_problem_is_named() {
        let (_, p) = checked(InventorySection {
            store: "postgres://u:pw@db/x".into(),
            secret: "short".into(),
            flush_interval_ms: 0,
            gone_after: "soon".into(),
            names: [("nope".to_owned(), "x".to_owned())].into(),
            ..Default::default()
        });
        let all = p.join("\n");
        for key in [
            "inventory.secret: must be at least 16",
            "inventory.secret: required with a PostgreSQL store",
            "inventory.flush_interval_ms",
            "inventory.gone_after",
            "inventory.names",
        ] {
            assert!(all.contains(key), "{key} not in {all}");
        }
        assert!(!all.contains("pw"), "{all}");
    }

    #[test]
    fn notices_are_read_as_the_headers_write_them() {
        let (c, p) = checked(InventorySection {
            names: [("k-0123456789abcdef".to_owned(), "billing".to_owned())].into(),
            deprecation: DeprecationSection {
                deprecated_at: "2026-06-30T00:00:00Z".into(),
                sunset_at: "2027-01-31T00:00:00Z".into(),
                link: "https://example.com/migrate".into(),
                successor_link: true,
            },
            brownouts: vec![BrownoutSection {
                start: "2026-12-01T10:00:00Z".into(),
                end: "2026-12-01T11:00:00Z".into(),
                clients: vec!["billing".into()],
                operations: vec!["run_detail".into()],
            }],
            ..Default::default()
        });
        assert!(p.is_empty(), "{p:?}");
        let n = &c.notices;
        assert_eq!(n.deprecation.as_deref(), Some("@1782777600"));
        assert_eq!(n.sunset.as_deref(), Some("Sun, 31 Jan 2027 00:00:00 GMT"));
        assert_eq!(n.link.as_deref(), Some("https://example.com/migrate"));
        let b = &n.brownouts[0];
        assert_eq!(b.clients, ["k-0123456789abcdef"]);
        let inside = humantime::parse_rfc3339("2026-12-01T10:30:00Z").unwrap();
        let after = humantime::parse_rfc3339("2026-12-01T11:00:00Z").unwrap();
        let mut billing = || "k-0123456789abcdef".to_owned();
        let mut other = || "k-ffffffffffffffff".to_owned();
        assert!(b.refuses(inside, Operation::RunDetail, &mut billing));
        assert!(!b.refuses(inside, Operation::RunDetail, &mut other));
        assert!(!b.refuses(inside, Operation::RunList, &mut billing));
        assert!(!b.refuses(after, Operation::RunDetail, &mut billing));
    }

    #[test]
    fn bad_brownouts_are_refused() {
        let (_, p) = checked(InventorySection {
            brownouts: vec![BrownoutSection {
                start: "2026-12-01T11:00:00Z".into(),
                end: "2026-12-01T10:00:00Z".into(),
                clients: vec!["nobody".into()],
                operations: vec!["run_detale".into()],
            }],
            ..Default::default()
        });
        let all = p.join("\n");
        assert!(
            all.contains("brownouts[0].end: must be after start"),
            "{all}"
        );
        assert!(all.contains("\"nobody\" is neither"), "{all}");
        assert!(
            all.contains("\"run_detale\" is not a V1 operation"),
            "{all}"
        );
    }
}
