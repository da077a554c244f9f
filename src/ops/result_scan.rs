//! One pass over a V2 result-page answer (`GET /api/v2/worker-runs/{runId}/result`),
//! between the upstream call and the V1 page `results.rs` writes. The rows
//! are passed to V1 unchanged, so they must be valid JSON, and V1's header
//! `format` is inferred from them; serde_json took two passes for that (the
//! rows as raw slices, then each row again for the kinds of its values) at
//! 10–15 instructions a byte. This scanner validates the whole body, finds
//! each row's bytes and notes the kind of each top-level field of a row in
//! the same pass.
//!
//! It handles what it can be sure about and refuses the rest: a body it
//! refuses (`None`) is read by the general serde path as before, so the V1
//! answer never depends on which path read it. It refuses invalid JSON, keys
//! with escapes at the envelope, page or row level (an escaped key may spell
//! `list`, or a column's name), a repeated `data` or `list`, a `list` that
//! is not an array, strings whose `\u` escapes are not valid UTF-16 (serde
//! ignores that when it skips a value but not when it reads one), and field
//! numbers serde cannot read as a number (out of `f64`'s range).
//!
//! What the rest of the answer holds (code, request id, count, headers) is
//! read by the typed serde readers from the *skeleton*: the body with the
//! rows' array replaced by `[]`, a few hundred bytes.

use std::collections::HashMap;
use std::ops::Range;

use crate::ops::wire::Kind;

/// What one pass over a V2 result-page answer found.
#[derive(Debug)]
pub struct Scan<'a> {
    /// The body with `data.list` replaced by `[]`, for the typed reading of
    /// everything but the rows.
    pub skeleton: String,
    pub rows: ScannedRows<'a>,
}

/// The rows of a page: their JSON text as V2 sent it, and the kind of each
/// of their top-level fields, by column.
#[derive(Debug, Default)]
pub struct ScannedRows<'a> {
    /// Each row's text and its range in `fields`.
    rows: Vec<(&'a str, Range<u32>)>,
    /// `(column, kind)` of each top-level field of an object row, in order.
    fields: Vec<(u32, Kind)>,
    /// The keys seen in the rows, by column number, and the other way round.
    keys: Vec<&'a str>,
    columns: HashMap<&'a str, u32>,
}

impl<'a> ScannedRows<'a> {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Row `i`'s JSON text.
    pub fn text(&self, i: usize) -> &'a str {
        self.rows[i].0
    }

    /// The number of distinct row keys.
    pub fn column_count(&self) -> usize {
        self.keys.len()
    }

    /// The column of a key, if some row has it.
    pub fn column(&self, key: &str) -> Option<u32> {
        self.columns.get(key).copied()
    }

    /// The `(column, kind)` of each field of row `i`, in the row's order (a
    /// repeated key appears twice; the last one is what a parser keeps).
    pub fn fields(&self, i: usize) -> &[(u32, Kind)] {
        let r = &self.rows[i].1;
        &self.fields[r.start as usize..r.end as usize]
    }
}

/// Scans a V2 result-page answer; `None` when the general path must read it.
pub fn scan(body: &[u8]) -> Option<Scan<'_>> {
    // Checked as UTF-8 once, so the byte scanner below only deals in ASCII
    // and rows can be handed on as `str`.
    let text = std::str::from_utf8(body).ok()?;
    let mut s = Scanner {
        text,
        b: body,
        i: 0,
        stack: Vec::new(),
    };
    let (list, rows) = s.envelope()?;
    let mut skeleton = String::with_capacity(text.len() - list.len() + 2);
    skeleton.push_str(&text[..list.start]);
    skeleton.push_str("[]");
    skeleton.push_str(&text[list.end..]);
    Some(Scan { skeleton, rows })
}

/// Anything the scanner will not decide; the general path reads the body.
type Bail<T> = Option<T>;

