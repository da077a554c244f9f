//! Run logs: `POST /api/v1/run/last/log` (which selects the run by
//! `run_slug`, despite its name) → `GET /api/v2/worker-runs/{runId}/log`.
//!
//! | V1 | V2 | rule |
//! |---|---|---|
//! | `data.all_logs_url` | same | untouched |
//! | `data.result_count` | same | `0` when absent |
//! | `data.list[]` objects `{type, group, content, timestamp}` | objects | passed through; missing fields filled (`type` 2, `group` `""`, `content` `""`, `timestamp` as below) |
//! | | strings | parsed: an RFC 3339 timestamp at the start → `timestamp` in ms; then a level word (`DEBUG`/`TRACE` 1, `INFO` 2, `WARN`/`WARNING` 3, `ERROR`/`FATAL`/`CRITICAL` 4, optionally in brackets or followed by `:`) → `type`, default 2; `group` = the digits in `Subtask-[…]` if present, else `""`; `content` = the rest |
//! | | | an entry without a timestamp takes the previous entry's (0 for the first), so V1 clients sorting by time keep the order |
//!
//! V1↔V2 differences here (see `COMPATIBILITY.md`): [`log_group`](crate::differences::LOG_GROUP).

use serde_json::{json, Map, Value};

use crate::error::{GatewayError, Subject};
use crate::ops::input::Body;
use crate::ops::{int_of, list_of, string_of, Exchange};
use crate::upstream::V2Call;
use crate::v2::{Part, V2Path};

pub const INFO: i64 = 2;

/// One V1 log entry from one V2 entry.
pub fn v1_entry(entry: &Value, previous_ts: i64) -> Value {
    match entry {
        Value::String(line) => from_line(line, previous_ts),
        Value::Object(o) => json!({
            "type": int_of(o.get("type")).unwrap_or(INFO),
            "group": string_of(o.get("group")).unwrap_or_default(),
            "content": string_of(o.get("content")).unwrap_or_default(),
            "timestamp": int_of(o.get("timestamp")).unwrap_or(previous_ts),
        }),
        other => from_line(&other.to_string(), previous_ts),
    }
}

fn from_line(line: &str, previous_ts: i64) -> Value {
    let mut rest = line.trim_start();
    let mut timestamp = previous_ts;
    if let Some((first, tail)) = rest.split_once(char::is_whitespace) {
        if let Ok(t) = humantime::parse_rfc3339_weak(first.trim_end_matches(',')) {
            if let Ok(d) = t.duration_since(std::time::UNIX_EPOCH) {
                timestamp = d.as_millis() as i64;
                rest = tail.trim_start();
            }
        }
    }
    let mut kind = INFO;
    if let Some((first, tail)) = rest.split_once(char::is_whitespace).or(Some((rest, ""))) {
        let word = first
            .trim_matches(|c| c == '[' || c == ']' || c == ':')
            .to_ascii_uppercase();
        let level = match word.as_str() {
            "DEBUG" | "TRACE" => Some(1),
            "INFO" => Some(2),
            "WARN" | "WARNING" => Some(3),
            "ERROR" | "FATAL" | "CRITICAL" => Some(4),
            _ => None,
        };
        if let Some(level) = level {
            kind = level;
            rest = tail.trim_start();
        }
    }
    json!({
        "type": kind,
        "group": subtask_group(rest),
        "content": rest,
        "timestamp": timestamp,
    })
}

/// The subtask id V1 used as `group`, found in `Subtask-[123]`.
fn subtask_group(content: &str) -> String {
    content
        .split_once("Subtask-[")
        .and_then(|(_, tail)| tail.split_once(']'))
        .map(|(id, _)| id)
        .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
        .unwrap_or("")
        .to_owned()
}

pub fn v1_log(data: &Value) -> Value {
    let mut previous = 0;
    let list: Vec<Value> = list_of(data, "list")
        .iter()
        .map(|e| {
            let v = v1_entry(e, previous);
            previous = v["timestamp"].as_i64().unwrap_or(previous);
            v
        })
        .collect();
    // Built field by field: `json!` would serialize `list` into a copy.
    let mut page = Map::new();
    page.insert(
        "all_logs_url".into(),
        string_of(data.get("all_logs_url"))
            .unwrap_or_default()
            .into(),
    );
    page.insert("list".into(), Value::Array(list));
    page.insert(
        "result_count".into(),
        int_of(data.get("result_count")).unwrap_or(0).into(),
    );
    Value::Object(page)
}

pub async fn run_log(ex: &Exchange<'_>, body: &Body) -> Result<Value, GatewayError> {
    let run = body.run_slug()?;
    let path = V2Path::new(&[
        Part::Lit("worker-runs"),
        Part::Id(run.known()?),
        Part::Lit("log"),
    ]);
    let data = ex
        .call(V2Call::get(path).with_key(Some(ex.key()?)), Subject::Run)
        .await?;
    Ok(v1_log(&data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_lines_become_objects() {
        let e = v1_entry(
            &json!("2026-11-22T14:05:12.123Z WARN SYSTEM: Subtask-[4976] - Slow page"),
            0,
        );
        assert_eq!(
            e,
            json!({"type": 3, "group": "4976", "content": "SYSTEM: Subtask-[4976] - Slow page", "timestamp": 1795356312123i64})
        );
        let e = v1_entry(&json!("[ERROR] boom"), 77);
        assert_eq!(
            e,
            json!({"type": 4, "group": "", "content": "boom", "timestamp": 77})
        );
        let e = v1_entry(&json!("Run started"), 5);
        assert_eq!(
            e,
            json!({"type": 2, "group": "", "content": "Run started", "timestamp": 5})
        );
        let e = v1_entry(&json!(""), 0);
        assert_eq!(e["content"], "");
    }

    #[test]
    fn objects_pass_with_gaps_filled() {
        let e = v1_entry(
            &json!({"type": 4, "content": "x", "timestamp": 9, "extra": 1}),
            0,
        );
        assert_eq!(
            e,
            json!({"type": 4, "group": "", "content": "x", "timestamp": 9})
        );
    }

    #[test]
    fn timestamps_carry_forward() {
        let log = v1_log(
            &json!({"all_logs_url": "u", "list": ["2026-11-22T14:05:12Z INFO a", "b"], "result_count": 3}),
        );
        assert_eq!(log["list"][1]["timestamp"], log["list"][0]["timestamp"]);
        assert_eq!(log["result_count"], 3);
    }
}
