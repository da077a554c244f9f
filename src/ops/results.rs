//! Results: `POST /api/v1/run/result/list` → `GET /api/v2/worker-runs/{runId}/result`
//! and `POST /api/v1/run/result/export` → `GET /api/v2/worker-runs/{runId}/result/export`.
//!
//! | V1 | V2 | rule |
//! |---|---|---|
//! | `run_slug` (body) | `{runId}` (path) | checked, one segment |
//! | `page_index` (default 1), `page_size` (default 10, ≤ `limits.max_page_size`) | `offset`, `limit` | sent explicitly; above 100 rows, 100-row pages fetched concurrently and sliced |
//! | `data.count`, `data.list[]` | same | rows unchanged (`__coreclaw_data_id__` kept) |
//! | `data.headers[].format` | — (V2 has none) | kept if V2 sends one; else `number` when the column has at least one non-null value in the page and every non-null value is a JSON number, otherwise `text`; a page past the end of a non-empty result reads them off the run's first row (one extra 1-row V2 call) |
//! | `data.page_index`, `data.page_size` | — | echo of the V1 request |
//! | export `format` (`csv`, `json`) | `format` | exactly as V1 spelled them (lowercase); V2's other formats accepted when `compat.extra_export_formats` |
//! | export `filter_keys` (array) | `filter_keys` (comma-joined, URL-encoded) | omitted when empty; keys with a comma are refused |
//! | `data.download_url` | `data.download_url` | untouched |
//!
//! V1↔V2 differences here (see `COMPATIBILITY.md`): [`result_header_format`](crate::differences::RESULT_HEADER_FORMAT), [`extra_export_formats`](crate::differences::EXTRA_EXPORT_FORMATS), [`export_download_url`](crate::differences::EXPORT_DOWNLOAD_URL).

use serde_json::{json, Map, Value};

use crate::error::{GatewayError, Subject};
use crate::ops::input::Body;
use crate::ops::{int_of, take_list, Exchange};
use crate::paging::{Plan, Window};
use crate::upstream::V2Call;
use crate::v2::{Part, Segment, V2Path};

/// V1 `result/list` default page size.
pub const DEFAULT_PAGE_SIZE: u64 = 10;

pub const V1_EXPORT_FORMATS: [&str; 2] = ["csv", "json"];
pub const V2_EXPORT_FORMATS: [&str; 8] =
    ["csv", "json", "jsonl", "xlsx", "xls", "xml", "html", "rss"];

pub fn result_call(run: &Segment, offset: u64, limit: u64) -> V2Call {
    V2Call::get(
        V2Path::new(&[Part::Lit("worker-runs"), Part::Id(run), Part::Lit("result")])
            .query("offset", offset)
            .query("limit", limit),
    )
}

/// V1 headers: V2's `key`/`label` plus a `format` inferred from the rows.
pub fn v1_headers(v2_headers: &[Value], rows: &[Value]) -> Vec<Value> {
    v2_headers
        .iter()
        .map(|h| {
            let key = h.get("key").and_then(Value::as_str).unwrap_or_default();
            let label = h.get("label").and_then(Value::as_str).unwrap_or(key);
            let format = match h.get("format").and_then(Value::as_str) {
                Some(f) => f.to_owned(),
                None => infer_format(key, rows).to_owned(),
            };
            json!({ "label": label, "key": key, "format": format })
        })
        .collect()
}

fn infer_format(key: &str, rows: &[Value]) -> &'static str {
    let mut values = rows
        .iter()
        .filter_map(|r| r.get(key))
        .filter(|v| !v.is_null())
        .peekable();
    if values.peek().is_some() && values.all(Value::is_number) {
        "number"
    } else {
        "text"
    }
}

/// The V1 result page from the V2 pages of a plan. The pages are taken by
/// value so their rows move into the answer rather than being copied.
pub fn v1_result_page(window: Window, plan: &Plan, mut pages: Vec<Value>) -> Value {
    let count = pages
        .first()
        .and_then(|p| int_of(p.get("count")))
        .unwrap_or(0);
    let v2_headers = pages
        .first_mut()
        .map(|p| take_list(p, "headers"))
        .unwrap_or_default();
    let rows = plan.assemble(pages.iter_mut().map(|p| take_list(p, "list")).collect());
    let headers = v1_headers(&v2_headers, &rows);
    // Built field by field: `json!` would serialize `rows` into a copy.
    let mut page = Map::new();
    page.insert("count".into(), count.into());
    page.insert("headers".into(), Value::Array(headers));
    page.insert("list".into(), Value::Array(rows));
    page.insert("page_index".into(), window.page_index.into());
    page.insert("page_size".into(), window.page_size.into());
    Value::Object(page)
}

pub async fn result_list(ex: &Exchange<'_>, body: &Body) -> Result<Value, GatewayError> {
    let run = body.run_slug()?;
    let window = body.window(DEFAULT_PAGE_SIZE, ex.gw.config.limits.max_page_size)?;
    let plan = window.plan();
    let key = ex.key()?;
    let pages = ex
        .pages(plan.offsets.clone(), Subject::Run, |o| {
            result_call(&run, o, plan.limit).with_key(Some(key.clone()))
        })
        .await?;
    let mut page = v1_result_page(window, &plan, pages);
    let count = int_of(page.get("count")).unwrap_or(0);
    let empty = page["list"].as_array().map_or(true, Vec::is_empty);
    if empty && count > 0 {
        // A page past the end has no rows to infer column formats from, but
        // V1 still typed its headers: read them off the run's first row.
        let mut sample = ex
            .call(result_call(&run, 1, 1).with_key(Some(key)), Subject::Run)
            .await?;
        let (headers, rows) = (
            take_list(&mut sample, "headers"),
            take_list(&mut sample, "list"),
        );
        page["headers"] = Value::Array(v1_headers(&headers, &rows));
    }
    Ok(page)
}

