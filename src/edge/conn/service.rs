//! The per-connection wrapper around a listener's service. For every request
//! it marks the connection busy, answers
//! with the listener's envelope if the grace deadline cuts it, asks HTTP/1
//! clients to close once the listener is stopping, and sends no body to HEAD
//! (hyper leaves that to the service on HTTP/2, where a DATA frame after a
//! HEAD answer is a protocol error for the client). Each answer's body tells
//! the connection whether hyper has yet to ask it for more ([`Writer`]), and
//! over HTTP/2 gives hyper at most [`H2_SLICE`] at a time, so an answer the
//! client gives no window to is seen waiting, not buffered whole in h2.
//! Each answer's bytes are counted in the memory budget until hyper has
//! taken them, and a request at the budget's bound (or on a connection
//! with `max_held_streams` streams holding bytes) is answered 429 at once
//! ([`super::budget`]).

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

use super::activity::{Activity, Busy, Writer};
use super::budget::{self, Charge, ConnLoad, Held, Holding};
use super::drain::Drain;
use crate::common::coalesce::WhenWoken;

/// Builds the answer to a request cut at the grace deadline.
pub(crate) type CutAnswer = fn() -> Response<Full<Bytes>>;

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The most of an HTTP/2 answer handed to hyper at once (h2's default frame
/// size). Hyper asks for more only once h2 has sent what it holds, which a
/// stream without flow-control window never does: the answer then waits
/// here, seen by the connection's stall watch, and h2 holds at most this
/// much of it.
pub(super) const H2_SLICE: usize = 16 * 1024;

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
        // What is left of a frame sliced for HTTP/2.
        rest: Bytes,
        // `Some(H2_SLICE)` over HTTP/2.
        slice: Option<usize>,
        // The answer's bytes not yet handed to hyper, in the memory budget.
        charge: Charge,
        // Counted among its connection's streams holding bytes while it
        // has bytes to give.
        holding: Option<Holding>,
        // Dropped before `_busy`: the answer stops waiting, then ends.
        writer: Writer,
        _busy: Busy,
    }
}

impl<B> ConnBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    fn new(
        inner: Either<B, Full<Bytes>>,
        busy: Busy,
        slice: Option<usize>,
        load: Option<(&Arc<ConnLoad>, Option<Holding>)>,
    ) -> Self {
        let mut writer = busy.writer();
        // From now on the answer waits only on hyper, and through it on
        // the client: an empty body is never asked for anything.
        let (mut charge, mut holding) = (Charge::none(), None);
        if !inner.is_end_stream() {
            writer.wait();
            if let Some((load, held)) = load {
                // What the answer holds now: all of it for a made answer.
                charge = load.budget.charge(Held::Answer);
                charge.add(inner.size_hint().lower() as usize);
                holding = held;
            }
        }
        ConnBody {
            inner,
            rest: Bytes::new(),
            slice,
            charge,
            holding,
            writer,
            _busy: busy,
        }
    }
}

/// The first `max` bytes of `data` (all of them if `max` is `None`), the
/// rest left in `rest`.
fn slice_off(mut data: Bytes, max: Option<usize>, rest: &mut Bytes) -> Bytes {
    match max {
        Some(max) if data.len() > max => {
            *rest = data.split_off(max);
            data
        }
        _ => data,
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
        let mut this = self.project();
        this.writer.asked();
        let frame = if !this.rest.is_empty() {
            let rest = std::mem::take(this.rest);
            Poll::Ready(Some(Ok(Frame::data(slice_off(
                rest,
                *this.slice,
                this.rest,
            )))))
        } else {
            match this.inner.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(match frame.into_data() {
                    Ok(data) => Frame::data(slice_off(data, *this.slice, this.rest)),
                    Err(frame) => frame,
                }))),
                other => other,
            }
        };
        // Handed to hyper: no longer held here.
        if let Poll::Ready(Some(Ok(f))) = &frame {
            this.charge.release(f.data_ref().map_or(0, Bytes::len));
        }
        // More to give once hyper can write it. A body still waiting on its
        // own source (pending) is not waiting on the client.
        if matches!(frame, Poll::Ready(Some(Ok(_))))
            && !(this.rest.is_empty() && this.inner.is_end_stream())
        {
            this.writer.wait();
        } else if !matches!(frame, Poll::Pending) {
            // Ended (or failed): nothing held any more.
            this.charge.release(this.charge.bytes());
            *this.holding = None;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        if self.rest.is_empty() {
            return inner;
        }
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint.set_lower(inner.lower() + rest);
        hint
    }
}

