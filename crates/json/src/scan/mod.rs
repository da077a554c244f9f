//! The one-pass readers of V2 answers, each reading what it can be sure of
//! and leaving the rest to serde ([`crate::read`] chooses): a result page
//! here, a run and a run-list page in `run_record.rs`, on the value readers
//! of `values.rs`.
//!
//! One pass over a V2 result-page answer (`GET /api/v2/worker-runs/{runId}/result`),
//! between the upstream call and the V1 page the gateway's `ops::results`
//! writes (through [`crate::read::result_page`]). The rows are passed to V1
//! unchanged, so they must be valid JSON, and V1's header
//! `format` is inferred from them; serde_json took two passes for that (the
//! rows as raw slices, then each row again for the kinds of its values) at
//! 10–15 instructions a byte. This scanner validates the whole body, finds
//! each row's bytes and, in the same pass, sums up by column what the
//! top-level fields of the rows in the page's part of the V1 window hold
//! (number, null, anything else). A row with a key twice is noticed: a
//! parser keeps the last value, so `ops::results` then reads the rows' kinds
//! with serde. Rows with only a comma between them (a page V2 wrote
//! compact) are handed to the V1 page as runs of up to 2 KB, each copied
//! in one call.
//!
//! Rows mostly repeat the previous row's keys in the same order, as V2
//! writes them compact, so runs of such rows have a loop of their own
//! (`same_rows`). Each field is first compared with the one at its place
//! in the previous row as a few masked words (the `{` or `,` before the
//! key, the key's quotes and its colon included: equal bytes are a
//! separator and a key already checked), its value read straight after, and
//! its kind or-ed into the notes of that place. A row that differs (other
//! keys, another order, whitespace) is read key by key from where it
//! differs, and its keys become the places the next row is compared with.
//!
//! Strings are searched sixteen bytes at a time for the bytes that end a
//! plain run (`"`, `\`, control characters, bytes that are not ASCII),
//! written so that the compiler makes each step a few vector instructions
//! (SSE2 on x86-64; there is no code for one architecture, and no
//! `unsafe`). Where the
//! string at a place was `n` bytes long in the previous row (ids, codes,
//! hashes keep their length), a quote `n` bytes on with no such byte before
//! it is the end, checked without looking for it. Only strings may hold
//! bytes that are not ASCII, so the body is checked as UTF-8 there, a run
//! of such bytes at a time, and not in a pass of its own; the rows are kept
//! as bytes (a `str` of them would be checked again).
//!
//! It handles what it can be sure about and refuses the rest: a body it
//! refuses (`None`) is read by the general serde path as before, so the V1
//! answer never depends on which path read it. It refuses invalid JSON
//! (bytes that are not UTF-8 included), keys with escapes at the envelope,
//! page or row level (an escaped key may spell `list`, or a column's name),
//! a repeated `data` or `list`, a `list` that is not an array, strings
//! whose `\u` escapes are not valid UTF-16 (serde ignores that when it
//! skips a value but not when it reads one), field numbers serde cannot
//! read as a number (out of `f64`'s range), and the key serde_json reads
//! as a raw value's token (`wire::RAW_VALUE_KEY`).
//!
//! What the rest of the answer holds (code, request id, count, headers) is
//! read in the same pass where its reading is plain (`head.rs`); else by
//! the typed serde readers from the *skeleton*: the body with the rows'
//! array replaced by `[]`, a few hundred bytes.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

use crate::wire::Kind;

mod head;
mod run_record;
mod values;
pub use head::Head;
use head::HeadReader;
pub use run_record::{run_answer, run_list_answer, Answer, RunAnswer, RunListAnswer};
use values::{byte, field, plain_key, value, ws, Token};

#[cfg(any(test, feature = "gen"))]
pub mod gen;

/// What one pass over a V2 result-page answer found.
#[derive(Debug)]
pub struct Scan<'a> {
    body: &'a [u8],
    /// Where `data.list` is in the body.
    list: Range<usize>,
    /// Everything but the rows, when its reading was plain; else serde
    /// reads it from the [skeleton](Scan::skeleton).
    pub head: Option<Head<'a>>,
    pub rows: ScannedRows<'a>,
}

impl Scan<'_> {
    /// The body with `data.list` replaced by `[]`, for the typed reading of
    /// everything but the rows when the head was not read here. (Valid
    /// UTF-8, as the body is: a `String` is only had by checking it.)
    pub fn skeleton(&self) -> Option<String> {
        let b = self.body;
        let mut skeleton = Vec::with_capacity(b.len() - self.list.len() + 2);
        skeleton.extend_from_slice(b.get(..self.list.start)?);
        skeleton.extend_from_slice(b"[]");
        skeleton.extend_from_slice(b.get(self.list.end..)?);
        String::from_utf8(skeleton).ok()
    }
}

/// What the values of a column held: V1's header `format` is `number` when
/// some value was a number and none was anything but a number or null.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    pub seen: bool,
    pub numbers_only: bool,
}

impl Column {
    pub const EMPTY: Column = Column {
        seen: false,
        numbers_only: true,
    };

    /// Noted without a branch: it is done for every field of the window.
    #[inline]
    pub fn note(&mut self, kind: Kind) {
        self.seen |= kind != Kind::Null;
        self.numbers_only &= kind != Kind::Other;
    }

    #[inline]
    pub fn merge(&mut self, other: Column) {
        self.seen |= other.seen;
        self.numbers_only &= other.numbers_only;
    }

    #[inline]
    pub fn format(self) -> &'static str {
        if self.seen && self.numbers_only {
            "number"
        } else {
            "text"
        }
    }

    /// The kinds or-ed together in `notes` (see [`Notes`]) noted.
    fn note_all(&mut self, notes: Notes) {
        self.seen |= notes & SEEN != 0;
        self.numbers_only &= notes & NOT_NUMBER == 0;
    }
}

/// A value's kind as bits, so that the kinds of a column's values are
/// summed up by or-ing them into one byte: a null sets none, a number
/// [`SEEN`], anything else [`SEEN`] and [`NOT_NUMBER`].
type Notes = u8;
const SEEN: Notes = 1;
const NOT_NUMBER: Notes = 2;
const NULL: Notes = 0;
const NUMBER: Notes = SEEN;
const OTHER: Notes = SEEN | NOT_NUMBER;

/// The rows of a page: their JSON text as V2 sent it (valid UTF-8, kept as
/// bytes: a `str` of them would be checked again), and by column what the
/// top-level fields of the rows in a given range held.
#[derive(Debug, Default)]
pub struct ScannedRows<'a> {
    /// The body the rows are in, and where each is in it (so that rows
    /// next to each other are found next to each other: see
    /// [`ScannedRows::runs_into`]).
    body: &'a [u8],
    rows: Vec<Span>,
    /// The rows (after the first) with more than a comma between them and
    /// the row before, in order: none in a page V2 wrote compact.
    breaks: Vec<usize>,
    /// The keys seen in the rows, by column number (one vector: room is
    /// made for it once), and the other way round once there are many (see
    /// [`LINEAR_COLUMNS`]).
    columns: Vec<KeyColumn<'a>>,
    by_key: HashMap<&'a [u8], u32>,
    summarised: Range<usize>,
    /// Whether some row has a key twice.
    repeats: bool,
}

