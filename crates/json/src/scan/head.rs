//! The parts of a V2 result-page answer around its rows (`code`,
//! `message`, `request_id`, `details`, and the page's `count` and
//! `headers`) read in the scanner's one pass (`super`), between the
//! upstream call and the gateway's `ops::results`. serde's typed reading of these few
//! hundred bytes (`v2::DataEnvelope` of `wire::OrDefault<V2ResultPage>`,
//! from a copy of the body without its rows) cost more than a tenth of a
//! 100-row page; here each value is read where the scanner already stands.
//!
//! It reads them as the typed reading does, or not at all: a value whose
//! reading is not plain (a string with an escape, a `code` that is not an
//! integer in `i64`, a `count` that is not a short integer or null, a
//! member given twice, which the derived readers refuse) makes the head
//! unread (`None`), and the caller has serde read it from the skeleton as
//! before. Only what the reading keeps is kept: the envelope's `message`
//! and `details` are checked for what serde would refuse and otherwise
//! skipped.

use std::borrow::Cow;
use std::ops::Range;

use super::values::{byte, object, short_integer, string, value, ws, Token};
use super::At;
use crate::v2::{V2Header, V2ResultPage};
use crate::wire::{IntLike, List, OrDefault, StrOnly};

/// What the typed reading keeps of the answer but its rows.
#[derive(Debug, Default)]
pub struct Head<'a> {
    pub code: Option<i64>,
    pub request_id: Option<&'a str>,
    /// The page's `count` and `headers` (its `list` is empty: the rows
    /// are the scanner's).
    pub page: V2ResultPage<'a>,
}

/// Members of an object read so far, one bit each, to notice one given
/// twice.
type Seen = u8;

/// The head as the scanner meets its members.
pub(super) struct HeadReader<'a> {
    head: Head<'a>,
    /// The envelope's members and the page's.
    seen: Seen,
    /// Whether every member met so far was read as serde reads it.
    sure: bool,
}

const CODE: Seen = 1;
const MESSAGE: Seen = 2;
const REQUEST_ID: Seen = 4;
const DETAILS: Seen = 8;
const COUNT: Seen = 16;
const HEADERS: Seen = 32;

impl<'a> HeadReader<'a> {
    pub(super) fn new() -> Self {
        HeadReader {
            head: Head::default(),
            seen: 0,
            sure: true,
        }
    }

    /// Notes member `bit` as met; a second time, the head is left to serde
    /// (the derived readers refuse a field given twice).
    fn meet(&mut self, bit: Seen) {
        self.sure &= self.seen & bit == 0;
        self.seen |= bit;
    }

    /// An envelope member other than `data`, `key`, whose value is at `i`:
    /// checked as JSON, read if the head keeps it; where it ends.
    pub(super) fn envelope_member(
        &mut self,
        b: &'a [u8],
        key: &[u8],
        i: usize,
        stack: &mut Vec<u8>,
    ) -> At {
        let end = value(b, i, stack)?;
        self.envelope_value(key, &b[i..end]);
        Some(end)
    }

    /// [`HeadReader::envelope_member`]'s reading of the value's text `v`.
    fn envelope_value(&mut self, key: &[u8], v: &'a [u8]) {
        match key {
            b"code" => {
                self.meet(CODE);
                match integer(v) {
                    Some(code) => self.head.code = code,
                    None => self.sure = false,
                }
            }
            b"message" => {
                self.meet(MESSAGE);
                // An `Option<Text>`: a string or null; kept by nobody.
                self.sure &= v == b"null" || v.first() == Some(&b'"');
            }
            b"request_id" => {
                self.meet(REQUEST_ID);
                match text(v) {
                    Some(id) => self.head.request_id = id,
                    None => self.sure = false,
                }
            }
            // Any value: an `Option<IgnoredAny>`.
            b"details" => self.meet(DETAILS),
            _ => {}
        }
    }

    /// A page member other than `list` and `headers`.
    pub(super) fn page_member(&mut self, key: &[u8], v: &[u8]) {
        if key == b"count" {
            self.meet(COUNT);
            // `IntLike` reads floats and numeric strings too; those are
            // left to serde.
            match integer(v) {
                Some(count) => self.head.page.count = IntLike(count),
                None => self.sure = false,
            }
        }
    }

    /// The page's `headers` at `i`: read, and where it ends.
    pub(super) fn headers(&mut self, b: &'a [u8], i: usize, stack: &mut Vec<u8>) -> At {
        self.meet(HEADERS);
        if let Some((headers, end)) = headers(b, i, stack) {
            self.head.page.headers = List(headers);
            return Some(end);
        }
        // Not an array of plain headers: checked, and left to serde.
        self.sure = false;
        value(b, i, stack)
    }

    pub(super) fn finish(self) -> Option<Head<'a>> {
        self.sure.then_some(self.head)
    }
}

