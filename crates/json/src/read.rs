//! One call per V2 answer kind, between the gateway's V2 call and its
//! mapping (`ops::Exchange::read_with` hands the answer's body to one of
//! these). Each tries the one-pass reader ([`crate::scan`]) and, where it
//! declines, serde's typed reading ([`DataEnvelope`] of the kind's typed
//! reader), so a handler reads V2's answer with one call, and on the common
//! path (a plain answer) reads it once. Both readings give the same answer
//! whenever both take a body: the scanner's tests, property tests and fuzz
//! targets hold it to serde's.
//!
//! `None` leaves the answer to the general reading ([`crate::v2::Envelope`],
//! `data` as a `Value`), which the caller does: it is also the reading of
//! every error, whose details it keeps. A [`Typed`] answer with a `code`
//! other than 0 goes there too.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;

use crate::escape::Texts;
use crate::scan;
use crate::v2::{DataEnvelope, ResultPage, RunPage, V2ResultPage, V2Run};
use crate::wire::{List, Object, OrDefault};

/// A V2 answer read typed: the envelope's `code` and `request_id`, its
/// `data` (`None` when V2 sent none), and what is known of the texts in it.
#[derive(Debug)]
pub struct Typed<'a, T> {
    pub code: Option<i64>,
    pub request_id: Option<Cow<'a, str>>,
    pub data: Option<T>,
    pub texts: Texts,
}

impl<'a, T> Typed<'a, T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Typed<'a, U> {
        Typed {
            code: self.code,
            request_id: self.request_id,
            data: self.data.map(f),
            texts: self.texts,
        }
    }
}

/// Any V2 answer, its `data` read by `T` (one of [`crate::wire`]'s readers,
/// or a type built of them), from the body checked as UTF-8 once; `None`
/// for a body that is not UTF-8, or that `T` or the envelope refuses.
pub fn typed<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Option<Typed<'a, T>> {
    let text = std::str::from_utf8(body).ok()?;
    let envelope: DataEnvelope<'a, T> = serde_json::from_str(text).ok()?;
    Some(Typed {
        code: envelope.code,
        request_id: envelope.request_id.map(|id| id.0),
        data: envelope.data,
        texts: Texts::UNCHECKED,
    })
}

/// A run-detail answer (`GET /api/v2/worker-runs/{runId}`): in one pass
/// where every part of it is plain (its texts then need no escaping), else
/// by serde; `data` that is not an object is the general reading's.
pub fn run(body: &[u8]) -> Option<Typed<'_, V2Run<'_>>> {
    match scan::run_answer(body) {
        Some(answer) => Some(Typed {
            code: answer.code,
            request_id: answer.request_id.map(Cow::Borrowed),
            data: Some(answer.data),
            texts: Texts::SCANNED,
        }),
        None => typed::<Object<V2Run>>(body).map(|read| read.map(|o| o.0)),
    }
}

/// A run-list page (`GET /api/v2/worker-runs`), in one pass where every part
/// of it is plain (its texts then need no escaping). There is no typed
/// reading of a page: the general reading takes its `data` as a `Value`
/// ([`RunPage::of_value`]), and so does the caller of a page this declines.
pub fn run_page(body: &[u8]) -> Option<Typed<'_, RunPage<'_>>> {
    let answer = scan::run_list_answer(body)?;
    Some(Typed {
        code: answer.code,
        request_id: answer.request_id.map(Cow::Borrowed),
        data: Some(answer.data),
        texts: Texts::SCANNED,
    })
}

