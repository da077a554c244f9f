//! The diff engine, off the request path: pure functions over two V1 answers
//! (HTTP status + envelope JSON), no I/O. The live mirror, `replay` and
//! `report` all compare through [`compare`] and count through [`Tally`].
//!
//! An answer is flattened to field paths: `http_status`, `code`, `message`,
//! `data.list[3].status`. Arrays whose path is listed as unordered (e.g.
//! `data.scraper[*]`) are compared as multisets of whole elements, reported
//! at `data.scraper[*]`. Counting uses the normalised path (every index
//! becomes `[*]`), so `data.list[3].status` and `data.list[7].status` are one
//! field.
//!
//! Noise: ignore rules (skip a field, or compare only its shape) are counted
//! each time they hide a difference; with a baseline (a second legacy call per
//! request) a field is a real difference only where translated-vs-legacy
//! disagreements exceed legacy-vs-legacy ones by the relative and absolute
//! thresholds of [`Thresholds`].
//!
//! Files: this one compares one pair (`compare`, rules, paths); `tally`
//! aggregates many comparisons and judges noise against the baseline.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

mod tally;

pub use tally::{FieldTally, OpTally, Sample, Tally, Thresholds, SAMPLES_PER_FIELD};

/// One side's reply as the V1 client would see it: status and envelope
/// JSON, borrowed for one comparison.
#[derive(Debug, Clone, Copy)]
pub struct Reply<'a> {
    pub status: u16,
    pub body: &'a Value,
}

/// How a matched field is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Compare {
    /// Not compared at all.
    #[default]
    Skip,
    /// Compared by shape only: JSON type, and for URLs scheme and whether a
    /// query is present (a signed `download_url` differs on every call).
    Shape,
}

/// An ignore rule: `path` (normalised, e.g. `data.list[*].started_at`)
/// matches that field and everything below it; `operation` narrows it to
/// one operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IgnoreRule {
    pub operation: Option<String>,
    pub path: String,
    pub compare: Compare,
    pub reason: String,
}

impl IgnoreRule {
    fn matches(&self, op: &str, normalised: &str) -> bool {
        if self.operation.as_deref().is_some_and(|o| o != op) {
            return false;
        }
        match normalised.strip_prefix(self.path.as_str()) {
            Some(rest) => rest.is_empty() || rest.starts_with('.') || rest.starts_with('['),
            None => false,
        }
    }

    /// `operation:path` for listings.
    pub fn label(&self) -> String {
        format!("{}:{}", self.operation.as_deref().unwrap_or("*"), self.path)
    }
}

/// What the engine needs besides the two answers.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    pub ignore: Vec<IgnoreRule>,
    /// Normalised paths of arrays compared without regard to order, written
    /// `data.scraper[*]` (or `data.scraper`).
    pub unordered: BTreeSet<String>,
}

impl Rules {
    pub fn new(ignore: Vec<IgnoreRule>, unordered: impl IntoIterator<Item = String>) -> Rules {
        let unordered = unordered
            .into_iter()
            .map(|p| p.strip_suffix("[*]").unwrap_or(&p).to_owned())
            .collect();
        Rules { ignore, unordered }
    }
}

/// One field that differs. `None` means the field is absent on that side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldDiff {
    /// Concrete path, e.g. `data.list[3].status`.
    pub path: String,
    pub legacy: Option<Value>,
    pub translated: Option<Value>,
}

impl FieldDiff {
    pub fn normalised(&self) -> String {
        normalise(&self.path)
    }
}

/// The outcome of comparing one pair of answers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Comparison {
    pub diffs: Vec<FieldDiff>,
    /// Index into [`Rules::ignore`] of each rule that hid a difference, once
    /// per hidden field.
    pub ignored: Vec<usize>,
}

/// `data.list[3].status` → `data.list[*].status`.
pub fn normalise(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push_str("[*]");
            }
            ']' if in_index => in_index = false,
            _ if in_index => {}
            _ => out.push(c),
        }
    }
    out
}

/// Leaves of a flattened answer: concrete path → values (one value, or for
/// unordered arrays every element at `path[*]`).
type Flat = BTreeMap<String, Vec<Value>>;

/// Flattens an answer: `http_status`, then the body's fields.
pub fn flatten(answer: Reply<'_>, unordered: &BTreeSet<String>) -> Flat {
    let mut flat = Flat::new();
    flat.insert("http_status".into(), vec![Value::from(answer.status)]);
    match answer.body {
        Value::Object(_) => walk(answer.body, "", unordered, &mut flat),
        other => {
            flat.insert("body".into(), vec![other.clone()]);
        }
    }
    flat
}

