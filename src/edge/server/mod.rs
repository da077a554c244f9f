//! HTTP in and out: the public listener and its front (`front`: keys
//! marked sensitive, the request id, the span, a panic's answer) before the
//! [`pipeline`]. It reads a V1 request off the socket, hands it to the
//! pipeline (or to the shadow mirror wrapped around it) and writes
//! the answer back. The admin listener (`/healthz`, `/readyz`, `/metrics`,
//! `/openapi.json`) is [`admin`]. Connections, their deadlines and the drain
//! on shutdown belong to the connection layer ([`crate::edge::conn`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::Either;
use futures_util::FutureExt;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::net::TcpListener;

use crate::callbacks::Relay;
use crate::edge::conn::{self, BodyReader, ConnHandle, ConnSettings, Drain};
use crate::error::GatewayError;
use crate::pipeline::{self, BodyError, Pipeline, RawV1Request, Settled, V1Response};
use crate::shadow::Mirror;
use crate::v1::answer::{AnswerBody, AnswerBytes};
use v1compat_contract::dialect::Dialect;

pub(crate) mod admin;
mod front;
pub(crate) mod operator;
mod reachability;
pub use admin::{serve_admin, OperatorEndpoints};

/// The shared state of the public listener.
struct Public {
    pipeline: Arc<Pipeline>,
    /// The live shadow mirror, when `[shadow]` is enabled; it wraps the
    /// pipeline.
    shadow: Option<Arc<Mirror>>,
    /// The callback relay, when `[callbacks]` is in relay mode: V2's
    /// callbacks arrive on this listener. Started once, before serving.
    relay: Option<Arc<Relay>>,
    /// `[connections]`, for each request's body reader.
    connections: ConnSettings,
}

/// Serves V1 traffic on `listener` until `shutdown` resolves, through
/// `pipeline`, mirrored through `shadow` when given; V2's callbacks go to
/// `relay`, when given.
pub async fn serve_public(
    listener: TcpListener,
    tls: Option<crate::edge::tls::Acceptor>,
    settings: crate::edge::Settings,
    pipeline: Arc<Pipeline>,
    shadow: Option<Arc<Mirror>>,
    relay: Option<Arc<Relay>>,
    drain: Drain,
) -> std::io::Result<()> {
    // Connection settings are read once: they need a restart to change.
    let listener_conf = conn::Listener {
        name: "public",
        tls,
        settings: settings.connections.clone(),
        grace: settings.grace_period,
        answers: conn::Answers {
            // Connection-level answers, before any request is read: always in
            // the default dialect (their statuses are what load balancers
            // and clients back off on).
            cut: || {
                to_http_full(pipeline::error_response(
                    &GatewayError::ShuttingDown,
                    &Dialect::default(),
                ))
            },
            shed: || {
                let mut resp =
                    pipeline::error_response(&GatewayError::Overloaded, &Dialect::default());
                resp.headers.insert(
                    pipeline::ERROR_CAUSE,
                    HeaderValue::from_static("connection_limit"),
                );
                to_http_full(resp)
            },
            // The memory budget's bound (`conn::budget`): the same 429 /
            // 4290, its cause named.
            over_budget: || {
                let mut resp =
                    pipeline::error_response(&GatewayError::Overloaded, &Dialect::default());
                resp.headers.insert(
                    pipeline::ERROR_CAUSE,
                    HeaderValue::from_static("memory_budget"),
                );
                to_http_full(resp)
            },
            protocol: Some(protocol_refusal),
        },
    };
    let state = Arc::new(Public {
        pipeline,
        shadow,
        relay,
        connections: settings.connections,
    });
    // In front of every request: keys marked sensitive, its id settled, its
    // span, a panic answered with a 500 envelope (`front`). Each
    // connection's service knows the connection, for its requests' bodies.
    let service_of = move |conn: &ConnHandle| {
        let (state, conn) = (state.clone(), conn.clone());
        tower::service_fn(move |req| handle_v1(&state, &conn, req))
    };
    conn::serve_each(listener, service_of, listener_conf, drain).await
}

/// HTTP in, HTTP out: the front (`front`) first, then the pipeline (or the
/// mirror around it) does the rest. The answer is on the heap: the
/// connection layer holds (and moves) a pointer, not the request's whole
/// future, which is over a kilobyte.
fn handle_v1(
    state: &Arc<Public>,
    conn: &ConnHandle,
    mut req: Request<Incoming>,
) -> Pin<Box<front::Guarded<impl Future<Output = Response<AnswerBody>> + Send>>> {
    front::mark_sensitive(req.headers_mut());
    let settled = front::settle(&mut req);
    let span = front::span_of(&req, &settled);
    front::guarded(span, &state.pipeline, || {
        route_v1(state, conn, req, settled)
    })
}

/// The ways other than the pipeline's alone (the callback relay, the
/// mirror), on the heap of their own: they are not what most requests take.
type Detour = Pin<Box<dyn Future<Output = Response<AnswerBody>> + Send>>;

