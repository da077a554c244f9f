//! The connection layer, in front of each listener's service: the
//! accept loop with its cap on open connections, hyper's HTTP/1 and HTTP/2
//! settings (head-read deadline, stream limit), the idle timeout, the write
//! timeout for answers the client does not take, reading
//! request bodies under a deadline ([`body`]), and the drain sequence on
//! shutdown ([`drain`]). Every connection task, and every task hyper
//! spawns (HTTP/2 streams, the V2 client's connections), absorbs the
//! wake-ups it gives itself ([`coalesce`]).
//!
//! ```text
//! accept ─▶ cap (full: 429 envelope, close) ─▶ connection task (in Coalesce, multi-threaded)
//!   connection task: hyper auto (h1 | h2) over Refusals(TLS?(SharedStream))
//!     ├─ ConnService: busy count, HEAD without body, cut envelope, close after stop
//!     ├─ idle for idle_timeout → graceful close (HTTP/2: closed write_timeout later
//!     │  if nothing is in progress and streams still hold answer bytes)
//!     ├─ no write progress for write_timeout while an answer waits → closed
//!     ├─ HTTP/1: no request header_read_timeout after the last answer
//!     │  → graceful close if nothing was sent, else closed at once
//!     └─ stop → close now if idle and nothing unread, else after the request
//! ```
//!
//! Protocol-level refusals that hyper writes itself (a request line or
//! header it cannot parse → 400, a URI over its limit → 414, too many or
//! too large headers → 431) come with an empty body and no hook to change
//! it; `refusal` recognises them on the way out, on the plaintext side of
//! TLS, and writes the listener's envelope instead. What hyper refuses without any answer (garbage HTTP/2
//! frames, a head that never completes) is closed without one;
//! docs/errors-and-dialects.md lists these cases.

pub(crate) mod activity;
pub(crate) mod body;
pub(crate) mod budget;
pub(crate) mod drain;
mod refusal;
mod service;
pub(crate) mod settings;
mod stream;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

pub(crate) use body::{BodyError, BodyReader, ConnHandle};
pub(crate) use drain::Drain;
pub(crate) use service::CutAnswer;
pub(crate) use settings::{ConnSettings, ConnectionSection};

use crate::common::coalesce::{worth_coalescing, Coalesce, CoalescingExecutor, WhenWoken};
use crate::telemetry::{OPEN_CONNECTIONS, SHED_CONNECTIONS, WRITE_STALLED_CONNECTIONS};
use activity::{Activity, Quiet, Stall};
use refusal::Refusals;
use service::ConnService;
use stream::SharedStream;

/// File descriptors kept for everything that is not a client connection:
/// upstream pool, listeners, capture files, the runtime.
const FD_RESERVE: u64 = 256;
/// Refusals written at the cap at once; past this a connection is just closed.
const MAX_SHEDDING: usize = 64;
/// How long a refusal at the cap may take to write and linger.
const SHED_TIMEOUT: Duration = Duration::from_secs(1);
/// While draining, how long an idle HTTP/1 connection must have been quiet
/// before it is closed: longer than a keep-alive client's usual pause
/// between requests (a client pausing 200–300 ms lost requests at 250 ms),
/// so its next request is written into a connection that answers it.
const DRAIN_QUIET: Duration = Duration::from_secs(1);
/// The HTTP/2 flow-control window of each stream's request body.
const STREAM_WINDOW: u32 = 65_535;
/// After the cut, how long answers already produced get to be written.
const CUT_WRITE_BOUND: Duration = Duration::from_secs(2);

/// What a listener answers in the cases the connection layer handles alone.
#[derive(Clone, Copy)]
pub(crate) struct Answers {
    /// A request still in progress at the grace deadline.
    pub cut: CutAnswer,
    /// A connection over the cap (written as raw HTTP/1.1 before closing).
    pub shed: fn() -> Response<Full<Bytes>>,
    /// A request at the memory bound ([`budget`]), not read.
    pub over_budget: fn() -> Response<Full<Bytes>>,
    /// In place of hyper's empty 400/414/431 for a head it cannot parse
    /// (written as raw HTTP/1.1; the connection then closes). `None` keeps
    /// hyper's.
    pub protocol: Option<refusal::ProtocolAnswer>,
}

