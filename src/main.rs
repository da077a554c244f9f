//! The `v1compat` binary: parses the command line, loads and validates the
//! configuration (exit 64 on a bad one, before any port is bound), sets up
//! telemetry and runs the gateway until SIGTERM or ctrl-c.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};

use v1compat::config::{self, Config};
use v1compat::ops::Gateway;
use v1compat::shadow::replay::{ReplayOptions, TranslatedSide};
use v1compat::shadow::report::Report;
use v1compat::upstream::HttpUpstream;
use v1compat::{server, telemetry};

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
environment variable V1COMPAT_<SECTION>__<KEY>, e.g. V1COMPAT_UPSTREAM__BASE_URL."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway: V1 traffic on listen.public, /healthz /readyz /metrics on listen.admin.
    Serve {
        /// Configuration file (TOML). Without it, defaults plus V1COMPAT_* variables apply.
        #[arg(long, short, env = "V1COMPAT_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Validate a configuration file and print every problem; exit 64 if invalid.
    CheckConfig {
        #[arg(long, short)]
        config: PathBuf,
    },
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
    Report {
        /// Capture file (JSONL).
        file: PathBuf,
        /// Configuration whose [shadow] section gives ignore rules, unordered paths and baseline thresholds.
        #[arg(long, short, env = "V1COMPAT_CONFIG")]
        config: Option<PathBuf>,
        /// Write the HTML report here.
        #[arg(long)]
        html: Option<PathBuf>,
        /// Exit 1 when any difference is reported (for CI).
        #[arg(long)]
        fail_on_diff: bool,
    },
}

#[derive(clap::Args)]
struct ReplayArgs {
    /// Capture or plain request list (JSONL).
    file: PathBuf,
    /// Base URL of the legacy V1 service.
    #[arg(long)]
    legacy: url::Url,
    /// Base URL of a running v1compat gateway to replay through.
    #[arg(
        long,
        conflicts_with = "upstream",
        required_unless_present = "upstream"
    )]
    gateway: Option<url::Url>,
    /// Base URL of the V2 service: translate in this process.
    #[arg(long)]
    upstream: Option<url::Url>,
    /// Configuration for the in-process translation and the report rules.
    #[arg(long, short, env = "V1COMPAT_CONFIG")]
    config: Option<PathBuf>,
    /// Capture of what the replay saw.
    #[arg(long, short, default_value = "replay-capture.jsonl")]
    out: PathBuf,
    /// Multiplier of the recorded pace (2 = twice as fast); 0 = as fast as --concurrency allows.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// At most this many requests per second.
    #[arg(long)]
    max_rate: Option<f64>,
    /// Requests in flight at most.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    // The variable is outside the V1COMPAT_ prefix, which configuration overrides own.
    /// Key sent as api-key where a line's key is redacted or absent.
    #[arg(long, env = "REPLAY_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Call legacy twice per request and treat their disagreements as noise (also [shadow] baseline).
    #[arg(long)]
    baseline: bool,
    /// Deadline of each side of each request (default: [shadow] copy_timeout_ms).
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Also write the HTML report here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Exit 1 when any difference is reported (for CI).
    #[arg(long)]
    fail_on_diff: bool,
}

