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
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use tower::{Service, ServiceExt};

use super::activity::{Activity, Busy};
use super::body::ConnHandle;
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

type BoxFuture<B> = Pin<Box<dyn Future<Output = Result<Response<ConnBody<B>>, Infallible>> + Send>>;

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
    type Future = BoxFuture<B>;

    fn call(&self, mut req: Request<Incoming>) -> BoxFuture<B> {
        let busy = self.activity.begin();
        let version = req.version();
        // (The connection is marked HTTP/2 by its preface, `conn::refusal`.)
        let http2 = version == Version::HTTP_2;
        let head = req.method() == Method::HEAD;
        req.extensions_mut()
            .insert(ConnHandle(self.activity.clone()));
        let inner = self.inner.clone();
        let activity = self.activity.clone();
        let drain = self.drain.clone();
        let cut = self.cut;
        Box::pin(async move {
            // Made and pinned in place: raced by reference, not moved into
            // the race.
            let mut answer = std::pin::pin!(inner.oneshot(req));
            // The grace deadline. An HTTP/2 stream is a task of its own and
            // waits for the signal itself. An HTTP/1 request is polled by its
            // connection's task, which waits for the signal once for all its
            // requests and, when it comes, marks the connection and polls the
            // request again (`conn::connection`): the request only looks.
            let cut_now = async {
                if http2 {
                    drain.cut_now().await;
                } else {
                    CutMarked(&activity).await;
                }
            };
            let mut resp = tokio::select! {
                biased;
                r = &mut answer => r?.map(Either::Left),
                _ = cut_now => cut().map(Either::Right),
            }
            .map(|inner| ConnBody { inner, _busy: busy });
            if head {
                strip_body(&mut resp);
            }
            if version < Version::HTTP_2 && drain.is_stopping() {
                resp.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(resp)
        })
    }
}

/// Ready once the connection is marked cut; it registers no waker, since
/// the connection's task that polls it is the one that marks it (HTTP/1
/// only, see [`ConnService::call`]).
struct CutMarked<'a>(&'a Activity);

impl Future for CutMarked<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.0.is_cut() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
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
