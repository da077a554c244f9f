//! Run actions: starting runs (`scraper/run`, `task/run`, `rerun`) and
//! stopping them (`scraper/abort`); reading runs is `run_records`. None of
//! these calls is ever replayed upstream.
//!
//! | V1 | V2 | rule |
//! |---|---|---|
//! | `POST /api/v1/scraper/run` | `POST /api/v2/workers/{workerId}/runs` | `scraper_slug` → path (`/` → `~`, alias table, verified once, cached); unknown → 404/50001, or 401/20001 when `GET /api/v2/users/account` refuses the key (V1 checked the key first) |
//! | `version` | `version` | passed as written when given (`latest` included; blanks kept, for V2 to refuse with 50003 as V1 did); `""` → omitted; `null` → 400/4000 |
//! | `is_async` (default `true`) | `is_async` | sent explicitly |
//! | `input` (`parameters.system`, `parameters.custom`) | `input` | kept whole; must be an object with a `parameters` object holding a `custom` object (required, as on V1) |
//! | `system.cpus`, `system.memory` = `0` or `null` | omitted | V1 read 0 as "the worker's default"; V2 refuses 0, and an omitted field gets the worker's default |
//! | `system.execute_limit_time_seconds` = `0` or `null` | omitted | V1 read 0 as "no limit of my own"; V2 refuses 0; omitted, the worker's time-out (1800 s in the shipped defaults) applies |
//! | `system.max_total_charge`, `system.max_total_traffic` = `0` or `null` | omitted | V1 read 0 as "no cap" (the shipped defaults are 0); V2 refuses 0; omitted, the worker's default cap (none) applies |
//! | `system.proxy_region` = `""` or `null` | omitted | V1's default region (`US`) is V2's |
//! | other `system` values | unchanged | negative numbers and wrong types reach V2, whose refusal (with its reason) is the answer |
//! | `callback_url` | `callback_url` | optional; absolute http(s) URL; `""` → omitted; blank or `null` → 400/4000 as on V1; control characters refused (`callback_url_checks`) |
//! | sync `page_index`/`page_size` (default 1/10) | sync `offset`/`limit` | above 100 rows: first 100-row page in the run call, the rest from the result endpoint |
//! | sync `data` | sync `data` | `run_status`: `succeeded`/`failed` → `completed`, other → `running`; timestamps seconds → milliseconds; results headers gain `format` |
//! | `POST /api/v1/task/run` | `POST /api/v2/worker-tasks/{workerTaskId}/runs` | `task_slug` → path; `callback_url` required; `is_async: true`; unknown → 404/60001 |
//! | `POST /api/v1/rerun` | `POST /api/v2/worker-runs/{runId}/rerun` | `callback_url` required; `is_async: true`; `data.run_slug` of the new run |
//! | `POST /api/v1/scraper/abort` | `POST /api/v2/worker-runs/{runId}/abort` | no body; success `data: null`; failure → 500/70002 |
//!
//! V1↔V2 differences here (see `COMPATIBILITY.md`): [`run_callbacks`](crate::differences::RUN_CALLBACKS), [`callback_url_checks`](crate::differences::CALLBACK_URL_CHECKS), [`result_header_format`](crate::differences::RESULT_HEADER_FORMAT), [`zero_system_limits`](crate::differences::ZERO_SYSTEM_LIMITS).

use serde_json::{json, Map, Value};

use crate::error::{GatewayError, Subject};
use crate::ops::input::{self, Body};
use crate::ops::results::{result_call, v1_headers_of_values, DEFAULT_PAGE_SIZE};
use crate::ops::{int_of, list_of, string_of, Exchange};
use crate::paging::{Plan, Window};
use crate::upstream::{ApiKey, V2Call};
use crate::v2::{Part, RunStatus, Segment, V2Path};

/// A checked V1 start-run body, ready to become the V2 call.
pub(crate) struct StartRun {
    pub worker: Segment,
    pub body: Value,
    /// The V1 result window of a synchronous run, with its V2 plan.
    pub sync: Option<(Window, Plan)>,
}

