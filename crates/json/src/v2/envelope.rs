//! The V2 envelope every answer comes in (`code`, `message`, `data`,
//! `request_id`, `details`), as the readers take it off the body: whole,
//! with `data` as a `Value` (the general reading, which every error and every
//! answer the typed readers leave goes through), or with `data` typed
//! ([`DataEnvelope`], the typed reading the one-pass readers stand in for).

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

/// The V2 envelope, success or error. `data` is absent on some successes and
/// on every error; `details` only on errors.
#[derive(Debug, Clone, Deserialize)]
pub struct Envelope {
    pub code: Option<i64>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub data: Option<Value>,
    #[serde(default)]
    pub request_id: Option<String>,
    #[serde(default)]
    pub details: Option<Value>,
}

/// The V2 envelope with its `data` read as `T` (one of the typed readers of
/// [`crate::wire`]), strings borrowed from the body; `details` skipped.
/// It refuses what [`Envelope`] refuses, and data `T` does not read.
#[derive(Debug, Deserialize)]
pub struct DataEnvelope<'a, T> {
    pub code: Option<i64>,
    #[serde(default, borrow)]
    pub message: Option<Text<'a>>,
    pub data: Option<T>,
    #[serde(default, borrow)]
    pub request_id: Option<Text<'a>>,
    #[serde(default)]
    pub details: Option<IgnoredAny>,
}

/// A JSON string, borrowed from the body unless it holds an escape; any
/// other value is refused, as a `String` refuses it. (serde borrows a bare
/// `Cow<str>` field, but copies one inside an `Option`.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, s: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_strings_borrow_and_refuse_what_envelope_refuses() {
        type E<'a> = DataEnvelope<'a, IgnoredAny>;
        let e: E = serde_json::from_str(r#"{"code":0,"message":"ok","request_id":"r-1"}"#).unwrap();
        assert!(matches!(e.request_id, Some(Text(Cow::Borrowed("r-1")))));
        let e: E =
            serde_json::from_str(r#"{"code":0,"message":"a\nb","request_id":null}"#).unwrap();
        assert_eq!(e.message, Some(Text(Cow::Owned("a\nb".into()))));
        assert!(e.request_id.is_none());
        for bad in [r#"{"code":0,"message":5}"#, r#"{"code":0,"request_id":[]}"#] {
            assert!(serde_json::from_str::<E>(bad).is_err(), "{bad}");
            assert!(serde_json::from_str::<Envelope>(bad).is_err(), "{bad}");
        }
    }
}
