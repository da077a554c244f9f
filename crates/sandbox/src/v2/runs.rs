//! V2 run operations: start (direct, task, rerun; async or sync), list, detail, abort,
//! log, result page and export, including the account-scoped `worker-runs/last...` and
//! worker-scoped `workers/{id}/runs/last...` forms. Shapes follow facts §2.2-§2.9.

use std::sync::Arc;

use serde_json::{json, Value};

use super::catalog::resolve_worker;
use super::{ApiError, Call, Outcome, RunRef};
use crate::catalog::WorkerSpec;
use crate::checks::{check_input, query_int, query_paging, window, Fields, ZeroLimits};
use crate::config::LogEntries;
use crate::data::month_utc8;
use crate::lifecycle::{AbortError, NewRun, Origin, Run, RunView, Status};
use crate::lock;
use crate::state::State;
use crate::Shared;

/// Longest a synchronous run request waits, in simulated seconds.
pub(crate) const SYNC_WAIT_SECONDS: i64 = 300;

/// V2 run record. `err_msg` only on failed runs (successful ones omit it).
pub(crate) fn record(run: &Run, worker: &WorkerSpec, v: &RunView) -> Value {
    let mut r = json!({
        "slug": run.slug,
        "scraper_slug": worker.slug,
        "scraper_title": worker.title,
        "version": run.version,
        "status": v.status.as_str(),
        "results": v.results,
        "usage": v.usage,
        "traffic": v.traffic,
        "origin": run.origin.as_str(),
        "started_at": v.started_at,
        "finished_at": v.finished_at,
        "duration": v.duration,
    });
    if let (Some(m), Some(obj)) = (&v.err_msg, r.as_object_mut()) {
        obj.insert("err_msg".into(), json!(m));
    }
    r
}

/// `{count, headers:[{key,label}], list, page_index, page_size}`.
pub(crate) fn result_page(run: &Run, w: &WorkerSpec, now: i64, page: u64, limit: u64) -> Value {
    let v = run.view(now);
    let (from, to) = window(page, limit);
    let headers: Vec<Value> = w
        .columns
        .iter()
        .map(|c| json!({"key": c.key, "label": c.label}))
        .collect();
    json!({
        "count": v.results,
        "headers": headers,
        "list": run.rows(w, now, from, to),
        "page_index": page,
        "page_size": limit,
    })
}

/// The run slug a run operation targets, checked to belong to the account.
pub(crate) fn resolve_run(st: &State, call: &Call) -> Result<String, ApiError> {
    let found = match &call.params.run {
        RunRef::Id(id) => st.run(&call.account, id),
        RunRef::Last => st.runs_of(&call.account, None).next(),
        RunRef::WorkerLast => {
            let w = resolve_worker(st, call.params.worker.as_deref())?;
            st.runs_of(&call.account, Some(w)).next()
        }
        RunRef::None => None,
    };
    found
        .map(|r| r.slug.clone())
        .ok_or_else(ApiError::run_not_found)
}

