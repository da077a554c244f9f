//! V2 catalog and account operations: proxy regions, store and worker lists, worker
//! detail, input schema, account. Shapes follow facts §2.10-§2.13.

use serde_json::{json, Value};

use super::{ApiError, Call, Outcome};
use crate::checks::{query_paging, window};
use crate::lock;
use crate::state::State;

/// Proxy regions (same list in both generations; `language` is passed through).
pub(crate) const REGIONS: &[(&str, &str)] = &[
    ("US", "United States"),
    ("GB", "United Kingdom"),
    ("DE", "Germany"),
    ("FR", "France"),
    ("JP", "Japan"),
    ("KR", "South Korea"),
    ("BR", "Brazil"),
    ("IN", "India"),
    ("SG", "Singapore"),
    ("AU", "Australia"),
];

pub(crate) fn regions_value() -> Value {
    let list: Vec<Value> = REGIONS
        .iter()
        .map(|(c, n)| json!({"code": c, "name": n}))
        .collect();
    json!({ "list": list })
}

pub(crate) fn regions(_call: &Call) -> Outcome {
    Ok(Some(regions_value()))
}

/// Worker index for a V2 `{workerId}` (slug or `owner~name`), or 404/50001.
pub(crate) fn resolve_worker(st: &State, id: Option<&str>) -> Result<usize, ApiError> {
    id.and_then(|id| st.find_worker(id))
        .ok_or_else(ApiError::worker_not_found)
}

/// `keyword` matches title, slug or path, case-insensitively.
pub(crate) fn matches_keyword(st: &State, i: usize, keyword: &str) -> bool {
    let Some(w) = st.worker(i) else { return false };
    let k = keyword.to_lowercase();
    k.is_empty()
        || w.title.to_lowercase().contains(&k)
        || w.slug.to_lowercase().contains(&k)
        || w.path().to_lowercase().contains(&k)
        || w.slash_path().to_lowercase().contains(&k)
}

/// Store (public) and worker list (key): `{scraper: [...]}`, no count.
pub(crate) fn store(call: &Call) -> Outcome {
    let mut errs = Vec::new();
    let (page, limit) = query_paging(&call.query, &mut errs);
    if !errs.is_empty() {
        return Err(ApiError::invalid(errs));
    }
    let keyword = call.query.get("keyword").unwrap_or("").trim().to_string();
    let st = lock(&call.shared.state);
    let (from, to) = window(page, limit);
    let items: Vec<Value> = (0..st.workers.len())
        .filter(|i| matches_keyword(&st, *i, &keyword))
        .skip(from as usize)
        .take((to - from) as usize)
        .filter_map(|i| st.worker(i))
        .map(|w| {
            json!({
                "slug": w.slug, "name": w.name, "path": w.path(), "title": w.title,
                "username": w.owner, "description": w.description,
            })
        })
        .collect();
    Ok(Some(json!({ "scraper": items })))
}

pub(crate) fn account(call: &Call) -> Outcome {
    let st = lock(&call.shared.state);
    let a = st
        .account(&call.account)
        .ok_or_else(ApiError::invalid_token)?;
    Ok(Some(json!({
        "balance": a.balance,
        "balance_expiration_at": a.balance_expiration_at,
    })))
}

pub(crate) fn worker(call: &Call) -> Outcome {
    let st = lock(&call.shared.state);
    let i = resolve_worker(&st, call.params.worker.as_deref())?;
    let w = st.worker(i).ok_or_else(ApiError::worker_not_found)?;
    Ok(Some(json!({
        "name": w.name,
        "username": w.owner,
        "slug": w.slug,
        "title": w.title,
        "version": w.latest_version(),
        "readme": w.readme,
        "parameters": {
            "system": {
                "cpus": w.system.cpus,
                "memory": w.system.memory,
                "max_total_charge": w.system.max_total_charge,
                "max_total_traffic": w.system.max_total_traffic,
                "execute_limit_time_seconds": w.system.execute_limit_time_seconds,
                "proxy_region": w.system.proxy_region,
            },
            "custom": w.input_schema,
        },
    })))
}

pub(crate) fn input_schema(call: &Call) -> Outcome {
    let st = lock(&call.shared.state);
    let i = resolve_worker(&st, call.params.worker.as_deref())?;
    let w = st.worker(i).ok_or_else(ApiError::worker_not_found)?;
    Ok(Some(json!({ "input_schema": w.input_schema })))
}
