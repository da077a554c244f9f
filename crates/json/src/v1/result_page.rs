//! The V1 result page (`data` of `POST /api/v1/run/result/list`) written as
//! JSON, the last step of the gateway's `ops::results` after its mapping of
//! the V2 pages (the window, the header formats): V1's fields in V1's
//! order, the rows copied as V2 sent them, or not copied at all when they
//! stand in one V2 answer as they stand in the list.

use std::borrow::Cow;

use bytes::Bytes;
use serde::Serialize;

use crate::escape::json_string;
use crate::v1::Json;

/// The V1 result page (`data`): V1's fields, the rows as V2 sent them
/// (valid JSON text, as bytes).
#[derive(Debug)]
pub struct V1ResultPage<'a> {
    pub count: i64,
    pub headers: Vec<V1Header<'a>>,
    /// The rows of `list` in runs: one row, or rows V2 sent with only a
    /// comma between them, that text with the commas (all of a window within
    /// one V2 page, which is then shared rather than copied; else up to
    /// [`RUN_BYTES`](crate::scan::RUN_BYTES), copied a run at a time).
    /// Joined by commas, the runs are the list's content; none when the page
    /// has no rows.
    pub runs: Vec<&'a [u8]>,
    pub page_index: u64,
    pub page_size: u64,
}

impl V1ResultPage<'_> {
    /// Written once, in V1's field order, into a buffer sized for it: the
    /// rows (valid JSON, checked by whoever read them) are copied as they
    /// are, a run at a time; the rest is written as serde would write it.
    pub fn to_json(&self) -> Json {
        let rows: usize = self.runs.iter().map(|r| r.len() + 1).sum();
        Json::write_direct(rows + self.around_len(), |out| {
            self.write_head(out);
            for (i, run) in self.runs.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(run);
            }
            self.write_tail(out);
        })
    }

    /// [`V1ResultPage::to_json`], the rows not copied when they stand in
    /// one of `bodies` (the V2 answers they were read from) as they are in
    /// the list, with only commas between them: a window within one V2
    /// page, as V2 writes pages. The list is then that part of the V2
    /// answer, shared.
    pub fn to_json_sharing<'b>(&self, bodies: impl IntoIterator<Item = &'b Bytes>) -> Json {
        match bodies
            .into_iter()
            .find_map(|body| list_in(&self.runs, body))
        {
            Some(list) => Json::write_around(
                self.around_len(),
                |out| self.write_head(out),
                list,
                |out| self.write_tail(out),
            ),
            None => self.to_json(),
        }
    }

    /// Room for all but the rows: the headers, punctuation, keys and three
    /// integers of up to 20 digits.
    fn around_len(&self) -> usize {
        self.headers.iter().map(V1Header::json_len).sum::<usize>() + 128
    }

    /// The page up to its rows.
    fn write_head(&self, out: &mut Vec<u8>) {
        let mut int = itoa::Buffer::new();
        out.extend_from_slice(b"{\"count\":");
        out.extend_from_slice(int.format(self.count).as_bytes());
        out.extend_from_slice(b",\"headers\":[");
        for (i, header) in self.headers.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            header.write_json(out);
        }
        out.extend_from_slice(b"],\"list\":[");
    }

    /// The page after its rows.
    fn write_tail(&self, out: &mut Vec<u8>) {
        let mut int = itoa::Buffer::new();
        out.extend_from_slice(b"],\"page_index\":");
        out.extend_from_slice(int.format(self.page_index).as_bytes());
        out.extend_from_slice(b",\"page_size\":");
        out.extend_from_slice(int.format(self.page_size).as_bytes());
        out.push(b'}');
    }
}

/// The list's text as a part of `body`, when `runs` (slices of the V2
/// answers) all stand in it in order with one comma between each and the
/// next: their text joined by commas, shared rather than copied.
fn list_in(runs: &[&[u8]], body: &Bytes) -> Option<Bytes> {
    let (first, last) = (runs.first()?, runs.last()?);
    // Where each run starts in `body`, if it is in it (addresses compared,
    // nothing read).
    let at = |run: &[u8]| {
        let start = (run.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
        (start + run.len() <= body.len()).then_some(start)
    };
    let start = at(first)?;
    let mut end = start + first.len();
    for run in &runs[1..] {
        if at(run)? != end + 1 || body[end] != b',' {
            return None;
        }
        end += 1 + run.len();
    }
    debug_assert_eq!(end, at(last)? + last.len());
    Some(body.slice(start..end))
}

/// A V1 column header.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct V1Header<'a> {
    pub label: Cow<'a, str>,
    pub key: Cow<'a, str>,
    pub format: Cow<'a, str>,
}

impl V1Header<'_> {
    /// The header as serde writes it (a test compares the two), keys
    /// written already quoted.
    fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"label\":");
        json_string(out, &self.label);
        out.extend_from_slice(b",\"key\":");
        json_string(out, &self.key);
        out.extend_from_slice(b",\"format\":");
        // Mostly one of the two a page infers, which need no escape.
        match &*self.format {
            "text" => out.extend_from_slice(b"\"text\""),
            "number" => out.extend_from_slice(b"\"number\""),
            format => json_string(out, format),
        }
        out.push(b'}');
    }

    /// Room [`V1Header::write_json`] needs, give or take escapes.
    fn json_len(&self) -> usize {
        40 + self.label.len() + self.key.len() + self.format.len()
    }

    /// The header holding its own strings (a header read off another
    /// answer than the page's).
    pub fn into_owned(self) -> V1Header<'static> {
        V1Header {
            label: Cow::Owned(self.label.into_owned()),
            key: Cow::Owned(self.key.into_owned()),
            format: Cow::Owned(self.format.into_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Headers are written as serde writes them, escapes and all.
    #[test]
    fn headers_are_written_as_serde_writes_them() {
        let texts = [
            "",
            "plain",
            "é ✓ 😀",
            "q\"b\\s/",
            "nl\n tab\t \u{1} \u{1f} \u{7f}",
            "</script>",
        ];
        let headers: Vec<V1Header> = texts
            .iter()
            .flat_map(|a| texts.iter().map(move |b| (a, b)))
            .map(|(a, b)| V1Header {
                label: Cow::Borrowed(a),
                key: Cow::Borrowed(b),
                format: Cow::Borrowed(a),
            })
            .collect();
        let page = V1ResultPage {
            count: -3,
            headers: headers.clone(),
            runs: vec![br#"{"a":1},{"a":2}"#, b"[]"],
            page_index: u64::MAX,
            page_size: 0,
        };
        let expect = serde_json::to_string(&json!({
            "count": -3,
            "headers": headers,
            "list": [{"a": 1}, {"a": 2}, []],
            "page_index": u64::MAX,
            "page_size": 0,
        }))
        .unwrap();
        // In V1's field order (serde_json keeps `json!`'s, `preserve_order`).
        assert_eq!(
            std::str::from_utf8(&page.to_json().data_bytes()).unwrap(),
            expect
        );
    }
}
