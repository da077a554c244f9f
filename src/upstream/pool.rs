//! The V2 upstream's connection pool: the last hop of the request path
//! before V2, under [`super::client`]. It holds hyper's connection-level
//! senders for the one origin the upstream talks to, so a call costs a
//! lock, a pop and a push instead of the general client's keyed, hashed
//! pool and its layers of futures.
//!
//! Connections come from the shared connector ([`crate::upstream::http_client::connector`]:
//! TCP or rustls, direct or through a `CONNECT` tunnel, so every HTTP/1.1
//! request goes in origin-form, as to V2 itself). HTTP/1.1 senders are
//! kept idle last-in first-out, each with the instant it went idle, and are
//! handed to one call at a time; a connection whose TLS negotiated h2 is
//! kept as one shared sender that every call clones. A sender goes back only
//! once its answer was read to the end ([`Lease::release`]); anything else
//! drops it, and hyper closes the connection. Connections idle longer than
//! `pool_idle_timeout` are dropped when met at checkout, when a sender is
//! returned, and by a sweep that runs every `pool_idle_timeout` while the
//! pool exists. A request that a reused connection gave back unsent (the
//! server closed it while idle) is sent once more on a fresh connection,
//! whatever its method: nothing reached V2.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2, TrySendError};
use hyper::rt::Executor;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::Connection;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tower::ServiceExt;
use tracing::debug;

use super::proxy::ProxyConnector;
use super::UpstreamFailure;
use crate::common::coalesce::CoalescingExecutor;
use crate::upstream::http_client::error_chain;

type Body = Full<Bytes>;

/// The sweep never runs more often than this, however short the idle
/// timeout: checkout drops expired connections anyway.
const MIN_SWEEP: Duration = Duration::from_millis(90);

/// Connections to one origin. Cheap to share by reference; the sweep task
/// holds only a weak reference and ends when the pool is dropped.
pub(crate) struct Pool {
    shared: Arc<Shared>,
}

impl Shared {
    fn idle(&self) -> MutexGuard<'_, Idle> {
        // The lock guards plain bookkeeping; a panic under it leaves the
        // lists consistent.
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Shared {
    connector: HttpsConnector<ProxyConnector>,
    /// `scheme://authority` of the origin: what the connector dials.
    origin: Uri,
    idle_timeout: Duration,
    max_idle: usize,
    idle: Mutex<Idle>,
    /// Set when the sweep starts; dropped with the pool, which stops it.
    sweep_stop: OnceLock<oneshot::Sender<()>>,
}

#[derive(Default)]
struct Idle {
    h1: IdleList<H1>,
    h2: SharedSlot<H2>,
}

/// An HTTP/1.1 connection's sender.
struct H1 {
    tx: http1::SendRequest<Body>,
}

/// The shared sender of an HTTP/2 connection.
#[derive(Clone)]
struct H2 {
    tx: http2::SendRequest<Body>,
}

/// What the idle bookkeeping needs to know of a connection.
trait Liveness {
    fn is_closed(&self) -> bool;
}

impl Liveness for H1 {
    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

impl Liveness for H2 {
    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// Idle longer than `timeout`? (The same test as hyper-util's pool.)
fn expired(since: Instant, now: Instant, timeout: Duration) -> bool {
    now.saturating_duration_since(since) > timeout
}

/// Idle HTTP/1.1 connections, oldest first, each with when it went idle.
struct IdleList<C> {
    entries: VecDeque<(C, Instant)>,
}

impl<C> Default for IdleList<C> {
    fn default() -> Self {
        IdleList {
            entries: VecDeque::new(),
        }
    }
}

impl<C: Liveness> IdleList<C> {
    /// The most recently returned connection that is open and not expired;
    /// the closed and expired ones met on the way are dropped.
    fn take(&mut self, now: Instant, timeout: Duration) -> Option<C> {
        while let Some((conn, since)) = self.entries.pop_back() {
            if !expired(since, now, timeout) && !conn.is_closed() {
                return Some(conn);
            }
        }
        None
    }

