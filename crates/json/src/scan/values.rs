//! The readers the result scanner (`super`) is built on: JSON values and
//! their parts (whitespace, keys, strings, numbers, nested values) read at a
//! position of the body, each returning where it ends, or `None` for what
//! the scanner leaves to serde. Strings are where the body is checked as
//! UTF-8; the rows' fields are read by [`field`], which also tells their
//! kind.

use super::{At, Notes, NULL, NUMBER, OTHER};
use crate::wire::{self, Kind};

/// Skips JSON whitespace (the four characters serde_json accepts). Compact
/// JSON has none: one comparison tells, inlined.
#[inline(always)]
pub(super) fn ws(b: &[u8], i: usize) -> usize {
    match b.get(i) {
        Some(&c) if c > b' ' => i,
        _ => ws_run(b, i),
    }
}

fn ws_run(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = b.get(i) {
        i += 1;
    }
    i
}

pub(super) fn byte(b: &[u8], i: usize, c: u8) -> At {
    (b.get(i) == Some(&c)).then_some(i + 1)
}

/// `"key":` at `i`, the key without escapes: the key, and where its value
/// starts (whitespace skipped).
pub(super) fn plain_key(b: &[u8], i: usize) -> Option<(&[u8], usize)> {
    let (end, escaped) = string(b, byte(b, i, b'"')?)?;
    let key = b.get(i + 1..end - 1)?;
    if escaped || key == RAW_VALUE_KEY {
        return None;
    }
    let at = ws(b, byte(b, ws(b, end), b':')?);
    Some((key, at))
}

/// A key as V2 writes it, compact (`"key":`, at most 16 bytes), with the
/// first 16 bytes of its text as one little-endian word: where 16 bytes of
/// the body remain, a key is told by one load, a mask and a compare, rather
/// than a call to compare bytes.
#[derive(Clone, Copy)]
pub(super) struct Token {
    /// `"key":`, whole.
    text: &'static [u8],
    word: u128,
    mask: u128,
}

impl Token {
    pub(super) const fn new(text: &'static [u8]) -> Token {
        assert!(text.len() >= 3 && text.len() <= 16);
        let mut word = 0u128;
        let mut k = 0;
        while k < text.len() {
            word |= (text[k] as u128) << (8 * k);
            k += 1;
        }
        let mask = if text.len() == 16 {
            u128::MAX
        } else {
            (1u128 << (8 * text.len())) - 1
        };
        Token { text, word, mask }
    }

    /// [`Token::new`] of each of `texts`.
    pub(super) const fn all<const N: usize>(texts: [&'static [u8]; N]) -> [Token; N] {
        let mut tokens = [Token::new(b"\"\":"); N];
        let mut k = 0;
        while k < N {
            tokens[k] = Token::new(texts[k]);
            k += 1;
        }
        tokens
    }

    /// Its length, quotes and colon included.
    pub(super) fn len(&self) -> usize {
        self.text.len()
    }

    /// The key alone, without its quotes and colon.
    pub(super) fn key(&self) -> &'static [u8] {
        &self.text[1..self.text.len() - 2]
    }

    /// Whether `b` holds it at `i`.
    #[inline(always)]
    pub(super) fn at(&self, b: &[u8], i: usize) -> bool {
        match b.get(i..).and_then(<[u8]>::first_chunk::<16>) {
            Some(word) => u128::from_le_bytes(*word) & self.mask == self.word,
            None => b.get(i..i + self.text.len()) == Some(self.text),
        }
    }
}

/// An object at `i` whose keys are plain strings (no escapes), `member`
/// reading each value (at its first byte) and returning where it ends:
/// where the object ends. The keys it is expected to hold, compact, are
/// `known`: found by comparing bytes, which costs less than reading a key.
/// Inlined as its callers were compiled in one crate with it: without
/// link-time optimisation (the benches), a reader of a run called it.
#[inline]
pub(super) fn object<'a>(
    b: &'a [u8],
    i: usize,
    known: &[Token],
    mut member: impl FnMut(usize, &'a [u8]) -> At,
) -> At {
    object_with(
        b,
        i,
        |i| known_key(b, i, known),
        |at, key| match key {
            Key::Known(key) | Key::Read(key) => member(at, key),
        },
    )
}

