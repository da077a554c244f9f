//! The SSRF guard of delivery. A V1 client chooses the callback URL, so the
//! gateway must not become a way into its own network: every address a target
//! name resolves to is checked *at delivery time*, and the connector connects
//! only to the addresses that passed (a resolver for hyper's `HttpConnector`),
//! so a DNS answer that changes between check and connect cannot slip through.
//! Literal IP hosts are checked by [`Policy::check_host`] before connecting.
//!
//! Refused by default: loopback, private (RFC 1918, CGNAT, IPv6 ULA), and
//! always unless a CIDR in `callbacks.allow_cidrs` names them: link-local
//! (which holds the cloud metadata address), unspecified, multicast,
//! broadcast, documentation and reserved ranges. `allow_private` opens the
//! first group only. IPv4-mapped, NAT64 and 6to4 IPv6 forms are judged by the
//! IPv4 address they carry.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::Name;

use crate::common::cidr::{canonical, Cidr};

/// How an address is treated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Class {
    Public,
    /// Loopback, RFC 1918, CGNAT, ULA: `allow_private` opens these.
    Private,
    /// Link-local (cloud metadata), unspecified, multicast, documentation,
    /// reserved: only an explicit CIDR opens these.
    Forbidden,
}

pub(crate) fn classify(ip: IpAddr) -> Class {
    match canonical(ip) {
        IpAddr::V4(a) => classify_v4(a),
        IpAddr::V6(a) => classify_v6(a),
    }
}

fn classify_v4(a: Ipv4Addr) -> Class {
    let o = a.octets();
    // Alibaba Cloud's metadata address sits inside the CGNAT block.
    if a == Ipv4Addr::new(100, 100, 100, 200) {
        return Class::Forbidden;
    }
    if a.is_loopback() || a.is_private() || (o[0] == 100 && (o[1] & 0xc0) == 64) {
        return Class::Private;
    }
    let forbidden = a.is_link_local()
        || a.is_unspecified()
        || o[0] == 0
        || a.is_multicast()
        || a.is_broadcast()
        || o[0] >= 240
        || a.is_documentation()
        || (o[0] == 198 && (o[1] & 0xfe) == 18)
        || (o[0] == 192 && o[1] == 0 && o[2] == 0);
    if forbidden {
        Class::Forbidden
    } else {
        Class::Public
    }
}

fn classify_v6(a: Ipv6Addr) -> Class {
    let s = a.segments();
    if a.is_loopback() || (s[0] & 0xfe00) == 0xfc00 {
        // AWS's IPv6 metadata address lives inside the ULA block.
        if a == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
            return Class::Forbidden;
        }
        return Class::Private;
    }
    let forbidden = a.is_unspecified()
        || (s[0] & 0xffc0) == 0xfe80
        || a.is_multicast()
        || (s[0] == 0x2001 && s[1] == 0xdb8)
        || (s[0] == 0x100 && s[1..4] == [0, 0, 0]);
    if forbidden {
        Class::Forbidden
    } else {
        Class::Public
    }
}

/// The delivery address policy (`callbacks.allow_private`, `callbacks.allow_cidrs`).
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub allow_private: bool,
    pub allow: Vec<Cidr>,
}

impl Policy {
    /// `Err(reason)` when delivery must not connect to `ip`.
    pub fn check(&self, ip: IpAddr) -> Result<(), &'static str> {
        if self.allow.iter().any(|c| c.contains(ip)) {
            return Ok(());
        }
        match classify(ip) {
            Class::Public => Ok(()),
            Class::Private if self.allow_private => Ok(()),
            Class::Private => Err("private or loopback address (callbacks.allow_private)"),
            Class::Forbidden => Err("link-local, metadata or reserved address"),
        }
    }

    /// A literal IP host is checked here; names are checked by [`Resolver`].
    pub fn check_host(&self, host: &str) -> Result<(), &'static str> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        match bare.parse::<IpAddr>() {
            Ok(ip) => self.check(ip),
            Err(_) => Ok(()),
        }
    }
}

