//! Finding the bytes a JSON string must escape, eight at a time: shared by
//! the places the request path writes JSON text itself rather than through
//! serde_json, the V1 records of `ops::run_records`, the headers of a V1
//! result page (`ops::results`) and the log lines of `telemetry::json_lines`.
//! Each copies a string that needs no escape as it is, and almost every
//! string needs none.

/// Whether a byte must be escaped in a JSON string.
fn special(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Where the first byte [`special`] names is, looking at eight bytes a
/// step: almost every string holds none, and a byte-by-byte search was most
/// of a log line's cost (and of writing a V1 record). The last bytes (all
/// of a short key or field name) are tested as one word too, padded with
/// spaces, which need no escape.
pub(crate) fn first_special(s: &[u8]) -> Option<usize> {
    let mut chunks = s.chunks_exact(8);
    for (i, chunk) in chunks.by_ref().enumerate() {
        // Always eight bytes: read as one word.
        if has_special(u64::from_le_bytes(chunk.try_into().unwrap_or_default())) {
            return chunk.iter().position(|&b| special(b)).map(|p| i * 8 + p);
        }
    }
    let tail = chunks.remainder();
    let mut word = [b' '; 8];
    word[..tail.len()].copy_from_slice(tail);
    if !has_special(u64::from_le_bytes(word)) {
        return None;
    }
    let done = s.len() - tail.len();
    tail.iter().position(|&b| special(b)).map(|p| done + p)
}

/// Whether some byte of `v` may be [`special`]. The zero test may flag
/// bytes above a real match, never a word without one: a flagged word is
/// searched byte by byte.
fn has_special(v: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // Per byte, the high bit set where the byte is 0 (the usual test).
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    // A byte is below 0x20 exactly when its top three bits are clear.
    let control = zero(v & 0xe0e0_e0e0_e0e0_e0e0);
    let quote = zero(v ^ (ONES * u64::from(b'"')));
    let backslash = zero(v ^ (ONES * u64::from(b'\\')));
    control | quote | backslash != 0
}

/// `s` as a JSON string: copied between quotes when nothing in it needs an
/// escape (the common case), else written by serde_json.
pub(crate) fn json_string(out: &mut Vec<u8>, s: &str) {
    if first_special(s.as_bytes()).is_some() {
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    } else {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_special_byte_is_found_at_any_offset() {
        for len in 0..40 {
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
