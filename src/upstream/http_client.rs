//! The outgoing HTTP plumbing every hop that leaves the gateway shares: the
//! V2 upstream ([`crate::upstream::HttpUpstream`], the last hop of the
//! request path), the shadow tester's legacy V1 client
//! ([`crate::shadow::legacy`], beside it) and the callback deliverer
//! ([`crate::callbacks`], after it). Each keeps its own policy (retries,
//! loop guard, address checks); what is defined here, once, is how
//! connections are made (TCP settings, rustls, proxies), the side clients'
//! pool (the upstream keeps its own, `upstream::pool`), which base URLs are
//! usable, and how a transport error is put into words.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use http_body_util::{Full, LengthLimitError};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::dns::GaiResolver;
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioTimer;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use crate::upstream::proxy::{ProxyConnector, ProxyEnv};
use crate::upstream::UpstreamFailure;

/// Connect timeout of a client that has no setting of its own (the legacy
/// V1 service), and the default of `upstream.connect_timeout_ms`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long an idle connection of a side client (legacy V1, callback
/// targets) stays pooled: their traffic is a sample or a trickle, so
/// connections are not kept as long as the upstream's.
pub const SIDE_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Idle connections the legacy V1 client keeps per host.
pub const SIDE_MAX_IDLE_PER_HOST: usize = 32;

/// The proxy-aware HTTP/1.1 + HTTP/2 client of the upstream and the legacy
/// V1 service.
pub(crate) type HyperClient = Client<HttpsConnector<ProxyConnector>, Full<Bytes>>;

/// Parses the base URL configured under `key` and checks it as the clients
/// will when they are built, so a configuration that validates builds.
pub fn parse_base_url(key: &str, text: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(text)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        .ok_or_else(|| {
            let shown = crate::common::redact::mask_url(text);
            format!("{key}: {shown:?} is not an http(s) URL")
        })?;
    origin_and_prefix(&url).map_err(|e| format!("{key}: {e}"))?;
    Ok(url)
}

/// Checks the base URL once and keeps the part every call starts with.
pub(crate) fn origin_and_prefix(url: &url::Url) -> Result<String, String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "must be http:// or https://, not {}://",
            url.scheme()
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry credentials; keys are sent as headers".to_owned());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("must not have a query or fragment".to_owned());
    }
    // `host_str` keeps the brackets of an IPv6 literal.
    let Some(host) = url.host_str() else {
        return Err("has no host".to_owned());
    };
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    let prefix = url.path().trim_end_matches('/');
    let origin_and_prefix = format!("{}://{host}{port}{prefix}", url.scheme());
    // Prove once that any V2 path appended to it makes a valid URI.
    format!("{origin_and_prefix}/api/v2")
        .parse::<Uri>()
        .map_err(|e| format!("does not form a valid request URI: {e}"))?;
    Ok(origin_and_prefix)
}

/// A pooled HTTP/1.1 + HTTP/2 client over [`connector`], for the shadow
/// tester's legacy client.
pub(crate) fn pooled_client(
    tls: rustls::ClientConfig,
    proxy: &ProxyEnv,
    connect_timeout: Duration,
    idle_timeout: Duration,
    max_idle_per_host: usize,
) -> HyperClient {
    pool(
        connector(tls, proxy, connect_timeout),
        idle_timeout,
        max_idle_per_host,
    )
}

/// Connections over plain TCP or rustls (offering h2 and http/1.1 by
/// ALPN), directly or through the proxy `proxy` names: what the V2
/// upstream's own pool ([`crate::upstream`]) and [`pooled_client`] connect
/// with.
pub(crate) fn connector(
    tls: rustls::ClientConfig,
    proxy: &ProxyEnv,
    connect_timeout: Duration,
) -> HttpsConnector<ProxyConnector> {
    let http = tcp_connector(GaiResolver::new(), connect_timeout);
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(ProxyConnector::new(http, proxy))
}

/// The TCP connector under every client: `resolver` picks the addresses
/// (the callback deliverer's checks each one), no Nagle delay.
pub(crate) fn tcp_connector<R>(resolver: R, connect_timeout: Duration) -> HttpConnector<R> {
    let mut http = HttpConnector::new_with_resolver(resolver);
    // The TLS wrapper handles `https://`; the inner connector must let it.
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    http.set_nodelay(true);
    http
}

