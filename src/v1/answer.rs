//! The bytes of a V1 answer, from the operation that wrote them to hyper,
//! which sends them: one buffer, or three for a result page (the page up to
//! its rows; the rows as V2 sent them, a part of V2's answer shared rather
//! than copied; the rest), written to the client in order without being
//! joined. A 100-row page is about 18 KB of rows, which the page no longer
//! copies (deploy/bench/RESULTS.md has the figures). The bytes are written
//! by the JSON kernel (`v1compat_json::v1::AnswerBytes`); this is their body.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;

pub(crate) use v1compat_json::v1::AnswerBytes;

/// An answer's body for hyper: an answer's parts as one frame each, of a
/// known length (hyper writes them together, in one call, as it does the
/// head and a one-buffer body); or a body made as one buffer elsewhere (the
/// callback relay's).
#[derive(Debug)]
pub(crate) enum AnswerBody {
    Parts { parts: [Bytes; 3], next: usize },
    Full(Full<Bytes>),
}

impl From<AnswerBytes> for AnswerBody {
    fn from(answer: AnswerBytes) -> AnswerBody {
        AnswerBody::Parts {
            parts: answer.into_parts(),
            next: 0,
        }
    }
}

impl From<Full<Bytes>> for AnswerBody {
    fn from(full: Full<Bytes>) -> AnswerBody {
        AnswerBody::Full(full)
    }
}

impl Body for AnswerBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            AnswerBody::Parts { parts, next } => {
                while let Some(part) = parts.get_mut(*next) {
                    *next += 1;
                    if !part.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(std::mem::take(part)))));
                    }
                }
                Poll::Ready(None)
            }
            AnswerBody::Full(full) => Pin::new(full).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            AnswerBody::Parts { parts, next } => parts.iter().skip(*next).all(Bytes::is_empty),
            AnswerBody::Full(full) => full.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            AnswerBody::Parts { parts, next } => {
                SizeHint::with_exact(parts.iter().skip(*next).map(|p| p.len() as u64).sum())
            }
            AnswerBody::Full(full) => full.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn answer(head: &'static str, shared: &'static str, tail: &'static str) -> AnswerBytes {
        AnswerBytes::parts(
            Bytes::from_static(head.as_bytes()),
            Bytes::from_static(shared.as_bytes()),
            Bytes::from_static(tail.as_bytes()),
        )
    }

    #[tokio::test]
    async fn a_body_is_its_parts_in_order_of_its_exact_length() {
        for (parts, frames) in [
            (answer("{\"list\":[", "1,2", "]}"), 3),
            (answer("{}", "", ""), 1),
            (answer("", "[1]", ""), 1),
            (answer("[", "", "]"), 2),
            (answer("", "", ""), 0),
        ] {
            let joined = parts.to_bytes();
            assert_eq!(parts.len(), joined.len());
            let mut body = AnswerBody::from(parts);
            assert_eq!(body.size_hint().exact(), Some(joined.len() as u64));
            let mut seen = Vec::new();
            let mut count = 0;
            while let Some(frame) = body.frame().await {
                let data = frame.unwrap().into_data().unwrap();
                assert!(!data.is_empty(), "no empty frame");
                seen.extend_from_slice(&data);
                count += 1;
                assert_eq!(
                    body.size_hint().exact(),
                    Some((joined.len() - seen.len()) as u64)
                );
            }
            assert!(body.is_end_stream());
            assert_eq!(seen, joined);
            assert_eq!(count, frames);
        }
    }

    #[tokio::test]
    async fn a_full_body_is_passed_on() {
        let body = AnswerBody::from(Full::new(Bytes::from_static(b"{\"code\":0}")));
        assert_eq!(body.size_hint().exact(), Some(10));
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"{\"code\":0}");
    }
}
