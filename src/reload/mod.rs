//! Hot reload, beside the request path: the configuration running now and
//! the cells the stages read it from ([`Live`]), and what replaces it
//! ([`Reloader`]). A reload re-reads the file and the environment captured
//! at start, validates everything (the same [`config::load`] as start-up,
//! files named by it included), builds what the new configuration needs
//! (each stage's settings, from the configuration) and swaps each in whole:
//! the pipeline's snapshot ([`pipeline::Gateway`], in one atomic store) and
//! the admin listener's settings. Each V1 request takes one snapshot when
//! it starts, so it finishes on the configuration it started with. On any error the running
//! configuration stays; the error is logged and counted
//! (`v1compat_config_reloads_total{outcome="rejected"}`), and
//! `v1compat_config_last_reload_successful` is 0 until a load succeeds (a
//! restart would fail on the refused file; the gauge says so for as long
//! as it stays). `[admin]` is live (the operator token file's directory is
//! watched too).
//!
//! Live: `[upstream]` (a new connection pool when it changed), `[retry]`,
//! `[limits]` except `max_in_flight`, `[workers]` (a new cache when it
//! changed), `[compat]`, `log.access`, `[inventory.names]`,
//! `inventory.gone_after`, the inventory's notices, `upstream.ca_file` and
//! the listeners' certificate files' contents. Restart: `listen.*`
//! addresses and which TLS files, `limits.max_in_flight`, `[connections]`,
//! `[runtime]`, `log.format`, `log.level`, `[shutdown]`, `[shadow]`,
//! `[callbacks]` and the keys the inventory is opened with (all read once
//! at start); a reload that changes them applies the rest and warns which
//! ones wait for a restart.
//!
//! What triggers a reload lives in [`triggers`]: SIGHUP, and a watch on the
//! directories of the configuration file and of the files it names. A file
//! that looks truncated and would move clients' keys elsewhere is refused
//! ([`guard`]; `v1compat_config_reloads_total{outcome="truncated"}`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;
use tokio::sync::broadcast;

use crate::callbacks::Relay;
use crate::config::{self, Config};
use crate::edge::{self, tls};
use crate::inventory::{Inventory, InventoryConfig};
use crate::pipeline;
use crate::telemetry;
use crate::upstream::{HttpUpstream, Upstream};

pub(crate) mod guard;
pub(crate) mod triggers;

/// The configuration running now, and the cells the stages read it from:
/// the pipeline's snapshot and the admin listener's settings, each built
/// from the configuration and swapped in whole by a reload.
pub struct Live {
    current: ArcSwap<Running>,
    gateway: Arc<pipeline::Live>,
    admin: Arc<edge::LiveAdmin>,
    /// The callback relay, once opened (`None` inside: not relay mode):
    /// see [`Live::open_callbacks`]. Started once; reloads keep it.
    relay: OnceLock<Option<Arc<Relay>>>,
    /// The migration inventory, once opened (`None` inside: off): see
    /// [`Live::open_inventory`]. Opened once; reloads keep it.
    inventory: OnceLock<Option<Arc<Inventory>>>,
}

/// The configuration running now, with the pipeline's snapshot built from
/// it. Read at start and by the reloader, never per request.
pub struct Running {
    pub config: Arc<Config>,
    pub gateway: Arc<pipeline::Gateway>,
}

impl Live {
    /// The cells of `config`, on `upstream`.
    pub fn new(upstream: Arc<dyn Upstream>, config: Config) -> Arc<Live> {
        let gateway = Arc::new(config.gateway(upstream));
        Arc::new(Live {
            admin: edge::LiveAdmin::new(Arc::new(config.admin())),
            gateway: pipeline::Live::new(gateway.clone()),
            current: ArcSwap::from_pointee(Running {
                config: Arc::new(config),
                gateway,
            }),
            relay: OnceLock::new(),
            inventory: OnceLock::new(),
        })
    }

    /// The configuration running now.
    pub fn load(&self) -> Arc<Running> {
        self.current.load_full()
    }

    /// The pipeline's cell: what each V1 request loads once.
    pub fn gateway(&self) -> &Arc<pipeline::Live> {
        &self.gateway
    }

    /// The admin listener's cell.
    pub fn admin(&self) -> &Arc<edge::LiveAdmin> {
        &self.admin
    }

