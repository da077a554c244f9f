//! The V2 run record (`GET /api/v2/worker-runs/{runId}`, and each record of
//! a run-list page) as the readers give it to the gateway's
//! `ops::run_records`: what the one-pass reader fills and what serde reads
//! when the reader declines, and a run-list page's `data` ([`RunPage`]),
//! read in one pass or out of its `Value`.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use crate::value::{int_of, list_of};
use crate::wire::{self, IntLike, Object, StrOrNum};

/// A V2 run status as sent: text, a number (its integer value if it has
/// one), or anything else (absent, null, other types).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum StatusField<'a> {
    Text(Cow<'a, str>),
    Number(Option<i64>),
    #[default]
    Other,
}

impl<'a> From<Option<&'a Value>> for StatusField<'a> {
    fn from(v: Option<&'a Value>) -> Self {
        match v {
            Some(Value::String(s)) => StatusField::Text(Cow::Borrowed(s)),
            Some(Value::Number(n)) => StatusField::Number(n.as_i64()),
            _ => StatusField::Other,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for StatusField<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = StatusField<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(StatusField::Text(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(StatusField::Text(Cow::Owned(s.to_owned())))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
                Ok(StatusField::Number(Some(n)))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
                Ok(StatusField::Number(i64::try_from(n).ok()))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(StatusField::Number(None))
            }
            wire::anything_else_is!(StatusField::Other);
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A V2 run record, the fields V1 keeps, read leniently (see [`wire`]):
/// strings borrow from the V2 body.
#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct V2Run<'a> {
    #[serde(borrow)]
    pub status: StatusField<'a>,
    #[serde(borrow)]
    pub err_msg: StrOrNum<'a>,
    #[serde(borrow)]
    pub slug: StrOrNum<'a>,
    #[serde(borrow)]
    pub scraper_title: StrOrNum<'a>,
    #[serde(borrow)]
    pub scraper_slug: StrOrNum<'a>,
    pub results: IntLike,
    #[serde(borrow)]
    pub usage: StrOrNum<'a>,
    pub started_at: IntLike,
    pub finished_at: IntLike,
    pub duration: IntLike,
    #[serde(borrow)]
    pub origin: StrOrNum<'a>,
    pub traffic: IntLike,
    #[serde(borrow)]
    pub version: StrOrNum<'a>,
}

impl<'a> V2Run<'a> {
    /// The record of a `Value` (a list row); anything but an object has
    /// none of the fields.
    pub fn of_value(v: &'a Value) -> V2Run<'a> {
        Object::<V2Run>::deserialize(v)
            .map(|o| o.0)
            .unwrap_or_default()
    }
}

/// A run-list page's `data` as the general reading takes it (`int_of` of
/// `count`, `list_of` of `list`): `count` is `None` when absent or null,
/// and `runs` is empty when `list` is.
#[derive(Debug, Default, PartialEq)]
pub struct RunPage<'a> {
    pub count: Option<i64>,
    pub runs: Vec<V2Run<'a>>,
}

impl<'a> RunPage<'a> {
    /// A run-list page's `data` given as a `Value`, as the general reading
    /// takes it: `count` read leniently, `list`'s records (none if it is
    /// absent or not an array).
    pub fn of_value(data: &'a Value) -> RunPage<'a> {
        RunPage {
            count: int_of(data.get("count")),
            runs: list_of(data, "list").iter().map(V2Run::of_value).collect(),
        }
    }
}