fn load(path: Option<&PathBuf>) -> Result<Config, String> {
    let text = match path {
        Some(p) => std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?,
        None => String::new(),
    };
    // V1COMPAT_CONFIG names the file (the --config flag); it is not a key override.
    let env = std::env::vars().filter(|(name, _)| name != "V1COMPAT_CONFIG");
    config::load(&text, env).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { config } => match load(Some(&config)) {
            Ok(_) => {
                println!("{}: ok", config.display());
                ExitCode::SUCCESS
            }
            Err(problems) => {
                eprintln!("{}: invalid configuration:", config.display());
                for line in problems.lines() {
                    eprintln!("  - {line}");
                }
                ExitCode::from(EXIT_BAD_CONFIG)
            }
        },
        Command::Replay(args) => {
            let cfg = match load(args.config.as_ref()) {
                Ok(c) => c,
                Err(problems) => return bad_config(&problems),
            };
            match runtime().block_on(replay(*args, cfg)) {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("v1compat replay: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Report {
            file,
            config,
            html,
            fail_on_diff,
        } => {
            let cfg = match load(config.as_ref()) {
                Ok(c) => c,
                Err(problems) => return bad_config(&problems),
            };
            match report(&file, html.as_ref(), &cfg, fail_on_diff) {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("v1compat report: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Serve { config } => {
            let cfg = match load(config.as_ref()) {
                Ok(c) => c,
                Err(problems) => {
                    eprintln!("invalid configuration:");
                    for line in problems.lines() {
                        eprintln!("  - {line}");
                    }
                    return ExitCode::from(EXIT_BAD_CONFIG);
                }
            };
            match runtime().block_on(serve(cfg)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("v1compat: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn bad_config(problems: &str) -> ExitCode {
    eprintln!("invalid configuration:");
    for line in problems.lines() {
        eprintln!("  - {line}");
    }
    ExitCode::from(EXIT_BAD_CONFIG)
}

/// Prints the report of a capture, writes its HTML if asked.
fn report(
    file: &Path,
    html: Option<&PathBuf>,
    cfg: &Config,
    fail_on_diff: bool,
) -> Result<ExitCode, String> {
    let shadow = &cfg.shadow;
    let report = Report::load(file, shadow.rules.clone(), shadow.thresholds)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    print!("{}", report.text());
    if let Some(out) = html {
        std::fs::write(out, report.html()).map_err(|e| format!("{}: {e}", out.display()))?;
        println!("\nHTML report: {}", out.display());
    }
    Ok(if fail_on_diff && !report.real_fields().is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

async fn replay(args: ReplayArgs, mut cfg: Config) -> Result<ExitCode, String> {
    telemetry::init_logging("text", "warn");
    let translated = match (&args.gateway, &args.upstream) {
        (Some(url), _) => TranslatedSide::Gateway(url.clone()),
        (None, Some(url)) => {
            cfg.upstream.base_url = url.clone();
            let upstream = Arc::new(HttpUpstream::new(cfg.upstream.clone())?);
            TranslatedSide::InProcess(Arc::new(Gateway::new(upstream, Arc::new(cfg.clone()))))
        }
        (None, None) => return Err("give --gateway or --upstream".into()),
    };
    let opts = ReplayOptions {
        input: args.file.clone(),
        out: args.out.clone(),
        legacy: args.legacy.clone(),
        translated,
        speed: args.speed.max(0.0),
        max_rate: args.max_rate,
        concurrency: args.concurrency.max(1),
        api_key: args.api_key.clone(),
        baseline: args.baseline || cfg.shadow.baseline,
        timeout: args
            .timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(cfg.shadow.copy_timeout),
        max_body_bytes: cfg.shadow.max_body_bytes,
        progress: !args.quiet,
    };
    let stats = v1compat::shadow::replay::replay(opts).await?;
    println!(
        "replayed {} of {} lines ({} failed, {} skipped) → {}\n",
        stats.sent,
        stats.lines,
        stats.failed,
        stats.skipped,
        args.out.display()
    );
    report(&args.out, args.html.as_ref(), &cfg, args.fail_on_diff)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start the async runtime: {e}"))
}

async fn serve(cfg: Config) -> Result<(), String> {
    telemetry::init_logging(&cfg.log.format, &cfg.log.level);
    telemetry::prometheus();
    let upstream = Arc::new(HttpUpstream::new(cfg.upstream.clone())?);
    let public = tokio::net::TcpListener::bind(cfg.public_addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", cfg.public_addr))?;
    let admin = tokio::net::TcpListener::bind(cfg.admin_addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", cfg.admin_addr))?;
    tracing::info!(
        public = %public.local_addr().map_err(|e| e.to_string())?,
        admin = %admin.local_addr().map_err(|e| e.to_string())?,
        upstream = %cfg.upstream.base_url,
        "v1compat listening"
    );
    v1compat::run(public, admin, cfg, upstream, server::shutdown_signal())
        .await
        .map_err(|e| e.to_string())
}
