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
    /// Shared so a reload that leaves `[workers]` alone keeps the cache.
    pub worker_ids: Arc<worker_ids::WorkerIds>,
}

impl Gateway {
    pub fn new(upstream: Arc<dyn Upstream>, config: Arc<Config>) -> Gateway {
        let worker_ids = Arc::new(worker_ids::WorkerIds::new(&config.workers));
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
    /// For a V1 public operation sent with the client's own key: the service
    /// key, to retry with when V2 refuses the client's key. V1 never looked at a
    /// key on these operations, so a stale one must not turn them into 401s.
    fallback_key: Option<ApiKey>,
    v2_ids: Mutex<Vec<String>>,
    /// Outside the exchange, so the count survives an error or a deadline.
    calls: &'a AtomicU32,
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
    /// sent none) on code 0, a [`GatewayError`] otherwise. On a V1 public
    /// operation a 401 for the client's key is retried once with the service key.
    pub async fn call(&self, call: V2Call, subject: Subject) -> Result<Value, GatewayError> {
        let retry = match (&self.fallback_key, &call.key) {
            (Some(fallback), Some(used)) if fallback != used => {
                Some(call.clone().with_key(Some(fallback.clone())))
            }
            _ => None,
        };
        match (self.call_once(call, subject).await, retry) {
            (Err(GatewayError::Refused { status, .. }), Some(retry))
                if status == http::StatusCode::UNAUTHORIZED =>
            {
                self.call_once(retry, subject).await
            }
            (result, _) => result,
        }
    }

    async fn call_once(&self, call: V2Call, subject: Subject) -> Result<Value, GatewayError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let reply = self.gw.upstream.call(call, self.request_id).await?;
        let envelope: Envelope = serde_json::from_slice(&reply.body).map_err(|e| {
            GatewayError::Garbled(format!(
                "HTTP {} with a body that is not a V2 envelope ({e})",
                reply.status.as_u16()
            ))
        })?;
        // Only ids that are safe to put in a response header are kept.
        let v2_request_id = envelope
            .request_id
            .filter(|id| id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic()));
        if let (Some(id), Ok(mut ids)) = (&v2_request_id, self.v2_ids.lock()) {
            ids.push(id.clone());
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
                v2_request_id,
                // Rounded up, so a client never comes back too early.
                retry_after: reply
                    .retry_after
                    .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0)),
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
    handle_counting(gw, req, &AtomicU32::new(0)).await
}

/// [`handle`], counting the V2 calls made in `calls` as they are sent, so
/// that a failed or timed-out request can still say how many it made.
pub async fn handle_counting(
    gw: &Gateway,
    req: V1Request,
    calls: &AtomicU32,
) -> Result<Answer, GatewayError> {
    let fallback_key = match &req.key {
        Some(_) if req.op.is_public() => gw.config.service_key.clone(),
        _ => None,
    };
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
        fallback_key,
        v2_ids: Mutex::new(Vec::new()),
        calls,
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
        upstream_calls: ex.calls.load(Ordering::Relaxed),
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

/// Moves the items of a V2 list field out of `data` (an empty list if absent).
pub(crate) fn take_list(data: &mut Value, field: &str) -> Vec<Value> {
    match data.get_mut(field) {
        Some(Value::Array(items)) => std::mem::take(items),
        _ => Vec::new(),
    }
}

/// The items of a V2 list field, or an empty list if absent.
pub(crate) fn list_of<'v>(data: &'v Value, field: &str) -> &'v [Value] {
    data.get(field)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::{UpstreamFuture, V2Reply};
    use http::StatusCode;
    use serde_json::json;

    /// Answers 401 to any key but `svc-key`, and records the keys it saw.
    #[derive(Default)]
    struct KeyCheckingV2 {
        seen: Mutex<Vec<(String, Option<String>)>>,
    }

    impl Upstream for KeyCheckingV2 {
        fn call(&self, call: V2Call, _request_id: &str) -> UpstreamFuture<'_> {
            let key = call.key.as_ref().map(|k| k.expose().to_owned());
            self.seen
                .lock()
                .unwrap()
                .push((call.path.path_and_query(), key.clone()));
            let (status, body) = match key.as_deref() {
                Some("svc-key") | None => (
                    StatusCode::OK,
                    json!({"code": 0, "message": "success", "data": {"version": "v1.0.0"}}),
                ),
                Some(_) => (
                    StatusCode::UNAUTHORIZED,
                    json!({"code": 12002, "message": "invalid token"}),
                ),
            };
            Box::pin(async move {
                Ok(V2Reply {
                    status,
                    body: Bytes::from(body.to_string()),
                    attempts: 1,
                    retry_after: None,
                })
            })
        }
    }

    async fn run(
        op: Operation,
        query: &str,
        key: &str,
        config: &str,
    ) -> (Result<Answer, GatewayError>, Vec<(String, Option<String>)>) {
        let v2 = Arc::new(KeyCheckingV2::default());
        let config = crate::config::load(config, Vec::new()).unwrap();
        let gw = Gateway::new(v2.clone(), Arc::new(config));
        let req = V1Request {
            op,
            query: Some(query.to_owned()),
            body: Bytes::new(),
            key: ApiKey::new(key),
            request_id: "t".into(),
        };
        let result = handle(&gw, req).await;
        let seen = v2.seen.lock().unwrap().clone();
        (result, seen)
    }

    #[tokio::test]
    async fn public_operation_retries_a_refused_client_key_with_the_service_key() {
        let (result, seen) = run(
            Operation::WorkerDetail,
            "slug=w1",
            "stale-key",
            "[upstream]\nservice_key = \"svc-key\"\n",
        )
        .await;
        assert!(result.is_ok(), "{:?}", result.err());
        let detail: Vec<_> = seen
            .iter()
            .filter(|(p, _)| p == "/api/v2/workers/w1")
            .collect();
        assert_eq!(
            detail.iter().map(|(_, k)| k.as_deref()).collect::<Vec<_>>(),
            vec![Some("stale-key"), Some("svc-key")]
        );
    }

    #[tokio::test]
    async fn without_a_service_key_the_refusal_stands_and_keyed_operations_never_retry() {
        let (result, _) = run(Operation::WorkerDetail, "slug=w1", "stale-key", "").await;
        assert_eq!(result.err().unwrap().render().envelope.code, 20001);
        let (result, seen) = run(
            Operation::AccountInfo,
            "",
            "stale-key",
            "[upstream]\nservice_key = \"svc-key\"\n",
        )
        .await;
        assert_eq!(result.err().unwrap().render().envelope.code, 20001);
        assert_eq!(seen.len(), 1);
    }
}
