//! The listeners and the tower stack in front of the operations. The public
//! listener serves V1 traffic; the admin listener `/healthz`, `/readyz` and
//! `/metrics`. Both shut down gracefully: stop accepting, let in-flight
//! requests finish within the grace period.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestId, RequestId, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;
use tracing::Instrument;

use crate::error::GatewayError;
use crate::ops::{self, Gateway, V1Request};
use crate::route::{self, Operation};
use crate::shadow::legacy::{Received, V1Call, LOOP_GUARD};
use crate::shadow::{Mirror, Primary, ReadRequest};
use crate::telemetry;
use crate::upstream::ApiKey;
use crate::v1::Envelope;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
pub const V2_REQUEST_ID: HeaderName = HeaderName::from_static("x-v2-request-id");
pub const ERROR_ORIGIN: HeaderName = HeaderName::from_static("x-v1compat-error-origin");
pub const ERROR_CAUSE: HeaderName = HeaderName::from_static("x-v1compat-error");
pub const UPSTREAM_CALLS: HeaderName = HeaderName::from_static("x-v1compat-upstream-calls");
const API_KEY: HeaderName = HeaderName::from_static("api-key");
/// Bounds `/readyz`'s V2 check below a probe's default one-second timeout.
const UPSTREAM_PROBE_TIMEOUT: Duration = Duration::from_millis(700);

/// Request ids are ULIDs unless the client sent a usable one.
#[derive(Clone, Copy, Default)]
struct MakeUlid;

impl MakeRequestId for MakeUlid {
    fn make_request_id<B>(&mut self, _request: &Request<B>) -> Option<RequestId> {
        HeaderValue::from_str(&ulid::Ulid::new().to_string())
            .ok()
            .map(RequestId::new)
    }
}

/// A client-sent id is kept only if it is short and printable; otherwise it
/// is replaced, so it cannot smuggle anything into logs or upstream headers.
fn usable_request_id(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(&REQUEST_ID)?.to_str().ok()?;
    let ok = !v.is_empty()
        && v.len() <= 128
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    ok.then(|| v.to_owned())
}

/// The shared state of the public listener.
struct Public {
    gateway: Arc<Gateway>,
    in_flight: Semaphore,
    /// The live shadow mirror, when `[shadow]` is enabled.
    shadow: Option<Arc<Mirror>>,
}

/// Serves V1 traffic on `listener` until `shutdown` resolves, mirroring it
/// through `shadow` when given.
pub async fn serve_public(
    listener: TcpListener,
    tls: Option<crate::tls::Acceptor>,
    gateway: Arc<Gateway>,
    shadow: Option<Arc<Mirror>>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let grace = gateway.config.grace_period;
    let state = Arc::new(Public {
        in_flight: Semaphore::new(gateway.config.limits.max_in_flight),
        shadow,
        gateway,
    });
    // The stack, outermost first. Each layer's reason:
    let service = ServiceBuilder::new()
        // Keys never reach a log line, even at trace level.
        .layer(SetSensitiveRequestHeadersLayer::new([header::AUTHORIZATION, API_KEY]))
        // Every request has an id: the client's if usable, else a new ULID.
        // An unusable client id is dropped first, so the id echoed to the
        // client is the one used in logs and sent upstream.
        .map_request(|mut req: Request<Incoming>| {
            if usable_request_id(req.headers()).is_none() {
                req.headers_mut().remove(&REQUEST_ID);
            }
            req
        })
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeUlid))
        // One span per request; the path is logged without its query.
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request<Incoming>| {
            tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id = tracing::field::Empty, operation = tracing::field::Empty)
        }))
        // A panic in an operation becomes a V1 500 envelope, not a reset.
        .layer(CatchPanicLayer::custom(|_| {
            tracing::error!("operation panicked");
            v1_error(&GatewayError::Internal("panic".into()))
        }))
        .service_fn(move |req| {
            let state = state.clone();
            async move { Ok::<_, Infallible>(handle_v1(&state, req).await) }
        });
    serve(listener, tls, service, shutdown, grace).await
}

