//! The V2 result page (`GET /api/v2/worker-runs/{runId}/result`) as the
//! readers give it to the gateway's `ops::results`: its shape as the typed
//! readers see it (what the scanner reads beside the rows, `count` and
//! `headers`, and what serde reads as a whole when the scanner declines),
//! and [`ResultPage`], the page ready to map, its rows found by the scanner
//! or read raw by serde.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::scan::ScannedRows;
use crate::wire::{IntLike, List, OrDefault, StrOnly};

/// A V2 result page read without a `Value` tree: the rows stay the raw JSON
/// V2 sent, to be copied into the V1 page unchanged. (On the request path
/// the rows are found by the scanner and this reads the rest of the page;
/// it reads the rows too when the scanner declined.)
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

impl V2Header<'_> {
    /// The header holding its own strings, for a page that outlives the
    /// text it was read from.
    pub(crate) fn into_owned(self) -> V2Header<'static> {
        let owned = |s: StrOnly| StrOnly(s.0.map(|s| Cow::Owned(s.into_owned())));
        V2Header {
            key: owned(self.key),
            label: owned(self.label),
            format: owned(self.format),
        }
    }
}

/// The rows of one V2 result page: found by the scanner with the kinds of
/// their fields, or read as raw values by serde (the general path).
#[derive(Debug)]
pub enum PageRows<'a> {
    Scanned(ScannedRows<'a>),
    Raw(Vec<&'a RawValue>),
}

impl<'a> PageRows<'a> {
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            PageRows::Scanned(rows) => rows.len(),
            PageRows::Raw(rows) => rows.len(),
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `i`'s JSON text, as V2 sent it.
    #[inline]
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
    /// runs (see [`crate::v1::V1ResultPage::runs`]): a scanned page's rows
    /// next to each other in a few, a raw page's one a row.
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

    /// A page whose rows the scanner found, the rest read beside them (by
    /// the scanner, or by serde from the skeleton, whose `list` is empty).
    pub fn scanned(page: V2ResultPage<'a>, rows: ScannedRows<'a>) -> ResultPage<'a> {
        ResultPage {
            count: page.count.0,
            headers: page.headers.0,
            rows: PageRows::Scanned(rows),
        }
    }

    /// The general reading's page: `data` (read as a `Value`, when the
    /// typed readers declined the answer: a key given twice, say) written
    /// back out into `spare` and read from there, so it maps exactly as the
    /// `Value` says.
    pub fn of_value(data: &Value, spare: &'a mut Option<String>) -> serde_json::Result<Self> {
        let text = spare.insert(data.to_string());
        serde_json::from_str::<OrDefault<V2ResultPage>>(text).map(|p| ResultPage::raw(p.0))
    }
}

/// No rows, no count, no headers: the page of an answer without `data`.
impl Default for ResultPage<'_> {
    fn default() -> Self {
        ResultPage::raw(V2ResultPage::default())
    }
}
