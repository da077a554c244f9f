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
//! Each V2 page is read in one pass by [`result_scan`] (rows found and
//! checked, column kinds summed up), the rest of the answer by the typed
//! readers; an answer the scanner declines is read by serde as a whole, with
//! the same result. The V1 page is written once, rows copied as V2 sent them
//! (rows V2 sent with only a comma between them a run of up to 2 KB at a time).
//!
//! V1↔V2 differences here (see `COMPATIBILITY.md`): [`result_header_format`](crate::differences::RESULT_HEADER_FORMAT), [`extra_export_formats`](crate::differences::EXTRA_EXPORT_FORMATS), [`export_download_url`](crate::differences::EXPORT_DOWNLOAD_URL).

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use bytes::Bytes;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::error::{GatewayError, Subject};
use crate::ops::input::Body;
use crate::ops::result_scan::{self, Column, Scan, ScannedRows};
pub use crate::ops::result_scan::{V2Header, V2ResultPage};
use crate::ops::wire::{self, Kind, OrDefault, StrOnly};
use crate::ops::{Exchange, Fetched, Read};
use crate::paging::{Plan, Window};
use crate::upstream::V2Call;
use crate::v1::Json;
use crate::v2::{Part, Segment, V2Path};
use v1compat_json::escape::json_string;

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

/// The rows of one V2 result page: found by the scanner with the kinds of
/// their fields, or read as raw values by serde (the general path).
#[derive(Debug)]
pub enum PageRows<'a> {
    Scanned(ScannedRows<'a>),
    Raw(Vec<&'a RawValue>),
}

impl<'a> PageRows<'a> {
    pub fn len(&self) -> usize {
        match self {
            PageRows::Scanned(rows) => rows.len(),
            PageRows::Raw(rows) => rows.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `i`'s JSON text, as V2 sent it.
    pub fn row(&self, i: usize) -> &'a [u8] {
        match self {
            PageRows::Scanned(rows) => rows.row(i),
            PageRows::Raw(rows) => rows[i].get().as_bytes(),
        }
    }

    /// The text of the rows `range` (within the page, not empty) as one
    /// part of the answer, when a scanned page holds them with only commas
    /// between them (see [`ScannedRows::text_of`]).
    pub fn text_of(&self, range: Range<usize>) -> Option<&'a [u8]> {
        match self {
            PageRows::Scanned(rows) => rows.text_of(range),
            PageRows::Raw(_) => None,
        }
    }

    /// The texts of the rows `range` (within the page) added to `out` in
    /// runs (see [`V1ResultPage::runs`]): a scanned page's rows next to each
    /// other in a few, a raw page's one a row.
    pub fn runs_into(&self, range: Range<usize>, out: &mut Vec<&'a [u8]>) {
        match self {
            PageRows::Scanned(rows) => rows.runs_into(range, out),
            PageRows::Raw(rows) => out.extend(rows[range].iter().map(|r| r.get().as_bytes())),
        }
    }
}

/// One V2 result page, ready to map.
#[derive(Debug)]
pub struct ResultPage<'a> {
    pub count: Option<i64>,
    pub headers: Vec<OrDefault<V2Header<'a>>>,
    pub rows: PageRows<'a>,
}

impl<'a> ResultPage<'a> {
    /// A page read by serde, rows and all.
    pub fn raw(page: V2ResultPage<'a>) -> ResultPage<'a> {
        ResultPage {
            count: page.count.0,
            headers: page.headers.0,
            rows: PageRows::Raw(page.list.0),
        }
    }

    /// A page whose rows the scanner found, the rest read by serde from the
    /// skeleton (whose `list` is empty).
    pub fn scanned(page: V2ResultPage<'a>, rows: ScannedRows<'a>) -> ResultPage<'a> {
        ResultPage {
            count: page.count.0,
            headers: page.headers.0,
            rows: PageRows::Scanned(rows),
        }
    }
}