pub(crate) fn start_run_request(
    body: &Body<'_>,
    worker: Segment,
    max_page_size: u64,
) -> Result<StartRun, GatewayError> {
    let is_async = body.opt_bool("is_async")?.unwrap_or(true);
    let input = body
        .opt_object("input")?
        .ok_or_else(|| GatewayError::bad("input", "is required"))?;
    let mut input = input.clone();
    let params = match input.get_mut("parameters") {
        Some(Value::Object(p)) => p,
        _ => {
            return Err(GatewayError::bad(
                "input.parameters",
                "must be an object with system and custom",
            ))
        }
    };
    // Required, as V1 (and V2) require it: filled in, a start V1 refused
    // would become a run, and a billed one.
    match params.get("custom") {
        None => return Err(GatewayError::bad("input.parameters.custom", "is required")),
        Some(Value::Object(_)) => {}
        Some(_) => {
            return Err(GatewayError::bad(
                "input.parameters.custom",
                "must be an object",
            ))
        }
    }
    let left_out = match params.get_mut("system") {
        None => false,
        Some(Value::Object(system)) => v2_system(system),
        Some(_) => {
            return Err(GatewayError::bad(
                "input.parameters.system",
                "must be an object",
            ))
        }
    };
    if left_out {
        body.note(&crate::differences::ZERO_SYSTEM_LIMITS);
    }
    let mut v2 = Map::new();
    v2.insert("input".into(), Value::Object(input));
    v2.insert("is_async".into(), Value::Bool(is_async));
    // Sent as written: V1 ran exactly the version named and refused one with
    // blanks in or around it as unavailable (400 / 50003), which is V2's
    // answer to it too; trimmed, it would start a run V1 refused. Only `""`
    // is V1's "no version" (the latest); `null` V1 refused (400 / 4000).
    if let Some(version) = body.opt_str_not_null("version")?.filter(|v| !v.is_empty()) {
        v2.insert("version".into(), json!(version));
    }
    if let Some(cb) = input::callback_url(body, false)? {
        v2.insert("callback_url".into(), json!(cb));
    }
    // Checked on asynchronous starts too, as V1 did, though only a
    // synchronous start has a result window to use it for.
    let window = body.window(DEFAULT_PAGE_SIZE, max_page_size)?;
    let sync = if is_async {
        None
    } else {
        let plan = window.plan();
        v2.insert("offset".into(), json!(plan.offsets.start()));
        v2.insert("limit".into(), json!(plan.limit));
        Some((window, plan))
    };
    Ok(StartRun {
        worker,
        body: Value::Object(v2),
        sync,
    })
}

/// The `system` fields whose V1 "no limit / use the default" spellings V2
/// refuses, with the spellings: numbers equal to zero and `null` (and `""`
/// for the region). The rule per field is the table at the top of this module.
const DEFAULTED_SYSTEM_FIELDS: [&str; 6] = [
    "cpus",
    "memory",
    "execute_limit_time_seconds",
    "max_total_charge",
    "max_total_traffic",
    "proxy_region",
];

/// Applies the zero-means-default rule to a V1 `input.parameters.system`:
/// a field V1 read as "the worker's default" is left out, which is how V2
/// spells the same thing. Whether any field was left out.
pub(crate) fn v2_system(system: &mut Map<String, Value>) -> bool {
    // V1 read `1024.0` as the integer it is; V2 wants an integer.
    for name in ["memory", "execute_limit_time_seconds"] {
        if let Some(v) = system.get_mut(name) {
            if let Some(n) = v
                .as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 9e15)
            {
                if !v.is_u64() {
                    *v = json!(n as u64);
                }
            }
        }
    }
    let before = system.len();
    system.retain(|name, value| {
        let region = name == "proxy_region";
        let means_default = match value {
            Value::Null => true,
            Value::Number(n) => !region && n.as_f64() == Some(0.0),
            Value::String(s) => region && s.trim().is_empty(),
            _ => false,
        };
        !(means_default && DEFAULTED_SYSTEM_FIELDS.contains(&name.as_str()))
    });
    system.len() != before
}