/// An `Option<i64>` as serde reads one from the JSON text `v`: null, or an
/// integer of up to 18 digits ([`short_integer`]); `None` for anything
/// else, `-0` included (serde_json reads it as the float `-0.0`, which an
/// `i64` refuses).
fn integer(v: &[u8]) -> Option<Option<i64>> {
    if v == b"null" {
        return Some(None);
    }
    match short_integer(v, 0)? {
        (n, end) if end == v.len() => Some(Some(n)),
        _ => None,
    }
}

/// An `Option<Text>` as serde reads one from the JSON text `v`: null, or a
/// string without escapes (borrowed); `None` for anything else.
fn text(v: &[u8]) -> Option<Option<&str>> {
    if v == b"null" {
        return Some(None);
    }
    let inner = v.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    if inner.contains(&b'\\') {
        return None;
    }
    std::str::from_utf8(inner).ok().map(Some)
}

/// An array of headers at `open` (each an object, or anything else read
/// as a header of no fields, as `OrDefault` reads it), checked as JSON: the
/// headers and where the array ends. `None` for anything serde may read
/// otherwise, or that is not JSON (the caller checks it again).
fn headers<'a>(
    b: &'a [u8],
    open: usize,
    stack: &mut Vec<u8>,
) -> Option<(Vec<OrDefault<V2Header<'a>>>, usize)> {
    // Where each header's strings are; made `str`s once the array is read.
    let mut found: Vec<Strings> = Vec::new();
    let mut i = ws(b, byte(b, open, b'[')?);
    let end = if b.get(i) == Some(&b']') {
        i + 1
    } else {
        // A page has a few headers: room for a usual number at once.
        found.reserve(8);
        loop {
            let (strings, end) = match b.get(i)? {
                b'{' => header(b, i, stack)?,
                _ => (Strings::default(), value(b, i, stack)?),
            };
            found.push(strings);
            i = ws(b, end);
            match *b.get(i)? {
                b',' => i = ws(b, i + 1),
                b']' => break i + 1,
                _ => return None,
            }
        }
    };
    // The array checked as UTF-8 once, rather than each string (a string's
    // bytes are valid, as the scanner checks them; a `str` is only had so).
    let text = std::str::from_utf8(b.get(open..end)?).ok()?;
    let field = |range: &Option<Range<usize>>| match range {
        Some(r) => text
            .get(r.start - open..r.end - open)
            .map(|s| StrOnly(Some(Cow::Borrowed(s)))),
        None => Some(StrOnly(None)),
    };
    let headers = found
        .iter()
        .map(|[key, label, format]| {
            Some(OrDefault(V2Header {
                key: field(key)?,
                label: field(label)?,
                format: field(format)?,
            }))
        })
        .collect::<Option<_>>()?;
    Some((headers, end))
}

/// Where a header's `key`, `label` and `format` strings are in the body
/// (their contents), for those that are strings.
type Strings = [Option<Range<usize>>; 3];

/// One header object at `open` (its `{`), its keys plain: where its
/// strings are, and where it ends.
fn header(b: &[u8], open: usize, stack: &mut Vec<u8>) -> Option<(Strings, usize)> {
    let mut strings = Strings::default();
    // Which of the three fields were met.
    let mut seen: Seen = 0;
    let end = object(b, open, &HEADER_KEYS, |at, key| {
        let f = match key {
            b"key" => 0,
            b"label" => 1,
            b"format" => 2,
            _ => return value(b, at, stack),
        };
        // A field given twice is refused by the derived reader.
        if seen & 1 << f != 0 {
            return None;
        }
        seen |= 1 << f;
        if b.get(at) != Some(&b'"') {
            // Anything but a string is no value (`StrOnly`).
            return value(b, at, stack);
        }
        let (end, escaped) = string(b, at + 1)?;
        if escaped {
            return None;
        }
        strings[f] = Some(at + 1..end - 1);
        Some(end)
    })?;
    Some((strings, end))
}

/// A header's fields, as V2 writes their keys (see [`object`]).
const HEADER_KEYS: [Token; 3] = Token::all([b"\"key\":", b"\"label\":", b"\"format\":"]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_as_serde_reads_them() {
        assert_eq!(integer(b"0"), Some(Some(0)));
        assert_eq!(integer(b"-7"), Some(Some(-7)));
        assert_eq!(integer(b"null"), Some(None));
        assert_eq!(
            integer(b"999999999999999999"),
            Some(Some(999_999_999_999_999_999))
        );
        for other in [
            &b"1.0"[..],
            b"1e3",
            b"\"0\"",
            b"true",
            b"[]",
            b"-",
            b"-0",
            b"9999999999999999999",
        ] {
            assert_eq!(integer(other), None, "{}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn texts_as_serde_reads_them() {
        assert_eq!(text(b"null"), Some(None));
        assert_eq!(text(br#""req-1""#), Some(Some("req-1")));
        assert_eq!(text(br#""""#), Some(Some("")));
        assert_eq!(text(br#""a\"b""#), None);
        assert_eq!(text(b"5"), None);
    }
}
