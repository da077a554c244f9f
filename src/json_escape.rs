//! Finding the bytes a JSON string must escape, eight at a time: shared by
//! the two places the request path writes JSON text itself rather than
//! through serde_json, the V1 records of `ops::run_records` and the log
//! lines of `telemetry::json_lines`. Both copy a string that needs no
//! escape as it is, and almost every string needs none.

/// Whether a byte must be escaped in a JSON string.
fn special(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Where the first byte [`special`] names is, looking at eight bytes a
/// step: almost every string holds none, and a byte-by-byte search was most
/// of a log line's cost (and of writing a V1 record).
pub(crate) fn first_special(s: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // Per byte, the high bit set where the byte is 0 (the usual test).
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    let mut chunks = s.chunks_exact(8);
    for (i, chunk) in chunks.by_ref().enumerate() {
        // Always eight bytes: read as one word.
        let v = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        // A byte is below 0x20 exactly when its top three bits are clear.
        // The zero test may flag bytes above a real match, never a word
        // without one: a flagged word is searched byte by byte.
        let control = zero(v & 0xe0e0_e0e0_e0e0_e0e0);
        let quote = zero(v ^ (ONES * u64::from(b'"')));
        let backslash = zero(v ^ (ONES * u64::from(b'\\')));
        if control | quote | backslash != 0 {
            return chunk.iter().position(|&b| special(b)).map(|p| i * 8 + p);
        }
    }
    let done = s.len() - chunks.remainder().len();
    chunks
        .remainder()
        .iter()
        .position(|&b| special(b))
        .map(|p| done + p)
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
