//! Outbound proxying for the V2 upstream and the shadow tester's legacy
//! client: the first hop of every pooled connection. `HTTPS_PROXY`,
//! `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` (upper or lower case, as curl
//! reads them) are captured with the rest of the environment when the
//! configuration loads; matching follows curl's rules (hyper-util's
//! matcher). A matched destination is reached through an HTTP `CONNECT`
//! tunnel, for `http://` destinations too, so TLS, when used, still runs end
//! to end between the gateway and V2.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The proxy variables, as found (empty when unset).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ProxyEnv {
    pub http: String,
    pub https: String,
    pub all: String,
    pub no: String,
}

impl ProxyEnv {
    /// The names read, upper case first as curl does.
    pub const VARIABLES: [[&'static str; 2]; 4] = [
        ["HTTP_PROXY", "http_proxy"],
        ["HTTPS_PROXY", "https_proxy"],
        ["ALL_PROXY", "all_proxy"],
        ["NO_PROXY", "no_proxy"],
    ];

    /// Picks the proxy variables out of `vars` (the whole environment).
    pub fn from_vars<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> ProxyEnv {
        let vars: Vec<(&str, &str)> = vars.into_iter().collect();
        let first = |names: [&str; 2]| {
            names
                .iter()
                .find_map(|n| vars.iter().find(|(k, _)| k == n).map(|(_, v)| v.trim()))
                .unwrap_or("")
                .to_owned()
        };
        let [http, https, all, no] = Self::VARIABLES.map(first);
        ProxyEnv {
            http,
            https,
            all,
            no,
        }
    }

    /// Every unusable proxy value, naming its variable. Only plain-HTTP
    /// proxies are supported (the tunnel to them is not itself encrypted).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (name, value) in [
            ("HTTP_PROXY", &self.http),
            ("HTTPS_PROXY", &self.https),
            ("ALL_PROXY", &self.all),
        ] {
            if value.is_empty() {
                continue;
            }
            let with_scheme = if value.contains("://") {
                value.clone()
            } else {
                format!("http://{value}")
            };
            match url::Url::parse(&with_scheme) {
                Ok(u) if u.scheme() == "http" && u.host_str().is_some() => {}
                Ok(u) if u.host_str().is_some() => problems.push(format!(
                    "{name}: {}:// proxies are not supported; use an http:// proxy",
                    u.scheme()
                )),
                _ => problems.push(format!("{name}: {:?} is not a proxy URL", redact(value))),
            }
        }
        problems
    }

    pub fn is_empty(&self) -> bool {
        self.http.is_empty() && self.https.is_empty() && self.all.is_empty()
    }

    fn matcher(&self) -> Matcher {
        Matcher::builder()
            .http(self.http.as_str())
            .https(self.https.as_str())
            .all(self.all.as_str())
            .no(self.no.as_str())
            .build()
    }

    /// Where a connection to `url` goes first: the proxy when one applies,
    /// else `url`'s own host and port. Used by the readiness check.
    pub fn first_hop(&self, url: &url::Url) -> Option<(String, u16)> {
        let direct = || {
            let host = url
                .host_str()?
                .trim_start_matches('[')
                .trim_end_matches(']');
            Some((host.to_owned(), url.port_or_known_default()?))
        };
        if self.is_empty() {
            return direct();
        }
        let uri: Uri = url.as_str().parse().ok()?;
        match self.matcher().intercept(&uri) {
            Some(proxy) => {
                let p = proxy.uri();
                let host = p.host()?.trim_start_matches('[').trim_end_matches(']');
                Some((host.to_owned(), p.port_u16().unwrap_or(80)))
            }
            None => direct(),
        }
    }
}

/// The value as it may be shown: proxy URLs may carry a password.
fn redact(value: &str) -> String {
    crate::common::redact::mask_url(value)
}

impl std::fmt::Debug for ProxyEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyEnv")
            .field("http", &redact(&self.http))
            .field("https", &redact(&self.https))
            .field("all", &redact(&self.all))
            .field("no", &self.no)
            .finish()
    }
}

/// A connector that opens TCP connections directly or, for destinations
/// the proxy variables intercept, through a `CONNECT` tunnel. Either way
/// the caller gets a TCP stream to wrap in TLS (or not).
#[derive(Clone)]
pub(crate) struct ProxyConnector {
    http: HttpConnector,
    matcher: Option<Arc<Matcher>>,
}