/// `data.run_slug` of an asynchronous start, rerun or task run.
pub(crate) fn v1_run_slug(data: &Value) -> Result<Value, GatewayError> {
    match data.get("run_slug").and_then(Value::as_str) {
        Some(slug) => Ok(json!({ "run_slug": slug })),
        None => Err(GatewayError::Garbled("run answer without run_slug".into())),
    }
}

/// Seconds → milliseconds for V1's synchronous timestamps. Values already in
/// milliseconds (13 digits) are kept, so either V2 reading works.
fn to_millis(v: Option<&Value>) -> i64 {
    let t = int_of(v).unwrap_or(0);
    if t > 0 && t < 100_000_000_000 {
        t * 1000
    } else {
        t
    }
}

/// The V1 synchronous answer (facts §1.3) from the V2 one and the extra
/// result pages fetched for windows above 100 rows.
pub(crate) fn v1_sync(data: &Value, window: Window, plan: &Plan, extra_pages: &[Value]) -> Value {
    let completed = data
        .get("run_status")
        .and_then(Value::as_str)
        .and_then(RunStatus::parse)
        .is_some_and(RunStatus::is_completed);
    let first = data.get("results").cloned().unwrap_or(Value::Null);
    let count = int_of(first.get("count")).unwrap_or(0);
    let mut pages = vec![list_of(&first, "list").to_vec()];
    pages.extend(extra_pages.iter().map(|p| list_of(p, "list").to_vec()));
    let rows = plan.assemble(pages);
    let headers = v1_headers_of_values(list_of(&first, "headers"), &rows);
    json!({
        "run_slug": string_of(data.get("run_slug")).unwrap_or_default(),
        "run_status": if completed { "completed" } else { "running" },
        "error_message": string_of(data.get("error_message")).unwrap_or_default(),
        "result_message": string_of(data.get("result_message")).unwrap_or_default(),
        "execution_start_timestamp": to_millis(data.get("execution_start_timestamp")),
        "execution_end_timestamp": to_millis(data.get("execution_end_timestamp")),
        "running_duration": int_of(data.get("running_duration")).unwrap_or(0),
        "results": {
            "count": count,
            "headers": headers,
            "list": rows,
            "page_index": window.page_index,
            "page_size": window.page_size,
        },
    })
}

pub(crate) async fn start_run(ex: &Exchange<'_>, body: &Body<'_>) -> Result<Value, GatewayError> {
    let raw = body.req_str("scraper_slug")?;
    // V1 looked the worker up before it read the rest of the body: an id no
    // worker can have is 404 / 50001 whatever else is wrong.
    let ident = ex.worker(raw);
    let worker = ex.known(&ident)?.clone();
    let mut req = start_run_request(body, worker, ex.settings().max_page_size)?;
    let key = ex.key()?;
    // Callback relay: V2 gets the gateway's callback URL, not the client's.
    if let Some(Value::String(cb)) = req.body.get_mut("callback_url") {
        *cb = ex
            .v2_callback_url(Some(&key), Some(std::mem::take(cb)))?
            .unwrap_or_default();
    }
    if let Err(unknown) = ex.translator.worker_ids.verify(ex, &req.worker).await {
        return Err(key_refused_or(ex, &key, unknown).await);
    }
    let path = V2Path::new(&[
        Part::Lit("workers"),
        Part::Id(&req.worker),
        Part::Lit("runs"),
    ]);
    let mut call = V2Call::post(path, Some(req.body)).with_key(Some(key.clone()));
    if req.sync.is_some() {
        call = call.with_attempt_timeout(ex.settings().sync_run_timeout);
    }
    let data = ex.call(call, Subject::Worker).await?;
    let Some((window, plan)) = req.sync else {
        return v1_run_slug(&data);
    };
    if !data.get("results").is_some_and(Value::is_object) && data.get("run_status").is_none() {
        // V2 answered a synchronous start like an asynchronous one.
        return v1_run_slug(&data);
    }
    let first_short =
        (list_of(data.get("results").unwrap_or(&Value::Null), "list").len() as u64) < plan.limit;
    let rest = if plan.calls() > 1 && !first_short {
        let run = input::id(
            &string_of(data.get("run_slug")).unwrap_or_default(),
            "run_slug",
        )
        .map_err(|_| {
            GatewayError::Garbled("synchronous answer without a usable run_slug".into())
        })?;
        ex.pages(plan.offsets.clone().skip(1), Subject::Run, |o| {
            result_call(&run, o, plan.limit).with_key(Some(key.clone()))
        })
        .await?
    } else {
        Vec::new()
    };
    Ok(v1_sync(&data, window, &plan, &rest))
}

