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
//! Each V2 page is read by the JSON kernel's `read::result_page`: in one
//! pass by its scanner (rows found and checked, column kinds summed up), the
//! rest of the answer by the typed readers; an answer the scanner declines
//! is read by serde as a whole, with the same result. The V1 page is written once, rows copied as V2 sent them
//! (rows V2 sent with only a comma between them a run of up to 2 KB at a time).
//!
//! V1↔V2 differences here (see `COMPATIBILITY.md`): [`result_header_format`](crate::differences::RESULT_HEADER_FORMAT), [`extra_export_formats`](crate::differences::EXTRA_EXPORT_FORMATS), [`export_download_url`](crate::differences::EXPORT_DOWNLOAD_URL).

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use v1compat_json::read;
use v1compat_json::scan::Column;
use v1compat_json::v1::{V1Header, V1ResultPage};
use v1compat_json::v2::{PageRows, ResultPage, V2Header};

use crate::error::{GatewayError, Subject};
use crate::ops::input::Body;
use crate::ops::wire::{self, Kind, OrDefault, StrOnly};
use crate::ops::{Exchange, Fetched, Read};
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

/// V1 headers: V2's `key`/`label` plus a `format`, V2's or else `infer`'s
/// for the keys of the headers without one (in order).
fn v1_headers<'a>(
    v2_headers: &[OrDefault<V2Header<'a>>],
    infer: impl FnOnce(&[&str]) -> Vec<Column>,
) -> Vec<V1Header<'a>> {
    let to_infer: Vec<&str> = v2_headers
        .iter()
        .filter(|h| h.0.format.0.is_none())
        .map(|h| h.0.key.0.as_deref().unwrap_or_default())
        .collect();
    let mut inferred = infer(&to_infer).into_iter();
    v2_headers
        .iter()
        .map(|OrDefault(h)| {
            let key = h.key.0.clone().unwrap_or_default();
            let label = h.label.0.clone().unwrap_or_else(|| key.clone());
            let format = match &h.format.0 {
                Some(f) => f.clone(),
                None => Cow::Borrowed(inferred.next().unwrap_or(Column::EMPTY).format()),
            };
            V1Header { label, key, format }
        })
        .collect()
}

/// `v1_headers` for headers and rows held as `Value`s (the results inside
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
    let page = ResultPage {
        count: None,
        headers: Vec::new(),
        rows: PageRows::Raw(raw.iter().map(|r| &**r).collect()),
    };
    headers_of_page(&headers, &page)
        .iter()
        .map(|h| serde_json::to_value(h).unwrap_or(Value::Null))
        .collect()
}

/// For each key, what its column holds in the window's rows (`slices`:
/// which rows of each page), for its format: `number` when it has at least
/// one non-null value and every non-null value is a JSON number, else
/// `text` ([`Column::format`]). Only the kind of each wanted value is read:
/// from the scanner's notes, or by reading a raw row with serde.
fn infer_formats(keys: &[&str], pages: &[ResultPage], slices: &[Range<usize>]) -> Vec<Column> {
    let mut columns = vec![Column::EMPTY; keys.len()];
    for (page, slice) in pages.iter().zip(slices) {
        match &page.rows {
            // With no key twice in a row, the order of the values does not
            // matter: the page's columns are summed up, then matched to keys.
            _ if slice.is_empty() => {}
            // The scanner summed up each column over the window's rows.
            PageRows::Scanned(rows) if rows.summarised() == *slice && !rows.repeats() => {
                for (column, key) in columns.iter_mut().zip(keys) {
                    column.merge(rows.summary(key));
                }
            }
            rows => {
                let mut kinds: Vec<Option<Kind>> = vec![None; keys.len()];
                for r in slice.clone() {
                    // Once every column has a non-number, the rest cannot change it.
                    if columns.iter().all(|c| !c.numbers_only) {
                        break;
                    }
                    kinds.iter_mut().for_each(|k| *k = None);
                    let mut de = serde_json::Deserializer::from_slice(rows.row(r));
                    // A raw row is valid JSON; a row that is not an object has no fields.
                    let scan = RowScan {
                        keys,
                        kinds: &mut kinds,
                    };
                    if scan.deserialize(&mut de).is_err() {
                        continue;
                    }
                    for (c, k) in columns.iter_mut().zip(&kinds) {
                        if let Some(k) = k {
                            c.note(*k);
                        }
                    }
                }
            }
        }
    }
    columns
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

/// Reads one V2 result page (the kernel's `read::result_page`): the
/// scanner finds the rows and the kinds of their fields in the rows
/// `summarise` in one pass, and reads the rest (or serde reads it from the
/// skeleton); when the scanner declines, serde reads the page whole, and
/// when the typed reading declines too, the page is read as before (data
/// the typed reading refused, repeated keys say, is written back out from
/// its `Value` into `spare` and read from there, so it maps exactly as the
/// `Value` said).
fn read_page<'a>(
    ex: &Exchange<'_>,
    fetched: &'a Fetched,
    summarise: Range<usize>,
    spare: &'a mut Option<String>,
) -> Result<ResultPage<'a>, GatewayError> {
    let reader = |body| read::result_page(body, summarise);
    match ex.read_with(fetched, Subject::Run, reader)?.0 {
        Read::Typed(page) => Ok(page.unwrap_or_default()),
        Read::Untyped(data) => ResultPage::of_value(&data, spare)
            .map_err(|e| GatewayError::Garbled(format!("unreadable result page ({e})"))),
    }
}