impl ProxyConnector {
    pub(crate) fn new(http: HttpConnector, proxy: &ProxyEnv) -> ProxyConnector {
        let matcher = (!proxy.is_empty()).then(|| Arc::new(proxy.matcher()));
        ProxyConnector { http, matcher }
    }
}

impl Service<Uri> for ProxyConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let intercept = self.matcher.as_ref().and_then(|m| m.intercept(&dst));
        let Some(proxy) = intercept else {
            let connecting = self.http.call(dst);
            return Box::pin(async move { connecting.await.map_err(Into::into) });
        };
        // The tunnel assumes port 443 when the destination names none;
        // an http:// destination means 80.
        let dst = with_port(dst);
        let mut tunnel = Tunnel::new(proxy.uri().clone(), self.http.clone());
        if let Some(auth) = proxy.basic_auth() {
            tunnel = tunnel.with_auth(auth.clone());
        }
        Box::pin(async move {
            tunnel
                .call(dst)
                .await
                .map_err(|e| format!("through the proxy: {e}").into())
        })
    }
}

fn with_port(dst: Uri) -> Uri {
    if dst.port().is_some() {
        return dst;
    }
    let port = if dst.scheme_str() == Some("http") {
        80
    } else {
        443
    };
    let Some(host) = dst.host() else { return dst };
    let mut parts = dst.clone().into_parts();
    parts.authority = format!("{host}:{port}").parse().ok();
    Uri::from_parts(parts).unwrap_or(dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upper_case_wins_and_values_are_trimmed() {
        let p = ProxyEnv::from_vars([
            ("https_proxy", "http://lower:1"),
            ("HTTPS_PROXY", " http://upper:2 "),
            ("no_proxy", "internal.example"),
            ("PATH", "/bin"),
        ]);
        assert_eq!(p.https, "http://upper:2");
        assert_eq!(p.no, "internal.example");
        assert!(p.http.is_empty() && p.all.is_empty());
    }

    #[test]
    fn unusable_proxies_are_named_without_their_password() {
        let p = ProxyEnv {
            https: "socks5://u:secret@p.example:1080".into(),
            http: "http://".into(),
            all: "proxy.example:3128".into(),
            ..ProxyEnv::default()
        };
        let problems = p.problems().join("\n");
        assert!(problems.contains("HTTPS_PROXY: socks5://"), "{problems}");
        assert!(problems.contains("HTTP_PROXY"), "{problems}");
        assert!(
            !problems.contains("ALL_PROXY"),
            "schemeless means http: {problems}"
        );
        assert!(!problems.contains("secret"), "{problems}");
        assert!(!format!("{p:?}").contains("secret"));
        // Without a scheme too, as proxy variables are often written.
        let p = ProxyEnv {
            all: "u:hunter2@proxy.example:3128".into(),
            ..ProxyEnv::default()
        };
        assert!(!format!("{p:?}").contains("hunter2"), "{p:?}");
    }

    #[test]
    fn first_hop_follows_no_proxy() {
        let p = ProxyEnv {
            https: "http://proxy.example:3128".into(),
            no: "internal.example".into(),
            ..ProxyEnv::default()
        };
        let v2 = url::Url::parse("https://v2.example/api").unwrap();
        assert_eq!(p.first_hop(&v2), Some(("proxy.example".into(), 3128)));
        let inside = url::Url::parse("https://v2.internal.example").unwrap();
        assert_eq!(
            p.first_hop(&inside),
            Some(("v2.internal.example".into(), 443))
        );
        // HTTPS_PROXY is not used for http:// destinations.
        let plain = url::Url::parse("http://v2.example:81").unwrap();
        assert_eq!(p.first_hop(&plain), Some(("v2.example".into(), 81)));
    }

    #[test]
    fn tunnel_destinations_get_their_scheme_port() {
        assert_eq!(
            with_port("http://a.example/x".parse().unwrap()).port_u16(),
            Some(80)
        );
        assert_eq!(
            with_port("https://a.example".parse().unwrap()).port_u16(),
            Some(443)
        );
        assert_eq!(
            with_port("https://a.example:8443".parse().unwrap()).port_u16(),
            Some(8443)
        );
    }
}
