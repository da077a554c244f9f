//! The callback relay: V1 clients get V1 run notifications although V2 sends
//! its own callback body.
//!
//! ```text
//! V1 run/task run/rerun ─(callback_url)─▶ ops::run_actions ─▶ [`Relay::v2_callback_url`]:
//!     check the client URL, seal it (and the key) into a token,
//!     V2 gets {public_url}/callbacks/v2/{token}
//! V2 ─POST─▶ server ─▶ [`Relay::receive`] (receive): open token → store (commit) → 2xx
//! deliverer (deliver, beside the request path): claim → re-read run detail
//!     → V1 body {run_slug, status, results, usage} → POST client URL (guard:
//!     resolved address checked, that address connected to)
//!     → done | retry later (schedule) | dead (admin redelivery)
//! ```
//!
//! Files: `config` (`[callbacks]`), `token` (sealing), `receive`, `event`
//! (ids, status order), `store` (trait + memory, redb, PostgreSQL),
//! `deliver`, `schedule` (retry timing), `guard` (SSRF), `sign` (Standard
//! Webhooks), `clock`, `admin` (operator endpoints), `metrics`.

use std::sync::Arc;

use tokio::sync::watch;

use crate::error::GatewayError;
use crate::ops::Compat;
use crate::upstream::{ApiKey, Upstream};

pub(crate) mod admin;
pub mod clock;
pub(crate) mod config;
pub mod deliver;
pub mod event;
pub(crate) mod guard;
pub(crate) mod metrics;
pub(crate) mod receive;
pub(crate) mod schedule;
pub(crate) mod sign;
pub mod store;
pub mod token;
pub(crate) mod unknown_runs;

pub use config::{CallbacksConfig, CallbacksSection, StoreKind};
pub use receive::token_of;

use clock::Clock;
use deliver::Deliverer;
use store::Store;
use token::{Claims, Sealer};

/// The relay: token sealing, the receiver and the deliverer over one store.
pub struct Relay {
    pub cfg: Arc<CallbacksConfig>,
    base: String,
    sealer: Arc<Sealer>,
    pub store: Arc<dyn Store>,
    pub deliverer: Arc<Deliverer>,
    clock: Arc<dyn Clock>,
}

impl Relay {
    /// A relay over `store`, or `None` when `[callbacks]` is in passthrough mode.
    pub fn new(
        cfg: CallbacksConfig,
        store: Arc<dyn Store>,
        upstream: Arc<dyn Upstream>,
        compat: Compat,
        clock: Arc<dyn Clock>,
    ) -> Result<Option<Arc<Relay>>, String> {
        let Some(base) = cfg.relay.clone() else {
            return Ok(None);
        };
        let cfg = Arc::new(cfg);
        let sealer = Arc::new(Sealer::new(&cfg.secrets, cfg.token_ttl.as_secs()));
        let deliverer = Arc::new(Deliverer::new(
            store.clone(),
            sealer.clone(),
            cfg.clone(),
            upstream,
            compat,
            clock.clone(),
        )?);
        Ok(Some(Arc::new(Relay {
            cfg,
            base,
            sealer,
            store,
            deliverer,
            clock,
        })))
    }

    /// Starts the deliverer of a relay made by [`Relay::open`], until `stop`.
    pub fn deliver(&self, stop: watch::Receiver<bool>) {
        tokio::spawn(self.deliverer.clone().run(stop));
    }

    /// Opens the configured store and builds the relay, delivering nothing
    /// yet ([`Relay::deliver`]): done before any listener is bound, so a
    /// store that cannot be opened (a redb file another process holds)
    /// stops start-up before anything listens. Logs and counts the mode.
    pub async fn open(
        cfg: &CallbacksConfig,
        upstream: Arc<dyn Upstream>,
        compat: Compat,
    ) -> Result<Option<Arc<Relay>>, String> {
        if cfg.relay.is_none() {
            tracing::info!("callbacks: passthrough mode, V2 posts its own callback body to V1 clients' callback_url (set callbacks.public_url to relay V1 notifications)");
            metrics::register(false);
            return Ok(None);
        }
        let store = open_store(&cfg.store).await?;
        let relay = Relay::new(
            cfg.clone(),
            store,
            upstream,
            compat,
            Arc::new(clock::SystemClock),
        )?;
        if let Some(r) = &relay {
            tracing::info!(public_url = %r.base, store = %config::redacted_store(&cfg.store), enrich = cfg.enrich, "callbacks: relay mode");
            metrics::register(true);
        }
        Ok(relay)
    }
}

