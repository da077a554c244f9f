//! Finding the bytes a JSON string must escape, sixteen at a time: shared by
//! the places the request path writes JSON text itself rather than through
//! serde_json, the V1 records and result pages of [`crate::v1`] and the
//! gateway's log lines (`telemetry::json_lines`). Each copies a string that
//! needs no escape as it is, and almost every string needs none; what the
//! one-pass readers read is known to need none ([`Texts`]).

/// Whether a byte must be escaped in a JSON string.
fn special(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Where the first byte [`special`] names is, looking at sixteen bytes a
/// step: almost every string holds none, and a byte-by-byte search was most
/// of a log line's cost (and of writing a V1 record). Each step is written
/// so that the compiler makes it a few vector instructions (SSE2 on x86-64;
/// no code for one architecture, no `unsafe`). The last bytes (all of a
/// short key or field name) are tested as one step too, padded with
/// spaces, which need no escape.
#[inline]
pub fn first_special(s: &[u8]) -> Option<usize> {
    let mut chunks = s.chunks_exact(STEP);
    for (i, chunk) in chunks.by_ref().enumerate() {
        // Always `STEP` bytes.
        if let Some(p) = chunk.try_into().ok().and_then(special_in) {
            return Some(i * STEP + p);
        }
    }
    let tail = chunks.remainder();
    let mut padded = [b' '; STEP];
    padded[..tail.len()].copy_from_slice(tail);
    special_in(&padded).map(|p| s.len() - tail.len() + p)
}

/// The bytes [`first_special`] looks at in one step.
const STEP: usize = 16;

/// Where the first [`special`] byte of `chunk` is. The flags are or-ed
/// as bytes first, one vector test; the position is only wanted once.
#[inline(always)]
fn special_in(chunk: &[u8; STEP]) -> Option<usize> {
    let mut flags = [0u8; STEP];
    for (f, &b) in flags.iter_mut().zip(chunk) {
        *f = u8::from(special(b)).wrapping_neg();
    }
    if flags.iter().fold(0, |any, &f| any | f) == 0 {
        return None;
    }
    Some(u128::from_le_bytes(flags).trailing_zeros() as usize / 8)
}

/// `s` as a JSON string: copied between quotes when nothing in it needs an
/// escape (the common case), else written by serde_json.
#[inline]
pub fn json_string(out: &mut Vec<u8>, s: &str) {
    if first_special(s.as_bytes()).is_some() {
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    } else {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    }
}

/// What is known of the texts a V1 answer takes from a V2 answer. That they
/// need no escaping is a promise only the one-pass readers make (the
/// [`crate::read`] entry points say so when they read an answer in one
/// pass): a release build copies such texts unlooked-at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Texts {
    pub(crate) plain: bool,
}

impl Texts {
    /// From anywhere else (a `Value`, serde's unescaped strings): each is
    /// looked at, and escaped where it must be.
    pub const UNCHECKED: Texts = Texts { plain: false };

    /// Read by the one-pass readers (`scan::run_answer`,
    /// `scan::run_list_answer`), which take only strings without escapes,
    /// quotes or control characters: nothing in them needs escaping again.
    pub(crate) const SCANNED: Texts = Texts { plain: true };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_special_byte_is_found_at_any_offset() {
        for len in 0..72 {
            let plain = "a".repeat(len);
            assert_eq!(first_special(plain.as_bytes()), None);
            for at in 0..len {
                for special in [b'"', b'\\', 0, 0x1f, b'\n'] {
                    let mut bytes = plain.clone().into_bytes();
                    bytes[at] = special;
                    assert_eq!(first_special(&bytes), Some(at), "{bytes:?}");
                }
                // Bytes that look alike bit for bit but need no escape.
                for other in [0x20, 0x7f, 0x80, 0xa2, 0xdc, 0xe0, 0xff, b'!', b']'] {
                    let mut bytes = plain.clone().into_bytes();
                    bytes[at] = other;
                    assert_eq!(first_special(&bytes), None, "{bytes:?}");
                }
            }
        }
    }
}
