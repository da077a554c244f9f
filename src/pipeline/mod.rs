//! The request pipeline: one raw V1 request in, one V1 answer out. Everything
//! that turns what a client sent into what it gets back happens here, once:
//!
//! ```text
//! RawV1Request ─▶ admit      route (unknown → 404), key header,
//!                            body (size, deadline; any Content-Type), in-flight slot
//!              ─▶ translate  per-operation deadline ─▶ ops::handle
//!              ─▶ finish     V1 envelope (in the `[compat]` V1 dialect) +
//!                            diagnostic headers, request metrics
//!              ═▶ V1Response
//! ```
//!
//! The public listener (`server`) only moves bytes between HTTP and this
//! module; the live shadow mirror wraps [`Pipeline::admit`] and
//! [`Pipeline::translate`] from outside; in-process `replay` and the tests
//! call [`Pipeline::answer`], so every path answers byte for byte alike.
//!
//! V1↔V2 differences here (see `COMPATIBILITY.md`):
//! [`body_content_type`](crate::differences::BODY_CONTENT_TYPE).

use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

mod access;
pub(crate) mod caller;
mod gateway;
pub use access::TARGET as ACCESS_LOG_TARGET;
pub use caller::Caller;
pub use gateway::{Gateway, Live, Settings};

use crate::common::request_id::RequestId;
use crate::differences::{self, Applied, AppliedSet};
use crate::error::{GatewayError, Rendered};
use crate::ops::{self, V1Request};
use crate::telemetry;
use crate::telemetry::handles::RequestMetrics;
use crate::upstream::ApiKey;
use crate::v1::answer::AnswerBytes;
use crate::v1::route::{self, Operation};
use v1compat_contract::dialect::Dialect;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
pub const V2_REQUEST_ID: HeaderName = HeaderName::from_static("x-v2-request-id");
pub const ERROR_ORIGIN: HeaderName = HeaderName::from_static("x-v1compat-error-origin");
pub const ERROR_CAUSE: HeaderName = HeaderName::from_static("x-v1compat-error");
pub const UPSTREAM_CALLS: HeaderName = HeaderName::from_static("x-v1compat-upstream-calls");
pub const API_KEY: HeaderName = HeaderName::from_static("api-key");

/// Why a body could not be handed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Longer than `limits.max_body_bytes`.
    TooLarge,
    /// The connection failed while the body was read.
    Unreadable(String),
    /// Not all of it arrived within `connections.body_read_timeout_ms`.
    Timeout(Duration),
    /// The memory budget had no room for it (`conn::budget`).
    OverBudget,
}

/// A V1 request as it came off the wire. The body is a future so that the
/// reader (the socket, in `server`) runs only once the request is routed and
/// its headers checked; in-process callers hand over ready bytes.
pub struct RawV1Request<B> {
    /// What the server's front settled before the request's span was made
    /// (its id and operation, already in that span); `None` when no front
    /// ran, and admission works both out itself and records them into the
    /// current span.
    pub settled: Option<Settled>,
    pub method: Method,
    /// `/api/v1/run/detail`, `/api/store`, … (no query).
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: B,
    /// The client's TCP address, without its port (`None` in process:
    /// replay, tests). Just the address: the pipeline's future holds it.
    pub peer: Option<std::net::IpAddr>,
}

/// A request's id and operation, as the server's front settled them.
pub struct Settled {
    /// The client's `x-request-id` if usable, else a new one.
    pub request_id: RequestId,
    /// `None`: no V1 operation has this method and path.
    pub op: Option<Operation>,
}

/// A body already in memory.
pub type ReadyBody = std::future::Ready<Result<Bytes, BodyError>>;

impl RawV1Request<ReadyBody> {
    /// A request whose body is already read (replay, tests).
    pub fn with_bytes(
        method: Method,
        path: impl Into<String>,
        query: Option<String>,
        headers: HeaderMap,
        body: Bytes,
    ) -> Self {
        RawV1Request {
            settled: None,
            method,
            path: path.into(),
            query,
            headers,
            body: std::future::ready(Ok(body)),
            peer: None,
        }
    }
}

