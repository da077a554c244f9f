//! Results: `POST /api/v1/run/result/list` → `GET /api/v2/worker-runs/{runId}/result`
//! and `POST /api/v1/run/result/export` → `GET /api/v2/worker-runs/{runId}/result/export`.
//!
//! | V1 | V2 | rule |
//! |---|---|---|
//! | `run_slug` (body) | `{runId}` (path) | one safe segment; an id that cannot be one, or `last`, is an unknown run (404/70001) and never sent |
//! | `page_index` (default 1), `page_size` (default 10, ≤ `limits.max_page_size`) | `offset`, `limit` | sent explicitly; above 100 rows, 100-row pages fetched concurrently and sliced |
//! | `data.count`, `data.list[]` | same | rows unchanged (`__coreclaw_data_id__` kept) |
//! | `data.headers[].format` | — (V2 has none) | kept if V2 sends one; else `number` when the column has at least one non-null value in the page and every non-null value is a JSON number, otherwise `text`; a page past the end of a non-empty result reads them off the run's first row (one extra 1-row V2 call) |
//! | `data.page_index`, `data.page_size` | — | echo of the V1 request |
//! | export `format` (`csv`, `json`) | `format` | exactly as V1 spelled them (lowercase); V2's other formats accepted when `compat.extra_export_formats` |
//! | export `filter_keys` (array) | `filter_keys` (comma-joined, URL-encoded) | omitted when empty; keys with a comma are refused |
//! | `data.download_url` | `data.download_url` | untouched |
//!
//! V1↔V2 differences here (see `COMPATIBILITY.md`): [`result_header_format`](crate::differences::RESULT_HEADER_FORMAT), [`extra_export_formats`](crate::differences::EXTRA_EXPORT_FORMATS), [`export_download_url`](crate::differences::EXPORT_DOWNLOAD_URL).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::error::{GatewayError, Subject};
use crate::ops::input::Body;
use crate::ops::wire::{self, IntLike, Kind, List, OrDefault, StrOnly};
use crate::ops::{sized_json, Exchange, Read};
use crate::paging::{Plan, Window};
use crate::upstream::V2Call;
use crate::v1::Json;
use crate::v2::{Part, Segment, V2Path};

/// V1 `result/list` default page size.
pub const DEFAULT_PAGE_SIZE: u64 = 10;

pub const V1_EXPORT_FORMATS: [&str; 2] = ["csv", "json"];
pub const V2_EXPORT_FORMATS: [&str; 8] =
    ["csv", "json", "jsonl", "xlsx", "xls", "xml", "html", "rss"];

pub fn result_call(run: &Segment, offset: u64, limit: u64) -> V2Call {
    V2Call::get(
        V2Path::new(&[Part::Lit("worker-runs"), Part::Id(run), Part::Lit("result")])
            .query("offset", offset)
            .query("limit", limit),
    )
}

/// A V2 result page read without a `Value` tree: the rows stay the raw JSON
/// V2 sent, to be copied into the V1 page unchanged.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct V2ResultPage<'a> {
    pub count: IntLike,
    #[serde(borrow)]
    pub headers: List<OrDefault<V2Header<'a>>>,
    #[serde(borrow)]
    pub list: List<&'a RawValue>,
}

/// A V2 column header; fields that are not strings read as absent.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct V2Header<'a> {
    #[serde(borrow)]
    pub key: StrOnly<'a>,
    #[serde(borrow)]
    pub label: StrOnly<'a>,
    #[serde(borrow)]
    pub format: StrOnly<'a>,
}

/// The V1 result page (`data`), in V1's field order.
#[derive(Debug, Serialize)]
pub struct V1ResultPage<'a> {
    pub count: i64,
    pub headers: Vec<V1Header<'a>>,
    pub list: Vec<&'a RawValue>,
    pub page_index: u64,
    pub page_size: u64,
}

/// A V1 column header.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct V1Header<'a> {
    pub label: Cow<'a, str>,
    pub key: Cow<'a, str>,
    pub format: Cow<'a, str>,
}

impl V1Header<'_> {
    fn into_owned(self) -> V1Header<'static> {
        V1Header {
            label: Cow::Owned(self.label.into_owned()),
            key: Cow::Owned(self.key.into_owned()),
            format: Cow::Owned(self.format.into_owned()),
        }
    }
}

/// V1 headers: V2's `key`/`label` plus a `format` inferred from the rows.
pub fn v1_headers<'a>(
    v2_headers: &[OrDefault<V2Header<'a>>],
    rows: &[&RawValue],
) -> Vec<V1Header<'a>> {
    let to_infer: Vec<&str> = v2_headers
        .iter()
        .filter(|h| h.0.format.0.is_none())
        .map(|h| h.0.key.0.as_deref().unwrap_or_default())
        .collect();
    let mut inferred = infer_formats(&to_infer, rows).into_iter();
    v2_headers
        .iter()
        .map(|OrDefault(h)| {
            let key = h.key.0.clone().unwrap_or_default();
            let label = h.label.0.clone().unwrap_or_else(|| key.clone());
            let format = match &h.format.0 {
                Some(f) => f.clone(),
                None => Cow::Borrowed(inferred.next().unwrap_or("text")),
            };
            V1Header { label, key, format }
        })
        .collect()
}

