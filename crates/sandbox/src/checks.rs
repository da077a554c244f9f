//! Request contract checks shared by both surfaces: query parsing with allowed
//! parameter lists, paging rules, typed JSON body fields with unknown-field detection,
//! and validation of run `input` against a worker's schema. Each check returns plain
//! problem strings; the surface decides the status and code (V2 422/11000, V1 400/4000).

use serde_json::{Map, Value};

use super::catalog::WorkerSpec;

/// Parsed query string (later duplicates win).
#[derive(Debug, Default)]
pub(crate) struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    pub(crate) fn parse(raw: &str) -> Self {
        Query {
            pairs: url::form_urlencoded::parse(raw.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        }
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Names not in `allowed`, once each, in order of appearance.
    pub(crate) fn unknown(&self, allowed: &[&str]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (k, _) in &self.pairs {
            if !allowed.contains(&k.as_str()) && !out.contains(k) {
                out.push(k.clone());
            }
        }
        out
    }
}

/// Largest V2 page size.
pub(crate) const MAX_LIMIT: i64 = 100;
/// V2 default page size.
pub(crate) const DEFAULT_LIMIT: u64 = 20;

fn parse_int(name: &str, raw: &str, min: i64, max: i64, errs: &mut Vec<String>) -> Option<i64> {
    match raw.trim().parse::<i64>() {
        Ok(n) if (min..=max).contains(&n) => Some(n),
        Ok(_) => {
            errs.push(format!("{name} must be between {min} and {max}"));
            None
        }
        Err(_) => {
            errs.push(format!("{name} must be an integer"));
            None
        }
    }
}

/// V2 query paging: `offset` is a 1-based page number (0 means 1, default 1),
/// `limit` 1-100 (default 20). Returns (page, limit).
pub(crate) fn query_paging(q: &Query, errs: &mut Vec<String>) -> (u64, u64) {
    let limit = q
        .get("limit")
        .and_then(|v| parse_int("limit", v, 1, MAX_LIMIT, errs))
        .map(|n| n as u64)
        .unwrap_or(DEFAULT_LIMIT);
    let page = q
        .get("offset")
        .and_then(|v| parse_int("offset", v, 0, i64::MAX, errs))
        .map(|n| n.max(1) as u64)
        .unwrap_or(1);
    (page, limit)
}

/// Optional integer query parameter with a range.
pub(crate) fn query_int(
    q: &Query,
    name: &str,
    min: i64,
    max: i64,
    errs: &mut Vec<String>,
) -> Option<i64> {
    q.get(name).and_then(|v| parse_int(name, v, min, max, errs))
}

/// Index range of page `page` (1-based) of size `limit`.
pub(crate) fn window(page: u64, limit: u64) -> (u64, u64) {
    let from = page.saturating_sub(1).saturating_mul(limit);
    (from, from.saturating_add(limit))
}

/// Parse a JSON request body. Empty → `Ok(None)`; not JSON → `Err`.
pub(crate) fn parse_body(body: &[u8]) -> Result<Option<Value>, String> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(None);
    }
    serde_json::from_slice(body)
        .map(Some)
        .map_err(|e| format!("request body is not valid JSON: {e}"))
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Typed access to the fields of a JSON object body, collecting problems.
pub(crate) struct Fields<'a> {
    obj: &'a Map<String, Value>,
    pub errors: Vec<String>,
}

impl<'a> Fields<'a> {
    /// `allowed = None` accepts any field (the lenient V1 surface).
    pub(crate) fn new(obj: &'a Map<String, Value>, allowed: Option<&[&str]>) -> Self {
        let mut errors = Vec::new();
        if let Some(allowed) = allowed {
            for k in obj.keys() {
                if !allowed.contains(&k.as_str()) {
                    errors.push(format!("unknown field: {k}"));
                }
            }
        }
        Fields { obj, errors }
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.obj.contains_key(key)
    }

    pub(crate) fn value(&self, key: &str) -> Option<&'a Value> {
        self.obj.get(key)
    }

    fn wrong(&mut self, key: &str, want: &str, got: &Value) {
        self.errors
            .push(format!("{key} must be {want}, got {}", type_name(got)));
    }

    pub(crate) fn str(&mut self, key: &str) -> Option<String> {
        match self.obj.get(key)? {
            Value::String(s) => Some(s.clone()),
            other => {
                self.wrong(key, "a string", other);
                None
            }
        }
    }

    pub(crate) fn req_str(&mut self, key: &str) -> Option<String> {
        if !self.has(key) {
            self.errors.push(format!("{key} is required"));
            return None;
        }
        let s = self.str(key)?;
        if s.trim().is_empty() {
            self.errors.push(format!("{key} must not be empty"));
            return None;
        }
        Some(s)
    }

    pub(crate) fn bool(&mut self, key: &str) -> Option<bool> {
        match self.obj.get(key)? {
            Value::Bool(b) => Some(*b),
            other => {
                self.wrong(key, "a boolean", other);
                None
            }
        }
    }

    pub(crate) fn int(&mut self, key: &str, min: i64, max: i64) -> Option<i64> {
        let v = self.obj.get(key)?;
        match v.as_i64() {
            Some(n) if (min..=max).contains(&n) => Some(n),
            Some(_) => {
                self.errors
                    .push(format!("{key} must be between {min} and {max}"));
                None
            }
            None => {
                self.wrong(key, "an integer", v);
                None
            }
        }
    }

    /// A `callback_url`: an absolute http(s) URL.
    pub(crate) fn url(&mut self, key: &str) -> Option<String> {
        let s = self.str(key)?;
        match url::Url::parse(&s) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => Some(s),
            _ => {
                self.errors
                    .push(format!("{key} must be an absolute http(s) URL"));
                None
            }
        }
    }
}