/// The V1 answer: status, envelope bytes and headers (`content-type` and the
/// diagnostics `x-request-id`, `x-v2-request-id`, `x-v1compat-*`).
#[derive(Debug, Clone, PartialEq)]
pub struct V1Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: AnswerBytes,
}

/// Room for an answer's headers (its type and the diagnostics added to it),
/// so none of them grows a map made for it.
const ANSWER_HEADERS: usize = 6;

impl V1Response {
    /// A JSON answer with no diagnostics.
    pub fn json(status: StatusCode, body: impl Into<AnswerBytes>) -> V1Response {
        V1Response::json_in(HeaderMap::with_capacity(ANSWER_HEADERS), status, body)
    }

    /// [`V1Response::json`] in `room`, cleared: a map made before (the
    /// request's own), whose room is used again rather than made anew.
    fn json_in(
        mut room: HeaderMap,
        status: StatusCode,
        body: impl Into<AnswerBytes>,
    ) -> V1Response {
        room.clear();
        let mut headers = room;
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        V1Response {
            status,
            headers,
            body: body.into(),
        }
    }

    /// Whether the gateway rendered this error itself (rather than relaying
    /// or translating an answer).
    pub fn is_gateway_error(&self) -> bool {
        self.headers.contains_key(ERROR_ORIGIN)
    }
}

/// A request that passed admission: routed, in an in-flight slot, key and
/// body read. Dropping it (answered, the client hung up, or a panic
/// unwinding) frees the slot and the in-flight gauge.
pub struct Admitted {
    pub op: Operation,
    /// Shared with the operation, the answer (and a shadow copy) rather
    /// than copied.
    pub request_id: RequestId,
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
    /// Every header the client sent (keys marked sensitive by the server).
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The client's key (`api-key` or `Authorization: Bearer`), if any.
    pub key: Option<ApiKey>,
    /// The configuration (and V2 client) this request started with and
    /// finishes on, whatever a reload does meanwhile.
    pub gateway: Arc<Gateway>,
    started: Instant,
    /// Who sent it, and the body's length, for the access line.
    caller: Caller,
    bytes_in: usize,
    /// Differences decided at admission (the body's Content-Type).
    applied: AppliedSet,
    _in_flight: InFlight,
}

impl Admitted {
    /// The decoded request the operations take.
    pub fn v1_request(&self) -> V1Request {
        V1Request {
            op: self.op,
            query: self.query.clone(),
            body: self.body.clone(),
            key: self.key.clone(),
            request_id: self.request_id.clone(),
        }
    }

    /// [`Admitted::v1_request`] for the last use of the request's body and
    /// query: moved out rather than copied. The key is shared (an `Arc`):
    /// the answer is counted by it once the operation is done.
    fn take_v1_request(&mut self) -> V1Request {
        V1Request {
            op: self.op,
            query: self.query.take(),
            body: std::mem::take(&mut self.body),
            key: self.key.clone(),
            request_id: self.request_id.clone(),
        }
    }

    /// When the request arrived.
    pub fn started(&self) -> Instant {
        self.started
    }
}

/// One slot of `limits.max_in_flight` and one count in the
/// `v1compat_requests_in_flight` gauge, given back on drop so no exit path
/// (an early return, a cancelled future, a panic) can leak either.
struct InFlight {
    _permit: OwnedSemaphorePermit,
    gauge: metrics::Gauge,
}

impl InFlight {
    fn new(permit: OwnedSemaphorePermit, gauge: &metrics::Gauge) -> InFlight {
        gauge.increment(1.0);
        InFlight {
            _permit: permit,
            gauge: gauge.clone(),
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.gauge.decrement(1.0);
    }
}

/// The pipeline of one gateway: the operations (as the live configuration
/// has them now) and the in-flight limit (fixed at start).
pub struct Pipeline {
    live: Arc<Live>,
    in_flight: Arc<Semaphore>,
    max_in_flight: usize,
    /// Resolved at the first request (see `telemetry::handles`).
    metrics: OnceLock<RequestMetrics>,
}

impl Pipeline {
    pub fn new(gateway: Arc<Gateway>) -> Pipeline {
        Pipeline::live(Live::new(gateway))
    }

