//! Run records, read only (starting and stopping runs is `run_actions`):
//! `POST /api/v1/run/detail` → `GET /api/v2/worker-runs/{runId}`
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
//! | request `scraper_slug` | `worker_id` | `owner/name` → `owner~name`; `""` omits the filter; an id no worker can have (`a/b/c`) lists no runs, without a V2 call |
//!
//! V1 run list `count` is V2's `count`. V2 fields V1 did not have are dropped.
//!
//! V1↔V2 differences here (see `COMPATIBILITY.md`): [`aborted_status`](crate::differences::ABORTED_STATUS), [`unknown_status`](crate::differences::UNKNOWN_STATUS), [`origin_rename`](crate::differences::ORIGIN_RENAME), [`run_list_month`](crate::differences::RUN_LIST_MONTH).

use serde_json::Value;
use v1compat_json::escape::Texts;
use v1compat_json::read;
use v1compat_json::v1::V1Run;
use v1compat_json::v2::{RunPage, StatusField, V2Run};

use crate::differences::{self, Applied, AppliedSet, Difference};
use crate::error::{GatewayError, Subject};
use crate::ops::input::{Body, Ident};
use crate::ops::Compat;
use crate::ops::{Exchange, Fetched, Read};
use crate::paging::Plan;
use crate::upstream::V2Call;
use crate::v1::status;
use crate::v1::Json;
use crate::v2::{Part, RunStatus, Segment, V2Path};

/// V1 status integer for a V2 status value.
pub fn v1_status(v2: Option<&Value>, compat: &Compat) -> i64 {
    v1_status_of(&StatusField::from(v2), compat)
}

/// V1 status integer for a V2 status field.
pub fn v1_status_of(v2: &StatusField<'_>, compat: &Compat) -> i64 {
    v1_status_noting(v2, compat).0
}

/// [`v1_status_of`], with the difference that decided it when one did
/// (`aborted_status`, `unknown_status`).
fn v1_status_noting(v2: &StatusField<'_>, compat: &Compat) -> (i64, Option<&'static Difference>) {
    let unknown = (compat.unknown_status, Some(&differences::UNKNOWN_STATUS));
    let status = match v2 {
        StatusField::Text(s) => match RunStatus::parse(s) {
            Some(RunStatus::Ready) => status::READY,
            Some(RunStatus::Running) => status::RUNNING,
            Some(RunStatus::Succeeded) => status::SUCCEEDED,
            Some(RunStatus::Failed) => status::FAILED,
            Some(RunStatus::Aborting) => status::ABORTING,
            None => match s.trim().to_ascii_lowercase().as_str() {
                "aborted" | "cancelled" | "canceled" => {
                    return (compat.aborted_status, Some(&differences::ABORTED_STATUS))
                }
                _ => {
                    tracing::warn!(status = %s, "unknown V2 run status");
                    metrics::counter!(crate::telemetry::TRANSLATION_GAPS, "kind" => crate::differences::UNKNOWN_STATUS.id).increment(1);
                    return unknown;
                }
            },
        },
        StatusField::Number(n) => match n {
            Some(i @ 1..=5) => *i,
            _ => return unknown,
        },
        StatusField::Other => return unknown,
    };
    (status, None)
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

/// The V1 record of a V2 record.
pub fn v1_run<'a>(v2: &'a V2Run<'a>, compat: &'a Compat) -> V1Run<'a> {
    v1_run_noting(v2, compat).0
}

/// [`v1_run`], with the differences that shaped the record
/// (`aborted_status`, `unknown_status`, `origin_rename`).
fn v1_run_noting<'a>(v2: &'a V2Run<'a>, compat: &'a Compat) -> (V1Run<'a>, AppliedSet) {
    let origin = v2.origin.or_default();
    let (status, status_difference) = v1_status_noting(&v2.status, compat);
    let renamed = compat.origin_rename.get(origin);
    let mut applied = AppliedSet::default();
    if let Some(d) = status_difference {
        applied = applied.with(d);
    }
    if renamed.is_some() {
        applied = applied.with(&differences::ORIGIN_RENAME);
    }
    let record = V1Run::of_v2(v2, status, renamed.map_or(origin, String::as_str));
    (record, applied)
}

/// The 13-field V1 run record of a V2 record given as a `Value`.
pub fn v1_record(v2: &Value, compat: &Compat) -> Value {
    serde_json::to_value(v1_run(&V2Run::of_value(v2), compat)).unwrap_or(Value::Null)
}

