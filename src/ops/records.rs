//! Run records: `POST /api/v1/run/detail` → `GET /api/v2/worker-runs/{runId}`
//! and `POST /api/v1/run/list` → `GET /api/v2/worker-runs`.
//!
//! | V1 field | V2 field | rule |
//! |---|---|---|
//! | `status` (1-5) | `status` (string) | ready 1, running 2, succeeded 3, failed 4, aborting 5; `aborted`/`cancelled` → `compat.aborted_status` (default 4); other unknown → `compat.unknown_status` (default 2); an integer 1-5 passes |
//! | `err_msg` | `err_msg` | `""` when V2 omits it |
//! | `slug`, `scraper_title`, `scraper_slug`, `version` | same | `""` when absent |
//! | `results`, `started_at`, `finished_at`, `duration`, `traffic` | same | `0` when absent |
//! | `usage` | `usage` | decimal string; a number is written as a string; `"0"` when absent |
//! | `origin` | `origin` | renamed by `compat.origin_rename` (`api_v2`, `openapi` → `api`) |
//! | request `page_index` / `page_size` | `offset` / `limit` | page number / size; above 100 rows a fan-out of 100-row pages |
//! | request `status` 0-5 | `status` | 0 (all) omits the filter |
//! | request `scraper_slug` | `worker_id` | `owner/name` → `owner~name`; `""` omits the filter |
//!
//! V1 run list `count` is V2's `count`. V2 fields V1 did not have are dropped.
//!
//! V1↔V2 differences here (see `COMPATIBILITY.md`): [`aborted_status`](crate::differences::ABORTED_STATUS), [`unknown_status`](crate::differences::UNKNOWN_STATUS), [`origin_rename`](crate::differences::ORIGIN_RENAME), [`run_list_month`](crate::differences::RUN_LIST_MONTH).

use serde_json::{json, Map, Value};

use crate::config::Compat;
use crate::error::{GatewayError, Subject};
use crate::ops::input::Body;
use crate::ops::{int_of, list_of, string_of, Exchange};
use crate::paging::Plan;
use crate::upstream::V2Call;
use crate::v1::status;
use crate::v2::{Part, RunStatus, Segment, V2Path};

/// V1 status integer for a V2 status value.
pub fn v1_status(v2: Option<&Value>, compat: &Compat) -> i64 {
    match v2 {
        Some(Value::String(s)) => match RunStatus::parse(s) {
            Some(RunStatus::Ready) => status::READY,
            Some(RunStatus::Running) => status::RUNNING,
            Some(RunStatus::Succeeded) => status::SUCCEEDED,
            Some(RunStatus::Failed) => status::FAILED,
            Some(RunStatus::Aborting) => status::ABORTING,
            None => match s.trim().to_ascii_lowercase().as_str() {
                "aborted" | "cancelled" | "canceled" => compat.aborted_status,
                _ => {
                    tracing::warn!(status = %s, "unknown V2 run status");
                    metrics::counter!(crate::telemetry::TRANSLATION_GAPS, "kind" => crate::differences::UNKNOWN_STATUS.id).increment(1);
                    compat.unknown_status
                }
            },
        },
        Some(Value::Number(n)) => match n.as_i64() {
            Some(i @ 1..=5) => i,
            _ => compat.unknown_status,
        },
        _ => compat.unknown_status,
    }
}

/// V2 status filter for a V1 status filter (0 = all = omitted).
pub fn v2_status_filter(v1: i64) -> Result<Option<RunStatus>, GatewayError> {
    Ok(match v1 {
        0 => None,
        1 => Some(RunStatus::Ready),
        2 => Some(RunStatus::Running),
        3 => Some(RunStatus::Succeeded),
        4 => Some(RunStatus::Failed),
        5 => Some(RunStatus::Aborting),
        _ => {
            return Err(GatewayError::bad(
                "status",
                "must be an integer between 0 and 5",
            ))
        }
    })
}

/// The 13-field V1 run record, in V1's field order.
pub fn v1_record(v2: &Value, compat: &Compat) -> Value {
    let s = |k: &str| string_of(v2.get(k)).unwrap_or_default();
    let i = |k: &str| int_of(v2.get(k)).unwrap_or(0);
    let origin = s("origin");
    let origin = compat.origin_rename.get(&origin).cloned().unwrap_or(origin);
    let usage = string_of(v2.get("usage")).unwrap_or_else(|| "0".to_owned());
    json!({
        "status": v1_status(v2.get("status"), compat),
        "err_msg": s("err_msg"),
        "slug": s("slug"),
        "scraper_title": s("scraper_title"),
        "scraper_slug": s("scraper_slug"),
        "results": i("results"),
        "usage": usage,
        "started_at": i("started_at"),
        "finished_at": i("finished_at"),
        "duration": i("duration"),
        "origin": origin,
        "traffic": i("traffic"),
        "version": s("version"),
    })
}

