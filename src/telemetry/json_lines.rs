//! The JSON log line, the last thing a request does before its answer is
//! written: the access line `pipeline::finish` writes, and any other event, in the layout
//! of tracing-subscriber's `json()` formatter (flattened event fields, the
//! current span under `span`), written straight into the line's buffer.
//!
//! tracing-subscriber's own formatter keeps a span's fields as a JSON object
//! and, for every recorded field and every event, parses that text back into
//! a map and writes it out again; at the default `info` level that added
//! two thirds to what a translated run detail cost (deploy/bench/RESULTS.md,
//! "The default log level: the access line"). Here a span's fields are kept
//! as the members of an object (`"method":"POST","path":"/api/v1/run/detail"`),
//! a recorded field is appended to them, and an event copies them as they are.

use std::fmt::{self, Write};

use v1compat_json::escape::first_special;

use tracing::field::{Field, Visit};
use tracing::span::Record;
use tracing::{Event, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
#[cfg(doc)]
use tracing_subscriber::fmt::time::SystemTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// A span's fields as the members of a JSON object, without the braces.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct JsonFields;

impl<'w> FormatFields<'w> for JsonFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        with_buffer(|buf| {
            let mut members = Members::new(buf, true);
            fields.record(&mut members);
            members.result?;
            writer.write_str(buf)
        })
    }

    /// A field recorded after the span was made joins the others, appended
    /// to their text directly (the server's request spans are made with
    /// all theirs; an in-process caller's gets `request_id` and `operation`
    /// recorded by admission).
    fn add_fields(
        &self,
        current: &'w mut FormattedFields<Self>,
        fields: &Record<'_>,
    ) -> fmt::Result {
        let first = current.fields.is_empty();
        // Room for a field or two, made once rather than step by step.
        current.fields.reserve(64);
        let mut members = Members::new(&mut current.fields, first);
        fields.record(&mut members);
        members.result
    }
}

/// `write` given a buffer to build text in, then to hand on whole: the
/// forty-odd pieces of a line go into it directly instead of one by one
/// through the writer tracing-subscriber passes (a call through a trait
/// object each). One buffer a thread, kept; a fresh one if writing a line
/// logs something itself.
fn with_buffer<R>(write: impl FnOnce(&mut String) -> R) -> R {
    thread_local! {
        static BUFFER: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    BUFFER.with(|buffer| match buffer.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            write(&mut buf)
        }
        Err(_) => write(&mut String::new()),
    })
}

/// One event as one JSON line: `timestamp` (as `T` writes it, e.g.
/// [`SystemTime`]), `level`, the event's fields, `target`, and the current
/// span (its fields and `name`) under `span`.
#[derive(Debug)]
pub(super) struct JsonLines<T> {
    timer: T,
}

impl<T> JsonLines<T> {
    /// Lines whose `timestamp` `timer` writes.
    pub(super) fn with_timer(timer: T) -> JsonLines<T> {
        JsonLines { timer }
    }
}

impl<S, T> FormatEvent<S, JsonFields> for JsonLines<T>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    T: FormatTime,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        with_buffer(|line| {
            let meta = event.metadata();
            line.push_str("{\"timestamp\":\"");
            self.timer.format_time(&mut Writer::new(&mut *line))?;
            line.push_str("\",\"level\":\"");
            line.push_str(meta.level().as_str());
            line.push('"');
            let mut members = Members::new(&mut *line, false);
            event.record(&mut members);
            members.result?;
            line.push_str(",\"target\":");
            string(line, meta.target())?;
            let span = event
                .parent()
                .and_then(|id| ctx.span(id))
                .or_else(|| ctx.lookup_current());
            if let Some(span) = span {
                line.push_str(",\"span\":{");
                if let Some(fields) = span.extensions().get::<FormattedFields<JsonFields>>() {
                    if !fields.fields.is_empty() {
                        line.push_str(&fields.fields);
                        line.push(',');
                    }
                }
                line.push_str("\"name\":");
                string(line, span.metadata().name())?;
                line.push('}');
            }
            line.push_str("}\n");
            writer.write_str(line)
        })
    }
}

/// Writes each visited field as `"name":value`, comma-separated.
struct Members<'a, W> {
    out: &'a mut W,
    first: bool,
    result: fmt::Result,
}

impl<'a, W: Write> Members<'a, W> {
    fn new(out: &'a mut W, first: bool) -> Self {
        Members {
            out,
            first,
            result: Ok(()),
        }
    }

    fn member(&mut self, field: &Field, value: impl FnOnce(&mut W) -> fmt::Result) {
        if self.result.is_err() {
            return;
        }
        let out = &mut *self.out;
        let first = std::mem::replace(&mut self.first, false);
        self.result = (|| {
            out.write_str(if first { "\"" } else { ",\"" })?;
            escape(out, field.name())?;
            out.write_str("\":")?;
            value(out)
        })();
    }
}