/// One listener's connection handling.
pub(crate) struct Listener {
    pub name: &'static str,
    /// TLS on this listener, when configured.
    pub tls: Option<crate::edge::tls::Acceptor>,
    pub settings: ConnSettings,
    pub grace: Duration,
    pub answers: Answers,
}

/// The connection cap that the process's open-file limit allows, after
/// raising the soft limit as far as the hard one permits.
pub(crate) fn effective_cap(wanted: usize, listener: &str) -> usize {
    #[cfg(unix)]
    {
        let limit = rlimit::increase_nofile_limit(u64::MAX).unwrap_or(0);
        if limit > 0 {
            let room =
                usize::try_from(limit.saturating_sub(FD_RESERVE).max(1)).unwrap_or(usize::MAX);
            if room < wanted {
                tracing::warn!(
                    listener,
                    wanted,
                    allowed = room,
                    open_file_limit = limit,
                    "connections.max_connections lowered to fit the open-file limit"
                );
                return room;
            }
        }
    }
    wanted
}

/// Serves `listener` until `drain` is stopped, then drains: see [`drain`].
/// Every connection gets a clone of `service`.
pub(crate) async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    conf: Listener,
    drain: Drain,
) -> std::io::Result<()>
where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<service::BoxError>,
{
    serve_each(listener, move |_: &ConnHandle| service.clone(), conf, drain).await
}

