//! The bytes of a V1 answer as the operations write them, between the
//! gateway's mappings and its pipeline, which sends them (`v1::answer`'s
//! body): [`Json`], a V1 `data` already written as JSON inside the success
//! envelope around it, and [`AnswerBytes`], one buffer or three (a result
//! page's rows shared with V2's answer rather than copied).

use bytes::{Bytes, BytesMut};
use serde::Serialize;
use serde_json::value::RawValue;

/// An answer's bytes: its parts, in order (the last two empty when it is
/// one buffer).
#[derive(Debug, Clone, Default)]
pub struct AnswerBytes {
    parts: [Bytes; 3],
}

impl AnswerBytes {
    /// The parts, in order, for the body that sends them one frame each.
    pub fn into_parts(self) -> [Bytes; 3] {
        self.parts
    }

    /// The answer `head`, then `shared` (a part of another buffer), then
    /// `tail`.
    pub fn parts(head: Bytes, shared: Bytes, tail: Bytes) -> AnswerBytes {
        AnswerBytes {
            parts: [head, shared, tail],
        }
    }

    pub fn len(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The answer as one buffer: its own when it is one, else its parts
    /// joined (for the shadow mirror and tests, never on the way to the
    /// client).
    pub fn to_bytes(&self) -> Bytes {
        match &self.parts {
            [one, rest @ ..] if rest.iter().all(Bytes::is_empty) => one.clone(),
            parts => {
                let mut joined = BytesMut::with_capacity(self.len());
                for part in parts {
                    joined.extend_from_slice(part);
                }
                joined.freeze()
            }
        }
    }
}

impl From<Bytes> for AnswerBytes {
    fn from(one: Bytes) -> AnswerBytes {
        AnswerBytes::parts(one, Bytes::new(), Bytes::new())
    }
}

/// Equal when the bytes are, however they are split.
impl PartialEq for AnswerBytes {
    fn eq(&self, other: &AnswerBytes) -> bool {
        self.len() == other.len() && self.to_bytes() == other.to_bytes()
    }
}

/// The head of every successful V1 envelope, up to its `data`.
const SUCCESS_HEAD: &[u8] = b"{\"code\":0,\"message\":\"success\",\"data\":";

/// A V1 `data` value already written as JSON text (valid JSON: by serde_json,
/// or from parts that are), to be put in an envelope without being parsed
/// again. It is written straight into the success envelope around it, so
/// the common answer is never copied a second time (see
/// [`Json::into_envelope`]); a part of it already in another buffer (a
/// result page's rows, in V2's answer) is not copied at all.
#[derive(Debug, Clone, PartialEq)]
pub struct Json {
    /// `{"code":0,"message":"success","data":` + data + `}`.
    envelope: AnswerBytes,
}

impl Json {
    /// Writes `data` into a buffer of `capacity` bytes (grown if too small).
    pub fn write<T: Serialize + ?Sized>(data: &T, capacity: usize) -> serde_json::Result<Json> {
        Json::write_with(capacity, |out| serde_json::to_writer(out, data))
    }

    /// The `data` that `write` appends to the buffer it is given (room for
    /// `capacity` bytes): exactly one valid JSON value, which the caller
    /// vouches for (written by serde_json, or from already checked JSON).
    pub fn write_with<E>(
        capacity: usize,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<Json, E> {
        let mut out = Vec::with_capacity(SUCCESS_HEAD.len() + capacity + 1);
        out.extend_from_slice(SUCCESS_HEAD);
        write(&mut out)?;
        out.push(b'}');
        Ok(Json {
            envelope: Bytes::from(out).into(),
        })
    }

    /// The data written by `head`, then `shared` (JSON text a caller has
    /// checked, in a buffer of its own), then what `tail` writes: one
    /// buffer holds the envelope around `shared`, which is not copied.
    pub fn write_around(
        capacity: usize,
        head: impl FnOnce(&mut Vec<u8>),
        shared: Bytes,
        tail: impl FnOnce(&mut Vec<u8>),
    ) -> Json {
        let mut out = Vec::with_capacity(SUCCESS_HEAD.len() + capacity + 1);
        out.extend_from_slice(SUCCESS_HEAD);
        head(&mut out);
        let split = out.len();
        tail(&mut out);
        out.push(b'}');
        let mut around = Bytes::from(out);
        let end = around.split_off(split);
        Json {
            envelope: AnswerBytes::parts(around, shared, end),
        }
    }

    /// [`Json::write_with`] for a writer that cannot fail.
    pub fn write_direct(capacity: usize, write: impl FnOnce(&mut Vec<u8>)) -> Json {
        let written = Json::write_with(capacity, |out| {
            write(out);
            Ok::<_, std::convert::Infallible>(())
        });
        match written {
            Ok(json) => json,
            Err(never) => match never {},
        }
    }

    /// The data, as one buffer (joined when it is in parts: for tests and
    /// diffs, not the request path).
    pub fn data_bytes(&self) -> Bytes {
        let whole = self.envelope.to_bytes();
        whole.slice(SUCCESS_HEAD.len()..whole.len() - 1)
    }

    /// The success envelope around the data, whole: the buffer it was
    /// written in, or its parts (the bytes serde writes for
    /// `Envelope::success` of the same data (the gateway's `v1::Envelope`), without building the
    /// envelope).
    pub fn into_envelope(self) -> AnswerBytes {
        self.envelope
    }
}

impl Serialize for Json {
    /// As the JSON it holds (for tests and diffs; the request path copies
    /// the text instead).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let data = self.data_bytes();
        let raw: &RawValue = serde_json::from_slice(&data).map_err(serde::ser::Error::custom)?;
        raw.serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(head: &'static str, shared: &'static str, tail: &'static str) -> AnswerBytes {
        AnswerBytes::parts(
            Bytes::from_static(head.as_bytes()),
            Bytes::from_static(shared.as_bytes()),
            Bytes::from_static(tail.as_bytes()),
        )
    }

    #[test]
    fn answers_are_equal_by_their_bytes_however_split() {
        assert_eq!(answer("ab", "c", ""), answer("a", "", "bc"));
        assert_eq!(answer("ab", "c", ""), AnswerBytes::from(Bytes::from("abc")));
        assert_ne!(answer("ab", "c", ""), answer("ab", "", ""));
        // One buffer is handed back as it is, not copied.
        let one = Bytes::from(vec![1, 2, 3]);
        assert_eq!(
            AnswerBytes::from(one.clone()).to_bytes().as_ptr(),
            one.as_ptr()
        );
    }
}