/// A member's key as [`object_with`]'s member step gets it.
pub(super) enum Key<'a, T> {
    /// Found as written where it was looked for: what it is known as.
    Known(T),
    /// Read as a string (written otherwise, or not looked for).
    Read(&'a [u8]),
}

/// [`object`], its known keys found by `known`: what it knows the key as
/// (`T`) and where its value starts, or `None` for the key to be read; the
/// member step gets either ([`Key`]).
#[inline(always)]
pub(super) fn object_with<'a, T>(
    b: &'a [u8],
    i: usize,
    mut known: impl FnMut(usize) -> Option<(T, usize)>,
    mut member: impl FnMut(usize, Key<'a, T>) -> At,
) -> At {
    let mut i = ws(b, byte(b, i, b'{')?);
    if b.get(i) == Some(&b'}') {
        return Some(i + 1);
    }
    loop {
        let (key, at) = match known(i) {
            Some((known, at)) => (Key::Known(known), at),
            None => plain_key(b, i).map(|(key, at)| (Key::Read(key), at))?,
        };
        i = ws(b, member(at, key)?);
        match *b.get(i)? {
            b',' => i = ws(b, i + 1),
            b'}' => return Some(i + 1),
            _ => return None,
        }
    }
}

/// One of the keys in `tokens` (each written compact, `"key":`) at `i`: the
/// key, and where its value starts; `None` when none is there as written
/// (for [`plain_key`] to read).
#[inline(always)]
fn known_key(b: &[u8], i: usize, tokens: &[Token]) -> Option<(&'static [u8], usize)> {
    let token = tokens.iter().find(|t| t.at(b, i))?;
    Some((token.key(), ws(b, i + token.len())))
}

/// [`wire::RAW_VALUE_KEY`]: the general path would read a body holding it
/// otherwise (or refuse it), so the scanner refuses it wherever it stands,
/// written plainly or with escapes (see [`member_key`]), and leaves the body
/// to that path.
const RAW_VALUE_KEY: &[u8] = wire::RAW_VALUE_KEY.as_bytes();

/// A row's field value at `i`, skipped and checked: its kind and its end.
/// Inlined in the row loops, where most values are a string or a short
/// integer found here.
#[inline(always)]
pub(super) fn field(
    b: &[u8],
    i: usize,
    stack: &mut Vec<u8>,
    hint: &mut u32,
) -> Option<(Notes, usize)> {
    match *b.get(i)? {
        b'"' => Some((OTHER, string_value(b, i + 1, hint)?)),
        b'n' => Some((NULL, literal(b, i, b"null")?)),
        first @ (b'-' | b'0'..=b'9') => {
            if first != b'-' && first != b'0' {
                if let Some(end) = plain_integer(b, i) {
                    return Some((NUMBER, end));
                }
            }
            Some((NUMBER, number(b, i)?))
        }
        _ => other_field(b, i, stack),
    }
}

/// The rest of a row's string value whose contents start at `at`: where
/// it ends. Most values are plain text, and many as long as the previous
/// row's at their place (ids, codes, hashes: `hint`, then this one's
/// length): a quote there with nothing before it that ends a plain run is
/// the end, found without searching for it. Else found here without a
/// call.
#[inline(always)]
fn string_value(b: &[u8], at: usize, hint: &mut u32) -> At {
    let guess = at + *hint as usize;
    if b.get(guess) == Some(&b'"') && plain_between(b, at, guess) {
        return Some(guess + 1);
    }
    let j = plain_end(b, at);
    let end = match b.get(j) {
        Some(b'"') => j + 1,
        _ => string_rest(b, j)?.0,
    };
    // A length that does not fit only makes a guess that fails.
    *hint = (end - at - 1) as u32;
    Some(end)
}