struct Scanner<'a> {
    text: &'a str,
    b: &'a [u8],
    i: usize,
    /// Open arrays and objects of the value being skipped (`[` or `{`):
    /// nesting is followed without recursion, at any depth.
    stack: Vec<u8>,
}

/// A byte in every lane of a `u64`.
const fn lanes(b: u8) -> u64 {
    u64::from_ne_bytes([b; 8])
}
const ONES: u64 = lanes(0x01);
const HIGHS: u64 = lanes(0x80);

impl<'a> Scanner<'a> {
    fn peek(&self) -> Bail<u8> {
        self.b.get(self.i).copied()
    }

    fn next(&mut self) -> Bail<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    fn expect(&mut self, c: u8) -> Bail<()> {
        (self.next()? == c).then_some(())
    }

    /// Skips JSON whitespace (the four characters serde_json accepts).
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// The envelope object: finds `data.list`, skips and checks the rest.
    /// Returns the byte range of the list and its rows.
    fn envelope(&mut self) -> Bail<(Range<usize>, ScannedRows<'a>)> {
        let mut found = None;
        self.ws();
        self.object(|s, key| {
            if key != "data" {
                return s.value();
            }
            if found.is_some() {
                return None;
            }
            if s.peek()? != b'{' {
                return None;
            }
            let mut list = None;
            s.object(|s, key| {
                if key != "list" {
                    return s.value();
                }
                if list.is_some() || s.peek()? != b'[' {
                    return None;
                }
                let start = s.i;
                let rows = s.rows()?;
                list = Some((start..s.i, rows));
                Some(())
            })?;
            found = Some(list?);
            Some(())
        })?;
        self.ws();
        if self.i != self.b.len() {
            return None;
        }
        found
    }

