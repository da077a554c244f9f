//! Who sent a request, for its access line (`pipeline::access`): the TCP
//! peer as the accept loop got it, the address a trusted proxy says the
//! request came from (`X-Forwarded-For` / `Forwarded`, believed only from a
//! peer in `listen.trusted_proxies`: anyone can send the headers), and the
//! user-agent. Worked out at admission, without allocating: the header
//! value is shared, the forwarded chain walked in place.

use std::net::IpAddr;

use http::{header, HeaderMap, HeaderValue};

/// The most of a user-agent an access line shows.
pub(crate) const MAX_USER_AGENT: usize = 256;

/// Who sent one request.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The TCP peer's address (a proxy's, behind one); `None` in process.
    pub peer: Option<IpAddr>,
    /// What a trusted proxy says the client's address is.
    pub forwarded_for: Option<IpAddr>,
    /// The `User-Agent` header, as sent (shared with the request's headers).
    pub user_agent: Option<HeaderValue>,
}

impl Caller {
    /// The caller of a request from `peer` with `headers`; `trusted` says
    /// whether an address is one of `listen.trusted_proxies` (the
    /// configuration's blocks, handed in: the pipeline names no settings
    /// type of the layers above it).
    pub fn of(
        peer: Option<IpAddr>,
        headers: &HeaderMap,
        trusted: &dyn Fn(IpAddr) -> bool,
    ) -> Caller {
        Caller {
            peer,
            forwarded_for: peer.and_then(|p| forwarded_for(p, headers, trusted)),
            user_agent: headers.get(header::USER_AGENT).cloned(),
        }
    }

    /// A request to `op` from this caller with `key`, as the migration
    /// inventory counts it (answered without error and relying on nothing,
    /// until the caller says otherwise): its address is the one a trusted
    /// proxy vouches for, else the peer's.
    pub(crate) fn seen<'a>(
        &'a self,
        op: crate::v1::route::Operation,
        key: Option<&'a crate::upstream::ApiKey>,
    ) -> crate::inventory::Seen<'a> {
        crate::inventory::Seen {
            op,
            key,
            user_agent: self.user_agent.as_ref().map(HeaderValue::as_bytes),
            address: self.forwarded_for.or(self.peer),
            failed: false,
            applied: Default::default(),
            browned_out: false,
        }
    }

    /// The user-agent as the access line shows it: at most
    /// [`MAX_USER_AGENT`] bytes (cut at a character), bytes that are not
    /// UTF-8 replaced; the log format escapes the rest.
    pub fn user_agent(&self) -> Option<std::borrow::Cow<'_, str>> {
        let bytes = self.user_agent.as_ref()?.as_bytes();
        let bytes = &bytes[..bytes.len().min(MAX_USER_AGENT)];
        Some(match std::str::from_utf8(bytes) {
            Ok(s) => std::borrow::Cow::Borrowed(s),
            // A cut through a character is not worth a replacement mark.
            Err(e) if e.error_len().is_none() => std::borrow::Cow::Borrowed(
                std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
            ),
            Err(_) => String::from_utf8_lossy(bytes),
        })
    }
}

/// The client's address by the proxies' headers, when `peer` is trusted:
/// the chain (`Forwarded`'s `for=`, else `X-Forwarded-For`) read from the
/// right, each trusted proxy skipped; the first address that is not one is
/// the client. A value that is not an address (`unknown`, an obfuscated
/// name, garbage) ends the walk with no answer: what lies left of it is
/// not vouched for. Every address trusted: the leftmost.
pub(crate) fn forwarded_for(
    peer: IpAddr,
    headers: &HeaderMap,
    is_trusted: &dyn Fn(IpAddr) -> bool,
) -> Option<IpAddr> {
    if !is_trusted(peer) {
        return None;
    }
    let walk = |chain: &mut dyn Iterator<Item = Option<IpAddr>>| {
        let mut leftmost = None;
        for hop in chain {
            let ip = hop?;
            if !is_trusted(ip) {
                return Some(ip);
            }
            leftmost = Some(ip);
        }
        leftmost
    };
    if headers.contains_key(header::FORWARDED) {
        let mut chain = headers
            .get_all(header::FORWARDED)
            .iter()
            .rev()
            .flat_map(|v| v.to_str().unwrap_or("\u{0}").rsplit(','))
            .filter_map(forwarded_element);
        return walk(&mut chain);
    }
    let mut chain = headers
        .get_all("x-forwarded-for")
        .iter()
        .rev()
        .flat_map(|v| v.to_str().unwrap_or("\u{0}").rsplit(','))
        .map(|hop| hop.trim().parse::<IpAddr>().ok());
    walk(&mut chain)
}