async fn handle_v1(state: &Public, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let request_id =
        usable_request_id(req.headers()).unwrap_or_else(|| ulid::Ulid::new().to_string());
    tracing::Span::current().record("request_id", request_id.as_str());
    let Some(op) = route::route(req.method(), req.uri().path()) else {
        return finish(None, Err(GatewayError::UnknownRoute), &request_id, started);
    };
    tracing::Span::current().record("operation", op.name());
    let Ok(_permit) = state.in_flight.try_acquire() else {
        return finish(
            Some(op),
            Err(GatewayError::Overloaded),
            &request_id,
            started,
        );
    };
    metrics::gauge!(telemetry::IN_FLIGHT).increment(1.0);
    let response = match read_request(&state.gateway, op, req, &request_id).await {
        Err(err) => finish(Some(op), Err(err), &request_id, started),
        Ok(read) => {
            // Shadow mode: a copy is chosen before answering and handed to its
            // own task after; the client's answer never waits for it.
            let mirror = state.shadow.as_ref();
            let copy = mirror.and_then(|m| m.sample(op, &read));
            let response = match mirror.filter(|m| m.primary() == Primary::Legacy) {
                Some(m) => match m.proxy(op, &read.call).await {
                    Ok(answer) => relayed(op, answer, started),
                    Err(err) => finish(Some(op), Err(err), &request_id, started),
                },
                None => {
                    let result = translate(&state.gateway, read.v1).await;
                    finish(Some(op), result, &request_id, started)
                }
            };
            if let (Some(m), Some(copy)) = (mirror, copy) {
                m.spawn(copy, &response);
            }
            response
        }
    };
    metrics::gauge!(telemetry::IN_FLIGHT).decrement(1.0);
    response
}

/// Reads and checks a routed request: key, content type, body size.
async fn read_request(
    gw: &Gateway,
    op: Operation,
    req: Request<Incoming>,
    request_id: &str,
) -> Result<ReadRequest, GatewayError> {
    let key = client_key(req.headers())?;
    let (parts, body) = req.into_parts();
    if parts.method == Method::POST {
        check_content_type(&parts.headers)?;
    }
    let limit = gw.config.limits.max_body_bytes;
    let body = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(GatewayError::BadRequest(format!(
                "body is larger than {limit} bytes"
            )));
        }
        Err(e) => {
            return Err(GatewayError::BadRequest(format!(
                "body could not be read ({e})"
            )))
        }
    };
    let query = parts.uri.query().map(str::to_owned);
    Ok(ReadRequest {
        call: V1Call {
            method: parts.method.clone(),
            path: parts.uri.path().to_owned(),
            query: query.clone(),
            headers: V1Call::forwarded_headers(&parts.headers),
            body: body.clone(),
        },
        guarded: parts.headers.contains_key(LOOP_GUARD),
        v1: V1Request {
            op,
            query,
            body,
            key,
            request_id: request_id.to_owned(),
        },
    })
}

/// Runs the translation under the request's deadline.
async fn translate(gw: &Gateway, v1: V1Request) -> Result<ops::Answer, GatewayError> {
    let deadline = if v1.op == Operation::StartRun {
        gw.config.sync_run_timeout + gw.config.request_timeout
    } else {
        gw.config.request_timeout
    };
    match tokio::time::timeout(deadline, ops::handle(gw, v1).in_current_span()).await {
        Ok(result) => result,
        Err(_) => Err(GatewayError::Deadline(deadline)),
    }
}