/// A result page (`GET /api/v2/worker-runs/{runId}/result`), the columns of
/// the rows `summarise` (the page's part of the V1 window) summed up when
/// the scanner reads it: rows and head in one pass; or the rows in one
/// pass and the rest (the *skeleton*, the body without its rows) by serde,
/// when the head's reading was not plain; or the whole page by serde, rows
/// kept raw. Its `data` is always a page: none sent reads as an empty one.
pub fn result_page(body: &[u8], summarise: Range<usize>) -> Option<Typed<'_, ResultPage<'_>>> {
    let Some(scan) = scan::scan(body, summarise) else {
        let read = typed::<OrDefault<V2ResultPage>>(body)?;
        let page = read.data.map(|p| p.0).unwrap_or_default();
        return Some(Typed {
            code: read.code,
            request_id: read.request_id,
            data: Some(ResultPage::raw(page)),
            texts: Texts::UNCHECKED,
        });
    };
    if let Some(head) = scan.head {
        return Some(Typed {
            code: head.code,
            request_id: head.request_id.map(Cow::Borrowed),
            data: Some(ResultPage::scanned(head.page, scan.rows)),
            texts: Texts::UNCHECKED,
        });
    }
    // A few hundred bytes, rarely: what it holds is copied out of it, so
    // that the page borrows from the body alone.
    let skeleton = scan.skeleton()?;
    let read = typed::<OrDefault<V2ResultPage>>(skeleton.as_bytes())?;
    let page = read.data.map(|p| p.0).unwrap_or_default();
    let headers = page.headers.0.into_iter();
    let page = V2ResultPage {
        count: page.count,
        headers: List(headers.map(|h| OrDefault(h.0.into_owned())).collect()),
        list: List::default(),
    };
    Some(Typed {
        code: read.code,
        request_id: read.request_id.map(|id| Cow::Owned(id.into_owned())),
        data: Some(ResultPage::scanned(page, scan.rows)),
        texts: Texts::UNCHECKED,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::gen;
    use crate::v2::PageRows;
    use proptest::prelude::*;

    const RUN: &str = r#"{"code":0,"message":"success","request_id":"req-1","data":{"slug":"r1","status":"succeeded","err_msg":"","results":3,"usage":"0.01"}}"#;

    #[test]
    fn a_plain_run_is_read_in_one_pass_and_its_texts_need_no_escape() {
        let read = run(RUN.as_bytes()).unwrap();
        assert_eq!((read.code, read.texts), (Some(0), Texts::SCANNED));
        assert!(matches!(read.request_id, Some(Cow::Borrowed("req-1"))));
        assert_eq!(read.data.unwrap().slug.or_default(), "r1");
    }

    #[test]
    fn a_run_the_scanner_leaves_is_read_by_serde_the_same_way() {
        let escaped = RUN.replace(r#""err_msg":"""#, r#""err_msg":"a\nb""#);
        assert!(scan::run_answer(escaped.as_bytes()).is_none());
        let read = run(escaped.as_bytes()).unwrap();
        assert_eq!(read.texts, Texts::UNCHECKED);
        assert_eq!(read.request_id.as_deref(), Some("req-1"));
        let record = read.data.unwrap();
        assert_eq!(record.err_msg.or_default(), "a\nb");
        let plain = run(RUN.as_bytes()).unwrap().data.unwrap();
        assert_eq!(
            V2Run {
                err_msg: plain.err_msg.clone(),
                ..record
            },
            plain
        );
        // No record, or not an object: typed as none, or the general reading's.
        let none = run(br#"{"code":0,"data":null}"#).unwrap();
        assert!(none.data.is_none());
        assert!(run(br#"{"code":0,"data":[1]}"#).is_none());
        assert!(run(b"{\"code\":0,\"data\":{\"slug\":\"\xff\"}}").is_none());
        // An error is typed too; its code sends it to the general reading.
        let error = run(br#"{"code":13000,"message":"not found"}"#).unwrap();
        assert_eq!(error.code, Some(13000));
    }

    #[test]
    fn a_run_page_is_read_in_one_pass_or_left() {
        let page = r#"{"code":0,"data":{"count":1,"list":[{"slug":"a"}]}}"#;
        let read = run_page(page.as_bytes()).unwrap();
        assert_eq!(read.texts, Texts::SCANNED);
        assert_eq!(read.data.unwrap().runs.len(), 1);
        assert!(run_page(page.replace("1,", r#""1","#).as_bytes()).is_none());
    }

    /// A result page holding `list`, its answer's request id `request_id`.
    fn page(list: &str, request_id: &str) -> String {
        format!(
            r#"{{"code":0,"request_id":"{request_id}","data":{{"count":2,"headers":[{{"key":"a","label":"A"}}],"list":{list}}}}}"#
        )
    }

    #[test]
    fn a_result_page_is_read_in_one_pass_with_its_head_or_beside_its_skeleton() {
        let plain = page(r#"[{"a":1},{"a":"x"}]"#, "r-1");
        let read = result_page(plain.as_bytes(), 0..2).unwrap();
        assert!(matches!(read.request_id, Some(Cow::Borrowed("r-1"))));
        let data = read.data.unwrap();
        assert_eq!(data.count, Some(2));
        assert!(
            matches!(&data.rows, PageRows::Scanned(rows) if rows.summary("a").format() == "text")
        );
        // A head whose reading is not plain (an escape): read by serde from
        // the skeleton, its strings copied out of it; the rows still scanned.
        let escaped = page(r#"[{"a":1},{"a":2}]"#, r"r\u002d1");
        let read = result_page(escaped.as_bytes(), 0..2).unwrap();
        assert!(matches!(read.request_id, Some(Cow::Owned(ref id)) if id == "r-1"));
        let data = read.data.unwrap();
        assert_eq!(data.headers[0].0.label.0.as_deref(), Some("A"));
        assert!(
            matches!(&data.rows, PageRows::Scanned(rows) if rows.summary("a").format() == "number")
        );
        // Rows the scanner refuses: the whole page by serde, rows raw.
        let refused = page(r#"[{"\u0061":1}]"#, "r-1");
        let data = result_page(refused.as_bytes(), 0..1).unwrap().data.unwrap();
        assert!(matches!(&data.rows, PageRows::Raw(rows) if rows.len() == 1));
        // No data: an empty page; data the typed reading refuses: left.
        let empty = result_page(br#"{"code":0}"#, 0..1).unwrap().data.unwrap();
        assert!(empty.count.is_none() && empty.rows.is_empty());
        let twice = page("[]", "r").replace(r#""count":2"#, r#""count":2,"count":3"#);
        assert!(result_page(twice.as_bytes(), 0..1).is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Over generated answers of any shape: whatever the reader of a
        /// result page takes, serde's typed reading of the whole body takes
        /// the same way (code, request id, count, headers, rows).
        #[test]
        fn a_result_page_is_read_as_serde_reads_it((body, n) in gen::answer(), from in 0..8usize) {
            let Some(read) = result_page(body.as_bytes(), from.min(n)..n) else {
                return Ok(());
            };
            let typed: DataEnvelope<OrDefault<V2ResultPage>> = serde_json::from_str(&body)
                .map_err(|e| TestCaseError::fail(format!("read where serde refuses ({e}): {body}")))?;
            prop_assert_eq!(read.code, typed.code);
            prop_assert_eq!(read.request_id.as_deref(), typed.request_id.as_ref().map(|t| &*t.0));
            let page = typed.data.map(|p| p.0).unwrap_or_default();
            let data = read.data.unwrap();
            prop_assert_eq!(data.count, page.count.0);
            let strings = |h: &OrDefault<crate::v2::V2Header>| {
                [&h.0.key, &h.0.label, &h.0.format].map(|f| f.0.as_deref().map(str::to_owned))
            };
            let headers: Vec<_> = data.headers.iter().map(strings).collect();
            let expect: Vec<_> = page.headers.0.iter().map(strings).collect();
            prop_assert_eq!(headers, expect);
            prop_assert_eq!(data.rows.len(), page.list.0.len());
            for (i, row) in page.list.0.iter().enumerate() {
                prop_assert_eq!(data.rows.row(i), row.get().as_bytes());
            }
        }
    }
}
