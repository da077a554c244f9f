//! The pooled HTTP(S) client that carries every V2 call: the last hop of the
//! request path before V2 itself. An operation hands it a [`V2Call`]; it
//! adds the headers (auth, request id), enforces the per-attempt deadline and
//! the response size cap, retries idempotent reads within the retry budget
//! (see [`super::retry`]) and emits the upstream metrics. It never interprets
//! a V2 answer: a 429 or 5xx that survives the retries is returned as a
//! [`V2Reply`] for the operation to map.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use http::header::{
    HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST, RETRY_AFTER,
    USER_AGENT,
};
use http::uri::{PathAndQuery, Scheme};
use http::{Method, Request, StatusCode, Uri};
use http_body::Body as _;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::time::Instant;
use tracing::debug;

use super::proxy::ProxyEnv;
use super::retry::{
    parse_retry_after, plan_wait, retry_reason, GiveUp, RetryBudget, RetrySettings,
};
use super::{ApiKey, RetryPolicy, Upstream, UpstreamFailure, UpstreamFuture, V2Call, V2Reply};

use super::pool::Pool;
use crate::common::memory::{Charge, Held, MemoryBudget};
use crate::common::request_id::RequestId;
use crate::telemetry::handles::UpstreamMetrics;
use crate::telemetry::{
    MEMORY_REFUSALS, UPSTREAM_DURATION_SECONDS, UPSTREAM_REQUESTS_TOTAL,
    UPSTREAM_RETRIES_SKIPPED_TOTAL, UPSTREAM_RETRIES_TOTAL,
};
use crate::upstream::http_client::{
    connector, error_chain, origin_and_prefix, tls_config, CONNECT_TIMEOUT,
};

/// How the key travels to V2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthStyle {
    /// `Authorization: Bearer <key>`, the form V2 documents as preferred.
    #[default]
    Bearer,
    /// `api-key: <key>`, the V1-era header, for deployments that need it.
    ApiKeyHeader,
}

/// Everything the client needs to reach V2. Holds no key: keys travel per
/// call in [`V2Call::key`].
#[derive(Clone)]
pub struct UpstreamSettings {
    /// `http://` or `https://`, optionally with a path prefix that is kept in
    /// front of every V2 path (`https://gw.example/coreclaw` →
    /// `https://gw.example/coreclaw/api/v2/...`). No credentials, query or
    /// fragment.
    pub base_url: url::Url,
    pub connect_timeout: Duration,
    /// Deadline of one attempt, headers and body, unless the call overrides it.
    pub attempt_timeout: Duration,
    pub pool_idle_timeout: Duration,
    /// Idle V2 connections kept for reuse. A call that finds none opens
    /// one, and one returned to a full pool is closed, so a burst of more
    /// concurrent calls than this opens and closes connections on every
    /// request (at 256 client connections and 64 kept, a quarter of all
    /// requests paid a TCP handshake and left a socket in TIME_WAIT).
    /// The default, 1,024, is as many as `limits.max_in_flight` admits by
    /// default (set apart: raising one does not raise the other).
    /// Connections idle longer than `pool_idle_timeout` close anyway.
    pub pool_max_idle_per_host: usize,
    /// Larger answers fail with [`UpstreamFailure::TooLarge`].
    pub max_response_bytes: usize,
    pub auth_style: AuthStyle,
    pub retry: RetrySettings,
    pub user_agent: String,
    /// PEM certificates trusted in addition to the Mozilla roots (a private
    /// CA in front of V2, or a test server).
    pub extra_root_pem: Option<Vec<u8>>,
    /// Where `extra_root_pem` was read from (`upstream.ca_file`), if a file.
    pub ca_file: Option<std::path::PathBuf>,
    /// `HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY` / `NO_PROXY`, as loaded.
    pub proxy: ProxyEnv,
    /// The process's memory budget (`connections.memory_budget_bytes`, set
    /// by the configuration): each answer's bytes are taken from it while
    /// the answer is read and given back when the last of them is dropped,
    /// and the answer of a call that may be retried is refused with
    /// [`UpstreamFailure::OverBudget`] when they do not fit. `None` counts
    /// nothing (replay, tools, tests).
    pub memory: Option<Arc<MemoryBudget>>,
}