    /// A pipeline that follows reloads of `live`.
    pub fn live(live: Arc<Live>) -> Pipeline {
        let max_in_flight = live.load().settings.max_in_flight;
        Pipeline {
            live,
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            max_in_flight,
            metrics: OnceLock::new(),
        }
    }

    fn metrics(&self) -> &RequestMetrics {
        self.metrics.get_or_init(RequestMetrics::resolve)
    }

    /// The gateway as configured now.
    pub fn gateway(&self) -> Arc<Gateway> {
        self.live.load()
    }

    /// Requests admitted and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.max_in_flight - self.in_flight.available_permits()
    }

    /// The whole way through: admit, translate, render.
    pub fn answer<'a, B>(&'a self, req: RawV1Request<B>) -> impl Future<Output = V1Response> + 'a
    where
        B: Future<Output = Result<Bytes, BodyError>> + 'a,
    {
        Pipeline::answer_by(self, req)
    }

    /// [`Pipeline::answer`] through any handle on the pipeline: the server
    /// hands over an `Arc`, so that the future owns it. Not an `async fn`,
    /// which would hold the request twice (see [`Pipeline::admit`]).
    #[allow(clippy::manual_async_fn)]
    pub fn answer_by<P, B>(pipeline: P, req: RawV1Request<B>) -> impl Future<Output = V1Response>
    where
        P: std::ops::Deref<Target = Pipeline>,
        B: Future<Output = Result<Bytes, BodyError>>,
    {
        async move {
            // Not a `match` around the translation: the admission's result,
            // the size of a whole request, would be kept beside its future.
            let admitted = match pipeline.admit(req).await {
                Ok(admitted) => admitted,
                Err(refused) => return refused,
            };
            pipeline.translate(admitted).await
        }
    }

    /// Routing, the key header, the body and the
    /// in-flight limit, in that order; the first that fails is the answer. A
    /// request refused before its body is never read; the in-flight slot is
    /// taken last, so slow senders cannot hold the slots of others.
    ///
    /// The request is moved into the future once: an `async fn` would hold
    /// it twice (as its argument and as the body's local), in every request's
    /// future.
    #[allow(clippy::manual_async_fn)]
    pub fn admit<'a, B>(
        &'a self,
        req: RawV1Request<B>,
    ) -> impl Future<Output = Result<Admitted, V1Response>> + 'a
    where
        B: Future<Output = Result<Bytes, BodyError>> + 'a,
    {
        async move {
            let started = Instant::now();
            let gateway = self.live.load();
            // Through the server, the request's span was made with the id and
            // the operation already; anywhere else they are recorded into the
            // current span (if any) here.
            let span = req.settled.is_none().then(tracing::Span::current);
            let (settled_id, routed) = match req.settled {
                Some(settled) => (Some(settled.request_id), settled.op),
                None => (None, route::route(&req.method, &req.path)),
            };
            let request_id = settled_id
                .or_else(|| req.headers.get(&REQUEST_ID).and_then(RequestId::usable))
                .unwrap_or_else(RequestId::generate);
            if let Some(span) = &span {
                span.record("request_id", request_id.as_str());
            }
            let trusted = &gateway.settings.trusted_proxies;
            let caller = Caller::of(req.peer, &req.headers, &|ip| {
                trusted.iter().any(|c| c.contains(ip))
            });
            let mut cx = access::Context {
                method: &req.method,
                op: None,
                request_id: &request_id,
                started,
                every_request: gateway.settings.access_log,
                dialect: gateway.settings.dialect,
                caller: &caller,
                bytes_in: AtomicUsize::new(0),
            };
            let Some(op) = routed else {
                return Err(finish(
                    &cx,
                    Err(GatewayError::UnknownRoute),
                    0,
                    self.metrics(),
                    None,
                ));
            };
            if let Some(span) = &span {
                span.record("operation", op.name());
            }
            cx.op = Some(op);
            let refuse = |err, key: Option<&ApiKey>| {
                let applied = error_differences(&err, key.is_some(), 0);
                let mut response = finish(&cx, Err(err), 0, self.metrics(), None);
                noted(
                    &gateway,
                    self.metrics(),
                    op,
                    key,
                    &caller,
                    &mut response,
                    applied,
                );
                response
            };
            // The body is read as JSON whatever its `Content-Type` says, as V1
            // did (`curl -d` sends `application/x-www-form-urlencoded`); a body
            // that is not JSON is still refused, naming the problem.
            // V1's keyless operations never looked at credentials, so a
            // header they cannot use (a proxy's `Authorization: Basic`, an
            // empty Bearer) is no key there, not a refusal.
            let key = if op.is_public() {
                usable_key(&req.headers)
            } else {
                client_key(&req.headers).map_err(|e| refuse(e, None))?
            };
            let key_seen = key.as_ref();
            let limit = gateway.settings.max_body_bytes;
            let too_large =
                || GatewayError::BadRequest(format!("body is larger than {limit} bytes"));
            let body = match req.body.await {
                Ok(body) if body.len() > limit => {
                    cx.bytes_in.store(body.len(), Ordering::Relaxed);
                    return Err(refuse(too_large(), key_seen));
                }
                Ok(body) => body,
                Err(BodyError::TooLarge) => return Err(refuse(too_large(), key_seen)),
                Err(BodyError::Unreadable(e)) => {
                    return Err(refuse(
                        GatewayError::BadRequest(format!("body could not be read ({e})")),
                        key_seen,
                    ))
                }
                Err(BodyError::OverBudget) => {
                    return Err(refuse(GatewayError::Overloaded, key_seen))
                }
                Err(BodyError::Timeout(d)) => {
                    return Err(refuse(
                        GatewayError::BadRequest(format!(
                            "body was not received within {} ms",
                            d.as_millis()
                        )),
                        key_seen,
                    ))
                }
            };
            cx.bytes_in.store(body.len(), Ordering::Relaxed);
            // The slot is taken only once the body is in: a client sending it
            // slowly holds a connection, never capacity other clients need.
            let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
                return Err(refuse(GatewayError::Overloaded, key_seen));
            };
            let in_flight = InFlight::new(permit, &self.metrics().in_flight);
            let body_len = body.len();
            let applied = if body_len > 0 && !json_content_type(&req.headers) {
                AppliedSet::default().with(&differences::BODY_CONTENT_TYPE)
            } else {
                AppliedSet::default()
            };
            Ok(Admitted {
                op,
                request_id,
                method: req.method,
                path: req.path,
                query: req.query,
                headers: req.headers,
                body,
                key,
                gateway,
                started,
                bytes_in: body_len,
                caller,
                applied,
                _in_flight: in_flight,
            })
        }
    }

    /// Runs the operation under its deadline and renders the V1 answer.
    /// The request is moved into the future once (see [`Pipeline::admit`]).
    pub fn translate(&self, mut req: Admitted) -> impl Future<Output = V1Response> + '_ {
        let deadline = deadline(
            req.gateway.settings.request_timeout,
            req.gateway.settings.sync_run_timeout,
            req.op,
        );
        let browned_out = self.browned_out(&req);
        let v1 = req.take_v1_request();
        async move {
            let calls = AtomicU32::new(0);
            let applied = Applied::new();
            let result = if browned_out {
                let notices = &req.gateway.settings.notices;
                metrics::counter!(telemetry::BROWNOUT_REFUSALS, "operation" => req.op.name())
                    .increment(1);
                Err(GatewayError::Brownout(
                    crate::inventory::notice::brownout_message(notices, req.op),
                ))
            } else {
                dispatch_counting(&req.gateway, v1, deadline, &calls, &applied).await
            };
            let failed = result.is_err();
            let mut set = applied.get().union(req.applied);
            if let Err(err) = &result {
                let keyed = req.key.is_some();
                set = set.union(error_differences(err, keyed, calls.load(Ordering::Relaxed)));
            }
            // The request's header map, its last use past, holds the
            // answer's headers: it has room for them already (on HTTP/1,
            // hyper reads a request's headers into the map of the answer
            // before it), and the answer needs no map of its own.
            let room = std::mem::take(&mut req.headers);
            let mut response = finish(
                &self.context(&req),
                result,
                calls.load(Ordering::Relaxed),
                self.metrics(),
                Some(room),
            );
            // A business error sent with HTTP 200: the `200` V1 dialect.
            if failed && response.status == StatusCode::OK {
                set = set.with(&differences::BUSINESS_ERROR_STATUS);
            }
            if !set.is_empty() {
                self.metrics().applied(set);
            }
            crate::inventory::notice::add_headers(
                &req.gateway.settings.notices,
                Some(req.op),
                &mut response.headers,
            );
            if let Some(inventory) = req.gateway.inventory() {
                inventory.record(&crate::inventory::Seen {
                    failed,
                    applied: set,
                    browned_out,
                    ..req.caller.seen(req.op, req.key.as_ref())
                });
            }
            response
        }
    }

    /// Whether a brownout window (`[[inventory.brownouts]]`) refuses this
    /// request: never without one configured; a window naming clients
    /// matches a fingerprint only where the inventory makes them.
    fn browned_out(&self, req: &Admitted) -> bool {
        let notices = &req.gateway.settings.notices;
        if notices.brownouts.is_empty() {
            return false;
        }
        let inventory = req.gateway.inventory();
        let mut fingerprint = || match (inventory, &req.key) {
            (Some(inv), Some(key)) => inv.fingerprint_of_key(key.expose()),
            (Some(inv), None) => {
                let seen = req.caller.seen(req.op, None);
                inv.fingerprint_of_keyless(seen.user_agent.unwrap_or_default(), seen.address)
            }
            (None, _) => String::new(),
        };
        crate::inventory::notice::browned_out(notices, req.op, &mut fingerprint)
    }

    fn context<'a>(&self, req: &'a Admitted) -> access::Context<'a> {
        access::Context {
            method: &req.method,
            op: Some(req.op),
            request_id: &req.request_id,
            started: req.started,
            every_request: req.gateway.settings.access_log,
            dialect: req.gateway.settings.dialect,
            caller: &req.caller,
            bytes_in: AtomicUsize::new(req.bytes_in),
        }
    }

    /// The V1 dialect errors are rendered in (`[compat]`).
    pub fn dialect(&self) -> Dialect {
        self.live.load().settings.dialect
    }

    /// An answer that came from elsewhere (the legacy service, with
    /// `shadow.primary = "legacy"`), relayed as it came and counted.
    pub fn relay(&self, req: Admitted, status: StatusCode, body: Bytes) -> V1Response {
        let elapsed = req.started.elapsed();
        record_answer(self.metrics(), Some(req.op), status, elapsed, None);
        let outcome = access::Outcome {
            status,
            code: None,
            upstream_calls: 0,
            v2_request_id: None,
            error: None,
            elapsed,
            bytes_out: body.len(),
        };
        access::log(&self.context(&req), &outcome);
        V1Response::json(status, body)
    }

    /// An admitted request the gateway could not serve, rendered and counted.
    pub fn refuse(&self, req: Admitted, err: GatewayError) -> V1Response {
        finish(&self.context(&req), Err(err), 0, self.metrics(), None)
    }
}

