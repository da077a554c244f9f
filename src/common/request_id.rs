//! A request's id, from the server's front to the V2 call and the answer:
//! the client's `x-request-id` if usable, else a new ULID. One header value
//! travels the whole way (the V2 call's header, the answer's, the access
//! line); each holder shares its bytes rather than copying them, and the
//! text is read out of it only where it is written as text.

use std::fmt;

use bytes::Bytes;
use http::HeaderValue;

/// A usable request id: non-empty, at most 128 bytes of letters, digits and
/// `-_.:` (see [`RequestId::usable`]). Cloning shares the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct RequestId(HeaderValue);

impl RequestId {
    /// A new ULID. Its 26 bytes are shared by every clone: made from an
    /// owned array, the value is counted from the start, where a copied
    /// slice would be copied once more into a shared buffer at its first
    /// clone.
    pub fn generate() -> RequestId {
        let mut text = [0u8; ulid::ULID_LEN];
        ulid::Ulid::new().array_to_str(&mut text);
        // Letters and digits: always a header value.
        let value = HeaderValue::from_maybe_shared(Bytes::from_owner(text))
            .unwrap_or(HeaderValue::from_static("0"));
        RequestId(value)
    }

    /// A client-sent id, kept only if it is short and printable; otherwise
    /// it is replaced, so it cannot smuggle anything into logs or upstream
    /// headers.
    pub fn usable(value: &HeaderValue) -> Option<RequestId> {
        let v = value.as_bytes();
        let ok = !v.is_empty()
            && v.len() <= 128
            && v.iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
        ok.then(|| RequestId(value.clone()))
    }

    /// A fixed id (tests, replays).
    ///
    /// # Panics
    /// If `id` is not a usable id.
    pub fn from_static(id: &'static str) -> RequestId {
        RequestId::usable(&HeaderValue::from_static(id)).expect("a usable request id")
    }

    /// The id as a header value (the answer's and the V2 call's).
    pub fn header(&self) -> &HeaderValue {
        &self.0
    }

    /// The id as text. Only the characters [`RequestId::usable`] admits get
    /// in, so it always is.
    pub fn as_str(&self) -> &str {
        self.0.to_str().unwrap_or_default()
    }
}

impl From<RequestId> for HeaderValue {
    fn from(id: RequestId) -> HeaderValue {
        id.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq<&str> for RequestId {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_id_is_a_ulid_and_usable() {
        let id = RequestId::generate();
        assert_eq!(id.as_str().len(), ulid::ULID_LEN);
        assert!(ulid::Ulid::from_string(id.as_str()).is_ok());
        assert_eq!(RequestId::usable(id.header()), Some(id.clone()));
        assert_ne!(RequestId::generate(), id);
    }

    #[test]
    fn only_short_printable_ids_are_usable() {
        for good in ["abc", "req-01H:x_y.z", &"a".repeat(128)] {
            let value = HeaderValue::from_str(good).unwrap();
            assert_eq!(RequestId::usable(&value).unwrap(), good);
        }
        for bad in [
            "",
            "has space",
            "semi;colon",
            "quote\"",
            "é",
            &"a".repeat(129),
        ] {
            let value = HeaderValue::from_bytes(bad.as_bytes()).unwrap();
            assert!(RequestId::usable(&value).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn clones_share_the_bytes() {
        let id = RequestId::generate();
        let copy = id.clone();
        assert_eq!(
            id.header().as_bytes().as_ptr(),
            copy.header().as_bytes().as_ptr()
        );
        let header: HeaderValue = copy.into();
        assert_eq!(header.as_bytes().as_ptr(), id.header().as_bytes().as_ptr());
    }
}