impl UpstreamSettings {
    /// Defaults for everything but where V2 lives.
    pub fn new(base_url: url::Url) -> UpstreamSettings {
        UpstreamSettings {
            base_url,
            connect_timeout: CONNECT_TIMEOUT,
            attempt_timeout: Duration::from_secs(10),
            pool_idle_timeout: Duration::from_secs(90),
            pool_max_idle_per_host: 1024,
            max_response_bytes: 16 * 1024 * 1024,
            auth_style: AuthStyle::default(),
            retry: RetrySettings::default(),
            user_agent: concat!("v1compat/", env!("CARGO_PKG_VERSION")).to_owned(),
            extra_root_pem: None,
            ca_file: None,
            proxy: ProxyEnv::default(),
            memory: None,
        }
    }
}

impl std::fmt::Debug for UpstreamSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A base URL with userinfo is refused by `HttpUpstream::new`, but the
        // settings may be printed before that check: never show it.
        let mut base_url = self.base_url.clone();
        let _ = base_url.set_username("");
        let _ = base_url.set_password(None);
        f.debug_struct("UpstreamSettings")
            .field("base_url", &base_url.as_str())
            .field("connect_timeout", &self.connect_timeout)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .field("pool_max_idle_per_host", &self.pool_max_idle_per_host)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("auth_style", &self.auth_style)
            .field("retry", &self.retry)
            .field("user_agent", &self.user_agent)
            .field(
                "extra_root_pem",
                &self
                    .extra_root_pem
                    .as_ref()
                    .map(|p| format!("{} bytes", p.len())),
            )
            .field("ca_file", &self.ca_file)
            .field("proxy", &self.proxy)
            // Its limit: what the configuration set, not the bytes held now.
            .field("memory", &self.memory.as_ref().map(|m| m.limit()))
            .finish()
    }
}

/// The real [`Upstream`]: one connection pool (HTTP/1.1, and HTTP/2 where
/// TLS negotiates it) shared by every call. Cheap to clone.
#[derive(Clone)]
pub struct HttpUpstream {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    settings: UpstreamSettings,
    /// Where every call goes, parsed once from the base URL.
    target: Target,
    headers: CallHeaders,
    budget: RetryBudget,
    /// Resolved at the first call (see `telemetry::handles`).
    metrics: OnceLock<UpstreamMetrics>,
}

/// The base URL, parsed once: each call only adds its path.
struct Target {
    /// The base URL's path without a trailing slash (often empty); V2 paths
    /// all start with `/`.
    prefix: String,
    /// The `Host` header, as hyper would write it for every call
    /// (the port only when it is not the scheme's default).
    host: HeaderValue,
    /// `scheme://authority`: what connections are made to.
    origin: Uri,
}

impl Target {
    /// `origin_and_prefix` is what [`origin_and_prefix`] made of the base URL.
    fn new(origin_and_prefix: &str) -> Result<Target, String> {
        let uri: Uri = origin_and_prefix
            .parse()
            .map_err(|e| format!("base_url does not form a valid request URI: {e}"))?;
        let parts = uri.into_parts();
        let (Some(scheme), Some(authority)) = (parts.scheme, parts.authority) else {
            return Err("base_url has no scheme or host".to_owned());
        };
        let prefix = parts
            .path_and_query
            .map(|p| p.path().trim_end_matches('/').to_owned())
            .unwrap_or_default();
        let default_port = if scheme == Scheme::HTTPS { 443 } else { 80 };
        let host = match authority.port_u16() {
            Some(port) if port != default_port => format!("{}:{port}", authority.host()),
            _ => authority.host().to_owned(),
        };
        let host = HeaderValue::from_str(&host)
            .map_err(|_| "base_url's host is not a valid header value".to_owned())?;
        let origin = Uri::builder()
            .scheme(scheme)
            .authority(authority)
            .path_and_query("/")
            .build()
            .map_err(|e| format!("base_url does not form a valid origin: {e}"))?;
        Ok(Target {
            prefix,
            host,
            origin,
        })
    }