/// The future of one request's way through. The request is taken apart
/// here, before any future exists, and each way (callback relay, mirror,
/// pipeline) is a future of its own: one future holding the request whole,
/// its parts and each way's state would be the size of all of them, copied
/// as a whole when it is boxed.
fn route_v1(
    state: &Arc<Public>,
    conn: &ConnHandle,
    req: Request<Incoming>,
    settled: Settled,
) -> impl Future<Output = Response<AnswerBody>> + Send {
    // RFC 9112 §3.2: an HTTP/1.1 request with no Host, or more than one,
    // is answered 400.
    if let Some(problem) = host_problem(&req) {
        let refused: Detour = Box::pin(async move {
            let mut resp = pipeline::error_response(
                &GatewayError::BadRequest(problem.into()),
                &Dialect::default(),
            );
            resp.headers
                .insert(pipeline::ERROR_CAUSE, HeaderValue::from_static("protocol"));
            to_http(resp)
        });
        return Either::Left(refused);
    }
    // Callback relay: V2's callbacks arrive on the public listener.
    if let Some(relay) = &state.relay {
        if crate::callbacks::token_of(req.uri().path()).is_some() {
            let relay = relay.clone();
            // The same body deadline as a V1 request's.
            let deadline = state.connections.body_read_timeout;
            let relayed: Detour = Box::pin(async move {
                let answer = relay.receive(req, deadline).await;
                // The relay counts its outcomes; this is their log line.
                tracing::debug!(
                    status = answer.status().as_u16(),
                    "callback request answered"
                );
                answer.map(AnswerBody::from)
            });
            return Either::Left(relayed);
        }
    }
    let (parts, body) = req.into_parts();
    // The body limit is live: the snapshot as it is now (admission loads
    // it again, for the request's whole way through).
    let limit = state.pipeline.gateway().settings.max_body_bytes;
    let reader = BodyReader::new(&parts, &body, limit, &state.connections, conn);
    let raw = RawV1Request {
        settled: Some(settled),
        method: parts.method,
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts.headers,
        // Boxed: held by value, this future (its deadline timer, the body
        // collector) would be carried twice over in the admission's future.
        body: Box::pin(read_body(reader, body)),
        peer: conn.peer().map(|p| p.ip()),
    };
    let pipeline = state.pipeline.clone();
    match state.shadow.clone() {
        Some(mirror) => {
            let mirrored: Detour =
                Box::pin(async move { to_http(mirror.answer(&pipeline, raw).await) });
            Either::Left(mirrored)
        }
        // Mapped, not awaited in a future of its own, which would hold the
        // request once more.
        None => Either::Right(Pipeline::answer_by(pipeline, raw).map(to_http)),
    }
}

/// What is wrong with an HTTP/1.1 request's `Host` header, if anything:
/// exactly one is required (HTTP/1.0 may omit it; HTTP/2 has `:authority`).
fn host_problem<B>(req: &Request<B>) -> Option<&'static str> {
    if req.version() != http::Version::HTTP_11 {
        return None;
    }
    let mut hosts = req.headers().get_all(http::header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (None, _) => Some("the request has no Host header"),
        (Some(_), Some(_)) => Some("the request has more than one Host header"),
        _ => None,
    }
}

/// Reads the request body from the socket, at most `limits.max_body_bytes`, within
/// `connections.body_read_timeout_ms`. The reader's future is mapped where
/// it is, not awaited in a future of its own that would hold it a second
/// time.
fn read_body(
    reader: BodyReader,
    body: Incoming,
) -> impl Future<Output = Result<Bytes, BodyError>> + Send {
    reader.read(body).map(|read| {
        read.map_err(|e| match e {
            conn::BodyError::TooLarge(_) => BodyError::TooLarge,
            conn::BodyError::Timeout(d) => BodyError::Timeout(d),
            conn::BodyError::Broken(e) => BodyError::Unreadable(e),
            conn::BodyError::OverBudget => BodyError::OverBudget,
        })
    })
}

/// The envelope in place of hyper's own empty answer to a head it could
/// not parse; the status stays hyper's.
fn protocol_refusal(status: StatusCode) -> Bytes {
    let problem = match status {
        StatusCode::URI_TOO_LONG => "the request URI is too long",
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => {
            "the request headers are too many or too large"
        }
        _ => "the request line or headers could not be parsed as HTTP",
    };
    // Before any request exists: the default dialect, like the connection
    // layer's other refusals.
    let mut resp = to_http(pipeline::error_response(
        &GatewayError::BadRequest(problem.into()),
        &Dialect::default(),
    ));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(pipeline::ERROR_CAUSE, HeaderValue::from_static("protocol"));
    conn::http1_bytes(resp)
}

fn to_http(answer: V1Response) -> Response<AnswerBody> {
    with_body(answer, AnswerBody::from)
}

/// [`to_http`] as one buffer, for the connection layer's own answers (an
/// error envelope: one buffer already, not copied).
fn to_http_full(answer: V1Response) -> Response<Full<Bytes>> {
    with_body(answer, |bytes| Full::new(bytes.to_bytes()))
}

fn with_body<B>(answer: V1Response, body: impl FnOnce(AnswerBytes) -> B) -> Response<B> {
    let mut resp = Response::new(body(answer.body));
    *resp.status_mut() = answer.status;
    *resp.headers_mut() = answer.headers;
    resp
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