/// Wait (on the simulated clock, without polling) until the run is completed or
/// `SYNC_WAIT_SECONDS` simulated seconds have passed, or the sandbox stops.
pub(crate) async fn wait_done(shared: &Arc<Shared>, account: &str, slug: &str) {
    let deadline = shared.clock.now_ms() + SYNC_WAIT_SECONDS * 1000;
    let mut changed = shared.clock.subscribe();
    let mut stop = shared.stop.clone();
    loop {
        changed.borrow_and_update();
        let now = shared.clock.now_ms();
        let end = {
            let st = lock(&shared.state);
            match st.run(account, slug) {
                Some(r) if !r.status_at(now).is_completed() => r.end_ms(),
                _ => return,
            }
        };
        if now >= deadline {
            return;
        }
        let delay = shared.clock.real_delay(end.min(deadline) - now + 1);
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            r = changed.changed() => if r.is_err() { return },
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Result window of a run/rerun body: `offset` 1-based page (0 = 1, default 1),
/// `limit` 1-100 (default 20).
fn body_window(f: &mut Fields) -> (u64, u64) {
    let limit = f.int("limit", 1, 100).unwrap_or(20) as u64;
    let page = f.int("offset", 0, i64::MAX).unwrap_or(1).max(1) as u64;
    (page, limit)
}

/// Synchronous answer: facts §2.7 for runs, §2.8 (`is_finished`, no messages) for reruns.
fn sync_value(
    shared: &Arc<Shared>,
    account: &str,
    slug: &str,
    page: u64,
    limit: u64,
    rerun: bool,
) -> Outcome {
    let (run, w) = lock(&shared.state)
        .snapshot(account, slug)
        .ok_or_else(ApiError::run_not_found)?;
    let (run, w) = (&run, &w);
    let now = shared.clock.now_ms();
    let v = run.view(now);
    let running = if v.finished_at > 0 {
        v.duration
    } else {
        (now / 1000 - v.started_at).max(0)
    };
    let mut d = json!({
        "run_slug": slug,
        "run_status": v.status.as_str(),
        "execution_start_timestamp": v.started_at,
        "execution_end_timestamp": v.finished_at,
        "running_duration": running,
    });
    if let Some(obj) = d.as_object_mut() {
        if rerun {
            obj.insert("is_finished".into(), json!(v.status.is_completed()));
        } else {
            obj.insert(
                "error_message".into(),
                json!(v.err_msg.clone().unwrap_or_default()),
            );
            obj.insert("result_message".into(), json!(""));
        }
        obj.insert("results".into(), result_page(run, w, now, page, limit));
    }
    Ok(Some(d))
}

/// Create the run, then answer `{run_slug}` or wait and answer the sync shape.
async fn start(
    call: &Call<'_>,
    new: NewRun,
    is_async: bool,
    win: (u64, u64),
    rerun: bool,
) -> Outcome {
    let account = new.account.clone();
    let slug = lock(&call.shared.state).create_run(new, call.shared.clock.now_ms());
    call.shared.clock.bump();
    if is_async {
        return Ok(Some(json!({ "run_slug": slug })));
    }
    wait_done(call.shared, &account, &slug).await;
    sync_value(call.shared, &account, &slug, win.0, win.1, rerun)
}

fn fail_if(errs: Vec<String>) -> Result<(), ApiError> {
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(errs))
    }
}

pub(crate) async fn run_worker(call: &Call<'_>) -> Outcome {
    let worker = resolve_worker(&lock(&call.shared.state), call.params.worker.as_deref())?;
    let mut f = Fields::new(
        &call.body,
        Some(&[
            "callback_url",
            "input",
            "is_async",
            "limit",
            "offset",
            "version",
        ]),
    );
    let callback_url = f.url("callback_url");
    let is_async = f.bool("is_async").unwrap_or(true);
    let win = body_window(&mut f);
    let version = f.str("version");
    let input = f
        .value("input")
        .cloned()
        .unwrap_or_else(|| json!({"parameters": {"custom": {}}}));
    let mut errs = f.errors;
    let version = {
        let st = lock(&call.shared.state);
        if let Some(w) = st.worker(worker) {
            check_input(&input, w, ZeroLimits::Refused, &mut errs);
        }
        fail_if(errs)?;
        st.resolve_version(worker, version.as_deref())
            .ok_or_else(|| ApiError::version_unavailable(version.as_deref().unwrap_or("")))?
    };
    let new = NewRun {
        account: call.account.clone(),
        worker,
        version,
        input,
        origin: Origin::V2,
        callback_url,
    };
    start(call, new, is_async, win, false).await
}

