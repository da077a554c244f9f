//! What every request shares, one per configuration snapshot: the
//! pipeline's own [`Settings`], the translation side built once from the
//! configuration (the V2 client, [`ops::Settings`], the worker-id cache, the
//! callback relay's URL maker) and the migration inventory, in [`Gateway`]. A request loads the
//! snapshot once, from the swap cell [`Live`], and reads plain fields from
//! then on; it keeps the snapshot it was admitted with to the end, whatever
//! a reload swaps in meanwhile.
//!
//! Defined here, below everything that reads it (the edge, the shadow
//! mirror), so that none of them names the configuration or the reload:
//! the configuration builds the settings, and the reload builds each next
//! snapshot ([`Gateway::reloaded`]) and stores it in the cell.

use std::sync::Arc;
use std::time::Duration;

use crate::common::cidr::Cidr;
use crate::inventory::{config::Notices, Inventory};
use crate::ops::{self, worker_ids::WorkerIds, Translator};
use crate::upstream::Upstream;
use v1compat_contract::dialect::Dialect;

/// What the pipeline reads of the configuration: per request, except
/// `max_in_flight` (read once, when the pipeline is made).
#[derive(Debug, Clone)]
pub struct Settings {
    /// `listen.trusted_proxies`: the peers whose forwarded-for headers are
    /// believed, for the access line.
    pub trusted_proxies: Vec<Cidr>,
    /// `log.access`: an access line for every request, not only failures.
    pub access_log: bool,
    /// The V1 dialect errors are rendered in (`[compat]`).
    pub dialect: Dialect,
    /// `limits.max_body_bytes`.
    pub max_body_bytes: usize,
    /// `limits.max_in_flight` (a restart changes it).
    pub max_in_flight: usize,
    /// `upstream.request_timeout_ms`.
    pub request_timeout: Duration,
    /// `upstream.sync_run_timeout_ms`: a synchronous run's wait, on top of
    /// the request's own deadline.
    pub sync_run_timeout: Duration,
    /// What V1 answers tell their clients (`[inventory.deprecation]`,
    /// `[[inventory.brownouts]]`).
    pub notices: Notices,
}

/// One configuration snapshot: what the pipeline reads, and what the
/// operations run on.
pub struct Gateway {
    pub settings: Settings,
    /// The operations' side: built from the configuration, never reading it.
    pub translator: Translator,
    /// The migration inventory, when opened (`serve`, `sandbox`): opened
    /// once, carried over by reloads.
    inventory: Option<Arc<Inventory>>,
}

/// The snapshot the request path uses now; a reload stores the next one.
pub type Live = crate::common::live::Live<Gateway>;

impl Gateway {
    pub fn new(
        upstream: Arc<dyn Upstream>,
        settings: Settings,
        translation: ops::Settings,
    ) -> Gateway {
        Gateway {
            settings,
            translator: Translator::new(upstream, translation),
            inventory: None,
        }
    }

    /// The same snapshot with the callback relay's URL maker on (relay
    /// mode), or off.
    pub fn with_callbacks(&self, urls: Option<Arc<dyn ops::CallbackUrls>>) -> Gateway {
        let mut translator = self.translator.clone();
        translator.callbacks = urls;
        Gateway {
            settings: self.settings.clone(),
            translator,
            inventory: self.inventory.clone(),
        }
    }

    /// The same snapshot with the migration inventory on.
    pub fn with_inventory(&self, inventory: Option<Arc<Inventory>>) -> Gateway {
        Gateway {
            settings: self.settings.clone(),
            translator: self.translator.clone(),
            inventory,
        }
    }

    /// The migration inventory, when opened.
    pub fn inventory(&self) -> Option<&Arc<Inventory>> {
        self.inventory.as_ref()
    }

    /// The V2 client.
    pub fn upstream(&self) -> &Arc<dyn Upstream> {
        &self.translator.upstream
    }

    /// The snapshot after a reload to these settings with `upstream`: the
    /// callback relay's URL maker and the inventory carry over (each is
    /// started once), and so does the worker-id cache when `[workers]` did
    /// not change.
    pub fn reloaded(
        &self,
        upstream: Arc<dyn Upstream>,
        settings: Settings,
        translation: ops::Settings,
    ) -> Gateway {
        let worker_ids = if translation.workers == self.translator.settings.workers {
            self.translator.worker_ids.clone()
        } else {
            Arc::new(WorkerIds::new(&translation.workers))
        };
        Gateway {
            settings,
            translator: ops::Translator {
                upstream,
                settings: translation,
                worker_ids,
                callbacks: self.translator.callbacks.clone(),
            },
            inventory: self.inventory.clone(),
        }
    }
}
