//! Typed, borrowing readers of V2 `data`, for the answers that are large or
//! frequent (run records, result pages) and the readers built on them
//! (`v2`, `read`): between the upstream call's bytes and the gateway's
//! mappings. They read straight from the V2 body, without a
//! `serde_json::Value` tree in between: strings borrow from the body where
//! they can, and rows that pass through unchanged stay raw JSON slices.
//!
//! Each reader is as lenient as the `Value` helpers it stands in for
//! ([`crate::value`]: `string_of`, `int_of`, `list_of`): a value of an
//! unexpected type reads as absent, never as an error, so the typed path and
//! the `Value` path map the same V2 data to the same V1 answer.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

/// The key serde_json (built with `raw_value`, as this crate asks) reads
/// specially when it opens an object: `{"$serde_json::private::RawValue":
/// "<text>"}` is read as the JSON in `<text>`, not as an object. Readers that
/// stand in for a `Value` (the V1 body's members, the result scanner, the
/// readers here) leave such an object to `Value` itself, so both read it
/// the same way.
pub const RAW_VALUE_KEY: &str = "$serde_json::private::RawValue";

/// An object's members, its first key checked: one that opens with
/// [`RAW_VALUE_KEY`] is refused (see there), so that the reading falls back
/// to `Value`. A key later in an object is an ordinary key, to `Value` too.
struct FirstKeyChecked<A> {
    map: A,
    first: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for FirstKeyChecked<A> {
    type Error = A::Error;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        if std::mem::take(&mut self.first) {
            self.map.next_key_seed(Checked(seed))
        } else {
            self.map.next_key_seed(seed)
        }
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

/// A key read as text, refused if it is [`RAW_VALUE_KEY`], else handed to
/// the seed it wraps as the same text.
struct Checked<K>(K);

impl<'de, K: de::DeserializeSeed<'de>> de::DeserializeSeed<'de> for Checked<K> {
    type Value = K::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<K::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, K: de::DeserializeSeed<'de>> Visitor<'de> for Checked<K> {
    type Value = K::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<K::Value, E> {
        refuse_raw(key)?;
        self.0
            .deserialize(de::value::BorrowedStrDeserializer::new(key))
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<K::Value, E> {
        refuse_raw(key)?;
        self.0.deserialize(de::value::StrDeserializer::new(key))
    }

    fn visit_string<E: de::Error>(self, key: String) -> Result<K::Value, E> {
        refuse_raw(&key)?;
        self.0.deserialize(de::value::StringDeserializer::new(key))
    }
}

fn refuse_raw<E: de::Error>(key: &str) -> Result<(), E> {
    if key == RAW_VALUE_KEY {
        Err(E::custom("a raw JSON value, left to `Value`"))
    } else {
        Ok(())
    }
}

/// `map` with its first key checked (see [`FirstKeyChecked`]).
pub(crate) fn checked<'de, A: MapAccess<'de>>(map: A) -> impl MapAccess<'de, Error = A::Error> {
    FirstKeyChecked { map, first: true }
}

/// Consumes whatever a `visit_map`/`visit_seq` was given, so a reader that
/// does not want it can still leave the parser past it; an object `Value`
/// would read as raw JSON text is refused (see [`RAW_VALUE_KEY`]).
pub fn drain_map<'de, A: MapAccess<'de>>(map: A) -> Result<(), A::Error> {
    let mut map = checked(map);
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// [`drain_map`] for a sequence.
pub fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Implements the visitor methods of a lenient reader that read any value
/// it does not want as `$none`.
macro_rules! anything_else_is {
    ($none:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            $crate::wire::drain_map(map)?;
            Ok($none)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            $crate::wire::drain_seq(seq)?;
            Ok($none)
        }
    };
}
pub(crate) use anything_else_is;

/// A string, or a number written as a string (as `string_of`).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct StrOrNum<'a>(pub Option<Cow<'a, str>>);

impl<'a> StrOrNum<'a> {
    #[inline]
    pub fn or_default(&self) -> &str {
        self.0.as_deref().unwrap_or_default()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for StrOrNum<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = StrOrNum<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(StrOrNum(Some(Cow::Borrowed(s))))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(StrOrNum(Some(Cow::Owned(s.to_owned()))))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Self::Value, E> {
                Ok(StrOrNum(Some(Cow::Owned(s))))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
                Ok(StrOrNum(Some(Cow::Owned(n.to_string()))))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
                Ok(StrOrNum(Some(Cow::Owned(n.to_string()))))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Self::Value, E> {
                // Written as serde_json writes a `Number`, so both paths agree.
                Ok(StrOrNum(
                    serde_json::Number::from_f64(n).map(|n| Cow::Owned(n.to_string())),
                ))
            }
            anything_else_is!(StrOrNum(None));
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A string; anything else reads as absent (as `Value::as_str`).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct StrOnly<'a>(pub Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for StrOnly<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = StrOnly<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(StrOnly(Some(Cow::Borrowed(s))))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(StrOnly(Some(Cow::Owned(s.to_owned()))))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Self::Value, E> {
                Ok(StrOnly(Some(Cow::Owned(s))))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(StrOnly(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(StrOnly(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(StrOnly(None))
            }
            anything_else_is!(StrOnly(None));
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// An integer: a number (a float truncated) or a numeric string (as
/// `int_of`).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct IntLike(pub Option<i64>);

impl<'de> Deserialize<'de> for IntLike {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IntLike;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
                Ok(IntLike(Some(n)))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
                Ok(IntLike(Some(i64::try_from(n).unwrap_or(n as f64 as i64))))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Self::Value, E> {
                Ok(IntLike(Some(n as i64)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(IntLike(s.trim().parse().ok()))
            }
            anything_else_is!(IntLike(None));
        }
        d.deserialize_any(V)
    }
}

/// The items of a list field; anything but an array reads as no items (as
/// `list_of`).
#[derive(Debug, Clone, PartialEq)]
pub struct List<T>(pub Vec<T>);

impl<T> Default for List<T> {
    fn default() -> Self {
        List(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = List<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(List(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                drain_map(map)?;
                Ok(List::default())
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(List::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(List::default())
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(List::default())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(List::default())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(List::default())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(List::default())
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(List::default())
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A JSON object read field by field by `T`'s derived `Deserialize`; an
/// array, which serde would otherwise accept for a struct, is refused.
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(checked(map))).map(Object)
            }
        }
        d.deserialize_map(V(PhantomData))
    }
}

/// An object read by `T`'s derived `Deserialize`; anything else reads as
/// `T::default()` (as `Value::get` finds no field in a non-object).
#[derive(Debug, Default)]
pub struct OrDefault<T>(pub T);

impl<'de, T: Deserialize<'de> + Default> Deserialize<'de> for OrDefault<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Default> Visitor<'de> for V<T> {
            type Value = OrDefault<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(checked(map))).map(OrDefault)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                drain_seq(seq)?;
                Ok(OrDefault(T::default()))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(OrDefault(T::default()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(OrDefault(T::default()))
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(OrDefault(T::default()))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(OrDefault(T::default()))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(OrDefault(T::default()))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(OrDefault(T::default()))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(OrDefault(T::default()))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// What a column value is, for the V1 header `format` (the value itself is
/// skipped, not kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Null,
    Number,
    Other,
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Kind;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Kind::Number)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Kind::Number)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Kind::Number)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Kind::Other)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Kind::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Kind::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Kind::Null)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                drain_map(map)?;
                Ok(Kind::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                drain_seq(seq)?;
                Ok(Kind::Other)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{int_of, string_of};
    use serde_json::Value;

    const SAMPLES: &[&str] = &[
        r#""text""#,
        r#""esc\"aped\u00e9""#,
        r#"" 42 ""#,
        "42",
        "-7",
        "1.5",
        "2.0",
        "1e3",
        "18446744073709551615",
        "true",
        "null",
        "[1,2]",
        r#"{"a":[{"b":null}]}"#,
    ];

    #[test]
    fn readers_agree_with_the_value_helpers() {
        for s in SAMPLES {
            let v: Value = serde_json::from_str(s).unwrap();
            let so: StrOrNum = serde_json::from_str(s).unwrap();
            assert_eq!(so.0.map(Cow::into_owned), string_of(Some(&v)), "{s}");
            let i: IntLike = serde_json::from_str(s).unwrap();
            assert_eq!(i.0, int_of(Some(&v)), "{s}");
            let l: List<IgnoredAny> = serde_json::from_str(s).unwrap();
            assert_eq!(l.0.len(), v.as_array().map_or(0, Vec::len), "{s}");
            let k: Kind = serde_json::from_str(s).unwrap();
            let expect = match v {
                Value::Null => Kind::Null,
                Value::Number(_) => Kind::Number,
                _ => Kind::Other,
            };
            assert_eq!(k, expect, "{s}");
        }
    }

    #[test]
    fn strings_borrow_from_the_body_unless_escaped() {
        let so: StrOrNum = serde_json::from_str(r#""plain""#).unwrap();
        assert!(matches!(so.0, Some(Cow::Borrowed("plain"))));
        let so: StrOrNum = serde_json::from_str(r#""a\nb""#).unwrap();
        assert_eq!(so.0.as_deref(), Some("a\nb"));
    }

    #[test]
    fn objects_refuse_arrays() {
        #[derive(Deserialize)]
        struct S {
            #[allow(dead_code)]
            a: Option<i64>,
        }
        assert!(serde_json::from_str::<Object<S>>(r#"{"a":1}"#).is_ok());
        assert!(serde_json::from_str::<Object<S>>("[1]").is_err());
    }

    #[test]
    fn objects_value_reads_as_raw_json_text_are_left_to_value() {
        #[derive(Debug, Default, Deserialize)]
        #[serde(default)]
        struct S<'a> {
            #[serde(borrow)]
            a: StrOrNum<'a>,
        }
        // `Value` reads this object as the JSON text it holds: `"x"`.
        let raw = r#"{"$serde_json::private::RawValue":"\"x\""}"#;
        let v: Value = serde_json::from_str(raw).unwrap();
        assert_eq!(v, Value::String("x".into()));
        assert!(serde_json::from_str::<StrOrNum>(raw).is_err());
        assert!(serde_json::from_str::<IntLike>(raw).is_err());
        assert!(serde_json::from_str::<List<IgnoredAny>>(raw).is_err());
        assert!(serde_json::from_str::<Kind>(raw).is_err());
        assert!(serde_json::from_str::<OrDefault<S>>(raw).is_err());
        assert!(serde_json::from_str::<Object<S>>(raw).is_err());
        // Nested, the reading of the whole is refused.
        let nested = format!(r#"{{"a":{raw}}}"#);
        assert!(serde_json::from_str::<OrDefault<S>>(&nested).is_err());
        // Later in an object the key is an ordinary one, to `Value` too.
        let later = r#"{"a":"y","$serde_json::private::RawValue":"1"}"#;
        let s: OrDefault<S> = serde_json::from_str(later).unwrap();
        assert_eq!(s.0.a.or_default(), "y");
        let v: Value = serde_json::from_str(later).unwrap();
        assert_eq!(v["a"], "y");
        assert!(serde_json::from_str::<StrOrNum>(later).unwrap().0.is_none());
    }
}
