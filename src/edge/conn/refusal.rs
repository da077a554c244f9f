//! Replaces the one answer hyper writes on its own. When a request head
//! cannot be parsed, hyper answers 400, 414 or 431 with an empty body and
//! offers no hook to change it. This wrapper sits directly under hyper, on
//! the plaintext side of the connection (above TLS when the listener has it,
//! so the TLS session encrypts the replacement like any other answer), and
//! recognises hyper's refusal on its way out: every answer the listeners
//! produce carries a `content-type`; hyper's does not, so a head that starts
//! `HTTP/1.x 4..`, declares `content-length: 0` and has no `content-type` is
//! hyper's, and is swapped for the listener's envelope of that status.
//! HTTP/2 frames never start with `HTTP/1.`, so HTTP/2 passes untouched.
//!
//! On the way in, it tells an HTTP/2 client by its connection preface, the
//! first bytes it sends, and marks the connection's [`Activity`] before any
//! request: an HTTP/2 connection has no deadline for a request head.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::activity::Activity;

/// The first line of the HTTP/2 client preface.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";

/// The raw HTTP/1.1 answer that replaces hyper's own for a status.
pub type ProtocolAnswer = fn(StatusCode) -> Bytes;

pub(super) struct Refusals<IO> {
    inner: IO,
    answer: Option<ProtocolAnswer>,
    /// A replacement answer not yet fully written to `inner`.
    pending: Bytes,
    /// The connection, while its first bytes may still be the HTTP/2
    /// preface; how many of them matched it so far.
    preface: Option<(std::sync::Arc<Activity>, usize)>,
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Refusals<IO> {
    /// `answer: None` passes everything through unchanged; `activity` is
    /// marked if the client turns out to speak HTTP/2.
    pub(super) fn new(
        inner: IO,
        answer: Option<ProtocolAnswer>,
        activity: Option<std::sync::Arc<Activity>>,
    ) -> Refusals<IO> {
        Refusals {
            inner,
            answer,
            pending: Bytes::new(),
            preface: activity.map(|a| (a, 0)),
        }
    }

    /// Follows the client's first bytes, `got`, until they are the HTTP/2
    /// preface or cannot be.
    fn look_for_preface(&mut self, got: &[u8]) {
        let Some((activity, matched)) = &mut self.preface else {
            return;
        };
        let want = &H2_PREFACE[*matched..];
        let n = got.len().min(want.len());
        if got[..n] != want[..n] {
            self.preface = None;
        } else if n == want.len() {
            activity.saw_http2();
            self.preface = None;
        } else {
            *matched += n;
        }
    }

    /// Writes what is left of a replacement answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.pending.is_empty() {
            match ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending))? {
                0 => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                n => self.pending.advance(n),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// If `buf` starts with hyper's own refusal, queues the replacement and
    /// returns how many bytes of `buf` it stands for.
    fn replace(&mut self, buf: &[u8]) -> Option<usize> {
        let answer = self.answer?;
        let head_len = hypers_refusal(buf)?;
        let status = std::str::from_utf8(&buf[9..12]).ok()?.parse().ok()?;
        self.pending = answer(StatusCode::from_u16(status).ok()?);
        Some(head_len)
    }
}

/// The length of the head if `buf` starts with an answer hyper wrote itself
/// for a request it could not parse.
fn hypers_refusal(buf: &[u8]) -> Option<usize> {
    if !(buf.starts_with(b"HTTP/1.1 4") || buf.starts_with(b"HTTP/1.0 4")) || buf.len() < 12 {
        return None;
    }
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    (head.contains("\r\ncontent-length: 0\r\n") && !head.contains("\r\ncontent-type:"))
        .then_some(end)
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for Refusals<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if this.preface.is_some() {
            this.look_for_preface(&buf.filled()[before..]);
        }
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Refusals<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        if let Some(n) = this.replace(buf) {
            return Poll::Ready(Ok(n));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        if let Some(first) = bufs.iter().find(|b| !b.is_empty()) {
            if let Some(n) = this.replace(first) {
                return Poll::Ready(Ok(n));
            }
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn only_hypers_own_refusals_are_recognised() {
        let hyper =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(hypers_refusal(hyper), Some(hyper.len()));
        for ours in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 12\r\n\r\n",
            b"HTTP/1.1 400 Bad",
        ] {
            assert_eq!(hypers_refusal(ours), None);
        }
    }

    #[tokio::test]
    async fn an_http2_client_is_told_by_its_preface_even_in_pieces() {
        for pieces in [
            &[&b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..]][..],
            &[b"PRI * HT", b"TP/2.0\r", b"\n\r\nSM"],
        ] {
            let (near, mut far) = tokio::io::duplex(1024);
            let activity = Activity::new();
            let mut r = Refusals::new(near, None, Some(activity.clone()));
            let mut buf = [0u8; 64];
            for piece in pieces {
                far.write_all(piece).await.unwrap();
                let n = r.read(&mut buf).await.unwrap();
                assert_eq!(&buf[..n], *piece);
            }
            assert!(activity.is_http2());
        }
        for first in [
            &b"POST /api/v1/run/detail HTTP/1.1\r\n"[..],
            b"PRI * HTTP/1.1\r\n",
        ] {
            let (near, mut far) = tokio::io::duplex(1024);
            let activity = Activity::new();
            let mut r = Refusals::new(near, None, Some(activity.clone()));
            far.write_all(first).await.unwrap();
            far.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
            drop(far);
            let mut got = Vec::new();
            r.read_to_end(&mut got).await.unwrap();
            assert!(!activity.is_http2(), "{first:?}");
        }
    }

    fn envelope(status: StatusCode) -> Bytes {
        Bytes::from(format!(
            "HTTP/1.1 {} X\r\ncontent-length: 2\r\n\r\n{{}}",
            status.as_u16()
        ))
    }

    #[tokio::test]
    async fn the_replacement_reaches_the_inner_stream_and_the_rest_passes() {
        let (near, mut far) = tokio::io::duplex(1024);
        let mut w = Refusals::new(near, Some(envelope), None);
        let hyper = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        w.write_all(hyper).await.unwrap();
        w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        w.shutdown().await.unwrap();
        let mut got = String::new();
        far.read_to_string(&mut got).await.unwrap();
        assert_eq!(
            got,
            "HTTP/1.1 414 X\r\ncontent-length: 2\r\n\r\n{}HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
        );
        // Without an answer, hyper's own passes unchanged.
        let (near, mut far) = tokio::io::duplex(1024);
        let mut w = Refusals::new(near, None, None);
        w.write_all(hyper).await.unwrap();
        w.shutdown().await.unwrap();
        let mut got = Vec::new();
        far.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, hyper);
    }
}
