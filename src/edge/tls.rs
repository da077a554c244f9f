//! TLS on the listeners: the first thing an accepted connection meets when
//! `listen.tls_cert_file` / `tls_key_file` (public) or
//! `listen.admin_tls_cert_file` / `admin_tls_key_file` (admin) are set, before
//! the HTTP stack sees a byte. rustls with the `ring` provider, HTTP/2 and
//! HTTP/1.1 by ALPN. The certificate and key are read again on a reload (the
//! files changed, or SIGHUP) and swapped for new handshakes; connections
//! already open keep the certificate they were made with.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A client that has not finished its handshake by then is dropped, so a
/// silent connection cannot hold a task forever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a listener's certificate chain and private key live (PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// The files' directories: what a reload watches (a Kubernetes Secret
    /// volume swaps its files by replacing a symlink in the directory).
    pub fn dirs(&self) -> Vec<PathBuf> {
        [&self.cert, &self.key]
            .iter()
            .map(|p| p.parent().unwrap_or(Path::new(".")).to_path_buf())
            .collect()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Which of a listener's two files a problem is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFile {
    Cert,
    /// The key file, alone or as the certificate's pair.
    Key,
}

/// Reads both files and checks that the key belongs to the certificate.
/// Also returns the files' bytes, to tell later whether they changed.
fn read(files: &TlsFiles) -> Result<(CertifiedKey, Vec<u8>), String> {
    read_checked(files).map_err(|(_, e)| e)
}

fn read_checked(files: &TlsFiles) -> Result<(CertifiedKey, Vec<u8>), (TlsFile, String)> {
    let (cert, key) = (files.cert.display(), files.key.display());
    let cert_pem =
        std::fs::read(&files.cert).map_err(|e| (TlsFile::Cert, format!("{cert}: {e}")))?;
    let key_pem = std::fs::read(&files.key).map_err(|e| (TlsFile::Key, format!("{key}: {e}")))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| (TlsFile::Cert, format!("{cert}: {e}")))?;
    if chain.is_empty() {
        return Err((TlsFile::Cert, format!("{cert}: no certificate in it")));
    }
    // Never echo the key file's content, only its name.
    let private = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|_| (TlsFile::Key, format!("{key}: no usable private key in it")))?;
    let certified = CertifiedKey::from_der(chain, private, &provider()).map_err(|e| {
        let why = match e {
            rustls::Error::InconsistentKeys(_) => {
                format!("the private key in {key} does not belong to the certificate in {cert}")
            }
            e => format!("{cert} and {key}: {e}"),
        };
        (TlsFile::Key, why)
    })?;
    let mut stamp = cert_pem;
    stamp.extend_from_slice(&key_pem);
    Ok((certified, stamp))
}

/// Checks a listener's files without keeping anything: configuration
/// validation. The error says which file it is about.
pub fn check(files: &TlsFiles) -> Result<(), (TlsFile, String)> {
    read_checked(files).map(|_| ())
}

/// The certificate a listener presents, swappable while it serves.
#[derive(Debug)]
struct CertStore {
    files: TlsFiles,
    current: ArcSwap<CertifiedKey>,
    /// The bytes the current certificate was made from.
    stamp: Mutex<Vec<u8>>,
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// Accepts TLS on one listener; cheap to clone.
#[derive(Clone)]
pub struct Acceptor {
    inner: tokio_rustls::TlsAcceptor,
    store: Arc<CertStore>,
}

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acceptor")
            .field("files", &self.store.files)
            .finish_non_exhaustive()
    }
}

impl Acceptor {
    /// Reads the files; fails, naming them, when they are unusable.
    pub fn new(files: &TlsFiles) -> Result<Acceptor, String> {
        let (certified, stamp) = read(files)?;
        let store = Arc::new(CertStore {
            files: files.clone(),
            current: ArcSwap::from_pointee(certified),
            stamp: Mutex::new(stamp),
        });
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?
            .with_no_client_auth()
            .with_cert_resolver(store.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Acceptor {
            inner: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            store,
        })
    }

    pub fn files(&self) -> &TlsFiles {
        &self.store.files
    }

    /// Reads the files again and, when they changed and are usable, presents
    /// the new certificate to new handshakes. `Ok(true)` when it changed; on
    /// an error the current certificate stays.
    pub fn reload(&self) -> Result<bool, String> {
        let (certified, stamp) = read(&self.store.files)?;
        let mut current = self
            .store
            .stamp
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if *current == stamp {
            return Ok(false);
        }
        self.store.current.store(Arc::new(certified));
        *current = stamp;
        Ok(true)
    }

    /// The TLS handshake on an accepted connection, bounded in time.
    async fn handshake<IO>(&self, stream: IO) -> io::Result<Stream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.inner.accept(stream)).await {
            Ok(Ok(tls)) => Ok(Stream::Tls(Box::new(tls))),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            )),
        }
    }
}

/// An accepted connection as the HTTP stack sees it.
pub enum Stream<IO> {
    Plain(IO),
    Tls(Box<tokio_rustls::server::TlsStream<IO>>),
}

/// Wraps an accepted connection in TLS when the listener has it. `None`
/// when the handshake failed (logged at debug: scanners and wrong-scheme
/// clients are routine, not the operator's problem).
pub async fn accept<IO>(tls: Option<&Acceptor>, stream: IO) -> Option<Stream<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let Some(acceptor) = tls else {
        return Some(Stream::Plain(stream));
    };
    match acceptor.handshake(stream).await {
        Ok(stream) => Some(stream),
        Err(e) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            None
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
