//! Run logs: `POST /api/v1/run/last/log` (which selects the run by
//! `run_slug`, despite its name) → `GET /api/v2/worker-runs/{runId}/log`.
//!
//! | V1 | V2 | rule |
//! |---|---|---|
//! | `data.all_logs_url` | same | untouched |
//! | `data.result_count` | same | `0` when absent |
//! | `data.list[]` objects `{type, group, content, timestamp}` | objects | passed through; missing fields filled (`type` 2, `group` `""`, `content` `""`, `timestamp` as below) |
//! | | strings | parsed: an RFC 3339 timestamp at the start → `timestamp` in ms; then a level word (`DEBUG`/`TRACE` 1, `INFO` 2, `WARN`/`WARNING` 3, `ERROR`/`FATAL`/`CRITICAL` 4, optionally in brackets or followed by `:`) → `type`, default 2; `group` = the digits in `Subtask-[…]` if present, else `""`; `content` = the rest |
//! | | | an entry without a timestamp takes the previous entry's (0 for the first), so V1 clients sorting by time keep the order |
//!
//! V1↔V2 differences here (see `COMPATIBILITY.md`): [`log_group`](crate::differences::LOG_GROUP).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{GatewayError, Subject};
use crate::ops::input::Body;
use crate::ops::wire::{IntLike, List, OrDefault, StrOrNum};
use crate::ops::{int_of, list_of, sized_json, string_of, Exchange, Read};
use crate::upstream::V2Call;
use crate::v1::Json;
use crate::v2::{Part, V2Path};

pub const INFO: i64 = 2;

/// The level words a line may start with, and their V1 `type`.
const LEVELS: [(&str, i64); 8] = [
    ("DEBUG", 1),
    ("TRACE", 1),
    ("INFO", INFO),
    ("WARN", 3),
    ("WARNING", 3),
    ("ERROR", 4),
    ("FATAL", 4),
    ("CRITICAL", 4),
];

/// A V2 log page read without a `Value` tree, strings borrowed from the body
/// where they can be (as lenient as the `Value` helpers, see
/// [`wire`](super::wire)).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct V2Log<'a> {
    #[serde(borrow)]
    pub all_logs_url: StrOrNum<'a>,
    #[serde(borrow)]
    pub list: List<V2Entry<'a>>,
    pub result_count: IntLike,
}

/// One V2 log entry.
#[derive(Debug)]
pub enum V2Entry<'a> {
    /// A line of text, to be parsed.
    Line(Cow<'a, str>),
    /// An object, its fields read.
    Fields(V2Fields<'a>),
    /// Anything else: read as the general path reads it, its JSON text then
    /// taken as a line.
    Other(Value),
}

/// The fields of a V2 log entry object.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct V2Fields<'a> {
    #[serde(rename = "type")]
    pub kind: IntLike,
    #[serde(borrow)]
    pub group: StrOrNum<'a>,
    #[serde(borrow)]
    pub content: StrOrNum<'a>,
    pub timestamp: IntLike,
}

