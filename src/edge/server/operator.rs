//! Who may use the admin listener's operator endpoints (the callback
//! relay's `/callbacks/…`: they list clients' runs and redeliver with
//! clients' keys; the migration inventory's `/inventory`: it names
//! clients and their addresses), checked before either sees the request. Probes,
//! `/metrics` and `/openapi.json` are open and never come here.
//!
//! * `admin.operator_api = false`: the endpoints answer 404, saying so.
//! * No token configured (`admin.operator_token` or
//!   `admin.operator_token_file`): closed, 403 saying how to open them.
//! * A token: `Authorization: Bearer <token>` required (401 with
//!   `WWW-Authenticate: Bearer` without it or with another token), compared
//!   in constant time (HMAC tags under a key made at load, so neither the
//!   bytes nor the length of the token show in the time taken).
//! * Whatever the token, a request a browser could send from another site
//!   without asking (a "simple" cross-site request) is refused: a POST must
//!   say `Content-Type: application/json`, and a request marked
//!   `Sec-Fetch-Site: cross-site` or `same-site` is refused outright.
//!
//! `v1compat sandbox`, a loopback demo, opens them without a token
//! ([`OperatorAccess::open`]); no configuration key does.

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};
use http_body_util::Full;
use ring::hmac;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The shortest token accepted: a guessable token is no guard.
pub(crate) const MIN_TOKEN_LEN: usize = 16;
/// The longest token accepted (it travels in a header).
const MAX_TOKEN_LEN: usize = 512;

/// `[admin]`: the operator endpoints of the admin listener.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminSection {
    /// `false` turns the operator endpoints off (404).
    pub operator_api: bool,
    /// The bearer token they require. Empty = none (closed). Prefer
    /// `operator_token_file` or `V1COMPAT_ADMIN__OPERATOR_TOKEN`.
    pub operator_token: String,
    /// A file holding the token (a Kubernetes Secret's key, say); read at
    /// start and at each reload, surrounding whitespace ignored.
    pub operator_token_file: String,
}

impl Default for AdminSection {
    fn default() -> Self {
        AdminSection {
            operator_api: true,
            operator_token: String::new(),
            operator_token_file: String::new(),
        }
    }
}

/// How the operator endpoints are reached, as validated.
#[derive(Clone, Default)]
pub struct OperatorAccess {
    enabled: bool,
    token: Option<Token>,
    /// Open without a token (the loopback sandbox only).
    open: bool,
    /// The token as read, for the reload's stamp (a rotated Secret is a change).
    stamp: Vec<u8>,
    /// `admin.operator_token_file`, whose directory a reload watches.
    file: Option<std::path::PathBuf>,
}

/// A token, kept as an HMAC tag under a key of this process.
#[derive(Clone)]
struct Token {
    key: hmac::Key,
    tag: hmac::Tag,
}

impl std::fmt::Debug for OperatorAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorAccess")
            .field("enabled", &self.enabled)
            // Whether there is one, never what it is.
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .field("open", &self.open)
            .finish()
    }
}

impl OperatorAccess {
    /// With `token` required (`None`: closed).
    pub fn with_token(token: Option<&str>) -> OperatorAccess {
        // A digest, not the tag: the key is new at each load, the digest
        // the same for the same token.
        let stamp = token
            .map(|t| {
                ring::digest::digest(&ring::digest::SHA256, t.as_bytes())
                    .as_ref()
                    .to_vec()
            })
            .unwrap_or_default();
        let token = token.map(|t| {
            let rng = ring::rand::SystemRandom::new();
            let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
                .unwrap_or_else(|_| hmac::Key::new(hmac::HMAC_SHA256, &rand::random::<[u8; 32]>()));
            let tag = hmac::sign(&key, t.as_bytes());
            Token { key, tag }
        });
        OperatorAccess {
            enabled: true,
            stamp,
            token,
            open: false,
            file: None,
        }
    }

    /// Open to anyone who reaches the listener: the sandbox's loopback demo.
    pub fn open() -> OperatorAccess {
        OperatorAccess {
            enabled: true,
            token: None,
            open: true,
            stamp: Vec::new(),
            file: None,
        }
    }