impl<W: Write> Visit for Members<'_, W> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.member(field, |w| string(w, value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.member(field, |w| w.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.member(field, |w| w.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.member(field, |w| w.write_str(if value { "true" } else { "false" }));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.member(field, |w| float(w, value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.member(field, |w| {
            w.write_str("\"")?;
            write!(Escaped(w), "{value}")?;
            w.write_str("\"")
        });
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.member(field, |w| {
            w.write_str("\"")?;
            write!(Escaped(w), "{value:?}")?;
            w.write_str("\"")
        });
    }
}

/// A float as `{:?}` writes it (as serde_json does: the shortest text that
/// reads back as the same `f64`), `null` when it is not finite. The floats
/// logged are mostly durations in milliseconds rounded to the microsecond:
/// those are written from two integers, without `core::fmt`'s search for
/// the shortest digits. Under 10¹² a number of thousandths has at most 15
/// significant digits, and every such decimal reads back as a different
/// `f64`, so no shorter text names the same number.
fn float(w: &mut impl Write, value: f64) -> fmt::Result {
    if !value.is_finite() {
        return w.write_str("null");
    }
    let thousandths = (value * 1e3).round();
    if !(1e-3..1e12).contains(&value.abs()) || thousandths / 1e3 != value {
        return write!(w, "{value:?}");
    }
    let n = thousandths.abs() as u64;
    if value < 0.0 {
        w.write_str("-")?;
    }
    w.write_str(itoa::Buffer::new().format(n / 1000))?;
    let fraction = n % 1000;
    let digits = [
        b'.',
        b'0' + (fraction / 100) as u8,
        b'0' + (fraction / 10 % 10) as u8,
        b'0' + (fraction % 10) as u8,
    ];
    // At least one digit after the point, as `{:?}` writes `1.0`.
    let zeros = digits[2..].iter().rev().take_while(|&&d| d == b'0').count();
    w.write_str(std::str::from_utf8(&digits[..4 - zeros]).map_err(|_| fmt::Error)?)
}

/// The line's timestamp in the layout of tracing-subscriber's `SystemTime`
/// (`2026-11-25T16:45:53.123456Z`: UTC, microseconds), built by humantime
/// and written at once, where tracing-subscriber writes its seven numbers
/// one by one through `core::fmt` (a quarter of what an access line cost).
/// A clock humantime cannot write (before 1970, from the year 10000 on) is
/// left to tracing-subscriber's.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct UtcMicros;

impl FormatTime for UtcMicros {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        let now = std::time::SystemTime::now();
        match now.duration_since(std::time::UNIX_EPOCH) {
            Ok(since) if since.as_secs() < YEAR_10000 => {
                write!(w, "{}", humantime::format_rfc3339_micros(now))
            }
            _ => tracing_subscriber::fmt::time::SystemTime.format_time(w),
        }
    }
}

/// 10000-01-01T00:00:00Z, in seconds since the epoch.
const YEAR_10000: u64 = 253_402_300_800;

/// `s` as a JSON string.
fn string(w: &mut impl Write, s: &str) -> fmt::Result {
    w.write_str("\"")?;
    escape(w, s)?;
    w.write_str("\"")
}

/// `s` escaped as serde_json escapes a string's contents: `"`, `\` and
/// control characters; runs that need nothing are written whole (almost
/// every string: names, ids, paths).
fn escape(w: &mut (impl Write + ?Sized), s: &str) -> fmt::Result {
    let Some(first) = first_special(s.as_bytes()) else {
        return w.write_str(s);
    };
    let mut start = 0;
    for (i, b) in s.bytes().enumerate().skip(first) {
        let escaped = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        w.write_str(&s[start..i])?;
        if escaped.is_empty() {
            write!(w, "\\u{b:04x}")?;
        } else {
            w.write_str(escaped)?;
        }
        start = i + 1;
    }
    w.write_str(&s[start..])
}

/// A `fmt::Write` that escapes what is written through it.
struct Escaped<'a, W: ?Sized>(&'a mut W);