impl<'de: 'a, 'a> Deserialize<'de> for V2Entry<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = V2Entry<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(V2Entry::Line(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(V2Entry::Line(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Self::Value, E> {
                Ok(V2Entry::Line(Cow::Owned(s)))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                V2Fields::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(V2Entry::Fields)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Value::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(V2Entry::Other)
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
                Ok(V2Entry::Other(n.into()))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
                Ok(V2Entry::Other(n.into()))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Self::Value, E> {
                // As `Value` reads a float.
                Ok(V2Entry::Other(
                    serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number),
                ))
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Self::Value, E> {
                Ok(V2Entry::Other(b.into()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(V2Entry::Other(Value::Null))
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(V2Entry::Other(Value::Null))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// The V1 log page (`data`), in V1's field order.
#[derive(Debug, Serialize)]
pub struct V1Log<'a> {
    pub all_logs_url: Cow<'a, str>,
    pub list: Vec<V1Entry<'a>>,
    pub result_count: i64,
}

/// A V1 log entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct V1Entry<'a> {
    #[serde(rename = "type")]
    pub kind: i64,
    pub group: Cow<'a, str>,
    pub content: Cow<'a, str>,
    pub timestamp: i64,
}

impl V1Entry<'_> {
    fn into_owned(self) -> V1Entry<'static> {
        V1Entry {
            kind: self.kind,
            group: Cow::Owned(self.group.into_owned()),
            content: Cow::Owned(self.content.into_owned()),
            timestamp: self.timestamp,
        }
    }
}

/// One V1 log entry from one V2 entry read as a `Value` (the general path).
pub fn v1_entry(entry: &Value, previous_ts: i64) -> V1Entry<'_> {
    match entry {
        Value::String(line) => from_line(line, previous_ts),
        Value::Object(o) => V1Entry {
            kind: int_of(o.get("type")).unwrap_or(INFO),
            group: string_of(o.get("group")).unwrap_or_default().into(),
            content: string_of(o.get("content")).unwrap_or_default().into(),
            timestamp: int_of(o.get("timestamp")).unwrap_or(previous_ts),
        },
        other => from_line(&other.to_string(), previous_ts).into_owned(),
    }
}

/// One V1 log entry from one typed V2 entry.
pub fn v1_entry_of<'a>(entry: &'a V2Entry<'_>, previous_ts: i64) -> V1Entry<'a> {
    match entry {
        V2Entry::Line(line) => from_line(line, previous_ts),
        V2Entry::Fields(f) => V1Entry {
            kind: f.kind.0.unwrap_or(INFO),
            group: Cow::Borrowed(f.group.or_default()),
            content: Cow::Borrowed(f.content.or_default()),
            timestamp: f.timestamp.0.unwrap_or(previous_ts),
        },
        V2Entry::Other(other) => from_line(&other.to_string(), previous_ts).into_owned(),
    }
}

fn from_line(line: &str, previous_ts: i64) -> V1Entry<'_> {
    let mut rest = line.trim_start();
    let mut timestamp = previous_ts;
    if let Some((first, tail)) = rest.split_once(char::is_whitespace) {
        if let Ok(t) = humantime::parse_rfc3339_weak(first.trim_end_matches(',')) {
            if let Ok(d) = t.duration_since(std::time::UNIX_EPOCH) {
                timestamp = d.as_millis() as i64;
                rest = tail.trim_start();
            }
        }
    }
    let mut kind = INFO;
    if let Some((first, tail)) = rest.split_once(char::is_whitespace).or(Some((rest, ""))) {
        let word = first.trim_matches(|c| c == '[' || c == ']' || c == ':');
        let level = LEVELS
            .iter()
            .find(|(name, _)| word.eq_ignore_ascii_case(name))
            .map(|&(_, level)| level);
        if let Some(level) = level {
            kind = level;
            rest = tail.trim_start();
        }
    }
    V1Entry {
        kind,
        group: Cow::Borrowed(subtask_group(rest)),
        content: Cow::Borrowed(rest),
        timestamp,
    }
}

/// The subtask id V1 used as `group`, found in `Subtask-[123]`.
fn subtask_group(content: &str) -> &str {
    content
        .split_once("Subtask-[")
        .and_then(|(_, tail)| tail.split_once(']'))
        .map(|(id, _)| id)
        .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
        .unwrap_or("")
}

/// The V1 log page from V2 `data` read as a `Value` (the general path).
pub fn v1_log(data: &Value) -> V1Log<'_> {
    let mut previous = 0;
    let list = list_of(data, "list")
        .iter()
        .map(|e| {
            let v = v1_entry(e, previous);
            previous = v.timestamp;
            v
        })
        .collect();
    V1Log {
        all_logs_url: string_of(data.get("all_logs_url"))
            .unwrap_or_default()
            .into(),
        list,
        result_count: int_of(data.get("result_count")).unwrap_or(0),
    }
}

/// The V1 log page from a typed V2 log page.
pub fn v1_log_of<'a>(page: &'a V2Log<'_>) -> V1Log<'a> {
    let mut previous = 0;
    let list = page
        .list
        .0
        .iter()
        .map(|e| {
            let v = v1_entry_of(e, previous);
            previous = v.timestamp;
            v
        })
        .collect();
    V1Log {
        all_logs_url: Cow::Borrowed(page.all_logs_url.or_default()),
        list,
        result_count: page.result_count.0.unwrap_or(0),
    }
}

/// The V1 log page, written, from the V2 answer as read.
pub fn log_answer(read: Read<OrDefault<V2Log<'_>>>) -> Result<Json, GatewayError> {
    let written = |log: &V1Log| {
        // Each entry's text, plus its field names and numbers.
        let capacity = log
            .list
            .iter()
            .map(|e| e.content.len() + e.group.len() + 64)
            .sum::<usize>()
            + log.all_logs_url.len()
            + 64;
        sized_json(log, capacity)
    };
    match read {
        Read::Typed(page) => written(&v1_log_of(&page.map(|p| p.0).unwrap_or_default())),
        Read::Untyped(data) => written(&v1_log(&data)),
    }
}

pub async fn run_log(ex: &Exchange<'_>, body: &Body<'_>) -> Result<Json, GatewayError> {
    let run = body.run_slug()?;
    let path = V2Path::new(&[
        Part::Lit("worker-runs"),
        Part::Id(ex.known(&run)?),
        Part::Lit("log"),
    ]);
    let fetched = ex
        .fetch(V2Call::get(path).with_key(Some(ex.key()?)), Subject::Run)
        .await?;
    log_answer(ex.read(&fetched, Subject::Run)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(v: Value, previous_ts: i64) -> Value {
        serde_json::to_value(v1_entry(&v, previous_ts)).unwrap()
    }

    #[test]
    fn string_lines_become_objects() {
        let e = entry(
            json!("2026-11-22T14:05:12.123Z WARN SYSTEM: Subtask-[4976] - Slow page"),
            0,
        );
        assert_eq!(
            e,
            json!({"type": 3, "group": "4976", "content": "SYSTEM: Subtask-[4976] - Slow page", "timestamp": 1795356312123i64})
        );
        let e = entry(json!("[ERROR] boom"), 77);
        assert_eq!(
            e,
            json!({"type": 4, "group": "", "content": "boom", "timestamp": 77})
        );
        let e = entry(json!("Run started"), 5);
        assert_eq!(
            e,
            json!({"type": 2, "group": "", "content": "Run started", "timestamp": 5})
        );
        let e = entry(json!(""), 0);
        assert_eq!(e["content"], "");
    }

    #[test]
    fn objects_pass_with_gaps_filled() {
        let e = entry(
            json!({"type": 4, "content": "x", "timestamp": 9, "extra": 1}),
            0,
        );
        assert_eq!(
            e,
            json!({"type": 4, "group": "", "content": "x", "timestamp": 9})
        );
    }

    #[test]
    fn timestamps_carry_forward() {
        let log = serde_json::to_value(v1_log(
            &json!({"all_logs_url": "u", "list": ["2026-11-22T14:05:12Z INFO a", "b"], "result_count": 3}),
        ))
        .unwrap();
        assert_eq!(log["list"][1]["timestamp"], log["list"][0]["timestamp"]);
        assert_eq!(log["result_count"], 3);
    }

    /// The typed reading of a V2 log page and the general one (its `Value`)
    /// write the same V1 page, whatever the entries hold.
    #[test]
    fn typed_and_value_readings_agree() {
        let pages = [
            r#"{"all_logs_url": "u", "list": ["2026-11-22T14:05:12Z INFO a", "b\u00e9 Subtask-[12]", "  [warning]: x"], "result_count": 3}"#,
            r#"{"all_logs_url": 7, "list": [{"type": "3", "group": 12, "content": "c", "timestamp": 1.9e3}, {"type": 4.7}, {}], "result_count": "9"}"#,
            r#"{"list": [1, -2, 1.50, 1e3, 18446744073709551615, true, null, [1, "a", {"b": [2.0]}], "2026-11-22T14:05:12.5Z fatal z"]}"#,
            r#"{"all_logs_url": null, "list": {"a": 1}, "result_count": [1]}"#,
            r#"{"list": [{"type": [1], "group": {"a": 1}, "content": null, "timestamp": "x"}]}"#,
            r#"{"list": ["\ud83d\ude00 ERROR \"quoted\" Subtask-[1]x"], "extra": {"list": 1}}"#,
            r#"[1, 2]"#,
            r#"null"#,
        ];
        for data in pages {
            let typed: OrDefault<V2Log> = serde_json::from_str(data).unwrap();
            let value: Value = serde_json::from_str(data).unwrap();
            let typed = log_answer(Read::Typed(Some(typed))).unwrap();
            let general = log_answer(Read::Untyped(value)).unwrap();
            assert_eq!(
                std::str::from_utf8(&typed.data_bytes()).unwrap(),
                std::str::from_utf8(&general.data_bytes()).unwrap(),
                "{data}"
            );
        }
        let none = log_answer(Read::Typed(None)).unwrap();
        assert_eq!(
            none.data_bytes(),
            log_answer(Read::Untyped(Value::Null)).unwrap().data_bytes()
        );
    }

    /// A repeated field is refused by the typed reading, so the general one
    /// (where the last value wins) reads the page.
    #[test]
    fn repeated_fields_are_left_to_the_general_reading() {
        let data = r#"{"list": [{"type": 1, "type": 4}]}"#;
        assert!(serde_json::from_str::<OrDefault<V2Log>>(data).is_err());
        // The general reading keeps the last value, as a parser does.
        let general = |text: &str| {
            let value: Value = serde_json::from_str(text).unwrap();
            log_answer(Read::Untyped(value)).unwrap()
        };
        assert_eq!(
            general(data).data_bytes(),
            general(r#"{"list": [{"type": 4}]}"#).data_bytes()
        );
        assert_ne!(
            general(data).data_bytes(),
            general(r#"{"list": [{"type": 1}]}"#).data_bytes()
        );
    }
}
