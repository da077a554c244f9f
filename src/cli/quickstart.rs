//! The `v1compat sandbox` command, a quick start: the embedded V2 reference
//! service ([`v1compat_sandbox`]), the gateway pointed at it and the native V1
//! surface, in one process, so a new user can try the gateway with one
//! command and no account. Off the request path: it only wires the parts.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::config;
use crate::upstream::HttpUpstream;
use v1compat_sandbox::{Sandbox, SandboxConfig};

/// What `v1compat sandbox` was asked for (its command-line flags).
#[derive(Debug, Clone, clap::Args)]
pub struct QuickstartOptions {
    /// Gateway (V1 API) address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Gateway admin address (/healthz, /readyz, /metrics).
    #[arg(long, default_value = "127.0.0.1:9090")]
    pub admin_listen: SocketAddr,
    /// V2 reference service address.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub upstream_listen: SocketAddr,
    /// Native V1 service address (the legacy side for shadow tests).
    #[arg(long, default_value = "127.0.0.1:8082")]
    pub legacy_listen: SocketAddr,
    /// Demo API key (default: sandbox-key, or the config's api_key).
    #[arg(long)]
    pub api_key: Option<String>,
    /// Seed for generated rows, run durations and fault probabilities.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Simulated seconds per real second.
    #[arg(long)]
    pub speed: Option<f64>,
    /// Sandbox configuration (see config/sandbox.toml).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Once every listener is bound, write one line to this file (replaced atomically):
    /// `READY gateway=http://ADDR admin=http://ADDR upstream=http://ADDR legacy=http://ADDR key=KEY`.
    /// Lets scripts use port 0 and learn the chosen addresses.
    #[arg(long, value_name = "PATH")]
    pub ready_file: Option<PathBuf>,
}

/// Starts everything, prints how to use it, and runs until `shutdown`.
pub async fn run(
    opts: QuickstartOptions,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), String> {
    let mut cfg = match &opts.config {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            SandboxConfig::from_toml_str(&text).map_err(|e| format!("{}: {e}", p.display()))?
        }
        None => SandboxConfig::default(),
    };
    if let Some(k) = &opts.api_key {
        cfg.api_key = k.clone();
    }
    if let Some(s) = opts.seed {
        cfg.seed = s;
    }
    if let Some(s) = opts.speed {
        cfg.speed = s;
    }
    cfg.validate()?;

    let bind = |addr: SocketAddr, flag: &'static str| async move {
        crate::cli::bind::bind(addr, flag, flag).await
    };
    let (v2, v1) = (
        bind(opts.upstream_listen, "--upstream-listen").await?,
        bind(opts.legacy_listen, "--legacy-listen").await?,
    );
    let (public, admin) = (
        bind(opts.listen, "--listen").await?,
        bind(opts.admin_listen, "--admin-listen").await?,
    );

    // The gateway: defaults and V1COMPAT_* variables, pointed at the sandbox,
    // with the demo key as service key so the public V1 operations work keyless.
    // The inventory in the embedded store, in a folder of this process's
    // own that goes with it: two sandboxes never share a file, and the
    // checkout is left as it was (V1COMPAT_INVENTORY__STORE still wins).
    let inventory_dir =
        std::env::temp_dir().join(format!("v1compat-sandbox-{}", std::process::id()));
    let text = format!(
        "[upstream]\nbase_url = \"http://{}\"\nservice_key = \"{}\"\n[log]\nformat = \"text\"\n{}[inventory]\nstore = {}\n",
        local(&v2)?,
        cfg.api_key,
        relay_section(local(&public)?),
        toml::Value::String(format!("redb:{}", inventory_dir.join("inventory.redb").display())),
    );
    // The recorder first: the configuration's memory budget looks up its
    // gauge when it is made, and one made before the recorder is installed
    // would be set on nothing.
    crate::telemetry::prometheus();
    let mut gateway_cfg = config::load(&text, std::env::vars()).map_err(|e| e.to_string())?;
    // The demo's operator endpoints (`/callbacks/events`, redelivery) are
    // open on a loopback admin listener, unless a token was configured;
    // on any other address they stay as configured (closed without one).
    let operator = &gateway_cfg.operator;
    if local(&admin)?.ip().is_loopback() && operator.enabled() && !operator.has_token() {
        gateway_cfg.operator = crate::edge::server::operator::OperatorAccess::open();
    }
    // The native V1 surface speaks the gateway's V1 dialect, so the two agree
    // on the points the V1 record leaves open (`V1COMPAT_COMPAT__…` moves both).
    cfg.v1 = gateway_cfg.compat.dialect;
    let sandbox = Sandbox::start(cfg, v2, v1)
        .await
        .map_err(|e| e.to_string())?;
    crate::telemetry::init_logging(&gateway_cfg.log.format, &gateway_cfg.log.level);
    let upstream = Arc::new(HttpUpstream::new(gateway_cfg.upstream.clone())?);
    let addrs = Addresses {
        gateway: local(&public)?,
        admin: local(&admin)?,
        v2: sandbox.v2_addr(),
        v1: sandbox.v1_addr(),
        key: sandbox.api_key().to_owned(),
    };
    println!("{}", addrs.banner());
    if let Some(path) = &opts.ready_file {
        write_atomically(path, &addrs.ready_line())
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let result = crate::app::run_with(
        public,
        admin,
        gateway_cfg,
        upstream,
        inventory_on(),
        shutdown,
    )
    .await;
    sandbox.shutdown().await;
    let _ = std::fs::remove_dir_all(&inventory_dir);
    result.map_err(|e| e.to_string())
}