impl<'a> ScannedRows<'a> {
    #[inline]
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Row `i`'s JSON text.
    #[inline]
    pub fn row(&self, i: usize) -> &'a [u8] {
        let Span { start, end } = self.rows[i];
        &self.body[start..end]
    }

    /// The JSON text of the rows `range` (not empty) with the commas
    /// between them, when they stand with only a comma between each and the
    /// next (as V2 writes a page): one part of the body, to be shared.
    pub fn text_of(&self, range: Range<usize>) -> Option<&'a [u8]> {
        let (first, last) = (
            self.rows.get(range.start)?,
            self.rows.get(range.end.checked_sub(1)?)?,
        );
        // The rows after the first with more than a comma before them.
        let from = self.breaks.partition_point(|&k| k <= range.start);
        if self.breaks.get(from).is_some_and(|&k| k < range.end) {
            return None;
        }
        self.body.get(first.start..last.end)
    }

    /// The JSON texts of the rows `range` added to `out` in runs: rows with
    /// only a comma between them in the body (as V2 writes a page) as one
    /// text, commas included, of up to [`RUN_BYTES`]; other rows one by
    /// one. The V1 page copies a run at a time.
    ///
    /// Found a run at a time (not row by row): the rows up to the next
    /// break are next to each other, and a run's last row is found from
    /// the number of rows the run before held (at first, as many as the
    /// first row's length would make: rows are much alike in length), a
    /// row at a time from there.
    pub fn runs_into(&self, range: Range<usize>, out: &mut Vec<&'a [u8]>) {
        let Range { start: mut a, end } = range;
        let mut breaks = self.breaks[self.breaks.partition_point(|&k| k <= a)..].iter();
        let mut held = match self.rows.get(a) {
            Some(row) => (RUN_BYTES / (row.end - row.start + 1)).max(1),
            None => 1,
        };
        while a < end {
            // The rows `a..next` are next to each other.
            let next = breaks.next().map_or(end, |&k| k.min(end));
            while a < next {
                let from = self.rows[a].start;
                let limit = from + RUN_BYTES;
                let mut last = (a + held - 1).min(next - 1);
                while last > a && self.rows[last].end > limit {
                    last -= 1;
                }
                while last + 1 < next && self.rows[last + 1].end <= limit {
                    last += 1;
                }
                out.push(&self.body[from..self.rows[last].end]);
                held = last + 1 - a;
                a = last + 1;
            }
        }
    }

    /// What the values of `key` held in the rows of
    /// [`ScannedRows::summarised`]; meaningless when a row [repeats](ScannedRows::repeats) a key.
    #[inline]
    pub fn summary(&self, key: &str) -> Column {
        match self.find(key.as_bytes()) {
            Some(c) => self.columns[c as usize].summary,
            None => Column::EMPTY,
        }
    }

    /// Whether some row has a key more than once (a parser keeps the last
    /// value, which the summaries do not know).
    #[inline]
    pub fn repeats(&self) -> bool {
        self.repeats
    }

    /// The rows the summaries are of: the range asked for, within the page.
    #[inline]
    pub fn summarised(&self) -> Range<usize> {
        self.summarised.clone()
    }
}

/// A key seen in the rows.
#[derive(Debug)]
struct KeyColumn<'a> {
    key: &'a [u8],
    /// `"key":`, the bytes of the key and its colon as V2 writes them when
    /// compact (the body's own bytes when it wrote them so).
    token: Cow<'a, [u8]>,
    /// What its values held in the rows of `summarised`.
    summary: Column,
}

/// Where a row is in the body.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
}

/// The longest run of rows [`ScannedRows::runs_into`] makes of rows next to
/// each other (a longer row is a run of its own). Copies of up to about
/// 2 KB are a loop of vector moves; longer ones may be made by a string
/// instruction that moves a byte at a time. A run of a few rows still
/// saves most of the copies' calls.
pub const RUN_BYTES: usize = 2048;

/// Scans a V2 result-page answer, summing up the columns of the rows in
/// `summarise` (the page's part of the V1 window); `None` when the general
/// path must read it.
pub fn scan(body: &[u8], summarise: Range<usize>) -> Option<Scan<'_>> {
    let mut s = Scanner {
        b: body,
        stack: Vec::new(),
        list: None,
    };
    let mut head = HeadReader::new();
    let end = s.object(ws(body, 0), &ENVELOPE_KEYS, |s, i, key| {
        if key != b"data" {
            return head.envelope_member(body, key, i, &mut s.stack);
        }
        // A second `data`, or one that is not an object, is not for here.
        if s.list.is_some() || body.get(i) != Some(&b'{') {
            return None;
        }
        let mut found = None;
        let end = s.object(i, &PAGE_KEYS, |s, i, key| match key {
            b"list" => {
                if found.is_some() {
                    return None;
                }
                let (rows, end) = s.rows(i, summarise.clone())?;
                found = Some((i..end, rows));
                Some(end)
            }
            b"headers" => head.headers(body, i, &mut s.stack),
            _ => {
                let end = value(body, i, &mut s.stack)?;
                head.page_member(key, &body[i..end]);
                Some(end)
            }
        })?;
        s.list = Some(found?);
        Some(end)
    })?;
    if ws(body, end) != body.len() {
        return None;
    }
    let (list, rows) = s.list?;
    Some(Scan {
        body,
        list,
        head: head.finish(),
        rows,
    })
}

/// The members of a V2 answer and of its page, as V2 writes their keys
/// (see [`Scanner::object`]).
const ENVELOPE_KEYS: [Token; 5] = Token::all([
    b"\"code\":",
    b"\"message\":",
    b"\"data\":",
    b"\"request_id\":",
    b"\"details\":",
]);
const PAGE_KEYS: [Token; 3] = Token::all([b"\"list\":", b"\"count\":", b"\"headers\":"]);

/// A position in the body after what was read; `None` for anything the
/// scanner will not decide (the general path reads the body then). The
/// readers below are functions of the bytes and a position, so the position
/// stays in a register through the row loop.
type At = Option<usize>;

struct Scanner<'a> {
    b: &'a [u8],
    /// Open arrays and objects of the value being skipped (`[` or `{`):
    /// nesting is followed without recursion, at any depth.
    stack: Vec<u8>,
    /// `data.list`'s bytes and rows, once found.
    list: Option<(Range<usize>, ScannedRows<'a>)>,
}