pub(crate) async fn run_task(call: &Call<'_>) -> Outcome {
    let mut f = Fields::new(
        &call.body,
        Some(&["callback_url", "is_async", "limit", "offset"]),
    );
    let callback_url = f.url("callback_url");
    let is_async = f.bool("is_async").unwrap_or(true);
    let win = body_window(&mut f);
    let new = {
        let mut st = lock(&call.shared.state);
        let slug = call.params.task.as_deref().unwrap_or("");
        let task = st
            .task(&call.account, slug)
            .cloned()
            .ok_or_else(ApiError::task_not_found)?;
        fail_if(f.errors)?;
        let version = st
            .resolve_version(task.worker, Some(&task.version))
            .ok_or_else(|| ApiError::version_unavailable(&task.version))?;
        if let Some(t) = st.task_mut(&call.account, slug) {
            t.run_times += 1;
        }
        NewRun {
            account: call.account.clone(),
            worker: task.worker,
            version,
            input: task.input,
            origin: Origin::V2,
            callback_url,
        }
    };
    start(call, new, is_async, win, false).await
}

pub(crate) async fn rerun(call: &Call<'_>) -> Outcome {
    let mut f = Fields::new(
        &call.body,
        Some(&["callback_url", "is_async", "limit", "offset"]),
    );
    // The contract lists callback_url as required on V2 rerun.
    if !f.has("callback_url") {
        f.errors.push("callback_url is required".into());
    }
    let callback_url = f.url("callback_url");
    let is_async = f.bool("is_async").unwrap_or(true);
    let win = body_window(&mut f);
    let new = {
        let st = lock(&call.shared.state);
        let slug = resolve_run(&st, call)?;
        fail_if(f.errors)?;
        let orig = st
            .run(&call.account, &slug)
            .ok_or_else(ApiError::run_not_found)?;
        NewRun {
            account: call.account.clone(),
            worker: orig.worker,
            version: orig.version.clone(),
            input: orig.input.clone(),
            origin: Origin::V2,
            callback_url,
        }
    };
    start(call, new, is_async, win, true).await
}

pub(crate) fn detail(call: &Call) -> Outcome {
    let st = lock(&call.shared.state);
    let slug = resolve_run(&st, call)?;
    let run = st
        .run(&call.account, &slug)
        .ok_or_else(ApiError::run_not_found)?;
    let w = st
        .worker(run.worker)
        .ok_or_else(ApiError::worker_not_found)?;
    Ok(Some(record(run, w, &run.view(call.shared.clock.now_ms()))))
}

pub(crate) fn abort(call: &Call) -> Outcome {
    let now = call.shared.clock.now_ms();
    {
        let mut st = lock(&call.shared.state);
        let slug = resolve_run(&st, call)?;
        match st.abort(&call.account, &slug, now) {
            Ok(()) => {}
            Err(AbortError::NotFound) => return Err(ApiError::run_not_found()),
            Err(AbortError::Completed) => {
                return Err(ApiError::run_op_failed("the run is already completed"))
            }
        }
    }
    call.shared.clock.bump();
    Ok(None)
}

/// `{count, list}` newest first. Without a time range only the current month
/// (UTC+8) is listed; a range must have both ends in one month.
pub(crate) fn list(call: &Call) -> Outcome {
    let mut errs = Vec::new();
    let (page, limit) = query_paging(&call.query, &mut errs);
    let status = match call.query.get("status") {
        None => None,
        Some(s) => match Status::parse(s) {
            Some(st) => Some(st),
            None => {
                errs.push(
                    "status must be one of ready, running, succeeded, failed, aborting".into(),
                );
                None
            }
        },
    };
    let start = query_int(&call.query, "start_time", 0, i64::MAX / 2, &mut errs);
    let end = query_int(&call.query, "end_time", 0, i64::MAX / 2, &mut errs);
    let now = call.shared.clock.now_ms();
    let range = match (start, end) {
        (Some(s), Some(e)) => {
            if month_utc8(s) != month_utc8(e) || e < s {
                errs.push("run list time range cannot cross months".into());
            }
            Some((s, e + 86_400))
        }
        (None, None) => None,
        _ if errs.is_empty() => {
            errs.push("start_time and end_time must be given together".into());
            None
        }
        _ => None,
    };
    fail_if(errs)?;
    let st = lock(&call.shared.state);
    let worker = match call.query.get("worker_id") {
        Some(id) if !id.is_empty() => match st.find_worker(id) {
            Some(w) => Some(w),
            // An unknown worker has no runs.
            None => return Ok(Some(json!({"count": 0, "list": []}))),
        },
        _ => None,
    };
    let this_month = month_utc8(now / 1000);
    let matching: Vec<(&Run, RunView)> = st
        .runs_of(&call.account, worker)
        .map(|r| (r, r.view(now)))
        .filter(|(_, v)| match range {
            Some((s, e)) => v.started_at >= s && v.started_at < e,
            None => month_utc8(v.started_at) == this_month,
        })
        .filter(|(_, v)| status.is_none_or(|s| s == v.status))
        .collect();
    let (from, to) = window(page, limit);
    let list: Vec<Value> = matching
        .iter()
        .skip(from as usize)
        .take((to - from) as usize)
        .filter_map(|(r, v)| st.worker(r.worker).map(|w| record(r, w, v)))
        .collect();
    Ok(Some(json!({"count": matching.len(), "list": list})))
}