    /// Keeps `conn` unless `max` are already kept (then gives it back to be
    /// dropped). Expired connections at the old end go first.
    fn put(&mut self, conn: C, now: Instant, timeout: Duration, max: usize) -> Option<C> {
        while self
            .entries
            .front()
            .is_some_and(|(_, since)| expired(*since, now, timeout))
        {
            self.entries.pop_front();
        }
        if self.entries.len() >= max {
            return Some(conn);
        }
        self.entries.push_back((conn, now));
        None
    }

    /// Drops every expired or closed connection.
    fn sweep(&mut self, now: Instant, timeout: Duration) {
        self.entries
            .retain(|(conn, since)| !expired(*since, now, timeout) && !conn.is_closed());
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The one shared (HTTP/2) connection, with when it was last used.
struct SharedSlot<C> {
    slot: Option<(C, Instant)>,
}

impl<C> Default for SharedSlot<C> {
    fn default() -> Self {
        SharedSlot { slot: None }
    }
}

impl<C: Liveness + Clone> SharedSlot<C> {
    /// A clone of the connection if it is open and was used within
    /// `timeout`; marks it used. A closed or expired one is dropped.
    fn take(&mut self, now: Instant, timeout: Duration) -> Option<C> {
        match &mut self.slot {
            Some((conn, used)) if !expired(*used, now, timeout) && !conn.is_closed() => {
                *used = now;
                Some(conn.clone())
            }
            Some(_) => {
                self.slot = None;
                None
            }
            None => None,
        }
    }

    /// Keeps `conn` unless an open connection is already kept: calls that
    /// raced to connect use theirs once and let it close.
    fn offer(&mut self, conn: &C, now: Instant) {
        let open = matches!(&self.slot, Some((kept, _)) if !kept.is_closed());
        if !open {
            self.slot = Some((conn.clone(), now));
        }
    }

    fn sweep(&mut self, now: Instant, timeout: Duration) {
        if self
            .slot
            .as_ref()
            .is_some_and(|(conn, used)| expired(*used, now, timeout) || conn.is_closed())
        {
            self.slot = None;
        }
    }

    #[cfg(test)]
    fn is_some(&self) -> bool {
        self.slot.is_some()
    }
}

/// A connection checked out for one request.
enum Sender {
    H1(H1),
    H2(H2),
}

/// The HTTP/1.1 connection an answer arrived on, until its body is read.
pub(crate) struct Lease<'a> {
    pool: &'a Pool,
    conn: Option<H1>,
}

impl Lease<'_> {
    /// The answer's body was read to the end (at `now`): the connection can
    /// carry the next request. Dropping the lease instead closes it.
    pub(crate) fn release(mut self, now: Instant) {
        if let Some(conn) = self.conn.take() {
            self.pool.put(conn, now);
        }
    }
}

impl Pool {
    /// `origin` is `scheme://authority`. Pooling is off when `max_idle` or
    /// `idle_timeout` is zero: every request then gets its own connection.
    pub(crate) fn new(
        connector: HttpsConnector<ProxyConnector>,
        origin: Uri,
        idle_timeout: Duration,
        max_idle: usize,
    ) -> Pool {
        Pool {
            shared: Arc::new(Shared {
                connector,
                origin,
                idle_timeout,
                max_idle,
                idle: Mutex::new(Idle::default()),
                sweep_stop: OnceLock::new(),
            }),
        }
    }

    fn pooling(&self) -> bool {
        self.shared.max_idle > 0 && !self.shared.idle_timeout.is_zero()
    }

    fn idle(&self) -> MutexGuard<'_, Idle> {
        self.shared.idle()
    }