impl<'a> Scanner<'a> {
    /// [`values::object`], `member` given the scanner too.
    fn object(
        &mut self,
        i: usize,
        known: &[Token],
        mut member: impl FnMut(&mut Self, usize, &'a [u8]) -> At,
    ) -> At {
        let b = self.b;
        values::object(b, i, known, |at, key| member(self, at, key))
    }

    /// The rows' array at `i`: each row's text, and the columns of the rows
    /// in `summarise`. Runs of rows like the previous one are read by
    /// [`same_rows`]; this loop reads the rest.
    fn rows(&mut self, i: usize, summarise: Range<usize>) -> Option<(ScannedRows<'a>, usize)> {
        let b = self.b;
        let mut out = ScannedRows {
            body: b,
            ..ScannedRows::default()
        };
        // A page holds the rows asked of it, mostly: room for them at once
        // (bounded, as the range may be open-ended).
        out.rows.reserve(summarise.len().min(MAX_ROWS_RESERVED));
        // And for a usual row's columns, which the first row adds one by
        // one (growing each of these a few times otherwise).
        out.columns.reserve(COLUMNS_RESERVED);
        let mut order = KeyOrder::default();
        order.current.reserve(COLUMNS_RESERVED);
        let mut i = ws(b, byte(b, i, b'[')?);
        if b.get(i) == Some(&b']') {
            out.summarised = 0..0;
            return Some((out, i + 1));
        }
        loop {
            // One byte between two rows of an array is their comma.
            if let Some(before) = out.rows.last() {
                if i != before.end + 1 {
                    out.breaks.push(out.rows.len());
                }
            }
            if b.get(i) == Some(&b'{') {
                let run = same_rows(
                    b,
                    &mut out.rows,
                    &mut order.expected,
                    &out.columns,
                    i,
                    &summarise,
                    &mut self.stack,
                )?;
                i = match run {
                    Run::After(end) => end,
                    Run::Within { start, at, k } => {
                        let row = out.rows.len();
                        let noted = noted(&summarise, row);
                        let end = self.row_rest(&mut out, &mut order, at, k, noted, row)?;
                        out.rows.push(Span { start, end });
                        end
                    }
                };
            } else {
                let start = i;
                i = value(b, i, &mut self.stack)?;
                out.rows.push(Span { start, end: i });
            }
            i = ws(b, i);
            match *b.get(i)? {
                b',' => i = ws(b, i + 1),
                b']' => {
                    order.fold(&mut out);
                    let n = out.rows.len();
                    out.summarised = summarise.start.min(n)..summarise.end.min(n);
                    return Some((out, i + 1));
                }
                _ => return None,
            }
        }
    }

    /// The rest of a row object from its field `k`, once it is not the
    /// previous row's compact field `k`: at `i` is the row's `{` (`k` 0) or
    /// what follows field `k - 1`'s value. Each key read and looked up
    /// unless it is the previous row's at its place.
    #[inline(never)]
    fn row_rest(
        &mut self,
        out: &mut ScannedRows<'a>,
        order: &mut KeyOrder,
        mut i: usize,
        mut k: usize,
        noted: Notes,
        row: usize,
    ) -> At {
        let b = self.b;
        if k == 0 {
            i = ws(b, byte(b, i, b'{')?);
            if b.get(i) == Some(&b'}') {
                return Some(order.finish(out, 0, true, row, i + 1));
            }
        } else {
            i = ws(b, i);
            match *b.get(i)? {
                b',' => i = ws(b, i + 1),
                b'}' => return Some(order.finish(out, k, true, row, i + 1)),
                _ => return None,
            }
        }
        // Whether the keys so far are the previous row's first ones (then
        // `order.current` is not kept up).
        let mut same = true;
        loop {
            let known = match order.expected.get(k) {
                Some(key) if same => {
                    let token = &out.columns.get(key.column as usize)?.token;
                    let end = i + token.len();
                    (b.get(i..end) == Some(&**token)).then_some((key.column, end))
                }
                _ => None,
            };
            let column = match known {
                Some((c, at)) => {
                    i = at;
                    c
                }
                None => {
                    if same {
                        same = false;
                        order.current.clear();
                        order.current.extend_from_slice(&order.previous[..k]);
                    }
                    let (key, at) = plain_key(b, i)?;
                    // `"key":` as it stands in the body, if compact.
                    let token = b
                        .get(i..i + key.len() + 3)
                        .filter(|t| t.last() == Some(&b':'));
                    i = at;
                    out.column_of(key, token)
                }
            };
            if !same {
                order.current.push(column);
            }
            k += 1;
            // No guess at a string's length here: the places change.
            let (kind, at) = field(b, i, &mut self.stack, &mut 0)?;
            out.columns
                .get_mut(column as usize)?
                .summary
                .note_all(kind & noted);
            i = ws(b, at);
            match *b.get(i)? {
                b',' => i = ws(b, i + 1),
                b'}' => return Some(order.finish(out, k, same, row, i + 1)),
                _ => return None,
            }
        }
    }
}

/// The kinds a row's fields are noted with: all, or none for a row outside
/// the window.
fn noted(summarise: &Range<usize>, row: usize) -> Notes {
    if summarise.contains(&row) {
        SEEN | NOT_NUMBER
    } else {
        NULL
    }
}

/// Where a run of rows like the previous one stopped.
enum Run {
    /// After a row's `}` that is not followed by `,{`.
    After(usize),
    /// In the row that starts at `start`: its first `k` fields are the
    /// previous row's, read up to `at`; the rest is not.
    Within { start: usize, at: usize, k: usize },
}

/// Rows from `i` (a row's `{`) whose fields are the previous row's at their
/// places (`fields`), compact, one after another: each row's text pushed
/// onto `rows`, the kinds of its values noted at their places; where the
/// run stopped. The page's hottest loop, not inlined so that its few values
/// stay in registers.
#[inline(never)]
fn same_rows(
    b: &[u8],
    rows: &mut Vec<Span>,
    fields: &mut [Key],
    columns: &[KeyColumn],
    mut i: usize,
    summarise: &Range<usize>,
    stack: &mut Vec<u8>,
) -> Option<Run> {
    let n = fields.len();
    loop {
        let start = i;
        let noted = noted(summarise, rows.len());
        let mut rest = fields.iter_mut();
        while let Some(key) = rest.next() {
            let Some(at) = key.after(b, i, columns) else {
                let k = n - rest.len() - 1;
                return Some(Run::Within { start, at: i, k });
            };
            let (kind, end) = field(b, at, stack, &mut key.hint)?;
            key.notes |= kind & noted;
            i = end;
        }
        // The row's end, and the next row's start straight after it.
        if b.get(i..i + 3) == Some(b"},{") {
            rows.push(Span { start, end: i + 1 });
            i += 2;
            continue;
        }
        if b.get(i) != Some(&b'}') {
            return Some(Run::Within { start, at: i, k: n });
        }
        rows.push(Span { start, end: i + 1 });
        return Some(Run::After(i + 1));
    }
}

/// Rows reserved for at most, before any is read.
const MAX_ROWS_RESERVED: usize = 1024;

/// Columns room is made for at once: more than a usual row has.
const COLUMNS_RESERVED: usize = 16;

/// The key order of the rows read so far, and the fields a row is first
/// compared with (see the module doc).
#[derive(Default)]
struct KeyOrder {
    /// The columns of the previous row, in its order.
    previous: Vec<u32>,
    /// The columns of the row being read, once it differs from the previous.
    current: Vec<u32>,
    /// By column: the row it was last seen in (plus one), to notice a key
    /// repeated within a row of many keys.
    last_row: Vec<u32>,
    /// `previous`, as what a row's fields are compared with.
    expected: Vec<Key>,
}

impl KeyOrder {
    /// A row read with `k` fields (the previous row's first `k` keys in
    /// order when `same`), ending at `end`: a row with the previous row's
    /// keys repeats a key only if that one did; any other is checked, and
    /// its keys become the ones the next row is compared with.
    #[inline(never)]
    fn finish(
        &mut self,
        out: &mut ScannedRows,
        k: usize,
        same: bool,
        row: usize,
        end: usize,
    ) -> usize {
        if same && k == self.previous.len() {
            return end;
        }
        if same {
            self.current.clear();
            self.current.extend_from_slice(&self.previous[..k]);
        }
        if self.current.len() <= LINEAR_COLUMNS {
            // A few keys are compared with each other (no table to make).
            let keys = &self.current;
            out.repeats |= (1..keys.len()).any(|j| keys[..j].contains(&keys[j]));
        } else {
            self.last_row.resize(out.columns.len(), 0);
            let stamp = row as u32 + 1;
            for &c in &self.current {
                if std::mem::replace(&mut self.last_row[c as usize], stamp) == stamp {
                    out.repeats = true;
                }
            }
        }
        std::mem::swap(&mut self.previous, &mut self.current);
        self.fold(out);
        self.expected.clear();
        self.expected.extend(
            self.previous
                .iter()
                .enumerate()
                .map(|(at, &c)| Key::new(at == 0, &out.columns[c as usize].token, c)),
        );
        end
    }