    /// The request URI of a V2 path and query, in origin-form (the base
    /// URL's path, then the call's): what HTTP/1.1 writes. The pool makes
    /// the absolute form HTTP/2 needs from it and the origin, when a
    /// connection is HTTP/2.
    fn uri(&self, path_and_query: String) -> Result<Uri, http::uri::InvalidUri> {
        let path_and_query = if self.prefix.is_empty() {
            path_and_query
        } else {
            format!("{}{path_and_query}", self.prefix)
        };
        PathAndQuery::try_from(path_and_query).map(Uri::from)
    }
}

impl std::fmt::Debug for HttpUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpUpstream")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl HttpUpstream {
    /// Builds the pool and TLS config. Fails (with every problem found) on a
    /// base URL it cannot use, unusable retry settings, an invalid user
    /// agent or unreadable extra roots. Does not connect.
    pub fn new(settings: UpstreamSettings) -> Result<HttpUpstream, String> {
        let mut problems = Vec::new();
        let target = origin_and_prefix(&settings.base_url)
            .map_err(|p| format!("base_url {p}"))
            .and_then(|o| Target::new(&o))
            .map_err(|p| problems.push(p))
            .ok();
        problems.extend(settings.retry.validate());
        let user_agent = HeaderValue::from_str(&settings.user_agent)
            .map_err(|_| problems.push("user_agent is not a valid header value".to_owned()))
            .ok();
        let tls = tls_config(settings.extra_root_pem.as_deref())
            .map_err(|p| problems.push(p))
            .ok();
        problems.extend(settings.proxy.problems());
        let (Some(target), Some(user_agent), Some(tls), true) =
            (target, user_agent, tls, problems.is_empty())
        else {
            return Err(problems.join("; "));
        };

        let pool = Pool::new(
            connector(tls, &settings.proxy, settings.connect_timeout),
            target.origin.clone(),
            settings.pool_idle_timeout,
            settings.pool_max_idle_per_host,
        );
        let budget = RetryBudget::new(&settings.retry);
        Ok(HttpUpstream {
            inner: Arc::new(Inner {
                pool,
                headers: CallHeaders::new(&target.host, &user_agent, settings.auth_style),
                settings,
                target,
                budget,
                metrics: OnceLock::new(),
            }),
        })
    }

    pub fn settings(&self) -> &UpstreamSettings {
        &self.inner.settings
    }
}

static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
static API_KEY: HeaderName = HeaderName::from_static("api-key");

/// The headers of every attempt, in the order they are written: `Host`,
/// `Accept`, `User-Agent`, `Content-Type` (calls with a body), the request
/// id and the key. Made once with empty values for the last two, which each
/// attempt sets in place in a copy: inserting hashes every name, for each
/// attempt again (about 200 instructions a header), where a copy does not.
/// Each attempt has its own map, so the first hands its map to the
/// connection rather than a copy kept for a retry that almost never comes.
/// The key's header and its value come from one style, kept here.
struct CallHeaders {
    without_body: HeaderMap,
    with_body: HeaderMap,
    style: AuthStyle,
    /// The header the key travels in, made once from `style`.
    auth: HeaderName,
}

impl CallHeaders {
    fn new(host: &HeaderValue, user_agent: &HeaderValue, style: AuthStyle) -> CallHeaders {
        let auth = auth_name(style);
        let map = |has_body: bool| {
            let mut headers = HeaderMap::with_capacity(6);
            // Set here, from the value made once, so that hyper does not
            // format it again for every call.
            headers.insert(HOST, host.clone());
            headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
            headers.insert(USER_AGENT, user_agent.clone());
            if has_body {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            }
            // Last, in this order: `of` sets them by their places.
            headers.insert(X_REQUEST_ID.clone(), HeaderValue::from_static(""));
            headers.insert(auth.clone(), HeaderValue::from_static(""));
            headers
        };
        CallHeaders {
            without_body: map(false),
            with_body: map(true),
            style,
            auth,
        }
    }

    /// `key` as the value of its header, in the style these headers have.
    fn key_value(&self, key: &ApiKey) -> Option<HeaderValue> {
        auth_value(key, self.style)
    }

