//! What the translation reads of the configuration, and nothing else: the
//! `[compat]` choices, the limits an operation applies, the service key, the
//! synchronous-run wait and the worker-id table. The configuration builds
//! one [`Settings`] per configuration snapshot (`pipeline::Gateway`), and a
//! reload swaps it with the rest of the snapshot; the operations never see
//! the application's configuration itself.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::upstream::ApiKey;

/// The settings one configuration snapshot gives the operations.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The V1↔V2 choices of `[compat]`.
    pub compat: Compat,
    /// `upstream.service_key`: the key for V1 operations that needed none.
    pub service_key: Option<ApiKey>,
    /// `upstream.sync_run_timeout_ms`: how long a synchronous run's V2 call
    /// may wait for the run.
    pub sync_run_timeout: Duration,
    /// `limits.max_page_size`: largest V1 `page_size` / store `limit` served.
    pub max_page_size: u64,
    /// `limits.fanout_concurrency`: V2 page calls in flight for one V1
    /// request.
    pub fanout_concurrency: usize,
    /// `[workers]`: the worker-id check and alias table.
    pub workers: WorkerIdSettings,
}

/// `[compat]` with its choices checked: where the spec and the public record
/// disagree, or V2 lacks what V1 had (each choice is a difference in
/// `COMPATIBILITY.md`). Its defaults are the configuration's
/// (`config::schema::CompatSection`).
#[derive(Debug, Clone)]
pub struct Compat {
    pub memory_field: &'static str,
    pub account_traffic: i64,
    pub traffic_expiration_from_balance: bool,
    pub aborted_status: i64,
    pub unknown_status: i64,
    pub extra_export_formats: bool,
    pub origin_rename: BTreeMap<String, String>,
    /// The V1 dialect choices (see [`v1compat_contract::dialect`]).
    pub dialect: v1compat_contract::dialect::Dialect,
}

/// `[workers]`: how V1 worker ids are checked and mapped
/// ([`WorkerIds`](super::worker_ids::WorkerIds)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerIdSettings {
    /// Check an unseen worker id against V2 before starting a run with it.
    pub verify: bool,
    pub positive_ttl: Duration,
    pub negative_ttl: Duration,
    pub cache_capacity: usize,
    /// Old V1 `scraper_slug` → V2 `workerId`, for ids V2 no longer knows.
    pub aliases: BTreeMap<String, String>,
}