    /// The kinds noted at the places of `expected` added to their columns'
    /// summaries (before the places change, and once the rows are read).
    fn fold(&mut self, out: &mut ScannedRows) {
        for key in &mut self.expected {
            if let Some(column) = out.columns.get_mut(key.column as usize) {
                column.summary.note_all(std::mem::take(&mut key.notes));
            }
        }
    }
}

/// Up to this many columns, a key is looked up by comparing it with each;
/// beyond, through a hash map (a page of many distinct keys stays linear).
const LINEAR_COLUMNS: usize = 32;

impl<'a> ScannedRows<'a> {
    /// A key's column, if it has one.
    fn find(&self, key: &[u8]) -> Option<u32> {
        if self.columns.len() <= LINEAR_COLUMNS {
            self.columns
                .iter()
                .position(|c| c.key == key)
                .map(|c| c as u32)
        } else {
            self.by_key.get(key).copied()
        }
    }

    /// The column of a row key read in full (not matched by its token);
    /// `compact`, its `"key":` in the body when written so.
    fn column_of(&mut self, key: &'a [u8], compact: Option<&'a [u8]>) -> u32 {
        if let Some(c) = self.find(key) {
            return c;
        }
        let next = self.columns.len() as u32;
        let token = match compact {
            Some(token) => Cow::Borrowed(token),
            None => {
                let mut token = Vec::with_capacity(key.len() + 3);
                token.push(b'"');
                token.extend_from_slice(key);
                token.extend_from_slice(b"\":");
                Cow::Owned(token)
            }
        };
        self.columns.push(KeyColumn {
            key,
            token,
            summary: Column::EMPTY,
        });
        if self.columns.len() > LINEAR_COLUMNS {
            if self.by_key.is_empty() {
                self.by_key = self
                    .columns
                    .iter()
                    .zip(0..)
                    .map(|(c, n)| (c.key, n))
                    .collect();
            } else {
                self.by_key.insert(key, next);
            }
        }
        next
    }
}

/// A field expected at its place in a row, and the kinds its values had
/// there so far. It is matched as the bytes that start it when compact: the
/// row's `{` (the first field) or the `,` after the previous value, then
/// the column's token (`"key":`). The first [`WINDOW`] of those bytes are
/// kept as masked words, compared sixteen bytes at a time (the second
/// sixteen only for a longer start); key tokens are short, and a library
/// call costs more than these comparisons.
#[derive(Debug, Clone, Copy)]
struct Key {
    /// The start's bytes, eight to a word, zero beyond its length.
    words: [u64; 4],
    /// The bytes of each word that are the start's.
    masks: [u64; 4],
    len: usize,
    column: u32,
    /// The kinds of the values at this place, or-ed (see [`Notes`]).
    notes: Notes,
    /// The length of the last string at this place (the bytes between its
    /// quotes): where [`field`] looks for the next one's end first.
    hint: u32,
}

/// The bytes of a field's start compared as words.
const WINDOW: usize = 32;

impl Key {
    fn new(first: bool, token: &[u8], column: u32) -> Key {
        // The separator, then as much of the token as the words hold.
        let held = (token.len() + 1).min(WINDOW);
        let mut bytes = [0; WINDOW];
        bytes[0] = if first { b'{' } else { b',' };
        bytes[1..held].copy_from_slice(&token[..held - 1]);
        let word = |w: usize| {
            let mut word = [0; 8];
            word.copy_from_slice(&bytes[8 * w..8 * w + 8]);
            u64::from_le_bytes(word)
        };
        // The bytes of word `w` that are the start's: all, the first few,
        // or none.
        let mask = |w: usize| match held.saturating_sub(8 * w) {
            8.. => u64::MAX,
            n => (1 << (8 * n)) - 1,
        };
        Key {
            words: std::array::from_fn(word),
            masks: std::array::from_fn(mask),
            len: token.len() + 1,
            column,
            notes: NULL,
            hint: 0,
        }
    }

    /// Where the value starts when `b` holds this field's start at `i`
    /// (`columns`, for the token of a key longer than the words hold).
    #[inline(always)]
    fn after(&self, b: &[u8], i: usize, columns: &[KeyColumn]) -> At {
        // A field within a window of the body's end (the last row of a
        // page is followed by the rest of the answer) is left to the
        // general reading.
        let window = b.get(i..)?.first_chunk::<WINDOW>()?;
        let word = |w: usize| {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(&window[8 * w..8 * w + 8]);
            (u64::from_le_bytes(bytes) ^ self.words[w]) & self.masks[w]
        };
        if word(0) | word(1) != 0 {
            return None;
        }
        let n = self.len;
        if n > 16 {
            if word(2) | word(3) != 0 {
                return None;
            }
            if n > WINDOW && b.get(i + 1..i + n)? != &*columns.get(self.column as usize)?.token {
                return None;
            }
        }
        Some(i + n)
    }
}

#[cfg(test)]
mod tests {
    use super::gen::{self, *};
    use super::*;
    use crate::v2::V2ResultPage;
    use crate::wire::{IntLike, OrDefault};
    use proptest::prelude::*;
    use serde::Deserialize;
    use serde_json::value::RawValue;

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

    fn offset(body: &str, part: &[u8]) -> usize {
        part.as_ptr() as usize - body.as_ptr() as usize
    }