    /// The headers of one attempt of `parts`; a call without a key sends no
    /// key header.
    fn of(&self, parts: &Prepared) -> HeaderMap {
        let mut headers = if parts.has_body {
            self.with_body.clone()
        } else {
            self.without_body.clone()
        };
        // The id and the key are the last two headers (see `new`): set in
        // their places rather than found by comparing every name.
        let before = headers.len() - 2;
        let mut last_two = headers.values_mut().skip(before);
        if let Some(id) = last_two.next() {
            *id = parts.request_id.clone();
        }
        let has_key = match (last_two.next(), &parts.key) {
            (Some(value), Some(key)) => {
                *value = key.clone();
                true
            }
            _ => false,
        };
        if !has_key {
            headers.remove(&self.auth);
        }
        headers
    }
}

/// The header a key travels in.
fn auth_name(style: AuthStyle) -> HeaderName {
    match style {
        AuthStyle::Bearer => AUTHORIZATION,
        AuthStyle::ApiKeyHeader => API_KEY.clone(),
    }
}

/// `ApiKey` only admits visible ASCII, so this cannot fail in practice; the
/// value is marked sensitive so hyper's HTTP/2 HPACK never indexes it.
fn auth_value(key: &ApiKey, style: AuthStyle) -> Option<HeaderValue> {
    let value = match style {
        AuthStyle::Bearer => {
            // Written once into a buffer of its exact size, which the
            // header value then takes over without a copy.
            const BEARER: &[u8] = b"Bearer ";
            let mut value = Vec::with_capacity(BEARER.len() + key.expose().len());
            value.extend_from_slice(BEARER);
            value.extend_from_slice(key.expose().as_bytes());
            HeaderValue::from_maybe_shared(Bytes::from(value))
        }
        AuthStyle::ApiKeyHeader => HeaderValue::from_str(key.expose()),
    };
    let mut value = value.ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// Everything the attempts of one call send, prepared once per call.
struct Prepared {
    method: Method,
    /// Origin-form (`/path?query`), as HTTP/1.1 writes it ([`Target::uri`]).
    uri: Uri,
    has_body: bool,
    request_id: HeaderValue,
    /// The key's header value in the configured style, made once for all
    /// attempts; `None` without a key.
    key: Option<HeaderValue>,
    body: Bytes,
    timeout: Duration,
    route: &'static str,
    /// Whether the answer may be refused at the memory budget: a call
    /// that may be retried ([`RetryPolicy::SafeToRetry`]) changed nothing
    /// in V2, so the client may ask again; one sent once may have (a run
    /// started), and its answer is kept whatever the budget holds.
    refusable: bool,
}

/// One attempt's answer, before the retry decision.
struct AttemptReply {
    status: StatusCode,
    retry_after: Option<Duration>,
    body: Bytes,
}

impl Upstream for HttpUpstream {
    fn call(&self, call: V2Call, request_id: &RequestId) -> UpstreamFuture<'_> {
        // The call is prepared before its future is made (the id's header
        // value too, shared, so the future does not borrow `request_id`):
        // the future then holds what the attempts send, not also the call it
        // came from.
        match self.inner.prepare(call, request_id.header().clone()) {
            Ok((prepared, policy)) => Box::pin(self.inner.run(prepared, policy)),
            Err(failure) => Box::pin(std::future::ready(Err(failure))),
        }
    }
}

impl Inner {
    /// What every attempt of `call` sends, and whether it may be retried.
    fn prepare(
        &self,
        call: V2Call,
        request_id: HeaderValue,
    ) -> Result<(Prepared, RetryPolicy), UpstreamFailure> {
        let V2Call {
            method,
            path,
            body,
            key,
            retry: policy,
            attempt_timeout,
        } = call;
        let route = path.route();
        // Cannot fail for a base URL that passed `new` and a `V2Path`; mapped
        // rather than unwrapped all the same.
        let uri = self
            .target
            .uri(path.into_path_and_query())
            .map_err(|e| UpstreamFailure::Unreachable(format!("invalid upstream URI: {e}")))?;
        let has_body = body.is_some();
        let body = match &body {
            Some(json) => Bytes::from(
                serde_json::to_vec(json)
                    .map_err(|e| UpstreamFailure::Broken(format!("request body: {e}")))?,
            ),
            None => Bytes::new(),
        };
        let prepared = Prepared {
            method,
            uri,
            has_body,
            request_id,
            key: key.as_ref().and_then(|key| self.headers.key_value(key)),
            body,
            timeout: attempt_timeout.unwrap_or(self.settings.attempt_timeout),
            route,
            refusable: policy == RetryPolicy::SafeToRetry,
        };
        Ok((prepared, policy))
    }