fn child(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

fn walk(v: &Value, path: &str, unordered: &BTreeSet<String>, out: &mut Flat) {
    match v {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                walk(v, &child(path, k), unordered, out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            if unordered.contains(&normalise(path)) {
                out.entry(format!("{path}[*]"))
                    .or_default()
                    .extend(items.iter().cloned());
            } else {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &format!("{path}[{i}]"), unordered, out);
                }
            }
        }
        // Scalars, and empty objects/arrays, are leaves: `[]` vs absent shows.
        leaf => out.entry(path.to_owned()).or_default().push(leaf.clone()),
    }
}

/// The shape of a value for [`Compare::Shape`].
pub fn shape(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "bool".into(),
        Value::Number(_) => "number".into(),
        Value::Array(a) => format!("array[{}]", a.len()),
        Value::Object(_) => "object".into(),
        Value::String(s) => match url::Url::parse(s) {
            Ok(u) if u.has_host() => format!(
                "url:{}{}",
                u.scheme(),
                if u.query().is_some() { "?query" } else { "" }
            ),
            _ if s.is_empty() => "empty string".into(),
            _ => "string".into(),
        },
    }
}

/// Compares two answers field by field under `rules`.
pub fn compare(op: &str, legacy: Reply<'_>, translated: Reply<'_>, rules: &Rules) -> Comparison {
    let l = flatten(legacy, &rules.unordered);
    let t = flatten(translated, &rules.unordered);
    let paths: BTreeSet<&String> = l.keys().chain(t.keys()).collect();
    let mut out = Comparison::default();
    for path in paths {
        let lv = l.get(path).map(Vec::as_slice).unwrap_or(&[]);
        let tv = t.get(path).map(Vec::as_slice).unwrap_or(&[]);
        let candidates = differing(path, lv, tv);
        if candidates.is_empty() {
            continue;
        }
        let norm = normalise(path);
        match rules.ignore.iter().position(|r| r.matches(op, &norm)) {
            Some(i) if rules.ignore[i].compare == Compare::Skip => {
                out.ignored.extend(std::iter::repeat_n(i, candidates.len()));
            }
            Some(i) => {
                for d in candidates {
                    let same_shape = match (&d.legacy, &d.translated) {
                        (Some(a), Some(b)) => shape(a) == shape(b),
                        _ => false,
                    };
                    if same_shape {
                        out.ignored.push(i);
                    } else {
                        out.diffs.push(d);
                    }
                }
            }
            None => out.diffs.extend(candidates),
        }
    }
    out
}