/// Checks the V1 export body and builds the V2 call.
pub fn export_call(body: &Body, extra_formats: bool) -> Result<V2Call, GatewayError> {
    let run = body.run_slug()?;
    // V1 knew `csv` and `json` only, in lowercase; V2 reads the value without
    // regard to case, so the gateway must not pass `CSV` on as V1 refused it.
    let format = body.req_str("format")?.to_owned();
    let allowed: &[&str] = if extra_formats {
        &V2_EXPORT_FORMATS
    } else {
        &V1_EXPORT_FORMATS
    };
    if !allowed.contains(&format.as_str()) {
        return Err(GatewayError::bad(
            "format",
            format!("must be one of {}", allowed.join(", ")),
        ));
    }
    let keys = match body.get("filter_keys") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|k| match k.as_str().map(str::trim) {
                // Characters, not bytes: a key of non-ASCII letters is as long as it looks.
                Some(k) if !k.is_empty() && !k.contains(',') && k.chars().count() <= 256 => {
                    Ok(k.to_owned())
                }
                _ => Err(GatewayError::bad(
                    "filter_keys",
                    "must be an array of non-empty field keys without commas",
                )),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => {
            return Err(GatewayError::bad(
                "filter_keys",
                "must be an array of strings",
            ))
        }
    };
    if keys.len() > 1000 {
        return Err(GatewayError::bad("filter_keys", "has more than 1000 keys"));
    }
    let path = V2Path::new(&[
        Part::Lit("worker-runs"),
        Part::Id(&run),
        Part::Lit("result"),
        Part::Lit("export"),
    ])
    .query("format", format)
    .query_opt("filter_keys", (!keys.is_empty()).then(|| keys.join(",")));
    Ok(V2Call::get(path))
}

pub async fn export(ex: &Exchange<'_>, body: &Body) -> Result<Value, GatewayError> {
    let call = export_call(body, ex.gw.config.compat.extra_export_formats)?;
    let data = ex
        .call(call.with_key(Some(ex.key()?)), Subject::Run)
        .await?;
    match data.get("download_url").and_then(Value::as_str) {
        Some(url) => Ok(json!({ "download_url": url })),
        None => Err(GatewayError::Garbled(
            "export answer without download_url".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_inferred_from_rows() {
        let headers = vec![
            json!({"key": "title", "label": "Title"}),
            json!({"key": "rating", "label": "Rating"}),
            json!({"key": "empty", "label": "E"}),
            json!({"key": "d", "label": "D", "format": "date"}),
        ];
        let rows = vec![
            json!({"title": "a", "rating": 4.5, "empty": null}),
            json!({"title": "b", "rating": null}),
        ];
        let out = v1_headers(&headers, &rows);
        assert_eq!(out[0]["format"], "text");
        assert_eq!(out[1]["format"], "number");
        assert_eq!(out[2]["format"], "text");
        assert_eq!(out[3]["format"], "date");
        assert_eq!(
            out[0],
            json!({"label": "Title", "key": "title", "format": "text"})
        );
    }

    #[test]
    fn export_query() {
        let body =
            Body::parse(br#"{"run_slug":"R1","format":"csv","filter_keys":["title","a b"]}"#)
                .unwrap();
        let call = export_call(&body, false).unwrap();
        assert_eq!(
            call.path.path_and_query(),
            "/api/v2/worker-runs/R1/result/export?format=csv&filter_keys=title%2Ca%20b"
        );
        for spelling in ["CSV", " csv", "Json"] {
            let body =
                Body::parse(format!(r#"{{"run_slug":"R1","format":"{spelling}"}}"#).as_bytes())
                    .unwrap();
            assert!(export_call(&body, true).is_err(), "{spelling}");
        }
        let body = Body::parse(br#"{"run_slug":"R1","format":"xlsx"}"#).unwrap();
        assert!(export_call(&body, false).is_err());
        assert!(export_call(&body, true).is_ok());
        let body = Body::parse(br#"{"run_slug":"R1","format":"pdf"}"#).unwrap();
        assert!(export_call(&body, true).is_err());
        let body =
            Body::parse(br#"{"run_slug":"R1","format":"csv","filter_keys":"title"}"#).unwrap();
        assert!(export_call(&body, true).is_err());
        let body =
            Body::parse(br#"{"run_slug":"R1","format":"csv","filter_keys":["a,b"]}"#).unwrap();
        assert!(export_call(&body, true).is_err());
        let body = Body::parse(br#"{"run_slug":"R1"}"#).unwrap();
        assert!(export_call(&body, true).is_err());
    }

    /// Found by schemathesis: the key limit counted bytes while the V1
    /// contract (`maxLength` 256) counts characters.
    #[test]
    fn filter_keys_are_bounded_in_characters() {
        let body = |key: &str| {
            let b = serde_json::json!({"run_slug": "R1", "format": "csv", "filter_keys": [key]});
            Body::parse(b.to_string().as_bytes()).unwrap()
        };
        assert!(export_call(&body(&"é".repeat(256)), true).is_ok());
        assert!(export_call(&body(&"é".repeat(257)), true).is_err());
        assert!(export_call(&body("  "), true).is_err());
    }
}