/// The V1 result page from the V2 pages of a plan; rows are neither copied
/// nor parsed into values.
pub fn v1_result_page<'a>(
    window: Window,
    plan: &Plan,
    pages: &[ResultPage<'a>],
) -> V1ResultPage<'a> {
    let count = pages.first().and_then(|p| p.count).unwrap_or(0);
    let lens: Vec<usize> = pages.iter().map(|p| p.rows.len()).collect();
    let slices = plan.slices(&lens);
    let headers = match pages.first() {
        Some(first) => v1_headers(&first.headers, |keys| infer_formats(keys, pages, &slices)),
        None => Vec::new(),
    };
    // A window within one page's rows that V2 wrote next to each other (the
    // usual one) is one run, to be shared rather than copied
    // (`V1ResultPage::to_json_sharing`); else runs of up to `RUN_BYTES`.
    let mut parts = pages.iter().zip(&slices).filter(|(_, s)| !s.is_empty());
    let one = match (parts.next(), parts.next()) {
        (Some((page, slice)), None) => page.rows.text_of(slice.clone()),
        _ => None,
    };
    let runs = match one {
        Some(text) => vec![text],
        None => {
            // Room for a run a row, the most there can be.
            let mut runs = Vec::with_capacity(slices.iter().map(Range::len).sum());
            for (page, slice) in pages.iter().zip(&slices) {
                page.rows.runs_into(slice.clone(), &mut runs);
            }
            runs
        }
    };
    V1ResultPage {
        count,
        headers,
        runs,
        page_index: window.page_index,
        page_size: window.page_size,
    }
}

/// V1 headers from `headers` and all the rows of one page (the sample
/// page of a window past the end, or a synchronous run's results).
fn headers_of_page<'a>(
    headers: &[OrDefault<V2Header<'a>>],
    page: &ResultPage,
) -> Vec<V1Header<'a>> {
    let all = 0..page.rows.len();
    v1_headers(headers, |keys| {
        infer_formats(keys, std::slice::from_ref(page), std::slice::from_ref(&all))
    })
}

pub async fn result_list(ex: &Exchange<'_>, body: &Body<'_>) -> Result<Json, GatewayError> {
    let run = body.run_slug()?;
    let window = body.window(DEFAULT_PAGE_SIZE, ex.settings().max_page_size)?;
    let plan = window.plan();
    let key = ex.key()?;
    let run = ex.known(&run)?;
    let fetched = ex
        .fetch_pages(plan.offsets.clone(), Subject::Run, |o| {
            result_call(run, o, plan.limit).with_key(Some(key.clone()))
        })
        .await?;
    let mut spares: Vec<Option<String>> = (0..fetched.len()).map(|_| None).collect();
    let pages = fetched
        .iter()
        .zip(spares.iter_mut())
        .enumerate()
        .map(|(k, (f, spare))| read_page(ex, f, plan.part_of(k), spare))
        .collect::<Result<Vec<_>, _>>()?;
    let mut page = v1_result_page(window, &plan, &pages);
    if page.runs.is_empty() && page.count > 0 {
        // A page past the end has no rows to infer column formats from, but
        // V1 still typed its headers: read them off the run's first row.
        let sample = ex
            .fetch(result_call(run, 1, 1).with_key(Some(key)), Subject::Run)
            .await?;
        // One row asked for, one summed up.
        let mut spare = None;
        let first = read_page(ex, &sample, 0..1, &mut spare)?;
        page.headers = headers_of_page(&first.headers, &first)
            .into_iter()
            .map(V1Header::into_owned)
            .collect();
    }
    Ok(page.to_json_sharing(fetched.iter().map(Fetched::body)))
}

