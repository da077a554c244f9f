//! The `v1compat` binary: parses the command line, loads and validates the
//! configuration (exit 64 on a bad one, before any port is bound), sets up
//! telemetry and runs the gateway until SIGTERM or ctrl-c.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use v1compat::cli::bind::bind;
use v1compat::cli::probe;
use v1compat::cli::shadow::{self as cli, ReplayArgs, ReportArgs};
use v1compat::common::allocator;
use v1compat::config::{self, Config};
use v1compat::edge::server;
use v1compat::{reload, telemetry};

/// sysexits EX_USAGE / EX_CONFIG-style code for a configuration that does not validate.
const EXIT_BAD_CONFIG: u8 = 64;

#[derive(Parser)]
#[command(
    name = "v1compat",
    version,
    about = "Keeps legacy V1 clients of the Worker Run Service working against its V2 API",
    long_about = "v1compat accepts V1 requests (/api/v1/..., /api/store, /api/scraper, /api/proxy/region), \
translates them into V2 calls and answers in V1 envelopes.\n\n\
Configuration is a TOML file (see config/v1compat.toml); every key can be overridden with an \
environment variable V1COMPAT_<SECTION>__<KEY>, e.g. V1COMPAT_UPSTREAM__BASE_URL, read as the \
type of the key it sets. `v1compat check-config FILE [--print]` lists every problem, or prints the \
effective configuration with secrets masked."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start-up, so the size of the `Sandbox` variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run the gateway: V1 traffic on listen.public, /healthz /readyz /metrics on listen.admin.
    Serve {
        /// Configuration file (TOML). Without it, defaults plus V1COMPAT_* variables apply.
        #[arg(long, short, env = "V1COMPAT_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Validate a configuration file (with the V1COMPAT_* overrides of the environment)
    /// and print every problem with its key and line; exit 64 if invalid.
    CheckConfig {
        /// Configuration file (TOML); given here it wins over --config and V1COMPAT_CONFIG.
        #[arg(value_name = "FILE")]
        file: Option<PathBuf>,
        /// The same, as a flag or as serve takes it from the environment.
        #[arg(long, short, value_name = "FILE", env = "V1COMPAT_CONFIG")]
        config: Option<PathBuf>,
        /// Print the effective configuration (file, defaults and environment
        /// merged) as TOML, secrets masked.
        #[arg(long)]
        print: bool,
    },
    /// Run the gateway on its embedded sandbox: a V2 reference service, the gateway
    /// pointed at it and a native V1 service, in one process. Port 0 picks a free port.
    Sandbox(v1compat::cli::quickstart::QuickstartOptions),
    /// Replay V1 traffic to the legacy service and through the translation, and capture both answers.
    #[command(
        long_about = "Replays a capture (from [shadow] capture_path or an earlier replay), or a plain JSONL \
list of V1 requests, to the legacy V1 service (--legacy) and through the translation: a running gateway \
(--gateway) or an in-process one against a V2 upstream (--upstream, with --config for [compat] and the \
service key). Writes a capture of what it saw (--out) and prints the report.\n\n\
A plain line: {\"method\":\"POST\",\"path\":\"/api/v1/run/detail\",\"body\":{\"run_slug\":\"...\"}} or \
{\"operation\":\"run_detail\",\"body\":{...}}; optional \"query\", \"headers\", \"at_ms\" (pacing). \
Operations that start, rerun or abort runs are never replayed."
    )]
    Replay(Box<ReplayArgs>),
    /// Summarise a capture: terminal summary, and a self-contained HTML report with --html.
    Report(ReportArgs),
    /// Print the migration inventory: which clients still call V1, on which
    /// operations, relying on which differences, and what each must change to
    /// call V2 directly.
    #[command(
        long_about = "Reads the migration inventory from the store [inventory] names and prints, per client \
(a fingerprint of its API key, or its user-agent and address when it sent none; named by [inventory.names]): \
the V1 operations it still calls with the V2 calls that replace them, the differences its answers relied on \
with each one's fix, when it was first and last seen, and whether it is gone (not seen for \
inventory.gone_after).\n\n\
A gateway serving on a redb store holds the file: ask it instead, with GET /inventory on its admin listener \
(behind the operator token; ?format=text|json|html), or share a PostgreSQL store."
    )]
    Inventory(v1compat::cli::inventory::InventoryArgs),
    /// Ask a running gateway's admin listener for PATH (default /healthz) and exit 0 on a
    /// 200: a container healthcheck that needs no curl and no bash.
    Probe(probe::ProbeArgs),
}

