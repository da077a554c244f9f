//! Telling V1 clients in band that V1 is going, as the pipeline finishes an
//! answer: the `Deprecation` (RFC 9745), `Sunset` (RFC 8594) and `Link`
//! headers (`rel="deprecation"` to the operator's migration page,
//! `rel="successor-version"` naming the V2 operation that replaces the one
//! called), and brownout windows in which selected clients or operations
//! are refused with a V1 error saying why. All off until configured
//! (`[inventory.deprecation]`, `[[inventory.brownouts]]`); a gateway with
//! none pays one branch a request.

use std::time::SystemTime;

use http::{HeaderMap, HeaderValue};

use super::config::Notices;
use crate::v1::route::Operation;

/// Adds the configured deprecation headers for an answer to `op`.
pub fn add_headers(notices: &Notices, op: Option<Operation>, headers: &mut HeaderMap) {
    if !notices.has_headers() {
        return;
    }
    let value = |s: &str| HeaderValue::from_str(s).ok();
    if let Some(v) = notices.deprecation.as_deref().and_then(value) {
        headers.insert("deprecation", v);
    }
    if let Some(v) = notices.sunset.as_deref().and_then(value) {
        headers.insert("sunset", v);
    }
    if let Some(link) = &notices.link {
        if let Some(v) = value(&format!(
            "<{link}>; rel=\"deprecation\"; type=\"text/html\""
        )) {
            headers.append(http::header::LINK, v);
        }
    }
    if let (true, Some(op)) = (notices.successor_link, op) {
        if let Some(v) = successor(op) {
            headers.append(http::header::LINK, v);
        }
    }
}

/// `Link: </api/v2/…>; rel="successor-version"; title="GET /api/v2/…"`: the
/// V2 path with its parameters as URI template variables would make an
/// invalid URI, so the target stops before the first of them and the title
/// names the whole call.
fn successor(op: Operation) -> Option<HeaderValue> {
    let call = op.v2_replacement().calls.first()?;
    let (_, path) = call.split_once(' ')?;
    let target = match path.find('{') {
        Some(i) => &path[..i],
        None => path,
    };
    HeaderValue::from_str(&format!(
        "<{target}>; rel=\"successor-version\"; title=\"{call}\""
    ))
    .ok()
}

/// Whether a brownout window refuses `op` for the client whose fingerprint
/// `fingerprint` makes (asked only inside a window that names clients).
pub fn browned_out(
    notices: &Notices,
    op: Operation,
    fingerprint: &mut dyn FnMut() -> String,
) -> bool {
    if notices.brownouts.is_empty() {
        return false;
    }
    let now = SystemTime::now();
    let mut memo: Option<String> = None;
    let mut once = || memo.get_or_insert_with(&mut *fingerprint).clone();
    notices
        .brownouts
        .iter()
        .any(|b| b.refuses(now, op, &mut once))
}

/// The message of a brownout refusal: what is happening and what to call
/// instead.
pub fn brownout_message(notices: &Notices, op: Operation) -> String {
    let replacement = op.v2_replacement().calls.join(" and ");
    let mut m = format!(
        "V1 API brownout: the V1 API is being retired and this request was refused on purpose, for a limited time; call {replacement} instead"
    );
    if let Some(sunset) = &notices.sunset {
        m.push_str(&format!(" (V1 ends {sunset})"));
    }
    if let Some(link) = &notices.link {
        m.push_str(&format!("; see {link}"));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::config::{validate, DeprecationSection, InventorySection};

    fn notices(d: DeprecationSection) -> Notices {
        let mut p = Vec::new();
        let c = validate(
            &InventorySection {
                deprecation: d,
                ..Default::default()
            },
            &mut p,
        );
        assert!(p.is_empty(), "{p:?}");
        c.notices
    }

    #[test]
    fn no_headers_unless_configured() {
        let mut h = HeaderMap::new();
        add_headers(&Notices::default(), Some(Operation::RunDetail), &mut h);
        assert!(h.is_empty());
    }

    #[test]
    fn configured_headers_follow_the_rfcs() {
        let n = notices(DeprecationSection {
            deprecated_at: "2026-06-30T00:00:00Z".into(),
            sunset_at: "2027-01-31T00:00:00Z".into(),
            link: "https://example.com/v2-migration".into(),
            successor_link: true,
        });
        let mut h = HeaderMap::new();
        add_headers(&n, Some(Operation::RunDetail), &mut h);
        assert_eq!(h["deprecation"], "@1782777600");
        assert_eq!(h["sunset"], "Sun, 31 Jan 2027 00:00:00 GMT");
        let links: Vec<_> = h
            .get_all("link")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(
            links,
            [
                "<https://example.com/v2-migration>; rel=\"deprecation\"; type=\"text/html\"",
                "</api/v2/worker-runs/>; rel=\"successor-version\"; title=\"GET /api/v2/worker-runs/{runId}\"",
            ]
        );
        let mut h = HeaderMap::new();
        add_headers(&n, Some(Operation::AccountInfo), &mut h);
        assert!(h
            .get_all("link")
            .iter()
            .any(|v| v == "</api/v2/users/account>; rel=\"successor-version\"; title=\"GET /api/v2/users/account\""));
    }

    #[test]
    fn the_brownout_message_says_what_to_call() {
        let n = notices(DeprecationSection {
            sunset_at: "2027-01-31T00:00:00Z".into(),
            ..Default::default()
        });
        let m = brownout_message(&n, Operation::RunDetail);
        assert!(m.starts_with("V1 API brownout"), "{m}");
        assert!(m.contains("GET /api/v2/worker-runs/{runId}"), "{m}");
        assert!(m.contains("31 Jan 2027"), "{m}");
    }
}