pub(crate) fn log(call: &Call) -> Outcome {
    let st = lock(&call.shared.state);
    let slug = resolve_run(&st, call)?;
    let run = st
        .run(&call.account, &slug)
        .ok_or_else(ApiError::run_not_found)?;
    let now = call.shared.clock.now_ms();
    let lines = run.logs(now);
    let list: Vec<Value> = match call.shared.log_entries {
        LogEntries::Objects => lines.iter().map(|l| l.to_object()).collect(),
        LogEntries::Strings => lines.iter().map(|l| json!(l.to_text())).collect(),
    };
    Ok(Some(json!({
        "all_logs_url": logs_url(call.shared, &slug),
        "list": list,
        "result_count": run.view(now).results,
    })))
}

pub(crate) fn logs_url(shared: &Shared, slug: &str) -> String {
    format!("http://{}/__sandbox/logs/{slug}.txt", shared.v2_addr)
}

pub(crate) fn result(call: &Call) -> Outcome {
    let mut errs = Vec::new();
    let (page, limit) = query_paging(&call.query, &mut errs);
    let (run, w) = {
        let st = lock(&call.shared.state);
        let slug = resolve_run(&st, call)?;
        fail_if(errs)?;
        st.snapshot(&call.account, &slug)
            .ok_or_else(ApiError::run_not_found)?
    };
    Ok(Some(result_page(
        &run,
        &w,
        call.shared.clock.now_ms(),
        page,
        limit,
    )))
}

/// Export formats of V2 (case-insensitive).
pub(crate) const FORMATS: &[&str] = &["csv", "json", "jsonl", "xlsx", "xls", "xml", "html", "rss"];

pub(crate) fn export(call: &Call) -> Outcome {
    let format = call
        .query
        .get("format")
        .unwrap_or("csv")
        .to_ascii_lowercase();
    let mut errs = Vec::new();
    if !FORMATS.contains(&format.as_str()) {
        errs.push(format!("format must be one of {}", FORMATS.join(", ")));
    }
    let keys: Vec<String> = call
        .query
        .get("filter_keys")
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(String::from)
        .collect();
    let (run, w) = {
        let st = lock(&call.shared.state);
        let slug = resolve_run(&st, call)?;
        st.snapshot(&call.account, &slug)
            .ok_or_else(ApiError::run_not_found)?
    };
    for k in &keys {
        if !w.columns.iter().any(|c| &c.key == k) {
            errs.push(format!("filter_keys: {k} is not a result header key"));
        }
    }
    fail_if(errs)?;
    let now = call.shared.clock.now_ms();
    let count = run.view(now).results;
    let columns: Vec<_> = w
        .columns
        .iter()
        .filter(|c| keys.is_empty() || keys.contains(&c.key))
        .cloned()
        .collect();
    let rows = run.rows(&w, now, 0, count);
    let url = call
        .shared
        .exports
        .create(call.shared.v2_addr, &format, &columns, &rows);
    Ok(Some(json!({ "download_url": url })))
}