/// [`v1_headers`] for headers and rows held as `Value`s (the results inside
/// a synchronous run's answer).
pub fn v1_headers_of_values(v2_headers: &[Value], rows: &[Value]) -> Vec<Value> {
    let headers: Vec<OrDefault<V2Header>> = v2_headers
        .iter()
        .map(|h| OrDefault::deserialize(h).unwrap_or_default())
        .collect();
    let raw: Vec<Box<RawValue>> = rows
        .iter()
        .filter_map(|r| serde_json::value::to_raw_value(r).ok())
        .collect();
    let rows: Vec<&RawValue> = raw.iter().map(|r| &**r).collect();
    v1_headers(&headers, &rows)
        .iter()
        .map(|h| serde_json::to_value(h).unwrap_or(Value::Null))
        .collect()
}

/// For each key, `number` when the column has at least one non-null value
/// in the rows and every non-null value is a JSON number, else `text`. The
/// rows are scanned, not kept: only the kind of each wanted value is read.
fn infer_formats(keys: &[&str], rows: &[&RawValue]) -> Vec<&'static str> {
    #[derive(Clone, Copy)]
    struct Column {
        seen: bool,
        numbers_only: bool,
    }
    let mut columns = vec![
        Column {
            seen: false,
            numbers_only: true
        };
        keys.len()
    ];
    let mut kinds: Vec<Option<Kind>> = vec![None; keys.len()];
    for row in rows {
        // Once every column has a non-number, the rest cannot change it.
        if columns.iter().all(|c| !c.numbers_only) {
            break;
        }
        kinds.iter_mut().for_each(|k| *k = None);
        let mut de = serde_json::Deserializer::from_str(row.get());
        // A raw row is valid JSON; a row that is not an object has no fields.
        let scan = RowScan {
            keys,
            kinds: &mut kinds,
        };
        if scan.deserialize(&mut de).is_err() {
            continue;
        }
        for (c, k) in columns.iter_mut().zip(&kinds) {
            match k {
                Some(Kind::Number) => c.seen = true,
                Some(Kind::Other) => {
                    c.seen = true;
                    c.numbers_only = false;
                }
                Some(Kind::Null) | None => {}
            }
        }
    }
    columns
        .iter()
        .map(|c| {
            if c.seen && c.numbers_only {
                "number"
            } else {
                "text"
            }
        })
        .collect()
}

/// Reads one row, noting the kind of the value of each wanted key (the last
/// one wins when a key repeats, as in a parsed object) and skipping the rest.
struct RowScan<'k, 's> {
    keys: &'k [&'k str],
    kinds: &'s mut [Option<Kind>],
}

impl<'de> DeserializeSeed<'de> for RowScan<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for RowScan<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a result row")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(StrOnly(key)) = map.next_key::<StrOnly>()? {
            let key = key.as_deref().unwrap_or_default();
            let mut wanted = self.keys.iter().enumerate().filter(|(_, k)| **k == key);
            match wanted.next() {
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
                Some((first, _)) => {
                    let kind = map.next_value::<Kind>()?;
                    self.kinds[first] = Some(kind);
                    for (i, _) in wanted {
                        self.kinds[i] = Some(kind);
                    }
                }
            }
        }
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        wire::drain_seq(seq)
    }
}

/// The typed page of a V2 answer. Data the typed reading refused (repeated
/// keys, say) is written back out from its `Value` into `spare` and read
/// from there, so it maps exactly as the `Value` said.
fn page_of<'a>(
    read: Read<OrDefault<V2ResultPage<'a>>>,
    spare: &'a mut Option<String>,
) -> Result<V2ResultPage<'a>, GatewayError> {
    match read {
        Read::Typed(page) => Ok(page.map(|p| p.0).unwrap_or_default()),
        Read::Untyped(data) => {
            let text = spare.insert(data.to_string());
            serde_json::from_str::<OrDefault<V2ResultPage>>(text)
                .map(|p| p.0)
                .map_err(|e| GatewayError::Garbled(format!("unreadable result page ({e})")))
        }
    }
}

