//! The per-connection wrapper around a listener's service. For every request
//! it marks the connection busy, answers
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
use futures_util::future::Either as Called;
use http::{header, HeaderValue, Method, Request, Response, Version};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use tower::util::Oneshot;
use tower::{Service, ServiceExt};

use super::activity::{Activity, Busy};
use super::coalesce::WhenWoken;
use super::drain::Drain;

/// Builds the answer to a request cut at the grace deadline.
pub type CutAnswer = fn() -> Response<Full<Bytes>>;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pin_project_lite::pin_project! {
    /// The body of every answer the connection layer hands hyper: the
    /// service's own, or the cut answer's (also the empty body of a HEAD
    /// answer), neither boxed. It keeps the connection busy until hyper is
    /// done with it (written, or dropped): until then the connection is not
    /// waiting for a next request, and the deadline for that request's head
    /// ([`Activity::quiet_for`]) has not begun.
    pub struct ConnBody<B> {
        #[pin]
        inner: Either<B, Full<Bytes>>,
        _busy: Busy,
    }
}

impl<B> Body for ConnBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[derive(Clone)]
pub struct ConnService<S> {
    pub inner: S,
    pub activity: Arc<Activity>,
    pub drain: Drain,
    pub cut: CutAnswer,
}

/// The grace deadline's signal, for one request (see [`Rest::is_cut`]).
type CutSignal = Pin<Box<dyn Future<Output = ()> + Send>>;

// A hyper service, so hyper calls it directly: through tower's adapter each
// request cloned this service (and its inner stack) once more, and went
// through one more layer of futures.
impl<S, B> hyper::service::Service<Request<Incoming>> for ConnService<S>
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<ConnBody<B>>;
    type Error = Infallible;
    type Future = ConnFuture<S>;

    fn call(&self, req: Request<Incoming>) -> ConnFuture<S> {
        let busy = self.activity.begin();
        let version = req.version();
        let head = req.method() == Method::HEAD;
        // The listeners' services are ready whenever asked (`service_fn`,
        // and tower-http's layers over it): called at once, the request is
        // not kept in the future beside the service's own, which hyper
        // moves into place. A service that is not ready takes tower's
        // general way, on the heap.
        let mut service = self.inner.clone();
        let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
        let answer = match service.poll_ready(&mut cx) {
            Poll::Ready(Ok(())) => Called::Left(service.call(req)),
            Poll::Ready(Err(never)) => match never {},
            Poll::Pending => Called::Right(Box::pin(service.oneshot(req))),
        };
        ConnFuture {
            answer: WhenWoken::new(answer),
            rest: Some(Rest {
                busy,
                drain: self.drain.clone(),
                cut: self.cut,
                head,
                version,
                cut_signal: None,
            }),
        }
    }
}

pin_project_lite::pin_project! {
    /// The answer to one request: the service's, or the cut answer once the
    /// grace deadline passes, whichever is ready first (the service's when
    /// both are). Not boxed: hyper keeps it in place, and the service's own
    /// future is boxed below it (`server`).
    ///
    /// The service's future is polled only when its own waker fired: the
    /// connection's task is also woken for hyper's own sake (its request
    /// body's channel wakes the connection as soon as the body is taken,
    /// after the last of it too), and each such poll would otherwise go down
    /// the whole request's chain of futures to find it still waiting on V2.
    pub struct ConnFuture<S>
    where
        S: Service<Request<Incoming>>,
    {
        #[pin]
        answer: WhenWoken<Called<S::Future, Pin<Box<Oneshot<S, Request<Incoming>>>>>>,
        // Taken when the answer is given.
        rest: Option<Rest>,
    }
}

/// What a request's answer needs besides the service's future.
struct Rest {
    busy: Busy,
    drain: Drain,
    cut: CutAnswer,
    head: bool,
    version: Version,
    /// HTTP/2 only, made when the service is first not ready.
    cut_signal: Option<CutSignal>,
}

impl Rest {
    /// Whether the grace deadline has cut this request. An HTTP/2 stream is
    /// a task of its own and waits for the signal itself. An HTTP/1 request
    /// is polled by its connection's task, which waits for the signal once
    /// for all its requests and, when it comes, marks the connection and
    /// polls the request again (`conn::connection`): the request only looks,
    /// and registers no waker, since that task is the one that marks it.
    fn is_cut(&mut self, cx: &mut Context<'_>) -> bool {
        if self.version != Version::HTTP_2 {
            return self.busy.activity().is_cut();
        }
        let drain = &self.drain;
        let signal = self.cut_signal.get_or_insert_with(|| {
            let drain = drain.clone();
            Box::pin(async move { drain.cut_now().await })
        });
        signal.as_mut().poll(cx).is_ready()
    }
}

impl<S, B> Future for ConnFuture<S>
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>,
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Output = Result<Response<ConnBody<B>>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let answer = match this.answer.poll(cx) {
            Poll::Ready(answer) => answer?.map(Either::Left),
            Poll::Pending => {
                let rest = this.rest.as_mut().expect("polled after its answer");
                if !rest.is_cut(cx) {
                    return Poll::Pending;
                }
                (rest.cut)().map(Either::Right)
            }
        };
        let Rest {
            busy,
            drain,
            head,
            version,
            ..
        } = this.rest.take().expect("polled after its answer");
        let mut resp = answer.map(|inner| ConnBody { inner, _busy: busy });
        if head {
            strip_body(&mut resp);
        }
        if version < Version::HTTP_2 && drain.is_stopping() {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        Poll::Ready(Ok(resp))
    }
}

/// A HEAD answer: the GET answer's headers and length, no body.
fn strip_body<B>(resp: &mut Response<ConnBody<B>>)
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    if let Some(len) = resp.body().size_hint().exact() {
        resp.headers_mut()
            .entry(header::CONTENT_LENGTH)
            .or_insert_with(|| HeaderValue::from(len));
    }
    resp.body_mut().inner = Either::Right(Full::new(Bytes::new()));
}