/// The differences at one path: a plain comparison for single values, a
/// multiset comparison for the elements of unordered arrays (unmatched
/// elements are paired up for the samples).
fn differing(path: &str, l: &[Value], t: &[Value]) -> Vec<FieldDiff> {
    if l.len() <= 1 && t.len() <= 1 && !path.ends_with("[*]") {
        if l.first() == t.first() {
            return Vec::new();
        }
        return vec![FieldDiff {
            path: path.to_owned(),
            legacy: l.first().cloned(),
            translated: t.first().cloned(),
        }];
    }
    let mut t_left: Vec<Option<&Value>> = t.iter().map(Some).collect();
    let mut l_only = Vec::new();
    for lv in l {
        match t_left.iter_mut().find(|x| x.is_some_and(|tv| tv == lv)) {
            Some(slot) => *slot = None,
            None => l_only.push(lv.clone()),
        }
    }
    let t_only: Vec<Value> = t_left.into_iter().flatten().cloned().collect();
    let n = l_only.len().max(t_only.len());
    let (mut li, mut ti) = (l_only.into_iter(), t_only.into_iter());
    (0..n)
        .map(|_| FieldDiff {
            path: path.to_owned(),
            legacy: li.next(),
            translated: ti.next(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn a(body: &Value) -> Reply<'_> {
        Reply { status: 200, body }
    }

    fn paths(c: &Comparison) -> Vec<&str> {
        c.diffs.iter().map(|d| d.path.as_str()).collect()
    }

    fn rule(op: Option<&str>, path: &str, compare: Compare) -> IgnoreRule {
        IgnoreRule {
            operation: op.map(str::to_owned),
            path: path.into(),
            compare,
            reason: "test".into(),
        }
    }

    #[test]
    fn equal_answers_have_no_difference() {
        let v = json!({"code": 0, "message": "success", "data": {"list": [{"a": 1}, {"a": [1, 2]}], "e": {}, "n": null}});
        let c = compare("run_list", a(&v), a(&v.clone()), &Rules::default());
        assert_eq!(c, Comparison::default());
    }

    #[test]
    fn object_key_order_does_not_matter() {
        let l = json!({"code": 0, "data": {"a": 1, "b": 2}});
        let t = json!({"data": {"b": 2, "a": 1}, "code": 0});
        assert!(compare("x", a(&l), a(&t), &Rules::default())
            .diffs
            .is_empty());
    }

    #[test]
    fn status_code_message_and_data_differences_have_their_paths() {
        let l = json!({"code": 0, "message": "success", "data": {"list": [{"status": 3}, {"status": 4}], "count": 2}});
        let t = json!({"code": 4000, "message": "Invalid", "data": {"list": [{"status": 3}, {"status": 2}], "extra": true}});
        let c = compare(
            "run_list",
            a(&l),
            Reply {
                status: 400,
                body: &t,
            },
            &Rules::default(),
        );
        assert_eq!(
            paths(&c),
            vec![
                "code",
                "data.count",
                "data.extra",
                "data.list[1].status",
                "http_status",
                "message"
            ]
        );
        let count = c.diffs.iter().find(|d| d.path == "data.count").unwrap();
        assert_eq!(count.legacy, Some(json!(2)));
        assert_eq!(count.translated, None);
        assert_eq!(c.diffs[3].normalised(), "data.list[*].status");
    }

    #[test]
    fn empty_array_differs_from_absent_and_from_null() {
        let l = json!({"data": {"list": []}});
        let t = json!({"data": {"list": null}});
        let u = json!({"data": {}});
        assert_eq!(
            paths(&compare("x", a(&l), a(&t), &Rules::default())),
            vec!["data.list"]
        );
        assert_eq!(
            paths(&compare("x", a(&l), a(&u), &Rules::default())),
            vec!["data", "data.list"]
        );
    }

    #[test]
    fn non_json_bodies_compare_as_a_whole() {
        let l = Value::String("<html>".into());
        let t = json!({"code": 5000});
        let c = compare("x", a(&l), a(&t), &Rules::default());
        assert_eq!(paths(&c), vec!["body", "code"]);
    }

    #[test]
    fn unordered_arrays_ignore_order_but_not_content() {
        let l = json!({"data": {"scraper": [{"slug": "a"}, {"slug": "b"}, {"slug": "b"}]}});
        let t = json!({"data": {"scraper": [{"slug": "b"}, {"slug": "a"}, {"slug": "b"}]}});
        let ordered = compare("store_search", a(&l), a(&t), &Rules::default());
        assert_eq!(ordered.diffs.len(), 2);
        let rules = Rules::new(Vec::new(), ["data.scraper[*]".to_owned()]);
        assert!(compare("store_search", a(&l), a(&t), &rules)
            .diffs
            .is_empty());
        let t2 = json!({"data": {"scraper": [{"slug": "b"}, {"slug": "a"}, {"slug": "c"}]}});
        let c = compare("store_search", a(&l), a(&t2), &rules);
        assert_eq!(c.diffs.len(), 1);
        assert_eq!(c.diffs[0].path, "data.scraper[*]");
        assert_eq!(c.diffs[0].legacy, Some(json!({"slug": "b"})));
        assert_eq!(c.diffs[0].translated, Some(json!({"slug": "c"})));
    }

    #[test]
    fn ignore_rules_hide_and_are_counted() {
        let l = json!({"data": {"list": [{"started_at": 1, "status": 3}, {"started_at": 2, "status": 3}]}});
        let t = json!({"data": {"list": [{"started_at": 5, "status": 3}, {"started_at": 6, "status": 4}]}});
        let rules = Rules::new(
            vec![
                rule(Some("run_detail"), "data", Compare::Skip),
                rule(Some("run_list"), "data.list[*].started_at", Compare::Skip),
            ],
            [],
        );
        let c = compare("run_list", a(&l), a(&t), &rules);
        assert_eq!(paths(&c), vec!["data.list[1].status"]);
        assert_eq!(c.ignored, vec![1, 1]);
        // A prefix rule covers children, but not siblings sharing a prefix.
        let r = rule(None, "data.list", Compare::Skip);
        assert!(r.matches("x", "data.list[*].a"));
        assert!(!r.matches("x", "data.lists"));
        let mut tally = Tally::new(&rules);
        tally.add("run_list", "r1", a(&l), a(&t), None, &rules);
        tally.add("run_list", "r2", a(&l), a(&t), None, &rules);
        assert_eq!(tally.rule_hits, vec![0, 4]);
    }

    #[test]
    fn shape_rules_compare_types_and_url_form() {
        let l = json!({"data": {"download_url": "http://h/x.csv?sign=1"}});
        let t = json!({"data": {"download_url": "http://h/y.csv?sign=2"}});
        let bad = json!({"data": {"download_url": "not a url"}});
        let rules = Rules::new(
            vec![rule(
                Some("result_export"),
                "data.download_url",
                Compare::Shape,
            )],
            [],
        );
        let c = compare("result_export", a(&l), a(&t), &rules);
        assert!(c.diffs.is_empty());
        assert_eq!(c.ignored, vec![0]);
        let c = compare("result_export", a(&l), a(&bad), &rules);
        assert_eq!(paths(&c), vec!["data.download_url"]);
        // Another operation: the rule does not apply.
        let c = compare("run_log", a(&l), a(&t), &rules);
        assert_eq!(paths(&c), vec!["data.download_url"]);
    }

    #[test]
    fn normalise_replaces_every_index() {
        assert_eq!(normalise("data.list[12].h[0].k"), "data.list[*].h[*].k");
        assert_eq!(normalise("data.scraper[*]"), "data.scraper[*]");
    }

    #[test]
    fn baseline_suppresses_always_different_fields_and_keeps_real_ones() {
        let rules = Rules::default();
        let th = Thresholds::default();
        let mut tally = Tally::new(&rules);
        for i in 0..10 {
            // `at` differs on every call, also between two legacy calls;
            // `memory` differs only on the translated side.
            let l = json!({"data": {"at": i, "memory": 1, "same": true}});
            let b = json!({"data": {"at": i + 100, "memory": 1, "same": true}});
            let t = json!({"data": {"at": i + 200, "memory_bytes": 1, "same": true}});
            tally.add("w", &i.to_string(), a(&l), a(&t), Some(a(&b)), &rules);
        }
        let real: Vec<_> = tally
            .real_fields(&th)
            .into_iter()
            .map(|(_, p, _)| p)
            .collect();
        assert_eq!(real, vec!["data.memory", "data.memory_bytes"]);
        assert_eq!(
            tally
                .noise_fields(&th)
                .into_iter()
                .map(|(_, p, _, _)| p)
                .collect::<Vec<_>>(),
            vec!["data.at"]
        );
        assert_eq!(tally.differing_requests("w", &th), 10);
        assert_eq!(
            tally.ops["w"].fields["data.memory"].samples.len(),
            SAMPLES_PER_FIELD
        );
    }

    #[test]
    fn without_baseline_or_with_too_few_pairs_everything_is_real() {
        let rules = Rules::default();
        let th = Thresholds::default();
        let mut tally = Tally::new(&rules);
        for i in 0..3 {
            let l = json!({"data": {"at": i}});
            let t = json!({"data": {"at": i + 1}});
            tally.add("w", "x", a(&l), a(&t), Some(a(&t)), &rules);
        }
        assert_eq!(tally.real_fields(&th).len(), 1);
        let mut tally = Tally::new(&rules);
        for i in 0..10 {
            let l = json!({"data": {"at": i}});
            let t = json!({"data": {"at": i + 1}});
            tally.add("w", "x", a(&l), a(&t), None, &rules);
        }
        assert_eq!(
            tally.real_fields(&th),
            vec![("w".into(), "data.at".into(), 10)]
        );
    }

    #[test]
    fn a_rare_baseline_disagreement_does_not_hide_a_frequent_one() {
        let rules = Rules::default();
        let th = Thresholds::default();
        let mut tally = Tally::new(&rules);
        for i in 0..10 {
            let l = json!({"data": {"v": 1}});
            let b = json!({"data": {"v": if i == 0 { 2 } else { 1 }}});
            let t = json!({"data": {"v": 3}});
            tally.add("w", "x", a(&l), a(&t), Some(a(&b)), &rules);
        }
        assert!(tally.is_real("w", "data.v", &th));
    }
}