impl crate::ops::CallbackUrls for Relay {
    /// The URL V2 gets instead of a V1 client's `callback_url`: the client URL
    /// is checked (http/https, host, no credentials, bounded) and sealed, with
    /// the client's key when enrichment may use it.
    fn v2_callback_url(
        &self,
        client_url: &str,
        key: Option<&ApiKey>,
    ) -> Result<String, GatewayError> {
        let url = check_client_url(client_url, self.cfg.max_url_bytes)?;
        let claims = Claims {
            url,
            key: key
                .filter(|_| self.cfg.enrich)
                .map(|k| k.expose().to_owned()),
            issued: self.clock.now_ms() / 1000,
        };
        let token = self
            .sealer
            .seal(&claims)
            .map_err(|e| GatewayError::Internal(format!("callback token: {e}")))?;
        // A token the receiving side would refuse must not reach V2: the
        // run's callbacks would be dropped. `max_url_bytes` is bounded so
        // that this does not happen; this keeps it so.
        if token.len() > token::MAX_TOKEN_LEN {
            return Err(GatewayError::bad("callback_url", "is too long"));
        }
        Ok(format!("{}{}{token}", self.base, receive::PATH_PREFIX))
    }
}

/// The checked client URL, or a 400 naming `callback_url`. V1 accepted the
/// long and credential-carrying URLs refused here (difference
/// `callback_url_checks`): the URL is sealed into the one V2 gets and kept in
/// the store, so it is bounded and holds no password.
pub fn check_client_url(raw: &str, max_len: usize) -> Result<String, GatewayError> {
    let raw = raw.trim();
    if raw.len() > max_len {
        return Err(GatewayError::bad(
            "callback_url",
            format!("must be at most {max_len} characters"),
        ));
    }
    let url = url::Url::parse(raw)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        .ok_or_else(|| {
            GatewayError::bad("callback_url", "must be an absolute http or https URL")
        })?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(GatewayError::bad(
            "callback_url",
            "must not carry credentials",
        ));
    }
    // Spaces and other characters a URL cannot hold are percent-encoded by
    // parsing, three bytes each: the URL sealed into the token is this one.
    let url = url.to_string();
    if url.len() > max_len {
        return Err(GatewayError::bad(
            "callback_url",
            format!(
                "must be at most {max_len} characters once percent-encoded (it is {})",
                url.len()
            ),
        ));
    }
    Ok(url)
}

/// The request path as logs may show it: a callback token is cut off.
pub fn loggable_path(path: &str) -> &str {
    if token_of(path).is_some() {
        receive::PATH_PREFIX
    } else {
        path
    }
}

/// Opens the store `[callbacks] store` names.
pub async fn open_store(kind: &StoreKind) -> Result<Arc<dyn Store>, String> {
    Ok(match kind {
        StoreKind::Memory => Arc::new(store::memory::MemoryStore::default()),
        StoreKind::Redb(path) => {
            let path = path.clone();
            let s = tokio::task::spawn_blocking(move || store::redb::RedbStore::open(&path))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
            Arc::new(s)
        }
        StoreKind::Postgres(url) => Arc::new(
            store::postgres::PostgresStore::connect(url, store::postgres::TABLE)
                .await
                .map_err(|e| format!("callbacks.store: {e}"))?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_measured_as_it_is_sealed() {
        let spaced = format!("http://h.example/x{}y", " ".repeat(100));
        assert!(spaced.len() <= 120);
        let e = check_client_url(&spaced, 120).unwrap_err();
        assert!(format!("{e:?}").contains("once percent-encoded"), "{e:?}");
        assert!(check_client_url(&spaced, 400).is_ok());
    }

    #[test]
    fn client_urls_are_checked_and_errors_name_the_field() {
        assert_eq!(
            check_client_url(" https://h.example/cb?a=1 ", 100).unwrap(),
            "https://h.example/cb?a=1"
        );
        for bad in [
            "ftp://h/x",
            "not a url",
            "http://",
            "https://u:p@h.example/",
            "https://u@h.example/",
        ] {
            let e = check_client_url(bad, 100).unwrap_err().render();
            assert_eq!(e.status.as_u16(), 400, "{bad}");
            assert!(
                e.envelope.message.contains("callback_url"),
                "{bad}: {}",
                e.envelope.message
            );
        }
        assert!(check_client_url(&format!("https://h.example/{}", "a".repeat(100)), 100).is_err());
    }
}
