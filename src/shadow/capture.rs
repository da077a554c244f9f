//! Captures, off the request path: one JSON line per mirrored (or replayed)
//! request, holding the V1 request with its keys redacted, both answers (and
//! the baseline answer, if any), a shared id, timestamps and latencies.
//! `replay` reads them back, `report` summarises them.
//!
//! Lines reach the file through a bounded channel drained by one background
//! task, so a slow disk never holds up a request: the live mirror offers a
//! line and drops it when the queue is full (counted in
//! `v1compat_shadow_capture_dropped_total`); `replay` waits for room instead.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::telemetry;

/// What replaces a secret.
pub(crate) const REDACTED: &str = "<redacted>";

/// Headers whose values are secrets.
pub(crate) const SECRET_HEADERS: [&str; 2] = ["api-key", "authorization"];

/// The V1 request as captured (and as `replay` reads it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct CapturedRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Alternative to method + path in hand-written request lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Lower-case header names; key headers hold [`REDACTED`] in captures.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The JSON body, or the raw text if it was not JSON; null when empty.
    #[serde(default)]
    pub body: Value,
}

/// One side's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Side {
    /// Unix milliseconds when the call started.
    pub at_ms: i64,
    pub latency_ms: f64,
    /// HTTP status; absent when no answer came back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The answer JSON (or its text when not JSON); null without an answer.
    #[serde(default)]
    pub body: Value,
    /// Why there is no answer (unreachable, timeout, too large, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One captured request and its answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Shared by every side of one request (the gateway's request id live).
    pub id: String,
    pub operation: String,
    /// Unix milliseconds when the request arrived (live) or was sent (replay).
    pub at_ms: i64,
    /// Which side answered the client: `legacy`, `translated`, or `replay`.
    pub primary: String,
    pub request: CapturedRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub legacy: Option<Side>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub translated: Option<Side>,
    /// A second legacy answer to the same request (the noise baseline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Side>,
}

/// Unix milliseconds now.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Query parameter names whose values are keys: V2 accepts `token=`, and
/// clients and answers also carry `api-key=`, `api_key=`, `apikey=`,
/// `access_token=` and `key=`.
const SECRET_PARAMS: [&str; 6] = [
    "token",
    "api-key",
    "api_key",
    "apikey",
    "access_token",
    "key",
];

/// Whether `s` may hold a secret query parameter (cheap pre-check): a
/// name may be encoded (`%74oken=`), so any `=` is worth a look.
fn may_hold_secret(s: &str) -> bool {
    s.contains('=')
}

/// Replaces the value of every parameter whose name is one of
/// [`SECRET_PARAMS`] (`token=`, `api-key=`, `key=`, …) as a query parameter
/// (also inside URLs in answers) with [`REDACTED`]. A name counts only as a
/// whole parameter name: at the start, or after `?`, `&`, `;`, so `mytoken=`
/// or `monkey=` are left alone. Names are compared as a server reads them:
/// percent- and form-decoded (`%74oken`, `api%2Dkey`, `+token`, twice
/// encoded too), without the surrounding blanks and control characters
/// (`api-key%00`) or a trailing `[]`, in any case.
pub(crate) fn redact_text(s: &str) -> String {
    if !may_hold_secret(s) {
        return s.to_owned();
    }
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    let mut copied = 0;
    while i < s.len() {
        let at_param_start = i == 0 || matches!(bytes[i - 1], b'?' | b'&' | b';');
        let secret = at_param_start
            .then(|| name_end(&s[i..]))
            .flatten()
            .filter(|&len| is_secret_name(&s[i..i + len]));
        match secret {
            Some(len) => {
                let value_start = i + len + 1;
                out.push_str(&s[copied..value_start]);
                let end = s[value_start..]
                    .find(['&', '#', ' ', '"', '\'', ';'])
                    .map_or(s.len(), |e| value_start + e);
                out.push_str(REDACTED);
                copied = end;
                i = end;
            }
            None => i += s[i..].chars().next().map_or(1, char::len_utf8),
        }
    }
    out.push_str(&s[copied..]);
    out
}

/// The length of the parameter name `rest` starts with, when an `=`
/// follows it before anything that cannot be part of a name.
fn name_end(rest: &str) -> Option<usize> {
    for (at, c) in rest.char_indices() {
        match c {
            '=' => return Some(at),
            '&' | ';' | '?' | '#' | '/' | ' ' | '"' | '\'' | '<' | '>' => return None,
            // Longer than any secret's name could be, however encoded.
            _ if at > 128 => return None,
            _ => {}
        }
    }
    None
}

