//! Reading a request body off the connection, before any in-flight slot is
//! taken: a declared `Content-Length` over the limit is refused without
//! reading (so no `100 Continue` is sent for it), the whole body must arrive
//! within `connections.body_read_timeout_ms`, and the rest of an oversized
//! body is read and thrown away in the background, bounded in bytes and
//! time, so a client that writes its whole body before reading still
//! receives the 400 envelope instead of a reset.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{header, request::Parts, Version};
use http_body::Body as _;
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::activity::Activity;
use super::budget::{self, ConnLoad, Held};
use super::settings::ConnSettings;

/// Why a body was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("body is larger than {0} bytes")]
    TooLarge(usize),
    #[error("body was not received within {0:?}")]
    Timeout(Duration),
    #[error("body could not be read ({0})")]
    Broken(String),
    #[error("no room in the memory budget for the body")]
    OverBudget,
}

/// The connection a request came on, handed to the listener's service for
/// the connection ([`super::serve_each`]) so a body discard keeps the
/// connection counted busy.
#[derive(Clone)]
pub(crate) struct ConnHandle {
    pub(crate) activity: Arc<Activity>,
    /// The connection's streams holding bytes, and the process's budget.
    pub(crate) load: Arc<ConnLoad>,
}

impl ConnHandle {
    /// The client's address (the TCP peer, which may be a proxy).
    pub(crate) fn peer(&self) -> Option<std::net::SocketAddr> {
        self.activity.peer()
    }
}

/// What reading one request's body needs to know of its head, taken before
/// the head is handed on.
pub(crate) struct BodyReader {
    /// The declared length (`Content-Length`), as hyper read it.
    declared: Option<u64>,
    /// Whether a body declared over the limit is yet to be sent, on
    /// `100 Continue` (only looked up for such a body).
    expects_continue: bool,
    limit: usize,
    http2: bool,
    conn: ConnHandle,
    /// `connections.body_read_timeout_ms`.
    timeout: Duration,
    /// The bounds of a discard (`connections.max_discard_bytes`,
    /// `connections.discard_timeout_ms`). The reader holds these three
    /// settings, not all of them: it is part of every request's future.
    max_discard_bytes: usize,
    discard_timeout: Duration,
}

impl BodyReader {
    /// For reading `body`, at most `limit` bytes, of the request `parts`,
    /// which came on the connection `conn` (see [`super::serve_each`]).
    pub(crate) fn new(
        parts: &Parts,
        body: &Incoming,
        limit: usize,
        settings: &ConnSettings,
        conn: &ConnHandle,
    ) -> BodyReader {
        // hyper parsed the length already; its size hint is exact when one
        // was declared.
        let declared = body.size_hint().exact();
        let too_large = declared.is_some_and(|len| len > limit as u64);
        BodyReader {
            declared,
            expects_continue: too_large
                && parts
                    .headers
                    .get(header::EXPECT)
                    .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue")),
            limit,
            http2: parts.version == Version::HTTP_2,
            conn: conn.clone(),
            timeout: settings.body_read_timeout,
            max_discard_bytes: settings.max_discard_bytes,
            discard_timeout: settings.discard_timeout,
        }
    }

    /// Reads the whole body, at most the reader's limit. Not an `async fn`,
    /// which would hold the reader and the body twice.
    #[allow(clippy::manual_async_fn)]
    pub(crate) fn read(self, mut body: Incoming) -> impl Future<Output = Result<Bytes, BodyError>> {
        async move {
            let limit = self.limit;
            if self.declared.is_some_and(|len| len > limit as u64) {
                // A client that asked for `100 Continue` has not sent the body
                // and will not: polling it would send the `100`, so it is dropped.
                if !self.expects_continue {
                    self.discard(body);
                }
                return Err(BodyError::TooLarge(limit));
            }
            let declared = self.declared;
            // Counted in the memory budget while it is read (the stream is
            // counted in its connection's from its head on, `service`).
            let mut charge = self.conn.load.budget.charge(Held::Body);
            let read = async {
                let capacity = declared.map_or(0, |n| n as usize);
                if !charge.try_add_body(capacity) {
                    return Err(BodyError::OverBudget);
                }
                let mut buf = BytesMut::with_capacity(capacity);
                while let Some(frame) = body.frame().await {
                    let frame = frame.map_err(|e| BodyError::Broken(e.to_string()))?;
                    if let Ok(data) = frame.into_data() {
                        if buf.len() + data.len() > limit {
                            return Err(BodyError::TooLarge(limit));
                        }
                        let more = (buf.len() + data.len()).saturating_sub(charge.bytes());
                        if more > 0 && !charge.try_add_body(more) {
                            return Err(BodyError::OverBudget);
                        }
                        buf.extend_from_slice(&data);
                    }
                }
                Ok(buf.freeze())
            };
            let outcome = tokio::time::timeout(self.timeout, read).await;
            match outcome {
                Ok(Err(BodyError::TooLarge(limit))) => {
                    self.discard(body);
                    Err(BodyError::TooLarge(limit))
                }
                // Not read further: HTTP/1 closes after the refusal.
                Ok(Err(BodyError::OverBudget)) => {
                    budget::refused("body");
                    Err(BodyError::OverBudget)
                }
                Ok(result) => result,
                // Dropping the body makes hyper close the connection after the
                // answer: a client this slow does not keep it.
                Err(_) => Err(BodyError::Timeout(self.timeout)),
            }
        }
    }

    /// Reads and drops the rest of `body` in its own task. HTTP/2 needs
    /// none: dropping the body resets only that stream.
    fn discard(&self, mut body: Incoming) {
        if self.http2 {
            return;
        }
        let busy = self.conn.activity.begin();
        let (max, deadline) = (self.max_discard_bytes, self.discard_timeout);
        tokio::spawn(async move {
            let _busy = busy;
            let drain = async {
                let mut seen = 0usize;
                while let Some(Ok(frame)) = body.frame().await {
                    seen += frame.data_ref().map_or(0, Bytes::len);
                    // A declared length read in full is the end: hyper,
                    // its answer written, ends the body only when the
                    // next request's head arrives, and until then the
                    // connection would count as busy.
                    if seen > max || body.is_end_stream() {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(deadline, drain).await;
        });
    }
}
