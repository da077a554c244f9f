//! A V2 run-detail answer, and a page of the run list, read in one pass by
//! the readers the result scanner is built on ([`super::values`]), between
//! the upstream call and the gateway's `ops::run_records` (through
//! [`crate::read`]). serde's typed reading of the envelope and its run
//! record (`v2::DataEnvelope` of `wire::Object<V2Run>`) was about a tenth
//! of a translated run detail's instructions: 25 short strings, each
//! searched for escapes and visited through serde's layers.
//! A run-list page was read as a `Value` tree (a map a record, every key
//! hashed and every string copied), then each record out of it: most of
//! what a run list cost.
//!
//! It reads the answer as the typed reading does, or not at all: the
//! envelope's members as the result page's head reads them
//! ([`HeadReader`]), and the record's fields when each is plain (a string
//! without escapes or null where text is read, an integer in `i64` or null
//! where a number is read, either for the status). Anything else (an
//! escape, a float, a member given twice, `data` that is not an object, a
//! body that is not JSON) is `None`, and the caller has serde read the
//! answer as before. Members the record does not keep are checked as JSON
//! and skipped. A run-list page is read so too: its `count` an integer or
//! null, its `list` an array of such records or null.

use std::borrow::Cow;

use super::head::HeadReader;
use super::values::{
    byte, literal, object, object_with, short_integer, string, value, ws, Key, Token,
};
use super::ENVELOPE_KEYS;
use crate::v2::{RunPage, StatusField, V2Run};
use crate::wire::{IntLike, StrOrNum};

/// What the typed reading keeps of a V2 answer read in one pass: its
/// envelope's `code` and `request_id`, and its `data` (a run record, or a
/// run-list page). Made only here, by `envelope`.
#[derive(Debug)]
pub struct Answer<'a, T> {
    pub code: Option<i64>,
    pub request_id: Option<&'a str>,
    pub data: T,
}

/// A run-detail answer: its `data` is the run record.
pub type RunAnswer<'a> = Answer<'a, V2Run<'a>>;

/// A run-list page (`GET /api/v2/worker-runs`).
pub type RunListAnswer<'a> = Answer<'a, RunPage<'a>>;

/// The envelope and run record of a V2 run-detail answer, when every part
/// of it is plain (see the module's doc); `None` leaves it to serde.
pub fn run_answer(body: &[u8]) -> Option<RunAnswer<'_>> {
    envelope(body, record::<false>, &mut Vec::new())
}

/// A V2 answer's envelope (its `code` and `request_id`) and its `data`, read
/// by `data` (given the body as text, where the value starts and the stack
/// for skipped values; the value and where it ends), when every part of it
/// is plain. `stack` grows only for values nested in members not kept.
/// Inlined, each reading with its own `data`.
#[inline(always)]
fn envelope<'a, T>(
    body: &'a [u8],
    mut data: impl FnMut(&'a str, usize, &mut Vec<u8>) -> Option<(T, usize)>,
    stack: &mut Vec<u8>,
) -> Option<Answer<'a, T>> {
    // Checked as UTF-8 once (serde's reading did the same), so the record's
    // strings are slices of it, not each checked again.
    let text = std::str::from_utf8(body).ok()?;
    let mut head = HeadReader::new();
    let mut read = None;
    let end = object(body, ws(body, 0), &ENVELOPE_KEYS, |i, key| {
        if key != b"data" {
            return head.envelope_member(body, key, i, stack);
        }
        // A second `data` is refused by the typed reading.
        if read.is_some() {
            return None;
        }
        let (value, end) = data(text, i, stack)?;
        read = Some(value);
        Some(end)
    })?;
    if ws(body, end) != body.len() {
        return None;
    }
    let head = head.finish()?;
    Some(Answer {
        code: head.code,
        request_id: head.request_id,
        data: read?,
    })
}