    /// An object whose keys are plain strings (no escapes), `member` reading
    /// each value (whitespace before it already skipped).
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Bail<()>) -> Bail<()> {
        self.expect(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.plain_key()?;
            member(self, key)?;
            self.ws();
            match self.next()? {
                b',' => self.ws(),
                b'}' => return Some(()),
                _ => return None,
            }
        }
    }

    /// `"key"` and its colon, the key without escapes; whitespace after the
    /// colon skipped.
    fn plain_key(&mut self) -> Bail<&'a str> {
        self.expect(b'"')?;
        let start = self.i;
        if self.string()? {
            return None;
        }
        let key = &self.text[start..self.i - 1];
        self.ws();
        self.expect(b':')?;
        self.ws();
        Some(key)
    }

    /// The rows' array, each row's text and the kinds of its fields.
    fn rows(&mut self) -> Bail<ScannedRows<'a>> {
        let mut out = ScannedRows::default();
        // The columns of the previous row, in its order: rows mostly repeat
        // their keys in the same order, so a key is first compared with the
        // one at its place in the previous row before it is looked up.
        let mut previous: Vec<u32> = Vec::new();
        let mut current: Vec<u32> = Vec::new();
        self.expect(b'[')?;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(out);
        }
        loop {
            let start = self.i;
            let first = out.fields.len() as u32;
            if self.peek()? == b'{' {
                current.clear();
                self.object(|s, key| {
                    let guess = previous
                        .get(current.len())
                        .copied()
                        .filter(|&c| out.keys[c as usize] == key);
                    let column = match guess {
                        Some(c) => c,
                        None => {
                            let next = out.keys.len() as u32;
                            let c = *out.columns.entry(key).or_insert(next);
                            if c == next {
                                out.keys.push(key);
                            }
                            c
                        }
                    };
                    current.push(column);
                    let kind = s.field()?;
                    out.fields.push((column, kind));
                    Some(())
                })?;
                std::mem::swap(&mut previous, &mut current);
            } else {
                self.value()?;
            }
            let text = &self.text[start..self.i];
            out.rows.push((text, first..out.fields.len() as u32));
            self.ws();
            match self.next()? {
                b',' => self.ws(),
                b']' => return Some(out),
                _ => return None,
            }
        }
    }

    /// A row's field value, skipped and checked, and its kind.
    fn field(&mut self) -> Bail<Kind> {
        Some(match self.peek()? {
            b'n' => {
                self.literal(b"null")?;
                Kind::Null
            }
            b'-' | b'0'..=b'9' => {
                let start = self.i;
                self.number()?;
                let n = &self.text[start..self.i];
                // Short plain numbers are always in f64's range; for the
                // rest, serde's own reading decides (it refuses what
                // overflows to infinity, and a row it cannot read gives no
                // kinds).
                if (n.len() > 17 || n.bytes().any(|b| b == b'e' || b == b'E'))
                    && serde_json::from_str::<Kind>(n).is_err()
                {
                    return None;
                }
                Kind::Number
            }
            _ => {
                self.value()?;
                Kind::Other
            }
        })
    }

    /// Skips and checks one JSON value of any depth.
    fn value(&mut self) -> Bail<()> {
        let base = self.stack.len();
        loop {
            // A value...
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    self.string()?;
                }
                b'-' | b'0'..=b'9' => self.number()?,
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                open @ (b'{' | b'[') => {
                    self.i += 1;
                    self.ws();
                    let close = if open == b'{' { b'}' } else { b']' };
                    if self.peek()? == close {
                        self.i += 1;
                    } else {
                        self.stack.push(open);
                        if open == b'{' {
                            self.member_key()?;
                        }
                        continue;
                    }
                }
                _ => return None,
            }
            // ...then whatever closes after it, up to the next value.
            loop {
                if self.stack.len() == base {
                    return Some(());
                }
                let open = *self.stack.last()?;
                self.ws();
                match (self.next()?, open) {
                    (b',', b'{') => {
                        self.ws();
                        self.member_key()?;
                        break;
                    }
                    (b',', _) => {
                        self.ws();
                        break;
                    }
                    (b']', b'[') | (b'}', b'{') => {
                        self.stack.pop();
                    }
                    _ => return None,
                }
            }
        }
    }

    /// A key inside a skipped value (escapes allowed) and its colon.
    fn member_key(&mut self) -> Bail<()> {
        self.expect(b'"')?;
        self.string()?;
        self.ws();
        self.expect(b':')?;
        self.ws();
        Some(())
    }

    fn literal(&mut self, word: &[u8]) -> Bail<()> {
        let end = self.i + word.len();
        (self.b.get(self.i..end)? == word).then_some(())?;
        self.i = end;
        Some(())
    }

    /// A number as JSON writes it: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Bail<()> {
        if self.peek()? == b'-' {
            self.i += 1;
        }
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            self.digit()?;
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            self.digit()?;
            self.digits();
        }
        // A digit straight after a leading 0 is not JSON; anything else
        // after the number is for the caller to refuse.
        Some(())
    }

    fn digit(&mut self) -> Bail<()> {
        self.next()?.is_ascii_digit().then_some(())
    }

    fn digits(&mut self) {
        while self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
    }

    /// The rest of a string, its opening quote already read; `true` when it
    /// held an escape. Refuses control characters, invalid escapes and
    /// `\u` escapes that are not valid UTF-16 (a lone surrogate).
    fn string(&mut self) -> Bail<bool> {
        let mut escaped = false;
        loop {
            self.skip_plain();
            match self.next()? {
                b'"' => return Some(escaped),
                b'\\' => {
                    escaped = true;
                    match self.next()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => match self.hex4()? {
                            0xDC00..=0xDFFF => return None,
                            0xD800..=0xDBFF => {
                                self.expect(b'\\')?;
                                self.expect(b'u')?;
                                if !(0xDC00..=0xDFFF).contains(&self.hex4()?) {
                                    return None;
                                }
                            }
                            _ => {}
                        },
                        _ => return None,
                    }
                }
                // A control character.
                _ => return None,
            }
        }
    }

    /// Moves to the next `"`, `\` or control character (or the end), eight
    /// bytes at a time: the bytes of a row are mostly string contents. (The
    /// `memchr` crate finds two or three given bytes, not a range; this is
    /// the word-at-a-time test serde_json uses for the same search.)
    fn skip_plain(&mut self) {
        while let Some(chunk) = self.b.get(self.i..self.i + 8) {
            let w = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
            let ctrl = w.wrapping_sub(lanes(0x20)) & !w;
            let q = w ^ lanes(b'"');
            let quote = q.wrapping_sub(ONES) & !q;
            let bs = w ^ lanes(b'\\');
            let backslash = bs.wrapping_sub(ONES) & !bs;
            let hit = (ctrl | quote | backslash) & HIGHS;
            if hit != 0 {
                // The lowest flagged byte is a true hit (a borrow only
                // spreads upwards from one).
                self.i += hit.trailing_zeros() as usize / 8;
                return;
            }
            self.i += 8;
        }
        while let Some(&c) = self.b.get(self.i) {
            if c == b'"' || c == b'\\' || c < 0x20 {
                return;
            }
            self.i += 1;
        }
    }

    fn hex4(&mut self) -> Bail<u16> {
        let digits = self.text.get(self.i..self.i + 4)?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        self.i += 4;
        u16::from_str_radix(digits, 16).ok()
    }
}