/// How long one operation may take: a synchronous run waits for the run too.
/// (`request` is `upstream.request_timeout_ms`, `sync_run` `upstream.sync_run_timeout_ms`.)
pub fn deadline(request: Duration, sync_run: Duration, op: Operation) -> Duration {
    if op == Operation::StartRun {
        sync_run + request
    } else {
        request
    }
}

/// Runs one decoded V1 request under `deadline`.
pub async fn dispatch(
    gw: &Gateway,
    v1: V1Request,
    deadline: Duration,
) -> Result<ops::Translated, GatewayError> {
    dispatch_counting(gw, v1, deadline, &AtomicU32::new(0), &Applied::new()).await
}

/// [`dispatch`], counting the V2 calls made in `calls` (kept on an error or
/// at the deadline, for the access line) and marking in `applied` the
/// differences the answer relies on.
fn dispatch_counting<'a>(
    gw: &'a Gateway,
    v1: V1Request,
    deadline: Duration,
    calls: &'a AtomicU32,
    applied: &'a Applied,
) -> impl Future<Output = Result<ops::Translated, GatewayError>> + 'a {
    // On the heap: the operation's future would otherwise be part of every
    // future around it (the pipeline's, the server's), each moved whole. It
    // is polled in the request's own task, inside its span: entering the
    // span again at each poll would only repeat that. Made here rather than
    // in the future below, which then holds it once, not also the request.
    let handled = Box::pin(ops::handle_counting(&gw.translator, v1, calls, applied));
    async move {
        let at = tokio::time::Instant::now() + deadline;
        match crate::common::deadline::deadline_at(at, handled).await {
            Ok(result) => result,
            Err(_) => Err(GatewayError::Deadline(deadline)),
        }
    }
}