/// The V1 result page from the V2 pages of a plan; rows are moved, not
/// copied or parsed into values.
pub fn v1_result_page<'a>(
    window: Window,
    plan: &Plan,
    mut pages: Vec<V2ResultPage<'a>>,
) -> V1ResultPage<'a> {
    let count = pages.first().and_then(|p| p.count.0).unwrap_or(0);
    let v2_headers = pages
        .first_mut()
        .map(|p| std::mem::take(&mut p.headers.0))
        .unwrap_or_default();
    let rows = plan.assemble(pages.into_iter().map(|p| p.list.0).collect());
    let headers = v1_headers(&v2_headers, &rows);
    V1ResultPage {
        count,
        headers,
        list: rows,
        page_index: window.page_index,
        page_size: window.page_size,
    }
}

pub async fn result_list(ex: &Exchange<'_>, body: &Body) -> Result<Json, GatewayError> {
    let run = body.run_slug()?;
    let window = body.window(DEFAULT_PAGE_SIZE, ex.settings().max_page_size)?;
    let plan = window.plan();
    let key = ex.key()?;
    let run = run.known()?;
    let fetched = ex
        .fetch_pages(plan.offsets.clone(), Subject::Run, |o| {
            result_call(run, o, plan.limit).with_key(Some(key.clone()))
        })
        .await?;
    let reads = fetched
        .iter()
        .map(|f| ex.read::<OrDefault<V2ResultPage>>(f, Subject::Run))
        .collect::<Result<Vec<_>, _>>()?;
    let mut spares: Vec<Option<String>> = (0..reads.len()).map(|_| None).collect();
    let pages = reads
        .into_iter()
        .zip(spares.iter_mut())
        .map(|(read, spare)| page_of(read, spare))
        .collect::<Result<Vec<_>, _>>()?;
    let mut page = v1_result_page(window, &plan, pages);
    if page.list.is_empty() && page.count > 0 {
        // A page past the end has no rows to infer column formats from, but
        // V1 still typed its headers: read them off the run's first row.
        let sample = ex
            .fetch(result_call(run, 1, 1).with_key(Some(key)), Subject::Run)
            .await?;
        let mut spare = None;
        let first = page_of(ex.read(&sample, Subject::Run)?, &mut spare)?;
        page.headers = v1_headers(&first.headers.0, &first.list.0)
            .into_iter()
            .map(V1Header::into_owned)
            .collect();
    }
    // Rows, plus separators, headers and the other fields.
    let capacity =
        page.list.iter().map(|r| r.get().len() + 1).sum::<usize>() + page.headers.len() * 96 + 128;
    sized_json(&page, capacity)
}

/// Checks the V1 export body and builds the V2 call.
pub fn export_call(body: &Body, extra_formats: bool) -> Result<V2Call, GatewayError> {
    let run = body.run_slug()?;
    // V1 knew `csv` and `json` only, in lowercase; V2 reads the value without
    // regard to case, so the gateway must not pass `CSV` on as V1 refused it.
    let format = body.req_str("format")?.to_owned();
    let allowed: &[&str] = if extra_formats {
        &V2_EXPORT_FORMATS
    } else {
        &V1_EXPORT_FORMATS
    };
    if !allowed.contains(&format.as_str()) {
        return Err(GatewayError::bad(
            "format",
            format!("must be one of {}", allowed.join(", ")),
        ));
    }
    let keys = match body.get("filter_keys") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|k| match k.as_str().map(str::trim) {
                // Characters, not bytes: a key of non-ASCII letters is as long as it looks.
                Some(k) if !k.is_empty() && !k.contains(',') && k.chars().count() <= 256 => {
                    Ok(k.to_owned())
                }
                _ => Err(GatewayError::bad(
                    "filter_keys",
                    "must be an array of non-empty field keys without commas",
                )),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => {
            return Err(GatewayError::bad(
                "filter_keys",
                "must be an array of strings",
            ))
        }
    };
    if keys.len() > 1000 {
        return Err(GatewayError::bad("filter_keys", "has more than 1000 keys"));
    }
    let path = V2Path::new(&[
        Part::Lit("worker-runs"),
        Part::Id(run.known()?),
        Part::Lit("result"),
        Part::Lit("export"),
    ])
    .query("format", format)
    .query_opt("filter_keys", (!keys.is_empty()).then(|| keys.join(",")));
    Ok(V2Call::get(path))
}