/// System input fields and whether each must be an integer (else any number,
/// or a string for `proxy_region`).
const SYSTEM_FIELDS: &[&str] = &[
    "cpus",
    "memory",
    "execute_limit_time_seconds",
    "max_total_charge",
    "max_total_traffic",
    "proxy_region",
];

/// How a surface reads a zero (or `null`) system limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ZeroLimits {
    /// V1: `0` / `null` (and `""` for the region) mean "the worker's default";
    /// the published n8n V1 workflow templates send `execute_limit_time_seconds: 0`.
    MeanDefault,
    /// V2: numeric limits must be positive; a field left out gets the default.
    Refused,
}

/// Check a run `input` against the worker: `{"parameters": {"custom": {...},
/// "system"?: {...}}}`, known system fields with the right types and ranges (zero
/// read per `zero`), and custom values that match the schema (required present,
/// declared types respected).
pub(crate) fn check_input(
    input: &Value,
    worker: &WorkerSpec,
    zero: ZeroLimits,
    errs: &mut Vec<String>,
) {
    let Some(obj) = input.as_object() else {
        errs.push(format!("input must be an object, got {}", type_name(input)));
        return;
    };
    for k in obj.keys() {
        if k != "parameters" {
            errs.push(format!(
                "unknown field: input.{k} (input must be {{\"parameters\":{{\"custom\":{{...}}}}}})"
            ));
        }
    }
    let Some(params) = obj.get("parameters").and_then(Value::as_object) else {
        errs.push("input.parameters.custom is required (flat input is not accepted)".into());
        return;
    };
    for k in params.keys() {
        if k != "custom" && k != "system" {
            errs.push(format!("unknown field: input.parameters.{k}"));
        }
    }
    match params.get("system") {
        None => {}
        Some(Value::Object(sys)) => check_system(sys, zero, errs),
        Some(other) => errs.push(format!(
            "input.parameters.system must be an object, got {}",
            type_name(other)
        )),
    }
    match params.get("custom") {
        Some(Value::Object(custom)) => check_custom(custom, worker, errs),
        Some(other) => errs.push(format!(
            "input.parameters.custom must be an object, got {}",
            type_name(other)
        )),
        None => errs.push("input.parameters.custom is required".into()),
    }
}

fn check_system(sys: &Map<String, Value>, zero: ZeroLimits, errs: &mut Vec<String>) {
    for (k, v) in sys {
        let region = k == "proxy_region";
        let default_spelling = match v {
            Value::Null => true,
            Value::Number(n) => !region && n.as_f64() == Some(0.0),
            _ => false,
        };
        if zero == ZeroLimits::MeanDefault
            && default_spelling
            && SYSTEM_FIELDS.contains(&k.as_str())
        {
            continue;
        }
        if default_spelling && SYSTEM_FIELDS.contains(&k.as_str()) && !region {
            errs.push(format!(
                "input.parameters.system.{k} must be greater than 0 (omit it for the worker's default)"
            ));
            continue;
        }
        let ok = match k.as_str() {
            "proxy_region" => v.is_string(),
            "cpus" | "max_total_charge" | "max_total_traffic" => {
                v.as_f64().is_some_and(|n| n > 0.0)
            }
            "memory" | "execute_limit_time_seconds" => match zero {
                ZeroLimits::Refused => v.as_u64().is_some_and(|n| n > 0),
                // V1 read `1024.0` as the integer it is.
                ZeroLimits::MeanDefault => v.as_f64().is_some_and(|n| n > 0.0 && n.fract() == 0.0),
            },
            _ => {
                errs.push(format!(
                    "unknown field: input.parameters.system.{k} (allowed: {})",
                    SYSTEM_FIELDS.join(", ")
                ));
                continue;
            }
        };
        if !ok {
            errs.push(format!(
                "input.parameters.system.{k} has the wrong type or range ({})",
                type_name(v)
            ));
        }
    }
}

