//! HTTP in and out: the public listener and the tower stack in front of the
//! [`pipeline`](crate::pipeline) (sensitive headers, request id, span,
//! catch-panic). It reads a V1 request off the socket, hands
//! it to the pipeline (or to the shadow mirror wrapped around it) and writes
//! the answer back. The admin listener (`/healthz`, `/readyz`, `/metrics`,
//! `/openapi.json`) is [`admin`]. Connections, their deadlines and the drain
//! on shutdown belong to the connection layer ([`crate::conn`]).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::FutureExt;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestId, RequestId, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;

use crate::answer::{AnswerBody, AnswerBytes};
use crate::conn::{self, BodyReader, Drain};
use crate::dialect::Dialect;
use crate::error::GatewayError;
use crate::pipeline::{
    self, request_id_of, BodyError, Pipeline, RawV1Request, V1Response, API_KEY, REQUEST_ID,
};
use crate::route::{self, Operation};
use crate::shadow::Mirror;

pub mod admin;
pub use admin::serve_admin;

/// Request ids are ULIDs unless the client sent a usable one.
#[derive(Clone, Copy, Default)]
struct MakeUlid;

impl MakeRequestId for MakeUlid {
    fn make_request_id<B>(&mut self, _request: &Request<B>) -> Option<RequestId> {
        Some(RequestId::new(pipeline::new_request_id()))
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
    drain: Drain,
) -> std::io::Result<()> {
    // Connection settings are read once: they need a restart to change.
    let gateway = pipeline.gateway();
    let config = &gateway.config;
    let listener_conf = conn::Listener {
        name: "public",
        tls,
        settings: config.connections.clone(),
        grace: config.grace_period,
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
            protocol: Some(protocol_refusal),
        },
    };
    let dialect = pipeline.dialect();
    let state = Arc::new(Public { pipeline, shadow });
    // The stack, outermost first. Each layer's reason:
    let service = ServiceBuilder::new()
        // Keys never reach a log line, even at trace level.
        .layer(SetSensitiveRequestHeadersLayer::new([
            header::AUTHORIZATION,
            API_KEY,
        ]))
        // Every request has an id: the client's if usable, else a new ULID.
        // An unusable client id is dropped first, so the id echoed to the
        // client is the one used in logs and sent upstream.
        .map_request(|mut req: Request<Incoming>| {
            if request_id_of(req.headers()).is_none() {
                req.headers_mut().remove(&REQUEST_ID);
            }
            req
        })
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeUlid))
        // One span per request; the path is logged without its query.
        // Its failure log is off: the pipeline's access line is the one
        // line a failure gets (a 5xx here would be logged a second time).
        // The id settled above and the operation are known here, so they are
        // written with the span rather than recorded into it later (each
        // record costs a lookup and a lock of the span's data).
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|req: &Request<Incoming>| {
                    // The values are worked out only when the span is on.
                    // A callback token is a capability: its path is logged
                    // as its prefix only.
                    tracing::info_span!(
                        "request",
                        method = req.method().as_str(),
                        path = crate::callbacks::loggable_path(req.uri().path()),
                        request_id = req.headers().get(&REQUEST_ID).and_then(|v| v.to_str().ok()),
                        operation =
                            route::route(req.method(), req.uri().path()).map(Operation::name)
                    )
                })
                .on_failure(()),
        )
        // A panic in an operation becomes a V1 500 envelope, not a reset.
        .layer(CatchPanicLayer::custom(move |_| {
            tracing::error!("operation panicked");
            to_http(pipeline::error_response(
                &GatewayError::Internal("panic".into()),
                &dialect,
            ))
        }))
        .service_fn(move |req| handle_v1(&state, req));
    conn::serve(listener, service, listener_conf, drain).await
}

/// The answer to one request, on the heap: each layer above wraps (and the
/// connection layer moves) a pointer, not the request's whole future, which
/// is over a kilobyte.
type V1Future = Pin<Box<dyn Future<Output = Result<Response<AnswerBody>, Infallible>> + Send>>;

/// HTTP in, HTTP out: the pipeline (or the mirror around it) does the rest.
/// The request is taken apart here, before any future exists, and each way
/// through (callback relay, mirror, pipeline) is a future of its own: one
/// future holding the request whole, its parts and each way's state would be
/// the size of all of them, copied as a whole when it is boxed.
fn handle_v1(state: &Arc<Public>, req: Request<Incoming>) -> V1Future {
    // Callback relay: V2's callbacks arrive on the public listener.
    let gateway = state.pipeline.gateway();
    if let Some(relay) = gateway.callbacks() {
        if crate::callbacks::token_of(req.uri().path()).is_some() {
            let relay = relay.clone();
            return Box::pin(async move { Ok(relay.receive(req).await.map(AnswerBody::from)) });
        }
    }
    let (mut parts, body) = req.into_parts();
    let config = &gateway.config;
    let limit = config.limits.max_body_bytes;
    let reader = BodyReader::new(&parts, &body, limit, &config.connections);
    let raw = RawV1Request {
        // Settled by the request-id layer above, which put it here too.
        request_id: parts
            .extensions
            .remove::<RequestId>()
            .map(RequestId::into_header_value),
        method: parts.method,
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts.headers,
        // Boxed: held by value, this future (its deadline timer, the body
        // collector) would be carried twice over in the admission's future.
        body: Box::pin(read_body(reader, body)),
    };
    let pipeline = state.pipeline.clone();
    match state.shadow.clone() {
        Some(mirror) => Box::pin(async move { Ok(to_http(mirror.answer(&pipeline, raw).await)) }),
        // Mapped, not awaited in a future of its own, which would hold the
        // request once more.
        None => Box::pin(Pipeline::answer_by(pipeline, raw).map(|answer| Ok(to_http(answer)))),
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
