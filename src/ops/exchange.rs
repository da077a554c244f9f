//! One V1 request's conversation with V2: every upstream call an operation
//! makes goes through [`Exchange::fetch`] (or [`Exchange::call`]), which picks
//! the key, reads the V2 envelope into data or a [`GatewayError`] (typed by
//! the JSON kernel's reader of its kind, [`Exchange::read_with`], or as a
//! `Value`), and records V2 request ids and the call count for the
//! diagnostics headers.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use futures_util::future::Either;
use serde::Deserialize;
use serde_json::Value;

use super::input::Ident;
use super::{Settings, Translator};
use crate::common::request_id::RequestId;
use crate::differences::{self, Applied, Difference};
use crate::error::{GatewayError, Subject};
use crate::upstream::{ApiKey, V2Call};
use crate::v2::Segment;
use v1compat_json::escape::Texts;
use v1compat_json::read::{self, Typed};
use v1compat_json::v2::Envelope;

/// One V1 request's conversation with V2: the key to use, the request id to
/// propagate, and a record of V2 request ids and call counts.
pub struct Exchange<'a> {
    pub translator: &'a Translator,
    pub request_id: &'a RequestId,
    key: Option<ApiKey>,
    /// For a V1 public operation sent with the client's own key: the service
    /// key, to retry with when V2 refuses the client's key. V1 never looked at a
    /// key on these operations, so a stale one must not turn them into 401s.
    fallback_key: Option<ApiKey>,
    /// V2's request ids, as the diagnostics header carries them: in order,
    /// joined by `, `.
    v2_ids: Mutex<String>,
    /// Outside the exchange, so the count survives an error or a deadline.
    calls: &'a AtomicU32,
    /// The differences this request's answer relies on, marked where each
    /// is decided (outside too, so an error's are kept as well).
    applied: &'a Applied,
}