/// The connection pool over `connector`.
pub(crate) fn pool<C: Connect + Clone>(
    connector: C,
    idle_timeout: Duration,
    max_idle_per_host: usize,
) -> Client<C, Full<Bytes>> {
    // Connection tasks absorb their own wake-ups (see `conn::coalesce`).
    Client::builder(crate::common::coalesce::CoalescingExecutor)
        // Without a timer the pool never evicts idle connections.
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(idle_timeout)
        .pool_max_idle_per_host(max_idle_per_host)
        .build(connector)
}

/// rustls with the `ring` provider passed explicitly, so no process-wide
/// default provider has to be installed. Mozilla roots plus any extra PEM.
pub(crate) fn tls_config(extra_root_pem: Option<&[u8]>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(pem) = extra_root_pem {
        let mut added = 0usize;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| format!("not a PEM file: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("unusable CA certificate: {e}"))?;
            added += 1;
        }
        if added == 0 {
            return Err(
                "no PEM certificate in it (a CA file holds -----BEGIN CERTIFICATE----- blocks)"
                    .to_owned(),
            );
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// Connect errors mean the service never saw the request; anything else may
/// have reached it.
pub(crate) fn send_failure(err: hyper_util::client::legacy::Error) -> UpstreamFailure {
    let detail = error_chain(&err);
    if err.is_connect() {
        UpstreamFailure::Unreachable(detail)
    } else {
        UpstreamFailure::Broken(detail)
    }
}

/// A body read that hit the size cap, or broke off.
pub(crate) fn body_failure(
    err: Box<dyn std::error::Error + Send + Sync>,
    limit: usize,
) -> UpstreamFailure {
    if err.downcast_ref::<LengthLimitError>().is_some() {
        UpstreamFailure::TooLarge(limit)
    } else {
        UpstreamFailure::Broken(error_chain(err.as_ref()))
    }
}

/// hyper's top-level errors say little ("client error (Connect)"); the
/// causes say what happened. None of them carry the URL or headers.
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> url::Url {
        url::Url::parse(s).unwrap()
    }

    #[test]
    fn base_url_prefix_is_kept_without_trailing_slash() {
        assert_eq!(
            origin_and_prefix(&url("https://v2.example")).unwrap(),
            "https://v2.example"
        );
        assert_eq!(
            origin_and_prefix(&url("http://127.0.0.1:8080/gw/v2proxy/")).unwrap(),
            "http://127.0.0.1:8080/gw/v2proxy"
        );
        assert_eq!(
            origin_and_prefix(&url("http://[::1]:9/")).unwrap(),
            "http://[::1]:9"
        );
    }

    #[test]
    fn unusable_base_urls_are_refused() {
        for bad in [
            "ftp://v2.example",
            "https://user:pw@v2.example",
            "https://v2.example/?token=x",
            "https://v2.example/#x",
            "unix:/tmp/sock",
        ] {
            assert!(origin_and_prefix(&url(bad)).is_err(), "{bad}");
            assert!(parse_base_url("k", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn configured_base_urls_are_named_by_their_key() {
        assert_eq!(
            parse_base_url("upstream.base_url", "ftp://x").unwrap_err(),
            "upstream.base_url: \"ftp://x\" is not an http(s) URL"
        );
        assert_eq!(
            parse_base_url("shadow.legacy_base_url", "https://a:b@legacy.example").unwrap_err(),
            "shadow.legacy_base_url: must not carry credentials; keys are sent as headers"
        );
        assert!(parse_base_url("k", "not a url").is_err());
        assert_eq!(
            parse_base_url("k", "http://legacy.example/v1/")
                .unwrap()
                .path(),
            "/v1/"
        );
    }

    #[test]
    fn extra_roots_must_be_certificates() {
        assert!(tls_config(None).is_ok());
        assert!(tls_config(Some(b"not a pem")).is_err());
    }

    #[test]
    fn error_chains_name_every_cause() {
        let outer = Wrapped(std::io::Error::other("connection refused"));
        assert_eq!(error_chain(&outer), "connect: connection refused");

        #[derive(Debug)]
        struct Wrapped(std::io::Error);
        impl std::fmt::Display for Wrapped {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("connect")
            }
        }
        impl std::error::Error for Wrapped {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
    }
}
