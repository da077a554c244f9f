//! V1 worker ids → V2 `workerId`s. V1 `scraper_slug` is a ULID or
//! `owner/name`; V2 wants a slug or `owner~name`, and an old slug is not
//! guaranteed to exist in V2. Before a run is started with an id the gateway
//! has not seen, it asks V2 once (the public input-schema endpoint) and caches
//! the answer: positive and negative results with their own TTLs, in a
//! bounded map.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::{GatewayError, Subject};
use crate::ops::input::{self, Ident};
use crate::ops::{Exchange, WorkerIdSettings};
use crate::upstream::V2Call;
use crate::v2::{Part, Segment, V2Path};

pub struct WorkerIds {
    verify: bool,
    positive_ttl: Duration,
    negative_ttl: Duration,
    capacity: usize,
    aliases: HashMap<String, String>,
    seen: Mutex<HashMap<String, (bool, Instant)>>,
}

impl WorkerIds {
    pub fn new(cfg: &WorkerIdSettings) -> WorkerIds {
        WorkerIds {
            verify: cfg.verify,
            positive_ttl: cfg.positive_ttl,
            negative_ttl: cfg.negative_ttl,
            capacity: cfg.cache_capacity.max(1),
            aliases: cfg.aliases.clone().into_iter().collect(),
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// The V2 id for a V1 worker id: alias table first, then `/` → `~`. An
    /// id that cannot be one (`a/b/c`, `../x`) names no worker
    /// ([`Ident::Unknown`]).
    pub fn translate(&self, raw: &str) -> Ident {
        let raw = raw.trim();
        match self.aliases.get(raw) {
            Some(alias) => input::worker_id(alias),
            None => input::worker_id(raw),
        }
    }

    fn cached(&self, id: &Segment) -> Option<bool> {
        let seen = self.seen.lock().ok()?;
        let (exists, at) = seen.get(id.as_str())?;
        let ttl = if *exists {
            self.positive_ttl
        } else {
            self.negative_ttl
        };
        (at.elapsed() < ttl).then_some(*exists)
    }

    fn remember(&self, id: &Segment, exists: bool) {
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        if seen.len() >= self.capacity {
            let (pos, neg) = (self.positive_ttl, self.negative_ttl);
            seen.retain(|_, (e, at)| at.elapsed() < if *e { pos } else { neg });
            if seen.len() >= self.capacity {
                // Still full of live entries: start over rather than grow.
                seen.clear();
            }
        }
        seen.insert(id.as_str().to_owned(), (exists, Instant::now()));
    }

    /// Checks that V2 knows the worker, once per TTL. Unknown → V1 404/50001.
    /// Errors other than "not found" are not cached and are passed on.
    pub async fn verify(&self, ex: &Exchange<'_>, id: &Segment) -> Result<(), GatewayError> {
        if !self.verify {
            return Ok(());
        }
        match self.cached(id) {
            Some(true) => return Ok(()),
            Some(false) => return Err(GatewayError::NotFound(Subject::Worker)),
            None => {}
        }
        let path = V2Path::new(&[
            Part::Lit("workers"),
            Part::Id(id),
            Part::Lit("input-schema"),
        ]);
        match ex.call(V2Call::get(path), Subject::Worker).await {
            Ok(_) => {
                self.remember(id, true);
                Ok(())
            }
            Err(e @ GatewayError::Refused { .. }) if e.is_unknown_worker() => {
                self.remember(id, false);
                Err(GatewayError::NotFound(Subject::Worker))
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_and_paths_translate() {
        let mut cfg = WorkerIdSettings::default();
        cfg.aliases.insert("old-slug".into(), "owner/new".into());
        let ids = WorkerIds::new(&cfg);
        assert_eq!(
            ids.translate("old-slug").known().unwrap().as_str(),
            "owner~new"
        );
        assert_eq!(ids.translate("a/b").known().unwrap().as_str(), "a~b");
        assert_eq!(
            ids.translate("a/../b"),
            Ident::Unknown(Subject::Worker),
            "never a V2 path"
        );
    }

    #[test]
    fn cache_is_bounded_and_expires() {
        let cfg = WorkerIdSettings {
            cache_capacity: 2,
            negative_ttl: Duration::ZERO,
            ..WorkerIdSettings::default()
        };
        let ids = WorkerIds::new(&cfg);
        let (a, b, c) = (
            Segment::new("a").unwrap(),
            Segment::new("b").unwrap(),
            Segment::new("c").unwrap(),
        );
        ids.remember(&a, true);
        ids.remember(&b, false);
        assert_eq!(ids.cached(&a), Some(true));
        assert_eq!(ids.cached(&b), None, "negative TTL 0 expires at once");
        ids.remember(&c, true);
        assert!(ids.seen.lock().unwrap().len() <= 2);
    }
}
