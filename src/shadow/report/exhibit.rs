//! Exhibits, off the request path: one differing request as a report shows
//! it — the request, and the legacy and translated answers side by side,
//! pretty-printed with every line of a differing field marked. Built once,
//! when a request is first kept as a sample, and bounded: long answers keep
//! only the lines around what differs.
//!
//! Secrets: captures are already redacted; an exhibit redacts again with
//! the capture's own functions (a capture may come from elsewhere, or be
//! edited by hand), and also blanks any JSON member named like a key
//! (`api-key`, `authorization`, `token`, …), so no key reaches a page.

use std::collections::BTreeSet;

use serde_json::Value;

use super::super::capture::{
    redact_text, redact_value, CapturedRequest, Side, REDACTED, SECRET_HEADERS,
};
use super::super::diff::normalise;

/// Panes of up to this many lines are shown whole; longer ones keep their
/// first lines and the context of marked lines, the rest folded.
pub(crate) const WHOLE_LINES: usize = 40;
/// Lines of one pane kept at most, however many are marked.
pub(crate) const MAX_LINES: usize = 200;
/// Lines kept around each marked line when a pane is shortened.
const CONTEXT: usize = 3;
/// Characters of one line shown.
const MAX_LINE_CHARS: usize = 160;

/// JSON members whose values are keys wherever they appear.
const SECRET_MEMBERS: [&str; 7] = [
    "api-key",
    "api_key",
    "apikey",
    "authorization",
    "token",
    "access_token",
    "service_key",
];

/// One line of a pane.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// Text, and whether it belongs to a differing field.
    Text { text: String, marked: bool },
    /// Lines left out.
    Folded(usize),
}

/// One side's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Pane {
    pub status: Option<u16>,
    /// Why there is no answer.
    pub error: Option<String>,
    pub lines: Vec<Line>,
}

/// One differing request.
#[derive(Debug, Clone, PartialEq)]
pub struct Exhibit {
    pub id: String,
    /// `METHOD /path?query`.
    pub target: String,
    /// Captured headers, keys redacted.
    pub headers: Vec<(String, String)>,
    pub body: Vec<Line>,
    pub legacy: Pane,
    pub translated: Pane,
    /// Concrete paths that differ (both names of a rename).
    pub paths: Vec<String>,
}

impl Exhibit {
    /// The exhibit of a request whose answers differ at `paths`.
    pub fn new(
        id: &str,
        request: &CapturedRequest,
        legacy: &Side,
        translated: &Side,
        paths: BTreeSet<String>,
    ) -> Exhibit {
        let method = request.method.as_deref().unwrap_or("");
        let mut target = format!(
            "{method} {}",
            redact_text(request.path.as_deref().unwrap_or(""))
        );
        if let Some(q) = request.query.as_deref().filter(|q| !q.is_empty()) {
            target.push('?');
            target.push_str(&redact_text(q));
        }
        let headers = request
            .headers
            .iter()
            .map(|(k, v)| {
                let secret = SECRET_HEADERS.contains(&k.to_ascii_lowercase().as_str());
                (
                    k.clone(),
                    if secret {
                        REDACTED.to_owned()
                    } else {
                        redact_text(v)
                    },
                )
            })
            .collect();
        let none = BTreeSet::new();
        let body = match &request.body {
            Value::Null => Vec::new(),
            b => shorten(lines(b, &none)),
        };
        Exhibit {
            id: id.to_owned(),
            target: target.trim().to_owned(),
            headers,
            body,
            legacy: pane(legacy, &paths),
            translated: pane(translated, &paths),
            paths: paths.into_iter().collect(),
        }
    }

    /// Whether the HTTP status is one of the differing fields.
    pub fn status_differs(&self) -> bool {
        self.paths.iter().any(|p| p == "http_status")
    }
}

fn pane(side: &Side, paths: &BTreeSet<String>) -> Pane {
    Pane {
        status: side.status,
        error: side.error.clone(),
        lines: match (&side.status, &side.body) {
            (None, _) => Vec::new(),
            (Some(_), body) => shorten(lines(body, paths)),
        },
    }
}

