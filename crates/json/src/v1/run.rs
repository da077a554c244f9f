//! The V1 run record (`data` of `POST /api/v1/run/detail`, each record of
//! `POST /api/v1/run/list`) written as JSON, the last step of the gateway's
//! `ops::run_records` after its mapping of a V2 record: the 13 fields in
//! V1's order, written by hand rather than by serde.

use serde::Serialize;

use crate::escape::{first_special, json_string, Texts};
use crate::v2::V2Run;

/// The 13-field V1 run record, in V1's field order.
#[derive(Debug, Serialize)]
pub struct V1Run<'a> {
    pub status: i64,
    pub err_msg: &'a str,
    pub slug: &'a str,
    pub scraper_title: &'a str,
    pub scraper_slug: &'a str,
    pub results: i64,
    pub usage: &'a str,
    pub started_at: i64,
    pub finished_at: i64,
    pub duration: i64,
    pub origin: &'a str,
    pub traffic: i64,
    pub version: &'a str,
}

impl<'a> V1Run<'a> {
    /// The V1 record of a V2 one, each field V2 left out given V1's empty
    /// value (`""`, `0`, a `usage` of `"0"`). The status and the origin come
    /// mapped by the caller: how is the gateway's configuration, not the
    /// kernel's.
    #[inline]
    pub fn of_v2(v2: &'a V2Run<'a>, status: i64, origin: &'a str) -> V1Run<'a> {
        V1Run {
            status,
            err_msg: v2.err_msg.or_default(),
            slug: v2.slug.or_default(),
            scraper_title: v2.scraper_title.or_default(),
            scraper_slug: v2.scraper_slug.or_default(),
            results: v2.results.0.unwrap_or(0),
            usage: v2.usage.0.as_deref().unwrap_or("0"),
            started_at: v2.started_at.0.unwrap_or(0),
            finished_at: v2.finished_at.0.unwrap_or(0),
            duration: v2.duration.0.unwrap_or(0),
            origin,
            traffic: v2.traffic.0.unwrap_or(0),
            version: v2.version.or_default(),
        }
    }

    /// The record as V1's JSON object, appended to `out`: the bytes serde
    /// writes for it (a test compares the two), in a fraction of the
    /// instructions, since the keys are written already quoted and a value
    /// that needs no escaping is copied as it is. `origin` is always looked
    /// at: the gateway's `compat.origin_rename` may have put a configured name
    /// there.
    pub fn write_json(&self, out: &mut Vec<u8>, texts: Texts) {
        // Inlined at each field, so its key is copied as a constant of known
        // length rather than by a call.
        #[inline(always)]
        fn int(out: &mut Vec<u8>, key: &[u8], n: i64) {
            out.extend_from_slice(key);
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        }
        #[inline(always)]
        fn text(out: &mut Vec<u8>, key: &[u8], s: &str, texts: Texts) {
            out.extend_from_slice(key);
            if texts.plain {
                debug_assert!(first_special(s.as_bytes()).is_none());
                out.push(b'"');
                out.extend_from_slice(s.as_bytes());
                out.push(b'"');
            } else {
                json_string(out, s);
            }
        }
        int(out, b"{\"status\":", self.status);
        text(out, b",\"err_msg\":", self.err_msg, texts);
        text(out, b",\"slug\":", self.slug, texts);
        text(out, b",\"scraper_title\":", self.scraper_title, texts);
        text(out, b",\"scraper_slug\":", self.scraper_slug, texts);
        int(out, b",\"results\":", self.results);
        text(out, b",\"usage\":", self.usage, texts);
        int(out, b",\"started_at\":", self.started_at);
        int(out, b",\"finished_at\":", self.finished_at);
        int(out, b",\"duration\":", self.duration);
        out.extend_from_slice(b",\"origin\":");
        json_string(out, self.origin);
        int(out, b",\"traffic\":", self.traffic);
        text(out, b",\"version\":", self.version, texts);
        out.push(b'}');
    }

    /// Room [`V1Run::write_json`] needs, give or take escapes.
    pub fn json_len(&self) -> usize {
        // Keys, punctuation and five integers of up to 20 digits.
        const FIXED: usize = 160 + 5 * 20;
        FIXED
            + [
                self.err_msg,
                self.slug,
                self.scraper_title,
                self.scraper_slug,
                self.usage,
                self.origin,
                self.version,
            ]
            .iter()
            .map(|s| s.len())
            .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = String> {
        // Plain text, and text with every kind of character serde escapes.
        prop_oneof![
            "[a-zA-Z0-9 .:/_-]{0,24}",
            "[\\x00-\\x1f\"\\\\a-z\u{e9}\u{4e2d}\u{1F600}\u{7f}]{0,24}",
        ]
    }

    proptest! {
        /// The record written directly is byte for byte what serde writes.
        #[test]
        fn a_record_is_written_as_serde_writes_it(
            s in proptest::collection::vec(text(), 7),
            n in proptest::collection::vec(any::<i64>(), 6),
        ) {
            let run = V1Run {
                status: n[0],
                err_msg: &s[0],
                slug: &s[1],
                scraper_title: &s[2],
                scraper_slug: &s[3],
                results: n[1],
                usage: &s[4],
                started_at: n[2],
                finished_at: n[3],
                duration: n[4],
                origin: &s[5],
                traffic: n[5],
                version: &s[6],
            };
            let mut direct = Vec::new();
            run.write_json(&mut direct, Texts::UNCHECKED);
            let serde = serde_json::to_string(&run).unwrap();
            prop_assert_eq!(String::from_utf8(direct).unwrap(), serde.as_str());
            // Texts known plain are copied as they are, to the same bytes
            // when they are (the origin, which may be a configured name, is
            // looked at either way).
            let needs_escape = |t: &str| first_special(t.as_bytes()).is_some();
            if s.iter().enumerate().all(|(i, t)| i == 5 || !needs_escape(t)) {
                let mut plain = Vec::new();
                run.write_json(&mut plain, Texts { plain: true });
                prop_assert_eq!(String::from_utf8(plain).unwrap(), serde);
            }
        }
    }
}
