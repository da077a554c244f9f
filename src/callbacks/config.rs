//! The `[callbacks]` section: what the relay needs before anything is bound
//! (public URL, token secrets, store, delivery policy), checked once with every
//! problem reported, like the rest of the configuration.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::guard::Policy;
use super::schedule::Schedule;
use crate::common::cidr::Cidr;

/// The raw `[callbacks]` table (see config/v1compat.toml for each key).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CallbacksSection {
    /// `relay`, `passthrough`, or empty: relay whenever `public_url` is set.
    pub mode: String,
    /// The gateway's public base URL as V2 can reach it.
    pub public_url: String,
    /// Seals callback tokens (AEAD). Required in relay mode.
    pub secret: String,
    /// Earlier secrets: tokens sealed with them still open (rotation).
    pub previous_secrets: Vec<String>,
    /// How long a sealed token stays valid.
    pub token_ttl_secs: u64,
    /// `memory`, `redb:PATH` or `postgres://…`.
    pub store: String,
    /// Re-read V2 run detail before each attempt (results, usage, newest status).
    pub enrich: bool,
    /// `whsec_…`: sign deliveries with Standard Webhooks headers. Empty = unsigned.
    pub signing_secret: String,
    /// Delay before each attempt, the first included (humantime: `0s`, `5s`, `5m`, `2h`).
    pub retry_schedule: Vec<String>,
    /// ± this percentage of random jitter on every delay.
    pub jitter_percent: u32,
    pub attempt_timeout_ms: u64,
    /// Deliver to loopback and private ranges (cloud metadata stays refused).
    pub allow_private: bool,
    /// CIDRs delivery may reach even when they are non-public.
    pub allow_cidrs: Vec<String>,
    /// Longest V1 `callback_url` accepted.
    pub max_url_bytes: usize,
    /// Largest V2 callback body accepted.
    pub max_body_bytes: usize,
    /// Deliveries in flight, all targets together.
    pub concurrency: usize,
    /// Deliveries in flight to one host:port.
    pub per_target_concurrency: usize,
    /// A claim is held this long; a replica that dies loses its claims after it.
    pub lease_secs: u64,
    /// Delivered events are pruned after this long.
    pub keep_delivered_secs: u64,
    /// Dead events are pruned after this long.
    pub keep_dead_secs: u64,
    /// The most dead events kept; the oldest go first beyond it.
    pub max_dead_events: u64,
    /// V2 reads a token's callbacks may cost in an hour for runs V2 does
    /// not know; past it, such callbacks go dead without a read.
    pub unknown_run_reads_per_hour: u32,
    /// How often the queue is polled when nothing wakes the deliverer.
    pub poll_interval_ms: u64,
}

impl Default for CallbacksSection {
    fn default() -> Self {
        CallbacksSection {
            mode: String::new(),
            public_url: String::new(),
            secret: String::new(),
            previous_secrets: Vec::new(),
            token_ttl_secs: 7 * 24 * 3600,
            store: "redb:v1compat-callbacks.redb".into(),
            enrich: true,
            signing_secret: String::new(),
            retry_schedule: ["0s", "5s", "5m", "30m", "2h", "5h", "10h", "10h"]
                .map(String::from)
                .to_vec(),
            jitter_percent: 20,
            attempt_timeout_ms: 15_000,
            allow_private: false,
            allow_cidrs: Vec::new(),
            max_url_bytes: 2048,
            max_body_bytes: 64 << 10,
            concurrency: 64,
            per_target_concurrency: 4,
            lease_secs: 60,
            keep_delivered_secs: 24 * 3600,
            keep_dead_secs: 7 * 24 * 3600,
            max_dead_events: 10_000,
            unknown_run_reads_per_hour: 60,
            poll_interval_ms: 1000,
        }
    }
}

pub use crate::common::store_kind::StoreKind;

