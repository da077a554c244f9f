//! One V1 request's conversation with V2: every upstream call an operation
//! makes goes through [`Exchange::call`], which picks the key, reads the V2
//! envelope into data or a [`GatewayError`], and records V2 request ids and
//! the call count for the diagnostics headers.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use serde_json::Value;

use super::Gateway;
use crate::error::{GatewayError, Subject};
use crate::upstream::{ApiKey, V2Call};
use crate::v2::Envelope;

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
    /// A conversation for one request: `key` for calls that need one,
    /// `fallback_key` to retry a refused client key with (V1 public
    /// operations only), `calls` counting every V2 call sent.
    pub(super) fn new(
        gw: &'a Gateway,
        request_id: &'a str,
        key: Option<ApiKey>,
        fallback_key: Option<ApiKey>,
        calls: &'a AtomicU32,
    ) -> Exchange<'a> {
        Exchange {
            gw,
            request_id,
            key,
            fallback_key,
            v2_ids: Mutex::new(Vec::new()),
            calls,
        }
    }

    /// The V2 request ids seen, in order.
    pub(super) fn finish(self) -> Vec<String> {
        self.v2_ids.into_inner().unwrap_or_default()
    }

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
                details: crate::error::details_of(envelope.details.as_ref()),
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
