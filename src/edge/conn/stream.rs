//! A client socket shared between hyper (which reads and writes it) and the
//! connection task (which peeks at it while draining, to see whether the
//! client has sent a request hyper has not read yet). Reads and writes are
//! counted in the connection's [`Activity`], and so is a write the socket
//! had no room for: a client that stops reading is seen there
//! ([`Activity::write_stalled`]). It carries what the client sent: plaintext,
//! or TLS records when the listener has TLS (hyper's own refusals are
//! replaced above TLS, in [`super::refusal`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use super::activity::Activity;

pub(super) struct SharedStream {
    socket: Arc<TcpStream>,
    activity: Arc<Activity>,
}

impl SharedStream {
    pub(super) fn new(socket: Arc<TcpStream>, activity: Arc<Activity>) -> SharedStream {
        SharedStream { socket, activity }
    }
}

impl SharedStream {
    /// The socket's write readiness; not ready means the kernel's send
    /// buffer is full, so the write waits on the client reading.
    fn write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let ready = self.socket.poll_write_ready(cx);
        if ready.is_pending() {
            self.activity.write_blocked();
        }
        ready
    }

    fn written(&self, wrote: io::Result<usize>) -> io::Result<usize> {
        if let Ok(n) = wrote {
            self.activity.add_written(n);
        }
        wrote
    }
}

/// Whether the client has sent bytes that are still in the kernel's
/// receive buffer. End of stream counts as nothing pending.
pub(super) fn has_unread_bytes(socket: &TcpStream) -> bool {
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
            let room = buf.remaining();
            let mut got = 0;
            // `try_read_buf` reads into the unfilled part as it is: hyper
            // hands over kilobytes of uninitialised buffer on every read, and
            // zeroing them first cost more than the rest of the read.
            //
            // A read that fills less than the room offered has emptied the
            // kernel's buffer, so the readiness is cleared then (as tokio's
            // own `TcpStream` does): otherwise the next read, for the next
            // request, would be a system call that finds nothing. Reporting
            // `WouldBlock` from the closure is what clears it; the bytes read
            // are kept.
            let read = self.socket.try_io(Interest::READABLE, || {
                got = self.socket.try_read_buf(buf)?;
                if got > 0 && got < room {
                    Err(io::ErrorKind::WouldBlock.into())
                } else {
                    Ok(got)
                }
            });
            match read {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => {}
                // Readiness was stale; poll again so the waker is registered.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
            self.activity.add_read(got);
            return Poll::Ready(Ok(()));
        }
    }
}

impl AsyncWrite for SharedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.write_ready(cx))?;
            match self.socket.try_write(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return Poll::Ready(self.written(other)),
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.write_ready(cx))?;
            match self.socket.try_write_vectored(bufs) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return Poll::Ready(self.written(other)),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Writes go straight to the socket.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let sock = socket2::SockRef::from(&*self.socket);
        match sock.shutdown(std::net::Shutdown::Write) {
            Err(e) if e.kind() != io::ErrorKind::NotConnected => Poll::Ready(Err(e)),
            _ => Poll::Ready(Ok(())),
        }
    }
}
