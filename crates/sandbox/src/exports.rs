//! Result exports: renders a run's rows into a file (csv, json, jsonl, xml, html, rss
//! as real formats; xlsx/xls as tab-separated text, which spreadsheet tools open) and
//! keeps it in memory, served at `/__sandbox/exports/{name}` on the V2 listener.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Mutex;

use bytes::Bytes;
use serde_json::{Map, Value};

use super::catalog::Column;
use super::lock;

/// Exports kept before the oldest is forgotten (bounds memory).
const KEEP: usize = 200;

/// A stored file: content type and bytes.
type File = (&'static str, Bytes);

#[derive(Default)]
pub(crate) struct Exports {
    /// Files by name, and names oldest first (for eviction).
    inner: Mutex<(HashMap<String, File>, VecDeque<String>)>,
}

impl Exports {
    /// Render and store an export; returns its signed-looking download URL.
    pub(crate) fn create(
        &self,
        addr: SocketAddr,
        format: &str,
        columns: &[Column],
        rows: &[Map<String, Value>],
    ) -> String {
        let (ext, content_type, body) = render(format, columns, rows);
        let name = format!("exported_result_{format}_{}.{ext}", ulid::Ulid::new());
        {
            let mut g = lock(&self.inner);
            let (files, order) = &mut *g;
            files.insert(name.clone(), (content_type, Bytes::from(body)));
            order.push_back(name.clone());
            while order.len() > KEEP {
                if let Some(old) = order.pop_front() {
                    files.remove(&old);
                }
            }
        }
        let sign: u64 = rand::random();
        format!("http://{addr}/__sandbox/exports/{name}?sign={sign:016x}")
    }

    pub(crate) fn get(&self, name: &str) -> Option<File> {
        lock(&self.inner).0.get(name).cloned()
    }
}

fn cell_text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Only the selected columns, in column order (the internal data id is left out).
fn project(columns: &[Column], row: &Map<String, Value>) -> Map<String, Value> {
    columns
        .iter()
        .map(|c| {
            (
                c.key.clone(),
                row.get(&c.key).cloned().unwrap_or(Value::Null),
            )
        })
        .collect()
}

/// (extension, content type, bytes) of an export.
pub(crate) fn render(
    format: &str,
    columns: &[Column],
    rows: &[Map<String, Value>],
) -> (&'static str, &'static str, Vec<u8>) {
    let mut out = String::new();
    match format {
        "json" => {
            let list: Vec<Value> = rows
                .iter()
                .map(|r| Value::Object(project(columns, r)))
                .collect();
            let text = serde_json::to_string(&list).unwrap_or_else(|_| "[]".into());
            return ("json", "application/json", text.into_bytes());
        }
        "jsonl" => {
            for r in rows {
                out.push_str(&Value::Object(project(columns, r)).to_string());
                out.push('\n');
            }
            return ("jsonl", "application/x-ndjson", out.into_bytes());
        }
        "xml" | "rss" => {
            let (root, item) = if format == "rss" {
                ("channel", "item")
            } else {
                ("items", "item")
            };
            out.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
            if format == "rss" {
                out.push_str("<rss version=\"2.0\">");
            }
            out.push_str(&format!("<{root}>"));
            for r in rows {
                out.push_str(&format!("<{item}>"));
                for c in columns {
                    out.push_str(&format!(
                        "<{0}>{1}</{0}>",
                        c.key,
                        xml_escape(&cell_text(r.get(&c.key)))
                    ));
                }
                out.push_str(&format!("</{item}>"));
            }
            out.push_str(&format!("</{root}>"));
            if format == "rss" {
                out.push_str("</rss>");
            }
            let ct = if format == "rss" {
                "application/rss+xml"
            } else {
                "application/xml"
            };
            return (
                if format == "rss" { "rss" } else { "xml" },
                ct,
                out.into_bytes(),
            );
        }
        "html" => {
            out.push_str("<table><thead><tr>");
            for c in columns {
                out.push_str(&format!("<th>{}</th>", xml_escape(&c.label)));
            }
            out.push_str("</tr></thead><tbody>");
            for r in rows {
                out.push_str("<tr>");
                for c in columns {
                    out.push_str(&format!(
                        "<td>{}</td>",
                        xml_escape(&cell_text(r.get(&c.key)))
                    ));
                }
                out.push_str("</tr>");
            }
            out.push_str("</tbody></table>");
            return ("html", "text/html; charset=utf-8", out.into_bytes());
        }
        "xlsx" | "xls" => {
            let line = |cells: Vec<String>| cells.join("\t") + "\n";
            out.push_str(&line(columns.iter().map(|c| c.key.clone()).collect()));
            for r in rows {
                out.push_str(&line(
                    columns
                        .iter()
                        .map(|c| cell_text(r.get(&c.key)).replace(['\t', '\n'], " "))
                        .collect(),
                ));
            }
            let ext = if format == "xlsx" { "xlsx" } else { "xls" };
            return (ext, "application/vnd.ms-excel", out.into_bytes());
        }
        _ => {}
    }
    // csv (the default): header row of keys, then values.
    let line = |cells: Vec<String>| cells.join(",") + "\r\n";
    out.push_str(&line(columns.iter().map(|c| csv_field(&c.key)).collect()));
    for r in rows {
        out.push_str(&line(
            columns
                .iter()
                .map(|c| csv_field(&cell_text(r.get(&c.key))))
                .collect(),
        ));
    }
    ("csv", "text/csv; charset=utf-8", out.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ColumnType;
    use serde_json::json;

    fn cols() -> Vec<Column> {
        vec![
            Column {
                key: "title".into(),
                label: "Title".into(),
                kind: ColumnType::Text,
            },
            Column {
                key: "rating".into(),
                label: "Rating".into(),
                kind: ColumnType::Number,
            },
        ]
    }

    fn rows() -> Vec<Map<String, Value>> {
        vec![
            json!({"__coreclaw_data_id__":"x","title":"a, \"b\"","rating":4.5})
                .as_object()
                .cloned()
                .unwrap(),
        ]
    }

    #[test]
    fn csv_quotes_and_drops_internal_id() {
        let (ext, _, b) = render("csv", &cols(), &rows());
        assert_eq!(ext, "csv");
        assert_eq!(
            String::from_utf8(b).unwrap(),
            "title,rating\r\n\"a, \"\"b\"\"\",4.5\r\n"
        );
    }

    #[test]
    fn json_and_jsonl() {
        let (_, _, b) = render("json", &cols(), &rows());
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v, json!([{"title":"a, \"b\"","rating":4.5}]));
        let (_, _, b) = render("jsonl", &cols(), &rows());
        assert_eq!(String::from_utf8(b).unwrap().lines().count(), 1);
    }

    #[test]
    fn other_formats_render() {
        for f in ["xml", "rss", "html", "xlsx", "xls"] {
            let (_, _, b) = render(f, &cols(), &rows());
            assert!(!b.is_empty(), "{f}");
        }
    }
}