/// The `for=` of one `Forwarded` element (`for=192.0.2.60;proto=http`,
/// `for="[2001:db8::1]:4711"`): `None` when the element has none (skipped),
/// `Some(None)` when it is not an address.
fn forwarded_element(element: &str) -> Option<Option<IpAddr>> {
    let value = element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then_some(value.trim())
    })?;
    let value = value.trim_matches('"');
    let host = match value.strip_prefix('[') {
        // `[v6]` or `[v6]:port`.
        Some(rest) => rest.split(']').next().unwrap_or(""),
        // `v4` or `v4:port` (a bare v6 is not allowed unquoted, but read).
        None if value.matches(':').count() == 1 => value.split(':').next().unwrap_or(""),
        None => value,
    };
    Some(host.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::cidr::Cidr;

    /// `forwarded_for` with the blocks `trusted`.
    fn forwarded(peer: IpAddr, headers: &HeaderMap, trusted: &[Cidr]) -> Option<IpAddr> {
        super::forwarded_for(peer, headers, &|ip| trusted.iter().any(|c| c.contains(ip)))
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| c.parse().unwrap()).collect()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn forwarded_addresses_are_believed_only_from_trusted_peers() {
        let trusted = cidrs(&["10.0.0.0/8"]);
        let h = headers(&[("x-forwarded-for", "203.0.113.7, 10.1.2.3")]);
        assert_eq!(
            forwarded(ip("10.0.0.1"), &h, &trusted),
            Some(ip("203.0.113.7"))
        );
        assert_eq!(forwarded(ip("198.51.100.1"), &h, &trusted), None);
        assert_eq!(forwarded(ip("10.0.0.1"), &h, &[]), None);
    }

    #[test]
    fn the_chain_is_read_from_the_right_past_trusted_hops_only() {
        let trusted = cidrs(&["10.0.0.0/8"]);
        // The client forged the leftmost entry; the proxy appended the truth.
        let h = headers(&[
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-for", "203.0.113.7, 10.9.9.9"),
        ]);
        assert_eq!(
            forwarded(ip("10.0.0.1"), &h, &trusted),
            Some(ip("203.0.113.7"))
        );
        let all_trusted = headers(&[("x-forwarded-for", "10.3.3.3, 10.2.2.2")]);
        assert_eq!(
            forwarded(ip("10.0.0.1"), &all_trusted, &trusted),
            Some(ip("10.3.3.3"))
        );
        let garbage = headers(&[("x-forwarded-for", "203.0.113.7, nonsense, 10.2.2.2")]);
        assert_eq!(forwarded(ip("10.0.0.1"), &garbage, &trusted), None);
    }

    #[test]
    fn the_forwarded_header_wins_and_takes_its_own_syntax() {
        let trusted = cidrs(&["10.0.0.0/8"]);
        let h = headers(&[
            (
                "forwarded",
                "for=\"[2001:db8::1]:4711\";proto=https, for=10.0.0.2:80",
            ),
            ("x-forwarded-for", "198.51.100.99"),
        ]);
        assert_eq!(
            forwarded(ip("10.0.0.1"), &h, &trusted),
            Some(ip("2001:db8::1"))
        );
        let v4 = headers(&[("forwarded", "proto=http;for=192.0.2.60")]);
        assert_eq!(
            forwarded(ip("10.0.0.1"), &v4, &trusted),
            Some(ip("192.0.2.60"))
        );
        let hidden = headers(&[("forwarded", "for=_hidden, for=10.0.0.3")]);
        assert_eq!(forwarded(ip("10.0.0.1"), &hidden, &trusted), None);
    }

    #[test]
    fn the_user_agent_is_bounded() {
        let long = "a".repeat(1000);
        let c = Caller::of(None, &headers(&[("user-agent", &long)]), &|_| false);
        assert_eq!(c.user_agent().unwrap().len(), MAX_USER_AGENT);
        let c = Caller::of(None, &headers(&[("user-agent", "curl/8.5.0")]), &|_| false);
        assert_eq!(c.user_agent().as_deref(), Some("curl/8.5.0"));
        assert!(Caller::default().user_agent().is_none());
    }
}
