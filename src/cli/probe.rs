//! `v1compat probe`: a health check of a running gateway from inside its own
//! container, beside the request path. Runtime images have neither curl nor
//! bash (`/bin/sh` is dash there, without `/dev/tcp`), so the binary asks its
//! own admin listener and exits 0 only on a 200.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Largest answer read: the admin endpoints answer with a line or two.
const MAX_ANSWER: u64 = 64 * 1024;

// The field docs are `--help` text, where `[::]` is an address, not a link.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Clone, clap::Args)]
pub struct ProbeArgs {
    /// The admin path to ask for: /healthz (alive) or /readyz (can serve V1).
    #[arg(default_value = "/healthz")]
    pub path: String,
    /// The admin listener, HOST:PORT (an address or a name such as
    /// localhost:9090); an unspecified address (0.0.0.0, [::]) means this host.
    #[arg(long, env = "V1COMPAT_LISTEN__ADMIN", default_value = "127.0.0.1:9090")]
    pub admin: String,
    /// Give up after this long.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// Asks `args.path` of the admin listener; the status line on a 200, else why not.
pub async fn probe(args: &ProbeArgs) -> Result<String, String> {
    if !args.path.starts_with('/') || args.path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(format!("{:?} is not a path", args.path));
    }
    let admin = &args.admin;
    let asked = async {
        let addr = resolve(admin).await?;
        ask(reachable(addr), &args.path).await
    };
    tokio::time::timeout(args.timeout, asked)
        .await
        .unwrap_or_else(|_| Err(format!("{admin} did not answer within {:?}", args.timeout)))
}

/// The first address `admin` (HOST:PORT) names.
async fn resolve(admin: &str) -> Result<SocketAddr, String> {
    let mut addrs = tokio::net::lookup_host(admin)
        .await
        .map_err(|e| format!("--admin {admin:?}: {e} (expected HOST:PORT)"))?;
    addrs
        .next()
        .ok_or_else(|| format!("--admin {admin:?} names no address"))
}

/// A listener bound to every interface is reached through loopback.
fn reachable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, addr.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, addr.port()).into(),
        _ => addr,
    }
}

async fn ask(addr: SocketAddr, path: &str) -> Result<String, String> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    let mut answer = Vec::new();
    stream
        .take(MAX_ANSWER)
        .read_to_end(&mut answer)
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    let text = String::from_utf8_lossy(&answer);
    let status_line = text.lines().next().unwrap_or("").trim();
    let status = status_line.split_whitespace().nth(1);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").trim();
    match status {
        Some("200") => Ok(format!("{path}: {body}")),
        Some(code) => Err(format!("{path}: status {code}: {body}")),
        None => Err(format!("{addr} answered something that is not HTTP")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unspecified_addresses_mean_loopback() {
        assert_eq!(
            reachable("0.0.0.0:9090".parse().unwrap()),
            "127.0.0.1:9090".parse().unwrap()
        );
        assert_eq!(
            reachable("[::]:1".parse().unwrap()),
            "[::1]:1".parse().unwrap()
        );
        assert_eq!(
            reachable("10.1.2.3:9".parse().unwrap()),
            "10.1.2.3:9".parse().unwrap()
        );
    }

    /// Found by an operations review: `--admin localhost:PORT` was refused
    /// as not an address.
    #[tokio::test]
    async fn the_admin_listener_may_be_named() {
        let ip: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(resolve("127.0.0.1:9").await, Ok(ip));
        assert!(resolve("localhost:9").await.unwrap().ip().is_loopback());
        assert!(resolve("localhost")
            .await
            .unwrap_err()
            .contains("HOST:PORT"));
    }

    #[tokio::test]
    async fn paths_that_would_split_the_request_line_are_refused() {
        let args = ProbeArgs {
            path: "/healthz HTTP/1.0\r\nX: y".into(),
            admin: "127.0.0.1:9".into(),
            timeout: Duration::from_secs(1),
        };
        assert!(probe(&args).await.unwrap_err().contains("not a path"));
    }
}