/// Generators of V2 result-page answers for the property tests here and in
/// `results.rs`: valid JSON of every shape the scanner meets (escapes,
/// surrogates, numbers out of range, repeated keys, any whitespace, odd
/// rows), rendered as text.
#[cfg(test)]
pub(crate) mod gen {
    use proptest::prelude::*;

    /// A JSON value to render.
    #[derive(Debug, Clone)]
    pub enum J {
        /// A scalar, as its JSON text.
        Lit(String),
        Arr(Vec<J>),
        /// Members, each key as its JSON text (quotes included).
        Obj(Vec<(String, J)>),
    }

    /// Keys as written: plain, empty, escaped (some spelling plain ones).
    pub const KEYS: &[&str] = &[
        r#""title""#,
        r#""rating""#,
        r#""n""#,
        r#""""#,
        r#""list""#,
        r#""data""#,
        r#""\u0074itle""#,
        r#""a\"b""#,
        r#""é""#,
    ];

    /// Plain column keys, as header keys (unescaped).
    pub const HEADER_KEYS: &[&str] = &["title", "rating", "n", "", "list", "x"];

    fn number() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| serde_json::Number::from_f64(f).unwrap().to_string()),
            "-?(0|[1-9][0-9]{0,25})(\\.[0-9]{1,4})?([eE][+-]?[0-9]{1,3})?",
            Just("1e400".to_owned()),
            Just("-1.8e308".to_owned()),
            Just("1.7976931348623157e308".to_owned()),
            Just("1e-400".to_owned()),
            Just("-0".to_owned()),
        ]
    }

    fn string() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            4 => "[a-zA-Z0-9 :/.-]{0,12}",
            1 => Just("é".to_owned()),
            1 => Just("😀".to_owned()),
            1 => Just(r#"\""#.to_owned()),
            1 => Just(r"\\".to_owned()),
            1 => Just(r"\n\t\/\b\f\r".to_owned()),
            1 => Just(r"\u00e9".to_owned()),
            1 => Just(r"\ud83d\ude00".to_owned()),
            1 => Just(r"\ud800".to_owned()),
            1 => Just(r"\udc00".to_owned()),
            1 => Just(r"\ud800\u0041".to_owned()),
            1 => Just(r"\uDBFF\uDFFF".to_owned()),
        ];
        prop::collection::vec(piece, 0..4).prop_map(|p| format!("\"{}\"", p.concat()))
    }

    pub fn scalar() -> impl Strategy<Value = J> {
        prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            Just("false".to_owned()),
            number(),
            string(),
        ]
        .prop_map(J::Lit)
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => prop::sample::select(KEYS).prop_map(str::to_owned),
            1 => string(),
        ]
    }

    pub fn value() -> impl Strategy<Value = J> {
        scalar().prop_recursive(4, 24, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(J::Arr),
                prop::collection::vec((key(), inner), 0..5).prop_map(J::Obj),
            ]
        })
    }

    /// A result row: mostly an object of column keys, sometimes anything.
    pub fn row() -> impl Strategy<Value = J> {
        prop_oneof![
            6 => prop::collection::vec((key(), value()), 0..6).prop_map(J::Obj),
            1 => value(),
        ]
    }

    /// Whitespace between tokens, chosen by a small generator from `seed`.
    pub struct Ws(pub u64);

    impl Ws {
        fn next(&mut self) -> &'static str {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            match (self.0 >> 33) % 8 {
                0 => " ",
                1 => "\n  ",
                2 => "\t",
                3 => "\r\n",
                _ => "",
            }
        }
    }

    pub fn render(j: &J, ws: &mut Ws, out: &mut String) {
        match j {
            J::Lit(t) => out.push_str(t),
            J::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(ws.next());
                    render(item, ws, out);
                    out.push_str(ws.next());
                }
                out.push_str(ws.next());
                out.push(']');
            }
            J::Obj(members) => {
                out.push('{');
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(ws.next());
                    out.push_str(k);
                    out.push_str(ws.next());
                    out.push(':');
                    out.push_str(ws.next());
                    render(v, ws, out);
                    out.push_str(ws.next());
                }
                out.push('}');
            }
        }
    }

    /// A whole V2 answer around `rows`: the envelope's and the page's
    /// members in any order, sometimes with a repeated or odd member.
    pub fn answer() -> impl Strategy<Value = (String, usize)> {
        let headers = prop::collection::vec(
            prop::sample::select(HEADER_KEYS)
                .prop_map(|k| J::Obj(vec![(r#""key""#.into(), J::Lit(format!("\"{k}\"")))])),
            0..4,
        )
        .prop_map(J::Arr);
        let page_extra = prop_oneof![
            4 => Just(vec![]),
            1 => value().prop_map(|v| vec![(r#""list""#.to_owned(), v)]),
            1 => value().prop_map(|v| vec![(r#""count""#.to_owned(), v)]),
            1 => value().prop_map(|v| vec![(r#""\u006cist""#.to_owned(), v)]),
        ];
        let top_extra = prop_oneof![
            4 => Just(vec![]),
            1 => value().prop_map(|v| vec![(r#""data""#.to_owned(), v)]),
            1 => value().prop_map(|v| vec![(r#""details""#.to_owned(), v)]),
        ];
        (
            prop::collection::vec(row(), 0..8),
            headers,
            page_extra,
            top_extra,
            any::<u64>(),
        )
            .prop_flat_map(|(rows, headers, page_extra, top_extra, seed)| {
                let n = rows.len();
                let mut page = vec![
                    (r#""count""#.to_owned(), J::Lit(n.to_string())),
                    (r#""headers""#.to_owned(), headers),
                    (r#""list""#.to_owned(), J::Arr(rows)),
                    (r#""page_index""#.to_owned(), J::Lit("1".into())),
                ];
                page.extend(page_extra);
                (
                    Just(page).prop_shuffle(),
                    Just(top_extra),
                    Just(seed),
                    Just(n),
                )
            })
            .prop_flat_map(|(page, top_extra, seed, n)| {
                let mut top = vec![
                    (r#""code""#.to_owned(), J::Lit("0".into())),
                    (r#""message""#.to_owned(), J::Lit(r#""success""#.into())),
                    (r#""data""#.to_owned(), J::Obj(page)),
                    (r#""request_id""#.to_owned(), J::Lit(r#""r-1""#.into())),
                ];
                top.extend(top_extra);
                (Just(top).prop_shuffle(), Just(seed), Just(n))
            })
            .prop_map(|(top, seed, n)| {
                let mut out = String::new();
                let mut ws = Ws(seed);
                out.push_str(ws.next());
                render(&J::Obj(top), &mut ws, &mut out);
                out.push_str(ws.next());
                (out, n)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::gen::*;
    use super::*;
    use proptest::prelude::*;
    use serde::Deserialize;
    use serde_json::value::RawValue;

    /// What serde makes of an answer: its `data.list`, raw.
    #[derive(Deserialize)]
    struct Answer<'a> {
        #[serde(borrow)]
        data: Page<'a>,
    }
    #[derive(Deserialize)]
    struct Page<'a> {
        #[serde(borrow)]
        list: &'a RawValue,
    }

    /// A row's fields and the kinds serde reads for them, in order.
    struct Fields(Vec<(String, Kind)>);

    impl<'de> Deserialize<'de> for Fields {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Fields;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Fields, A::Error> {
                    let mut out = Vec::new();
                    while let Some(k) = map.next_key::<String>()? {
                        out.push((k, map.next_value::<Kind>()?));
                    }
                    Ok(Fields(out))
                }
            }
            d.deserialize_map(V)
        }
    }

    fn offset(body: &str, part: &str) -> usize {
        part.as_ptr() as usize - body.as_ptr() as usize
    }

    /// The scanner's claims, checked with serde: the body is valid JSON, the
    /// rows are serde's raw rows at the same places, the kinds are what
    /// serde reads, the skeleton is the body without its rows.
    fn check(body: &str) -> Option<()> {
        let scan = scan(body.as_bytes())?;
        let answer: Answer = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("scanner accepted what serde refuses ({e}): {body}"));
        let list = answer.data.list.get();
        let raw: Vec<&RawValue> = serde_json::from_str(list).unwrap();
        assert_eq!(scan.rows.len(), raw.len(), "{body}");
        for (i, r) in raw.iter().enumerate() {
            let text = scan.rows.text(i);
            assert_eq!(text, r.get(), "{body}");
            assert_eq!(offset(body, text), offset(body, r.get()), "{body}");
            let fields = scan.rows.fields(i);
            if !text.starts_with('{') {
                assert!(fields.is_empty());
                continue;
            }
            let Fields(expect) = serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("scanned row serde cannot read ({e}): {text}"));
            assert_eq!(fields.len(), expect.len(), "{text}");
            for ((c, kind), (key, expect)) in fields.iter().zip(&expect) {
                assert_eq!(scan.rows.column(key), Some(*c), "{text}");
                assert_eq!(kind, expect, "{key} in {text}");
            }
        }
        let start = offset(body, list);
        let expect = format!("{}[]{}", &body[..start], &body[start + list.len()..]);
        assert_eq!(scan.skeleton, expect);
        Some(())
    }

    #[test]
    fn a_plain_page_is_scanned() {
        let body = r#"{"code":0,"message":"success","data":{"count":3,"headers":[{"key":"a"}],
            "list":[ {"a": 1.5e3, "b": "x\"y\u00e9", "c": {"a": "deep"}} , [1,{}], {"a":null,"a":true}],
            "page_index":1},"request_id":"r"}"#;
        let scan = scan(body.as_bytes()).unwrap();
        assert_eq!(scan.rows.len(), 3);
        assert_eq!(scan.rows.text(1), "[1,{}]");
        let a = scan.rows.column("a").unwrap();
        let c = scan.rows.column("c").unwrap();
        assert_eq!(scan.rows.fields(0)[0], (a, Kind::Number));
        assert_eq!(scan.rows.fields(0)[2], (c, Kind::Other));
        assert!(scan.rows.fields(1).is_empty());
        assert_eq!(
            scan.rows.fields(2),
            &[(a, Kind::Null), (a, Kind::Other)][..]
        );
        assert!(scan.skeleton.contains(r#""list":[],"#));
        check(body).unwrap();
    }

    #[test]
    fn what_the_scanner_leaves_to_serde() {
        let page = |list: &str| {
            format!(r#"{{"code":0,"data":{{"count":1,"list":{list}}},"request_id":"r"}}"#)
        };
        for refused in [
            page(r#"[{"\u0061": 1}]"#),
            page(r#"[{"a": "\ud800"}]"#),
            page(r#"[{"a": "\udc00"}]"#),
            page(r#"[{"a": {"\ud800x": 1}}]"#),
            page(r#"[{"a": 1e400}]"#),
            page(r#"[{"a": 1}"#),
            page(r#"[{"a": 01}]"#),
            page(r#"[{"a": 1,}]"#),
            page(r#"[{"a": "tab	in string"}]"#),
            page(r#"[{"a": nul}]"#),
            page(r#"{"a": 1}"#),
            page("[1] , \"list\": []"),
            r#"{"code":0,"data":{"\u006cist":[]}}"#.to_owned(),
            r#"{"code":0,"data":{"list":[]},"data":{"list":[]}}"#.to_owned(),
            r#"{"code":0,"data":null}"#.to_owned(),
            r#"{"code":0,"data":{"count":0}}"#.to_owned(),
            r#"[{"code":0,"data":{"list":[]}}]"#.to_owned(),
            page("[]") + "x",
        ] {
            assert!(scan(refused.as_bytes()).is_none(), "{refused}");
        }
        // Deep nesting is followed, not refused.
        let deep = page(&format!(
            "[{{\"a\": {}1{}}}]",
            "[".repeat(500),
            "]".repeat(500)
        ));
        check(&deep).unwrap();
        // Numbers near f64's edge are serde's to judge.
        check(&page(
            r#"[{"a": 1.7976931348623157e308, "b": 123456789012345678901234567890}]"#,
        ))
        .unwrap();
        check(&page(r#"[{"a": "\ud83d\ude00", "b": 1e-400}]"#)).unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Over generated answers of any shape: whatever the scanner
        /// accepts, serde reads the same way.
        #[test]
        fn the_scanner_agrees_with_serde((body, _) in answer()) {
            check(&body);
        }

        /// An answer with a byte changed, dropped or added: the scanner
        /// never accepts what serde refuses, and agrees on what it accepts.
        #[test]
        fn damaged_answers_are_never_taken_for_valid(
            (body, _) in answer(),
            at in any::<prop::sample::Index>(),
            byte in prop::sample::select(&b"{}[],:\"\\ 0-e.tnx\x01"[..]),
            how in 0..3u8,
        ) {
            let mut bytes = body.into_bytes();
            let i = at.index(bytes.len() + 1);
            match how {
                0 if i < bytes.len() => bytes[i] = byte,
                1 if i < bytes.len() => { bytes.remove(i); }
                _ => bytes.insert(i, byte),
            }
            if let Some(scan) = scan(&bytes) {
                let text = std::str::from_utf8(&bytes).unwrap();
                prop_assert!(serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok(), "{}", text);
                drop(scan);
                check(text);
            }
        }

        /// Answers without what the scanner leaves to serde (escaped keys,
        /// lone surrogates, numbers out of range, odd members) are scanned.
        #[test]
        fn plain_answers_take_the_fast_path(
            rows in prop::collection::vec(
                prop::collection::vec(
                    (prop::sample::select(HEADER_KEYS), prop_oneof![
                        Just("null".to_owned()), Just("1.5".to_owned()), Just("-20".to_owned()),
                        Just(r#""a \"quoted\" \u00e9 😀 text""#.to_owned()), Just("[1, {\"x\": [] }]".to_owned()),
                    ]),
                    0..6,
                ),
                0..20,
            ),
            seed in any::<u64>(),
        ) {
            let rows = J::Arr(rows.into_iter().map(|r| J::Obj(
                r.into_iter().map(|(k, v)| (format!("\"{k}\""), J::Lit(v))).collect()
            )).collect());
            let mut body = String::from(r#"{"code":0,"message":"success","data":{"count":1,"list":"#);
            render(&rows, &mut Ws(seed), &mut body);
            body.push_str(r#"},"request_id":"r"}"#);
            prop_assert!(check(&body).is_some(), "{}", body);
        }
    }
}