pub fn detail_call(run: &Segment) -> V2Call {
    V2Call::get(V2Path::new(&[Part::Lit("worker-runs"), Part::Id(run)]))
}

/// The V1 run record (`data`) of a V2 run-detail answer; `texts` says how
/// a typed record's strings were read (a `Value`'s are always looked at).
pub fn detail_answer(
    read: Read<V2Run<'_>>,
    texts: Texts,
    compat: &Compat,
    applied: &Applied,
) -> Result<Json, GatewayError> {
    let garbled = || GatewayError::Garbled("run detail without a record".into());
    let record = |(run, set): (V1Run, AppliedSet), texts| {
        applied.add(set);
        Ok(record_json(&run, texts))
    };
    match read {
        Read::Typed(Some(run)) => record(v1_run_noting(&run, compat), texts),
        Read::Typed(None) => Err(garbled()),
        Read::Untyped(data) if data.is_object() => record(
            v1_run_noting(&V2Run::of_value(&data), compat),
            Texts::UNCHECKED,
        ),
        Read::Untyped(_) => Err(garbled()),
    }
}

/// One V1 record as the answer's `data`.
fn record_json(run: &V1Run, texts: Texts) -> Json {
    Json::write_direct(run.json_len(), |out| run.write_json(out, texts))
}

