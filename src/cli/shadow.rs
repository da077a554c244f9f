//! The `replay` and `report` commands, off the request path: their flags
//! (clap) and what they do with a loaded configuration. `main.rs` only
//! dispatches here and turns the outcome into an exit code.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::pipeline::Pipeline;
use crate::shadow::replay::{replay, ReplayOptions, TranslatedSide};
use crate::shadow::report::Report;
use crate::upstream::HttpUpstream;

/// Flags of `v1compat replay`.
// The field docs are `--help` text, where `[shadow]` is the configuration
// section, not a link.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Clone, clap::Args)]
// One of the two ways through the translation, named together when missing.
#[command(group(clap::ArgGroup::new("through").required(true).args(["gateway", "upstream"])))]
pub struct ReplayArgs {
    /// Capture or plain request list (JSONL).
    pub file: PathBuf,
    /// Base URL of the legacy V1 service.
    #[arg(long)]
    pub legacy: url::Url,
    /// Base URL of a running v1compat gateway to replay through (one that answers with its own
    /// translation: shadow off or primary = "translated").
    #[arg(long)]
    pub gateway: Option<url::Url>,
    /// Base URL of the V2 service: translate in this process.
    #[arg(long)]
    pub upstream: Option<url::Url>,
    /// Configuration for the in-process translation and the report rules; its [compat] section
    /// should be the gateway's with --gateway, so the report names the settings that explain a
    /// difference.
    #[arg(long, short, env = "V1COMPAT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Capture of what the replay saw.
    #[arg(long, short, default_value = "replay-capture.jsonl")]
    pub out: PathBuf,
    /// Multiplier of the recorded pace (2 = twice as fast); 0 = as fast as --concurrency allows.
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// At most this many requests per second.
    #[arg(long)]
    pub max_rate: Option<f64>,
    /// Requests in flight at most.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    // The variable is outside the V1COMPAT_ prefix, which configuration overrides own.
    /// Key sent as api-key where a line's key is redacted or absent.
    #[arg(long, env = "REPLAY_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Call legacy twice per request and treat their disagreements as noise (also [shadow] baseline).
    #[arg(long)]
    pub baseline: bool,
    /// Deadline of each side of each request (default: [shadow] copy_timeout_ms).
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Also write the HTML report here.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Exit 1 unless the verdict is a pass: a difference, a request a side
    /// did not answer, an unreadable line, or nothing compared fails (for CI).
    #[arg(long)]
    pub fail_on_diff: bool,
}

/// Flags of `v1compat report`.
// The field docs are `--help` text, where `[shadow]` is the configuration
// section, not a link.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Clone, clap::Args)]
pub struct ReportArgs {
    /// Capture file (JSONL).
    pub file: PathBuf,
    /// Configuration whose [shadow] section gives ignore rules, unordered paths and baseline
    /// thresholds, and whose [compat] section (the translation's) tells which differences its
    /// settings explain.
    #[arg(long, short, env = "V1COMPAT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Write the HTML report here.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// Exit 1 unless the verdict is a pass: a difference, a request a side
    /// did not answer, an unreadable line, or nothing compared fails (for CI).
    #[arg(long)]
    pub fail_on_diff: bool,
}

/// Prints the report of `args.file`, writes its HTML if asked. Returns
/// whether the command should fail: `--fail-on-diff` and anything but a
/// clean verdict (differences, failed requests, unreadable lines, or
/// nothing compared).
pub fn report(args: &ReportArgs, cfg: &Config) -> Result<bool, String> {
    let shadow = &cfg.shadow;
    // The translation's [compat] settings tell which differences they explain.
    let report = Report::new(
        &args.file.display().to_string(),
        shadow.rules.clone(),
        shadow.thresholds,
    )
    .with_compat(cfg.compat.clone())
    .read(&args.file)
    .map_err(|e| format!("{}: {e}", args.file.display()))?;
    print!("{}", report.text());
    if let Some(out) = &args.html {
        std::fs::write(out, report.html()).map_err(|e| format!("{}: {e}", out.display()))?;
        println!("\nHTML report: {}", out.display());
    }
    Ok(args.fail_on_diff && !report.verdict().passes())
}

/// Replays, then prints the report of what it captured. Returns whether
/// the command should fail, like [`report`].
pub async fn replay_command(args: ReplayArgs, mut cfg: Config) -> Result<bool, String> {
    let translated = match (&args.gateway, &args.upstream) {
        (Some(url), _) => TranslatedSide::Gateway(url.clone()),
        (None, Some(url)) => {
            cfg.upstream.base_url = url.clone();
            let upstream = Arc::new(HttpUpstream::new(cfg.upstream.clone())?);
            TranslatedSide::InProcess(Arc::new(Pipeline::new(Arc::new(cfg.gateway(upstream)))))
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
        proxy: cfg.upstream.proxy.clone(),
    };
    let stats = replay(opts).await?;
    println!(
        "replayed {} of {} lines ({} failed, {} skipped) → {}\n",
        stats.sent,
        stats.lines,
        stats.failed,
        stats.skipped,
        args.out.display()
    );
    report(
        &ReportArgs {
            file: args.out,
            config: args.config,
            html: args.html,
            fail_on_diff: args.fail_on_diff,
        },
        &cfg,
    )
}
