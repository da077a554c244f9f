//! The fields of a text log line, the last thing a line does before it is
//! written (`log.format = "text"`): `message name=value …`, in the layout of
//! tracing-subscriber's own text fields, with every control character of
//! every value escaped. A value can come from a client or from V2 (an
//! error's message, a worker's name): a newline in it would end the line
//! and forge the next one, an ESC would reach the operator's terminal. So
//! `\n`, `\r`, `\t`, ESC and the other C0 and C1 controls and DEL are
//! written as `\n`, `\r`, `\t`, `\u{1b}` …; the JSON format escapes them
//! as JSON does.

use std::fmt::{self, Write};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::FormatFields;

/// The text layout's fields, control characters escaped.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct EscapedFields;

impl<'w> FormatFields<'w> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = Fields {
            out: Escaping(&mut writer),
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Writes what it is given with control characters escaped.
struct Escaping<'a, W: Write>(&'a mut W);

impl<W: Write> Write for Escaping<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s;
        while let Some(at) = rest.find(is_control) {
            self.0.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            match c {
                '\n' => self.0.write_str("\\n")?,
                '\r' => self.0.write_str("\\r")?,
                '\t' => self.0.write_str("\\t")?,
                c => write!(self.0, "\\u{{{:x}}}", c as u32)?,
            }
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

fn is_control(c: char) -> bool {
    c.is_control()
}

struct Fields<'a, W: Write> {
    out: Escaping<'a, W>,
    first: bool,
    result: fmt::Result,
}

impl<W: Write> Fields<'_, W> {
    fn pad(&mut self) -> fmt::Result {
        if std::mem::take(&mut self.first) {
            Ok(())
        } else {
            // The separator goes around the escaping: it is ours.
            self.out.0.write_char(' ')
        }
    }
}

impl<W: Write> Visit for Fields<'_, W> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.record_debug(field, &format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        let name = field.name();
        // Metadata of events bridged from the `log` crate, already written.
        if name.starts_with("log.") {
            return;
        }
        self.result = self.pad().and_then(|()| match name {
            "message" => write!(self.out, "{value:?}"),
            name => {
                let name = name.strip_prefix("r#").unwrap_or(name);
                self.out.0.write_str(name)?;
                self.out.0.write_char('=')?;
                write!(self.out, "{value:?}")
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }

    #[test]
    fn a_newline_or_an_escape_in_any_field_stays_on_its_line() {
        let out = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .fmt_fields(EscapedFields)
            .with_writer(out.clone())
            .finish();
        let forged =
            "boom\nFAKE INFO v1compat::access: answered INJECTED \u{1b}[31mRED\u{1b}[0m\u{9b}";
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("request", path = tracing::field::display(forged));
            let _in = span.enter();
            tracing::warn!(
                error = tracing::field::display(forged),
                quoted = forged,
                code = 5000,
                "failed {}",
                forged
            );
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{9b}'),
            "{text}"
        );
        assert!(
            text.contains("error=boom\\nFAKE INFO v1compat::access: answered INJECTED \\u{1b}[31mRED\\u{1b}[0m\\u{9b}"),
            "{text}"
        );
        assert!(text.contains("path=boom\\nFAKE"), "span fields too: {text}");
        assert!(text.contains("code=5000"), "{text}");
        assert!(text.contains("failed boom\\nFAKE"), "{text}");
    }
}
