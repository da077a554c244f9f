//! V2 saved tasks: create, list, get, update, get/update input, delete. A task is a
//! worker + preset input (+ version, schedule); running it is in `v2::runs`. Shapes
//! follow facts §2.14.

use serde_json::{json, Map, Value};

use super::catalog::resolve_worker;
use super::{ApiError, Call, Outcome};
use crate::checks::{check_input, query_paging, window, Fields, ZeroLimits};
use crate::lock;
use crate::state::{State, Task};

const SCHEDULE: &[&str] = &[
    "schedule_type",
    "schedule_time",
    "schedule_weekday",
    "schedule_day",
    "schedule_once_date",
    "schedule_enabled",
];

/// Check the `schedule_*` fields present in the body and copy them into `into`.
fn schedule_fields(f: &mut Fields, into: &mut Map<String, Value>) {
    let ranges: &[(&str, i64, i64)] = &[
        ("schedule_type", 1, 4),
        ("schedule_weekday", 1, 7),
        ("schedule_day", 1, 31),
        ("schedule_enabled", 0, 1),
    ];
    for (k, lo, hi) in ranges {
        if let Some(n) = f.int(k, *lo, *hi) {
            into.insert(k.to_string(), json!(n));
        }
    }
    if let Some(t) = f.str("schedule_time") {
        let ok = t.len() == 5
            && t.split_once(':').is_some_and(|(h, m)| {
                h.parse::<u8>().is_ok_and(|h| h < 24) && m.parse::<u8>().is_ok_and(|m| m < 60)
            });
        if ok {
            into.insert("schedule_time".into(), json!(t));
        } else {
            f.errors.push("schedule_time must be HH:mm".into());
        }
    }
    if let Some(d) = f.str("schedule_once_date") {
        into.insert("schedule_once_date".into(), json!(d));
    }
}

fn task_value(st: &State, t: &Task) -> Value {
    let (slug, path, title) = st
        .worker(t.worker)
        .map(|w| (w.slug.clone(), w.slash_path(), w.title.clone()))
        .unwrap_or_default();
    let mut v = json!({
        "slug": t.slug,
        "worker_slug": slug,
        "worker_path": path,
        "worker_title": title,
        "version": t.version,
        "title": t.title,
        "description": t.description,
        "input": t.input,
        "run_times": t.run_times,
        "schedule_enabled": t.schedule.get("schedule_enabled").cloned().unwrap_or(json!(0)),
        "schedule_type": t.schedule.get("schedule_type").cloned().unwrap_or(json!(0)),
        "created_at": t.created_at,
        "updated_at": t.updated_at,
        "last_modified_at": t.updated_at,
    });
    if let Some(obj) = v.as_object_mut() {
        for (k, val) in &t.schedule {
            obj.entry(k.clone()).or_insert(val.clone());
        }
    }
    v
}

fn fail_if(errs: Vec<String>) -> Result<(), ApiError> {
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(errs))
    }
}

pub(super) fn create(call: &Call) -> Outcome {
    let mut allowed = vec!["worker_id", "title", "input", "description", "version"];
    allowed.extend_from_slice(SCHEDULE);
    let mut f = Fields::new(&call.body, Some(&allowed));
    let worker_id = f.req_str("worker_id");
    let title = f.req_str("title");
    let description = f.str("description").unwrap_or_default();
    let version = f.str("version");
    if !f.has("input") {
        f.errors.push("input is required".into());
    }
    let input = f.value("input").cloned().unwrap_or(Value::Null);
    let mut schedule = Map::new();
    schedule_fields(&mut f, &mut schedule);
    let mut errs = f.errors;
    let now = call.shared.clock.now_ms() / 1000;
    let mut st = lock(&call.shared.state);
    let worker = match worker_id {
        Some(id) => resolve_worker(&st, Some(&id))?,
        None => return Err(ApiError::invalid(errs)),
    };
    if !input.is_null() {
        if let Some(w) = st.worker(worker) {
            check_input(&input, w, ZeroLimits::Refused, &mut errs);
        }
    }
    fail_if(errs)?;
    let version = match version.as_deref() {
        None | Some("latest") => "latest".to_string(),
        Some(v) => st
            .resolve_version(worker, Some(v))
            .ok_or_else(|| ApiError::version_unavailable(v))?,
    };
    let slug = ulid::Ulid::new().to_string();
    st.add_task(Task {
        slug: slug.clone(),
        account: call.account.clone(),
        worker,
        title: title.unwrap_or_default(),
        description,
        version,
        input,
        schedule,
        created_at: now,
        updated_at: now,
        run_times: 0,
    });
    Ok(Some(json!({ "slug": slug })))
}