    /// Whether a token is configured.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// Whether the endpoints are on (`admin.operator_api`).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// `admin.operator_token_file`, when the token comes from one.
    pub fn token_file(&self) -> Option<&std::path::Path> {
        self.file.as_deref()
    }

    /// What a reload compares: the token file's content may change while
    /// the configuration text does not.
    pub fn stamp(&self) -> &[u8] {
        &self.stamp
    }

    /// `None` when the request may go on; else the refusal.
    pub fn refuse(&self, method: &Method, headers: &HeaderMap) -> Option<Response<Full<Bytes>>> {
        if !self.enabled {
            return Some(reply(
                StatusCode::NOT_FOUND,
                "the operator API is off (admin.operator_api = false)",
            ));
        }
        // Before the credential: a browser's cross-site request is refused
        // whoever sent it, even where no token is needed.
        if let Some(site) = headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .filter(|s| s.eq_ignore_ascii_case("cross-site") || s.eq_ignore_ascii_case("same-site"))
        {
            return Some(reply(
                StatusCode::FORBIDDEN,
                &format!("cross-site requests are refused (Sec-Fetch-Site: {site})"),
            ));
        }
        if *method == Method::POST && !is_json(headers) {
            return Some(reply(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "a POST to the operator API must send Content-Type: application/json (a form or text/plain body, which any web page can make a browser send, is refused)",
            ));
        }
        if self.open {
            return None;
        }
        let Some(token) = &self.token else {
            return Some(reply(
                StatusCode::FORBIDDEN,
                "the operator API is closed: no operator token is configured; set admin.operator_token_file (or V1COMPAT_ADMIN__OPERATOR_TOKEN) and send Authorization: Bearer <token>",
            ));
        };
        match bearer(headers) {
            None => Some(unauthorized(
                "Bearer realm=\"v1compat-admin\"",
                "the operator API needs Authorization: Bearer <admin.operator_token>",
            )),
            Some(presented) if hmac::verify(&token.key, presented, token.tag.as_ref()).is_ok() => {
                None
            }
            Some(_) => Some(unauthorized(
                "Bearer realm=\"v1compat-admin\", error=\"invalid_token\"",
                "the operator token is not the one configured",
            )),
        }
    }
}

/// The bytes after `Bearer ` (scheme in any case), if that is the header.
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let v = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, rest) = v.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| rest.trim_ascii())
}

/// `Content-Type: application/json`, parameters (`; charset=utf-8`) allowed.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

fn reply(status: StatusCode, error: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(
        json!({ "error": error }).to_string(),
    )));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn unauthorized(challenge: &'static str, error: &str) -> Response<Full<Bytes>> {
    let mut r = reply(StatusCode::UNAUTHORIZED, error);
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    r
}

/// Checks `[admin]`, reading the token file; problems go to `p`.
pub(crate) fn validate(s: &AdminSection, p: &mut Vec<String>) -> OperatorAccess {
    let token = match (s.operator_token.as_str(), s.operator_token_file.as_str()) {
        ("", "") => None,
        (t, "") => check_token("admin.operator_token", t, p).map(str::to_owned),
        ("", path) => match std::fs::read_to_string(path) {
            Ok(text) => check_token("admin.operator_token_file", text.trim(), p).map(str::to_owned),
            Err(e) => {
                p.push(format!("admin.operator_token_file: {path}: {e}"));
                None
            }
        },
        (_, _) => {
            p.push("admin.operator_token: set it or admin.operator_token_file, not both".into());
            None
        }
    };
    let mut access = OperatorAccess::with_token(token.as_deref());
    access.enabled = s.operator_api;
    access.file = (!s.operator_token_file.is_empty()).then(|| s.operator_token_file.clone().into());
    access
}

