//! The per-connection wrapper around a listener's service. For every request
//! it marks the connection busy, hands the request a [`ConnHandle`], answers
//! with the listener's envelope if the grace deadline cuts it, asks HTTP/1
//! clients to close once the listener is stopping, and sends no body to HEAD
//! (hyper leaves that to the service on HTTP/2, where a DATA frame after a
//! HEAD answer is a protocol error for the client).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, Version};
use http_body::Body;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use tower::{Service, ServiceExt};

use super::activity::Activity;
use super::body::ConnHandle;
use super::drain::Drain;

/// Builds the answer to a request cut at the grace deadline.
pub type CutAnswer = fn() -> Response<Full<Bytes>>;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body of every answer the connection layer hands hyper.
pub type ConnBody = UnsyncBoxBody<Bytes, BoxError>;

#[derive(Clone)]
pub struct ConnService<S> {
    pub inner: S,
    pub activity: Arc<Activity>,
    pub drain: Drain,
    pub cut: CutAnswer,
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<Response<ConnBody>, Infallible>> + Send>>;

impl<S, B> Service<Request<Incoming>> for ConnService<S>
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<ConnBody>;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<Incoming>) -> BoxFuture {
        let busy = self.activity.begin();
        let version = req.version();
        if version == Version::HTTP_2 {
            self.activity.saw_http2();
        }
        let head = req.method() == Method::HEAD;
        req.extensions_mut()
            .insert(ConnHandle(self.activity.clone()));
        let answer = self.inner.clone().oneshot(req);
        let drain = self.drain.clone();
        let cut = self.cut;
        Box::pin(async move {
            let _busy = busy;
            let mut resp = tokio::select! {
                biased;
                r = answer => r?.map(|b| b.map_err(Into::into).boxed_unsync()),
                _ = drain.cut_now() => cut().map(|b| b.map_err(|e| match e {}).boxed_unsync()),
            };
            if head {
                strip_body(&mut resp);
            }
            if drain.is_stopping() && version < Version::HTTP_2 {
                resp.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(resp)
        })
    }
}

/// A HEAD answer: the GET answer's headers and length, no body.
fn strip_body(resp: &mut Response<ConnBody>) {
    if let Some(len) = resp.body().size_hint().exact() {
        resp.headers_mut()
            .entry(header::CONTENT_LENGTH)
            .or_insert_with(|| HeaderValue::from(len));
    }
    *resp.body_mut() = Empty::new().map_err(|e| match e {}).boxed_unsync();
}
