//! Who a client is, without keeping its key: a fingerprint is an HMAC
//! (SHA-256) of the key under a secret only the gateway holds, so the
//! inventory can name a key's traffic across restarts and replicas while
//! what it stores cannot be turned back into the key, nor matched against
//! a guessed key by anyone without the secret. A keyless client (the public
//! catalog) is one per user-agent and address.
//!
//! Worked out once per client and flush interval (the recorder keys its
//! map by a cheap in-process hash), never per request.

use std::net::IpAddr;

use ring::hmac;

/// Hex digits of the tag a fingerprint shows: 64 bits, so two of a
/// gateway's clients never share one by chance.
const SHOWN: usize = 8;

/// The fingerprint maker of one secret.
#[derive(Clone)]
pub(crate) struct Fingerprints {
    key: hmac::Key,
}

impl Fingerprints {
    pub(crate) fn new(secret: &[u8]) -> Fingerprints {
        Fingerprints {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
        }
    }

    /// `k-` and 16 hex digits: the client holding `key`.
    pub(crate) fn of_key(&self, key: &str) -> String {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(b"key\0");
        ctx.update(key.as_bytes());
        shown("k-", ctx.sign())
    }

    /// `anon-` and 16 hex digits: the keyless client with this user-agent
    /// and address.
    pub(crate) fn of_keyless(&self, user_agent: &[u8], address: Option<IpAddr>) -> String {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(b"anon\0");
        ctx.update(user_agent);
        ctx.update(b"\0");
        if let Some(a) = address {
            ctx.update(a.to_string().as_bytes());
        }
        shown("anon-", ctx.sign())
    }
}

fn shown(prefix: &str, tag: hmac::Tag) -> String {
    let mut out = String::with_capacity(prefix.len() + 2 * SHOWN);
    out.push_str(prefix);
    for b in &tag.as_ref()[..SHOWN] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Whether `s` has a fingerprint's form (a name given in configuration is
/// checked against it).
pub(crate) fn looks_like(s: &str) -> bool {
    let hex = s.strip_prefix("k-").or_else(|| s.strip_prefix("anon-"));
    hex.is_some_and(|h| {
        h.len() == 2 * SHOWN
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// A new random secret, for a store that has none yet.
pub(crate) fn new_secret() -> Vec<u8> {
    use rand::RngCore;
    let mut secret = vec![0u8; 32];
    rand::thread_rng().fill_bytes(&mut secret);
    secret
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_has_one_fingerprint_per_secret_and_never_shows_in_it() {
        let a = Fingerprints::new(b"secret-one-0123456789");
        let b = Fingerprints::new(b"secret-two-0123456789");
        let fp = a.of_key("sk-live-abcdef");
        assert_eq!(fp, a.of_key("sk-live-abcdef"));
        assert_ne!(fp, b.of_key("sk-live-abcdef"));
        assert_ne!(fp, a.of_key("sk-live-abcdeg"));
        assert!(looks_like(&fp), "{fp}");
        assert!(!fp.contains("abcdef"));
        assert_eq!(fp.len(), 2 + 16);
    }

    #[test]
    fn keyless_clients_are_told_apart_by_agent_and_address() {
        let f = Fingerprints::new(b"secret-one-0123456789");
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let one = f.of_keyless(b"curl/8", Some(ip));
        assert!(one.starts_with("anon-") && looks_like(&one));
        assert_ne!(one, f.of_keyless(b"curl/8", None));
        assert_ne!(one, f.of_keyless(b"n8n", Some(ip)));
        // The user-agent and the address cannot run into each other.
        assert_ne!(f.of_keyless(b"a", None), f.of_keyless(b"", None));
    }

    #[test]
    fn only_fingerprints_look_like_fingerprints() {
        assert!(looks_like("k-0123456789abcdef"));
        assert!(looks_like("anon-0123456789abcdef"));
        for s in [
            "k-0123",
            "x-0123456789abcdef",
            "k-0123456789ABCDEF",
            "billing",
        ] {
            assert!(!looks_like(s), "{s}");
        }
    }
}
