//! A client socket shared between hyper (which reads and writes it) and the
//! connection task (which peeks at it while draining, to see whether the
//! client has sent a request hyper has not read yet). Reads are counted in
//! the connection's [`Activity`].
//!
//! It also replaces the one answer hyper writes on its own: when a request
//! head cannot be parsed, hyper answers 400, 414 or 431 with an empty body
//! and offers no hook to change it. Every answer the listeners produce
//! carries a `content-type`; hyper's does not, so a head that starts
//! `HTTP/1.x 4..`, declares `content-length: 0` and has no `content-type`
//! is hyper's, and is swapped for the listener's envelope of that status.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::activity::Activity;

/// The raw HTTP/1.1 answer that replaces hyper's own for a status.
pub type ProtocolAnswer = fn(StatusCode) -> Bytes;

pub struct SharedStream {
    socket: Arc<TcpStream>,
    activity: Arc<Activity>,
    protocol: Option<ProtocolAnswer>,
    /// A replacement answer not yet fully written.
    pending: Bytes,
}

impl SharedStream {
    pub fn new(
        socket: Arc<TcpStream>,
        activity: Arc<Activity>,
        protocol: Option<ProtocolAnswer>,
    ) -> SharedStream {
        SharedStream {
            socket,
            activity,
            protocol,
            pending: Bytes::new(),
        }
    }

    /// Writes what is left of a replacement answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.pending.is_empty() {
            ready!(self.socket.poll_write_ready(cx))?;
            match self.socket.try_write(&self.pending) {
                Ok(n) => self.pending.advance(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// If `buf` starts with hyper's own refusal, queues the replacement and
    /// returns how many bytes of `buf` it stands for.
    fn replace(&mut self, buf: &[u8]) -> Option<usize> {
        let answer = self.protocol?;
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

/// Whether the client has sent bytes that are still in the kernel's
/// receive buffer. End of stream counts as nothing pending.
pub fn has_unread_bytes(socket: &TcpStream) -> bool {
    let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    // Tokio sockets are non-blocking, so the peek never waits.
    matches!(socket2::SockRef::from(socket).peek(&mut probe), Ok(n) if n > 0)
}

impl AsyncRead for SharedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            ready!(self.socket.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match self.socket.try_read(unfilled) {
                Ok(n) => {
                    buf.advance(n);
                    self.activity.add_read(n);
                    return Poll::Ready(Ok(()));
                }
                // Readiness was stale; poll again so the waker is registered.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for SharedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        if let Some(n) = self.replace(buf) {
            return Poll::Ready(Ok(n));
        }
        loop {
            ready!(self.socket.poll_write_ready(cx))?;
            match self.socket.try_write(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return Poll::Ready(other),
            }
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        if let Some(first) = bufs.iter().find(|b| !b.is_empty()) {
            if let Some(n) = self.replace(first) {
                return Poll::Ready(Ok(n));
            }
        }
        loop {
            ready!(self.socket.poll_write_ready(cx))?;
            match self.socket.try_write_vectored(bufs) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return Poll::Ready(other),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Writes go straight to the socket; only a replacement may be left.
        self.poll_pending(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        let sock = socket2::SockRef::from(&*self.socket);
        match sock.shutdown(std::net::Shutdown::Write) {
            Err(e) if e.kind() != io::ErrorKind::NotConnected => Poll::Ready(Err(e)),
            _ => Poll::Ready(Ok(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::hypers_refusal;

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
}