impl<'a> Exchange<'a> {
    /// A conversation for one request: `key` for calls that need one,
    /// `fallback_key` to retry a refused client key with (V1 public
    /// operations only), `calls` counting every V2 call sent, `applied`
    /// collecting the differences the answer relies on.
    pub(super) fn new(
        translator: &'a Translator,
        request_id: &'a RequestId,
        key: Option<ApiKey>,
        fallback_key: Option<ApiKey>,
        calls: &'a AtomicU32,
        applied: &'a Applied,
    ) -> Exchange<'a> {
        Exchange {
            translator,
            request_id,
            key,
            fallback_key,
            v2_ids: Mutex::new(String::new()),
            calls,
            applied,
        }
    }

    /// Marks `difference` as one this request's answer relies on.
    pub fn applied(&self, difference: &Difference) {
        self.applied.note(difference);
    }

    /// The segment `ident` names, or the not-found error the gateway
    /// answers without asking V2 (and so without V2 checking the key:
    /// `unknown_id_before_key`).
    pub fn known<'i>(&self, ident: &'i Ident) -> Result<&'i Segment, GatewayError> {
        ident
            .known()
            .inspect_err(|_| self.applied(&differences::UNKNOWN_ID_BEFORE_KEY))
    }

    /// A client's worker id ([`WorkerIds::translate`](super::worker_ids::WorkerIds::translate)),
    /// marking `lenient_input` when blanks around it are trimmed or it is
    /// written in V2's `owner~name` form.
    pub fn worker(&self, raw: &str) -> Ident {
        if raw.len() != raw.trim().len() || raw.contains('~') {
            self.applied(&differences::LENIENT_INPUT);
        }
        self.translator.worker_ids.translate(raw)
    }

    /// The callback URL V2 gets for a V1 client's `callback_url`
    /// ([`Translator::v2_callback_url`]), marking `run_callbacks` when the
    /// relay takes it and `callback_url_checks` when it refuses it.
    pub fn v2_callback_url(
        &self,
        key: Option<&ApiKey>,
        client_url: Option<String>,
    ) -> Result<Option<String>, GatewayError> {
        let relayed = client_url.is_some() && self.translator.callbacks.is_some();
        let url = self
            .translator
            .v2_callback_url(key, client_url)
            .inspect_err(|_| self.applied(&differences::CALLBACK_URL_CHECKS))?;
        if relayed {
            self.applied(&differences::RUN_CALLBACKS);
        }
        Ok(url)
    }

    /// Where the request's differences are marked, for a mapping that
    /// decides one away from the exchange.
    pub fn differences(&self) -> &'a Applied {
        self.applied
    }

    /// The translation settings of the configuration this request started
    /// with.
    pub fn settings(&self) -> &'a Settings {
        &self.translator.settings
    }

    /// The V2 request ids seen, in order, joined by `, ` (empty if none).
    pub(super) fn finish(self) -> String {
        self.v2_ids.into_inner().unwrap_or_default()
    }

    /// The key for a V2 call that needs one: the client's, or for V1 public
    /// operations the configured service key. Without either, the client
    /// hears that a key is required, in V1's words, and nothing about the
    /// gateway's configuration (not its business); the operator was warned
    /// at start that keyless requests cannot be served.
    pub fn key(&self) -> Result<ApiKey, GatewayError> {
        self.key.clone().ok_or_else(|| {
            GatewayError::Unauthorized(
                "an API key is required for this request: send it in the api-key header".into(),
            )
        })
    }

    /// Sends one call and reads the V2 envelope: `Ok(data)` (Null when V2
    /// sent none) on code 0, a [`GatewayError`] otherwise. On a V1 public
    /// operation a 401 for the client's key is retried once with the service key.
    pub async fn call(&self, call: V2Call, subject: Subject) -> Result<Value, GatewayError> {
        let fetched = self.fetch(call, subject).await?;
        self.envelope_data(&fetched, subject)
    }

    /// Sends one call and returns V2's successful answer unread (see
    /// [`Exchange::read`]); a non-2xx answer is read here, into its error.
    /// On a V1 public operation a 401 for the client's key is retried once
    /// with the service key.
    ///
    /// The future is the call's own, or (when a retry with the service key
    /// may follow) one on the heap: the retry's copy of the call is then not
    /// room in every call's future, which each operation's future carries.
    pub fn fetch(
        &self,
        call: V2Call,
        subject: Subject,
    ) -> impl Future<Output = Result<Fetched, GatewayError>> + Send + '_ {
        let fallback = match (&self.fallback_key, &call.key) {
            (Some(fallback), Some(used)) if fallback != used => Some(fallback.clone()),
            _ => None,
        };
        match fallback {
            None => Either::Left(self.fetch_once(call, subject)),
            Some(fallback) => Either::Right(Box::pin(self.fetch_or_retry(call, fallback, subject))),
        }
    }

    /// [`Exchange::fetch`] with `fallback` to retry a refused key with.
    async fn fetch_or_retry(
        &self,
        call: V2Call,
        fallback: ApiKey,
        subject: Subject,
    ) -> Result<Fetched, GatewayError> {
        let retry = call.clone().with_key(Some(fallback));
        match self.fetch_once(call, subject).await {
            Err(GatewayError::Refused { status, .. })
                if status == http::StatusCode::UNAUTHORIZED =>
            {
                self.fetch_once(retry, subject).await
            }
            result => result,
        }
    }

    /// One call, counted and handed to the upstream now: the future holds
    /// the answer's future, not the call.
    fn fetch_once(
        &self,
        call: V2Call,
        subject: Subject,
    ) -> impl Future<Output = Result<Fetched, GatewayError>> + Send + '_ {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let reply = self.translator.upstream.call(call, self.request_id);
        async move {
            let reply = reply.await?;
            let fetched = Fetched {
                status: reply.status,
                retry_after: reply.retry_after,
                body: reply.body,
            };
            if fetched.status.is_success() {
                Ok(fetched)
            } else {
                // Never a success: only code 0 with a 2xx status is one.
                self.envelope_data(&fetched, subject)
                    .and(Err(GatewayError::Garbled(
                        "V2 answered an error status with a success envelope".into(),
                    )))
            }
        }
    }

    /// Reads a V2 answer's envelope, its `data` typed as `T` (see
    /// [`wire`](super::wire)) without an intermediate `Value` tree. Data of a
    /// shape `T` does not read comes back as a `Value` for the general
    /// mapping, so both paths give the same answer.
    pub fn read<'f, T: Deserialize<'f>>(
        &self,
        fetched: &'f Fetched,
        subject: Subject,
    ) -> Result<Read<T>, GatewayError> {
        self.read_with(fetched, subject, read::typed)
            .map(|(read, _)| read)
    }

    /// Reads a V2 answer with `reader`, the JSON kernel's entry point for
    /// its kind (`read::run`, `read::run_page`, `read::result_page`, or
    /// `read::typed` for any other), which reads it in one pass where it can
    /// and by serde's typed reading otherwise: a success is its typed `data`,
    /// with what is known of its texts. Anything else (an error, an answer
    /// the reader declines) is read in full (details and all) by the general
    /// reading, so the answer never depends on which reading it took.
    pub fn read_with<'f, T>(
        &self,
        fetched: &'f Fetched,
        subject: Subject,
        reader: impl FnOnce(&'f [u8]) -> Option<Typed<'f, T>>,
    ) -> Result<(Read<T>, Texts), GatewayError> {
        match reader(&fetched.body) {
            Some(typed) if typed.code == Some(0) && fetched.status.is_success() => {
                self.record_request_id(typed.request_id.as_deref());
                Ok((Read::Typed(typed.data), typed.texts))
            }
            _ => self
                .envelope_data(fetched, subject)
                .map(|data| (Read::Untyped(data), Texts::UNCHECKED)),
        }
    }

    /// The general reading of a V2 answer: its `data` as a `Value` (Null
    /// when V2 sent none) on code 0, a [`GatewayError`] otherwise.
    pub(super) fn envelope_data(
        &self,
        fetched: &Fetched,
        subject: Subject,
    ) -> Result<Value, GatewayError> {
        let envelope: Envelope = serde_json::from_slice(&fetched.body).map_err(|e| {
            GatewayError::Garbled(format!(
                "HTTP {} with a body that is not a V2 envelope ({e})",
                fetched.status.as_u16()
            ))
        })?;
        let v2_request_id = self
            .record_request_id(envelope.request_id.as_deref())
            .map(str::to_owned);
        match envelope.code {
            Some(0) if fetched.status.is_success() => Ok(envelope.data.unwrap_or(Value::Null)),
            None if fetched.status.is_success() => {
                Err(GatewayError::Garbled("V2 envelope without a code".into()))
            }
            code => Err(GatewayError::Refused {
                subject,
                status: fetched.status,
                code,
                message: self.redact(envelope.message.unwrap_or_default()),
                details: crate::error::details_of(envelope.details.as_ref())
                    .into_iter()
                    .map(|detail| self.redact(detail))
                    .collect(),
                v2_request_id,
                // Rounded up, so a client never comes back too early.
                retry_after: fetched
                    .retry_after
                    .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0)),
            }),
        }
    }

    /// V2's text (an error's message or details) without the keys this
    /// request could have sent: a V2 that repeats the credential it refused
    /// ("Invalid API key sk_…") must not put it into the access line, the
    /// error log or the client's V1 message.
    fn redact(&self, text: String) -> String {
        let keys = [
            self.key.as_ref(),
            self.fallback_key.as_ref(),
            self.translator.settings.service_key.as_ref(),
        ];
        redact_keys(text, keys.into_iter().flatten())
    }

    /// Keeps V2's request id for the diagnostics header, if it is safe to put
    /// in one, and returns it.
    fn record_request_id<'i>(&self, request_id: Option<&'i str>) -> Option<&'i str> {
        // Every byte tested, without stopping at the first bad one: the
        // compiler makes it a few vector steps (an id is mostly fine).
        let id = request_id.filter(|id| {
            id.len() <= 128 && id.bytes().fold(true, |ok, b| ok & b.is_ascii_graphic())
        })?;
        if let Ok(mut ids) = self.v2_ids.lock() {
            if !ids.is_empty() {
                ids.push_str(", ");
            }
            ids.push_str(id);
        }
        Some(id)
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
        self.each_page(offsets, |o| self.call(make(o), subject))
            .await
    }

    /// [`Exchange::pages`], the answers left unread for [`Exchange::read`].
    pub async fn fetch_pages<F>(
        &self,
        offsets: impl Iterator<Item = u64>,
        subject: Subject,
        make: F,
    ) -> Result<Vec<Fetched>, GatewayError>
    where
        F: Fn(u64) -> V2Call,
    {
        self.each_page(offsets, |o| self.fetch(make(o), subject))
            .await
    }

    /// `page(offset)` for each offset, at most `limits.fanout_concurrency`
    /// at once, the results in order; the first failure wins.
    async fn each_page<T, P>(
        &self,
        mut offsets: impl Iterator<Item = u64>,
        page: impl Fn(u64) -> P,
    ) -> Result<Vec<T>, GatewayError>
    where
        P: Future<Output = Result<T, GatewayError>>,
    {
        use futures_util::stream::{self, StreamExt, TryStreamExt};
        // A window of one V2 page (up to 100 rows) is the usual one: called
        // as it is, without the machinery that runs several calls at once
        // (a task and a waker of its own for each, and a queue).
        if offsets.size_hint() == (1, Some(1)) {
            if let Some(offset) = offsets.next() {
                return Ok(vec![page(offset).await?]);
            }
        }
        let width = self.settings().fanout_concurrency.max(1);
        stream::iter(offsets.map(page))
            .buffered(width)
            .try_collect()
            .await
    }
}