/// The envelope and records of a V2 run-list page, when every part of it
/// is plain (see the module's doc); `None` leaves it to serde.
pub fn run_list_answer(body: &[u8]) -> Option<RunListAnswer<'_>> {
    let mut stack = Vec::new();
    let answer = envelope(body, run_page, &mut stack)?;
    // The general reading of a run list takes the page as a `Value`, which
    // serde_json reads no deeper than 128 levels (its skipping, the run
    // detail's fallback, has no limit). A vector never gives back room it
    // was not asked to, so a stack with room for no more than
    // `MAX_SKIPPED_NESTING` proves every skipped value shallower: a page
    // with deeper ones is left to the general reading, which decides.
    (stack.capacity() <= MAX_SKIPPED_NESTING).then_some(answer)
}

/// Nesting of a skipped value in a run-list page that the one-pass reading
/// takes (see [`run_list_answer`]); the page's own levels are four.
const MAX_SKIPPED_NESTING: usize = 64;

/// The members of a run-list page's `data`, as V2 writes their keys.
const PAGE_KEYS: [Token; 2] = Token::all([b"\"count\":", b"\"list\":"]);

/// The run-list page's `data` at `i` of `text` (an object) and where it
/// ends. Members other than `count` and `list` are checked and skipped.
fn run_page<'a>(text: &'a str, i: usize, stack: &mut Vec<u8>) -> Option<(RunPage<'a>, usize)> {
    let b = text.as_bytes();
    let mut count = None;
    let mut runs = None;
    let end = object(b, i, &PAGE_KEYS, |at, key| match key {
        b"count" if count.is_none() => {
            // A numeric string, which the general reading takes as a
            // number, is left to it.
            let (n, end) = match plain(text, at)? {
                (Plain::Integer(n), end) => (Some(n), end),
                (Plain::Null, end) => (None, end),
                (Plain::Text(_), _) => return None,
            };
            count = Some(n);
            Some(end)
        }
        b"list" if runs.is_none() => {
            let (list, end) = records(text, at, stack)?;
            runs = Some(list);
            Some(end)
        }
        // Either of them twice.
        b"count" | b"list" => None,
        _ => value(b, at, stack),
    })?;
    let page = RunPage {
        count: count.flatten(),
        runs: runs.unwrap_or_default(),
    };
    Some((page, end))
}

/// The run records of the array (or null) at `i` of `text`, and where it
/// ends; `None` if any element is not a plain record.
fn records<'a>(text: &'a str, i: usize, stack: &mut Vec<u8>) -> Option<(Vec<V2Run<'a>>, usize)> {
    let b = text.as_bytes();
    let mut runs = Vec::new();
    if b.get(i) == Some(&b'n') {
        return Some((runs, literal(b, i, b"null")?));
    }
    let mut i = ws(b, byte(b, i, b'[')?);
    if b.get(i) == Some(&b']') {
        return Some((runs, i + 1));
    }
    loop {
        let (run, end) = record::<true>(text, i, stack)?;
        runs.push(run);
        i = ws(b, end);
        match *b.get(i)? {
            b',' => i = ws(b, i + 1),
            b']' => return Some((runs, i + 1)),
            _ => return None,
        }
    }
}

/// The record's fields V1 keeps: each one's key as V2 writes it (compact),
/// and where it goes in the record. In the order of V2's published run
/// record (the sandbox's too); another order costs a search of this list a
/// key, not a wrong reading. A field's index here is its bit in
/// [`record`]'s `seen`.
const RUN_FIELDS: [(Token, FieldOf); 13] = [
    (Token::new(b"\"slug\":"), |r| Slot::Text(&mut r.slug)),
    (Token::new(b"\"scraper_slug\":"), |r| {
        Slot::Text(&mut r.scraper_slug)
    }),
    (Token::new(b"\"scraper_title\":"), |r| {
        Slot::Text(&mut r.scraper_title)
    }),
    (Token::new(b"\"version\":"), |r| Slot::Text(&mut r.version)),
    (Token::new(b"\"status\":"), |r| Slot::Status(&mut r.status)),
    (Token::new(b"\"results\":"), |r| {
        Slot::Integer(&mut r.results)
    }),
    (Token::new(b"\"usage\":"), |r| Slot::Text(&mut r.usage)),
    (Token::new(b"\"traffic\":"), |r| {
        Slot::Integer(&mut r.traffic)
    }),
    (Token::new(b"\"origin\":"), |r| Slot::Text(&mut r.origin)),
    (Token::new(b"\"started_at\":"), |r| {
        Slot::Integer(&mut r.started_at)
    }),
    (Token::new(b"\"finished_at\":"), |r| {
        Slot::Integer(&mut r.finished_at)
    }),
    (Token::new(b"\"duration\":"), |r| {
        Slot::Integer(&mut r.duration)
    }),
    (Token::new(b"\"err_msg\":"), |r| Slot::Text(&mut r.err_msg)),
];