/// Checks the V1 export body and builds the V2 call.
pub fn export_call(body: &Body<'_>, extra_formats: bool) -> Result<V2Call, GatewayError> {
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
    if !V1_EXPORT_FORMATS.contains(&format.as_str()) {
        body.note(&crate::differences::EXTRA_EXPORT_FORMATS);
    }
    let array_of_strings = || GatewayError::bad("filter_keys", "must be an array of strings");
    let keys: Vec<&str> = match body.get("filter_keys") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|k| k.as_str().ok_or_else(array_of_strings))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(array_of_strings()),
    };
    // V1 looked the run up before it compared the keys with the run's
    // columns: an id no run can have is 404 / 70001 whatever the keys hold.
    let run = body.known(&run)?;
    let keys = keys
        .into_iter()
        .map(|k| match k.trim() {
            // Characters, not bytes: a key of non-ASCII letters is as long as it looks.
            k if !k.is_empty() && !k.contains(',') && k.chars().count() <= 256 => Ok(k.to_owned()),
            _ => Err(GatewayError::bad(
                "filter_keys",
                "must be an array of non-empty field keys without commas",
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if keys.len() > 1000 {
        return Err(GatewayError::bad("filter_keys", "has more than 1000 keys"));
    }
    let path = V2Path::new(&[
        Part::Lit("worker-runs"),
        Part::Id(run),
        Part::Lit("result"),
        Part::Lit("export"),
    ])
    .query("format", format)
    .query_opt("filter_keys", (!keys.is_empty()).then(|| keys.join(",")));
    Ok(V2Call::get(path))
}

pub async fn export(ex: &Exchange<'_>, body: &Body<'_>) -> Result<Value, GatewayError> {
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
    use crate::ops::wire::{IntLike, List};
    use bytes::Bytes;
    use v1compat_json::scan::{self, gen};
    use v1compat_json::v2::V2ResultPage;

    fn headers_of(v2_headers: &str, rows: &str) -> Vec<V1Header<'static>> {
        let headers: List<OrDefault<V2Header>> = serde_json::from_str(v2_headers).unwrap();
        let rows: List<&RawValue> = serde_json::from_str(rows).unwrap();
        let raw = ResultPage::raw(V2ResultPage {
            count: IntLike(None),
            headers,
            list: rows,
        });
        headers_of_page(&raw.headers, &raw)
            .into_iter()
            .map(V1Header::into_owned)
            .collect()
    }

    /// A V2 answer (`code` 0) read as the request path reads it when the
    /// scanner takes it (`None` when it declines), and by serde alone.
    fn both_ways(body: &'static str) -> (Option<ResultPage<'static>>, ResultPage<'static>) {
        // Leaked so the pages may borrow from them, as the request path's
        // pages borrow from what it keeps.
        let spare = || Box::leak(Box::new(None));
        // The general reading: the whole body's `data`, as a `Value`.
        let general = |spare: &'static mut Option<String>| {
            let e: v1compat_json::v2::Envelope = serde_json::from_str(body).unwrap();
            ResultPage::of_value(&e.data.unwrap_or(Value::Null), spare).unwrap()
        };
        // As `read_page`: the kernel's reading, else the general one.
        let scanned = scan::scan(body.as_bytes(), 0..usize::MAX).map(|_| {
            match read::result_page(body.as_bytes(), 0..usize::MAX) {
                Some(typed) if typed.code == Some(0) => typed.data.unwrap_or_default(),
                _ => general(spare()),
            }
        });
        // serde alone: typed, else the general reading.
        let raw = match read::typed::<OrDefault<V2ResultPage>>(body.as_bytes()) {
            Some(typed) => ResultPage::raw(typed.data.map(|p| p.0).unwrap_or_default()),
            None => general(spare()),
        };
        (scanned, raw)
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
        let window = Window {
            page_index: 1,
            page_size: 2,
        };
        let plan = window.plan();
        let body = r#"{"code": 0, "data": {"count": 2, "headers": [{"key": "a", "label": "A"}],
            "list": [{"a": 1.50, "b": "\u00e9"}, {"a": 2e3}], "page_index": 1}}"#;
        let (scanned, raw) = both_ways(body);
        assert!(matches!(
            scanned.as_ref().unwrap().rows,
            PageRows::Scanned(_)
        ));
        let expect = r#"{"count":2,"headers":[{"label":"A","key":"a","format":"number"}],"list":[{"a": 1.50, "b": "\u00e9"},{"a": 2e3}],"page_index":1,"page_size":2}"#;
        for page in [scanned.unwrap(), raw] {
            let v1 = v1_result_page(window, &plan, &[page]).to_json();
            assert_eq!(std::str::from_utf8(&v1.data_bytes()).unwrap(), expect);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 384, ..Default::default() })]

        /// Formats from the scanner's notes are the formats serde reads from
        /// the raw rows, over any window of the rows, for any header keys.
        #[test]
        fn scanned_formats_are_serdes(
            (body, n) in gen::answer(),
            keys in proptest::collection::vec(
                proptest::sample::select(gen::HEADER_KEYS), 0..5),
            skip in 0..8usize,
        ) {
            if let Some(scan) = scan::scan(body.as_bytes(), skip.min(n)..n) {
                let answer: gen::Answer = serde_json::from_str(&body).unwrap();
                let list = serde_json::from_str(answer.data.list.get()).unwrap();
                let raw = ResultPage::raw(V2ResultPage { list, ..Default::default() });
                let scanned = ResultPage::scanned(V2ResultPage::default(), scan.rows);
                proptest::prop_assert_eq!(scanned.rows.len(), n);
                let window = skip.min(n)..n;
                let fast = infer_formats(&keys, std::slice::from_ref(&scanned), std::slice::from_ref(&window));
                let slow = infer_formats(&keys, std::slice::from_ref(&raw), std::slice::from_ref(&window));
                proptest::prop_assert_eq!(fast, slow, "{}", body);
            }
        }
    }

    /// Two V2 pages of a fan-out, one scanned and one not, sliced to a window.
    #[test]
    fn fanout_windows_mix_scanned_and_raw_pages() {
        let window = Window {
            page_index: 2,
            page_size: 150,
        };
        let plan = window.plan();
        assert_eq!((plan.offsets.clone().count(), plan.skip), (2, 50));
        let rows = |from: usize, text: bool| {
            (from..from + 100)
                .map(|i| {
                    let v = if text && i == 120 {
                        "\"x\"".to_owned()
                    } else {
                        i.to_string()
                    };
                    format!(r#"{{"i": {i}, "v": {v}}}"#)
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        let page = |list: String| {
            format!(
                r#"{{"code":0,"data":{{"count":1000,"headers":[{{"key":"i"}},{{"key":"v"}}],"list":[{list}]}}}}"#
            )
        };
        // The second page has a repeated count: serde reads it through a Value.
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let first = leak(page(rows(100, true)));
        let second =
            leak(page(rows(200, false)).replace(r#""count":1000"#, r#""count":1,"count":1000"#));
        let (a, _) = both_ways(first);
        let (b, _) = both_ways(second);
        let pages = [a.unwrap(), b.unwrap()];
        assert!(matches!(pages[0].rows, PageRows::Scanned(_)));
        assert!(matches!(pages[1].rows, PageRows::Raw(_)));
        let v1 = v1_result_page(window, &plan, &pages);
        // The scanned page's 50 rows (a comma between each, some 1 KB) are
        // one run; the raw page's rows (written back out from a `Value`,
        // compact) are one each.
        assert_eq!(v1.runs.len(), 1 + 100);
        let list: Vec<String> = (150..300)
            .map(|i| match i {
                ..200 => format!(r#"{{"i": {i}, "v": {i}}}"#),
                _ => format!(r#"{{"i":{i},"v":{i}}}"#),
            })
            .collect();
        let runs = String::from_utf8(v1.runs.join(&b","[..])).unwrap();
        assert_eq!(runs, list.join(","));
        // Row 120 (the only text `v`) is before the window.
        let formats: Vec<_> = v1.headers.iter().map(|h| h.format.as_ref()).collect();
        assert_eq!(formats, ["number", "number"]);
        let window = Window {
            page_index: 1,
            page_size: 150,
        };
        let v1 = v1_result_page(window, &window.plan(), &pages);
        let formats: Vec<_> = v1.headers.iter().map(|h| h.format.as_ref()).collect();
        assert_eq!(formats, ["number", "text"]);
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

    /// A page of `runs` (slices of `bodies`), written sharing and copying:
    /// the same bytes; and whether the list was shared (its frame a part of
    /// one of the bodies).
    fn written(runs: Vec<&[u8]>, bodies: &[&Bytes]) -> (Bytes, bool) {
        use http_body_util::BodyExt;
        let page = V1ResultPage {
            count: 3,
            headers: vec![V1Header {
                label: "A".into(),
                key: "a".into(),
                format: "number".into(),
            }],
            runs,
            page_index: 1,
            page_size: 10,
        };
        let copied = page.to_json().into_envelope().to_bytes();
        let envelope = page.to_json_sharing(bodies.iter().copied()).into_envelope();
        assert_eq!(envelope.to_bytes(), copied);
        let mut body = crate::v1::answer::AnswerBody::from(envelope);
        let mut shared = false;
        while let Some(frame) = futures_util::FutureExt::now_or_never(body.frame()).flatten() {
            let frame = frame.unwrap().into_data().unwrap();
            let within = |b: &Bytes| {
                let at = frame.as_ptr() as usize;
                at >= b.as_ptr() as usize && at < b.as_ptr() as usize + b.len()
            };
            shared |= bodies.iter().any(|b| within(b));
        }
        (copied, shared)
    }

    #[test]
    fn rows_next_to_each_other_in_one_answer_are_shared_not_copied() {
        let v2 = Bytes::from_static(br#"{"data":{"list":[{"a":1},{"a":2},{"a":3}] , [{"a":4}]}}"#);
        let other = Bytes::from_static(br#"{"a":5}"#);
        // Row `{"a":n}` of the answer.
        let row = |n: u8| {
            let text = format!(r#"{{"a":{n}}}"#);
            let from = v2.windows(7).position(|w| w == text.as_bytes()).unwrap();
            &v2[from..from + 7]
        };
        let first_three = {
            let from = row(1).as_ptr() as usize - v2.as_ptr() as usize;
            &v2[from..from + 23]
        };
        let expect = |rows: &str| {
            format!(
                r#"{{"code":0,"message":"success","data":{{"count":3,"headers":[{{"label":"A","key":"a","format":"number"}}],"list":[{rows}],"page_index":1,"page_size":10}}}}"#
            )
        };
        // One run, and runs with one comma between them: shared.
        let (bytes, shared) = written(vec![first_three], &[&other, &v2]);
        assert!(shared);
        assert_eq!(bytes, expect(r#"{"a":1},{"a":2},{"a":3}"#));
        let (bytes, shared) = written(vec![row(1), row(2), row(3)], &[&v2]);
        assert!(shared);
        assert_eq!(bytes, expect(r#"{"a":1},{"a":2},{"a":3}"#));
        // Copied: rows with more than a comma between them, rows of two
        // answers, a row skipped, no answer given, no rows.
        let (bytes, shared) = written(vec![row(3), row(4)], &[&v2]);
        assert!(!shared);
        assert_eq!(bytes, expect(r#"{"a":3},{"a":4}"#));
        let (bytes, shared) = written(vec![row(3), &other[..]], &[&v2, &other]);
        assert!(!shared);
        assert_eq!(bytes, expect(r#"{"a":3},{"a":5}"#));
        assert!(!written(vec![row(1), row(3)], &[&v2]).1);
        assert!(!written(vec![row(1)], &[]).1);
        assert_eq!(written(vec![], &[&v2]).0, expect(""));
    }
}
