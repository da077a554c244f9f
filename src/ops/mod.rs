//! The operations: one module per V1 operation family, each holding the pure
//! request and response mappings side by side plus a thin async handler that
//! only calls [`Exchange`] (one request's V2 conversation, in `exchange.rs`)
//! and those mappings. V2's answers are read, and V1's large answers
//! written, by the JSON kernel (`v1compat_json`): its entry points, one per
//! answer kind, through [`Exchange::read_with`]. [`handle`]
//! dispatches a routed V1 request to its handler. The operations read only
//! their own [`Settings`] (built from the configuration by the gateway), never
//! the application's configuration.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::common::request_id::RequestId;
use crate::differences::{self, Applied};
use crate::error::GatewayError;
use crate::upstream::{ApiKey, Upstream};
use crate::v1::route::Operation;
use crate::v1::Json;

mod exchange;
mod settings;

pub use exchange::{Exchange, Fetched, Read};
pub use settings::{Compat, Settings, WorkerIdSettings};
// The kernel's lenient readers, as the operations name them.
pub(crate) use v1compat_json::value::{int_of, list_of, string_of};
pub(crate) use v1compat_json::wire;

pub(crate) mod account;
pub(crate) mod catalog;
pub mod input;
pub mod logs;
pub mod results;
pub(crate) mod run_actions;
pub mod run_records;
pub(crate) mod worker_ids;

/// What the operations of one configuration snapshot share: the V2 client,
/// the translation settings, the worker-id cache and the callback relay.
#[derive(Clone)]
pub struct Translator {
    pub upstream: Arc<dyn Upstream>,
    pub settings: Settings,
    /// Shared so a reload that leaves `[workers]` alone keeps the cache.
    pub worker_ids: Arc<worker_ids::WorkerIds>,
    /// The callback relay's URL maker, when `[callbacks]` is in relay mode.
    pub callbacks: Option<Arc<dyn CallbackUrls>>,
}

/// What the run operations need of the callback relay: the URL V2 gets in
/// place of a V1 client's `callback_url`. Defined here and implemented by
/// the relay, so the operations never see the relay itself.
pub trait CallbackUrls: Send + Sync {
    /// The URL V2 calls back instead of `client_url` (checked and sealed,
    /// with the client's key when the relay may use it), or the V1 error
    /// for a URL the relay refuses.
    fn v2_callback_url(
        &self,
        client_url: &str,
        key: Option<&ApiKey>,
    ) -> Result<String, GatewayError>;
}

impl Translator {
    pub fn new(upstream: Arc<dyn Upstream>, settings: Settings) -> Translator {
        let worker_ids = Arc::new(worker_ids::WorkerIds::new(&settings.workers));
        Translator {
            upstream,
            settings,
            worker_ids,
            callbacks: None,
        }
    }