pub async fn run_detail(ex: &Exchange<'_>, body: &Body<'_>) -> Result<Json, GatewayError> {
    let run = body.run_slug()?;
    let fetched = ex
        .fetch(
            detail_call(ex.known(&run)?).with_key(Some(ex.key()?)),
            Subject::Run,
        )
        .await?;
    // Read in one pass where the answer is plain; serde reads the rest.
    let (read, texts) = ex.read_with(&fetched, Subject::Run, read::run)?;
    detail_answer(read, texts, &ex.settings().compat, ex.differences())
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

/// Joins the V2 pages of a run list, each with what is known of its
/// texts, into the V1 `{count, list}`.
pub fn v1_run_list(
    plan: &Plan,
    pages: Vec<(RunPage<'_>, Texts)>,
    compat: &Compat,
    applied: &Applied,
) -> Result<Json, GatewayError> {
    let count = pages.first().and_then(|(p, _)| p.count).unwrap_or(0);
    let rows = plan.assemble(
        pages
            .iter()
            .map(|(p, texts)| p.runs.iter().map(|r| (r, *texts)).collect())
            .collect(),
    );
    let list: Vec<(V1Run, Texts)> = rows
        .into_iter()
        .map(|(r, texts)| {
            let (record, set) = v1_run_noting(r, compat);
            applied.add(set);
            (record, texts)
        })
        .collect();
    let capacity = 32 + list.iter().map(|(r, _)| r.json_len() + 1).sum::<usize>();
    // `{"count":…,"list":[…]}`, as serde would write the two fields.
    Ok(Json::write_direct(capacity, |out| {
        out.extend_from_slice(b"{\"count\":");
        out.extend_from_slice(itoa::Buffer::new().format(count).as_bytes());
        out.extend_from_slice(b",\"list\":[");
        for (i, (record, texts)) in list.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            record.write_json(out, *texts);
        }
        out.extend_from_slice(b"]}");
    }))
}

/// A V2 run-list page as [`read_page`] read it.
enum PageRead<'f> {
    /// In one pass: its records borrow from the answer's body.
    Scanned(RunPage<'f>, Texts),
    /// By the general reading: its `data`, for [`RunPage::of_value`].
    General(Value),
}

/// One V2 run-list page, read in one pass where it is plain.
fn read_page<'f>(ex: &Exchange<'_>, page: &'f Fetched) -> Result<PageRead<'f>, GatewayError> {
    Ok(match ex.read_with(page, Subject::Other, read::run_page)? {
        (Read::Typed(data), texts) => PageRead::Scanned(data.unwrap_or_default(), texts),
        (Read::Untyped(data), _) => PageRead::General(data),
    })
}

pub async fn run_list(ex: &Exchange<'_>, body: &Body<'_>) -> Result<Json, GatewayError> {
    let window = body.window(20, ex.settings().max_page_size)?;
    let status = v2_status_filter(body.opt_int("status")?.unwrap_or(0))?;
    let worker = match body.opt_str("scraper_slug")?.map(str::trim) {
        None | Some("") => None,
        Some(raw) => match ex.worker(raw) {
            Ident::Segment(seg) => Some(seg),
            // V1 listed the runs of a worker it did not know as none at all;
            // an id no worker can have is such a worker.
            Ident::Unknown(_) => {
                return v1_run_list(
                    &window.plan(),
                    Vec::new(),
                    &ex.settings().compat,
                    ex.differences(),
                )
            }
        },
    };
    let filter = ListFilter { status, worker };
    let plan = window.plan();
    let key = ex.key()?;
    let fetched = ex
        .fetch_pages(plan.offsets.clone(), Subject::Other, |o| {
            list_call(&filter, o, plan.limit).with_key(Some(key.clone()))
        })
        .await?;
    // Each page read in one pass where it is plain; the rest read as
    // `Value`s, kept here while the records borrow from them.
    let (scanned, general): (Vec<_>, Vec<_>) = fetched
        .iter()
        .map(|page| read_page(ex, page))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .map(|read| match read {
            PageRead::Scanned(page, texts) => (Some((page, texts)), Value::Null),
            PageRead::General(data) => (None, data),
        })
        .unzip();
    let pages = scanned
        .into_iter()
        .zip(&general)
        .map(|(read, data)| read.unwrap_or_else(|| (RunPage::of_value(data), Texts::UNCHECKED)))
        .collect();
    v1_run_list(&plan, pages, &ex.settings().compat, ex.differences())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A page read in one pass is written as the same page read as a
    /// `Value` is, its plain texts copied as they are.
    #[test]
    fn a_page_read_in_one_pass_is_written_as_its_value_is() {
        let body = r#"{"code":0,"message":"success","request_id":"r-1","data":{"count":3,"list":[
            {"slug":"a","status":"succeeded","usage":"0.1","origin":"api_v2","results":3,"extra":[1,{"k":null}]},
            {"slug":"b","status":"aborted","err_msg":"stopped by user","started_at":17,"version":null},
            {"slug":"c","status":7,"scraper_title":"Cartes é"}],"offset":0}}"#;
        let plan = crate::paging::Window {
            page_index: 1,
            page_size: 2,
        }
        .plan();
        let compat = Compat::default();
        let answer = read::run_page(body.as_bytes()).expect("plain");
        let (data, texts) = (answer.data.unwrap(), answer.texts);
        assert_ne!(texts, Texts::UNCHECKED);
        let scanned = v1_run_list(&plan, vec![(data, texts)], &compat, &Applied::new()).unwrap();
        let value: Value = serde_json::from_str(body).unwrap();
        let pages = vec![(RunPage::of_value(&value["data"]), Texts::UNCHECKED)];
        let general = v1_run_list(&plan, pages, &compat, &Applied::new()).unwrap();
        assert_eq!(scanned.data_bytes(), general.data_bytes());
        let written: Value = serde_json::from_slice(&scanned.data_bytes()).unwrap();
        assert_eq!(written["count"], 3);
        assert_eq!(written["list"].as_array().unwrap().len(), 2);
        assert_eq!(written["list"][1]["err_msg"], "stopped by user");
    }

    /// A run list is `{"count", "list"}` with the records as serde writes them.
    #[test]
    fn a_run_list_is_written_as_serde_writes_it() {
        let page = json!({"count": 42, "list": [
            {"status": "succeeded", "slug": "a", "usage": 1.5, "origin": "api_v2", "results": 3},
            {"status": "weird", "err_msg": "line\nbreak \"quoted\"", "started_at": "17"},
            7
        ]});
        let plan = crate::paging::Window {
            page_index: 1,
            page_size: 20,
        }
        .plan();
        let pages = vec![(RunPage::of_value(&page), Texts::UNCHECKED)];
        let written = v1_run_list(&plan, pages, &Compat::default(), &Applied::new()).unwrap();
        let compat = Compat::default();
        let rows = crate::ops::list_of(&page, "list");
        let records: Vec<V2Run> = rows.iter().map(V2Run::of_value).collect();
        let expected = json!({
            "count": 42,
            "list": records.iter().map(|r| serde_json::to_value(v1_run(r, &compat)).unwrap()).collect::<Vec<_>>(),
        });
        assert_eq!(
            std::str::from_utf8(&written.data_bytes()).unwrap(),
            serde_json::to_string(&expected).unwrap()
        );
    }

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