#[derive(Clone)]
pub(super) struct ConnService<S> {
    pub inner: S,
    pub activity: Arc<Activity>,
    pub drain: Drain,
    pub cut: CutAnswer,
    /// The connection's streams holding bytes, and the memory budget.
    pub load: Arc<ConnLoad>,
    /// The answer at the budget's bound.
    pub over_budget: CutAnswer,
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
        // At the memory bound: answered at once, nothing of it read (the
        // service's future is made, never polled, and dropped).
        let refused = self.load.refusal().map(|reason| {
            budget::refused(reason);
            self.over_budget
        });
        // Counted among the connection's streams holding bytes from now
        // until its answer is taken: its body, then its answer.
        let holding = refused.is_none().then(|| self.load.hold());
        let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
        let answer = match service.poll_ready(&mut cx) {
            _ if refused.is_some() => Called::Right(Box::pin(service.oneshot(req))),
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
                refused,
                load: self.load.clone(),
                holding,
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
    /// The answer at the memory bound, when the request was refused.
    refused: Option<CutAnswer>,
    load: Arc<ConnLoad>,
    holding: Option<Holding>,
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
        let refused = this.rest.as_ref().and_then(|r| r.refused);
        let answer = match refused {
            Some(refusal) => refusal().map(Either::Right),
            None => match this.answer.poll(cx) {
                Poll::Ready(answer) => answer?.map(Either::Left),
                Poll::Pending => {
                    let rest = this.rest.as_mut().expect("polled after its answer");
                    if !rest.is_cut(cx) {
                        return Poll::Pending;
                    }
                    (rest.cut)().map(Either::Right)
                }
            },
        };
        let Rest {
            busy,
            drain,
            head,
            version,
            load,
            holding,
            ..
        } = this.rest.take().expect("polled after its answer");
        let slice = (version == Version::HTTP_2).then_some(H2_SLICE);
        let mut resp =
            answer.map(|inner| ConnBody::new(inner, busy, slice, Some((&load, holding))));
        if head {
            strip_body(&mut resp);
        }
        // From the drain's start (its delay included) HTTP/1 clients are
        // told to close, and a refused request's body was not read.
        if version < Version::HTTP_2 && (drain.is_draining() || refused.is_some()) {
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
    let body = resp.body_mut();
    body.inner = Either::Right(Full::new(Bytes::new()));
    // Nothing left for hyper to ask for, nor held.
    body.writer.asked();
    body.charge.release(body.charge.bytes());
    body.holding = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// Over HTTP/2 an answer goes to hyper a slice at a time, and waits for
    /// hyper between slices; over HTTP/1 in the frames it has.
    #[tokio::test]
    async fn an_http2_answer_is_sliced_and_waits_between_slices() {
        let activity = Activity::new();
        let answer = Full::new(Bytes::from(vec![7u8; 2 * H2_SLICE + 100]));
        let mut body = ConnBody::<Full<Bytes>>::new(
            Either::Right(answer),
            activity.begin(),
            Some(H2_SLICE),
            None,
        );
        assert_eq!(body.size_hint().exact(), Some(2 * H2_SLICE as u64 + 100));
        let mut sizes = Vec::new();
        while let Some(frame) = body.frame().await {
            sizes.push(frame.unwrap().into_data().unwrap().len());
            if !body.is_end_stream() {
                assert_eq!(
                    body.size_hint().exact(),
                    Some(2 * H2_SLICE as u64 + 100 - sizes.iter().sum::<usize>() as u64)
                );
            }
        }
        assert_eq!(sizes, [H2_SLICE, H2_SLICE, 100]);
        drop(body);
        assert_eq!(activity.active(), 0);
        let whole = Full::new(Bytes::from(vec![7u8; 2 * H2_SLICE]));
        let mut body =
            ConnBody::<Full<Bytes>>::new(Either::Right(whole), activity.begin(), None, None);
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap().len(), 2 * H2_SLICE);
        assert!(body.is_end_stream());
    }
}