/// The client's key from `api-key` or `Authorization: Bearer`. A header that
/// is present but unusable is an error rather than silently ignored.
fn client_key(headers: &HeaderMap) -> Result<Option<ApiKey>, GatewayError> {
    let malformed = || GatewayError::Unauthorized("the key header is malformed".into());
    if let Some(v) = headers.get(&API_KEY) {
        return ApiKey::new(v.to_str().map_err(|_| malformed())?)
            .map(Some)
            .ok_or_else(malformed);
    }
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        let v = v.to_str().map_err(|_| malformed())?;
        let token = v
            .strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
            .ok_or_else(malformed)?;
        return ApiKey::new(token).map(Some).ok_or_else(malformed);
    }
    Ok(None)
}

fn check_content_type(headers: &HeaderMap) -> Result<(), GatewayError> {
    match headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or(""))
    {
        None => Ok(()),
        Some(ct) if ct.to_ascii_lowercase().contains("json") => Ok(()),
        Some(_) => Err(GatewayError::bad(
            "Content-Type",
            "must be application/json",
        )),
    }
}

fn finish(
    op: Option<Operation>,
    result: Result<ops::Answer, GatewayError>,
    request_id: &str,
    started: Instant,
) -> Response<Full<Bytes>> {
    let name = op.map_or("unknown", Operation::name);
    let (response, calls) = match result {
        Ok(answer) => {
            let mut resp = json_response(StatusCode::OK, Envelope::success(answer.data).to_bytes());
            if let Some(v) = HeaderValue::from_str(&answer.v2_request_ids.join(", "))
                .ok()
                .filter(|v| !v.is_empty())
            {
                resp.headers_mut().insert(V2_REQUEST_ID, v);
            }
            resp.headers_mut()
                .insert(UPSTREAM_CALLS, HeaderValue::from(answer.upstream_calls));
            (resp, answer.upstream_calls)
        }
        Err(err) => {
            let rendered = err.render();
            match rendered.origin {
                crate::error::Origin::Client => {
                    tracing::info!(error = %err, status = rendered.status.as_u16(), "request refused")
                }
                _ => {
                    tracing::warn!(error = %err, status = rendered.status.as_u16(), cause = rendered.cause, "request failed")
                }
            }
            metrics::counter!(telemetry::ERRORS, "operation" => name, "origin" => rendered.origin.as_str(), "cause" => rendered.cause).increment(1);
            (v1_error(&err), 0)
        }
    };
    let mut response = response;
    if let Ok(v) = HeaderValue::from_str(request_id) {
        response.headers_mut().insert(REQUEST_ID, v);
    }
    let status = response.status().as_u16().to_string();
    metrics::counter!(telemetry::REQUESTS, "operation" => name, "status" => status).increment(1);
    metrics::histogram!(telemetry::REQUEST_DURATION, "operation" => name)
        .record(started.elapsed().as_secs_f64());
    if op.is_some() {
        metrics::histogram!(telemetry::UPSTREAM_CALLS_PER_REQUEST, "operation" => name)
            .record(f64::from(calls));
    }
    response
}

/// The legacy service's answer, relayed as it came (`shadow.primary = "legacy"`).
fn relayed(op: Operation, answer: Received, started: Instant) -> Response<Full<Bytes>> {
    let response = json_response(answer.status, answer.body);
    let status = answer.status.as_u16().to_string();
    metrics::counter!(telemetry::REQUESTS, "operation" => op.name(), "status" => status)
        .increment(1);
    metrics::histogram!(telemetry::REQUEST_DURATION, "operation" => op.name())
        .record(started.elapsed().as_secs_f64());
    response
}

