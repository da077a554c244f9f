//! The public listener's front, between the connection layer
//! ([`crate::edge::conn`]) and the ways a V1 request can go (the pipeline, the
//! shadow mirror around it, the callback relay): before any of them runs,
//! the request's keys are marked sensitive, its id is settled and its span
//! made; while its answer is worked out, the span is entered and a panic
//! becomes a V1 500 envelope instead of a reset connection.
//!
//! One function and one future in place of the four tower-http layers that
//! did this (sensitive headers, request id, trace, catch-panic): a
//! translated run detail costs about 1,500 instructions less (59.7 k to
//! 58.1 k). The layers allocated an extension map for the id the pipeline
//! then took back out, hashed each sensitive name, read the clock for
//! latencies only their debug lines used, and boxed each answer's body so
//! a panic's answer could share its type. Their debug lines ("started /
//! finished processing request") are gone with them: a V1 request's record
//! is its access line ([`crate::pipeline`]), a callback's a debug line of
//! its own (`server`), a panic's its error line here.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{header, HeaderMap, Request, Response};
use tracing::Span;

use crate::common::request_id::RequestId;
use crate::error::GatewayError;
use crate::pipeline::{self, Pipeline, Settled, API_KEY, REQUEST_ID};
use crate::v1::answer::AnswerBody;
use crate::v1::route::{self, Operation};

/// Marks the headers a key can travel in as sensitive, so that no log line
/// or debug output shows them, even at trace level. A walk over the few
/// headers a request has, comparing names, rather than a hashed lookup per
/// sensitive name.
pub(super) fn mark_sensitive(headers: &mut HeaderMap) {
    for (name, value) in headers.iter_mut() {
        if name == header::AUTHORIZATION || name == API_KEY {
            value.set_sensitive(true);
        }
    }
}

/// The request's id: the client's `x-request-id` if usable (see
/// [`RequestId::usable`]), else a new ULID. An unusable client id is
/// removed from `headers`, so that nothing downstream can pick it up.
fn settle_request_id(headers: &mut HeaderMap) -> RequestId {
    match headers.get(&REQUEST_ID).map(RequestId::usable) {
        Some(Some(id)) => id,
        Some(None) => {
            headers.remove(&REQUEST_ID);
            RequestId::generate()
        }
        None => RequestId::generate(),
    }
}

/// The request's id (see [`settle_request_id`]) and operation, worked out
/// once: for its span and for admission ([`Settled`]).
pub(super) fn settle<B>(req: &mut Request<B>) -> Settled {
    Settled {
        request_id: settle_request_id(req.headers_mut()),
        op: route::route(req.method(), req.uri().path()),
    }
}

/// The request's span. The path is logged without its query, and a
/// callback token, a capability, as its prefix only. The fields are worked
/// out only when the span is on.
pub(super) fn span_of<B>(req: &Request<B>, settled: &Settled) -> Span {
    tracing::info_span!(
        "request",
        method = req.method().as_str(),
        path = crate::callbacks::loggable_path(req.uri().path()),
        request_id = settled.request_id.as_str(),
        operation = settled.op.map(Operation::name)
    )
}

/// Runs `route` (the synchronous part of a request: taking it apart,
/// choosing its way) inside `span`, and guards the future it returns; a
/// panic in either is answered with a V1 500 envelope.
pub(super) fn guarded<F>(
    span: Span,
    pipeline: &Arc<Pipeline>,
    route: impl FnOnce() -> F,
) -> Pin<Box<Guarded<F>>>
where
    F: Future<Output = Response<AnswerBody>>,
{
    // The future is written into its place on the heap from inside the
    // guard: returned through `catch_unwind` and then boxed, the whole
    // future (most of a kilobyte) would be copied once for each step.
    let mut guarded = Box::pin(Guarded {
        inner: None,
        span,
        pipeline: Arc::clone(pipeline),
    });
    let mut this = guarded.as_mut().project();
    let entered = this.span.enter();
    let routed = std::panic::catch_unwind(AssertUnwindSafe(|| {
        this.inner.set(Some(route()));
    }));
    if routed.is_err() {
        log_panic();
    }
    drop(entered);
    guarded
}

pin_project_lite::pin_project! {
    /// A request's answer, worked out inside its span; a panic while it is
    /// (or while the request was routed: `inner` is then `None`) is the V1
    /// 500 envelope, in the dialect configured at that moment.
    pub(super) struct Guarded<F> {
        #[pin]
        inner: Option<F>,
        span: Span,
        pipeline: Arc<Pipeline>,
    }
}

impl<F> Future for Guarded<F>
where
    F: Future<Output = Response<AnswerBody>>,
{
    type Output = Result<Response<AnswerBody>, std::convert::Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let _entered = this.span.enter();
        let polled = match this.inner.as_mut().as_pin_mut() {
            Some(inner) => std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))),
            None => return Poll::Ready(Ok(panic_answer(this.pipeline))),
        };
        match polled {
            Ok(Poll::Ready(answer)) => Poll::Ready(Ok(answer)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => {
                // Dropped here: what it held is freed now, and it cannot be
                // polled again whoever polls this future.
                this.inner.set(None);
                log_panic();
                Poll::Ready(Ok(panic_answer(this.pipeline)))
            }
        }
    }
}

/// One error line for a panic, in the request's span. Not its message: a
/// panic's message can quote the value it failed on (a slice of a body, a
/// header), and keys never reach a log line.
fn log_panic() {
    tracing::error!("operation panicked");
}