impl<W: Write + ?Sized> Write for Escaped<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        escape(self.0, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::fmt::MakeWriter;

    /// Lines written into memory.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Lines;
        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    impl Lines {
        fn parsed(&self) -> Vec<Value> {
            let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect()
        }
    }

    /// The events every layout is checked on: fields of each kind, text that
    /// needs escaping, a span with a field recorded late, nested spans, an
    /// event outside any span.
    fn emit() {
        #[derive(Debug)]
        struct Problem;
        impl fmt::Display for Problem {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("broke \"badly\"\n")
            }
        }
        impl std::error::Error for Problem {}

        tracing::info!(target: "v1compat", version = "0.1.0", "v1compat listening");
        let span = tracing::info_span!(
            "request",
            method = %"POST",
            path = "/api/v1/run/detail",
            request_id = tracing::field::Empty,
            operation = tracing::field::Empty
        );
        let _entered = span.enter();
        span.record("request_id", "01KD4N6P8R0T2V4W6Y8Z0B2D4F");
        span.record("operation", "run_detail");
        let code: Option<i64> = Some(0);
        let missing: Option<&str> = None;
        tracing::info!(
            target: "v1compat::access",
            method = %"POST",
            status = 200u16,
            code,
            missing,
            duration_ms = 1.25,
            whole = 3.0,
            negative = -7i64,
            ok = true,
            not_a_number = f64::NAN,
            text = "tab\there \"quoted\" back\\slash \u{1} é 😀",
            "answered"
        );
        let inner = tracing::warn_span!("inner", depth = 2u64);
        inner.in_scope(|| {
            let problem = Problem;
            tracing::warn!(error = &problem as &(dyn std::error::Error + 'static), debugged = ?vec!["a\"b"], "failed {}", 42);
        });
        let empty = tracing::info_span!("empty");
        empty.in_scope(|| tracing::error!("inside a span with no fields"));
    }

    /// What tracing-subscriber's own `json()` layout writes for [`emit`].
    fn reference() -> Vec<Value> {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(lines.clone())
            .with_timer(())
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        lines.parsed()
    }

    fn ours() -> Vec<Value> {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(lines.clone())
            .fmt_fields(JsonFields)
            .event_format(JsonLines::with_timer(()))
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        lines.parsed()
    }

    #[test]
    fn lines_hold_what_the_tracing_json_layout_holds() {
        let (ours, reference) = (ours(), reference());
        assert_eq!(ours.len(), 4);
        assert_eq!(ours, reference);
        // Spot checks of what the comparison covers.
        assert_eq!(ours[1]["span"]["request_id"], "01KD4N6P8R0T2V4W6Y8Z0B2D4F");
        assert_eq!(ours[1]["span"]["operation"], "run_detail");
        assert_eq!(ours[1]["span"]["name"], "request");
        assert_eq!(ours[1]["code"], 0);
        assert!(ours[1].get("missing").is_none());
        assert_eq!(ours[1]["not_a_number"], Value::Null);
        assert_eq!(ours[2]["error"], "broke \"badly\"\n");
        assert_eq!(ours[3]["span"], serde_json::json!({"name": "empty"}));
        assert!(ours[0].get("span").is_none());
    }

    #[test]
    fn floats_are_written_as_debug_writes_them() {
        let mut values = vec![
            0.0, -0.0, 1.0, -1.0, 0.001, 0.0005, 1.25, 1.5e-4, 12.345, 12.3456, 0.1, 0.2, 0.3,
            1e11, 1e12, 1e15, 1e16, 1e300, -7.007, 5e-324,
        ];
        values.extend([999_999_999_999.999, 0.999_999_9]);
        // Durations as the access line computes them, from a microsecond
        // to hours.
        for micros in (0..20_000_000_000u64).step_by(9_999_991).chain(0..5000) {
            values.push(micros as f64 / 1e3);
        }
        for v in values {
            let mut out = String::new();
            float(&mut out, v).unwrap();
            assert_eq!(out, format!("{v:?}"), "{v}");
        }
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let mut out = String::new();
            float(&mut out, v).unwrap();
            assert_eq!(out, "null");
        }
    }

    #[test]
    fn timestamps_have_tracing_subscribers_layout() {
        let written = |timer: &dyn FormatTime| {
            let mut out = String::new();
            timer.format_time(&mut Writer::new(&mut out)).unwrap();
            out
        };
        // Taken between two of tracing-subscriber's: the same second as
        // one of them, unless the clock was set back in between.
        let reference = tracing_subscriber::fmt::time::SystemTime;
        let before = written(&reference);
        let ours = written(&UtcMicros);
        let after = written(&reference);
        assert!(
            ours[..20] == before[..20] || ours[..20] == after[..20],
            "{before} {ours} {after}"
        );
        let shape = |s: &str| s.replace(|c: char| c.is_ascii_digit(), "9");
        assert_eq!(shape(&ours), "9999-99-99T99:99:99.999999Z");
        assert_eq!(shape(&before), shape(&ours));
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        for s in [
            "plain",
            "",
            "\"",
            "\\",
            "a\u{0}b\u{1f}c\u{7f}",
            "\n\r\t\u{8}\u{c}",
            "é😀",
        ] {
            let mut out = String::new();
            string(&mut out, s).unwrap();
            assert_eq!(out, serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }
}
