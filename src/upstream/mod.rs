//! The V2 side of the request path: what an operation hands to the upstream
//! (a [`V2Call`]) and what comes back (a [`V2Reply`], or an
//! [`UpstreamFailure`] when nothing did), behind the [`Upstream`] trait so
//! operations run against the real pooled HTTPS client ([`HttpUpstream`]) or
//! a test double. The parts: `client` (the V2 client on the shared
//! [`crate::upstream::http_client`] plumbing: headers, deadlines, size cap,
//! the memory budget, upstream metrics), `pool` (its connections to V2 over
//! hyper's connection-level senders), `retry` (which failures are retried,
//! backoff, the retry budget), `proxy` (outbound proxies from the
//! environment), `v2::routes` (the `route` label values registered at
//! start).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};

use crate::common::request_id::RequestId;
use crate::v2::V2Path;

mod client;
pub(crate) mod http_client;
mod pool;
pub(crate) mod proxy;
mod retry;
pub use crate::v2::routes::V2_ROUTES;
pub use client::{AuthStyle, HttpUpstream, UpstreamSettings};
pub use proxy::ProxyEnv;
pub use retry::RetrySettings;

/// A key to present upstream. Kept opaque so it cannot end up in a `{:?}`.
/// Shared, not copied, by the calls of one request that present it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(Arc<str>);

impl ApiKey {
    /// Accepts a key only if it can travel in a header: visible ASCII, no
    /// spaces, bounded length.
    pub fn new(key: &str) -> Option<ApiKey> {
        let key = key.trim();
        let ok = !key.is_empty() && key.len() <= 512 && key.bytes().all(|b| b.is_ascii_graphic());
        ok.then(|| ApiKey(Arc::from(key)))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// One V2 call, fully described before it leaves: method, path with query,
/// optional JSON body and credential.
#[derive(Debug, Clone)]
pub struct V2Call {
    pub method: Method,
    pub path: V2Path,
    pub body: Option<serde_json::Value>,
    pub key: Option<ApiKey>,
    /// Whether the client may retry the call: calls that start, rerun or
    /// abort runs are sent once ([`RetryPolicy::Never`]); reads may be retried.
    pub retry: RetryPolicy,
    /// Per-attempt deadline override (synchronous runs wait up to 5 minutes).
    pub attempt_timeout: Option<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryPolicy {
    /// Idempotent read: retried on a refused or broken connection, 429 and
    /// 5xx, within the retry budget; never after an attempt timed out.
    SafeToRetry,
    /// Has side effects upstream: sent exactly once.
    Never,
}

impl V2Call {
    pub fn get(path: V2Path) -> V2Call {
        V2Call {
            method: Method::GET,
            path,
            body: None,
            key: None,
            retry: RetryPolicy::SafeToRetry,
            attempt_timeout: None,
        }
    }

    pub fn post(path: V2Path, body: Option<serde_json::Value>) -> V2Call {
        V2Call {
            method: Method::POST,
            path,
            body,
            key: None,
            retry: RetryPolicy::Never,
            attempt_timeout: None,
        }
    }

    pub fn with_key(mut self, key: Option<ApiKey>) -> V2Call {
        self.key = key;
        self
    }

    pub fn with_attempt_timeout(mut self, timeout: Duration) -> V2Call {
        self.attempt_timeout = Some(timeout);
        self
    }
}

/// What V2 answered, before any interpretation.
#[derive(Debug, Clone)]
pub struct V2Reply {
    pub status: StatusCode,
    pub body: Bytes,
    /// Number of attempts it took (1 when not retried).
    pub attempts: u32,
    /// V2's `Retry-After`, when it sent one.
    pub retry_after: Option<Duration>,
}

/// Why no answer came back from V2 at all.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamFailure {
    #[error("upstream unreachable: {0}")]
    Unreachable(String),
    #[error("upstream did not answer within {0:?}")]
    Timeout(Duration),
    #[error("upstream connection failed mid-answer: {0}")]
    Broken(String),
    #[error("upstream answer larger than {0} bytes")]
    TooLarge(usize),
    /// The answer of a call that may be refused (a read) did not fit in
    /// the process's memory budget of this many bytes: nothing of it is
    /// kept, and V2 did nothing the client cannot ask for again.
    #[error("no room in the memory budget of {0} bytes for the upstream answer")]
    OverBudget(usize),
}

impl UpstreamFailure {
    /// Short stable name: the `x-v1compat-error` cause header, the error
    /// metrics and the upstream log lines.
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamFailure::Unreachable(_) => "unreachable",
            UpstreamFailure::Timeout(_) => "timeout",
            UpstreamFailure::Broken(_) => "broken",
            UpstreamFailure::TooLarge(_) => "too_large",
            // The name the edge's own refusal at the budget carries.
            UpstreamFailure::OverBudget(_) => "memory_budget",
        }
    }
}

pub type UpstreamFuture<'a> =
    Pin<Box<dyn Future<Output = Result<V2Reply, UpstreamFailure>> + Send + 'a>>;

/// The one way operations reach V2.
pub trait Upstream: Send + Sync + 'static {
    fn call(&self, call: V2Call, request_id: &RequestId) -> UpstreamFuture<'_>;
}