/// Counts a request refused at admission (its differences, in the
/// inventory) and adds the deprecation headers, as [`Pipeline::translate`]
/// does for the answers the operations make.
fn noted(
    gateway: &Gateway,
    metrics: &RequestMetrics,
    op: Operation,
    key: Option<&ApiKey>,
    caller: &Caller,
    response: &mut V1Response,
    mut applied: AppliedSet,
) {
    // Refused, so an error: with HTTP 200 only in the `200` V1 dialect.
    if response.status == StatusCode::OK {
        applied = applied.with(&differences::BUSINESS_ERROR_STATUS);
    }
    if !applied.is_empty() {
        metrics.applied(applied);
    }
    let notices = &gateway.settings.notices;
    crate::inventory::notice::add_headers(notices, Some(op), &mut response.headers);
    if let Some(inventory) = gateway.inventory() {
        inventory.record(&crate::inventory::Seen {
            failed: true,
            applied,
            ..caller.seen(op, key)
        });
    }
}

/// The differences an error answer shows: the field or fix named after a
/// colon (`error_message_detail`), and a keyed request refused for its
/// input before V2 saw its key (`input_before_key`).
fn error_differences(err: &GatewayError, keyed: bool, calls: u32) -> AppliedSet {
    let none = AppliedSet::default();
    match err {
        GatewayError::BadRequest(_) if keyed && calls == 0 => none
            .with(&differences::ERROR_MESSAGE_DETAIL)
            .with(&differences::INPUT_BEFORE_KEY),
        GatewayError::BadRequest(_)
        | GatewayError::Unauthorized(_)
        | GatewayError::MissingKey(_) => none.with(&differences::ERROR_MESSAGE_DETAIL),
        _ => none,
    }
}