/// The sandbox runs the migration inventory, as `serve` does.
fn inventory_on() -> crate::app::Extras {
    crate::app::Extras {
        inventory: true,
        ..Default::default()
    }
}

/// The sandbox relays callbacks: V2 posts to the gateway's own listener, and
/// V1 receivers on this machine (loopback) are allowed. The secret lives as
/// long as the process, like the in-memory store.
fn relay_section(gateway: SocketAddr) -> String {
    let secret: String = (0..32)
        .map(|_| char::from(b"0123456789abcdef"[rand::random::<usize>() % 16]))
        .collect();
    format!(
        "[callbacks]\nmode = \"relay\"\npublic_url = \"http://{gateway}\"\nsecret = \"{secret}\"\nstore = \"memory\"\nallow_cidrs = [\"127.0.0.0/8\", \"::1/128\"]\n"
    )
}

/// Write through a temporary file and a rename, so a reader polling for the file
/// never sees it half-written.
fn write_atomically(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

fn local(l: &TcpListener) -> Result<SocketAddr, String> {
    l.local_addr().map_err(|e| e.to_string())
}

/// Where everything listens, and the demo key.
struct Addresses {
    gateway: SocketAddr,
    admin: SocketAddr,
    v2: SocketAddr,
    v1: SocketAddr,
    key: String,
}

impl Addresses {
    /// The machine-readable form of the banner (one line, space-separated `name=value`).
    fn ready_line(&self) -> String {
        let Addresses {
            gateway,
            admin,
            v2,
            v1,
            key,
        } = self;
        format!("READY gateway=http://{gateway} admin=http://{admin} upstream=http://{v2} legacy=http://{v1} key={key}\n")
    }

    fn banner(&self) -> String {
        let Addresses {
            gateway,
            admin,
            v2,
            v1,
            key,
        } = self;
        format!(
            "v1compat sandbox is running.

  gateway (V1 API, translated)  http://{gateway}
  admin (/metrics /healthz)     http://{admin}
  V2 reference service          http://{v2}
  native V1 service (legacy)    http://{v1}
  demo API key                  {key}

Callbacks are relayed: a callback_url (on 127.0.0.1) given to scraper run, task run or
rerun receives V1's {{run_slug, status, results, usage}}; pending ones: http://{admin}/callbacks/events
Who still calls V1, relying on what, and what to call instead: http://{admin}/inventory

Try:
  curl -s 'http://{gateway}/api/store?search=maps&limit=3'
  curl -s -X POST http://{gateway}/api/v1/scraper/run -H 'api-key: {key}' -H 'content-type: application/json' \\
    -d '{{\"scraper_slug\":\"coreclaw/google-maps-scraper\",\"is_async\":true,\"input\":{{\"parameters\":{{\"custom\":{{\"max_results\":20}}}}}}}}'

Stop with ctrl-c."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_line_is_one_parseable_line() {
        let a = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        let addrs = Addresses {
            gateway: a(1),
            admin: a(2),
            v2: a(3),
            v1: a(4),
            key: "k".into(),
        };
        let line = addrs.ready_line();
        assert_eq!(
            line,
            "READY gateway=http://127.0.0.1:1 admin=http://127.0.0.1:2 \
             upstream=http://127.0.0.1:3 legacy=http://127.0.0.1:4 key=k\n"
        );
    }

    #[test]
    fn ready_file_is_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ready");
        std::fs::write(&path, "old").unwrap();
        write_atomically(&path, "READY x=1\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "READY x=1\n");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