/// The V1 result page (`data`): V1's fields, the rows as V2 sent them
/// (valid JSON text, as bytes).
#[derive(Debug)]
pub struct V1ResultPage<'a> {
    pub count: i64,
    pub headers: Vec<V1Header<'a>>,
    /// The rows of `list` in runs: one row, or rows V2 sent with only a
    /// comma between them, that text with the commas (all of a window within
    /// one V2 page, which is then shared rather than copied; else up to
    /// [`RUN_BYTES`](result_scan::RUN_BYTES), copied a run at a time).
    /// Joined by commas, the runs are the list's content; none when the page
    /// has no rows.
    pub runs: Vec<&'a [u8]>,
    pub page_index: u64,
    pub page_size: u64,
}

impl V1ResultPage<'_> {
    /// Written once, in V1's field order, into a buffer sized for it: the
    /// rows (valid JSON, checked by whoever read them) are copied as they
    /// are, a run at a time; the rest is written as serde would write it.
    pub fn to_json(&self) -> Json {
        let rows: usize = self.runs.iter().map(|r| r.len() + 1).sum();
        Json::write_direct(rows + self.around_len(), |out| {
            self.write_head(out);
            for (i, run) in self.runs.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(run);
            }
            self.write_tail(out);
        })
    }

    /// [`V1ResultPage::to_json`], the rows not copied when they stand in
    /// one of `bodies` (the V2 answers they were read from) as they are in
    /// the list, with only commas between them: a window within one V2
    /// page, as V2 writes pages. The list is then that part of the V2
    /// answer, shared.
    pub fn to_json_sharing<'b>(&self, bodies: impl IntoIterator<Item = &'b Bytes>) -> Json {
        match bodies
            .into_iter()
            .find_map(|body| list_in(&self.runs, body))
        {
            Some(list) => Json::write_around(
                self.around_len(),
                |out| self.write_head(out),
                list,
                |out| self.write_tail(out),
            ),
            None => self.to_json(),
        }
    }

    /// Room for all but the rows: the headers, punctuation, keys and three
    /// integers of up to 20 digits.
    fn around_len(&self) -> usize {
        self.headers.iter().map(V1Header::json_len).sum::<usize>() + 128
    }

    /// The page up to its rows.
    fn write_head(&self, out: &mut Vec<u8>) {
        let mut int = itoa::Buffer::new();
        out.extend_from_slice(b"{\"count\":");
        out.extend_from_slice(int.format(self.count).as_bytes());
        out.extend_from_slice(b",\"headers\":[");
        for (i, header) in self.headers.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            header.write_json(out);
        }
        out.extend_from_slice(b"],\"list\":[");
    }

    /// The page after its rows.
    fn write_tail(&self, out: &mut Vec<u8>) {
        let mut int = itoa::Buffer::new();
        out.extend_from_slice(b"],\"page_index\":");
        out.extend_from_slice(int.format(self.page_index).as_bytes());
        out.extend_from_slice(b",\"page_size\":");
        out.extend_from_slice(int.format(self.page_size).as_bytes());
        out.push(b'}');
    }
}

/// The list's text as a part of `body`, when `runs` (slices of the V2
/// answers) all stand in it in order with one comma between each and the
/// next: their text joined by commas, shared rather than copied.
fn list_in(runs: &[&[u8]], body: &Bytes) -> Option<Bytes> {
    let (first, last) = (runs.first()?, runs.last()?);
    // Where each run starts in `body`, if it is in it (addresses compared,
    // nothing read).
    let at = |run: &[u8]| {
        let start = (run.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
        (start + run.len() <= body.len()).then_some(start)
    };
    let start = at(first)?;
    let mut end = start + first.len();
    for run in &runs[1..] {
        if at(run)? != end + 1 || body[end] != b',' {
            return None;
        }
        end += 1 + run.len();
    }
    debug_assert_eq!(end, at(last)? + last.len());
    Some(body.slice(start..end))
}

/// A V1 column header.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct V1Header<'a> {
    pub label: Cow<'a, str>,
    pub key: Cow<'a, str>,
    pub format: Cow<'a, str>,
}

