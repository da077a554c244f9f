//! The public listener's front, between the connection layer and
//! [`super::handle_v1`]: what every V1 request passes before the pipeline.
//! In order, as the tower-http layers it stands for did (they are still the
//! stack of the admin listener, [`super::admin`]):
//!
//! * keys are marked sensitive (`authorization`, `api-key`), so no `Debug`
//!   of the headers shows them (tower-http's `SetSensitiveRequestHeaders`);
//! * a client `x-request-id` that is not usable is dropped, and a request
//!   without one gets a new ULID (`SetRequestId`): the id echoed to the
//!   client is the one logged and sent upstream;
//! * one `request` span, created only when its level is enabled, with the
//!   debug events at its start and end (`Trace`; its failure log is off: the
//!   pipeline's access line is the one line a failure gets);
//! * a panic becomes a V1 500 envelope, not a reset (`CatchPanic`).
//!
//! One service rather than four layers because the layers cost more than
//! their work on this path: each wraps the request future (which is moved
//! at every wrap) and, for `Trace`, the response body. Measured in
//! `deploy/bench/RESULTS.md` ("After: the HTTP side").

use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use futures_util::FutureExt;
use http::{header, HeaderMap, HeaderValue, Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use tracing::{Instrument, Level};

use super::Public;
use crate::dialect::Dialect;
use crate::error::GatewayError;
use crate::pipeline::{self, request_id_of, API_KEY, REQUEST_ID};

type Answer = Response<Full<Bytes>>;

/// The service the public listener's connections call.
#[derive(Clone)]
pub(super) struct Front {
    pub(super) state: Arc<Public>,
    /// The dialect a panic is answered in (fixed at start, as the
    /// connection-level answers).
    pub(super) dialect: Dialect,
}

impl tower::Service<Request<Incoming>> for Front {
    type Response = Answer;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<Incoming>) -> Self::Future {
        prepare_headers(req.headers_mut());
        let span = request_span(&req);
        let state = self.state.clone();
        let dialect = self.dialect;
        // Boxed here, at the bottom: the connection layer then moves a
        // pointer, not the request's whole future.
        Box::pin(
            async move {
                // tower-http's `Trace` events; the clock is read only when
                // they are on.
                let started = tracing::enabled!(Level::DEBUG).then(Instant::now);
                tracing::debug!("started processing request");
                let resp = match AssertUnwindSafe(super::handle_v1(&state, req))
                    .catch_unwind()
                    .await
                {
                    Ok(resp) => resp,
                    Err(_) => panic_answer(&dialect),
                };
                if let Some(started) = started {
                    tracing::debug!(
                        latency = %format_args!("{} ms", started.elapsed().as_millis()),
                        status = resp.status().as_u16(),
                        "finished processing request"
                    );
                }
                Ok(resp)
            }
            .instrument(span),
        )
    }
}

/// Keys marked sensitive; the request id made usable (see the module doc).
fn prepare_headers(headers: &mut HeaderMap) {
    for name in [header::AUTHORIZATION, API_KEY] {
        if let header::Entry::Occupied(mut entry) = headers.entry(name) {
            for value in entry.iter_mut() {
                value.set_sensitive(true);
            }
        }
    }
    if request_id_of(headers).is_none() {
        let mut buf = [0u8; ulid::ULID_LEN];
        let id = ulid::Ulid::new();
        let id = HeaderValue::from_str(id.array_to_str(&mut buf))
            .expect("a ULID is a valid header value");
        headers.insert(REQUEST_ID, id);
    }
}

/// The request's span (`Span::none()` when its level is off). The path is logged without its
/// query, and a callback token (a capability) as its prefix only.
fn request_span(req: &Request<Incoming>) -> tracing::Span {
    let path = crate::callbacks::loggable_path(req.uri().path());
    tracing::info_span!(
        "request",
        method = %req.method(),
        path = %path,
        request_id = tracing::field::Empty,
        operation = tracing::field::Empty
    )
}

/// The answer to a request whose handling panicked: a V1 500 envelope.
fn panic_answer(dialect: &Dialect) -> Answer {
    tracing::error!("operation panicked");
    super::to_http(pipeline::error_response(
        &GatewayError::Internal("panic".into()),
        dialect,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    #[test]
    fn a_panic_is_a_v1_500_envelope() {
        let resp = panic_answer(&Dialect::default());
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            resp.headers()[header::CONTENT_TYPE],
            HeaderValue::from_static("application/json")
        );
        assert_eq!(resp.headers()[pipeline::ERROR_ORIGIN], "gateway");
    }

    #[test]
    fn keys_are_marked_sensitive_and_an_unusable_id_is_replaced() {
        let mut headers = HeaderMap::new();
        headers.insert(API_KEY, HeaderValue::from_static("k1"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer k2"));
        headers.insert(REQUEST_ID, HeaderValue::from_static("bad id with spaces"));
        prepare_headers(&mut headers);
        assert!(headers[API_KEY].is_sensitive());
        assert!(headers[header::AUTHORIZATION].is_sensitive());
        let id = headers[REQUEST_ID].to_str().unwrap();
        assert_eq!(id.len(), ulid::ULID_LEN);
        assert!(ulid::Ulid::from_string(id).is_ok());
        // A usable client id is kept as sent.
        let mut headers = HeaderMap::new();
        headers.insert(REQUEST_ID, HeaderValue::from_static("client-1"));
        prepare_headers(&mut headers);
        assert_eq!(headers[REQUEST_ID], "client-1");
    }
}