/// Resolves a name and keeps only the addresses the policy permits; hyper's
/// connector then connects to exactly those.
#[derive(Clone)]
pub(crate) struct Resolver {
    pub policy: std::sync::Arc<Policy>,
}

impl tower::Service<Name> for Resolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, std::io::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let policy = self.policy.clone();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let mut refused = None;
            let kept: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| match policy.check(a.ip()) {
                    Ok(()) => true,
                    Err(why) => {
                        refused = Some(why);
                        false
                    }
                })
                .collect();
            if kept.is_empty() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                        "refused target: {}",
                        refused.unwrap_or("name resolved to no address")
                    ),
                ));
            }
            Ok(kept.into_iter())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn classes() {
        for (a, c) in [
            ("8.8.8.8", Class::Public),
            ("2606:4700::1111", Class::Public),
            ("127.0.0.1", Class::Private),
            ("10.1.2.3", Class::Private),
            ("172.16.0.1", Class::Private),
            ("192.168.1.1", Class::Private),
            ("100.64.0.1", Class::Private),
            ("::1", Class::Private),
            ("fd12::1", Class::Private),
            ("169.254.169.254", Class::Forbidden),
            ("fd00:ec2::254", Class::Forbidden),
            ("100.100.100.200", Class::Forbidden),
            ("0.0.0.0", Class::Forbidden),
            ("::", Class::Forbidden),
            ("fe80::1", Class::Forbidden),
            ("224.0.0.1", Class::Forbidden),
            ("255.255.255.255", Class::Forbidden),
            ("192.0.2.1", Class::Forbidden),
            ("::ffff:127.0.0.1", Class::Private),
            ("::ffff:169.254.169.254", Class::Forbidden),
            ("64:ff9b::a00:1", Class::Private),
            ("2002:a9fe:a9fe::1", Class::Forbidden),
            ("::127.0.0.1", Class::Private),
            ("::169.254.169.254", Class::Forbidden),
            ("64:ff9b:1::7f00:1", Class::Private),
            ("64:ff9b:1::a9fe:a9fe", Class::Forbidden),
        ] {
            assert_eq!(classify(ip(a)), c, "{a}");
        }
    }

    #[test]
    fn policy_opens_private_but_not_metadata_and_cidrs_open_anything() {
        let strict = Policy::default();
        assert!(strict.check(ip("127.0.0.1")).is_err());
        assert!(strict.check(ip("93.184.216.34")).is_ok());
        let private = Policy {
            allow_private: true,
            allow: vec![],
        };
        assert!(private.check(ip("127.0.0.1")).is_ok());
        assert!(private.check(ip("169.254.169.254")).is_err());
        let cidr = Policy {
            allow_private: false,
            allow: vec![
                "10.20.0.0/16".parse().unwrap(),
                "fe80::/10".parse().unwrap(),
            ],
        };
        assert!(cidr.check(ip("10.20.9.9")).is_ok());
        assert!(cidr.check(ip("10.21.0.1")).is_err());
        assert!(cidr.check(ip("fe80::5")).is_ok());
        assert!(strict.check_host("[::1]").is_err());
        assert!(strict.check_host("hooks.example").is_ok());
    }

    #[tokio::test]
    async fn resolver_drops_refused_addresses() {
        use tower::Service;
        let mut strict = Resolver {
            policy: Default::default(),
        };
        let err = strict.call("localhost".parse().unwrap()).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
        let mut open = Resolver {
            policy: std::sync::Arc::new(Policy {
                allow_private: true,
                allow: vec![],
            }),
        };
        let got: Vec<_> = open
            .call("localhost".parse().unwrap())
            .await
            .unwrap()
            .collect();
        assert!(!got.is_empty() && got.iter().all(|a| a.ip().is_loopback()));
    }
}