impl V1Header<'_> {
    /// The header as serde writes it (a test compares the two), keys
    /// written already quoted.
    fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"label\":");
        json_string(out, &self.label);
        out.extend_from_slice(b",\"key\":");
        json_string(out, &self.key);
        out.extend_from_slice(b",\"format\":");
        // Mostly one of the two a page infers, which need no escape.
        match &*self.format {
            "text" => out.extend_from_slice(b"\"text\""),
            "number" => out.extend_from_slice(b"\"number\""),
            format => json_string(out, format),
        }
        out.push(b'}');
    }

    /// Room [`V1Header::write_json`] needs, give or take escapes.
    fn json_len(&self) -> usize {
        40 + self.label.len() + self.key.len() + self.format.len()
    }

    fn into_owned(self) -> V1Header<'static> {
        V1Header {
            label: Cow::Owned(self.label.into_owned()),
            key: Cow::Owned(self.key.into_owned()),
            format: Cow::Owned(self.format.into_owned()),
        }
    }
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

/// Reads one V2 result page. The scanner finds the rows and the kinds of
/// their fields in one pass, and reads the rest (or serde reads it from
/// the skeleton, when its reading was not plain: `skeleton`);
/// when the scanner declines, or the typed reading does, the page is read
/// as before (data the typed reading refused, repeated keys say, is written
/// back out from its `Value` into `spare` and read from there, so it maps
/// exactly as the `Value` said).
fn read_page<'a>(
    ex: &Exchange<'_>,
    fetched: &'a Fetched,
    skeleton: Option<&'a str>,
    scan: Option<Scan<'a>>,
    spare: &'a mut Option<String>,
) -> Result<ResultPage<'a>, GatewayError> {
    match scan {
        Some(Scan {
            head: Some(head),
            rows,
            ..
        }) => page_from(
            ex.read_parts(
                fetched,
                head.code,
                head.request_id,
                Some(OrDefault(head.page)),
                Subject::Run,
            )?,
            Some(rows),
            spare,
        ),
        Some(scan) => page_from(
            ex.read_text(fetched, skeleton, Subject::Run)?,
            Some(scan.rows),
            spare,
        ),
        None => page_from(ex.read(fetched, Subject::Run)?, None, spare),
    }
}

/// [`read_page`] once the answer is read: typed (rows from the scanner when
/// it read the skeleton), or a `Value`.
fn page_from<'a>(
    read: Read<OrDefault<V2ResultPage<'a>>>,
    rows: Option<ScannedRows<'a>>,
    spare: &'a mut Option<String>,
) -> Result<ResultPage<'a>, GatewayError> {
    match (read, rows) {
        (Read::Typed(page), Some(rows)) => Ok(ResultPage::scanned(
            page.map(|p| p.0).unwrap_or_default(),
            rows,
        )),
        (Read::Typed(page), None) => Ok(ResultPage::raw(page.map(|p| p.0).unwrap_or_default())),
        (Read::Untyped(data), _) => {
            let text = spare.insert(data.to_string());
            serde_json::from_str::<OrDefault<V2ResultPage>>(text)
                .map(|p| ResultPage::raw(p.0))
                .map_err(|e| GatewayError::Garbled(format!("unreadable result page ({e})")))
        }
    }
}