/// Whether the request says its body is JSON (`application/json`, any
/// parameters, any case), as V1 clients mostly do.
fn json_content_type(headers: &HeaderMap) -> bool {
    headers.get(header::CONTENT_TYPE).is_none_or(|v| {
        let v = v.as_bytes();
        v.len() >= 16 && v[..16].eq_ignore_ascii_case(b"application/json")
    })
}

/// The client's key from `api-key` or `Authorization: Bearer` (the scheme
/// in any case, as HTTP reads it). A header that is present but unusable is
/// an error rather than silently ignored; one that is empty or blank (`api-key:`,
/// `Authorization: Bearer`) carries no key, as a client form with an empty key
/// field sends it, and the request is one without a key.
fn client_key(headers: &HeaderMap) -> Result<Option<ApiKey>, GatewayError> {
    let malformed = || GatewayError::Unauthorized("the key header is malformed".into());
    if let Some(v) = headers.get(&API_KEY).filter(|v| !is_blank(v.as_bytes())) {
        return api_key_of(v).map(Some).ok_or_else(malformed);
    }
    match headers.get(header::AUTHORIZATION) {
        Some(v) if is_empty_bearer(v) => Ok(None),
        Some(v) => bearer_of(v).map(Some).ok_or_else(malformed),
        None => Ok(None),
    }
}