fn panic_answer(pipeline: &Pipeline) -> Response<AnswerBody> {
    super::to_http(pipeline::error_response(
        &GatewayError::Internal("panic".into()),
        &pipeline.dialect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                http::HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn keys_are_marked_sensitive_and_nothing_else() {
        let mut map = headers(&[
            ("api-key", "k1"),
            ("authorization", "Bearer k2"),
            ("authorization", "Bearer k3"),
            ("content-type", "application/json"),
            ("x-api-key-hint", "not a key header"),
        ]);
        mark_sensitive(&mut map);
        for (name, value) in &map {
            let key = name == header::AUTHORIZATION || name == API_KEY;
            assert_eq!(value.is_sensitive(), key, "{name}");
        }
        assert!(format!("{map:?}").contains("Sensitive"));
        assert!(!format!("{map:?}").contains("k2"));
    }

    #[test]
    fn a_usable_client_id_is_kept_and_any_other_replaced() {
        let mut kept = headers(&[("x-request-id", "client-id-1")]);
        assert_eq!(settle_request_id(&mut kept), "client-id-1");
        assert_eq!(kept.get(&REQUEST_ID).unwrap(), "client-id-1");

        for bad in ["has space", "semi;colon", &"x".repeat(129)] {
            let mut map = headers(&[("x-request-id", bad)]);
            let id = settle_request_id(&mut map);
            assert_ne!(id, bad);
            assert_eq!(id.as_str().len(), ulid::ULID_LEN, "{bad}");
            assert!(map.get(&REQUEST_ID).is_none(), "{bad} left in the request");
        }
        let id = settle_request_id(&mut HeaderMap::new());
        assert!(id.as_str().len() == ulid::ULID_LEN);
    }

    #[test]
    fn settle_gives_the_request_id_and_the_operation() {
        let mut req = Request::post("/api/v1/run/detail")
            .header("x-request-id", "id-1")
            .body(())
            .unwrap();
        let settled = settle(&mut req);
        assert_eq!(settled.request_id, "id-1");
        assert_eq!(settled.op, Some(Operation::RunDetail));
        let mut unknown = Request::get("/api/v1/nothing").body(()).unwrap();
        assert_eq!(settle(&mut unknown).op, None);
        // Another path on V1, as the router sees it.
        let mut slash = Request::post("/api/v1/run/detail/").body(()).unwrap();
        assert_eq!(settle(&mut slash).op, None);
    }

    fn pipeline() -> Arc<Pipeline> {
        let cfg = crate::config::load(
            "[upstream]\nbase_url = \"http://127.0.0.1:9\"\n",
            Vec::new(),
        )
        .unwrap();
        let upstream = Arc::new(crate::upstream::HttpUpstream::new(cfg.upstream.clone()).unwrap());
        Arc::new(Pipeline::new(Arc::new(cfg.gateway(upstream))))
    }

    async fn answer_of<F>(guarded: Pin<Box<Guarded<F>>>) -> (http::StatusCode, serde_json::Value)
    where
        F: Future<Output = Response<AnswerBody>>,
    {
        use http_body_util::BodyExt;
        let resp = guarded.await.unwrap();
        let status = resp.status();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&body).unwrap())
    }

    fn ok_answer() -> Response<AnswerBody> {
        let body = http_body_util::Full::new(bytes::Bytes::from_static(b"{\"code\":0}"));
        Response::new(AnswerBody::from(body))
    }

    /// Admission answers with what the front settled, without routing the
    /// request again: a path no operation has, settled as a run detail, is
    /// refused as a run detail without its `run_slug`, under the settled id.
    #[tokio::test]
    async fn admission_takes_the_id_and_operation_the_front_settled() {
        use crate::pipeline::RawV1Request;
        let pipeline = pipeline();
        let request = |settled| {
            let mut req = RawV1Request::with_bytes(
                http::Method::POST,
                "/api/v1/nothing",
                None,
                headers(&[("api-key", "k1")]),
                bytes::Bytes::from_static(b"{}"),
            );
            req.settled = settled;
            req
        };
        let unsettled = pipeline.answer(request(None)).await;
        assert_eq!(unsettled.status, http::StatusCode::NOT_FOUND);
        let settled = Settled {
            request_id: RequestId::from_static("front-id"),
            op: Some(Operation::RunDetail),
        };
        let answer = pipeline.answer(request(Some(settled))).await;
        assert_eq!(answer.status, http::StatusCode::BAD_REQUEST);
        assert_eq!(answer.headers[&REQUEST_ID], "front-id");
        let body: serde_json::Value = serde_json::from_slice(&answer.body.to_bytes()).unwrap();
        assert!(
            body["message"].as_str().unwrap().contains("run_slug"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn a_panic_while_routing_or_answering_is_a_v1_500_envelope() {
        let pipeline = pipeline();
        let in_routing = guarded(Span::none(), &pipeline, || -> std::future::Ready<_> {
            panic!("routing failed")
        });
        let in_answer = guarded(Span::none(), &pipeline, || async {
            tokio::task::yield_now().await;
            panic!("answer failed");
            #[allow(unreachable_code)]
            ok_answer()
        });
        for (status, body) in [answer_of(in_routing).await, answer_of(in_answer).await] {
            assert_eq!(status, http::StatusCode::INTERNAL_SERVER_ERROR);
            assert_ne!(body["code"], 0, "{body}");
            assert!(body["message"].is_string(), "{body}");
        }
        // An answer without a panic passes unchanged.
        let fine = guarded(Span::none(), &pipeline, || std::future::ready(ok_answer()));
        assert_eq!(
            answer_of(fine).await,
            (http::StatusCode::OK, serde_json::json!({"code": 0}))
        );
    }
}
