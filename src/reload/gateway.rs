//! What every request shares, one per configuration snapshot: the validated
//! configuration and the translation side built from it once (the V2 client,
//! [`ops::Settings`], the worker-id cache, the callback relay, the migration
//! inventory). The pipeline
//! reads the configuration (limits, log, dialect); the operations get only
//! [`Gateway::translator`]. A reload builds the next snapshot
//! ([`Gateway::reloaded`]) and [`reload::Live`](crate::reload::Live) swaps it
//! in whole; each request keeps the one it was admitted with.

use std::sync::Arc;

use crate::config::Config;
use crate::ops::{self, worker_ids::WorkerIds, Translator};
use crate::upstream::Upstream;

/// One configuration snapshot, with what the operations run on.
pub struct Gateway {
    pub config: Arc<Config>,
    /// The callback relay, when `[callbacks]` is in relay mode: started
    /// once, carried over by reloads. The operations see only its URL
    /// maker ([`ops::CallbackUrls`]).
    relay: Option<Arc<crate::callbacks::Relay>>,
    /// The migration inventory, when opened (`serve`, `sandbox`): opened
    /// once, carried over by reloads.
    inventory: Option<Arc<crate::inventory::Inventory>>,
    /// The operations' side: built from `config`, never reading it.
    pub translator: Translator,
}

impl Gateway {
    pub fn new(upstream: Arc<dyn Upstream>, config: Arc<Config>) -> Gateway {
        Gateway {
            translator: Translator::new(upstream, config.translation()),
            config,
            relay: None,
            inventory: None,
        }
    }

    /// The same snapshot with the migration inventory on.
    pub fn with_inventory(&self, inventory: Option<Arc<crate::inventory::Inventory>>) -> Gateway {
        Gateway {
            config: self.config.clone(),
            translator: self.translator.clone(),
            relay: self.relay.clone(),
            inventory,
        }
    }

    /// The migration inventory, when opened.
    pub fn inventory(&self) -> Option<&Arc<crate::inventory::Inventory>> {
        self.inventory.as_ref()
    }

    /// The same snapshot with the callback relay's hooks on.
    pub fn with_callbacks(&self, relay: Option<Arc<crate::callbacks::Relay>>) -> Gateway {
        let mut translator = self.translator.clone();
        translator.callbacks = relay.clone().map(|r| r as Arc<dyn ops::CallbackUrls>);
        Gateway {
            config: self.config.clone(),
            translator,
            relay,
            inventory: self.inventory.clone(),
        }
    }

    /// The V2 client.
    pub fn upstream(&self) -> &Arc<dyn Upstream> {
        &self.translator.upstream
    }

    /// The callback relay, when `[callbacks]` is in relay mode.
    pub fn callbacks(&self) -> Option<&Arc<crate::callbacks::Relay>> {
        self.relay.as_ref()
    }

    /// The snapshot after a reload to `config` with `upstream`: the callback
    /// relay carries over (it is started once), and so does the worker-id
    /// cache when `[workers]` did not change.
    pub fn reloaded(&self, upstream: Arc<dyn Upstream>, config: Config) -> Gateway {
        let settings = config.translation();
        let worker_ids = if settings.workers == self.translator.settings.workers {
            self.translator.worker_ids.clone()
        } else {
            Arc::new(WorkerIds::new(&settings.workers))
        };
        Gateway {
            config: Arc::new(config),
            translator: ops::Translator {
                upstream,
                settings,
                worker_ids,
                callbacks: self.translator.callbacks.clone(),
            },
            relay: self.relay.clone(),
            inventory: self.inventory.clone(),
        }
    }
}