fn is_blank(v: &[u8]) -> bool {
    v.iter().all(u8::is_ascii_whitespace)
}

/// `Bearer` with no token after it (a header value loses its trailing
/// blanks on the wire, so `Bearer ` arrives as `Bearer`).
fn is_empty_bearer(v: &HeaderValue) -> bool {
    let v = v.as_bytes();
    let scheme_end = v
        .iter()
        .position(u8::is_ascii_whitespace)
        .unwrap_or(v.len());
    v[..scheme_end].eq_ignore_ascii_case(b"bearer") && is_blank(&v[scheme_end..])
}

/// The first usable key of the two headers, for the operations that need
/// none: V1 never read credentials there, so a header they cannot use (a
/// proxy's `Authorization: Basic`, an empty Bearer) is no key, not a
/// refusal, and does not hide a usable key in the other header.
fn usable_key(headers: &HeaderMap) -> Option<ApiKey> {
    let api_key = headers.get(&API_KEY).and_then(api_key_of);
    api_key.or_else(|| headers.get(header::AUTHORIZATION).and_then(bearer_of))
}

fn api_key_of(v: &HeaderValue) -> Option<ApiKey> {
    ApiKey::new(v.to_str().ok()?)
}

fn bearer_of(v: &HeaderValue) -> Option<ApiKey> {
    let (scheme, token) = v.to_str().ok()?.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| ApiKey::new(token))
        .flatten()
}

/// Renders an outcome as the V1 answer, counts it and writes its access
/// line. `calls` is the number of V2 calls made (an answer carries its own).
fn finish(
    cx: &access::Context<'_>,
    result: Result<ops::Translated, GatewayError>,
    calls: u32,
    metrics: &RequestMetrics,
    room: Option<HeaderMap>,
) -> V1Response {
    let name = cx.op.map_or("unknown", Operation::name);
    // The request's own header map where the caller has it (see
    // [`V1Response::json_in`]), else a new one.
    let room = room.unwrap_or_else(|| HeaderMap::with_capacity(ANSWER_HEADERS));
    // Read once, for the access line and the duration histogram.
    let elapsed = cx.started.elapsed();
    let (mut response, calls) = match result {
        Ok(answer) => {
            let mut resp = V1Response::json_in(room, StatusCode::OK, answer.data.into_envelope());
            let v2_ids = answer.v2_request_ids;
            let outcome = access::Outcome {
                status: StatusCode::OK,
                code: Some(0),
                upstream_calls: answer.upstream_calls,
                v2_request_id: Some(v2_ids.as_str()).filter(|s| !s.is_empty()),
                error: None,
                elapsed,
                bytes_out: resp.body.len(),
            };
            access::log(cx, &outcome);
            // The ids' own buffer becomes the header's value.
            if !v2_ids.is_empty() {
                if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(v2_ids)) {
                    resp.headers.insert(V2_REQUEST_ID, v);
                }
            }
            resp.headers
                .insert(UPSTREAM_CALLS, count_header(answer.upstream_calls));
            (resp, answer.upstream_calls)
        }
        Err(err) => {
            let rendered = err.render_in(&cx.dialect);
            let resp = error_response_in(room, &err, &rendered);
            let v2_request_id = match &err {
                GatewayError::Refused { v2_request_id, .. } => v2_request_id.as_deref(),
                _ => None,
            };
            let outcome = access::Outcome {
                status: rendered.status,
                code: Some(rendered.envelope.code),
                upstream_calls: calls,
                v2_request_id,
                error: Some((&err, &rendered)),
                elapsed,
                bytes_out: resp.body.len(),
            };
            access::log(cx, &outcome);
            metrics::counter!(telemetry::ERRORS, "operation" => name, "origin" => rendered.origin.as_str(), "cause" => rendered.cause).increment(1);
            (resp, calls)
        }
    };
    response
        .headers
        .insert(REQUEST_ID, cx.request_id.header().clone());
    record_answer(metrics, cx.op, response.status, elapsed, Some(calls));
    response
}