/// Scans each V2 answer (see [`result_scan`]), summing up the columns of
/// the rows `part(k)` of the `k`-th: the scans, and the skeletons serde
/// reads the rest of an answer from when the scanner did not (kept while
/// the pages borrow from them).
fn scan_all(
    fetched: &[Fetched],
    part: impl Fn(usize) -> Range<usize>,
) -> (Vec<Option<String>>, Vec<Option<Scan<'_>>>) {
    fetched
        .iter()
        .enumerate()
        .map(|(k, f)| {
            let scan = result_scan::scan(f.body(), part(k));
            let skeleton = scan
                .as_ref()
                .filter(|s| s.head.is_none())
                .and_then(Scan::skeleton);
            (skeleton, scan)
        })
        .unzip()
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
    let (skeletons, scans) = scan_all(&fetched, |k| plan.part_of(k));
    let mut spares: Vec<Option<String>> = (0..fetched.len()).map(|_| None).collect();
    let pages = fetched
        .iter()
        .zip(&skeletons)
        .zip(scans)
        .zip(spares.iter_mut())
        .map(|(((f, skeleton), scan), spare)| read_page(ex, f, skeleton.as_deref(), scan, spare))
        .collect::<Result<Vec<_>, _>>()?;
    let mut page = v1_result_page(window, &plan, &pages);
    if page.runs.is_empty() && page.count > 0 {
        // A page past the end has no rows to infer column formats from, but
        // V1 still typed its headers: read them off the run's first row.
        let sample = [ex
            .fetch(result_call(run, 1, 1).with_key(Some(key)), Subject::Run)
            .await?];
        // One row asked for, one summed up.
        let (skeleton, scan) = scan_all(&sample, |_| 0..1);
        let mut spare = None;
        let scan = scan.into_iter().next().flatten();
        let first = read_page(ex, &sample[0], skeleton[0].as_deref(), scan, &mut spare)?;
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

    /// A V2 answer (`code` 0) read as the request path reads it, with the
    /// scanner (`None` when it declines) and without.
    fn both_ways(body: &'static str) -> (Option<ResultPage<'static>>, ResultPage<'static>) {
        // As `Exchange::read_text`: typed from `text`, else the whole body's `data`.
        let read = |text: &'static str| match serde_json::from_str::<
            crate::v2::DataEnvelope<OrDefault<V2ResultPage>>,
        >(text)
        {
            Ok(e) => Read::Typed(e.data),
            Err(_) => {
                let e: crate::v2::Envelope = serde_json::from_str(body).unwrap();
                Read::Untyped(e.data.unwrap_or(Value::Null))
            }
        };
        // Leaked so the pages may borrow from them, as the request path's
        // pages borrow from what it keeps.
        let spare = || Box::leak(Box::new(None));
        // As `read_page`: the head the scanner read, else the skeleton's.
        let scanned = result_scan::scan(body.as_bytes(), 0..usize::MAX).map(|s| {
            let head = match s.head {
                Some(head) if head.code == Some(0) => Read::Typed(Some(OrDefault(head.page))),
                Some(_) => read(body),
                None => read(Box::leak(s.skeleton().unwrap().into_boxed_str())),
            };
            page_from(head, Some(s.rows), spare()).unwrap()
        });
        (scanned, page_from(read(body), None, spare()).unwrap())
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

    /// Headers are written as serde writes them, escapes and all.
    #[test]
    fn headers_are_written_as_serde_writes_them() {
        let texts = [
            "",
            "plain",
            "é ✓ 😀",
            "q\"b\\s/",
            "nl\n tab\t \u{1} \u{1f} \u{7f}",
            "</script>",
        ];
        let headers: Vec<V1Header> = texts
            .iter()
            .flat_map(|a| texts.iter().map(move |b| (a, b)))
            .map(|(a, b)| V1Header {
                label: Cow::Borrowed(a),
                key: Cow::Borrowed(b),
                format: Cow::Borrowed(a),
            })
            .collect();
        let page = V1ResultPage {
            count: -3,
            headers: headers.clone(),
            runs: vec![br#"{"a":1},{"a":2}"#, b"[]"],
            page_index: u64::MAX,
            page_size: 0,
        };
        let expect = serde_json::to_string(&json!({
            "count": -3,
            "headers": headers,
            "list": [{"a": 1}, {"a": 2}, []],
            "page_index": u64::MAX,
            "page_size": 0,
        }))
        .unwrap();
        // In V1's field order (serde_json keeps `json!`'s, `preserve_order`).
        assert_eq!(
            std::str::from_utf8(&page.to_json().data_bytes()).unwrap(),
            expect
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 384, ..Default::default() })]

        /// Formats from the scanner's notes are the formats serde reads from
        /// the raw rows, over any window of the rows, for any header keys.
        #[test]
        fn scanned_formats_are_serdes(
            (body, n) in result_scan::gen::answer(),
            keys in proptest::collection::vec(
                proptest::sample::select(result_scan::gen::HEADER_KEYS), 0..5),
            skip in 0..8usize,
        ) {
            if let Some(scan) = result_scan::scan(body.as_bytes(), skip.min(n)..n) {
                let answer: result_scan::gen::Answer = serde_json::from_str(&body).unwrap();
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