fn check_custom(custom: &Map<String, Value>, worker: &WorkerSpec, errs: &mut Vec<String>) {
    for p in worker.properties() {
        let Some(name) = p.get("name").and_then(Value::as_str) else {
            continue;
        };
        let required = p.get("required").and_then(Value::as_bool).unwrap_or(false);
        let has_default = p.get("default").is_some_and(|d| !d.is_null());
        let Some(v) = custom.get(name) else {
            if required && !has_default {
                errs.push(format!("input.parameters.custom.{name} is required"));
            }
            continue;
        };
        let ty = p.get("type").and_then(Value::as_str).unwrap_or("");
        let ok = match ty {
            "array" => v.is_array(),
            "string" => v.is_string(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            "boolean" => v.is_boolean(),
            "object" => v.is_object(),
            _ => true,
        };
        if !ok {
            errs.push(format!(
                "input.parameters.custom.{name} must be of type {ty}, got {}",
                type_name(v)
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::seed_workers;
    use serde_json::json;

    fn paging(raw: &str) -> Result<(u64, u64), Vec<String>> {
        let mut errs = Vec::new();
        let r = query_paging(&Query::parse(raw), &mut errs);
        if errs.is_empty() {
            Ok(r)
        } else {
            Err(errs)
        }
    }

    #[test]
    fn paging_rules() {
        assert_eq!(paging(""), Ok((1, 20)));
        assert_eq!(paging("offset=0&limit=5"), Ok((1, 5)));
        assert_eq!(paging("offset=3&limit=100"), Ok((3, 100)));
        assert!(paging("limit=0").is_err());
        assert!(paging("limit=101").is_err());
        assert!(paging("offset=-1").is_err());
        assert!(paging("limit=abc").is_err());
        assert_eq!(window(1, 20), (0, 20));
        assert_eq!(window(3, 10), (20, 30));
    }

    #[test]
    fn unknown_query_params() {
        let q = Query::parse("a=1&limit=2&a=3&token=x");
        assert_eq!(q.unknown(&["limit", "token"]), vec!["a".to_string()]);
        assert_eq!(q.get("a"), Some("3"));
    }

    #[test]
    fn input_shapes() {
        let w = &seed_workers()[0];
        let check = |v: Value| {
            let mut e = Vec::new();
            check_input(&v, w, ZeroLimits::Refused, &mut e);
            e
        };
        let v1 = |v: Value| {
            let mut e = Vec::new();
            check_input(&v, w, ZeroLimits::MeanDefault, &mut e);
            e
        };
        let zeros = json!({"parameters":{"custom":{},"system":{"cpus":0,"memory":0,"execute_limit_time_seconds":0,"max_total_charge":0,"max_total_traffic":null}}});
        assert_eq!(check(zeros.clone()).len(), 5, "V2 refuses every zero limit");
        assert!(check(zeros.clone())[0].contains("greater than 0"));
        assert!(v1(zeros).is_empty(), "V1 reads zero as the default");
        assert!(!v1(json!({"parameters":{"custom":{},"system":{"cpus":-1}}})).is_empty());
        // A region of 0 is a wrong type on both surfaces, not a default.
        let region_zero = json!({"parameters":{"custom":{},"system":{"proxy_region":0}}});
        assert!(!v1(region_zero.clone()).is_empty());
        assert!(!check(region_zero).is_empty());
        assert!(v1(json!({"parameters":{"custom":{},"system":{"memory":1024.0}}})).is_empty());
        assert!(check(json!({"parameters":{"custom":{"keywords":["a"]}}})).is_empty());
        assert!(check(json!({"parameters":{"custom":{},"system":{"cpus":0.5,"memory":512,"proxy_region":"US"}}})).is_empty());
        assert!(!check(json!({"keywords":["a"]})).is_empty(), "flat input");
        assert!(!check(json!({"parameters":{"keywords":["a"]}})).is_empty());
        assert!(!check(json!({"parameters":{"custom":{"keywords":"a"}}})).is_empty());
        assert!(
            !check(json!({"parameters":{"custom":{},"system":{"memory_bytes":512}}})).is_empty()
        );
        assert!(!check(json!([1])).is_empty());
    }

    #[test]
    fn fields_types() {
        let obj = json!({"a":"x","b":true,"c":5,"d":"nope","e":"ftp://x"});
        let obj = obj.as_object().unwrap();
        let mut f = Fields::new(obj, Some(&["a", "b", "c", "d", "e"]));
        assert_eq!(f.str("a").as_deref(), Some("x"));
        assert_eq!(f.bool("b"), Some(true));
        assert_eq!(f.int("c", 1, 10), Some(5));
        assert_eq!(f.int("d", 1, 10), None);
        assert_eq!(f.url("e"), None);
        assert_eq!(f.req_str("z"), None);
        assert_eq!(f.errors.len(), 3);
        let f = Fields::new(obj, Some(&["a"]));
        assert_eq!(f.errors.len(), 4);
    }
}