    /// The scanner's claims, checked with serde: the body is valid JSON, the
    /// rows are serde's raw rows at the same places, the columns of the rows
    /// in `summarise` hold what serde reads, the skeleton is the body
    /// without its rows.
    fn check_range(body: &str, summarise: Range<usize>) -> Option<()> {
        let scan = scan(body.as_bytes(), summarise.clone())?;
        let answer: gen::Answer = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("scanner accepted what serde refuses ({e}): {body}"));
        let list = answer.data.list.get();
        let raw: Vec<&RawValue> = serde_json::from_str(list).unwrap();
        assert_eq!(scan.rows.len(), raw.len(), "{body}");
        let n = raw.len();
        assert_eq!(
            scan.rows.summarised(),
            summarise.start.min(n)..summarise.end.min(n)
        );
        let mut expect: HashMap<String, Column> = HashMap::new();
        let mut repeats = false;
        for (i, r) in raw.iter().enumerate() {
            let text = std::str::from_utf8(scan.rows.row(i)).unwrap();
            assert_eq!(text, r.get(), "{body}");
            assert_eq!(
                offset(body, text.as_bytes()),
                offset(body, r.get().as_bytes()),
                "{body}"
            );
            if !text.starts_with('{') {
                continue;
            }
            let Fields(fields) = serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("scanned row serde cannot read ({e}): {text}"));
            let keys: std::collections::HashSet<&String> = fields.iter().map(|(k, _)| k).collect();
            repeats |= keys.len() < fields.len();
            for (key, kind) in &fields {
                let column = expect.entry(key.clone()).or_insert(Column::EMPTY);
                if summarise.contains(&i) {
                    column.note(*kind);
                }
            }
        }
        assert_eq!(scan.rows.repeats(), repeats, "{body}");
        if !repeats {
            for (key, column) in &expect {
                assert_eq!(scan.rows.summary(key), *column, "{key}: {body}");
            }
            assert_eq!(scan.rows.summary("no such key"), Column::EMPTY);
        }
        // The rows' runs, over any range: each is rows with only commas
        // between them in the body, one row or at most RUN_BYTES long, and
        // a run ends where the next row could not join it.
        for from in 0..=n.min(3) {
            for to in [from, from + 1, n / 2, n]
                .into_iter()
                .filter(|&to| from <= to && to <= n)
            {
                // The rows' text as one part of the body, when it is one.
                if from < to {
                    let start = offset(body, raw[from].get().as_bytes());
                    let last = raw[to - 1].get();
                    let text = &body.as_bytes()[start..offset(body, last.as_bytes()) + last.len()];
                    let joined: Vec<&str> = raw[from..to].iter().map(|r| r.get()).collect();
                    let whole = text == joined.join(",").as_bytes();
                    assert_eq!(scan.rows.text_of(from..to), whole.then_some(text), "{body}");
                }
                let mut runs = Vec::new();
                scan.rows.runs_into(from..to, &mut runs);
                let rows: Vec<&str> = raw[from..to].iter().map(|r| r.get()).collect();
                assert_eq!(runs.join(&b","[..]), rows.join(",").into_bytes(), "{body}");
                let mut next = from;
                for run in &runs {
                    let at = offset(body, run);
                    assert_eq!(at, offset(body, raw[next].get().as_bytes()), "{body}");
                    // The rows the run holds, its text theirs with commas.
                    let (mut len, mut count) = (raw[next].get().len(), 1);
                    while len < run.len() {
                        len += 1 + raw[next + count].get().len();
                        count += 1;
                    }
                    assert_eq!(len, run.len(), "{body}");
                    assert!(count == 1 || run.len() <= RUN_BYTES, "{body}");
                    next += count;
                    // The next row would have joined the run if it could.
                    if next < to {
                        let after = offset(body, raw[next].get().as_bytes());
                        let joins = after == at + run.len() + 1
                            && run.len() + 1 + raw[next].get().len() <= RUN_BYTES;
                        assert!(!joins, "{body}");
                    }
                }
                assert_eq!(next, to, "{body}");
            }
        }
        let start = offset(body, list.as_bytes());
        let expect = format!("{}[]{}", &body[..start], &body[start + list.len()..]);
        assert_eq!(scan.skeleton().as_deref(), Some(&*expect));
        check_head(&scan, &expect, body);
        Some(())
    }

    fn check(body: &str) -> Option<()> {
        check_range(body, 0..usize::MAX)
    }

    /// A head read by the scanner is what serde's typed reading of the
    /// skeleton gives (which must then read it).
    fn check_head(scan: &Scan, skeleton: &str, body: &str) {
        let Some(head) = &scan.head else {
            return;
        };
        let typed: crate::v2::DataEnvelope<OrDefault<V2ResultPage>> =
            serde_json::from_str(skeleton)
                .unwrap_or_else(|e| panic!("head read where serde refuses ({e}): {body}"));
        assert_eq!(head.code, typed.code, "{body}");
        assert_eq!(
            head.request_id,
            typed.request_id.as_ref().map(|t| &*t.0),
            "{body}"
        );
        let page = typed.data.map(|p| p.0).unwrap_or_default();
        assert_eq!(head.page.count, page.count, "{body}");
        let fields = |p: &V2ResultPage| -> Vec<[Option<String>; 3]> {
            p.headers
                .0
                .iter()
                .map(|h| {
                    [&h.0.key, &h.0.label, &h.0.format].map(|f| f.0.as_deref().map(str::to_owned))
                })
                .collect()
        };
        assert_eq!(fields(&head.page), fields(&page), "{body}");
        // Borrowed from the body, as serde's reading borrows.
        for h in &head.page.headers.0 {
            for f in [&h.0.key, &h.0.label, &h.0.format] {
                assert!(matches!(f.0, None | Some(Cow::Borrowed(_))), "{body}");
            }
        }
    }

    #[test]
    fn a_plain_page_is_scanned() {
        let body = r#"{"code":0,"message":"success","data":{"count":3,"headers":[{"key":"a"}],
            "list":[ {"a": 1.5e3, "b": "x\"y\u00e9", "c": {"a": "deep"}} , [1,{}], {"a":null,"b":2}],
            "page_index":1},"request_id":"r"}"#;
        let scan = scan(body.as_bytes(), 0..3).unwrap();
        assert_eq!(scan.rows.len(), 3);
        assert_eq!(scan.rows.row(1), b"[1,{}]");
        let number = Column {
            seen: true,
            numbers_only: true,
        };
        let text = Column {
            seen: true,
            numbers_only: false,
        };
        assert!(!scan.rows.repeats());
        assert_eq!(scan.rows.summary("a"), number);
        assert_eq!(scan.rows.summary("b"), text);
        assert_eq!(scan.rows.summary("c"), text);
        assert_eq!(scan.rows.summary("d"), Column::EMPTY);
        assert!(scan.skeleton().unwrap().contains(r#""list":[],"#));
        assert!(scan.head.is_some());
        check(body).unwrap();
        // Only the rows asked for are summed up.
        let scan = super::scan(body.as_bytes(), 1..3).unwrap();
        assert_eq!(scan.rows.summarised(), 1..3);
        assert_eq!(scan.rows.summary("b"), number);
        // A key twice in a row is noticed (the formats are then left to serde).
        let twice = body.replace(r#"{"a":null,"b":2}"#, r#"{"a":null,"b":2,"a":1}"#);
        assert!(super::scan(twice.as_bytes(), 0..3).unwrap().rows.repeats());
        check(&twice).unwrap();
    }

    #[test]
    fn the_head_is_read_as_serde_reads_it_or_left_to_serde() {
        let answer =
            |top: &str, page: &str| format!(r#"{{{top}"data":{{{page}"list":[{{"a":1}}]}}}}"#);
        fn head(body: &str) -> Option<Head<'_>> {
            check(body).unwrap();
            scan(body.as_bytes(), 0..1).unwrap().head
        }
        let plain = answer(
            r#""code":0,"message":"success","request_id":"r-1","details":{"x":[1]},"#,
            r#""count":2600,"headers":[{"key":"a","label":"A"},{"key":"b","label":"B","format":"date","x":{}}],"#,
        );
        let read = head(&plain).unwrap();
        assert_eq!((read.code, read.request_id), (Some(0), Some("r-1")));
        assert_eq!(read.page.count, IntLike(Some(2600)));
        assert_eq!(read.page.headers.0.len(), 2);
        assert_eq!(read.page.headers.0[1].0.format.0.as_deref(), Some("date"));
        // Read here: nulls, a code other than 0, members absent, headers of
        // any kind of item and fields that are not strings.
        for sure in [
            answer(
                r#""code":null,"message":null,"request_id":null,"#,
                r#""count":null,"#,
            ),
            answer(r#""code":-40001,"#, r#""headers":[],"#),
            answer("", ""),
            answer(
                r#""code":0,"#,
                r#""headers":[1,"x",null,[{}],{},{"key":5,"label":{"a":"b"},"format":["c"]}],"#,
            ),
            answer(
                r#""other":1,"other":2,"#,
                r#""page_index":1,"page_index":2,"#,
            ),
        ] {
            assert!(head(&sure).is_some(), "{sure}");
        }
        // Left to serde: what the typed reading refuses (a member twice, a
        // code or message of another kind) or reads otherwise (escapes, a
        // count that is a float or a string, headers that are not an array).
        for unsure in [
            answer(r#""code":0,"code":0,"#, ""),
            answer(r#""request_id":"a","request_id":"a","#, ""),
            answer(r#""details":1,"details":1,"#, ""),
            answer("", r#""count":1,"count":1,"#),
            answer("", r#""headers":[],"headers":[],"#),
            answer(r#""code":"0","#, ""),
            answer(r#""code":0.0,"#, ""),
            answer(r#""code":-0,"#, ""),
            answer(r#""code":9223372036854775808,"#, ""),
            answer(r#""message":5,"#, ""),
            answer(r#""request_id":"r\u002d1","#, ""),
            answer(r#""request_id":5,"#, ""),
            answer("", r#""count":"12","#),
            answer("", r#""count":1.5,"#),
            answer("", r#""headers":null,"#),
            answer("", r#""headers":[{"key":"a","key":"b"}],"#),
            answer("", r#""headers":[{"key":"a\u0062"}],"#),
            answer("", r#""headers":[{"\u006bey":"a"}],"#),
        ] {
            assert!(head(&unsure).is_none(), "{unsure}");
        }
    }

    #[test]
    fn what_the_scanner_leaves_to_serde() {
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
            assert!(scan(refused.as_bytes(), 0..1).is_none(), "{refused}");
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
        // A number serde's `Value` cannot hold is refused wherever it stands,
        // not only in a row's field: the general path would refuse the body.
        for out_of_range in [
            r#"{"code":0,"data":{"count":1,"list":[{"a":1}],"x":2020000E800010},"request_id":"r"}"#,
            r#"{"code":0,"data":{"count":1,"list":[{"a":1}]},"x":[1e400],"request_id":"r"}"#,
            &page(r#"[{"a": {"deep": [-1e309]}}]"#),
            &page(&format!(r#"[{{"a": [{}]}}]"#, "9".repeat(400))),
        ] {
            assert!(serde_json::from_str::<serde_json::Value>(out_of_range).is_err());
            assert!(
                scan(out_of_range.as_bytes(), 0..1).is_none(),
                "{out_of_range}"
            );
        }
    }

    fn page(list: &str) -> String {
        format!(r#"{{"code":0,"data":{{"count":1,"list":{list}}},"request_id":"r"}}"#)
    }

    /// [`page`] with the `@` in `list` replaced by `bytes` (which need not
    /// be UTF-8).
    fn page_with(list: &str, bytes: &[u8]) -> Vec<u8> {
        let mut body = page(list).into_bytes();
        let at = body.iter().position(|&c| c == b'@').unwrap();
        body.splice(at..at + 1, bytes.iter().copied());
        body
    }

    /// Rows with only a comma between them are copied as one run, up to
    /// [`RUN_BYTES`]; whitespace or a row that would make the run longer
    /// starts another. Joined by commas, the runs are the rows.
    #[test]
    fn runs_are_rows_next_to_each_other() {
        let long = format!(r#"{{"a":"{}"}}"#, "x".repeat(RUN_BYTES - 12));
        assert_eq!(long.len(), RUN_BYTES - 4);
        let rows = [
            r#"{"a":1}"#,
            "[2]",
            "3",
            r#""4""#,
            &long,
            "{}",
            "null",
            "[]",
        ];
        let list = format!(
            "[{},{},{} ,{},{},{},{},{}]",
            rows[0], rows[1], rows[2], rows[3], rows[4], rows[5], rows[6], rows[7]
        );
        let body = page(&list);
        let scan = scan(body.as_bytes(), 0..0).unwrap();
        let runs = |range: Range<usize>| {
            let mut out = Vec::new();
            scan.rows.runs_into(range.clone(), &mut out);
            assert_eq!(out.join(&b","[..]), rows[range].join(",").into_bytes());
            out.iter()
                .map(|r| std::str::from_utf8(r).unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        // The long row fits after "4" (RUN_BYTES with its comma), "{}" not
        // after them.
        assert_eq!(
            runs(0..8),
            [
                r#"{"a":1},[2],3"#.to_owned(),
                format!(r#""4",{long}"#),
                "{},null,[]".into()
            ]
        );
        assert_eq!(runs(1..2), ["[2]"]);
        assert_eq!(runs(2..5), ["3".to_owned(), format!(r#""4",{long}"#)]);
        assert!(runs(3..3).is_empty());
        // Many rows next to each other, and some apart: runs of the most
        // rows that fit (checked by `check_range`, over several ranges).
        let rows: Vec<String> = (0..600)
            .map(|i| format!(r#"{{"a":{i},"b":"{}"}}"#, "x".repeat(i % 7)))
            .collect();
        check(&page(&format!("[{}]", rows.join(",")))).unwrap();
        check(&page(&format!("[{}]", rows.join(", ")))).unwrap();
        let some_apart = rows.chunks(50).map(|c| c.join(",")).collect::<Vec<_>>();
        check(&page(&format!("[{}]", some_apart.join(" ,")))).unwrap();
    }

    /// Escapes, quotes, control characters and non-ASCII text at every
    /// place of a string up to past two of the scanner's 16-byte steps, in a
    /// key and in a value: accepted exactly when serde accepts, and read alike.
    #[test]
    fn string_ends_at_every_offset_agree_with_serde() {
        let specials = [
            r#"\""#,
            r"\\",
            r"\n",
            r"\u00e9",
            r"\ud83d\ude00",
            r"\ud800",
            "\u{1}",
            "\t",
            "\u{1f}",
            "\u{7f}",
            "é",
            "😀",
            "\"",
        ];
        for len in 0..40 {
            for at in 0..=len {
                for special in specials {
                    let mut text = "x".repeat(len);
                    text.insert_str(at, special);
                    for list in [
                        format!(r#"[{{"a":"{text}","b":1}},{{"a":"{text}","b":"{text}"}}]"#),
                        format!(r#"[{{"{text}":1}},{{"{text}":2,"b":null}}]"#),
                    ] {
                        let body = page(&list);
                        let valid = serde_json::from_str::<serde::de::IgnoredAny>(&body).is_ok();
                        let scanned = check(&body).is_some();
                        assert!(valid || !scanned, "{body}");
                    }
                }
            }
        }
        // Plain text of any length is scanned.
        for len in 0..70 {
            let text = "é".repeat(len % 3) + &"y".repeat(len);
            assert!(check(&page(&format!(r#"[{{"a":"{text}"}},{{"a":"{text}"}}]"#))).is_some());
        }
    }

    /// A string at a place where the previous row's was `len` bytes long:
    /// the scanner looks for its end there first. Escapes, quotes, control
    /// characters and text that is not ASCII at every place of it, with its
    /// closing quote at the guess and past it, up to past four of the
    /// 16-byte steps: accepted exactly when serde accepts, and read alike.
    #[test]
    fn strings_as_long_as_the_previous_rows_agree_with_serde() {
        let specials = [
            r#"\""#, r"\\", r"\u00e9", "\u{1}", "\u{1f}", "é", "😀", "\"", "x",
        ];
        let lens = (0..=40).chain([47, 48, 49, 63, 64, 65, 70]);
        for len in lens {
            let first = "y".repeat(len);
            for at in 0..=len {
                for special in specials {
                    let mut longer = "x".repeat(len);
                    longer.insert_str(at, special);
                    // As many bytes as the guess, where the special fits.
                    let mut same = "x".repeat(len.saturating_sub(special.len()));
                    same.insert_str(at.min(same.len()), special);
                    for text in [longer, same] {
                        // The first row is read key by key; the second leaves
                        // its length as the guess for the third.
                        for list in [
                            format!(
                                r#"[{{"a":"{first}","b":1}},{{"a":"{first}","b":2}},{{"a":"{text}","b":3}}]"#
                            ),
                            format!(
                                r#"[{{"a":"{first}"}},{{"a":"{first}"}},{{"a":"{text}"}},{{"a":"{first}"}}]"#
                            ),
                        ] {
                            let body = page(&list);
                            let valid =
                                serde_json::from_str::<serde::de::IgnoredAny>(&body).is_ok();
                            let scanned = check(&body).is_some();
                            assert!(valid || !scanned, "{body}");
                            if !text.contains(['"', '\\', '\u{1}', '\u{1f}']) {
                                assert!(scanned, "{body}");
                            }
                        }
                    }
                }
            }
        }
    }

    /// Bytes that are not UTF-8 anywhere in a string, whether its length is
    /// the previous row's at its place or not, in a value and in a key: the
    /// body is refused, as the general path refuses it.
    #[test]
    fn bytes_that_are_not_utf8_are_refused_wherever_they_stand() {
        let bad: [&[u8]; 6] = [
            b"\xff",
            b"\x80",
            b"\xc3",
            b"\xc0\xaf",
            b"\xed\xa0\x80",
            b"\xf0\x9f\x98",
        ];
        for len in (0..=34).chain([63, 64, 65]) {
            for at in 0..=len {
                for bad in bad {
                    for guessed in [true, false] {
                        let mut text = b"x".repeat(len);
                        if guessed {
                            text.truncate(len.saturating_sub(bad.len()));
                        }
                        let at = at.min(text.len());
                        text.splice(at..at, bad.iter().copied());
                        let first = "y".repeat(len);
                        for (before, after) in [
                            (
                                format!(r#"[{{"a":"{first}"}},{{"a":"{first}"}},{{"a":""#),
                                r#""}]"#,
                            ),
                            (format!(r#"[{{"{first}":1}},{{""#), r#"":1}]"#),
                        ] {
                            let body = page_with(&format!("{before}@{after}"), &text);
                            assert!(std::str::from_utf8(&body).is_err());
                            assert!(scan(&body, 0..3).is_none(), "{body:?}");
                        }
                    }
                }
            }
        }
    }

    /// serde_json reads an object whose first key is its raw-value token
    /// as the JSON text of that key's value (or refuses it), so the scanner
    /// refuses the token as a key anywhere: the envelope, `data`, a row
    /// (first or later), a value nested in a row or in the envelope, and
    /// written with an escape. Found by the `result_scan` fuzz target.
    #[test]
    fn serde_json_raw_value_key_is_left_to_serde() {
        let token = "$serde_json::private::RawValue";
        let escaped = r"\u0024serde_json::private::RawValue";
        let rows = |first: &str| format!(r#"[{{{first},"a":1}},{{"a":2}}]"#);
        let bodies = [
            format!(r#"{{"{token}":"1","code":0,"data":{{"list":[]}}}}"#),
            format!(r#"{{"code":0,"data":{{"{token}":"2","list":[]}}}}"#),
            page(&rows(&format!(r#""{token}":"3""#))),
            page(&format!(r#"[{{"a":1}},{{"a":1,"{token}":"4"}}]"#)),
            page(&rows(&format!(r#""n":{{"{token}":"5"}}"#))),
            page(&rows(&format!(r#""n":[{{"{escaped}":"6"}}]"#))),
            format!(r#"{{"code":0,"data":{{"headers":[{{"{token}":"7"}}],"list":[{{"a":1}}]}}}}"#),
        ];
        for body in bodies {
            assert!(scan(body.as_bytes(), 0..10).is_none(), "{body}");
        }
        // The same bodies with a key one letter off are read.
        let near = page(&rows(r#""n":{"$serde_json::private::RawValuf":"5"}"#));
        assert!(scan(near.as_bytes(), 0..10).is_some(), "{near}");
        // What the general path makes of the token: the value's text.
        let read: serde_json::Value =
            serde_json::from_str(&format!(r#"{{"{token}":"[1]"}}"#)).unwrap();
        assert_eq!(read, serde_json::json!([1]));
    }

    /// Integers the row loop reads without a call (up to 17 digits), and
    /// what it leaves to the general reading (a sign, a leading zero, a
    /// fraction, an exponent, more digits, a number cut short): accepted
    /// exactly when serde accepts, with the same kinds.
    #[test]
    fn plain_integers_agree_with_serde() {
        let numbers = [
            "0",
            "7",
            "-7",
            "-0",
            "01",
            "00",
            "10",
            "1234567890123456",
            "12345678901234567",
            "123456789012345678",
            "99999999999999999999999",
            "1.5",
            "1.",
            "1e5",
            "1E+2",
            "1e",
            "-",
            "--1",
            "1-",
            "1x",
            "9.9e999",
        ];
        for n in numbers {
            for list in [
                format!(r#"[{{"a":{n}}},{{"a":{n},"b":{n}}}]"#),
                format!(r#"[{{"a":"t"}},{{"a":{n} }},{{"a":{n}}}]"#),
                format!(r#"[{{"a":{n}"#),
            ] {
                let body = page(&list);
                let valid = serde_json::from_str::<serde::de::IgnoredAny>(&body).is_ok();
                let scanned = check(&body).is_some();
                assert!(valid || !scanned, "{body}");
                if valid && !n.contains('e') {
                    assert!(scanned, "{body}");
                }
            }
        }
    }

    /// Integers of every length (the row loop reads eight digits at a time)
    /// followed by every kind of byte (`/` and `:` are either side of the
    /// digits), and cut short by the body's end: accepted exactly when serde
    /// accepts, with the same kinds.
    #[test]
    fn integers_of_every_length_agree_with_serde() {
        for len in 1..=20 {
            let digits: String = (0..len).map(|k| char::from(b'1' + k % 9)).collect();
            for next in ["", " ", ".5", "e1", "x", "/", ":", "0", "é", "\"", ",", "]"] {
                for list in [
                    format!(r#"[{{"a":{digits}{next},"b":1}},{{"a":{digits}{next}}}]"#),
                    format!(r#"[{{"a":"t"}},{{"a":{digits}{next}}}]"#),
                ] {
                    let body = page(&list);
                    let valid = serde_json::from_str::<serde::de::IgnoredAny>(&body).is_ok();
                    assert_eq!(check(&body).is_some(), valid, "{body}");
                }
                let cut = format!(r#"{{"code":0,"data":{{"list":[{{"a":{digits}{next}"#);
                assert!(scan(cut.as_bytes(), 0..1).is_none(), "{cut}");
            }
        }
    }

    /// A column's notes: a null changes nothing, a number is seen, anything
    /// else is seen and not a number.
    #[test]
    fn notes_by_kind() {
        let noted = |kinds: &[Kind]| {
            let mut c = Column::EMPTY;
            kinds.iter().for_each(|k| c.note(*k));
            c
        };
        assert_eq!(noted(&[Kind::Null]), Column::EMPTY);
        assert_eq!(
            noted(&[Kind::Null, Kind::Number]),
            Column {
                seen: true,
                numbers_only: true
            }
        );
        assert_eq!(
            noted(&[Kind::Other, Kind::Null]),
            Column {
                seen: true,
                numbers_only: false
            }
        );
        assert_eq!(
            noted(&[Kind::Number, Kind::Other, Kind::Number]).format(),
            "text"
        );
        assert_eq!(noted(&[Kind::Number, Kind::Null]).format(), "number");
    }

    /// A body that is not UTF-8 (a byte of a character cut or out of place,
    /// in a string or not) is refused, as the general path's reading does.
    #[test]
    fn invalid_utf8_is_refused() {
        for bad in [
            &b"\xff"[..],
            b"\xc3",
            b"\xe9t",
            b"\xed\xa0\x80",
            b"\xf0\x9f\x98",
        ] {
            for list in [r#"[{"a":"x@y"}]"#, r#"[{"x@y":1}]"#, r#"[{"a":1}]@"#] {
                let body = page_with(list, bad);
                assert!(std::str::from_utf8(&body).is_err());
                assert!(scan(&body, 0..1).is_none(), "{body:?}");
            }
        }
    }

    /// Keys of every length (compared eight bytes at a time when they repeat
    /// at their place), rows whose order changes, keys that start alike, and
    /// pages with more columns than are looked up one by one.
    #[test]
    fn key_orders_and_many_columns_agree_with_serde() {
        for len in 0..40 {
            let k = "k".repeat(len);
            let kk = format!("{k}k");
            let list = format!(
                r#"[{{"{k}":1,"{kk}":"t"}},{{"{k}":2,"{kk}":3}},{{"{kk}":null,"{k}":"x"}},{{"{k}":1}},{{"{k}":1,"{kk}":2,"{k}":3}},{{"{k}" :1, "{kk}":2}}]"#
            );
            check(&page(&list)).unwrap();
            check_range(&page(&list), 1..3).unwrap();
        }
        // Keys alike in the bytes compared as words, told apart after them.
        for len in [30, 31, 32, 40] {
            let k = "k".repeat(len);
            let list = format!(
                r#"[{{"{k}a":1,"{k}b":"t"}},{{"{k}b":"u","{k}a":3}},{{"{k}b":"v","{k}a":4}},{{"{k}a":5,"{k}b":6}}]"#
            );
            check(&page(&list)).unwrap();
        }
        for columns in [LINEAR_COLUMNS - 1, LINEAR_COLUMNS, LINEAR_COLUMNS + 1, 100] {
            let row = |order: &mut dyn Iterator<Item = usize>, skip: usize| {
                let fields: Vec<String> = order
                    .filter(|c| *c != skip)
                    .map(|c| {
                        if c % 3 == 0 {
                            format!(r#""c{c}":"{c}""#)
                        } else {
                            format!(r#""c{c}":{c}"#)
                        }
                    })
                    .collect();
                format!("{{{}}}", fields.join(","))
            };
            let rows = [
                row(&mut (0..columns), usize::MAX),
                row(&mut (0..columns).rev(), 5),
                row(&mut (0..columns), 0),
                row(&mut (0..columns).chain([7]), usize::MAX),
            ];
            let body = page(&format!("[{}]", rows[..3].join(",")));
            check(&body).unwrap();
            let scan = scan(body.as_bytes(), 0..3).unwrap();
            assert!(!scan.rows.repeats());
            assert_eq!(scan.rows.summary("c3").format(), "text");
            assert_eq!(scan.rows.summary("c4").format(), "number");
            assert!(scan.rows.summary(&format!("c{}", columns - 1)).seen);
            assert!(!scan.rows.summary("c").seen);
            check(&page(&format!("[{}]", rows.join(",")))).unwrap();
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Over generated answers of any shape: whatever the scanner
        /// accepts, serde reads the same way.
        #[test]
        fn the_scanner_agrees_with_serde((body, n) in answer(), from in 0..8usize, len in 0..10usize) {
            check(&body);
            check_range(&body, from.min(n)..from + len);
        }

        /// An answer with a byte changed, dropped or added: the scanner
        /// never accepts what serde refuses, and agrees on what it accepts.
        #[test]
        fn damaged_answers_are_never_taken_for_valid(
            (body, _) in answer(),
            at in any::<prop::sample::Index>(),
            byte in prop::sample::select(&b"{}[],:\"\\ 0-e.tnx\x01\x80\xa9\xc3\xff"[..]),
            how in 0..3u8,
        ) {
            let mut bytes = body.into_bytes();
            let i = at.index(bytes.len() + 1);
            match how {
                0 if i < bytes.len() => bytes[i] = byte,
                1 if i < bytes.len() => { bytes.remove(i); }
                _ => bytes.insert(i, byte),
            }
            if let Some(scan) = scan(&bytes, 0..usize::MAX) {
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
            render(&rows, &mut Ws::seeded(seed), &mut body);
            body.push_str(r#"},"request_id":"r"}"#);
            prop_assert!(check(&body).is_some(), "{}", body);
            prop_assert!(scan(body.as_bytes(), 0..1).unwrap().head.is_some(), "{}", body);
        }

        /// Rows alike, as V2 writes them (the same keys in the same order,
        /// compact), with values of every kind and strings often as long as
        /// the previous row's: whatever the scanner accepts, serde reads the
        /// same way, over any window of the rows.
        #[test]
        fn alike_rows_agree_with_serde(
            keys in prop::collection::vec(prop::sample::select(HEADER_KEYS), 1..5),
            rows in prop::collection::vec(prop::collection::vec(alike_value(), 5), 1..16),
            from in 0..16usize,
            len in 0..16usize,
        ) {
            let rows = J::Arr(rows.into_iter().map(|values| J::Obj(
                keys.iter().zip(values).map(|(k, v)| (format!("\"{k}\""), v)).collect()
            )).collect());
            let mut body = String::from(r#"{"code":0,"message":"success","data":{"count":1,"list":"#);
            render(&rows, &mut Ws::none(), &mut body);
            body.push_str(r#"},"request_id":"r"}"#);
            check(&body);
            check_range(&body, from..from + len);
        }
    }
}
