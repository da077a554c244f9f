//! HTTP in and out: the listeners and the tower stack in front of the
//! [`pipeline`](crate::pipeline). The public listener reads a V1 request off
//! the socket, hands it to the pipeline (or to the shadow mirror wrapped
//! around it) and writes the answer back; the admin listener serves
//! `/healthz`, `/readyz` and `/metrics`. Both shut down gracefully: stop
//! accepting, let in-flight requests finish within the grace period.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestId, RequestId, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;

use crate::error::GatewayError;
use crate::ops::Gateway;
use crate::pipeline::{
    self, usable_request_id, BodyError, Pipeline, RawV1Request, V1Response, API_KEY, REQUEST_ID,
};
use crate::shadow::Mirror;
use crate::telemetry;

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

/// The shared state of the public listener.
struct Public {
    pipeline: Arc<Pipeline>,
    /// The live shadow mirror, when `[shadow]` is enabled; it wraps the
    /// pipeline.
    shadow: Option<Arc<Mirror>>,
}

/// Serves V1 traffic on `listener` until `shutdown` resolves, through
/// `pipeline`, mirrored through `shadow` when given.
pub async fn serve_public(
    listener: TcpListener,
    tls: Option<crate::tls::Acceptor>,
    pipeline: Arc<Pipeline>,
    shadow: Option<Arc<Mirror>>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let grace = pipeline.gateway().config.grace_period;
    let state = Arc::new(Public { pipeline, shadow });
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
            to_http(pipeline::error_response(&GatewayError::Internal("panic".into())))
        }))
        .service_fn(move |req| {
            let state = state.clone();
            async move { Ok::<_, Infallible>(handle_v1(&state, req).await) }
        });
    serve(listener, tls, service, shutdown, grace).await
}

/// HTTP in, HTTP out: the pipeline (or the mirror around it) does the rest.
async fn handle_v1(state: &Public, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let limit = state.pipeline.gateway().config.limits.max_body_bytes;
    let raw = RawV1Request {
        method: parts.method,
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts.headers,
        body: read_body(body, limit),
    };
    let answer = match &state.shadow {
        Some(mirror) => mirror.answer(&state.pipeline, raw).await,
        None => state.pipeline.answer(raw).await,
    };
    to_http(answer)
}

/// Reads the request body from the socket, at most `limit` bytes.
async fn read_body(body: Incoming, limit: usize) -> Result<Bytes, BodyError> {
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge),
        Err(e) => Err(BodyError::Unreadable(e.to_string())),
    }
}

fn to_http(answer: V1Response) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(answer.body));
    *resp.status_mut() = answer.status;
    *resp.headers_mut() = answer.headers;
    resp
}

/// Serves `/healthz`, `/readyz` and `/metrics`.
pub async fn serve_admin(
    listener: TcpListener,
    tls: Option<crate::tls::Acceptor>,
    live: Arc<crate::reload::Live>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let grace = live.load().config.grace_period;
    let prometheus = telemetry::prometheus();
    let service = tower::service_fn(move |req: Request<Incoming>| {
        let gateway = live.load();
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
