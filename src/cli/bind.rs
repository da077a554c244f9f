//! Binding the listeners, before anything serves: the one place a port
//! collision is explained. `sandbox` and `serve` both default to ports
//! 8080 (V1) and 9090 (admin), so "address in use" most often means the
//! other one is still running.

use std::net::SocketAddr;

use tokio::net::TcpListener;

/// Binds `addr` for the listener called `what` (`listen.public`, `--listen`,
/// …). On a port already in use the error says how to pick another one:
/// `change` names the key or flag that sets it.
pub async fn bind(addr: SocketAddr, what: &str, change: &str) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| describe(addr, what, change, &e))
}

fn describe(addr: SocketAddr, what: &str, change: &str, e: &std::io::Error) -> String {
    let mut message = format!("cannot listen on {addr} ({what}): {e}");
    if e.kind() == std::io::ErrorKind::AddrInUse {
        message.push_str(&format!(
            "\n  hint: another process holds port {port}; `v1compat sandbox` and `v1compat serve` \
both default to 8080 (V1) and 9090 (admin), so stop the other one or choose a free port \
with {change} (port 0 picks one)",
            port = addr.port()
        ));
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_taken_port_names_the_way_out() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        let err = bind(addr, "listen.public", "V1COMPAT_LISTEN__PUBLIC")
            .await
            .unwrap_err();
        assert!(err.contains("listen.public"), "{err}");
        assert!(err.contains("hint:"), "{err}");
        assert!(err.contains("V1COMPAT_LISTEN__PUBLIC"), "{err}");
        assert!(err.contains(&addr.port().to_string()), "{err}");
    }

    #[test]
    fn other_errors_carry_no_hint() {
        let e = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let msg = describe(
            SocketAddr::from(([127, 0, 0, 1], 80)),
            "listen.admin",
            "x",
            &e,
        );
        assert!(!msg.contains("hint"), "{msg}");
    }
}