    /// The attempts of one prepared call, retried as `policy` and the retry
    /// settings allow. Not an `async fn`, which would hold `prepared` twice.
    #[allow(clippy::manual_async_fn)]
    fn run(
        &self,
        prepared: Prepared,
        policy: RetryPolicy,
    ) -> impl Future<Output = Result<V2Reply, UpstreamFailure>> + Send + '_ {
        async move {
            let route = prepared.route;
            let retry = &self.settings.retry;
            let max_attempts = match policy {
                RetryPolicy::SafeToRetry => retry.max_attempts.max(1),
                RetryPolicy::Never => 1,
            };

            // The first attempt starts now: one reading of the clock for both.
            let started = Instant::now();
            self.budget.deposit();
            let mut attempt = 0u32;
            let mut attempt_start = started;
            loop {
                attempt += 1;
                let outcome = self.attempt(&prepared, attempt, attempt_start).await;
                if attempt >= max_attempts {
                    return finish(outcome, attempt);
                }
                let Some(reason) = retry_reason(outcome.as_ref().map(|a| a.status)) else {
                    return finish(outcome, attempt);
                };
                let retry_after = outcome.as_ref().ok().and_then(|a| a.retry_after);
                let planned = plan_wait(attempt, retry, retry_after, &mut rand::thread_rng())
                    .and_then(|wait| {
                        // A retry that could not finish inside the V1 request's
                        // window would only make V2 do work nobody waits for.
                        let finish_by = started
                            .elapsed()
                            .saturating_add(wait)
                            .saturating_add(prepared.timeout);
                        if finish_by > retry.retry_window {
                            Err(GiveUp::Deadline)
                        } else if !self.budget.withdraw() {
                            // Withdrawn last so a refused retry does not spend budget.
                            Err(GiveUp::Budget)
                        } else {
                            Ok(wait)
                        }
                    });
                let wait = match planned {
                    Ok(wait) => wait,
                    Err(cause) => {
                        metrics::counter!(
                            UPSTREAM_RETRIES_SKIPPED_TOTAL,
                            "route" => route,
                            "cause" => cause.as_str()
                        )
                        .increment(1);
                        debug!(route = %route, attempt, cause = cause.as_str(), "upstream retry skipped");
                        return finish(outcome, attempt);
                    }
                };
                metrics::counter!(
                    UPSTREAM_RETRIES_TOTAL,
                    "route" => route,
                    "reason" => reason.as_str()
                )
                .increment(1);
                debug!(
                    route = %route,
                    attempt,
                    reason = reason.as_str(),
                    wait_ms = wait.as_millis() as u64,
                    "upstream retry"
                );
                tokio::time::sleep(wait).await;
                attempt_start = Instant::now();
            }
        }
    }

    /// One attempt's request.
    fn request(&self, prepared: &Prepared) -> Request<Full<Bytes>> {
        // Bytes clones share the buffer: a retry does not copy the body.
        let mut request = Request::new(Full::new(prepared.body.clone()));
        *request.method_mut() = prepared.method.clone();
        *request.uri_mut() = prepared.uri.clone();
        *request.headers_mut() = self.headers.of(prepared);
        request
    }

    /// One request and its whole body under one deadline, from `started`.
    async fn attempt(
        &self,
        prepared: &Prepared,
        attempt: u32,
        started: Instant,
    ) -> Result<AttemptReply, UpstreamFailure> {
        let Prepared {
            method,
            timeout,
            route,
            ..
        } = prepared;
        let timeout = *timeout;
        let limit = self.settings.max_response_bytes;
        let refusable = prepared.refusable;
        // Pinned where it is: handed to the deadline by reference, not moved
        // into it (a copy of the whole future, head and body state and all).
        let exchange = std::pin::pin!(async {
            // Made in the call's argument: a request held in this future
            // while it is sent would be a second copy beside the one the
            // pool's future holds.
            let (response, lease) = self.pool.send(self.request(prepared), started).await?;
            let (parts, body) = response.into_parts();
            // A declared length over the cap needs no reading to refuse
            // (hyper read the length; its size hint is exact when declared).
            if body
                .size_hint()
                .exact()
                .is_some_and(|len| len > limit as u64)
            {
                return Err(UpstreamFailure::TooLarge(limit));
            }
            // What the head says is read now, so the head is not kept while
            // the body is read.
            let status = parts.status;
            let retry_after = parts
                .headers
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, SystemTime::now()));
            drop(parts);
            let mut charge = match &self.settings.memory {
                Some(budget) => budget.charge(Held::Answer),
                None => Charge::none(),
            };
            // A declared length is taken from the budget at once: one step
            // for the whole answer, and one that does not fit is refused
            // before any of it is read.
            if let Some(len) = body.size_hint().exact() {
                take(&mut charge, len as usize, refusable)?;
            }
            let body = read_whole(body, limit, charge, refusable).await?;
            // Read to the end: the connection can carry the next call. The
            // instant it went idle is the one the attempt ended at.
            let ended = Instant::now();
            lease.release(ended);
            Ok((
                AttemptReply {
                    status,
                    retry_after,
                    body,
                },
                ended,
            ))
        });
        let (outcome, ended) =
            match crate::common::deadline::nested_deadline_at(deadline(started, timeout), exchange)
                .await
            {
                Ok(Ok((answer, ended))) => (Ok(answer), ended),
                Ok(Err(failure)) => (Err(failure), Instant::now()),
                Err(_) => (Err(UpstreamFailure::Timeout(timeout)), Instant::now()),
            };

        let elapsed = ended.saturating_duration_since(started);

        let status_class = match &outcome {
            Ok(answer) => status_class(answer.status),
            Err(_) => "error",
        };
        let resolved = self.metrics.get_or_init(UpstreamMetrics::resolve);
        // A V2 answer, whatever its status, says V2 is there; a connection
        // that could not be opened says it is not (the periodic check,
        // `server::reachability`, says the same with no traffic).
        match &outcome {
            Ok(_) => resolved.reachable.set(1.0),
            Err(UpstreamFailure::Unreachable(_)) => resolved.reachable.set(0.0),
            Err(_) => {}
        }
        let handles = resolved.route(route);
        match handles {
            Some(h) if status_class == "2xx" => h.answered_2xx.increment(1),
            _ => metrics::counter!(
                UPSTREAM_REQUESTS_TOTAL,
                "route" => *route,
                "status_class" => status_class
            )
            .increment(1),
        }
        match handles {
            Some(h) => h.duration.record(elapsed.as_secs_f64()),
            None => metrics::histogram!(UPSTREAM_DURATION_SECONDS, "route" => *route)
                .record(elapsed.as_secs_f64()),
        }
        match &outcome {
            Ok(answer) => debug!(
                method = %method,
                route = %route,
                status = answer.status.as_u16(),
                attempt,
                elapsed_ms = elapsed.as_millis() as u64,
                "upstream attempt"
            ),
            Err(failure) => debug!(
                method = %method,
                route = %route,
                error = failure.kind(),
                detail = %failure,
                attempt,
                elapsed_ms = elapsed.as_millis() as u64,
                "upstream attempt failed"
            ),
        }
        outcome
    }
}

