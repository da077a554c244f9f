//! Standard Webhooks signatures on deliveries: `webhook-signature:
//! v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">`,
//! computed over the exact bytes sent (re-serialising is the classic cause of
//! signature failures at receivers). The secret is `whsec_` + base64, as the
//! specification and its libraries write it.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ring::hmac;

/// The key bytes of a `whsec_…` secret (24–64 bytes, per the specification).
pub(crate) fn decode_secret(secret: &str) -> Result<Vec<u8>, String> {
    let b64 = secret
        .strip_prefix("whsec_")
        .ok_or("must start with whsec_ followed by base64")?;
    let key = STANDARD
        .decode(b64)
        .map_err(|_| "the part after whsec_ is not base64".to_owned())?;
    if !(24..=64).contains(&key.len()) {
        return Err(format!("must hold 24 to 64 bytes, not {}", key.len()));
    }
    Ok(key)
}

/// The `webhook-signature` header value.
pub(crate) fn signature(key: &[u8], id: &str, timestamp: u64, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(id.as_bytes());
    ctx.update(b".");
    ctx.update(timestamp.to_string().as_bytes());
    ctx.update(b".");
    ctx.update(body);
    format!("v1,{}", STANDARD.encode(ctx.sign().as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_specification_example() {
        // The example of the Standard Webhooks specification.
        let key = decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = signature(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn bad_secrets_are_refused() {
        assert!(decode_secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert!(decode_secret("whsec_***").is_err());
        assert!(decode_secret("whsec_c2hvcnQ=").is_err());
    }
}