// `seen` in [`record`] has a bit for each field.
const _: () = assert!(RUN_FIELDS.len() <= u16::BITS as usize);

/// A field of the record, reached from the record.
type FieldOf = for<'r, 'a> fn(&'r mut V2Run<'a>) -> Slot<'r, 'a>;

/// The run record at `i` of `text` (an object) and where it ends.
///
/// `IN_LIST` only makes the two readers' copies two functions: each is then
/// compiled whole into its one caller, its member step included. One copy
/// shared by both was called, and its member step with it, at about 0.3 k
/// more a run detail.
fn record<'a, const IN_LIST: bool>(
    text: &'a str,
    i: usize,
    stack: &mut Vec<u8>,
) -> Option<(V2Run<'a>, usize)> {
    let b = text.as_bytes();
    let mut run = V2Run::default();
    // One bit a field, to refuse one given twice as the derived reader does.
    let mut seen: u16 = 0;
    // V2 writes the fields in one order: the key after the last one found
    // is tried first. A key found is known by its index from here on.
    let mut next = 0;
    let in_order = |i: usize| {
        let here = |(t, _): &(Token, FieldOf)| t.at(b, i);
        let at = match RUN_FIELDS.get(next) {
            Some(f) if here(f) => next,
            _ => RUN_FIELDS.iter().position(here)?,
        };
        next = at + 1;
        Some((at, ws(b, i + RUN_FIELDS[at].0.len())))
    };
    let end = object_with(b, i, in_order, |at, key| {
        // A key not written as V2 writes it (spaced, say) is looked up.
        let index = match key {
            Key::Known(index) => Some(index),
            Key::Read(key) => RUN_FIELDS.iter().position(|(t, _)| t.key() == key),
        };
        let Some(index) = index else {
            // A field V1 does not have: checked and skipped.
            return value(b, at, stack);
        };
        if seen & (1 << index) != 0 {
            return None;
        }
        seen |= 1 << index;
        let (v, end) = plain(text, at)?;
        match (RUN_FIELDS[index].1)(&mut run) {
            Slot::Status(field) => *field = v.status(),
            Slot::Text(field) => *field = v.text()?,
            Slot::Integer(field) => *field = v.integer()?,
        }
        Some(end)
    })?;
    Some((run, end))
}

/// A plain JSON value: null, a string without escapes, an integer in `i64`.
enum Plain<'a> {
    Null,
    Text(&'a str),
    Integer(i64),
}

/// The plain value at `i` of `text` and where it ends; `None` for any other.
/// Inlined where it is read: a call a field cost a run detail 0.3 k more.
#[inline(always)]
fn plain(text: &str, i: usize) -> Option<(Plain<'_>, usize)> {
    let b = text.as_bytes();
    match *b.get(i)? {
        b'"' => match string(b, i + 1)? {
            (end, false) => Some((Plain::Text(text.get(i + 1..end - 1)?), end)),
            (_, true) => None,
        },
        b'n' => Some((Plain::Null, literal(b, i, b"null")?)),
        b'-' | b'0'..=b'9' => {
            let (n, end) = short_integer(b, i)?;
            Some((Plain::Integer(n), end))
        }
        _ => None,
    }
}