/// A successful (2xx) V2 answer, received and counted, envelope unread.
pub struct Fetched {
    status: http::StatusCode,
    retry_after: Option<std::time::Duration>,
    body: bytes::Bytes,
}

impl Fetched {
    /// The answer's body, as V2 sent it (its own buffer, for parts of it
    /// to be shared).
    pub fn body(&self) -> &bytes::Bytes {
        &self.body
    }
}

/// What [`Exchange::read_with`] made of a V2 answer's `data`: typed (`None`
/// when V2 sent no data), or a `Value` when it did not have the expected
/// shape.
pub enum Read<T> {
    Typed(Option<T>),
    Untyped(Value),
}

/// Keys shorter than this are not looked for in V2's text: replacing every
/// occurrence of a two-letter test key would garble the message, and a key
/// that short protects nothing.
const MIN_REDACTED_KEY: usize = 4;

/// `text` with every occurrence of each of `keys` replaced by `<redacted>`.
fn redact_keys<'k>(mut text: String, keys: impl IntoIterator<Item = &'k ApiKey>) -> String {
    for key in keys {
        let key = key.expose();
        if key.len() >= MIN_REDACTED_KEY && text.contains(key) {
            text = text.replace(key, "<redacted>");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_in_v2_text_are_redacted() {
        let client = ApiKey::new("sk_live_KEYLEAK77").unwrap();
        let service = ApiKey::new("svc-key-1").unwrap();
        let keys = || [&client, &service];
        assert_eq!(
            redact_keys("Invalid API key Bearer sk_live_KEYLEAK77".into(), keys()),
            "Invalid API key Bearer <redacted>"
        );
        assert_eq!(
            redact_keys("svc-key-1 then sk_live_KEYLEAK77, svc-key-1".into(), keys()),
            "<redacted> then <redacted>, <redacted>"
        );
        assert_eq!(redact_keys("run not found".into(), keys()), "run not found");
        // A key too short to be one is left alone rather than garbling text.
        let short = ApiKey::new("ab").unwrap();
        assert_eq!(redact_keys("about a tab".into(), [&short]), "about a tab");
    }
}