/// Whether a raw parameter name reads as one of [`SECRET_PARAMS`] once
/// decoded.
fn is_secret_name(raw: &str) -> bool {
    let mut name = raw.to_owned();
    // Decoded until it stops changing (three rounds at most): a name
    // encoded twice is read as the secret's by a server that decodes twice.
    for _ in 0..3 {
        let decoded = percent_encoding::percent_decode_str(&name.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned();
        if decoded == name {
            break;
        }
        name = decoded;
    }
    let name = name
        .trim_matches(|c: char| c.is_whitespace() || c.is_control())
        .to_ascii_lowercase();
    let name = name.strip_suffix("[]").unwrap_or(&name);
    let name = name.trim_matches(|c: char| c.is_whitespace() || c.is_control());
    SECRET_PARAMS.contains(&name)
}

/// Redacts secret query values in every string of a JSON value.
pub(crate) fn redact_value(v: &mut Value) {
    match v {
        Value::String(s) if may_hold_secret(s) => *s = redact_text(s),
        Value::Array(a) => a.iter_mut().for_each(redact_value),
        Value::Object(m) => m.values_mut().for_each(redact_value),
        _ => {}
    }
}

/// A body as JSON, or its (lossy) text when it is not JSON; null when empty.
pub(crate) fn body_value(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    let mut v = serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()));
    redact_value(&mut v);
    v
}

/// The headers worth keeping, key values redacted.
pub(crate) fn captured_headers(headers: &http::HeaderMap) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for name in SECRET_HEADERS {
        if headers.contains_key(name) {
            out.insert(name.to_owned(), REDACTED.to_owned());
        }
    }
    if let Some(ct) = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    {
        out.insert("content-type".into(), ct.to_owned());
    }
    out
}

/// Writes [`Record`]s as JSON lines from a background task.
pub(crate) struct CaptureWriter {
    tx: mpsc::Sender<Queued>,
    task: JoinHandle<std::io::Result<u64>>,
}

/// What travels to the writer task: a line, or a request to report back
/// once every line queued before it is on disk.
enum Queued {
    Line(Box<Record>),
    Flush(oneshot::Sender<()>),
}

/// Lines queued before the live mirror starts dropping them.
pub(crate) const QUEUE: usize = 1024;

impl CaptureWriter {
    /// Opens `path` (appending, or truncating it first) and starts the writer.
    pub(crate) fn start(path: &Path, append: bool) -> std::io::Result<CaptureWriter> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(path)?;
        let (tx, mut rx) = mpsc::channel::<Queued>(QUEUE);
        let task = tokio::task::spawn_blocking(move || {
            let mut out = std::io::BufWriter::new(file);
            let mut lines = 0u64;
            let mut waiting = Vec::new();
            while let Some(first) = rx.blocking_recv() {
                // Take what is queued, then flush, so readers see whole lines soon.
                let mut next = Some(first);
                while let Some(queued) = next {
                    match queued {
                        Queued::Line(rec) => {
                            write_line(&mut out, &rec)?;
                            lines += 1;
                        }
                        Queued::Flush(done) => waiting.push(done),
                    }
                    next = rx.try_recv().ok();
                }
                out.flush()?;
                for done in waiting.drain(..) {
                    let _ = done.send(());
                }
            }
            out.flush()?;
            Ok(lines)
        });
        Ok(CaptureWriter { tx, task })
    }

    /// Queues a line without waiting; drops (and counts) it when full.
    pub(crate) fn offer(&self, rec: Record) {
        if self.tx.try_send(Queued::Line(Box::new(rec))).is_err() {
            metrics::counter!(telemetry::SHADOW_CAPTURE_DROPPED).increment(1);
        }
    }

    /// Queues a line, waiting for room.
    pub(crate) async fn write(&self, rec: Record) {
        let _ = self.tx.send(Queued::Line(Box::new(rec))).await;
    }

    /// Waits until every line queued so far is written and flushed to the
    /// file (the file stays open). Returns at once if the writer has failed.
    pub(crate) async fn flush(&self) {
        let (done, written) = oneshot::channel();
        if self.tx.send(Queued::Flush(done)).await.is_ok() {
            let _ = written.await;
        }
    }

    /// Closes the queue and waits until every line is on disk.
    pub(crate) async fn finish(self) -> std::io::Result<u64> {
        drop(self.tx);
        self.task.await.map_err(std::io::Error::other)?
    }
}