pub fn detail_call(run: &Segment) -> V2Call {
    V2Call::get(V2Path::new(&[Part::Lit("worker-runs"), Part::Id(run)]))
}

pub async fn run_detail(ex: &Exchange<'_>, body: &Body) -> Result<Value, GatewayError> {
    let run = body.run_slug()?;
    let data = ex
        .call(detail_call(&run).with_key(Some(ex.key()?)), Subject::Run)
        .await?;
    if !data.is_object() {
        return Err(GatewayError::Garbled("run detail without a record".into()));
    }
    Ok(v1_record(&data, &ex.gw.config.compat))
}

/// The V2 run-list filters of a V1 run-list body.
pub struct ListFilter {
    pub status: Option<RunStatus>,
    pub worker: Option<Segment>,
}

pub fn list_call(filter: &ListFilter, offset: u64, limit: u64) -> V2Call {
    let path = V2Path::new(&[Part::Lit("worker-runs")])
        .query("offset", offset)
        .query("limit", limit)
        .query_opt("status", filter.status.map(RunStatus::as_str))
        .query_opt("worker_id", filter.worker.as_ref().map(Segment::as_str));
    V2Call::get(path)
}

/// Joins the V2 pages of a run list into the V1 `{count, list}`.
pub fn v1_run_list(plan: &Plan, pages: Vec<Value>, compat: &Compat) -> Value {
    let count = pages
        .first()
        .and_then(|p| int_of(p.get("count")))
        .unwrap_or(0);
    let rows = plan.assemble(
        pages
            .iter()
            .map(|p| list_of(p, "list").iter().collect())
            .collect(),
    );
    let list: Vec<Value> = rows.into_iter().map(|r| v1_record(r, compat)).collect();
    // Built field by field: `json!` would serialize `list` into a copy.
    let mut answer = Map::new();
    answer.insert("count".into(), count.into());
    answer.insert("list".into(), Value::Array(list));
    Value::Object(answer)
}

pub async fn run_list(ex: &Exchange<'_>, body: &Body) -> Result<Value, GatewayError> {
    let limits = &ex.gw.config.limits;
    let window = body.window(20, limits.max_page_size)?;
    let status = v2_status_filter(body.opt_int("status")?.unwrap_or(0))?;
    let worker = match body.opt_str("scraper_slug")?.map(str::trim) {
        None | Some("") => None,
        Some(raw) => Some(ex.gw.worker_ids.translate(raw, "scraper_slug")?),
    };
    let filter = ListFilter { status, worker };
    let plan = window.plan();
    let key = ex.key()?;
    let pages = ex
        .pages(plan.offsets.clone(), Subject::Other, |o| {
            list_call(&filter, o, plan.limit).with_key(Some(key.clone()))
        })
        .await?;
    Ok(v1_run_list(&plan, pages, &ex.gw.config.compat))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_mapping_is_total() {
        let c = Compat::default();
        let st = |v: Value| v1_status(Some(&v), &c);
        assert_eq!(st(json!("ready")), 1);
        assert_eq!(st(json!("running")), 2);
        assert_eq!(st(json!("succeeded")), 3);
        assert_eq!(st(json!("failed")), 4);
        assert_eq!(st(json!("aborting")), 5);
        assert_eq!(st(json!("aborted")), 4);
        assert_eq!(st(json!("Cancelled")), 4);
        assert_eq!(st(json!("weird")), 2);
        assert_eq!(st(json!(3)), 3);
        assert_eq!(st(json!(9)), 2);
        assert_eq!(v1_status(None, &c), 2);
    }

    #[test]
    fn record_fills_every_v1_field() {
        let c = Compat::default();
        let r = v1_record(
            &json!({"slug": "R", "status": "succeeded", "usage": 1.5, "origin": "api_v2", "extra": 1}),
            &c,
        );
        assert_eq!(r["err_msg"], "");
        assert_eq!(r["usage"], "1.5");
        assert_eq!(r["origin"], "api");
        assert_eq!(r["finished_at"], 0);
        assert_eq!(r.as_object().unwrap().len(), 13);
        assert!(r.get("extra").is_none());
    }

    #[test]
    fn list_filters() {
        let f = ListFilter {
            status: v2_status_filter(3).unwrap(),
            worker: Some(Segment::worker("o/n").unwrap()),
        };
        assert_eq!(
            list_call(&f, 2, 50).path.path_and_query(),
            "/api/v2/worker-runs?offset=2&limit=50&status=succeeded&worker_id=o~n"
        );
        let all = ListFilter {
            status: v2_status_filter(0).unwrap(),
            worker: None,
        };
        assert_eq!(
            list_call(&all, 1, 20).path.path_and_query(),
            "/api/v2/worker-runs?offset=1&limit=20"
        );
        assert!(v2_status_filter(6).is_err());
    }
}