fn finish(
    outcome: Result<AttemptReply, UpstreamFailure>,
    attempts: u32,
) -> Result<V2Reply, UpstreamFailure> {
    outcome.map(|answer| V2Reply {
        status: answer.status,
        body: answer.body,
        attempts,
        retry_after: answer.retry_after,
    })
}

/// An answer's whole body, at most `limit` bytes, its bytes in `charge`
/// (taken as they are read when no length was declared) and handed over to
/// the body it comes back as. The usual V2 answer comes in one frame, which
/// is kept as it is rather than gathered into a list of frames first; only
/// a body of several is copied into one buffer.
async fn read_whole(
    mut body: Incoming,
    limit: usize,
    mut charge: Charge,
    refusable: bool,
) -> Result<Bytes, UpstreamFailure> {
    let mut whole = Bytes::new();
    let mut joined: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| UpstreamFailure::Broken(error_chain(&e)))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let read = joined.as_ref().map_or(whole.len(), BytesMut::len);
        if read + data.len() > limit {
            return Err(UpstreamFailure::TooLarge(limit));
        }
        if let Some(more) = (read + data.len()).checked_sub(charge.bytes()) {
            take(&mut charge, more, refusable)?;
        }
        match &mut joined {
            Some(buf) => buf.extend_from_slice(&data),
            None if whole.is_empty() => whole = data,
            None => {
                let mut buf = BytesMut::with_capacity(whole.len() + data.len());
                buf.extend_from_slice(&whole);
                buf.extend_from_slice(&data);
                joined = Some(buf);
            }
        }
    }
    let whole = joined.map_or(whole, BytesMut::freeze);
    Ok(counted(whole, charge))
}