    /// The callback URL V2 gets for a V1 client's `callback_url` (relay mode:
    /// the gateway's sealed one; passthrough: the client's own).
    pub fn v2_callback_url(
        &self,
        key: Option<&ApiKey>,
        client_url: Option<String>,
    ) -> Result<Option<String>, GatewayError> {
        match (&self.callbacks, client_url) {
            (Some(relay), Some(url)) => relay.v2_callback_url(&url, key).map(Some),
            (_, url) => Ok(url),
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
    pub request_id: RequestId,
}

/// A successfully translated request: the V1 `data` (JSON, written once by
/// the operation), plus what the pipeline reports in diagnostic headers.
/// (The whole V1 answer, envelope and headers, is
/// [`crate::pipeline::V1Response`].)
pub struct Translated {
    pub data: Json,
    /// V2's request ids, in order, joined by `, ` (empty if none).
    pub v2_request_ids: String,
    pub upstream_calls: u32,
}

/// Runs one V1 operation.
pub async fn handle(tr: &Translator, req: V1Request) -> Result<Translated, GatewayError> {
    handle_counting(tr, req, &AtomicU32::new(0), &Applied::new()).await
}

/// [`handle`], counting the V2 calls made in `calls` as they are sent, so
/// that a failed or timed-out request can still say how many it made, and
/// marking in `applied` the differences its answer relies on.
pub async fn handle_counting(
    tr: &Translator,
    req: V1Request,
    calls: &AtomicU32,
    applied: &Applied,
) -> Result<Translated, GatewayError> {
    let fallback_key = match &req.key {
        Some(_) if req.op.is_public() => tr.settings.service_key.clone(),
        _ => None,
    };
    let key = match req.key {
        Some(k) => Some(k),
        None if req.op.is_public() => {
            applied.note(&differences::PUBLIC_CATALOG_KEY);
            tr.settings.service_key.clone()
        }
        None => {
            applied.note(&differences::MISSING_KEY_STATUS);
            return Err(GatewayError::MissingKey(
                "send your key in the api-key header".into(),
            ));
        }
    };
    let ex = Exchange::new(tr, &req.request_id, key, fallback_key, calls, applied);
    let query = input::Query::parse(req.query.as_deref()).noting(applied);
    let body = || input::Body::parse(&req.body).map(|b| b.noting(applied));
    // Each operation's future is boxed on its own: awaited in place, the
    // largest of them (a fan-out) would set the size of every request's
    // future, and that size is copied each time the request future moves
    // (into the connection's task, through the front and the pipeline).
    let data = match req.op {
        Operation::StoreSearch => boxed(catalog::store_search(&ex, &query)).await?,
        Operation::WorkerDetail => raw_json(&boxed(catalog::worker_detail(&ex, &query)).await?)?,
        Operation::ProxyRegions => raw_json(&boxed(catalog::proxy_regions(&ex, &query)).await?)?,
        Operation::StartRun => raw_json(&boxed(run_actions::start_run(&ex, &body()?)).await?)?,
        Operation::StartTaskRun => {
            raw_json(&boxed(run_actions::start_task_run(&ex, &body()?)).await?)?
        }
        Operation::Rerun => raw_json(&boxed(run_actions::rerun(&ex, &body()?)).await?)?,
        Operation::AbortRun => raw_json(&boxed(run_actions::abort(&ex, &body()?)).await?)?,
        Operation::RunDetail => boxed(run_records::run_detail(&ex, &body()?)).await?,
        Operation::RunList => boxed(run_records::run_list(&ex, &body()?)).await?,
        Operation::ResultList => boxed(results::result_list(&ex, &body()?)).await?,
        Operation::ResultExport => raw_json(&boxed(results::export(&ex, &body()?)).await?)?,
        Operation::RunLog => boxed(logs::run_log(&ex, &body()?)).await?,
        Operation::AccountInfo => raw_json(&boxed(account::account_info(&ex, &body()?)).await?)?,
    };
    // The differences every answer of an operation relies on: decided by
    // the operation answering at all.
    for difference in answered_with(req.op) {
        applied.note(difference);
    }
    let v2_request_ids = ex.finish();
    let upstream_calls = calls.load(Ordering::Relaxed);
    Ok(Translated {
        data,
        v2_request_ids,
        upstream_calls,
    })
}

/// The differences in every successful answer of `op`: fields V2 no longer
/// has or shapes differently, whatever the request.
fn answered_with(op: Operation) -> &'static [differences::Difference] {
    use differences as d;
    match op {
        Operation::AccountInfo => &[d::ACCOUNT_TRAFFIC, d::TRAFFIC_EXPIRATION],
        Operation::RunList => &[d::RUN_LIST_MONTH],
        Operation::ResultList => &[d::RESULT_HEADER_FORMAT],
        Operation::RunLog => &[d::LOG_GROUP],
        Operation::WorkerDetail => &[d::WORKER_MEMORY_FIELD],
        _ => &[],
    }
}

/// An operation's future on the heap (see [`handle_counting`]).
fn boxed<F: std::future::Future>(fut: F) -> std::pin::Pin<Box<F>> {
    Box::pin(fut)
}

/// Writes a V1 `data` value as JSON, once; the envelope around it is added
/// without parsing it again.
pub fn raw_json<T: serde::Serialize + ?Sized>(data: &T) -> Result<Json, GatewayError> {
    sized_json(data, 256)
}

/// [`raw_json`] into a buffer of `capacity` bytes: a large answer is not
/// copied over and over as its buffer grows.
pub fn sized_json<T: serde::Serialize + ?Sized>(
    data: &T,
    capacity: usize,
) -> Result<Json, GatewayError> {
    Json::write(data, capacity)
        .map_err(|e| GatewayError::Internal(format!("answer not serialisable: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::{UpstreamFuture, V2Call, V2Reply};
    use http::StatusCode;
    use serde_json::json;
    use std::sync::Mutex;

    /// Answers 401 to any key but `svc-key`, and records the keys it saw.
    #[derive(Default)]
    struct KeyCheckingV2 {
        seen: Mutex<Vec<(String, Option<String>)>>,
    }

    impl Upstream for KeyCheckingV2 {
        fn call(&self, call: V2Call, _request_id: &RequestId) -> UpstreamFuture<'_> {
            let key = call.key.as_ref().map(|k| k.expose().to_owned());
            self.seen
                .lock()
                .unwrap()
                .push((call.path.path_and_query().to_owned(), key.clone()));
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
        service_key: Option<&str>,
    ) -> (
        Result<Translated, GatewayError>,
        Vec<(String, Option<String>)>,
    ) {
        let v2 = Arc::new(KeyCheckingV2::default());
        let settings = Settings {
            service_key: service_key.and_then(ApiKey::new),
            ..Settings::default()
        };
        let tr = Translator::new(v2.clone(), settings);
        let req = V1Request {
            op,
            query: Some(query.to_owned()),
            body: Bytes::new(),
            key: ApiKey::new(key),
            request_id: RequestId::from_static("t"),
        };
        let result = handle(&tr, req).await;
        let seen = v2.seen.lock().unwrap().clone();
        (result, seen)
    }

    #[tokio::test]
    async fn public_operation_retries_a_refused_client_key_with_the_service_key() {
        let (result, seen) = run(
            Operation::WorkerDetail,
            "slug=w1",
            "stale-key",
            Some("svc-key"),
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
        let (result, _) = run(Operation::WorkerDetail, "slug=w1", "stale-key", None).await;
        assert_eq!(result.err().unwrap().render().envelope.code, 20001);
        let (result, seen) = run(Operation::AccountInfo, "", "stale-key", Some("svc-key")).await;
        assert_eq!(result.err().unwrap().render().envelope.code, 20001);
        assert_eq!(seen.len(), 1);
    }
}