pub async fn export(ex: &Exchange<'_>, body: &Body) -> Result<Value, GatewayError> {
    let call = export_call(body, ex.settings().compat.extra_export_formats)?;
    let data = ex
        .call(call.with_key(Some(ex.key()?)), Subject::Run)
        .await?;
    match data.get("download_url").and_then(Value::as_str) {
        Some(url) => Ok(json!({ "download_url": url })),
        None => Err(GatewayError::Garbled(
            "export answer without download_url".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers_of(v2_headers: &str, rows: &str) -> Vec<V1Header<'static>> {
        let headers: List<OrDefault<V2Header>> = serde_json::from_str(v2_headers).unwrap();
        let rows: Vec<&RawValue> = serde_json::from_str(rows).unwrap();
        v1_headers(&headers.0, &rows)
            .into_iter()
            .map(V1Header::into_owned)
            .collect()
    }

    #[test]
    fn formats_are_inferred_from_rows() {
        let out = headers_of(
            r#"[{"key": "title", "label": "Title"}, {"key": "rating", "label": "Rating"},
                {"key": "empty", "label": "E"}, {"key": "d", "label": "D", "format": "date"}]"#,
            r#"[{"title": "a", "rating": 4.5, "empty": null}, {"title": "b", "rating": null}]"#,
        );
        assert_eq!(out[0].format, "text");
        assert_eq!(out[1].format, "number");
        assert_eq!(out[2].format, "text");
        assert_eq!(out[3].format, "date");
        assert_eq!(
            serde_json::to_value(&out[0]).unwrap(),
            json!({"label": "Title", "key": "title", "format": "text"})
        );
    }

    #[test]
    fn formats_read_the_last_of_a_repeated_key_and_skip_non_objects() {
        let out = headers_of(
            r#"[{"key": "n"}, {"key": "n"}, 7, {"key": 3, "label": "L"}]"#,
            r#"[{"n": "x", "n": 1}, [1, 2], "row", {"n": 2, "other": {"n": "deep"}}]"#,
        );
        assert_eq!(out[0].format, "number");
        assert_eq!(out[1].format, "number");
        assert_eq!(out[1].label, "n");
        assert_eq!(
            serde_json::to_value(&out[2]).unwrap(),
            json!({"label": "", "key": "", "format": "text"})
        );
        assert_eq!(out[3].label, "L");
        assert_eq!(out[3].key, "");
    }

    #[test]
    fn rows_pass_through_byte_for_byte() {
        let plan = Window {
            page_index: 1,
            page_size: 2,
        }
        .plan();
        let body = r#"{"count": 2, "headers": [{"key": "a", "label": "A"}],
            "list": [{"a": 1.50, "b": "\u00e9"}, {"a": 2e3}], "page_index": 1}"#;
        let page: OrDefault<V2ResultPage> = serde_json::from_str(body).unwrap();
        let v1 = v1_result_page(
            Window {
                page_index: 1,
                page_size: 2,
            },
            &plan,
            vec![page.0],
        );
        assert_eq!(
            std::str::from_utf8(crate::ops::raw_json(&v1).unwrap().as_bytes()).unwrap(),
            r#"{"count":2,"headers":[{"label":"A","key":"a","format":"number"}],"list":[{"a": 1.50, "b": "\u00e9"},{"a": 2e3}],"page_index":1,"page_size":2}"#
        );
    }

    #[test]
    fn export_query() {
        let body =
            Body::parse(br#"{"run_slug":"R1","format":"csv","filter_keys":["title","a b"]}"#)
                .unwrap();
        let call = export_call(&body, false).unwrap();
        assert_eq!(
            call.path.path_and_query(),
            "/api/v2/worker-runs/R1/result/export?format=csv&filter_keys=title%2Ca%20b"
        );
        for spelling in ["CSV", " csv", "Json"] {
            let body =
                Body::parse(format!(r#"{{"run_slug":"R1","format":"{spelling}"}}"#).as_bytes())
                    .unwrap();
            assert!(export_call(&body, true).is_err(), "{spelling}");
        }
        let body = Body::parse(br#"{"run_slug":"R1","format":"xlsx"}"#).unwrap();
        assert!(export_call(&body, false).is_err());
        assert!(export_call(&body, true).is_ok());
        let body = Body::parse(br#"{"run_slug":"R1","format":"pdf"}"#).unwrap();
        assert!(export_call(&body, true).is_err());
        let body =
            Body::parse(br#"{"run_slug":"R1","format":"csv","filter_keys":"title"}"#).unwrap();
        assert!(export_call(&body, true).is_err());
        let body =
            Body::parse(br#"{"run_slug":"R1","format":"csv","filter_keys":["a,b"]}"#).unwrap();
        assert!(export_call(&body, true).is_err());
        let body = Body::parse(br#"{"run_slug":"R1"}"#).unwrap();
        assert!(export_call(&body, true).is_err());
    }

    /// Found by schemathesis: the key limit counted bytes while the V1
    /// contract (`maxLength` 256) counts characters.
    #[test]
    fn filter_keys_are_bounded_in_characters() {
        let body = |key: &str| {
            let b = serde_json::json!({"run_slug": "R1", "format": "csv", "filter_keys": [key]});
            Body::parse(b.to_string().as_bytes()).unwrap()
        };
        assert!(export_call(&body(&"é".repeat(256)), true).is_ok());
        assert!(export_call(&body(&"é".repeat(257)), true).is_err());
        assert!(export_call(&body("  "), true).is_err());
    }
}
