//! What the edge reads of the configuration, in the edge's own types: the
//! listeners' connection settings, fixed at start ([`Settings`]), and what
//! the admin listener reads per request and per reachability check
//! ([`AdminSettings`], in a swap cell a reload stores into). The
//! configuration builds both; the edge names neither the configuration nor
//! the reload. What a V1 request reads per request (the body limit) is the
//! pipeline's snapshot's.

use std::time::Duration;

use crate::edge::conn::ConnSettings;
use crate::edge::server::operator::OperatorAccess;
use crate::inventory::InventoryConfig;

/// The listeners' connection settings: read once, when a listener starts
/// (`[connections]` and `[shutdown]` need a restart to change).
#[derive(Debug, Clone)]
pub struct Settings {
    pub connections: ConnSettings,
    /// `shutdown.grace_period_secs`: how long a drain waits for the
    /// requests in flight.
    pub grace_period: Duration,
}

/// What the admin listener reads of the live configuration.
#[derive(Debug, Clone)]
pub struct AdminSettings {
    /// Who may use the operator endpoints (`[admin]`).
    pub operator: OperatorAccess,
    /// Where a connection to V2 goes first (the proxy in front of it, or
    /// V2 itself): what the reachability check connects to. `None`: the
    /// upstream URL has no host or port.
    pub upstream_first_hop: Option<(String, u16)>,
    /// `upstream.health_check_interval_ms`; `None` = off.
    pub health_check_interval: Option<Duration>,
    /// `[inventory]`: how `/inventory` names and ages the clients.
    pub inventory: InventoryConfig,
}

/// The admin listener's settings as configured now; a reload stores the
/// next ones.
pub type LiveAdmin = crate::common::live::Live<AdminSettings>;