/// Blanks members named like keys, then redacts key query values in
/// every string, as captures do.
pub(crate) fn redacted(v: &Value) -> Value {
    fn members(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for (k, v) in m.iter_mut() {
                    if SECRET_MEMBERS.contains(&k.to_ascii_lowercase().as_str()) && !v.is_null() {
                        *v = Value::String(REDACTED.into());
                    } else {
                        members(v);
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(members),
            _ => {}
        }
    }
    let mut v = v.clone();
    members(&mut v);
    redact_value(&mut v);
    v
}

/// Whether a line at `path` belongs to one of the differing `paths`: the
/// field itself or below it; a multiset path (`data.s[*]`) covers every
/// element. The whole answer when it was not JSON (`body`).
fn marked(path: &str, paths: &BTreeSet<String>) -> bool {
    let below = |p: &str, d: &str| match p.strip_prefix(d) {
        Some(rest) => rest.is_empty() || rest.starts_with('.') || rest.starts_with('['),
        None => false,
    };
    paths
        .iter()
        .any(|d| d == "body" || below(path, d) || (d.contains("[*]") && below(&normalise(path), d)))
}

/// The answer pretty-printed (two-space indent, members sorted by name so
/// both sides line up — the diff ignores member order), each line marked
/// when its field differs. Paths are those of the diff engine:
/// `data.list[3].status`.
pub(crate) fn lines(v: &Value, paths: &BTreeSet<String>) -> Vec<Line> {
    let v = redacted(v);
    let mut out = Vec::new();
    if let Value::Object(_) = v {
        emit(&v, "", 0, None, false, paths, &mut out);
    } else {
        // Not JSON (kept as text): the whole of it, line by line.
        let text = match &v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let m = marked("body", paths);
        out.extend(text.lines().map(|l| Line::Text {
            text: l.to_owned(),
            marked: m,
        }));
    }
    out
}

fn push(out: &mut Vec<Line>, indent: usize, text: String, marked: bool) {
    let mut text = format!("{:width$}{text}", "", width = indent * 2);
    if text.chars().count() > MAX_LINE_CHARS {
        text = text.chars().take(MAX_LINE_CHARS - 1).collect::<String>() + "…";
    }
    out.push(Line::Text { text, marked });
}

fn emit(
    v: &Value,
    path: &str,
    indent: usize,
    key: Option<&str>,
    comma: bool,
    paths: &BTreeSet<String>,
    out: &mut Vec<Line>,
) {
    let label = key.map_or(String::new(), |k| format!("{}: ", Value::from(k)));
    let tail = if comma { "," } else { "" };
    let m = !path.is_empty() && marked(path, paths);
    let child = |k: &str| {
        if path.is_empty() {
            k.to_owned()
        } else {
            format!("{path}.{k}")
        }
    };
    match v {
        Value::Object(map) if !map.is_empty() => {
            push(out, indent, format!("{label}{{"), m);
            let n = map.len();
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            for (i, (k, v)) in members.into_iter().enumerate() {
                emit(v, &child(k), indent + 1, Some(k), i + 1 < n, paths, out);
            }
            push(out, indent, format!("}}{tail}"), m);
        }
        Value::Array(items) if !items.is_empty() => {
            push(out, indent, format!("{label}["), m);
            let n = items.len();
            for (i, item) in items.iter().enumerate() {
                emit(
                    item,
                    &format!("{path}[{i}]"),
                    indent + 1,
                    None,
                    i + 1 < n,
                    paths,
                    out,
                );
            }
            push(out, indent, format!("]{tail}"), m);
        }
        leaf => push(out, indent, format!("{label}{leaf}{tail}"), m),
    }
}

/// A pane of at most [`MAX_LINES`] lines (and fold marks): up to
/// [`WHOLE_LINES`] whole; longer ones keep the first lines and those around
/// marked lines, the rest folded.
pub(crate) fn shorten(all: Vec<Line>) -> Vec<Line> {
    if all.len() <= WHOLE_LINES {
        return all;
    }
    let mut keep = vec![false; all.len()];
    for k in keep.iter_mut().take(CONTEXT * 4) {
        *k = true;
    }
    for (i, l) in all.iter().enumerate() {
        if matches!(l, Line::Text { marked: true, .. }) {
            let from = i.saturating_sub(CONTEXT);
            let to = (i + CONTEXT + 1).min(all.len());
            keep[from..to].iter_mut().for_each(|k| *k = true);
        }
    }
    let mut out = Vec::new();
    let mut folded = 0;
    let mut kept = 0;
    for (line, k) in all.into_iter().zip(keep) {
        if k && kept < MAX_LINES {
            if folded > 0 {
                out.push(Line::Folded(folded));
                folded = 0;
            }
            out.push(line);
            kept += 1;
        } else {
            folded += 1;
        }
    }
    if folded > 0 {
        out.push(Line::Folded(folded));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(p: &[&str]) -> BTreeSet<String> {
        p.iter().map(|s| (*s).to_owned()).collect()
    }

    fn marked_text(lines: &[Line]) -> Vec<String> {
        lines
            .iter()
            .filter_map(|l| match l {
                Line::Text { text, marked: true } => Some(text.trim().to_owned()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn differing_fields_are_marked_and_nothing_else() {
        let v = json!({"code": 0, "data": {"parameters": {"system": {"cpus": 1, "memory_bytes": 512}}, "list": [{"s": 1}, {"s": 2}]}});
        let l = lines(
            &v,
            &set(&["data.parameters.system.memory_bytes", "data.list[1].s"]),
        );
        assert_eq!(marked_text(&l), vec!["\"s\": 2", "\"memory_bytes\": 512"]);
        // A differing object marks its own lines and everything inside.
        let l = lines(&v, &set(&["data.parameters"]));
        assert_eq!(marked_text(&l).len(), 6, "{l:?}");
        // A multiset path covers every element.
        let v = json!({"data": {"s": ["a", "b"]}});
        assert_eq!(
            marked_text(&lines(&v, &set(&["data.s[*]"]))),
            vec!["\"a\",", "\"b\""]
        );
    }

    #[test]
    fn the_request_and_answers_show_no_key() {
        let req = CapturedRequest {
            method: Some("GET".into()),
            path: Some("/api/store".into()),
            query: Some("search=a&token=s3cr3t".into()),
            headers: [
                ("api-key".to_owned(), "s3cr3t".to_owned()),
                ("Authorization".to_owned(), "Bearer s3cr3t".to_owned()),
                ("content-type".to_owned(), "application/json".to_owned()),
            ]
            .into(),
            body: json!({"api_key": "s3cr3t", "run_slug": "r"}),
            operation: None,
        };
        let side = |body: Value| Side {
            at_ms: 0,
            latency_ms: 1.0,
            status: Some(200),
            body,
            error: None,
        };
        let e = Exhibit::new(
            "01J",
            &req,
            &side(json!({"data": {"url": "http://h/x?token=s3cr3t", "token": "s3cr3t"}})),
            &side(json!({"data": {"url": "http://h/y"}})),
            set(&["data.url", "data.token", "http_status"]),
        );
        let all = format!("{e:?}");
        assert!(!all.contains("s3cr3t"), "{all}");
        assert_eq!(e.target, "GET /api/store?search=a&token=<redacted>");
        assert!(e
            .headers
            .contains(&("content-type".into(), "application/json".into())));
        assert!(e.status_differs());
        assert_eq!(
            marked_text(&e.legacy.lines),
            vec![
                "\"token\": \"<redacted>\",",
                "\"url\": \"http://h/x?token=<redacted>\""
            ]
        );
    }

    #[test]
    fn long_answers_keep_the_context_of_marked_lines() {
        let list: Vec<Value> = (0..500).map(|i| json!({"n": i})).collect();
        let v = json!({"data": {"list": list}});
        let l = shorten(lines(&v, &set(&["data.list[400].n"])));
        assert!(l.len() <= 4 * CONTEXT + 2 * CONTEXT + 1 + 2, "{l:?}");
        assert_eq!(marked_text(&l), vec!["\"n\": 400"]);
        let folded: usize = l
            .iter()
            .map(|l| match l {
                Line::Folded(n) => *n,
                Line::Text { .. } => 1,
            })
            .sum();
        assert_eq!(folded, lines(&v, &BTreeSet::new()).len());
        // Text that is not JSON is shown as text, marked as a whole.
        let t = lines(&json!("<html>\nx"), &set(&["body"]));
        assert_eq!(marked_text(&t), vec!["<html>", "x"]);
    }
}