impl<'a> Plain<'a> {
    /// As a `StatusField`: null reads as neither text nor a number.
    fn status(self) -> StatusField<'a> {
        match self {
            Plain::Null => StatusField::Other,
            Plain::Text(s) => StatusField::Text(Cow::Borrowed(s)),
            Plain::Integer(n) => StatusField::Number(Some(n)),
        }
    }

    /// As a `StrOrNum`; a number, which it writes out as text, is left to
    /// serde.
    fn text(self) -> Option<StrOrNum<'a>> {
        match self {
            Plain::Null => Some(StrOrNum(None)),
            Plain::Text(s) => Some(StrOrNum(Some(Cow::Borrowed(s)))),
            Plain::Integer(_) => None,
        }
    }

    /// As an `IntLike`; a string, which it reads as a number if it is one,
    /// is left to serde.
    fn integer(self) -> Option<IntLike> {
        match self {
            Plain::Null => Some(IntLike(None)),
            Plain::Integer(n) => Some(IntLike(Some(n))),
            Plain::Text(_) => None,
        }
    }
}

/// A record field, as what it is read as.
enum Slot<'r, 'a> {
    Status(&'r mut StatusField<'a>),
    Text(&'r mut StrOrNum<'a>),
    Integer(&'r mut IntLike),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v2::DataEnvelope;
    use crate::wire::Object;
    use proptest::prelude::*;

    /// The typed reading this one stands in for.
    fn typed(body: &[u8]) -> Option<(Option<i64>, Option<String>, Option<V2Run<'_>>)> {
        let text = std::str::from_utf8(body).ok()?;
        let envelope: DataEnvelope<Object<V2Run>> = serde_json::from_str(text).ok()?;
        Some((
            envelope.code,
            envelope.request_id.map(|id| id.0.into_owned()),
            envelope.data.map(|o| o.0),
        ))
    }

    /// Whenever this reader reads an answer, serde reads the same from it.
    fn agrees(body: &[u8]) -> Result<bool, TestCaseError> {
        let Some(read) = run_answer(body) else {
            return Ok(false);
        };
        let Some((code, request_id, run)) = typed(body) else {
            return Err(TestCaseError::fail(format!(
                "read here, refused by serde: {}",
                String::from_utf8_lossy(body)
            )));
        };
        prop_assert_eq!(read.code, code);
        prop_assert_eq!(read.request_id.map(str::to_owned), request_id);
        prop_assert_eq!(Some(read.data), run);
        Ok(true)
    }

    const SAMPLE: &str = r#"{"code":0,"message":"success","request_id":"req-1","data":{"id":"01KS2A1M515HG7PZX9STTB0KPH","status":"succeeded","err_msg":"","slug":"01KS2A1M515HG7PZX9STTB0KPH","worker_id":"acme~maps","scraper_title":"Maps","scraper_slug":"acme/maps","results":120,"usage":"0.0150","started_at":1767225600,"finished_at":1767225720,"duration":120,"origin":"api_v2","traffic":2048,"version":"v1.2.0","extra":{"nested":[1,2.5,"x",null,true]}}}"#;

    #[test]
    fn a_plain_answer_is_read_as_serde_reads_it() {
        let read = run_answer(SAMPLE.as_bytes()).expect("plain");
        assert_eq!(read.code, Some(0));
        assert_eq!(read.request_id, Some("req-1"));
        assert_eq!(read.data.status, StatusField::Text("succeeded".into()));
        assert_eq!(read.data.results, IntLike(Some(120)));
        assert_eq!(read.data.usage.or_default(), "0.0150");
        assert!(matches!(read.data.slug.0, Some(Cow::Borrowed(_))));
        assert!(agrees(SAMPLE.as_bytes()).unwrap());
    }

    #[test]
    fn each_key_fills_its_own_field() {
        // Every field, each with a value no other has: in V2's order (each
        // found where the last one ended), reversed (each found by a search
        // of the table) and with its keys spaced (each read, then looked up
        // by name).
        let members = [
            r#""slug":"s1""#,
            r#""scraper_slug":"s2""#,
            r#""scraper_title":"s3""#,
            r#""version":"s4""#,
            r#""status":"s5""#,
            r#""results":11"#,
            r#""usage":"s6""#,
            r#""traffic":12"#,
            r#""origin":"s7""#,
            r#""started_at":13"#,
            r#""finished_at":14"#,
            r#""duration":15"#,
            r#""err_msg":"s8""#,
        ];
        assert_eq!(members.len(), RUN_FIELDS.len());
        let body = |m: &[&str]| format!(r#"{{"code":0,"data":{{{}}}}}"#, m.join(","));
        let in_order = body(&members);
        let reversed: Vec<&str> = members.iter().rev().copied().collect();
        let spaced = in_order.replace("\":", "\" :");
        for case in [in_order, body(&reversed), spaced] {
            assert!(agrees(case.as_bytes()).unwrap(), "{case}");
            let run = run_answer(case.as_bytes()).unwrap().data;
            assert_eq!(run.duration, IntLike(Some(15)));
            assert_eq!(run.err_msg.or_default(), "s8");
        }
    }

    #[test]
    fn what_is_not_plain_is_left_to_serde() {
        let cases = [
            // An escape, in a field kept and in the id.
            SAMPLE.replace(r#""err_msg":"""#, r#""err_msg":"a\nb""#),
            SAMPLE.replace(r#""req-1""#, r#""req\u002d1""#),
            // A number where text is read (serde writes it out), a float
            // and a numeric string where an integer is read.
            SAMPLE.replace(r#""usage":"0.0150""#, r#""usage":0.015"#),
            SAMPLE.replace(r#""results":120"#, r#""results":120.0"#),
            SAMPLE.replace(r#""results":120"#, r#""results":"120""#),
            SAMPLE.replace(r#""duration":120"#, r#""duration":-0"#),
            // A field or `data` twice.
            SAMPLE.replace(r#""slug":"#, r#""slug":"a","slug":"#),
            SAMPLE.replace(r#","data":"#, r#","data":{},"data":"#),
            // `data` that is not an object, or none.
            SAMPLE
                .replace(r#""data":{"#, r#""data":[{"#)
                .replace("}}}", "}]}"),
            r#"{"code":0,"data":null}"#.to_owned(),
            r#"{"code":0}"#.to_owned(),
            // Not JSON, or more after it.
            SAMPLE.replace(r#""traffic":2048"#, r#""traffic":2048,"#),
            format!("{SAMPLE} x"),
            SAMPLE.replace("{\"nested\"", "{\"$serde_json::private::RawValue\""),
            // A key with an escape.
            SAMPLE.replace(r#""origin":"#, r#""orig\u0069n":"#),
        ];
        for case in cases {
            assert!(run_answer(case.as_bytes()).is_none(), "{case}");
        }
    }

    #[test]
    fn null_and_other_kinds_read_as_serde_reads_them() {
        let cases = [
            SAMPLE.replace(r#""status":"succeeded""#, r#""status":null"#),
            SAMPLE.replace(r#""status":"succeeded""#, r#""status":3"#),
            SAMPLE.replace(r#""status":"succeeded""#, r#""status":-7"#),
            SAMPLE.replace(r#""err_msg":"""#, r#""err_msg":null"#),
            SAMPLE.replace(r#""results":120"#, r#""results":null"#),
            SAMPLE.replace(r#""request_id":"req-1""#, r#""request_id":null"#),
            SAMPLE.replace(r#""code":0"#, r#""code":10002"#),
            SAMPLE.replace(r#""message":"success","#, ""),
            SAMPLE.replace(r#""code":0,"#, ""),
            // Whitespace anywhere JSON allows it, non-ASCII text.
            SAMPLE.replace(':', " :\n\t").replace(',', " , "),
            SAMPLE.replace("Maps", "Cartes \u{e9}\u{4e2d}\u{1F600}"),
            r#"{"data":{}}"#.to_owned(),
        ];
        for case in cases {
            assert!(agrees(case.as_bytes()).unwrap(), "{case}");
        }
    }

    fn member() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            Just("status"),
            Just("err_msg"),
            Just("slug"),
            Just("results"),
            Just("usage"),
            Just("origin"),
            Just("traffic"),
            Just("version"),
            Just("other"),
        ];
        let value = prop_oneof![
            "\"[a-z0-9 ._~/-]{0,12}\"",
            "\"[a-z]{0,3}(\\\\n|\\\\u00e9|\\\\\"|é)[a-z]{0,3}\"",
            "-?[0-9]{1,20}",
            "-?[0-9]{1,3}\\.[0-9]{1,3}",
            "(null|true|false|\\[\\]|\\{\\}|\\[1,\"a\"\\]|\\{\"k\":null\\})",
        ];
        (key, value).prop_map(|(k, v)| format!("\"{k}\":{v}"))
    }

    /// The general reading of a run-list page this one stands in for: the
    /// envelope, then `data` as a `Value`, its records read out of it.
    fn list_agrees(body: &[u8]) -> Result<bool, TestCaseError> {
        let Some(read) = run_list_answer(body) else {
            return Ok(false);
        };
        let general = serde_json::from_slice::<crate::v2::Envelope>(body);
        let Ok(envelope) = general else {
            return Err(TestCaseError::fail(format!(
                "read here, refused by serde: {}",
                String::from_utf8_lossy(body)
            )));
        };
        let data = envelope.data.unwrap_or(serde_json::Value::Null);
        prop_assert_eq!(read.code, envelope.code);
        prop_assert_eq!(read.request_id.map(str::to_owned), envelope.request_id);
        prop_assert_eq!(read.data, RunPage::of_value(&data));
        Ok(true)
    }

    const PAGE: &str = r#"{"code":0,"message":"success","request_id":"req-2","data":{"count":2,"list":[{"slug":"a","status":"succeeded","results":1},{"slug":"b","status":"failed","err_msg":"boom","extra":{"x":[1.5]}}],"offset":0,"limit":20}}"#;

    #[test]
    fn a_plain_page_is_read_as_its_value_is() {
        let read = run_list_answer(PAGE.as_bytes()).expect("plain");
        assert_eq!(read.data.count, Some(2));
        assert_eq!(read.data.runs.len(), 2);
        assert_eq!(read.data.runs[1].err_msg.or_default(), "boom");
        let cases = [
            PAGE.to_owned(),
            PAGE.replace(r#""count":2"#, r#""count":null"#),
            PAGE.replace(r#""count":2,"#, ""),
            PAGE.replace(r#""list":[{"#, r#""list":null,"other":[{"#),
            PAGE.replace(r#""list":[{"#, r#""list":[],"other":[{"#),
            PAGE.replace(':', " :\n").replace(',', " , "),
            r#"{"code":0,"data":{}}"#.to_owned(),
        ];
        for case in cases {
            assert!(list_agrees(case.as_bytes()).unwrap(), "{case}");
        }
        // A page of as many records as V2 sends at most.
        let record = r#"{"slug":"a","status":"succeeded","results":1}"#;
        let full = format!(
            r#"{{"code":0,"data":{{"count":100,"list":[{}]}}}}"#,
            vec![record; 100].join(",")
        );
        assert!(list_agrees(full.as_bytes()).unwrap());
        assert_eq!(
            run_list_answer(full.as_bytes()).unwrap().data.runs.len(),
            100
        );
    }

    #[test]
    fn values_nested_deeper_than_serde_reads_are_left_to_it() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let page = |n: usize| {
            PAGE.replace(
                r#""results":1}"#,
                &format!(r#""results":1,"extra":{}}}"#, nested(n)),
            )
        };
        assert!(list_agrees(page(60).as_bytes()).unwrap());
        assert!(run_list_answer(page(66).as_bytes()).is_none());
        assert!(run_list_answer(page(130).as_bytes()).is_none());
        // What the general reading makes of a deeper one: not a `Value`.
        assert!(serde_json::from_str::<crate::v2::Envelope>(&page(130)).is_err());
    }

    #[test]
    fn a_page_not_plain_is_left_to_serde() {
        let cases = [
            // Read leniently by the general reading: a numeric string or a
            // float for the count, an element that is not an object.
            PAGE.replace(r#""count":2"#, r#""count":"2""#),
            PAGE.replace(r#""count":2"#, r#""count":2.0"#),
            PAGE.replace(r#"[{"slug":"a""#, r#"[7,{"slug":"a""#),
            PAGE.replace(r#"[{"slug":"a""#, r#"[null,{"slug":"a""#),
            // A list that is not an array, a member twice, an escape.
            PAGE.replace(r#""list":["#, r#""list":{"a":["#)
                .replace("],\"offset\"", "]},\"offset\""),
            PAGE.replace(r#""count":2"#, r#""count":2,"count":3"#),
            PAGE.replace(r#""offset":0"#, r#""offset":0,"list":[]"#),
            PAGE.replace(r#""slug":"a""#, r#""slug":"a","slug":"b""#),
            PAGE.replace("boom", r#"bo\"om"#),
            // Not JSON, no data, data that is not an object.
            PAGE.replace("}]", "},]"),
            r#"{"code":0}"#.to_owned(),
            r#"{"code":0,"data":[]}"#.to_owned(),
        ];
        for case in cases {
            assert!(run_list_answer(case.as_bytes()).is_none(), "{case}");
        }
    }

    proptest! {
        /// Generated records, plain or not: whenever this reader reads one,
        /// serde's reading is the same.
        #[test]
        fn every_answer_read_here_is_read_so_by_serde(
            members in proptest::collection::vec(member(), 0..10),
            code in prop_oneof![Just("0"), Just("10002"), Just("null"), Just("1.0")],
            spaced in any::<bool>(),
        ) {
            let data = format!("{{{}}}", members.join(","));
            let mut body = format!(r#"{{"code":{code},"request_id":"r","data":{data}}}"#);
            if spaced {
                body = body.replace(',', " ,\n ");
            }
            agrees(body.as_bytes())?;
        }

        /// Generated pages, plain or not: whenever this reader reads one,
        /// the general reading of it is the same.
        #[test]
        fn every_page_read_here_is_read_so_by_serde(
            records in proptest::collection::vec(
                prop_oneof![
                    4 => proptest::collection::vec(member(), 0..6)
                        .prop_map(|m| format!("{{{}}}", m.join(","))),
                    1 => Just("null".to_owned()),
                    1 => Just("[]".to_owned()),
                ],
                0..5,
            ),
            count in prop_oneof![Just("3"), Just("null"), Just("\"3\""), Just("3.5"), Just("-0")],
            list_null in proptest::bool::weighted(0.1),
            code in prop_oneof![Just("0"), Just("10002"), Just("null")],
            spaced in any::<bool>(),
        ) {
            let list = if list_null { "null".to_owned() } else { format!("[{}]", records.join(",")) };
            let mut body = format!(
                r#"{{"code":{code},"request_id":"r","data":{{"count":{count},"list":{list},"limit":20}}}}"#
            );
            if spaced {
                body = body.replace(',', " ,\n ");
            }
            list_agrees(body.as_bytes())?;
        }

        /// A record of plain values, each field once, is always read here:
        /// text or null where text is read, integers or null where a number
        /// is, either for the status, anything in a field V1 does not have.
        #[test]
        fn a_plain_record_is_always_read(
            fields in proptest::collection::btree_map(
                prop_oneof![Just("status"), Just("slug"), Just("results"), Just("usage"), Just("other")],
                (
                    "\"[a-z0-9 ._-]{0,12}\"",
                    prop_oneof!["[1-9][0-9]{0,9}", "-[1-9][0-9]{0,5}", Just("0".to_owned())],
                    any::<bool>(),
                ),
                0..5,
            ),
        ) {
            let fields = fields.into_iter().map(|(k, (text, int, null))| {
                let v = match k {
                    _ if null => "null".to_owned(),
                    "slug" | "usage" => text,
                    "results" => int,
                    _ if int.len() % 2 == 0 => int,
                    _ => text,
                };
                (k, v)
            });
            let members: Vec<String> = fields.map(|(k, v)| format!("\"{k}\":{v}")).collect();
            let body = format!(r#"{{"code":0,"message":"ok","data":{{{}}}}}"#, members.join(","));
            prop_assert!(agrees(body.as_bytes())?, "not read: {}", body);
        }
    }
}
