//! Sealed callback tokens: the last path segment of the callback URL the
//! gateway gives V2 (`{public_url}/callbacks/v2/{token}`).
//!
//! A token is `base64url(version ‖ nonce ‖ ChaCha20-Poly1305(claims))`: it
//! carries the V1 client's callback URL, the client's key when enrichment may
//! use it, and when it was issued. The gateway keeps no lookup table; any
//! replica holding the secret can open it, nobody else can read or alter it.
//! The AEAD key is derived from `callbacks.secret` with HKDF-SHA256;
//! `callbacks.previous_secrets` are tried after it, so a secret can be rotated
//! without breaking tokens already handed to V2.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey, NONCE_LEN};
use ring::hkdf;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

const VERSION: u8 = 1;
/// Tokens longer than this are not even decoded.
pub const MAX_TOKEN_LEN: usize = 8192;

/// What a token carries.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct Claims {
    /// The V1 client's callback URL.
    #[serde(rename = "u")]
    pub url: String,
    /// The client's key, for the run-detail read before delivery.
    #[serde(rename = "k", default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Issued at, Unix seconds.
    #[serde(rename = "t")]
    pub issued: u64,
}

impl std::fmt::Debug for Claims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claims")
            .field("url", &self.url)
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .field("issued", &self.issued)
            .finish()
    }
}

/// Seals with the current secret, opens with any configured one.
pub struct Sealer {
    keys: Vec<LessSafeKey>,
    ttl_secs: u64,
    rng: SystemRandom,
}

fn derive(secret: &str) -> LessSafeKey {
    let salt = hkdf::Salt::new(hkdf::HKDF_SHA256, b"v1compat callback token");
    let prk = salt.extract(secret.as_bytes());
    let okm = prk.expand(&[b"chacha20-poly1305"], &aead::CHACHA20_POLY1305);
    // expand only fails for an output longer than 255 hash lengths; 32 bytes is fine.
    let key = match okm {
        Ok(okm) => UnboundKey::from(okm),
        Err(_) => unreachable!("32-byte HKDF output"),
    };
    LessSafeKey::new(key)
}

impl Sealer {
    /// `secrets[0]` seals; all of them open.
    pub fn new(secrets: &[String], ttl_secs: u64) -> Sealer {
        Sealer {
            keys: secrets.iter().map(|s| derive(s)).collect(),
            ttl_secs,
            rng: SystemRandom::new(),
        }
    }

    pub fn seal(&self, claims: &Claims) -> Result<String, String> {
        let key = self.keys.first().ok_or("no callback secret")?;
        let mut nonce = [0u8; NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .map_err(|_| "no randomness for a nonce")?;
        let mut buf = serde_json::to_vec(claims).map_err(|e| e.to_string())?;
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from([VERSION]),
            &mut buf,
        )
        .map_err(|_| "sealing failed")?;
        let mut out = Vec::with_capacity(1 + NONCE_LEN + buf.len());
        out.push(VERSION);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&buf);
        Ok(URL_SAFE_NO_PAD.encode(out))
    }

    /// The claims of a token that was checked when its event was stored:
    /// genuine, of any age (retries and redeliveries can outlive the TTL).
    pub fn open_stored(&self, token: &str) -> Option<Claims> {
        self.open_unchecked(token)
    }

    /// The claims of a genuine, unexpired token; `None` for anything else
    /// (forged, altered, truncated, expired, or sealed with an unknown secret).
    pub fn open(&self, token: &str, now_secs: u64) -> Option<Claims> {
        let claims = self.open_unchecked(token)?;
        // A token from the future (clock skew between replicas) gets a minute.
        let fresh = claims.issued <= now_secs.saturating_add(60)
            && now_secs.saturating_sub(claims.issued) <= self.ttl_secs;
        fresh.then_some(claims)
    }

    /// Authenticates and decrypts, without the age check.
    fn open_unchecked(&self, token: &str) -> Option<Claims> {
        if token.len() > MAX_TOKEN_LEN {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(token).ok()?;
        let (&version, rest) = raw.split_first()?;
        if version != VERSION || rest.len() < NONCE_LEN + aead::CHACHA20_POLY1305.tag_len() {
            return None;
        }
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        self.keys.iter().find_map(|key| {
            let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
            let mut buf = sealed.to_vec();
            let plain = key
                .open_in_place(nonce, Aad::from([VERSION]), &mut buf)
                .ok()?;
            serde_json::from_slice::<Claims>(plain).ok()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> Claims {
        Claims {
            url: "https://client.example/hook?x=1".into(),
            key: Some("secret-key".into()),
            issued: 1_000,
        }
    }

    fn sealer(secrets: &[&str]) -> Sealer {
        Sealer::new(
            &secrets.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            3600,
        )
    }

    #[test]
    fn round_trip_and_nothing_readable() {
        let s = sealer(&["0123456789abcdef-one"]);
        let t = s.seal(&claims()).unwrap();
        assert_eq!(s.open(&t, 1_010), Some(claims()));
        let raw = URL_SAFE_NO_PAD.decode(&t).unwrap();
        let text = String::from_utf8_lossy(&raw);
        assert!(!text.contains("client.example") && !text.contains("secret-key"));
        // Two seals of the same claims differ (fresh nonce).
        assert_ne!(t, s.seal(&claims()).unwrap());
        assert!(t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    }

    #[test]
    fn altered_forged_expired_and_foreign_tokens_do_not_open() {
        let s = sealer(&["0123456789abcdef-one"]);
        let t = s.seal(&claims()).unwrap();
        let mut raw = URL_SAFE_NO_PAD.decode(&t).unwrap();
        for i in [0, 5, raw.len() / 2, raw.len() - 1] {
            raw[i] ^= 1;
            assert!(
                s.open(&URL_SAFE_NO_PAD.encode(&raw), 1_010).is_none(),
                "bit {i}"
            );
            raw[i] ^= 1;
        }
        assert!(s.open(&t[..t.len() - 3], 1_010).is_none());
        assert!(s.open("", 1_010).is_none());
        assert!(s.open("not*base64", 1_010).is_none());
        assert!(s.open(&"A".repeat(MAX_TOKEN_LEN + 1), 1_010).is_none());
        assert!(s.open(&t, 1_000 + 3601).is_none(), "expired");
        assert_eq!(
            s.open_stored(&t),
            Some(claims()),
            "stored events outlive the TTL"
        );
        assert!(s.open(&t, 800).is_none(), "issued in the future");
        assert!(sealer(&["another-secret-entirely"])
            .open(&t, 1_010)
            .is_none());
    }

    #[test]
    fn previous_secrets_still_open_after_rotation() {
        let old = sealer(&["the-old-secret-1234"]);
        let t = old.seal(&claims()).unwrap();
        let rotated = sealer(&["the-new-secret-5678", "the-old-secret-1234"]);
        assert_eq!(rotated.open(&t, 1_010), Some(claims()));
        let fresh = rotated.seal(&claims()).unwrap();
        assert!(old.open(&fresh, 1_010).is_none());
    }

    #[test]
    fn debug_hides_the_key() {
        assert!(!format!("{:?}", claims()).contains("secret-key"));
    }
}