/// Takes `n` bytes of an answer from the budget: refused when they do not
/// fit and the call may be refused, counted whatever the budget holds when
/// it may not.
fn take(charge: &mut Charge, n: usize, refusable: bool) -> Result<(), UpstreamFailure> {
    if n == 0 {
        return Ok(());
    }
    if !refusable {
        charge.add(n);
        return Ok(());
    }
    if charge.try_add(n) {
        return Ok(());
    }
    metrics::counter!(MEMORY_REFUSALS, "reason" => "v2_answer").increment(1);
    // The refused answer's bytes read so far go back with it; the budget's
    // limit is all the failure says.
    Err(UpstreamFailure::OverBudget(
        // `charge` is on a budget, or it would not have refused.
        charge.limit().unwrap_or_default(),
    ))
}

/// `bytes` holding their `charge` in the budget until the last view of
/// them is dropped, wherever the answer went (parts of a V2 page are
/// shared into the V1 answer, which may outlive the page's reading). No
/// wrapper, and no allocation, when nothing is counted.
fn counted(bytes: Bytes, mut charge: Charge) -> Bytes {
    // A declared length that was longer than the body (hyper fails such a
    // body, but the count must not depend on it).
    charge.release(charge.bytes().saturating_sub(bytes.len()));
    if !charge.is_counted() || charge.bytes() == 0 {
        return bytes;
    }
    Bytes::from_owner(Counted {
        bytes,
        _charge: charge,
    })
}

/// An answer's bytes and their place in the memory budget.
struct Counted {
    bytes: Bytes,
    _charge: Charge,
}