/// Counts one answered request: by status, its duration and, for a
/// translated one, its V2 calls (`calls`). The series every answered
/// request touches come from handles resolved once; the rarer ones (another
/// status, an unknown route) by label.
fn record_answer(
    metrics: &RequestMetrics,
    op: Option<Operation>,
    status: StatusCode,
    elapsed: Duration,
    calls: Option<u32>,
) {
    let name = op.map_or("unknown", Operation::name);
    let handles = op.map(|op| metrics.operation(op));
    match handles {
        Some(op) if status == StatusCode::OK => op.answered_ok.increment(1),
        _ => metrics::counter!(telemetry::REQUESTS, "operation" => name, "status" => status_label(status))
            .increment(1),
    }
    let elapsed = elapsed.as_secs_f64();
    match handles {
        Some(op) => {
            op.duration.record(elapsed);
            if let Some(calls) = calls {
                op.upstream_calls.record(f64::from(calls));
            }
        }
        None => {
            metrics::histogram!(telemetry::REQUEST_DURATION, "operation" => name).record(elapsed)
        }
    }
}

/// A count as a header value; the usual ones are made once, not formatted
/// into a new buffer for every answer.
fn count_header(n: u32) -> HeaderValue {
    const DIGITS: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    match DIGITS.get(n as usize) {
        Some(digit) => HeaderValue::from_static(digit),
        None => HeaderValue::from(n),
    }
}

/// The `status` label of a V1 answer: the statuses the gateway answers with
/// need no allocation; any other (a relayed legacy answer) is written out.
fn status_label(status: StatusCode) -> metrics::SharedString {
    let known = match status.as_u16() {
        200 => "200",
        400 => "400",
        401 => "401",
        404 => "404",
        410 => "410",
        429 => "429",
        500 => "500",
        502 => "502",
        503 => "503",
        504 => "504",
        other => return other.to_string().into(),
    };
    metrics::SharedString::const_str(known)
}

/// A V1 error envelope (in `dialect`) with its diagnostic headers; nothing
/// is recorded.
pub fn error_response(err: &GatewayError, dialect: &Dialect) -> V1Response {
    error_response_in(
        HeaderMap::with_capacity(ANSWER_HEADERS),
        err,
        &err.render_in(dialect),
    )
}

/// [`error_response`] of an error already `rendered`, in `room` (see
/// [`V1Response::json_in`]).
fn error_response_in(room: HeaderMap, err: &GatewayError, rendered: &Rendered) -> V1Response {
    let mut resp = V1Response::json_in(room, rendered.status, rendered.envelope.to_bytes());
    let h = &mut resp.headers;
    h.insert(
        ERROR_ORIGIN,
        HeaderValue::from_static(rendered.origin.as_str()),
    );
    h.insert(ERROR_CAUSE, HeaderValue::from_static(rendered.cause));
    if let Some(secs) = err.retry_after() {
        h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if let GatewayError::Refused {
        v2_request_id: Some(id),
        ..
    } = err
    {
        if let Ok(v) = HeaderValue::from_str(id) {
            h.insert(V2_REQUEST_ID, v);
        }
    }
    resp
}

/// The status and envelope bytes of an operation's outcome, without
/// diagnostics or metrics (a shadow copy's translated side).
pub fn render(
    result: Result<ops::Translated, GatewayError>,
    dialect: &Dialect,
) -> (StatusCode, Bytes) {
    match result {
        Ok(answer) => (StatusCode::OK, answer.data.into_envelope().to_bytes()),
        Err(err) => {
            let r = err.render_in(dialect);
            (r.status, r.envelope.to_bytes())
        }
    }
}