/// [`serve`], each connection's service made by `service_of` from the
/// connection's handle, which the service hands to the request's
/// [`BodyReader`]: given once a connection, not put into every request's
/// extensions (a map allocated and freed a request).
pub(crate) async fn serve_each<M, S, B>(
    listener: TcpListener,
    service_of: M,
    conf: Listener,
    drain: Drain,
) -> std::io::Result<()>
where
    M: Fn(&ConnHandle) -> S + Send + Sync + 'static,
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<service::BoxError>,
{
    let settings = &conf.settings;
    let mut builder = auto::Builder::new(CoalescingExecutor);
    // The head deadline of HTTP/1 is the connection task's (see
    // `connection`), not hyper's: hyper's took a timer for every request.
    builder.http1().header_read_timeout(None);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(settings.http2_max_concurrent_streams)
        // What a stream may send before its request is read: HTTP/2's own
        // default (hyper's is 1 MiB), so a body is not buffered past it
        // before the request is routed and its key checked.
        .initial_stream_window_size(STREAM_WINDOW)
        // A peer that stops answering pings is gone; its streams are freed.
        .keep_alive_interval(Some(settings.idle_timeout.min(Duration::from_secs(30))))
        .keep_alive_timeout(Duration::from_secs(20));
    let builder = Arc::new(builder);
    let service_of = Arc::new(service_of);
    let cap = Arc::new(Semaphore::new(effective_cap(
        settings.max_connections,
        conf.name,
    )));
    let shedding = Arc::new(Semaphore::new(MAX_SHEDDING));
    let mut tasks = JoinSet::new();
    let coalescing = worth_coalescing();
    let spawn = |tasks: &mut JoinSet<()>, stream: TcpStream, peer: SocketAddr| match cap
        .clone()
        .try_acquire_owned()
    {
        Ok(permit) => {
            let task = connection(
                (stream, peer),
                builder.clone(),
                service_of.clone(),
                conf.settings.clone(),
                drain.clone(),
                conf.answers,
                (conf.name, conf.tls.clone(), permit),
            );
            if coalescing {
                tasks.spawn(Coalesce::new(task));
            } else {
                tasks.spawn(task);
            }
        }
        Err(_) => {
            metrics::counter!(SHED_CONNECTIONS, "listener" => conf.name).increment(1);
            if let Ok(slot) = shedding.clone().try_acquire_owned() {
                let answer = http1_bytes((conf.answers.shed)());
                tokio::spawn(shed(stream, answer, slot));
            }
        }
    };
    loop {
        tokio::select! {
            biased;
            _ = drain.stopped() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => spawn(&mut tasks, stream, peer),
                Err(e) => {
                    // Out of file descriptors and the like: back off briefly.
                    tracing::warn!(error = %e, listener = conf.name, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    // Connections the kernel completed before the stop hold requests their
    // clients consider sent: take them before closing the listener.
    let listener = listener.into_std()?;
    while let Ok((stream, peer)) = listener.accept() {
        match stream
            .set_nonblocking(true)
            .and_then(|()| TcpStream::from_std(stream))
        {
            Ok(stream) => spawn(&mut tasks, stream, peer),
            Err(e) => tracing::debug!(error = %e, "backlog connection unusable"),
        }
    }
    drop(listener);
    let all_done = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(conf.grace, all_done).await.is_err() {
        tracing::warn!(grace = ?conf.grace, listener = conf.name, open = tasks.len(), "grace period over; answering what is left and closing");
        drain.cut();
        let written = async { while tasks.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(CUT_WRITE_BOUND, written).await;
        tasks.shutdown().await;
    }
    Ok(())
}

/// One client connection, from accept to close.
async fn connection<M, S, B>(
    (socket, peer): (TcpStream, SocketAddr),
    builder: Arc<auto::Builder<CoalescingExecutor>>,
    service_of: Arc<M>,
    settings: ConnSettings,
    drain: Drain,
    answers: Answers,
    (listener, tls, _permit): (
        &'static str,
        Option<crate::edge::tls::Acceptor>,
        OwnedSemaphorePermit,
    ),
) where
    M: Fn(&ConnHandle) -> S,
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<service::BoxError>,
{
    let gauge = metrics::gauge!(OPEN_CONNECTIONS, "listener" => listener);
    gauge.increment(1.0);
    let _ = socket.set_nodelay(true);
    let socket = Arc::new(socket);
    // The peer's address lives with the connection's state, which every
    // request's body reader already points at: no copy per request.
    let activity = Activity::with_peer(peer);
    // TLS, when the listener has it, sits between the socket and hyper; a
    // failed handshake ends the connection here. Hyper's own 400/414/431
    // are replaced above it, where they are still plaintext, so the
    // envelope goes through the TLS session like any answer.
    let shared = SharedStream::new(socket.clone(), activity.clone());
    let Some(stream) = crate::edge::tls::accept(tls.as_ref(), shared).await else {
        gauge.decrement(1.0);
        return;
    };
    let io = TokioIo::new(Refusals::new(
        stream,
        answers.protocol,
        Some(activity.clone()),
    ));
    let load = budget::ConnLoad::new(settings.budget.clone(), settings.max_held_streams);
    let service = ConnService {
        inner: service_of(&ConnHandle {
            activity: activity.clone(),
            load: load.clone(),
        }),
        activity: activity.clone(),
        drain: drain.clone(),
        cut: answers.cut,
        load,
        over_budget: answers.over_budget,
    };
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let (mut stopping, mut closing, mut quiet_enough, mut cut) = (false, false, false, false);
    // Until an HTTP/1 connection that waited its head deadline idle is
    // closing for it.
    let mut head_watch = true;
    let quiet = DRAIN_QUIET.min(settings.idle_timeout);
    // The write timeout's watch lives as long as the connection: it counts
    // whole intervals without progress, which a watch made anew on every
    // turn of the loop would forget.
    let stalled = WhenWoken::new(activity.write_stalled(settings.write_timeout));
    tokio::pin!(stalled);
    // An HTTP/2 connection closing for idleness waits for its streams, and a
    // stream whose last slice of answer h2 holds for a client that gives it
    // no window would hold the connection for ever: nothing is in progress
    // (the answer is all handed over) and pings keep the socket moving, so
    // it is bounded by the write timeout from the GOAWAY.
    let linger = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(linger);
    let mut lingering = false;
    loop {
        tokio::select! {
            biased;
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                break;
            }
            _ = WhenWoken::new(drain.stopped()), if !stopping => stopping = true,
            // An HTTP/1 request in progress is polled by this task: marked
            // cut, it answers with the cut envelope when `conn` is polled
            // next, at the top of this loop (`service::ConnService`). The
            // cut comes only after the stop, so it is waited for only then.
            _ = WhenWoken::new(drain.cut_now()), if stopping && !cut => {
                activity.cut();
                cut = true;
            }
            // The idle deadline, and for HTTP/1 the next request's head:
            // due `header_read_timeout` after the last answer was written
            // (or the connection was accepted), whatever was read of it.
            quiet = WhenWoken::new(activity.quiet_for(
                settings.header_read_timeout,
                (!closing).then_some(settings.idle_timeout),
            )), if !closing || head_watch => match quiet {
                Quiet::Idle => {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                    if activity.is_http2() {
                        linger.as_mut().reset(tokio::time::Instant::now() + settings.write_timeout);
                        lingering = true;
                    }
                }
                // Nothing of a next request arrived: as long as keep-alive
                // may wait.
                Quiet::Head if activity.is_clean() => {
                    conn.as_mut().graceful_shutdown();
                    (closing, head_watch) = (true, false);
                }
                // A head begun and not finished in time: closed as it is.
                Quiet::Head => {
                    tracing::debug!("request head not received within connections.header_read_timeout_ms");
                    break;
                }
            },
            // An answer the client does not take: closed, its place under
            // the cap and its unsent bytes freed. A request still computing
            // its answer is not watched (see `Activity::write_stalled`).
            stall = stalled.as_mut() => {
                metrics::counter!(WRITE_STALLED_CONNECTIONS, "listener" => listener).increment(1);
                match stall {
                    Stall::Socket => tracing::debug!("client took no answer bytes within connections.write_timeout_ms; connection closed"),
                    Stall::Answer => tracing::debug!("answer not taken (no HTTP/2 window) within connections.write_timeout_ms; connection closed"),
                }
                break;
            }
            _ = linger.as_mut(), if lingering && !stopping => {
                if activity.active() == 0 {
                    metrics::counter!(WRITE_STALLED_CONNECTIONS, "listener" => listener).increment(1);
                    tracing::debug!("HTTP/2 streams not finished within connections.write_timeout_ms of GOAWAY; connection closed");
                    break;
                }
                // A stream the GOAWAY let in is being served: its answer
                // gets the whole bound again.
                linger.as_mut().reset(tokio::time::Instant::now() + settings.write_timeout);
            }
            // While stopping, look again whenever a request starts or ends,
            // and once the connection has been quiet for a moment.
            _ = activity.changed(), if stopping && !closing => {}
            _ = activity.idle_for(quiet), if stopping && !closing => quiet_enough = true,
        }
        if stopping && !closing {
            // HTTP/2 stops with GOAWAY, which tells the client which streams
            // were taken. HTTP/1 is closed by hyper after a request in
            // progress (its answer says `Connection: close`). An idle HTTP/1
            // connection is closed only once it has been quiet for a moment
            // with nothing unread: a client between two requests of a burst
            // sends its next one first, and gets it answered, rather than
            // writing it into a connection closing under it.
            let idle_and_clean =
                quiet_enough && activity.is_clean() && !stream::has_unread_bytes(&socket);
            if activity.is_http2() || activity.active() > 0 || idle_and_clean {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
            quiet_enough = false;
        }
    }
    gauge.decrement(1.0);
}

/// Writes the refusal of a connection over the cap, then lingers briefly
/// reading what the client sent, so closing does not reset the answer away.
async fn shed(mut stream: TcpStream, answer: Bytes, _slot: OwnedSemaphorePermit) {
    let linger = async {
        stream.write_all(&answer).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut seen = 0usize;
        while seen < 64 * 1024 {
            match stream.read(&mut sink).await? {
                0 => break,
                n => seen += n,
            }
        }
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::time::timeout(SHED_TIMEOUT, linger).await;
}

/// A complete response as HTTP/1.1 bytes, for the few answers written
/// without hyper. Always `Connection: close`.
pub(crate) fn http1_bytes<B: http_body::Body<Data = Bytes>>(resp: Response<B>) -> Bytes {
    let (parts, body) = resp.into_parts();
    let len = body.size_hint().exact().unwrap_or(0);
    let body = futures_util::FutureExt::now_or_never(http_body_util::BodyExt::collect(body))
        .and_then(Result::ok)
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        parts.status.as_u16(),
        parts.status.canonical_reason().unwrap_or("")
    )
    .into_bytes();
    for (name, value) in &parts.headers {
        if name == http::header::CONNECTION || name == http::header::CONTENT_LENGTH {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("content-length: {len}\r\nconnection: close\r\n\r\n").as_bytes());
    out.extend_from_slice(&body);
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::future::Future;
    use std::pin::Pin;

    #[test]
    fn raw_answers_are_complete_http1_with_close() {
        let mut resp = Response::new(Full::new(Bytes::from_static(b"{\"code\":4290}")));
        *resp.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
        resp.headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        let text = String::from_utf8(http1_bytes(resp).to_vec()).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\ncontent-type: application/json\r\n"));
        assert!(text.contains("\r\ncontent-length: 13\r\nconnection: close\r\n\r\n"));
        assert!(text.ends_with("\r\n\r\n{\"code\":4290}"));
    }

    /// A listener on a free port, each connection served by `service_of`
    /// (default settings, empty refusals), and a client connected to it.
    async fn serving<M, S>(service_of: M) -> (tokio::net::TcpStream, Served)
    where
        M: Fn(&ConnHandle) -> S + Send + Sync + 'static,
        S: tower::Service<Request<Incoming>, Response = Response<Full<Bytes>>, Error = Infallible>
            + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let refused = || Response::new(Full::new(Bytes::new()));
        let conf = Listener {
            name: "test",
            tls: None,
            settings: ConnSettings::default(),
            grace: Duration::from_secs(1),
            answers: Answers {
                cut: refused,
                shed: refused,
                over_budget: refused,
                protocol: None,
            },
        };
        let drain = Drain::new();
        let task = tokio::spawn(serve_each(listener, service_of, conf, drain.clone()));
        let client = tokio::net::TcpStream::connect(addr).await.unwrap();
        (client, Served { drain, task })
    }

    /// A listener [`serving`] started.
    struct Served {
        drain: Drain,
        task: tokio::task::JoinHandle<std::io::Result<()>>,
    }

    impl Served {
        /// Stops the listener and waits for it to finish draining.
        async fn stop(self) {
            self.drain.begin();
            self.drain.stop();
            self.task.await.unwrap().unwrap();
        }
    }

    /// A service that is not ready when first asked: the request is
    /// answered all the same, by the general way (`service::ConnService`
    /// calls a ready service at once and boxes tower's `Oneshot` otherwise).
    #[derive(Clone)]
    struct ReadyOnSecondAsk {
        asked: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl tower::Service<Request<Incoming>> for ReadyOnSecondAsk {
        type Response = Response<Full<Bytes>>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Response<Full<Bytes>>, Infallible>>;

        fn poll_ready(
            &mut self,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Infallible>> {
            use std::sync::atomic::Ordering;
            if self.asked.fetch_add(1, Ordering::SeqCst) == 0 {
                cx.waker().wake_by_ref();
                return std::task::Poll::Pending;
            }
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<Incoming>) -> Self::Future {
            std::future::ready(Ok(Response::new(Full::new(Bytes::from_static(b"ready")))))
        }
    }

    #[tokio::test]
    async fn a_service_not_ready_at_once_still_answers() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let service = ReadyOnSecondAsk {
            asked: asked.clone(),
        };
        let (mut stream, served) = serving(move |_: &ConnHandle| service.clone()).await;
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nready"), "{answer}");
        // Asked once without a waker, then again by the general way.
        assert!(asked.load(std::sync::atomic::Ordering::SeqCst) >= 2);
        served.stop().await;
    }

    /// A future that counts its polls and the wake-ups it asked for (its
    /// own waker's), passing those on to whoever polls it.
    struct Counted<F> {
        inner: Pin<Box<F>>,
        polls: Arc<std::sync::atomic::AtomicUsize>,
        own: Arc<OwnWakes>,
    }

    #[derive(Default)]
    struct OwnWakes {
        count: std::sync::atomic::AtomicUsize,
        outer: futures_util::task::AtomicWaker,
    }

    impl std::task::Wake for OwnWakes {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.outer.wake();
        }
    }

    impl<F: Future> Future for Counted<F> {
        type Output = F::Output;
        fn poll(
            mut self: Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<F::Output> {
            self.polls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.own.outer.register(cx.waker());
            let waker = std::task::Waker::from(self.own.clone());
            self.inner
                .as_mut()
                .poll(&mut std::task::Context::from_waker(&waker))
        }
    }

    /// The connection's task is woken for hyper's sake as well as the
    /// request's (its body channel wakes the connection once the body is
    /// taken): a request's future is polled again only when it asked to be.
    #[tokio::test]
    async fn a_request_is_polled_only_when_it_asked_to_be() {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let own = Arc::new(OwnWakes::default());
        let (read_tx, mut body_read) = tokio::sync::mpsc::unbounded_channel();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let released = Arc::new(std::sync::Mutex::new(Some(released)));
        let (p, o) = (polls.clone(), own.clone());
        let service_of = move |_: &ConnHandle| {
            let (p, o, read_tx, released) =
                (p.clone(), o.clone(), read_tx.clone(), released.clone());
            tower::service_fn(move |req: Request<Incoming>| {
                let read_tx = read_tx.clone();
                let released = released.lock().unwrap().take();
                Counted {
                    inner: Box::pin(async move {
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let _ = read_tx.send(body);
                        if let Some(released) = released {
                            let _ = released.await;
                        }
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
                    }),
                    polls: p.clone(),
                    own: o.clone(),
                }
            })
        };
        let (mut stream, served) = serving(service_of).await;
        stream
            .write_all(b"POST / HTTP/1.1\r\nhost: test\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}")
            .await
            .unwrap();
        assert_eq!(&body_read.recv().await.unwrap()[..], b"{}");
        release.send(()).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.ends_with("\r\n\r\ndone"), "{answer}");
        let (polls, wakes) = (
            polls.load(Ordering::SeqCst),
            own.count.load(Ordering::SeqCst),
        );
        assert!(polls >= 2, "{polls} polls");
        assert!(
            polls <= 1 + wakes,
            "polled {polls} times for {wakes} wake-ups of its own"
        );
        served.stop().await;
    }

    /// The connection's handle reaches the request's body reader: while the
    /// rest of a refused body is read and thrown away, after the answer,
    /// the connection still counts as busy (so a drain waits for it); once
    /// the declared length has arrived, it is idle again at once, not after
    /// `connections.discard_timeout_ms`.
    #[tokio::test]
    async fn a_body_discard_keeps_its_connection_busy() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (handles, mut handed) = tokio::sync::mpsc::unbounded_channel();
        let service_of = move |conn: &ConnHandle| {
            let conn = conn.clone();
            let _ = handles.send(conn.clone());
            tower::service_fn(move |req: Request<Incoming>| {
                let conn = conn.clone();
                async move {
                    let (parts, body) = req.into_parts();
                    let settings = ConnSettings::default();
                    let reader = BodyReader::new(&parts, &body, 4, &settings, &conn);
                    assert_eq!(reader.read(body).await, Err(BodyError::TooLarge(4)));
                    let answer = Full::new(Bytes::from_static(b"too large"));
                    Ok::<_, Infallible>(Response::new(answer))
                }
            })
        };
        let (mut stream, served) = serving(service_of).await;
        // A declared length over the limit, and only the start of the body.
        stream
            .write_all(b"POST / HTTP/1.1\r\nhost: test\r\ncontent-length: 100\r\n\r\n0123456789")
            .await
            .unwrap();
        let conn = handed.recv().await.unwrap();
        let mut answer = Vec::new();
        while !answer.ends_with(b"too large") {
            let mut chunk = [0u8; 512];
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "{}", String::from_utf8_lossy(&answer));
            answer.extend_from_slice(&chunk[..n]);
        }
        // Answered; the discard still reads the rest.
        assert_eq!(conn.activity.active(), 1);
        // The rest arrives: the discard ends, and the connection is idle.
        stream.write_all(&[b'x'; 90]).await.unwrap();
        let idle = async {
            while conn.activity.active() != 0 {
                tokio::task::yield_now().await;
            }
        };
        // Well inside the discard's own deadline (10 s by default).
        tokio::time::timeout(Duration::from_secs(5), idle)
            .await
            .expect("the discard ended with the body");
        drop(stream);
        served.stop().await;
    }
}