    /// Swaps in `config` and the pipeline's snapshot built from it: the
    /// stages' cells first, then the record of what runs.
    fn store(&self, config: Arc<Config>, gateway: pipeline::Gateway) {
        let gateway = Arc::new(gateway);
        self.admin.store(Arc::new(config.admin()));
        self.gateway.store(gateway.clone());
        self.current.store(Arc::new(Running { config, gateway }));
    }

    /// Puts the callback relay (started once the gateway exists) into the
    /// live snapshot, as the operations' URL maker; reloads carry it over
    /// from then on. The relay is started once: a second one is not
    /// attached.
    pub fn attach_callbacks(&self, relay: Option<Arc<Relay>>) {
        if self.relay.set(relay.clone()).is_err() {
            return;
        }
        let running = self.load();
        let urls = relay.map(|r| r as Arc<dyn crate::ops::CallbackUrls>);
        let gateway = running.gateway.with_callbacks(urls);
        self.store(running.config.clone(), gateway);
    }

    /// Whether [`Live::attach_callbacks`] has run.
    pub fn callbacks_opened(&self) -> bool {
        self.relay.get().is_some()
    }

    /// The callback relay, when `[callbacks]` is in relay mode and it is
    /// open.
    pub fn relay(&self) -> Option<Arc<Relay>> {
        self.relay.get().cloned().flatten()
    }

    /// Opens the callback relay's store and attaches the relay (not yet
    /// delivering), unless that was done.
    pub async fn open_callbacks(&self) -> Result<(), String> {
        if self.callbacks_opened() {
            return Ok(());
        }
        let running = self.load();
        let relay = Relay::open(
            &running.config.callbacks,
            running.gateway.upstream().clone(),
            running.config.compat.clone(),
        )
        .await?;
        self.attach_callbacks(relay);
        Ok(())
    }
}

impl Live {
    /// Opens the migration inventory's store (when `[inventory]` is on) and
    /// puts it into the live snapshot; reloads carry it over. A store that
    /// cannot be opened (a redb file another process holds) is an error.
    pub async fn open_inventory(&self) -> Result<(), String> {
        if self.inventory.get().is_some() {
            return Ok(());
        }
        let running = self.load();
        let inventory = Inventory::open(&running.config.inventory).await?;
        if self.inventory.set(inventory.clone()).is_err() {
            return Ok(());
        }
        let running = self.load();
        let gateway = running.gateway.with_inventory(inventory);
        self.store(running.config.clone(), gateway);
        Ok(())
    }

    /// The migration inventory, when `[inventory]` is on and it is open.
    pub fn inventory(&self) -> Option<Arc<Inventory>> {
        self.inventory.get().cloned().flatten()
    }
}

/// Where the configuration comes from, to read it again.
#[derive(Clone, Debug)]
pub struct Source {
    /// The TOML file; `None` = defaults plus the environment.
    pub path: Option<PathBuf>,
    /// The environment as it was at start (a process's environment does not
    /// change under it; keeping it makes a reload read the same overrides).
    pub env: Vec<(String, String)>,
}

impl Source {
    /// Reads and validates; every problem, one per line, on failure.
    pub fn load(&self) -> Result<Config, String> {
        let text = self.text()?;
        config::load(&text, self.env.clone()).map_err(|e| e.to_string())
    }

    fn text(&self) -> Result<String, String> {
        match &self.path {
            Some(p) => read_whole(p).map_err(|e| format!("{}: {e}", p.display())),
            None => Ok(String::new()),
        }
    }
}