/// The answer to a start whose worker V2 does not know: V1 checked the key
/// before it looked the worker up, so with a key V2 refuses this is 401 /
/// 20001, not 404 / 50001. The worker check (input-schema, or the cache)
/// never sees the key, so the key is checked here with one keyed V2 call,
/// the account, made only on this error path. Any other outcome of that call
/// (the key accepted, V2 failing or busy) leaves the 404: the worker is
/// known not to exist, and the call was only to order the two faults as V1
/// did.
async fn key_refused_or(ex: &Exchange<'_>, key: &ApiKey, err: GatewayError) -> GatewayError {
    if !err.is_unknown_worker() {
        return err;
    }
    let account = V2Path::new(&[Part::Lit("users"), Part::Lit("account")]);
    match ex
        .call(
            V2Call::get(account).with_key(Some(key.clone())),
            Subject::Other,
        )
        .await
    {
        Err(refused) if refused.is_invalid_key() => refused,
        _ => err,
    }
}

pub(crate) async fn start_task_run(
    ex: &Exchange<'_>,
    body: &Body<'_>,
) -> Result<Value, GatewayError> {
    let task = input::task_id(body.trimmed(body.req_str("task_slug")?));
    let callback = input::callback_url(body, true)?;
    let callback = ex.v2_callback_url(ex.key().ok().as_ref(), callback)?;
    let path = V2Path::new(&[
        Part::Lit("worker-tasks"),
        Part::Id(ex.known(&task)?),
        Part::Lit("runs"),
    ]);
    let v2 = json!({ "callback_url": callback, "is_async": true });
    let data = ex
        .call(
            V2Call::post(path, Some(v2)).with_key(Some(ex.key()?)),
            Subject::Task,
        )
        .await?;
    v1_run_slug(&data)
}

pub(crate) async fn rerun(ex: &Exchange<'_>, body: &Body<'_>) -> Result<Value, GatewayError> {
    let run = body.run_slug()?;
    let callback = input::callback_url(body, true)?;
    let callback = ex.v2_callback_url(ex.key().ok().as_ref(), callback)?;
    let path = V2Path::new(&[
        Part::Lit("worker-runs"),
        Part::Id(ex.known(&run)?),
        Part::Lit("rerun"),
    ]);
    let v2 = json!({ "callback_url": callback, "is_async": true });
    let data = ex
        .call(
            V2Call::post(path, Some(v2)).with_key(Some(ex.key()?)),
            Subject::Run,
        )
        .await?;
    v1_run_slug(&data)
}