/// The checked `[callbacks]` section.
#[derive(Clone)]
pub struct CallbacksConfig {
    /// Relay on: `Some(public base URL without trailing slash)`.
    pub relay: Option<String>,
    pub secrets: Vec<String>,
    pub token_ttl: Duration,
    pub store: StoreKind,
    pub enrich: bool,
    pub signing_key: Option<Vec<u8>>,
    pub schedule: Schedule,
    pub attempt_timeout: Duration,
    pub policy: Policy,
    pub max_url_bytes: usize,
    pub max_body_bytes: usize,
    pub concurrency: usize,
    pub per_target_concurrency: usize,
    pub lease: Duration,
    pub keep_delivered: Duration,
    pub keep_dead: Duration,
    pub max_dead_events: u64,
    pub unknown_run_reads_per_hour: u32,
    pub poll_interval: Duration,
}

impl std::fmt::Debug for CallbacksConfig {
    // Secrets never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbacksConfig")
            .field("relay", &self.relay)
            .field("secrets", &self.secrets.len())
            .field("store", &redacted_store(&self.store))
            .field("enrich", &self.enrich)
            .field("signed", &self.signing_key.is_some())
            .field("schedule", &self.schedule)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

pub(crate) use crate::common::store_kind::shown as redacted_store;

impl Default for CallbacksConfig {
    fn default() -> Self {
        let mut p = Vec::new();
        validate(&CallbacksSection::default(), &mut p)
    }
}

/// Checks the section, pushing each problem onto `p`.
pub(crate) fn validate(s: &CallbacksSection, p: &mut Vec<String>) -> CallbacksConfig {
    let public_url = s.public_url.trim();
    let relay = match s.mode.as_str() {
        "" => !public_url.is_empty(),
        "relay" => true,
        "passthrough" => false,
        other => {
            p.push(format!(
                "callbacks.mode: {other:?} is not one of relay, passthrough"
            ));
            false
        }
    };
    let base = if relay {
        match url::Url::parse(public_url) {
            Ok(u)
                if matches!(u.scheme(), "http" | "https")
                    && u.host().is_some()
                    && u.query().is_none()
                    && u.username().is_empty()
                    && u.password().is_none() =>
            {
                Some(u.as_str().trim_end_matches('/').to_owned())
            }
            _ => {
                let shown = crate::common::redact::mask_url(public_url);
                p.push(format!(
                    "callbacks.public_url: {shown:?} must be an http(s) URL without query or credentials (relay mode needs it: V2 posts callbacks there)"
                ));
                None
            }
        }
    } else {
        None
    };
    if relay && s.secret.len() < 16 {
        p.push("callbacks.secret: relay mode needs a secret of at least 16 characters (V1COMPAT_CALLBACKS__SECRET)".into());
    }
    for (i, old) in s.previous_secrets.iter().enumerate() {
        if old.len() < 16 {
            p.push(format!(
                "callbacks.previous_secrets[{i}]: must be at least 16 characters"
            ));
        }
    }
    let mut secrets = vec![s.secret.clone()];
    secrets.extend(s.previous_secrets.iter().cloned());
    let store = match parse_store(&s.store) {
        Ok(k) => k,
        Err(e) => {
            p.push(format!("callbacks.store: {e}"));
            StoreKind::Memory
        }
    };
    let signing_key = if s.signing_secret.is_empty() {
        None
    } else {
        match super::sign::decode_secret(&s.signing_secret) {
            Ok(k) => Some(k),
            Err(e) => {
                p.push(format!("callbacks.signing_secret: {e}"));
                None
            }
        }
    };
    let schedule = match Schedule::parse(&s.retry_schedule, s.jitter_percent) {
        Ok(s) => s,
        Err(e) => {
            p.push(format!("callbacks.retry_schedule: {e}"));
            Schedule::default()
        }
    };
    let mut allow = Vec::new();
    for (i, c) in s.allow_cidrs.iter().enumerate() {
        match c.parse::<Cidr>() {
            Ok(c) => allow.push(c),
            Err(e) => p.push(format!("callbacks.allow_cidrs[{i}]: {e}")),
        }
    }
    let positive = |p: &mut Vec<String>, key: &str, v: u64| {
        if v == 0 {
            p.push(format!("callbacks.{key}: must be greater than 0"));
        }
    };
    positive(p, "token_ttl_secs", s.token_ttl_secs);
    positive(p, "attempt_timeout_ms", s.attempt_timeout_ms);
    positive(p, "max_url_bytes", s.max_url_bytes as u64);
    if s.max_url_bytes > MAX_URL_BYTES {
        p.push(format!(
            "callbacks.max_url_bytes: must be at most {MAX_URL_BYTES} (the URL travels sealed in the callback token V2 is given)"
        ));
    }
    positive(p, "max_body_bytes", s.max_body_bytes as u64);
    positive(p, "concurrency", s.concurrency as u64);
    positive(p, "per_target_concurrency", s.per_target_concurrency as u64);
    let most = crate::common::checks::MAX_CONCURRENCY;
    for (key, v) in [
        ("concurrency", s.concurrency),
        ("per_target_concurrency", s.per_target_concurrency),
    ] {
        if v > most {
            p.push(format!("callbacks.{key}: must be at most {most}"));
        }
    }
    positive(p, "lease_secs", s.lease_secs);
    positive(p, "keep_dead_secs", s.keep_dead_secs);
    positive(p, "max_dead_events", s.max_dead_events);
    positive(
        p,
        "unknown_run_reads_per_hour",
        u64::from(s.unknown_run_reads_per_hour),
    );
    positive(p, "poll_interval_ms", s.poll_interval_ms);
    // An attempt is the enrichment read and the POST, each bounded by
    // `attempt_timeout_ms`: a lease shorter than both would let the event
    // be claimed again, and sent again, while its attempt is under way.
    if s.lease_secs > 0
        && s.lease_secs.saturating_mul(1000) <= s.attempt_timeout_ms.saturating_mul(2)
    {
        p.push(format!(
            "callbacks.lease_secs: {} s must be longer than twice callbacks.attempt_timeout_ms ({} ms: the enrichment read and the POST), or an event could be sent again while its attempt is under way",
            s.lease_secs, s.attempt_timeout_ms
        ));
    }
    if s.jitter_percent > 50 {
        p.push("callbacks.jitter_percent: must be at most 50".into());
    }
    CallbacksConfig {
        relay: base,
        secrets,
        token_ttl: Duration::from_secs(s.token_ttl_secs),
        store,
        enrich: s.enrich,
        signing_key,
        schedule,
        attempt_timeout: Duration::from_millis(s.attempt_timeout_ms),
        policy: Policy {
            allow_private: s.allow_private,
            allow,
        },
        max_url_bytes: s.max_url_bytes,
        max_body_bytes: s.max_body_bytes,
        concurrency: s.concurrency.max(1),
        per_target_concurrency: s.per_target_concurrency.max(1),
        lease: Duration::from_secs(s.lease_secs.max(1)),
        keep_delivered: Duration::from_secs(s.keep_delivered_secs),
        keep_dead: Duration::from_secs(s.keep_dead_secs),
        max_dead_events: s.max_dead_events.max(1),
        unknown_run_reads_per_hour: s.unknown_run_reads_per_hour.max(1),
        poll_interval: Duration::from_millis(s.poll_interval_ms.max(1)),
    }
}

/// The longest `max_url_bytes`: a URL this long, with the longest key,
/// seals into a token well under `token::MAX_TOKEN_LEN`.
pub(crate) const MAX_URL_BYTES: usize = 4096;

fn parse_store(s: &str) -> Result<StoreKind, String> {
    crate::common::store_kind::parse(s, "callbacks.redb")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(s: CallbacksSection) -> (CallbacksConfig, Vec<String>) {
        let mut p = Vec::new();
        let c = validate(&s, &mut p);
        (c, p)
    }

    #[test]
    fn defaults_are_passthrough_and_valid() {
        let (c, p) = check(CallbacksSection::default());
        assert!(p.is_empty(), "{p:?}");
        assert!(c.relay.is_none());
        assert_eq!(c.schedule.len(), 8);
    }

    #[test]
    fn public_url_turns_relay_on_and_needs_a_secret() {
        let (c, p) = check(CallbacksSection {
            public_url: "https://gw.example/".into(),
            ..Default::default()
        });
        assert_eq!(c.relay.as_deref(), Some("https://gw.example"));
        assert!(p.iter().any(|e| e.starts_with("callbacks.secret")), "{p:?}");
        let (c, p) = check(CallbacksSection {
            public_url: "https://gw.example/".into(),
            mode: "passthrough".into(),
            ..Default::default()
        });
        assert!(c.relay.is_none() && p.is_empty());
    }

    #[test]
    fn every_problem_names_its_key() {
        let (_, p) = check(CallbacksSection {
            mode: "relay".into(),
            public_url: "ftp://x".into(),
            store: "mysql://x".into(),
            retry_schedule: vec!["soon".into()],
            allow_cidrs: vec!["10.0.0.0/33".into()],
            signing_secret: "nope".into(),
            concurrency: 0,
            ..Default::default()
        });
        for key in [
            "callbacks.public_url",
            "callbacks.secret",
            "callbacks.store",
            "callbacks.retry_schedule",
            "callbacks.allow_cidrs[0]",
            "callbacks.signing_secret",
            "callbacks.concurrency",
        ] {
            assert!(p.iter().any(|e| e.starts_with(key)), "{key} missing: {p:?}");
        }
    }

    #[test]
    fn stores_the_gateway_cannot_open_are_refused_before_start() {
        let dir = std::env::temp_dir();
        let file = dir.join(format!("v1compat-store-check-{}", std::process::id()));
        std::fs::write(&file, b"").unwrap();
        for (store, says) in [
            (
                "postgres://user:pw@host:99x/db",
                "is not a PostgreSQL connection URL",
            ),
            (
                &format!("redb:{}/sub/x.redb", file.display()),
                "is not a folder the file can be made in",
            ),
            (
                &format!("redb:{}", dir.display()),
                "is a folder, not a file",
            ),
        ] {
            let e = parse_store(store).unwrap_err();
            assert!(e.contains(says), "{store}: {e}");
            assert!(!e.contains(":pw@"), "{e}");
        }
        std::fs::remove_file(&file).unwrap();
        assert!(parse_store("postgres://gw:pw@db:5432/v1compat?sslmode=disable").is_ok());
        assert!(parse_store("redb:callbacks.redb").is_ok());
        // Missing folders are made when the store opens.
        let deeper = format!("redb:{}/not-yet/there/x.redb", dir.display());
        assert!(parse_store(&deeper).is_ok());
    }

    #[test]
    fn a_lease_must_outlast_an_attempt() {
        let (_, p) = check(CallbacksSection {
            lease_secs: 10,
            attempt_timeout_ms: 120_000,
            ..CallbacksSection::default()
        });
        assert!(
            p.iter()
                .any(|e| e.starts_with("callbacks.lease_secs: 10 s must be longer")),
            "{p:?}"
        );
        let (_, p) = check(CallbacksSection {
            lease_secs: 31,
            attempt_timeout_ms: 15_000,
            ..CallbacksSection::default()
        });
        assert!(p.is_empty(), "{p:?}");
    }

    #[test]
    fn postgres_passwords_are_not_shown() {
        let s = redacted_store(&StoreKind::Postgres("postgres://u:hunter2@db/x".into()));
        assert!(!s.contains("hunter2"), "{s}");
        // A file in a folder of this test's own, so nothing already on the
        // machine (a folder of that name) changes the answer.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("callbacks.redb");
        assert_eq!(
            parse_store(&format!("redb:{}", file.display())).unwrap(),
            StoreKind::Redb(file)
        );
    }
}