/// [`field`] for a value after whitespace, or that is not a string, a
/// number or null.
#[inline(never)]
fn other_field(b: &[u8], i: usize, stack: &mut Vec<u8>) -> Option<(Notes, usize)> {
    let at = ws(b, i);
    if at > i {
        return field(b, at, stack, &mut 0);
    }
    Some((OTHER, value(b, i, stack)?))
}

/// Skips and checks one JSON value of any depth at `i`.
pub(super) fn value(b: &[u8], mut i: usize, stack: &mut Vec<u8>) -> At {
    let base = stack.len();
    loop {
        // A value...
        i = match *b.get(i)? {
            b'"' => string(b, i + 1)?.0,
            b'1'..=b'9' => match plain_integer(b, i) {
                Some(end) => end,
                None => number(b, i)?,
            },
            b'-' | b'0' => number(b, i)?,
            b't' => literal(b, i, b"true")?,
            b'f' => literal(b, i, b"false")?,
            b'n' => literal(b, i, b"null")?,
            open @ (b'{' | b'[') => {
                i = ws(b, i + 1);
                let close = if open == b'{' { b'}' } else { b']' };
                if b.get(i) == Some(&close) {
                    i + 1
                } else {
                    stack.push(open);
                    if open == b'{' {
                        i = member_key(b, i)?;
                    }
                    continue;
                }
            }
            _ => return None,
        };
        // ...then whatever closes after it, up to the next value.
        loop {
            let Some(&open) = stack.get(base..).and_then(<[u8]>::last) else {
                return Some(i);
            };
            i = ws(b, i);
            match (*b.get(i)?, open) {
                (b',', b'{') => {
                    i = member_key(b, ws(b, i + 1))?;
                    break;
                }
                (b',', _) => {
                    i = ws(b, i + 1);
                    break;
                }
                (b']', b'[') | (b'}', b'{') => {
                    stack.pop();
                    i += 1;
                }
                _ => return None,
            }
        }
    }
}

/// A key inside a skipped value (escapes allowed) and its colon; where the
/// value starts. Inlined: mostly a short plain key, found without a call.
#[inline(always)]
fn member_key(b: &[u8], i: usize) -> At {
    let (end, escaped) = string(b, byte(b, i, b'"')?)?;
    // Not [`RAW_VALUE_KEY`]: plainly, or with escapes, which make a key's
    // text longer than what it spells (a length is all that is compared
    // then: a long key with an escape is rare enough to leave to serde).
    let len = end - i - 2;
    if len >= RAW_VALUE_KEY.len() && (escaped || b.get(i + 1..end - 1)? == RAW_VALUE_KEY) {
        return None;
    }
    Some(ws(b, byte(b, ws(b, end), b':')?))
}

pub(super) fn literal(b: &[u8], i: usize, word: &[u8]) -> At {
    let end = i + word.len();
    (b.get(i..end)? == word).then_some(end)
}

/// A number as JSON writes it: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`,
/// that serde reads as a number. A digit straight after a leading 0, or
/// anything else after the number, is for the caller to refuse.
///
/// Wherever it stands (a row's field, a nested value, the envelope), a
/// number that overflows `f64` (`1e400`, 400 digits) is refused: the
/// general path reads the body as a `Value`, which refuses it, so the
/// answer must not depend on which path read the body. Short plain numbers
/// are always in range; for the rest, serde's own reading decides.
fn number(b: &[u8], i: usize) -> At {
    let (end, exponent) = number_parts(b, i)?;
    if (end - i > 17 || exponent) && serde_json::from_slice::<Kind>(&b[i..end]).is_err() {
        return None;
    }
    Some(end)
}