pub(crate) async fn abort(ex: &Exchange<'_>, body: &Body<'_>) -> Result<Value, GatewayError> {
    let run = body.run_slug()?;
    let path = V2Path::new(&[
        Part::Lit("worker-runs"),
        Part::Id(ex.known(&run)?),
        Part::Lit("abort"),
    ]);
    ex.call(
        V2Call::post(path, None).with_key(Some(ex.key()?)),
        Subject::Abort,
    )
    .await
    .map_err(|e| match e {
        GatewayError::Upstream(failure) => GatewayError::AbortUnconfirmed(failure),
        // An answer that cannot be read confirms nothing either.
        GatewayError::Garbled(why) => GatewayError::AbortUnreadable(why),
        other => other,
    })?;
    Ok(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(body: &str) -> Result<StartRun, GatewayError> {
        start_run_request(
            &Body::parse(body.as_bytes()).unwrap(),
            Segment::new("w").unwrap(),
            1000,
        )
    }

    #[test]
    fn async_start_keeps_input_and_sends_is_async() {
        let r = req(r#"{"scraper_slug":"w","version":"v1.0.2","is_async":true,"callback_url":"http://h/cb","input":{"parameters":{"system":{"cpus":1,"memory":512},"custom":{"q":"x"}}}}"#).unwrap();
        assert_eq!(
            r.body,
            json!({"input":{"parameters":{"system":{"cpus":1,"memory":512},"custom":{"q":"x"}}},"is_async":true,"version":"v1.0.2","callback_url":"http://h/cb"})
        );
        assert!(r.sync.is_none());
    }

    #[test]
    fn zero_system_limits_become_the_workers_defaults() {
        let r = req(r#"{"input":{"parameters":{"custom":{},"system":{"cpus":0,"memory":0.0,"execute_limit_time_seconds":0,"max_total_charge":0,"max_total_traffic":null,"proxy_region":""}}}}"#).unwrap();
        assert_eq!(r.body["input"]["parameters"]["system"], json!({}));
        let r = req(r#"{"input":{"parameters":{"custom":{},"system":{"cpus":0.125,"memory":512,"execute_limit_time_seconds":0,"max_total_charge":2,"max_total_traffic":0,"proxy_region":"DE"}}}}"#).unwrap();
        assert_eq!(
            r.body["input"]["parameters"]["system"],
            json!({"cpus":0.125,"memory":512,"max_total_charge":2,"proxy_region":"DE"})
        );
        let r = req(r#"{"input":{"parameters":{"custom":{},"system":{"memory":1024.0,"execute_limit_time_seconds":600.0,"cpus":0.5}}}}"#).unwrap();
        let system = &r.body["input"]["parameters"]["system"];
        assert_eq!(
            system,
            &json!({"cpus":0.5,"execute_limit_time_seconds":600,"memory":1024})
        );
        assert!(system["memory"].is_u64() && system["execute_limit_time_seconds"].is_u64());
        // Found by schemathesis: a region of 0 is a wrong type, not a default.
        let r =
            req(r#"{"input":{"parameters":{"custom":{},"system":{"proxy_region":0}}}}"#).unwrap();
        assert_eq!(
            r.body["input"]["parameters"]["system"],
            json!({"proxy_region":0})
        );
        // Not a default spelling: passed on for V2 to judge.
        let r = req(
            r#"{"input":{"parameters":{"custom":{},"system":{"cpus":-1,"memory":"0","other":0}}}}"#,
        )
        .unwrap();
        assert_eq!(
            r.body["input"]["parameters"]["system"],
            json!({"cpus":-1,"memory":"0","other":0})
        );
    }

    #[test]
    fn bad_inputs_are_refused() {
        assert!(req(r#"{"input":{"q":"flat"}}"#).is_err());
        assert!(req(r#"{}"#).is_err());
        assert!(req(r#"{"input":{"parameters":{"custom":[]}}}"#).is_err());
        // `custom` is required: left out or null, no run is started.
        for input in [
            r#"{"parameters":{}}"#,
            r#"{"parameters":{"custom":null}}"#,
            r#"{"parameters":{"system":{"cpus":0.125}}}"#,
        ] {
            let e = req(&format!(r#"{{"is_async":true,"input":{input}}}"#)).err();
            let e = e.map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("input.parameters.custom"), "{input}: {e:?}");
        }
        assert!(req(r#"{"input":{"parameters":{"custom":{}}},"is_async":"no"}"#).is_err());
        assert!(req(r#"{"input":{"parameters":{"custom":{}}},"callback_url":"x"}"#).is_err());
    }

    /// Found by a differential review against the native V1 surface: a
    /// version with blanks (`" "`, `"v1.2.6 "`, `" latest"`) was trimmed and
    /// a run started, where V1 answered 400 / 50003; `null` started one where
    /// V1 answered 400 / 4000. Sent as written, V2 refuses it as V1 did.
    #[test]
    fn versions_are_sent_as_written_and_null_is_refused() {
        let with = |version: &str| {
            req(&format!(
                r#"{{"version":{version},"input":{{"parameters":{{"custom":{{}}}}}}}}"#
            ))
        };
        for v in [" ", "v1.2.6 ", " latest", "latest", "v1.0.2"] {
            let r = with(&json!(v).to_string()).unwrap();
            assert_eq!(r.body["version"], v, "{v:?}");
        }
        assert!(with(r#""""#).unwrap().body.get("version").is_none());
        let e = with("null")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("version must be a string"), "{e:?}");
        assert!(with("1").is_err());
    }

    /// Same review: an optional `callback_url` of `" "` or `null` started a
    /// run without a callback; V1 refused both (400 / 4000).
    #[test]
    fn a_blank_or_null_callback_url_is_refused() {
        for cb in [r#"" ""#, "null", r#""\t""#] {
            let body =
                format!(r#"{{"callback_url":{cb},"input":{{"parameters":{{"custom":{{}}}}}}}}"#);
            let e = req(&body).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("callback_url"), "{cb}: {e:?}");
        }
        let r = req(r#"{"callback_url":"","input":{"parameters":{"custom":{}}}}"#).unwrap();
        assert!(r.body.get("callback_url").is_none());
    }

    /// Found by schemathesis: an asynchronous start with `page_size` 1001 was
    /// accepted, where V1 (and the native V1 surface) refuse it.
    #[test]
    fn the_window_is_checked_on_asynchronous_starts_too() {
        let e = req(r#"{"is_async":true,"page_size":1001,"input":{"parameters":{"custom":{}}}}"#);
        assert!(e.is_err());
        assert!(req(r#"{"page_index":0,"input":{"parameters":{"custom":{}}}}"#).is_err());
        let r = req(r#"{"is_async":true,"page_size":1000,"input":{"parameters":{"custom":{}}}}"#)
            .unwrap();
        assert!(r.body.get("limit").is_none());
    }

    #[test]
    fn sync_window_goes_into_the_body() {
        let r =
            req(r#"{"is_async":false,"page_index":3,"page_size":250,"input":{"parameters":{"custom":{}}}}"#)
                .unwrap();
        assert_eq!(r.body["offset"], 6);
        assert_eq!(r.body["limit"], 100);
        let r = req(r#"{"is_async":false,"input":{"parameters":{"custom":{}}}}"#).unwrap();
        assert_eq!(
            (r.body["offset"].as_u64(), r.body["limit"].as_u64()),
            (Some(1), Some(10))
        );
    }

    #[test]
    fn sync_answer_is_v1_shaped() {
        let v2 = json!({"run_slug":"R","run_status":"succeeded","error_message":"","execution_start_timestamp":1786000780,"execution_end_timestamp":1786000787,"running_duration":7,"result_message":"",
            "results":{"count":1,"headers":[{"key":"title","label":"Title"}],"list":[{"title":"x"}],"page_index":1,"page_size":10}});
        let w = Window {
            page_index: 1,
            page_size: 10,
        };
        let out = v1_sync(&v2, w, &w.plan(), &[]);
        assert_eq!(out["run_status"], "completed");
        assert_eq!(out["execution_start_timestamp"], 1786000780000i64);
        assert_eq!(out["results"]["headers"][0]["format"], "text");
        let running = v1_sync(
            &json!({"run_slug":"R","run_status":"running"}),
            w,
            &w.plan(),
            &[],
        );
        assert_eq!(running["run_status"], "running");
        assert_eq!(running["results"]["list"], json!([]));
    }
}
