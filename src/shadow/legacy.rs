//! The client to the legacy V1 service: the hop a shadow copy (or, with
//! `shadow.primary = "legacy"`, the client's own request) takes to the V1
//! service being retired. Built from [`crate::upstream::http_client`] like the V2
//! client (same TLS, pool, base-URL checks and error wording), but it sends
//! V1 requests as they came: method, path, query, body, and the client's
//! own key headers (forwarded, never logged). Every request carries the
//! loop guard `x-v1compat-shadow: 1`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};

use crate::upstream::http_client::{
    body_failure, origin_and_prefix, pooled_client, send_failure, tls_config, HyperClient,
    CONNECT_TIMEOUT, SIDE_IDLE_TIMEOUT, SIDE_MAX_IDLE_PER_HOST,
};
use crate::upstream::{ProxyEnv, UpstreamFailure};

/// Marks a request as a shadow copy; such requests are never mirrored again.
pub const LOOP_GUARD: HeaderName = HeaderName::from_static("x-v1compat-shadow");

/// Headers of the client's request that travel to legacy unchanged (the
/// request's id travels too, as the gateway settled it: see `call_of` in
/// the mirror).
const FORWARDED: [&str; 3] = ["api-key", "authorization", "content-type"];

/// A V1 request ready to send anywhere: to legacy, or to a gateway.
#[derive(Debug, Clone)]
pub struct V1Call {
    pub method: Method,
    /// `/api/v1/run/detail`, `/api/store`, …
    pub path: String,
    pub query: Option<String>,
    /// Only the `FORWARDED` headers are sent.
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl V1Call {
    /// Keeps only the headers that are forwarded.
    pub fn forwarded_headers(all: &HeaderMap) -> HeaderMap {
        let mut out = HeaderMap::new();
        for name in FORWARDED {
            if let Some(v) = all.get(name) {
                let mut v = v.clone();
                if name == "api-key" || name == "authorization" {
                    v.set_sensitive(true);
                }
                out.insert(HeaderName::from_static(name), v);
            }
        }
        out
    }
}

/// One V1 answer as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub status: StatusCode,
    pub body: Bytes,
    pub latency: Duration,
}

/// A pooled client to one V1 base URL. Cheap to clone.
#[derive(Clone)]
pub struct LegacyClient {
    client: HyperClient,
    /// `scheme://authority[/prefix]`, no trailing slash.
    base: String,
}

impl std::fmt::Debug for LegacyClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacyClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl LegacyClient {
    /// A client to `base_url` (http or https, no credentials, query or
    /// fragment), through `proxy` where it applies. Does not connect.
    pub fn new(base_url: &url::Url, proxy: &ProxyEnv) -> Result<LegacyClient, String> {
        // The URL itself stays out of the message: it may carry a password.
        let base = origin_and_prefix(base_url).map_err(|e| format!("base URL {e}"))?;
        let client = pooled_client(
            tls_config(None)?,
            proxy,
            CONNECT_TIMEOUT,
            SIDE_IDLE_TIMEOUT,
            SIDE_MAX_IDLE_PER_HOST,
        );
        Ok(LegacyClient { client, base })
    }

    /// Sends `call` with the loop guard and reads the whole answer, up to
    /// `limit` bytes, within `timeout`. Never retried: a copy that fails is
    /// counted, not repeated; a client's request is the client's to retry.
    pub async fn send(
        &self,
        call: &V1Call,
        timeout: Duration,
        limit: usize,
    ) -> Result<Received, UpstreamFailure> {
        let started = Instant::now();
        let uri: Uri = match &call.query {
            Some(q) => format!("{}{}?{q}", self.base, call.path),
            None => format!("{}{}", self.base, call.path),
        }
        .parse()
        .map_err(|e| UpstreamFailure::Unreachable(format!("invalid legacy URI: {e}")))?;
        let mut req = Request::new(Full::new(call.body.clone()));
        *req.method_mut() = call.method.clone();
        *req.uri_mut() = uri;
        *req.headers_mut() = call.headers.clone();
        req.headers_mut()
            .insert(LOOP_GUARD, HeaderValue::from_static("1"));
        let exchange = async {
            let resp = self.client.request(req).await.map_err(send_failure)?;
            let (parts, body) = resp.into_parts();
            let body = Limited::new(body, limit)
                .collect()
                .await
                .map_err(|e| body_failure(e, limit))?
                .to_bytes();
            Ok(Received {
                status: parts.status,
                body,
                latency: started.elapsed(),
            })
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or(Err(UpstreamFailure::Timeout(timeout)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_with_a_password_is_refused_without_showing_it() {
        let url = url::Url::parse("https://ops:hunter2@legacy.example/v1").unwrap();
        let err = LegacyClient::new(&url, &ProxyEnv::default()).unwrap_err();
        assert!(err.contains("credentials"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        let url = url::Url::parse("http://legacy.example/prefix/").unwrap();
        let client = LegacyClient::new(&url, &ProxyEnv::default()).unwrap();
        assert_eq!(client.base, "http://legacy.example/prefix");
    }
}
