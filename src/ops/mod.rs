//! The operations: one module per V1 operation family, each holding the pure
//! request and response mappings side by side plus a thin async handler that
//! only calls [`Exchange`] and those mappings. [`handle`] dispatches a routed
//! V1 request to its handler.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde_json::Value;

use crate::config::Config;
use crate::error::{GatewayError, Subject};
use crate::route::Operation;
use crate::upstream::{ApiKey, Upstream, V2Call};
use crate::v2::Envelope;

pub mod account;
pub mod catalog;
pub mod input;
pub mod logs;
pub mod records;
pub mod results;
pub mod runs;
pub mod worker_ids;

/// What every request shares: the upstream, the configuration and the
/// worker-id cache.
pub struct Gateway {
    pub upstream: Arc<dyn Upstream>,
    pub config: Arc<Config>,
    pub worker_ids: worker_ids::WorkerIds,
}

impl Gateway {
    pub fn new(upstream: Arc<dyn Upstream>, config: Arc<Config>) -> Gateway {
        let worker_ids = worker_ids::WorkerIds::new(&config.workers);
        Gateway {
            upstream,
            config,
            worker_ids,
        }
    }
}

/// A routed V1 request, transport already stripped.
#[derive(Clone)]
pub struct V1Request {
    pub op: Operation,
    pub query: Option<String>,
    pub body: Bytes,
    /// The client's key (`api-key` or `Authorization: Bearer`), if any.
    pub key: Option<ApiKey>,
    pub request_id: String,
}

/// A successful V1 answer's `data`, plus what the transport reports.
pub struct Answer {
    pub data: Value,
    pub v2_request_ids: Vec<String>,
    pub upstream_calls: u32,
}

/// One V1 request's conversation with V2: the key to use, the request id to
/// propagate, and a record of V2 request ids and call counts.
pub struct Exchange<'a> {
    pub gw: &'a Gateway,
    pub request_id: &'a str,
    key: Option<ApiKey>,
    v2_ids: Mutex<Vec<String>>,
    calls: AtomicU32,
}

impl<'a> Exchange<'a> {
    /// The key for a V2 call that needs one: the client's, or for V1 public
    /// operations the configured service key.
    pub fn key(&self) -> Result<ApiKey, GatewayError> {
        self.key.clone().ok_or_else(|| {
            GatewayError::Unauthorized(
                "V2 needs a key for this operation: send the api-key header, or configure upstream.service_key (V1COMPAT_UPSTREAM__SERVICE_KEY)".into(),
            )
        })
    }

    /// Sends one call and reads the V2 envelope: `Ok(data)` (Null when V2
    /// sent none) on code 0, a [`GatewayError`] otherwise.
    pub async fn call(&self, call: V2Call, subject: Subject) -> Result<Value, GatewayError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let reply = self.gw.upstream.call(call, self.request_id).await?;
        let envelope: Envelope = serde_json::from_slice(&reply.body).map_err(|e| {
            GatewayError::Garbled(format!(
                "HTTP {} with a body that is not a V2 envelope ({e})",
                reply.status.as_u16()
            ))
        })?;
        if let Some(id) = envelope
            .request_id
            .filter(|id| id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic()))
        {
            if let Ok(mut ids) = self.v2_ids.lock() {
                ids.push(id);
            }
        }
        match envelope.code {
            Some(0) if reply.status.is_success() => Ok(envelope.data.unwrap_or(Value::Null)),
            None if reply.status.is_success() => {
                Err(GatewayError::Garbled("V2 envelope without a code".into()))
            }
            code => Err(GatewayError::Refused {
                subject,
                status: reply.status,
                code,
                message: envelope.message.unwrap_or_default(),
            }),
        }
    }

    /// Fetches V2 pages concurrently (bounded by `limits.fanout_concurrency`),
    /// keeping their order. The first failure wins.
    pub async fn pages<F>(
        &self,
        offsets: impl Iterator<Item = u64>,
        subject: Subject,
        make: F,
    ) -> Result<Vec<Value>, GatewayError>
    where
        F: Fn(u64) -> V2Call,
    {
        use futures_util::stream::{self, StreamExt, TryStreamExt};
        let width = self.gw.config.limits.fanout_concurrency.max(1);
        stream::iter(offsets.map(|o| self.call(make(o), subject)))
            .buffered(width)
            .try_collect()
            .await
    }
}

/// Runs one V1 operation.
pub async fn handle(gw: &Gateway, req: V1Request) -> Result<Answer, GatewayError> {
    let key = match req.key {
        Some(k) => Some(k),
        None if req.op.is_public() => gw.config.service_key.clone(),
        None => {
            return Err(GatewayError::Unauthorized(
                "send your key in the api-key header".into(),
            ))
        }
    };
    let ex = Exchange {
        gw,
        request_id: &req.request_id,
        key,
        v2_ids: Mutex::new(Vec::new()),
        calls: AtomicU32::new(0),
    };
    let query = input::Query::parse(req.query.as_deref());
    let body = || input::Body::parse(&req.body);
    let data = match req.op {
        Operation::StoreSearch => catalog::store_search(&ex, &query).await,
        Operation::WorkerDetail => catalog::worker_detail(&ex, &query).await,
        Operation::ProxyRegions => catalog::proxy_regions(&ex, &query).await,
        Operation::StartRun => runs::start_run(&ex, &body()?).await,
        Operation::StartTaskRun => runs::start_task_run(&ex, &body()?).await,
        Operation::Rerun => runs::rerun(&ex, &body()?).await,
        Operation::AbortRun => runs::abort(&ex, &body()?).await,
        Operation::RunDetail => records::run_detail(&ex, &body()?).await,
        Operation::RunList => records::run_list(&ex, &body()?).await,
        Operation::ResultList => results::result_list(&ex, &body()?).await,
        Operation::ResultExport => results::export(&ex, &body()?).await,
        Operation::RunLog => logs::run_log(&ex, &body()?).await,
        Operation::AccountInfo => account::account_info(&ex, &body()?).await,
    }?;
    Ok(Answer {
        data,
        v2_request_ids: ex.v2_ids.into_inner().unwrap_or_default(),
        upstream_calls: ex.calls.into_inner(),
    })
}

/// Reads an object field of V2 data as a string, accepting numbers too (V2
/// documents some amounts as strings but examples vary).
pub(crate) fn string_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Reads an integer field, accepting integral floats and numeric strings.
pub(crate) fn int_of(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// The items of a V2 list field, or an empty list if absent.
pub(crate) fn list_of<'v>(data: &'v Value, field: &str) -> &'v [Value] {
    data.get(field)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}