fn write_line(out: &mut impl Write, rec: &Record) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, rec)?;
    out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn token_values_are_redacted_wherever_they_appear() {
        assert_eq!(
            redact_text("http://h/log.txt?token=abc&x=1"),
            "http://h/log.txt?token=<redacted>&x=1"
        );
        assert_eq!(redact_text("token=abc"), "token=<redacted>");
        assert_eq!(
            redact_text("/x?api_key=k1&access_token=k2&n=1"),
            "/x?api_key=<redacted>&access_token=<redacted>&n=1"
        );
        assert_eq!(redact_text("a=1&Token=s3cr3t#f"), "a=1&Token=<redacted>#f");
        // Not a parameter name on its own.
        assert_eq!(redact_text("?mytoken=abc"), "?mytoken=abc");
        let mut v = json!({"data": {"all_logs_url": "http://h/l?token=zzz", "n": 1}});
        redact_value(&mut v);
        assert_eq!(v["data"]["all_logs_url"], "http://h/l?token=<redacted>");
    }

    /// Found by a review: names a server decodes to a secret's were
    /// stored as they came.
    #[test]
    fn names_are_compared_after_percent_and_form_decoding() {
        assert_eq!(
            redact_text("search=maps&%74oken=S1&api%2Dkey=S2&+token=S3&api-key%00=S4&n=1"),
            "search=maps&%74oken=<redacted>&api%2Dkey=<redacted>&+token=<redacted>&api-key%00=<redacted>&n=1"
        );
        assert_eq!(
            redact_text("?%2574oken=S&ACCESS%5FTOKEN=S&token[]=S&token%5B%5D=S&%20key%09=S"),
            "?%2574oken=<redacted>&ACCESS%5FTOKEN=<redacted>&token[]=<redacted>&token%5B%5D=<redacted>&%20key%09=<redacted>"
        );
        // Not secrets once decoded either.
        assert_eq!(
            redact_text("my%74oken=a&tokens=b&%6Bey2=c"),
            "my%74oken=a&tokens=b&%6Bey2=c"
        );
        let mut v = json!({"u": "http://h/l?%74oken=zzz&x=1"});
        redact_value(&mut v);
        assert_eq!(v["u"], "http://h/l?%74oken=<redacted>&x=1");
    }

    #[test]
    fn key_query_values_are_redacted_too() {
        assert_eq!(
            redact_text("scraper_slug=a&api-key=s1&apikey=s2;key=s3&KEY=s4#x"),
            "scraper_slug=a&api-key=<redacted>&apikey=<redacted>;key=<redacted>&KEY=<redacted>#x"
        );
        assert_eq!(redact_text("?key="), "?key=<redacted>");
        // Names that merely end in `key` are not keys.
        assert_eq!(redact_text("?monkey=1&keys=2"), "?monkey=1&keys=2");
        // Multi-byte text around a parameter stays intact.
        assert_eq!(redact_text("é?key=ü&ß=1"), "é?key=<redacted>&ß=1");
        let mut v = json!(["http://h/x?apikey=zzz"]);
        redact_value(&mut v);
        assert_eq!(v[0], "http://h/x?apikey=<redacted>");
    }

    #[test]
    fn key_headers_are_redacted() {
        let mut h = http::HeaderMap::new();
        h.insert("api-key", "secret".parse().unwrap());
        h.insert("authorization", "Bearer secret".parse().unwrap());
        h.insert("content-type", "application/json".parse().unwrap());
        let c = captured_headers(&h);
        assert_eq!(c["api-key"], REDACTED);
        assert_eq!(c["authorization"], REDACTED);
        assert!(!format!("{c:?}").contains("secret"));
    }

    #[tokio::test]
    async fn records_round_trip_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.jsonl");
        let w = CaptureWriter::start(&path, false).unwrap();
        let rec = Record {
            id: "1".into(),
            operation: "run_detail".into(),
            at_ms: 5,
            primary: "replay".into(),
            request: CapturedRequest {
                path: Some("/api/v1/run/detail".into()),
                body: json!({"run_slug": "r"}),
                ..Default::default()
            },
            legacy: Some(Side {
                at_ms: 5,
                latency_ms: 1.5,
                status: Some(200),
                body: json!({"code": 0}),
                error: None,
            }),
            translated: None,
            baseline: None,
        };
        w.write(rec.clone()).await;
        w.offer(rec.clone());
        // A flush puts both lines in the file while the writer stays open.
        w.flush().await;
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        let back: Record = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(back, rec);
        w.write(rec.clone()).await;
        assert_eq!(w.finish().await.unwrap(), 3);
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);
    }
}