    /// Sends `request` (origin-form URI; `Host` already set) and returns the
    /// answer's head with the lease to give back once its body is read.
    /// `now` is the caller's reading of the clock, for the idle deadlines.
    /// Connect failures (TCP, proxy, TLS) are `Unreachable`; failures after
    /// are `Broken`.
    /// Not an `async fn`, which would hold the request twice.
    #[allow(clippy::manual_async_fn)]
    pub(crate) fn send(
        &self,
        mut request: Request<Body>,
        now: Instant,
    ) -> impl Future<Output = Result<(Response<Incoming>, Lease<'_>), UpstreamFailure>> + Send + '_
    {
        async move {
            let mut retried = false;
            loop {
                let (sender, reused) = match self.checkout(retried, now).await {
                    Some(sender) => (sender, true),
                    // Boxed: connecting (TLS, handshakes) takes a large future
                    // that every call would otherwise carry and copy.
                    None => (Box::pin(self.connect()).await?, false),
                };
                // hyper writes the URI as given: HTTP/1.1 takes origin-form,
                // as the call comes; HTTP/2 the absolute URI (its `:scheme`
                // and `:authority`), made here.
                let (sent, conn) = match sender {
                    Sender::H1(mut conn) => {
                        let sent = conn.tx.try_send_request(request).await;
                        (sent, Some(conn))
                    }
                    Sender::H2(mut conn) => {
                        *request.uri_mut() = absolute(&self.shared.origin, request.uri());
                        (conn.tx.try_send_request(request).await, None)
                    }
                };
                let mut error = match sent {
                    Ok(response) => return Ok((response, Lease { pool: self, conn })),
                    Err(error) => error,
                };
                match error.take_message() {
                    // Not written: a reused connection the server had closed.
                    Some(mut unsent) if reused && !retried => {
                        debug!(error = %error_chain(error.error()), "idle V2 connection was closed; sending on a new one");
                        // Back in origin-form after an HTTP/2 attempt: the
                        // next connection may be HTTP/1.1.
                        if unsent.uri().scheme().is_some() {
                            *unsent.uri_mut() = origin_form(unsent.uri());
                        }
                        request = unsent;
                        retried = true;
                    }
                    _ => return Err(broken(error)),
                }
            }
        }
    }

    /// An idle connection ready for a request (idle deadlines as of `now`),
    /// unless `fresh` is asked for or there is none.
    async fn checkout(&self, fresh: bool, now: Instant) -> Option<Sender> {
        if fresh || !self.pooling() {
            return None;
        }
        loop {
            let taken = {
                let timeout = self.shared.idle_timeout;
                let mut idle = self.idle();
                if let Some(h2) = idle.h2.take(now, timeout) {
                    return Some(Sender::H2(h2));
                }
                idle.h1.take(now, timeout)
            };
            let mut conn = taken?;
            // A returned connection is ready again once its task has seen
            // the end of the last answer; one that closes instead fails
            // here, before anything is sent, and the next is tried.
            if conn.tx.ready().await.is_ok() {
                return Some(Sender::H1(conn));
            }
        }
    }

    /// A new connection, its task spawned; HTTP/2 when TLS negotiated it.
    async fn connect(&self) -> Result<Sender, UpstreamFailure> {
        let io = self
            .shared
            .connector
            .clone()
            .oneshot(self.shared.origin.clone())
            .await
            .map_err(|e| UpstreamFailure::Unreachable(error_chain(e.as_ref())))?;
        let connected = io.connected();
        if connected.is_negotiated_h2() {
            let (mut tx, connection) = http2::Builder::new(CoalescingExecutor)
                .handshake(io)
                .await
                .map_err(|e| UpstreamFailure::Broken(error_chain(&e)))?;
            spawn(connection);
            tx.ready()
                .await
                .map_err(|e| UpstreamFailure::Broken(error_chain(&e)))?;
            let conn = H2 { tx };
            if self.pooling() {
                self.idle().h2.offer(&conn, Instant::now());
                self.start_sweep();
            }
            Ok(Sender::H2(conn))
        } else {
            // A V2 call is a head and at most a small JSON body: copied
            // into one buffer and written with one call, it costs about 200
            // instructions less than hyper's queue of buffers for `writev`.
            // (Not on the public listener: a V1 page's answer is many
            // shared row buffers, which copying would cost far more.)
            let (tx, connection) = http1::Builder::new()
                .writev(false)
                .handshake(io)
                .await
                .map_err(|e| UpstreamFailure::Broken(error_chain(&e)))?;
            spawn(connection);
            // A new sender takes one request before its task first runs.
            Ok(Sender::H1(H1 { tx }))
        }
    }

    fn put(&self, conn: H1, now: Instant) {
        if !self.pooling() {
            return;
        }
        let rejected = {
            let mut idle = self.idle();
            idle.h1
                .put(conn, now, self.shared.idle_timeout, self.shared.max_idle)
        };
        // Dropped outside the lock: it wakes the connection task to close.
        drop(rejected);
        self.start_sweep();
    }

    /// Starts, once, the task that closes connections idle past the timeout
    /// even when no call comes to meet them.
    fn start_sweep(&self) {
        if self.shared.sweep_stop.get().is_some() {
            return;
        }
        let (stop, stopped) = oneshot::channel();
        if self.shared.sweep_stop.set(stop).is_err() {
            return;
        }
        let period = self.shared.idle_timeout.max(MIN_SWEEP);
        tokio::spawn(sweep(Arc::downgrade(&self.shared), period, stopped));
    }

    /// Idle HTTP/1.1 connections and whether a shared one is kept.
    #[cfg(test)]
    fn idle_counts(&self) -> (usize, bool) {
        let idle = self.idle();
        (idle.h1.len(), idle.h2.is_some())
    }
}

async fn sweep(pool: Weak<Shared>, period: Duration, mut stopped: oneshot::Receiver<()>) {
    let mut ticks = tokio::time::interval_at(Instant::now() + period, period);
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            _ = ticks.tick() => {}
        }
        let Some(shared) = pool.upgrade() else { return };
        let now = Instant::now();
        let mut idle = shared.idle();
        idle.h1.sweep(now, shared.idle_timeout);
        idle.h2.sweep(now, shared.idle_timeout);
    }
}

/// A connection task, on the executor that coalesces its self-wakes.
fn spawn<F>(connection: F)
where
    F: std::future::Future<Output = Result<(), hyper::Error>> + Send + 'static,
{
    CoalescingExecutor.execute(async move {
        if let Err(e) = connection.await {
            debug!(error = %error_chain(&e), "V2 connection ended with an error");
        }
    });
}

/// `uri`'s path and query (`/` when it has none).
fn path_of(uri: &Uri) -> PathAndQuery {
    uri.path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"))
}

/// `/path?query` of a request URI.
fn origin_form(uri: &Uri) -> Uri {
    Uri::from(path_of(uri))
}

/// `origin`'s scheme and authority with `uri`'s path and query: the
/// absolute form of an origin-form request URI.
fn absolute(origin: &Uri, uri: &Uri) -> Uri {
    let mut parts = origin.clone().into_parts();
    parts.path_and_query = Some(path_of(uri));
    // Scheme, authority and a path: always a valid URI; the origin form
    // is kept rather than unwrapped should it ever not be.
    Uri::from_parts(parts).unwrap_or_else(|_| uri.clone())
}

fn broken(error: TrySendError<Request<Body>>) -> UpstreamFailure {
    UpstreamFailure::Broken(error_chain(&error.into_error()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[derive(Clone, Default)]
    struct Fake {
        id: u8,
        closed: Arc<AtomicBool>,
    }

    impl Fake {
        fn new(id: u8) -> Fake {
            Fake {
                id,
                ..Fake::default()
            }
        }
    }

    impl Liveness for Fake {
        fn is_closed(&self) -> bool {
            self.closed.load(Ordering::SeqCst)
        }
    }

    const TIMEOUT: Duration = Duration::from_secs(90);

    #[test]
    fn the_last_returned_connection_is_taken_first() {
        let t0 = Instant::now();
        let mut list = IdleList::default();
        for id in 1..=3 {
            assert!(list.put(Fake::new(id), t0, TIMEOUT, 8).is_none());
        }
        assert_eq!(list.take(t0, TIMEOUT).unwrap().id, 3);
        assert_eq!(list.take(t0, TIMEOUT).unwrap().id, 2);
        assert_eq!(list.len(), 1);
    }

    #[test]
    fn closed_and_expired_connections_are_skipped_and_dropped() {
        let t0 = Instant::now();
        let mut list = IdleList::default();
        list.put(Fake::new(1), t0, TIMEOUT, 8);
        let later = t0 + Duration::from_secs(60);
        list.put(Fake::new(2), later, TIMEOUT, 8);
        let closed = Fake::new(3);
        list.put(closed.clone(), later, TIMEOUT, 8);
        closed.closed.store(true, Ordering::SeqCst);
        // 3 is closed, 2 is fresh; 1 stays below it for now.
        assert_eq!(list.take(later, TIMEOUT).unwrap().id, 2);
        assert_eq!(list.len(), 1);
        // At t0 + 91 s connection 1 has been idle past the timeout.
        assert!(list
            .take(t0 + TIMEOUT + Duration::from_secs(1), TIMEOUT)
            .is_none());
        assert_eq!(list.len(), 0);
    }

    #[test]
    fn exactly_the_timeout_is_not_yet_expired() {
        let t0 = Instant::now();
        let mut list = IdleList::default();
        list.put(Fake::new(1), t0, TIMEOUT, 8);
        assert!(list.take(t0 + TIMEOUT, TIMEOUT).is_some());
    }

    #[test]
    fn no_more_than_max_are_kept() {
        let t0 = Instant::now();
        let mut list = IdleList::default();
        assert!(list.put(Fake::new(1), t0, TIMEOUT, 2).is_none());
        assert!(list.put(Fake::new(2), t0, TIMEOUT, 2).is_none());
        assert_eq!(list.put(Fake::new(3), t0, TIMEOUT, 2).unwrap().id, 3);
        assert_eq!(list.len(), 2);
    }

    #[test]
    fn returning_a_connection_drops_the_expired_ones() {
        let t0 = Instant::now();
        let mut list = IdleList::default();
        list.put(Fake::new(1), t0, TIMEOUT, 2);
        list.put(Fake::new(2), t0, TIMEOUT, 2);
        // Both expired: the new one takes their place instead of being refused.
        let later = t0 + TIMEOUT * 2;
        assert!(list.put(Fake::new(3), later, TIMEOUT, 2).is_none());
        assert_eq!(list.len(), 1);
        assert_eq!(list.take(later, TIMEOUT).unwrap().id, 3);
    }

    #[test]
    fn the_sweep_drops_expired_and_closed_connections_only() {
        let t0 = Instant::now();
        let mut list = IdleList::default();
        list.put(Fake::new(1), t0, TIMEOUT, 8);
        let later = t0 + Duration::from_secs(60);
        let closed = Fake::new(2);
        list.put(closed.clone(), later, TIMEOUT, 8);
        list.put(Fake::new(3), later, TIMEOUT, 8);
        closed.closed.store(true, Ordering::SeqCst);
        list.sweep(t0 + TIMEOUT + Duration::from_secs(1), TIMEOUT);
        assert_eq!(list.len(), 1);
        assert_eq!(list.take(later, TIMEOUT).unwrap().id, 3);
    }

    #[test]
    fn the_shared_connection_is_cloned_and_kept_while_used() {
        let t0 = Instant::now();
        let mut slot = SharedSlot::default();
        assert!(slot.take(t0, TIMEOUT).is_none());
        slot.offer(&Fake::new(1), t0);
        // A second connection made by a racing call is not kept.
        slot.offer(&Fake::new(2), t0);
        let t1 = t0 + Duration::from_secs(60);
        assert_eq!(slot.take(t1, TIMEOUT).unwrap().id, 1);
        // Used at t1: still there at t0 + 120 s.
        let t2 = t0 + Duration::from_secs(120);
        slot.sweep(t2, TIMEOUT);
        assert_eq!(slot.take(t2, TIMEOUT).unwrap().id, 1);
        // Unused for longer than the timeout: gone.
        slot.sweep(t2 + TIMEOUT + Duration::from_secs(1), TIMEOUT);
        assert!(!slot.is_some());
    }

    #[test]
    fn a_closed_shared_connection_is_replaced() {
        let t0 = Instant::now();
        let mut slot = SharedSlot::default();
        let first = Fake::new(1);
        slot.offer(&first, t0);
        first.closed.store(true, Ordering::SeqCst);
        slot.offer(&Fake::new(2), t0);
        assert_eq!(slot.take(t0, TIMEOUT).unwrap().id, 2);
        let third = Fake::new(3);
        third.closed.store(true, Ordering::SeqCst);
        let mut slot = SharedSlot::default();
        slot.offer(&third, t0);
        assert!(slot.take(t0, TIMEOUT).is_none());
        assert!(!slot.is_some());
    }

    #[test]
    fn http2_requests_are_written_in_absolute_form() {
        let origin: Uri = "https://v2.example:8443/".parse().unwrap();
        let uri: Uri = "/p/api/v2/store?keyword=a".parse().unwrap();
        assert_eq!(
            absolute(&origin, &uri),
            "https://v2.example:8443/p/api/v2/store?keyword=a"
        );
        assert_eq!(
            absolute(&origin, &Uri::default()),
            "https://v2.example:8443/"
        );
        assert_eq!(origin_form(&absolute(&origin, &uri)), uri);
    }

    /// A pooled connection whose server hung up while it sat idle, found
    /// before its task noticed: the request comes back unsent and goes out
    /// once on a new connection, a POST too.
    #[tokio::test]
    async fn a_request_a_closed_idle_connection_gave_back_is_sent_on_a_new_one() {
        use hyper_util::rt::TokioIo;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let _ = seen_tx.send(req.method().clone());
                async { Ok::<_, std::convert::Infallible>(Response::new(Body::default())) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        let connector = crate::upstream::http_client::connector(
            crate::upstream::http_client::tls_config(None).unwrap(),
            &super::super::ProxyEnv::default(),
            Duration::from_secs(5),
        );
        let origin: Uri = format!("http://{addr}/").parse().unwrap();
        let pool = Pool::new(connector, origin.clone(), TIMEOUT, 8);

        // An idle connection to a peer that then goes away. A duplex pipe
        // shows its end to the connection's next read at once.
        let (near, far) = tokio::io::duplex(4096);
        let (mut tx, connection) = http1::handshake(TokioIo::new(near)).await.unwrap();
        spawn(connection);
        tx.ready().await.unwrap();
        pool.put(H1 { tx }, Instant::now());
        drop(far);

        let mut request = Request::new(Body::from("{}"));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = format!("http://{addr}/api/v2/worker-runs").parse().unwrap();
        request
            .headers_mut()
            .insert(http::header::HOST, addr.to_string().parse().unwrap());
        let (response, lease) = pool.send(request, Instant::now()).await.unwrap();
        assert_eq!(response.status(), http::StatusCode::OK);
        assert_eq!(seen.recv().await.unwrap(), http::Method::POST);
        assert!(seen.try_recv().is_err());
        drop(response);
        lease.release(Instant::now());
        assert_eq!(pool.idle_counts(), (1, false));
    }

    #[test]
    fn pooling_is_off_without_room_or_time() {
        let connector = crate::upstream::http_client::connector(
            crate::upstream::http_client::tls_config(None).unwrap(),
            &super::super::ProxyEnv::default(),
            Duration::from_secs(1),
        );
        let origin: Uri = "http://v2.example".parse().unwrap();
        let pool = |timeout, max| Pool::new(connector.clone(), origin.clone(), timeout, max);
        assert!(pool(TIMEOUT, 1).pooling());
        assert!(!pool(TIMEOUT, 0).pooling());
        assert!(!pool(Duration::ZERO, 8).pooling());
        assert_eq!(pool(TIMEOUT, 1).idle_counts(), (0, false));
    }
}