fn load(path: Option<&PathBuf>) -> Result<Config, String> {
    let loaded = read(path)?;
    for warning in &loaded.warnings {
        eprintln!("v1compat: warning: {warning}");
    }
    Ok(loaded.config)
}

/// The file (or nothing) plus the process environment, validated.
fn read(path: Option<&PathBuf>) -> Result<config::Loaded, String> {
    let text = match path {
        Some(p) => std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?,
        None => String::new(),
    };
    config::read(&text, std::env::vars()).map_err(|e| e.to_string())
}

/// mimalloc instead of glibc's malloc: a request makes about seventy short-lived
/// allocations, and glibc spent about 15 k instructions a request on them
/// (deploy/bench/RESULTS.md, "What changed, step by step").
#[global_allocator]
static ALLOCATOR: allocator::Allocator = allocator::Allocator;

fn main() -> ExitCode {
    let outcome = run(Cli::parse());
    // Log lines still held for a batch (`telemetry::log_batch`), before the
    // error that ended the command.
    telemetry::log_batch::flush_and_wait();
    outcome.unwrap_or_else(|e| {
        eprintln!("{e}");
        ExitCode::FAILURE
    })
}

/// The command's exit code, or the line that says why it failed.
fn run(cli: Cli) -> Result<ExitCode, String> {
    match cli.command {
        Command::CheckConfig {
            file,
            config,
            print,
        } => {
            let Some(config) = file.or(config) else {
                return Ok(bad_config(
                    "check-config needs a FILE (an argument, --config FILE or V1COMPAT_CONFIG)",
                    "",
                ));
            };
            Ok(check_config(&config, print))
        }
        Command::Sandbox(opts) => runtime()
            .block_on(v1compat::cli::quickstart::run(
                opts,
                server::shutdown_signal(),
            ))
            .map(|()| ExitCode::SUCCESS)
            .map_err(|e| format!("v1compat sandbox: {e}")),
        Command::Replay(args) => {
            let cfg = match load(args.config.as_ref()) {
                Ok(c) => c,
                Err(problems) => return Ok(bad_config("invalid configuration:", &problems)),
            };
            telemetry::init_logging("text", "warn");
            exit_code(
                "replay",
                runtime_with(cfg.runtime.threads).block_on(cli::replay_command(*args, cfg)),
            )
        }
        Command::Report(args) => {
            let cfg = match load(args.config.as_ref()) {
                Ok(c) => c,
                Err(problems) => return Ok(bad_config("invalid configuration:", &problems)),
            };
            exit_code("report", cli::report(&args, &cfg))
        }
        Command::Inventory(args) => {
            let cfg = match load(args.config.as_ref()) {
                Ok(c) => c,
                Err(problems) => return Ok(bad_config("invalid configuration:", &problems)),
            };
            runtime()
                .block_on(v1compat::cli::inventory::inventory(&args, &cfg))
                .map_err(|e| format!("v1compat inventory: {e}"))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Probe(args) => {
            let line = runtime()
                .block_on(probe::probe(&args))
                .map_err(|e| format!("v1compat probe: {e}"))?;
            println!("{line}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve { config } => {
            let loaded = match read(config.as_ref()) {
                Ok(loaded) => loaded,
                Err(problems) => return Ok(bad_config("invalid configuration:", &problems)),
            };
            let threads = loaded.config.runtime.threads;
            match runtime_with(threads).block_on(serve(loaded, config)) {
                Ok(()) => Ok(ExitCode::SUCCESS),
                // Logging is set up by then: the failure is a log line in the
                // configured format (JSON stays JSON), not a bare one.
                Err(e) => {
                    tracing::error!(error = %e, "v1compat stopped: it could not serve");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
    }
}

/// `check-config`: every problem, or `ok` (and with `print` the effective
/// configuration, secrets masked). Warnings go to stderr either way.
fn check_config(path: &PathBuf, print: bool) -> ExitCode {
    match read(Some(path)) {
        Ok(loaded) => {
            for warning in &loaded.warnings {
                eprintln!("warning: {warning}");
            }
            if print {
                print!("{}", config::print::effective_toml(&loaded.effective));
            } else {
                println!("{}: ok", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(problems) => bad_config(
            &format!("{}: invalid configuration:", path.display()),
            &problems,
        ),
    }
}

/// Prints every configuration problem, one per line, and gives the exit code.
fn bad_config(heading: &str, problems: &str) -> ExitCode {
    eprintln!("{heading}");
    for line in problems.lines() {
        eprintln!("  - {line}");
    }
    ExitCode::from(EXIT_BAD_CONFIG)
}

/// Exit code of `replay` / `report`: 1 on a difference with
/// `--fail-on-diff`; an error is said by `main`, which exits with 1.
fn exit_code(command: &str, outcome: Result<bool, String>) -> Result<ExitCode, String> {
    match outcome {
        Ok(false) => Ok(ExitCode::SUCCESS),
        Ok(true) => Ok(ExitCode::FAILURE),
        Err(e) => Err(format!("v1compat {command}: {e}")),
    }
}

/// The runtime of a command without a configuration of its own: one
/// thread per CPU (see [`runtime_with`]).
fn runtime() -> tokio::runtime::Runtime {
    runtime_with(0)
}

/// The runtime `runtime.threads` asks for ([`v1compat::cli::runtime`]).
fn runtime_with(threads: usize) -> tokio::runtime::Runtime {
    v1compat::cli::runtime::build(threads)
        .unwrap_or_else(|e| panic!("cannot start the async runtime: {e}"))
}

async fn serve(loaded: config::Loaded, path: Option<PathBuf>) -> Result<(), String> {
    let cfg = loaded.config;
    let source = match &path {
        Some(path) => path.display().to_string(),
        None => "defaults".to_owned(),
    };
    // Listening for SIGTERM starts here, before the start-up line: a stop
    // that follows that line at once is still a graceful one.
    let stop = stop_signal();
    telemetry::init_logging(&cfg.log.format, &cfg.log.level);
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    telemetry::prometheus();
    // The reloader reads the same file and environment again (`loaded` has
    // shown them valid) and keeps them for every reload.
    let reloader = reload::Reloader::start(
        reload::Source {
            path,
            env: std::env::vars().collect(),
        },
        reload::http_upstream(),
    )?;
    // The callback store before any listener: a redb file another process
    // holds stops start-up here, naming the file, with nothing bound.
    reloader.live().open_callbacks().await?;
    // The inventory's store likewise (a redb file held elsewhere stops here).
    reloader.live().open_inventory().await?;
    let public = bind(cfg.public_addr, "listen.public", "V1COMPAT_LISTEN__PUBLIC").await?;
    let admin = bind(cfg.admin_addr, "listen.admin", "V1COMPAT_LISTEN__ADMIN").await?;
    tracing::info!(
        version = %env!("CARGO_PKG_VERSION"),
        public = %public.local_addr().map_err(|e| e.to_string())?,
        admin = %admin.local_addr().map_err(|e| e.to_string())?,
        upstream = %cfg.upstream.base_url,
        config = %source,
        access_log = cfg.log.access,
        inventory = %if cfg.inventory.enabled { inventory_store(&cfg) } else { "off".to_owned() },
        // 1: the single-threaded runtime.
        threads = tokio::runtime::Handle::current().metrics().num_workers(),
        "v1compat listening"
    );
    v1compat::run_reloading(public, admin, reloader, stop)
        .await
        .map_err(|e| e.to_string())
}

/// Where the migration inventory is kept, as the start-up line shows it.
fn inventory_store(cfg: &Config) -> String {
    v1compat::inventory::store_shown(&cfg.inventory)
}

/// Resolves on SIGTERM or ctrl-c received from the moment it is called (the
/// handlers are installed now, not on first poll).
fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => futures_util::future::Either::Left(async move {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }),
            _ => futures_util::future::Either::Right(server::shutdown_signal()),
        }
    }
    #[cfg(not(unix))]
    {
        server::shutdown_signal()
    }
}