/// Reads a file that may be being written: again while its length or time
/// of change moved during the read (a few times at most), so a reload does
/// not take half of a write in progress.
fn read_whole(path: &std::path::Path) -> std::io::Result<String> {
    let mark = |m: std::fs::Metadata| (m.len(), m.modified().ok());
    let mut tries = 0;
    loop {
        let before = mark(std::fs::metadata(path)?);
        let text = std::fs::read_to_string(path)?;
        let after = mark(std::fs::metadata(path)?);
        tries += 1;
        if before == after && after.0 == text.len() as u64 || tries == 5 {
            return Ok(text);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Builds the V2 upstream for a configuration.
pub type BuildUpstream = Arc<dyn Fn(&Config) -> Result<Arc<dyn Upstream>, String> + Send + Sync>;

/// The real pooled client.
pub fn http_upstream() -> BuildUpstream {
    Arc::new(|config: &Config| {
        HttpUpstream::new(config.upstream.clone()).map(|u| Arc::new(u) as Arc<dyn Upstream>)
    })
}

/// What one reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A new configuration is live; the keys listed changed but keep their
    /// running value until a restart.
    Applied { restart_needed: Vec<&'static str> },
    /// Nothing that matters changed.
    Unchanged,
    /// The running configuration stays; the reason, one problem a line.
    Rejected(String),
}

/// Replaces the live configuration; shared by every trigger.
pub struct Reloader {
    source: Source,
    live: Arc<Live>,
    build_upstream: BuildUpstream,
    public_tls: Option<tls::Acceptor>,
    admin_tls: Option<tls::Acceptor>,
    /// The configuration text and CA bytes the live configuration came from.
    stamp: Mutex<Vec<u8>>,
    /// How many keys the live configuration's file sets ([`guard`]).
    keys: Mutex<usize>,
    /// What the last rejected attempt read and why it was refused, until an
    /// attempt is not refused: a file event that reads the same again (a
    /// log or a store written in the watched directory, the error line of
    /// the rejection itself among them) is not a new rejection.
    rejected: Mutex<Option<String>>,
    /// Every reload's outcome, for whoever listens (tests, mostly).
    outcomes: broadcast::Sender<Outcome>,
}

impl Reloader {
    /// Loads the configuration from `source` and builds everything the
    /// gateway starts with; fails with every problem found.
    pub fn start(source: Source, build_upstream: BuildUpstream) -> Result<Arc<Reloader>, String> {
        let text = source.text()?;
        let config = config::load(&text, source.env.clone()).map_err(|e| e.to_string())?;
        let stamp = stamp(&text, &config);
        let keys = guard::keys_set(&text).unwrap_or(0);
        let acceptor =
            |files: &Option<tls::TlsFiles>| files.as_ref().map(tls::Acceptor::new).transpose();
        let public_tls = acceptor(&config.public_tls)?;
        let admin_tls = acceptor(&config.admin_tls)?;
        let upstream = build_upstream(&config)?;
        let live = Live::new(upstream, config);
        Ok(Arc::new(Reloader {
            source,
            live,
            build_upstream,
            public_tls,
            admin_tls,
            stamp: Mutex::new(stamp),
            keys: Mutex::new(keys),
            rejected: Mutex::new(None),
            outcomes: broadcast::channel(64).0,
        }))
    }

    pub fn live(&self) -> &Arc<Live> {
        &self.live
    }

    /// The listeners' TLS, as configured at start.
    pub fn tls(&self) -> (Option<tls::Acceptor>, Option<tls::Acceptor>) {
        (self.public_tls.clone(), self.admin_tls.clone())
    }

    /// Every reload's outcome from now on (those that found nothing new
    /// included when forced).
    pub fn subscribe(&self) -> broadcast::Receiver<Outcome> {
        self.outcomes.subscribe()
    }

    /// The directories whose changes may change the configuration.
    pub fn watched_dirs(&self) -> Vec<PathBuf> {
        let config = self.live.load().config.clone();
        let mut dirs: Vec<PathBuf> = self
            .source
            .path
            .iter()
            .map(|p| p.parent().map(PathBuf::from).unwrap_or_default())
            .collect();
        for files in [&config.public_tls, &config.admin_tls]
            .into_iter()
            .flatten()
        {
            dirs.extend(files.dirs());
        }
        if let Some(ca) = config.upstream.ca_file.as_ref() {
            dirs.extend(ca.parent().map(PathBuf::from));
        }
        if let Some(token) = config.operator.token_file() {
            dirs.extend(token.parent().map(PathBuf::from));
        }
        for d in &mut dirs {
            if d.as_os_str().is_empty() {
                *d = PathBuf::from(".");
            }
        }
        dirs.sort();
        dirs.dedup();
        dirs
    }

    /// Reads everything again and swaps in what changed. `forced` (SIGHUP)
    /// reports even a reload that found nothing new; a file event that
    /// changed nothing the gateway reads is silent, and so is one that
    /// reads the same refused file again.
    pub fn reload(&self, forced: bool) -> Outcome {
        let (certificates, certificate_refused) = self.reload_certificates();
        let (outcome, truncated) = self.reload_config(forced);
        let outcome = match outcome {
            Outcome::Unchanged if certificates => Outcome::Applied {
                restart_needed: Vec::new(),
            },
            outcome => outcome,
        };
        let mut rejected = self.rejected.lock().unwrap_or_else(|p| p.into_inner());
        let recovered = match &outcome {
            Outcome::Rejected(why) => {
                // The file as it reads now, and why it was refused.
                let read = format!("{}\0{why}", self.source.text().unwrap_or_default());
                if !forced && rejected.as_deref() == Some(read.as_str()) {
                    return Outcome::Unchanged;
                }
                *rejected = Some(read);
                false
            }
            _ => rejected.take().is_some(),
        };
        drop(rejected);
        // The gauges say whether what is on disk would load now.
        match &outcome {
            Outcome::Rejected(_) => record_failure(),
            _ if certificate_refused => record_failure(),
            Outcome::Applied { .. } => record_success(),
            Outcome::Unchanged if forced || recovered => record_success(),
            Outcome::Unchanged => {}
        }
        let label = match &outcome {
            Outcome::Applied { restart_needed } => {
                if restart_needed.is_empty() {
                    tracing::info!("configuration reloaded");
                } else {
                    tracing::warn!(
                        restart_needed = %restart_needed.join(", "),
                        "configuration reloaded; these keys changed but keep their running value until a restart"
                    );
                }
                Some("applied")
            }
            Outcome::Rejected(why) if truncated => {
                tracing::error!(problem = %why, "configuration reload refused; the running configuration stays");
                Some("truncated")
            }
            Outcome::Rejected(why) => {
                tracing::error!(problems = %why.replace('\n', "; "), "configuration reload rejected; the running configuration stays");
                Some("rejected")
            }
            Outcome::Unchanged if forced => {
                tracing::info!("configuration reloaded; nothing changed");
                None
            }
            // The refused file put back as it runs: worth a line, so that
            // the error before it is not the last word.
            Outcome::Unchanged if recovered => {
                tracing::info!(
                    "configuration file valid again; it is the running configuration, nothing changed"
                );
                None
            }
            Outcome::Unchanged => return outcome,
        };
        if let Some(label) = label {
            metrics::counter!(telemetry::CONFIG_RELOADS, "outcome" => label).increment(1);
        }
        // No listener is fine.
        let _ = self.outcomes.send(outcome.clone());
        outcome
    }

    /// Reads the listeners' certificate files again: whether one changed,
    /// and whether one was refused.
    fn reload_certificates(&self) -> (bool, bool) {
        let (mut changed, mut refused) = (false, false);
        for (name, acceptor) in [("public", &self.public_tls), ("admin", &self.admin_tls)] {
            let Some(acceptor) = acceptor else { continue };
            match acceptor.reload() {
                Ok(true) => {
                    tracing::info!(listener = name, "TLS certificate reloaded");
                    changed = true;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(listener = name, error = %e, "TLS certificate reload rejected; the current certificate stays");
                    refused = true;
                    metrics::counter!(telemetry::CONFIG_RELOADS, "outcome" => "rejected")
                        .increment(1);
                }
            }
        }
        (changed, refused)
    }

    /// The outcome, and whether it is a refusal of a truncated-looking file.
    fn reload_config(&self, forced: bool) -> (Outcome, bool) {
        let (text, new) = match self.source.text().and_then(|text| {
            config::load(&text, self.source.env.clone())
                .map(|c| (text, c))
                .map_err(|e| e.to_string())
        }) {
            Ok(loaded) => loaded,
            Err(why) => return (Outcome::Rejected(why), false),
        };
        let new_stamp = stamp(&text, &new);
        let mut current_stamp = self.stamp.lock().unwrap_or_else(|p| p.into_inner());
        if *current_stamp == new_stamp && !forced {
            return (Outcome::Unchanged, false);
        }
        let old = self.live.load();
        let mut running_keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let new_keys = guard::keys_set(&text).unwrap_or(0);
        let changes = guard::destination_changes(&old.config, &new);
        if let Some(why) = guard::refusal(*running_keys, new_keys, &changes) {
            return (Outcome::Rejected(why), true);
        }
        let (new, restart_needed) = keep_restart_only(&old.config, new);
        let upstream = if same_upstream(&old.config, &new) {
            old.gateway.upstream().clone()
        } else {
            match (self.build_upstream)(&new) {
                Ok(upstream) => upstream,
                Err(why) => return (Outcome::Rejected(why), false),
            }
        };
        if *current_stamp == new_stamp && restart_needed.is_empty() {
            return (Outcome::Unchanged, false);
        }
        let gateway = old
            .gateway
            .reloaded(upstream, new.pipeline(), new.translation());
        self.live.store(Arc::new(new), gateway);
        *current_stamp = new_stamp;
        *running_keys = new_keys;
        (Outcome::Applied { restart_needed }, false)
    }
}

/// The configuration loaded: `v1compat_config_last_reload_successful` 1,
/// and its time. Start-up counts as the first load.
pub fn record_success() {
    metrics::gauge!(telemetry::CONFIG_LAST_RELOAD_SUCCESSFUL).set(1.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    metrics::gauge!(telemetry::CONFIG_LAST_RELOAD_SUCCESS_TIMESTAMP).set(now);
}

/// A load was refused: `v1compat_config_last_reload_successful` 0 until one
/// succeeds (the running configuration stays, but a restart would fail).
fn record_failure() {
    metrics::gauge!(telemetry::CONFIG_LAST_RELOAD_SUCCESSFUL).set(0.0);
}

/// What a configuration was made from: its text, the CA file's bytes and
/// the operator token (the files may change while the text does not).
fn stamp(text: &str, config: &Config) -> Vec<u8> {
    let mut stamp = text.as_bytes().to_vec();
    stamp.push(0);
    stamp.extend_from_slice(
        config
            .upstream
            .extra_root_pem
            .as_deref()
            .unwrap_or_default(),
    );
    stamp.push(0);
    stamp.extend_from_slice(config.operator.stamp());
    stamp
}

/// The V2 client can be kept (pool and retry budget with it) when nothing
/// it was built from changed.
fn same_upstream(old: &Config, new: &Config) -> bool {
    format!("{:?}", old.upstream) == format!("{:?}", new.upstream)
        && old.upstream.extra_root_pem == new.upstream.extra_root_pem
        && old.upstream.proxy == new.upstream.proxy
}

/// Puts the running value back into every key that only a restart can
/// change, and names the ones that differed.
fn keep_restart_only(old: &Config, mut new: Config) -> (Config, Vec<&'static str>) {
    let mut differ = Vec::new();
    let mut keep = |name: &'static str, changed: bool| {
        if changed {
            differ.push(name);
        }
    };
    keep("listen.public", old.public_addr != new.public_addr);
    keep("listen.admin", old.admin_addr != new.admin_addr);
    keep(
        "listen.tls_cert_file / tls_key_file",
        old.public_tls != new.public_tls,
    );
    keep(
        "listen.admin_tls_cert_file / admin_tls_key_file",
        old.admin_tls != new.admin_tls,
    );
    keep(
        "limits.max_in_flight",
        old.limits.max_in_flight != new.limits.max_in_flight,
    );
    // The logger is set up once; `log.access` is read per request from the
    // pipeline's snapshot, so it reloads live.
    keep("log.format", old.log.format != new.log.format);
    keep("log.level", old.log.level != new.log.level);
    keep(
        "shutdown",
        old.grace_period != new.grace_period || old.drain_delay != new.drain_delay,
    );
    keep(
        "callbacks",
        format!("{:?}", old.callbacks) != format!("{:?}", new.callbacks),
    );
    keep(
        "connections",
        format!("{:?}", old.connections) != format!("{:?}", new.connections),
    );
    keep("runtime.threads", old.runtime != new.runtime);
    keep(
        "shadow",
        format!("{:?}", old.shadow) != format!("{:?}", new.shadow),
    );
    new.public_addr = old.public_addr;
    new.admin_addr = old.admin_addr;
    new.public_tls = old.public_tls.clone();
    new.admin_tls = old.admin_tls.clone();
    new.limits.max_in_flight = old.limits.max_in_flight;
    new.log.format = old.log.format.clone();
    new.log.level = old.log.level.clone();
    new.grace_period = old.grace_period;
    new.drain_delay = old.drain_delay;
    new.connections = old.connections.clone();
    // The budget the listeners count in, for a V2 client built anew too.
    new.upstream.memory = old.upstream.memory.clone();
    new.runtime = old.runtime;
    new.callbacks = old.callbacks.clone();
    new.shadow = old.shadow.clone();
    differ.extend(keep_inventory_opened(&old.inventory, &mut new.inventory));
    (new, differ)
}

/// Puts back the inventory's keys that it is opened with (once, at start)
/// and names the ones that differed. The names, `gone_after` and the notices
/// are read per report and per request, so they stay new.
fn keep_inventory_opened(old: &InventoryConfig, new: &mut InventoryConfig) -> Vec<&'static str> {
    let differ = [
        ("inventory.enabled", old.enabled != new.enabled),
        ("inventory.store", old.store != new.store),
        ("inventory.secret", old.secret != new.secret),
        (
            "inventory.flush_interval_ms",
            old.flush_interval != new.flush_interval,
        ),
        ("inventory.max_clients", old.max_clients != new.max_clients),
        (
            "inventory.keep_history",
            old.keep_history != new.keep_history,
        ),
    ];
    new.enabled = old.enabled;
    new.store = old.store.clone();
    new.secret = old.secret.clone();
    new.flush_interval = old.flush_interval;
    new.max_clients = old.max_clients;
    new.keep_history = old.keep_history;
    differ
        .into_iter()
        .filter_map(|(name, changed)| changed.then_some(name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Config {
        config::load(text, Vec::new()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn restart_only_keys_keep_their_running_value_and_are_named() {
        let old = load("");
        let new = load(
            "[listen]\npublic = \"127.0.0.1:1\"\n[limits]\nmax_in_flight = 3\nmax_page_size = 50\n\
             [connections]\nmax_connections = 9\n[shutdown]\ngrace_period_secs = 1\n\
             [log]\nlevel = \"debug\"\n[runtime]\nthreads = 3\n",
        );
        let (kept, named) = keep_restart_only(&old, new);
        assert_eq!(
            named,
            [
                "listen.public",
                "limits.max_in_flight",
                "log.level",
                "shutdown",
                "connections",
                "runtime.threads"
            ]
        );
        assert_eq!(kept.runtime.threads, 0);
        assert_eq!(kept.public_addr, old.public_addr);
        assert_eq!(kept.limits.max_in_flight, old.limits.max_in_flight);
        assert_eq!(kept.grace_period, old.grace_period);
        assert_eq!(kept.log.level, old.log.level);
        // Live keys take the new value.
        assert_eq!(kept.limits.max_page_size, 50);
        // One memory budget, the running one, for the listeners and for a
        // V2 client the new configuration builds.
        let budget = |c: &Config| c.upstream.memory.clone().expect("a budget");
        assert!(Arc::ptr_eq(&budget(&old), &old.connections.budget));
        assert!(Arc::ptr_eq(&budget(&kept), &old.connections.budget));
        assert!(Arc::ptr_eq(
            &kept.connections.budget,
            &old.connections.budget
        ));
    }

    #[test]
    fn log_access_reloads_live() {
        let old = load("");
        let (kept, named) = keep_restart_only(&old, load("[log]\naccess = false\n"));
        assert!(named.is_empty(), "{named:?}");
        assert!(!kept.pipeline().access_log);
    }

    #[test]
    fn the_inventory_keys_read_when_it_opens_keep_their_running_value_and_are_named() {
        let old = load("");
        let new = load(
            "[inventory]\nenabled = false\nstore = \"memory\"\nsecret = \"0123456789abcdef\"\n\
             flush_interval_ms = 5\nmax_clients = 7\nkeep_history = \"1d\"\ngone_after = \"2d\"\n\
             [inventory.deprecation]\nlink = \"https://example.com/migrate\"\n",
        );
        let (kept, named) = keep_restart_only(&old, new);
        assert_eq!(
            named,
            [
                "inventory.enabled",
                "inventory.store",
                "inventory.secret",
                "inventory.flush_interval_ms",
                "inventory.max_clients",
                "inventory.keep_history"
            ]
        );
        let (was, is) = (&old.inventory, &kept.inventory);
        assert_eq!(is.enabled, was.enabled);
        assert_eq!(is.store, was.store);
        assert_eq!(is.secret, was.secret);
        assert_eq!(is.flush_interval, was.flush_interval);
        assert_eq!(is.max_clients, was.max_clients);
        assert_eq!(is.keep_history, was.keep_history);
        // Read per report and per request: live.
        assert_eq!(is.gone_after, std::time::Duration::from_secs(2 * 24 * 3600));
        assert_eq!(
            kept.pipeline().notices.link.as_deref(),
            Some("https://example.com/migrate")
        );
    }

    #[test]
    fn an_unchanged_upstream_keeps_its_client() {
        let a = load("[upstream]\nbase_url = \"http://a.example\"\n");
        let same =
            load("[upstream]\nbase_url = \"http://a.example\"\n[compat]\naccount_traffic = 3\n");
        let other = load("[upstream]\nbase_url = \"http://a.example\"\nattempt_timeout_ms = 999\n");
        assert!(same_upstream(&a, &same));
        assert!(!same_upstream(&a, &other));
        let mut proxied = a.clone();
        proxied.upstream.proxy.https = "http://p.example:3128".into();
        assert!(!same_upstream(&a, &proxied));
    }
}
