//! The bare translation's `features` mode: a run detail translated as in
//! `answer`, with the least each of the gateway's own features on that
//! path can cost around it. Each is here in the cheapest form it has, the
//! gateway's own code where it is one call (the request id, the key, the
//! run id, the metric handles and recorder), so that what the count says
//! is how much a request path that does all of this must spend, however it
//! is laid out. Not here: what a connection pays once (its drain and write
//! watch), and anything on a failure's path.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use v1compat::common::request_id::RequestId;
use v1compat::telemetry::handles::{RequestMetrics, RouteMetrics, UpstreamMetrics};
use v1compat::upstream::ApiKey;
use v1compat::v1::route::Operation;
use v1compat::v2::Segment;

use super::{status, v1_envelope, DetailBody, Target, X_REQUEST_ID, X_V2_REQUEST_ID};

/// The gateway's defaults.
const MAX_IN_FLIGHT: usize = 1024;
const MAX_BODY: usize = 64 * 1024;
const MAX_ANSWER: usize = 16 * 1024 * 1024;
const DEADLINE: Duration = Duration::from_secs(10);
const V2_ROUTE: &str = "/api/v2/worker-runs/{id}";

/// What the features keep between requests.
pub(crate) struct Features {
    in_flight: Semaphore,
    /// Idle V2 connections, last in first out.
    pool: Mutex<Vec<SendRequest<Full<Bytes>>>>,
    /// The retry budget: each first attempt deposits a tenth of a retry.
    budget: AtomicU64,
    requests: RequestMetrics,
    upstream: RouteMetrics,
}

impl Features {
    /// Installs the gateway's recorder and logging (at `warn`, as the
    /// benchmarks run it) and resolves the handles, as the gateway does.
    pub(crate) fn new() -> Features {
        v1compat::telemetry::prometheus();
        v1compat::telemetry::init_logging("text", "warn");
        let upstream = UpstreamMetrics::resolve();
        let route = upstream.route(V2_ROUTE).expect("a known V2 route");
        Features {
            in_flight: Semaphore::new(MAX_IN_FLIGHT),
            pool: Mutex::new(Vec::new()),
            budget: AtomicU64::new(0),
            requests: RequestMetrics::resolve(),
            upstream: RouteMetrics {
                answered_2xx: route.answered_2xx.clone(),
                duration: route.duration.clone(),
            },
        }
    }

    /// The answer to `req`, a panic answered as a 500.
    pub(crate) async fn answer(
        &self,
        target: &Target,
        req: Request<Incoming>,
    ) -> Response<Full<Bytes>> {
        AssertUnwindSafe(self.translate(target, req))
            .catch_unwind()
            .await
            .unwrap_or_else(|_| status(StatusCode::INTERNAL_SERVER_ERROR))
    }

    async fn translate(&self, target: &Target, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let started = Instant::now();
        let Ok(_slot) = self.in_flight.try_acquire() else {
            return status(StatusCode::SERVICE_UNAVAILABLE);
        };
        self.requests.in_flight.increment(1.0);
        let answer = self.run_detail(target, req).await;
        let metrics = self.requests.operation(Operation::RunDetail);
        metrics.answered_ok.increment(1);
        metrics.duration.record(started.elapsed().as_secs_f64());
        metrics.upstream_calls.record(1.0);
        self.requests.in_flight.decrement(1.0);
        if tracing::enabled!(tracing::Level::INFO) {
            tracing::info!(status = answer.status().as_u16(), "access");
        }
        answer
    }

    async fn run_detail(&self, target: &Target, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let (parts, body) = req.into_parts();
        if parts.method != http::Method::POST || parts.uri.path() != "/api/v1/run/detail" {
            return status(StatusCode::NOT_FOUND);
        }
        let id = parts
            .headers
            .get(X_REQUEST_ID)
            .and_then(RequestId::usable)
            .unwrap_or_else(RequestId::generate);
        let Some(key) = parts
            .headers
            .get("api-key")
            .and_then(|v| ApiKey::new(v.to_str().ok()?))
        else {
            return status(StatusCode::UNAUTHORIZED);
        };
        let Ok(body) = Limited::new(body, MAX_BODY).collect().await else {
            return status(StatusCode::PAYLOAD_TOO_LARGE);
        };
        let Ok(input) = serde_json::from_slice::<DetailBody>(&body.to_bytes()) else {
            return status(StatusCode::BAD_REQUEST);
        };
        let Ok(slug) = Segment::new(&input.run_slug) else {
            return status(StatusCode::BAD_REQUEST);
        };
        let Ok(uri) = format!("/api/v2/worker-runs/{}", slug.as_str()).parse() else {
            return status(StatusCode::BAD_REQUEST);
        };
        let mut v2 = Request::new(Full::new(Bytes::new()));
        *v2.uri_mut() = uri;
        // A checked key is visible ASCII: always a header value.
        let Ok(bearer) = HeaderValue::from_maybe_shared(Bytes::from(
            [b"Bearer ", key.expose().as_bytes()].concat(),
        )) else {
            return status(StatusCode::UNAUTHORIZED);
        };
        let mut headers = target.to_v2.clone();
        for (name, value) in headers.iter_mut() {
            if name == header::AUTHORIZATION {
                *value = bearer.clone();
            } else if name == X_REQUEST_ID {
                *value = id.header().clone();
            }
        }
        *v2.headers_mut() = headers;
        self.budget.fetch_add(1, Ordering::Relaxed);
        let sent = Instant::now();
        let Ok(Some((head, body))) = tokio::time::timeout(DEADLINE, self.send(target, v2)).await
        else {
            return status(StatusCode::BAD_GATEWAY);
        };
        self.upstream.answered_2xx.increment(1);
        self.upstream.duration.record(sent.elapsed().as_secs_f64());
        let Some(envelope) = v1_envelope(&body) else {
            return status(StatusCode::BAD_GATEWAY);
        };
        let mut resp = Response::new(Full::new(Bytes::from(envelope)));
        let mut headers = target.to_client.clone();
        let v2_id = head.headers.get(X_REQUEST_ID);
        for (name, value) in headers.iter_mut() {
            if name == X_V2_REQUEST_ID {
                if let Some(v2_id) = v2_id {
                    *value = v2_id.clone();
                }
            } else if name == X_REQUEST_ID {
                *value = id.header().clone();
            }
        }
        *resp.headers_mut() = headers;
        resp
    }

    /// `req` to V2 on an idle pooled connection, or a new one; the answer's
    /// head and whole body, the connection given back once it is read.
    async fn send(
        &self,
        target: &Target,
        req: Request<Full<Bytes>>,
    ) -> Option<(http::response::Parts, Bytes)> {
        let idle = self.pool.lock().ok()?.pop();
        let mut sender = match idle.filter(|s| !s.is_closed()) {
            Some(sender) => sender,
            None => {
                let stream = TcpStream::connect(&target.authority).await.ok()?;
                let _ = stream.set_nodelay(true);
                let (sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .ok()?;
                tokio::spawn(connection);
                sender
            }
        };
        sender.ready().await.ok()?;
        let answer = sender.send_request(req).await.ok()?;
        let (head, body) = answer.into_parts();
        let body = Limited::new(body, MAX_ANSWER)
            .collect()
            .await
            .ok()?
            .to_bytes();
        self.pool.lock().ok()?.push(sender);
        Some((head, body))
    }
}