pub(super) fn list(call: &Call) -> Outcome {
    let mut errs = Vec::new();
    let (page, limit) = query_paging(&call.query, &mut errs);
    fail_if(errs)?;
    let st = lock(&call.shared.state);
    let worker = match call.query.get("worker_id") {
        Some(id) if !id.is_empty() => match st.find_worker(id) {
            Some(w) => Some(w),
            None => {
                return Ok(Some(
                    json!({"count": 0, "list": [], "page_index": page, "page_size": limit}),
                ))
            }
        },
        _ => None,
    };
    let keyword = call.query.get("keyword").unwrap_or("").to_lowercase();
    let matching: Vec<&Task> = st
        .tasks_of(&call.account)
        .filter(|t| worker.is_none_or(|w| t.worker == w))
        .filter(|t| keyword.is_empty() || t.title.to_lowercase().contains(&keyword))
        .collect();
    let (from, to) = window(page, limit);
    let list: Vec<Value> = matching
        .iter()
        .skip(from as usize)
        .take((to - from) as usize)
        .map(|t| task_value(&st, t))
        .collect();
    Ok(Some(
        json!({"count": matching.len(), "list": list, "page_index": page, "page_size": limit}),
    ))
}

fn task_slug<'a>(call: &'a Call) -> &'a str {
    call.params.task.as_deref().unwrap_or("")
}

pub(super) fn get(call: &Call) -> Outcome {
    let st = lock(&call.shared.state);
    let t = st
        .task(&call.account, task_slug(call))
        .ok_or_else(ApiError::task_not_found)?;
    Ok(Some(task_value(&st, t)))
}

pub(super) fn update(call: &Call) -> Outcome {
    let mut allowed = vec!["title", "description"];
    allowed.extend_from_slice(SCHEDULE);
    let mut f = Fields::new(&call.body, Some(&allowed));
    let title = if f.has("title") {
        f.req_str("title")
    } else {
        None
    };
    let description = f.str("description");
    let mut schedule = Map::new();
    schedule_fields(&mut f, &mut schedule);
    let now = call.shared.clock.now_ms() / 1000;
    let mut st = lock(&call.shared.state);
    let t = st
        .task_mut(&call.account, task_slug(call))
        .ok_or_else(ApiError::task_not_found)?;
    fail_if(f.errors)?;
    if let Some(title) = title {
        t.title = title;
    }
    if let Some(d) = description {
        t.description = d;
    }
    t.schedule.extend(schedule);
    t.updated_at = now;
    Ok(Some(json!({})))
}

pub(super) fn get_input(call: &Call) -> Outcome {
    let st = lock(&call.shared.state);
    let t = st
        .task(&call.account, task_slug(call))
        .ok_or_else(ApiError::task_not_found)?;
    Ok(Some(json!({"input": t.input, "version": t.version})))
}

pub(super) fn update_input(call: &Call) -> Outcome {
    let mut f = Fields::new(&call.body, Some(&["input", "version"]));
    if !f.has("input") {
        f.errors.push("input is required".into());
    }
    let input = f.value("input").cloned();
    let version = f.str("version");
    let mut errs = f.errors;
    let now = call.shared.clock.now_ms() / 1000;
    let mut st = lock(&call.shared.state);
    let worker = st
        .task(&call.account, task_slug(call))
        .map(|t| t.worker)
        .ok_or_else(ApiError::task_not_found)?;
    if let (Some(input), Some(w)) = (&input, st.worker(worker)) {
        check_input(input, w, ZeroLimits::Refused, &mut errs);
    }
    fail_if(errs)?;
    let version = match version.as_deref() {
        None => None,
        Some("latest") => Some("latest".to_string()),
        Some(v) => Some(
            st.resolve_version(worker, Some(v))
                .ok_or_else(|| ApiError::version_unavailable(v))?,
        ),
    };
    let t = st
        .task_mut(&call.account, task_slug(call))
        .ok_or_else(ApiError::task_not_found)?;
    if let Some(i) = input {
        t.input = i;
    }
    if let Some(v) = version {
        t.version = v;
    }
    t.updated_at = now;
    Ok(Some(json!({})))
}

pub(super) fn delete(call: &Call) -> Outcome {
    if lock(&call.shared.state).delete_task(&call.account, task_slug(call)) {
        Ok(None)
    } else {
        Err(ApiError::task_not_found())
    }
}