/// A usable token (the value is never repeated in a problem: a secret).
fn check_token<'t>(key: &str, token: &'t str, p: &mut Vec<String>) -> Option<&'t str> {
    if token.is_empty() {
        p.push(format!("{key}: the token is empty"));
        return None;
    }
    if token.len() < MIN_TOKEN_LEN || token.len() > MAX_TOKEN_LEN {
        p.push(format!(
            "{key}: the token must be {MIN_TOKEN_LEN} to {MAX_TOKEN_LEN} characters long (the value is not shown: a secret)"
        ));
        return None;
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        p.push(format!(
            "{key}: the token must be visible ASCII without spaces (the value is not shown: a secret)"
        ));
        return None;
    }
    Some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "op-token-0123456789abcdef";

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    fn status(access: &OperatorAccess, method: Method, pairs: &[(&str, &str)]) -> Option<u16> {
        access
            .refuse(&method, &headers(pairs))
            .map(|r| r.status().as_u16())
    }

    #[test]
    fn the_token_is_required_and_compared() {
        let access = OperatorAccess::with_token(Some(TOKEN));
        let right = format!("Bearer {TOKEN}");
        let lower = format!("bearer {TOKEN}");
        assert_eq!(status(&access, Method::GET, &[]), Some(401));
        assert_eq!(
            status(&access, Method::GET, &[("authorization", "Bearer nope")]),
            Some(401)
        );
        let longer = format!("Bearer {TOKEN}x");
        assert_eq!(
            status(&access, Method::GET, &[("authorization", &longer)]),
            Some(401)
        );
        assert_eq!(
            status(&access, Method::GET, &[("authorization", &right)]),
            None
        );
        assert_eq!(
            status(&access, Method::GET, &[("authorization", &lower)]),
            None
        );
        let json = ("content-type", "application/json; charset=utf-8");
        assert_eq!(
            status(&access, Method::POST, &[("authorization", &right), json]),
            None
        );
        let r = access.refuse(&Method::GET, &headers(&[])).unwrap();
        assert!(r.headers()[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
            .starts_with("Bearer"));
    }

    #[test]
    fn simple_cross_site_requests_are_refused_even_with_the_token() {
        let right = format!("Bearer {TOKEN}");
        for access in [
            OperatorAccess::with_token(Some(TOKEN)),
            OperatorAccess::open(),
        ] {
            for ct in [
                "application/x-www-form-urlencoded",
                "text/plain",
                "multipart/form-data; boundary=x",
            ] {
                let pairs = [("authorization", right.as_str()), ("content-type", ct)];
                assert_eq!(status(&access, Method::POST, &pairs), Some(415), "{ct}");
            }
            assert_eq!(
                status(&access, Method::POST, &[("authorization", &right)]),
                Some(415),
                "no content type at all"
            );
            let fetched = [
                ("authorization", right.as_str()),
                ("sec-fetch-site", "cross-site"),
            ];
            assert_eq!(status(&access, Method::GET, &fetched), Some(403));
        }
    }

    #[test]
    fn closed_without_a_token_off_when_turned_off_open_in_the_sandbox() {
        let closed = OperatorAccess::with_token(None);
        assert_eq!(status(&closed, Method::GET, &[]), Some(403));
        let mut off = OperatorAccess::with_token(Some(TOKEN));
        off.enabled = false;
        let right = format!("Bearer {TOKEN}");
        assert_eq!(
            status(&off, Method::GET, &[("authorization", &right)]),
            Some(404)
        );
        assert_eq!(status(&OperatorAccess::open(), Method::GET, &[]), None);
    }

    #[test]
    fn tokens_are_checked_and_never_repeated() {
        let mut p = Vec::new();
        let s = AdminSection {
            operator_token: "short secret".into(),
            ..AdminSection::default()
        };
        validate(&s, &mut p);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(!p[0].contains("short secret"), "{p:?}");

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
        let s = AdminSection {
            operator_token_file: file.display().to_string(),
            ..AdminSection::default()
        };
        let mut p = Vec::new();
        let access = validate(&s, &mut p);
        assert!(p.is_empty(), "{p:?}");
        let right = format!("Bearer {TOKEN}");
        assert_eq!(
            status(&access, Method::GET, &[("authorization", &right)]),
            None
        );
        assert!(!format!("{access:?}").contains(TOKEN));

        let both = AdminSection {
            operator_token: TOKEN.into(),
            operator_token_file: file.display().to_string(),
            ..AdminSection::default()
        };
        let mut p = Vec::new();
        validate(&both, &mut p);
        assert_eq!(p.len(), 1, "{p:?}");
    }
}