fn v1_error(err: &GatewayError) -> Response<Full<Bytes>> {
    let rendered = err.render();
    let mut resp = json_response(rendered.status, rendered.envelope.to_bytes());
    let h = resp.headers_mut();
    h.insert(
        ERROR_ORIGIN,
        HeaderValue::from_static(rendered.origin.as_str()),
    );
    h.insert(ERROR_CAUSE, HeaderValue::from_static(rendered.cause));
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

fn json_response(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Serves `/healthz`, `/readyz` and `/metrics`.
pub async fn serve_admin(
    listener: TcpListener,
    tls: Option<crate::tls::Acceptor>,
    gateway: Arc<Gateway>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let grace = gateway.config.grace_period;
    let prometheus = telemetry::prometheus();
    let service = tower::service_fn(move |req: Request<Incoming>| {
        let gateway = gateway.clone();
        let prometheus = prometheus.clone();
        async move {
            let text = |status: StatusCode, body: String| {
                let mut r = Response::new(Full::new(Bytes::from(body)));
                *r.status_mut() = status;
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4"),
                );
                r
            };
            let resp = match (req.method(), req.uri().path()) {
                (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n".into()),
                // Ready means "this replica can serve V1": it is running with a
                // valid configuration and accepting. V2 reachability is
                // reported (body and gauge) but does not fail the probe: V2
                // is the same for every replica, so failing on it would take
                // them all out of the Service at once and turn V1 error
                // envelopes into refused connections.
                (&Method::GET, "/readyz") => {
                    let upstream = match upstream_reachable(&gateway).await {
                        Ok(()) => {
                            metrics::gauge!(telemetry::UPSTREAM_REACHABLE).set(1.0);
                            "reachable".to_owned()
                        }
                        Err(why) => {
                            metrics::gauge!(telemetry::UPSTREAM_REACHABLE).set(0.0);
                            why
                        }
                    };
                    text(StatusCode::OK, format!("ready\nupstream: {upstream}\n"))
                }
                (&Method::GET, "/metrics") => match &prometheus {
                    Some(h) => text(StatusCode::OK, h.render()),
                    None => text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "metrics recorder unavailable\n".into(),
                    ),
                },
                _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
            };
            Ok::<_, Infallible>(resp)
        }
    });
    serve(listener, tls, service, shutdown, grace).await
}

/// Whether a TCP connection to the upstream opens, within a deadline short
/// enough for a readiness probe's own timeout (one second by default).
async fn upstream_reachable(gw: &Gateway) -> Result<(), String> {
    // Behind HTTPS_PROXY the first hop is the proxy, not V2.
    let upstream = &gw.config.upstream;
    let (host, port) = upstream
        .proxy
        .first_hop(&upstream.base_url)
        .ok_or("upstream has no host or port")?;
    let host = host.as_str();
    match tokio::time::timeout(
        UPSTREAM_PROBE_TIMEOUT,
        tokio::net::TcpStream::connect((host, port)),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("upstream {host}:{port} unreachable: {e}")),
        Err(_) => Err(format!(
            "upstream {host}:{port} did not accept within {UPSTREAM_PROBE_TIMEOUT:?}"
        )),
    }
}

/// Accepts connections (over TLS when `tls` is given) until `shutdown`
/// flips, then waits up to `grace` for open connections to finish their
/// requests.
pub async fn serve<S, B>(
    listener: TcpListener,
    tls: Option<crate::tls::Acceptor>,
    service: S,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
) -> std::io::Result<()>
where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    let stop = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _peer): (_, SocketAddr) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: back off briefly.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                // Watched from here, so a drain waits for a connection still
                // in its TLS handshake too (bounded by the handshake timeout).
                let (watcher, builder, service, tls) =
                    (graceful.watcher(), builder.clone(), service.clone(), tls.clone());
                tokio::spawn(async move {
                    let Some(stream) = crate::tls::accept(tls.as_ref(), stream).await else {
                        return;
                    };
                    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service));
                    if let Err(e) = watcher.watch(conn.into_owned()).await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
            _ = &mut stop => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(?grace, "grace period over; closing remaining connections");
    }
    Ok(())
}

/// Resolves when the process is asked to stop (SIGTERM or ctrl-c).
pub async fn shutdown_signal() {
    {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(_) => {
                        let _ = ctrl_c.await;
                        return;
                    }
                };
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = ctrl_c.await;
        }
    }
}