/// [`number`], and whether the number has an exponent.
#[inline]
fn number_parts(b: &[u8], mut i: usize) -> Option<(usize, bool)> {
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    i = match *b.get(i)? {
        b'0' => i + 1,
        b'1'..=b'9' => digits(b, i + 1),
        _ => return None,
    };
    if b.get(i) == Some(&b'.') {
        i = digits(b, digit(b, i + 1)?);
    }
    if let Some(b'e' | b'E') = b.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = b.get(i) {
            i += 1;
        }
        return Some((digits(b, digit(b, i)?), true));
    }
    Some((i, false))
}

fn digit(b: &[u8], i: usize) -> At {
    b.get(i)?.is_ascii_digit().then_some(i + 1)
}

/// The integer at `i` (a minus sign, then one to 18 digits, no leading
/// zero, not `-0`: always in `i64`, and read by serde as one) and where it
/// ends, read as it is found. `None` for any other number (a fraction, an
/// exponent, more digits) and anything that is not a number.
pub(super) fn short_integer(b: &[u8], i: usize) -> Option<(i64, usize)> {
    let negative = b.get(i) == Some(&b'-');
    let start = i + usize::from(negative);
    let mut end = start;
    let mut n: i64 = 0;
    while let Some(d) = b.get(end).filter(|d| d.is_ascii_digit()) {
        if end - start == 18 {
            return None;
        }
        n = n * 10 + i64::from(d - b'0');
        end += 1;
    }
    let leading_zero = end - start > 1 && b[start] == b'0';
    if end == start || leading_zero || matches!(b.get(end), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    match (negative, n) {
        (true, 0) => None,
        (true, n) => Some((-n, end)),
        (false, n) => Some((n, end)),
    }
}

/// A plain integer at `i`, whose first digit is 1 to 9 (no sign,
/// fraction or exponent, short enough to be in f64's range): where it
/// ends, read without a call. `None` for any other number (for
/// [`number`] to read) and a number cut short by the body's end.
#[inline(always)]
fn plain_integer(b: &[u8], i: usize) -> At {
    let end = plain_digits(b, i + 1);
    (end - i <= 17 && !matches!(b.get(end), Some(b'.' | b'e' | b'E') | None)).then_some(end)
}

/// [`digits`], the first eight bytes at once where the body has them
/// (most integers in rows are short).
#[inline(always)]
fn plain_digits(b: &[u8], i: usize) -> usize {
    let Some(word) = b.get(i..).and_then(<[u8]>::first_chunk::<8>) else {
        return digits(b, i);
    };
    const EACH: u64 = 0x0101_0101_0101_0101;
    // Digits become 0 to 9; a byte of 10 or more gets its top bit with 0x76
    // added (or has it). A carry out of a byte (0x8a or more, not a digit)
    // only reaches bytes after it.
    let x = u64::from_le_bytes(*word) ^ (0x30 * EACH);
    let ends = (x | x.wrapping_add(0x76 * EACH)) & (0x80 * EACH);
    match ends.trailing_zeros() as usize / 8 {
        8 => digits(b, i + 8),
        n => i + n,
    }
}

fn digits(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
}

/// The rest of a string whose contents start at `i`: where it ends (after
/// the closing quote), and whether it held an escape. A plain string's end
/// is found here, inlined (keys and most values are plain, and short: a
/// call would cost about as much as the search); the rest is read by
/// [`string_rest`].
#[inline(always)]
pub(super) fn string(b: &[u8], i: usize) -> Option<(usize, bool)> {
    let j = plain_end(b, i);
    if b.get(j) == Some(&b'"') {
        return Some((j + 1, false));
    }
    string_rest(b, j)
}

/// The rest of a string from `i`, where its plain run stopped (see
/// [`stop`]): where it ends, and whether it held an escape. Refuses
/// control characters, invalid escapes, `\u` escapes that are not valid
/// UTF-16 (a lone surrogate) and bytes that are not UTF-8.
///
/// Only strings can hold bytes that are not ASCII (anywhere else the
/// grammar refuses them), so the body is checked as UTF-8 here, a run of
/// such bytes at a time: a run between ASCII bytes must be whole
/// characters.
#[inline(never)]
fn string_rest(b: &[u8], mut i: usize) -> Option<(usize, bool)> {
    let mut escaped = false;
    loop {
        match *b.get(i)? {
            b'"' => return Some((i + 1, escaped)),
            b'\\' => {
                escaped = true;
                i = match *b.get(i + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i + 2,
                    b'u' => match hex4(b, i + 2)? {
                        0xDC00..=0xDFFF => return None,
                        0xD800..=0xDBFF => {
                            let low = byte(b, byte(b, i + 6, b'\\')?, b'u')?;
                            if !(0xDC00..=0xDFFF).contains(&hex4(b, low)?) {
                                return None;
                            }
                            low + 4
                        }
                        _ => i + 6,
                    },
                    _ => return None,
                };
            }
            c if c >= 0x80 => {
                let rest = b.get(i..)?;
                let run = rest.iter().position(|&c| c < 0x80).unwrap_or(rest.len());
                std::str::from_utf8(&rest[..run]).ok()?;
                i += run;
            }
            // A control character.
            _ => return None,
        }
        i = plain_end(b, i);
    }
}

fn hex4(b: &[u8], i: usize) -> Option<u16> {
    let digits = b.get(i..i + 4)?;
    digits.iter().try_fold(0u16, |n, &d| {
        let v = (d as char).to_digit(16)?;
        Some(n << 4 | v as u16)
    })
}

/// Where the plain run of string contents at `i` ends: the first byte at or
/// after `i` that [stops](stop) it (the body's length if none).
/// Sixteen bytes at a time, as the bytes of a row are mostly string
/// contents. (`memchr` finds two or three given bytes, not a range, and its
/// call costs more than the search of a short string.)
#[inline(always)]
fn plain_end(b: &[u8], mut i: usize) -> usize {
    while let Some(chunk) = b.get(i..).and_then(<[u8]>::first_chunk::<16>) {
        let stops = stops(chunk);
        // Or-ed as bytes, the test is one vector instruction; the position
        // is only wanted once.
        if stops.iter().fold(0, |any, &s| any | s) != 0 {
            return i + u128::from_le_bytes(stops).trailing_zeros() as usize / 8;
        }
        i += 16;
    }
    // The last bytes of the body.
    let tail = b.get(i..).unwrap_or_default();
    i + tail.iter().position(|&c| stop(c)).unwrap_or(tail.len())
}

/// Whether `b[from..to]` is a plain run of string contents (`to` within
/// the body): sixteen bytes at a time, the last sixteen overlapping the
/// ones before, or masked past `to` when there are fewer.
#[inline(always)]
fn plain_between(b: &[u8], from: usize, to: usize) -> bool {
    let n = to - from;
    if n < 16 {
        let Some(chunk) = b.get(from..).and_then(<[u8]>::first_chunk::<16>) else {
            return false;
        };
        let Some(mask) = PREFIX.get(16 - n..).and_then(<[u8]>::first_chunk::<16>) else {
            return false;
        };
        return !any_stop(chunk, mask);
    }
    // The stops of all the chunks or-ed, the last sixteen bytes
    // overlapping the ones before, then tested once: the guess is mostly
    // right.
    let Some(run) = b.get(from..to) else {
        return false;
    };
    // (A chunk of zeros, never used, would only make the guess fail.)
    let mut seen = [0u8; 16];
    let mut chunks = run.chunks_exact(16);
    for chunk in &mut chunks {
        let stops = stops(chunk.try_into().unwrap_or(&[0; 16]));
        for k in 0..16 {
            seen[k] |= stops[k];
        }
    }
    if !chunks.remainder().is_empty() {
        let stops = stops(run.last_chunk::<16>().unwrap_or(&[0; 16]));
        for k in 0..16 {
            seen[k] |= stops[k];
        }
    }
    seen.iter().fold(0, |any, &s| any | s) == 0
}

/// Sixteen `0xff` then sixteen `0`: its sixteen bytes from `16 - n` mask
/// all but the first `n` bytes of a chunk.
const PREFIX: [u8; 32] = {
    let mut p = [0; 32];
    let mut k = 0;
    while k < 16 {
        p[k] = 0xff;
        k += 1;
    }
    p
};

/// Whether a byte of `chunk` where `mask` is `0xff` ends a plain run.
#[inline(always)]
fn any_stop(chunk: &[u8; 16], mask: &[u8; 16]) -> bool {
    let stops = stops(chunk);
    let mut any = 0;
    for k in 0..16 {
        any |= stops[k] & mask[k];
    }
    any != 0
}

/// Whether a byte ends a plain run of string contents: a quote, a
/// backslash, a control character, or a byte that is not ASCII (`< 0x20`
/// as a signed byte is both).
#[inline(always)]
fn stop(c: u8) -> bool {
    (c == b'"') | (c == b'\\') | ((c as i8) < 0x20)
}

/// The bytes of `chunk` that end a plain run, as `0xff` (the others `0`).
/// Written byte by byte over fixed arrays, by index, so that the compiler
/// makes it a few vector instructions (three compares, two ors) whether or
/// not it inlines iterator code; the tests of the results (an or of all the
/// bytes, or the first one's place) are written so as well, as other forms
/// of them are compiled byte by byte.
#[inline(always)]
fn stops(chunk: &[u8; 16]) -> [u8; 16] {
    let mut flags = [0u8; 16];
    for k in 0..16 {
        flags[k] = u8::from(stop(chunk[k])).wrapping_neg();
    }
    flags
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token is found wherever its bytes are, and nowhere else: far from
    /// the end (one word) and within 16 bytes of it (bytes compared), for
    /// the longest token and for short ones, one byte off in each place.
    #[test]
    fn tokens_are_found_exactly_where_their_bytes_are() {
        let texts: [&'static [u8]; 4] =
            [b"\"scraper_title\":", b"\"code\":", b"\"n\":", b"\"list\":"];
        let tokens = Token::all(texts);
        assert_eq!(tokens[0].len(), 16);
        assert_eq!(tokens[0].key(), b"scraper_title");
        for (token, text) in tokens.iter().zip(texts) {
            let mut bodies = vec![];
            for pad in 0..20 {
                let mut body = vec![b' '; pad];
                body.extend_from_slice(text);
                for tail in [0, 1, 15, 16, 17] {
                    let mut b = body.clone();
                    b.extend(std::iter::repeat_n(b'x', tail));
                    bodies.push(b);
                }
            }
            for body in &bodies {
                for k in 0..body.len() {
                    // Each byte of the token changed in turn, then none.
                    for flip in (0..text.len()).map(Some).chain([None]) {
                        let mut b = body.clone();
                        if let Some(f) = flip {
                            if let Some(c) = b.get_mut(k + f) {
                                *c ^= 0x20;
                            }
                        }
                        let expected = b.get(k..k + text.len()) == Some(text);
                        assert_eq!(
                            token.at(&b, k),
                            expected,
                            "{:?} at {k} of {:?}",
                            std::str::from_utf8(text),
                            String::from_utf8_lossy(&b)
                        );
                    }
                }
                assert!(!token.at(body, body.len()));
                assert!(!token.at(body, body.len() + 3));
            }
        }
    }

    #[test]
    fn short_integers_are_read_as_found_and_others_left() {
        let read = |t: &str| short_integer(t.as_bytes(), 0);
        assert_eq!(read("0,"), Some((0, 1)));
        assert_eq!(read("-7}"), Some((-7, 2)));
        assert_eq!(
            read("999999999999999999"),
            Some((999_999_999_999_999_999, 18))
        );
        assert_eq!(
            read("-999999999999999999 "),
            Some((-999_999_999_999_999_999, 19))
        );
        for other in [
            "1234567890123456789",
            "01",
            "-0",
            "-",
            "1.5",
            "1e3",
            "2E1",
            "-x",
            "",
        ] {
            assert_eq!(read(other), None, "{other}");
        }
    }
}