impl AsRef<[u8]> for Counted {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// `timeout` after `start`; a timeout too long to add is as good as none
/// (thirty years, as tokio's own `timeout` takes it).
fn deadline(start: Instant, timeout: Duration) -> Instant {
    start
        .checked_add(timeout)
        .unwrap_or_else(|| start + Duration::from_secs(30 * 365 * 86_400))
}

fn status_class(status: StatusCode) -> &'static str {
    match status.as_u16() / 100 {
        1 => "1xx",
        2 => "2xx",
        3 => "3xx",
        4 => "4xx",
        5 => "5xx",
        // hyper accepts codes up to 999; keep the label set bounded anyway.
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> url::Url {
        url::Url::parse(s).unwrap()
    }

    #[test]
    fn settings_debug_hides_userinfo_and_pem() {
        let mut s = UpstreamSettings::new(url("https://user:secret@v2.example/p"));
        s.extra_root_pem = Some(b"-----BEGIN CERTIFICATE-----".to_vec());
        let shown = format!("{s:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(!shown.contains("BEGIN"), "{shown}");
        assert!(HttpUpstream::new(s).is_err());
    }

    #[test]
    fn all_problems_are_reported_together() {
        let mut s = UpstreamSettings::new(url("ftp://v2.example"));
        s.user_agent = "bad\nagent".into();
        s.retry.max_attempts = 0;
        let err = HttpUpstream::new(s).unwrap_err();
        assert!(err.contains("ftp"), "{err}");
        assert!(err.contains("user_agent"), "{err}");
        assert!(err.contains("max_attempts"), "{err}");
    }

    #[test]
    fn headers_carry_key_per_style_and_request_id() {
        let key = ApiKey::new("k-123").unwrap();
        let ua = HeaderValue::from_static("ua");
        let host = HeaderValue::from_static("v2.example:8080");
        let prepared = |headers: &CallHeaders, has_body, request_id: &'static str| Prepared {
            method: Method::GET,
            uri: Uri::from_static("/api/v2/store"),
            has_body,
            request_id: RequestId::from_static(request_id).header().clone(),
            key: headers.key_value(&key),
            body: Bytes::new(),
            timeout: Duration::from_secs(1),
            route: "/api/v2/store",
            refusable: true,
        };
        // The headers of a call prepared, and sent, in one key style.
        let call_headers = |has_body, request_id, style| {
            let headers = CallHeaders::new(&host, &ua, style);
            headers.of(&prepared(&headers, has_body, request_id))
        };
        let h = call_headers(false, "req-1", AuthStyle::Bearer);
        let names: Vec<_> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(
            names,
            [
                "host",
                "accept",
                "user-agent",
                "x-request-id",
                "authorization"
            ]
        );
        assert_eq!(h.len(), 5);
        assert_eq!(h[HOST], "v2.example:8080");
        assert_eq!(h[USER_AGENT], "ua");
        assert_eq!(h[AUTHORIZATION], "Bearer k-123");
        assert!(h[AUTHORIZATION].is_sensitive());
        assert_eq!(h["x-request-id"], "req-1");
        assert!(h.get(CONTENT_TYPE).is_none());
        let h = call_headers(true, "req-2", AuthStyle::ApiKeyHeader);
        assert_eq!(h["api-key"], "k-123");
        assert!(h["api-key"].is_sensitive());
        assert!(h.get(AUTHORIZATION).is_none());
        assert_eq!(h["x-request-id"], "req-2");
        assert_eq!(h[CONTENT_TYPE], "application/json");
        let names: Vec<_> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(
            names,
            [
                "host",
                "accept",
                "user-agent",
                "content-type",
                "x-request-id",
                "api-key"
            ]
        );
        // Without a key, no key header, in either style; nothing is sent
        // with the empty value the headers are made with.
        for style in [AuthStyle::Bearer, AuthStyle::ApiKeyHeader] {
            let headers = CallHeaders::new(&host, &ua, style);
            let mut keyless = prepared(&headers, true, "req-3");
            keyless.key = None;
            let h = headers.of(&keyless);
            assert!(h.get(AUTHORIZATION).is_none() && h.get("api-key").is_none());
            assert_eq!(h.len(), 5);
            assert!(h.values().all(|v| !v.is_empty()));
        }
    }

    #[test]
    fn the_target_is_parsed_once_and_paths_are_appended() {
        let target = |base: &str| Target::new(&origin_and_prefix(&url(base)).unwrap()).unwrap();
        let t = target("https://v2.example/coreclaw/");
        assert_eq!(t.host, "v2.example");
        assert_eq!(t.origin, "https://v2.example/");
        assert_eq!(
            t.uri("/api/v2/store?keyword=a".into()).unwrap(),
            "/coreclaw/api/v2/store?keyword=a"
        );
        let t = target("http://127.0.0.1:8080");
        assert_eq!(t.host, "127.0.0.1:8080");
        assert_eq!(t.origin, "http://127.0.0.1:8080/");
        assert_eq!(t.uri("/api/v2/store".into()).unwrap(), "/api/v2/store");
        assert_eq!(target("http://v2.example:80/").host, "v2.example");
        assert_eq!(target("https://[::1]:8443").host, "[::1]:8443");
    }

    #[test]
    fn builds_outside_a_runtime() {
        // Config is validated before the runtime starts; building the client
        // must not need one (connections are only made on the first call).
        let up = HttpUpstream::new(UpstreamSettings::new(url("https://v2.example/p"))).unwrap();
        assert!(format!("{up:?}").contains("https://v2.example/p"));
    }

    #[test]
    fn status_classes() {
        assert_eq!(status_class(StatusCode::OK), "2xx");
        assert_eq!(status_class(StatusCode::FOUND), "3xx");
        assert_eq!(status_class(StatusCode::TOO_MANY_REQUESTS), "4xx");
        assert_eq!(status_class(StatusCode::BAD_GATEWAY), "5xx");
    }
}
