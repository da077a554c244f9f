//! `v1compat report`, off the request path: reads a capture (live or from
//! `replay`), runs every pair through the diff engine under the configured
//! rules, and renders a terminal summary and a self-contained HTML page:
//! the verdict with what the ignore rules hid right under it, each
//! difference (a rename counted once) with the `[compat]` setting or
//! registry entry that explains it, samples showing the request and both
//! answers side by side with the differing fields marked, per-operation
//! latency drawn legacy against translated, noise judged by the baseline,
//! every ignore rule with its count.
//!
//! Files: this one holds the model (a capture read and compared, its
//! verdict); `explain` attributes a difference to a setting or registry
//! entry; `exhibit` builds a sample's request and answers; `latency` marks
//! percentiles of too few answers; `svg` draws the latency chart; `text`
//! renders the terminal summary and `html` the page.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::BufRead;
use std::path::Path;

use serde_json::Value;

use super::capture::{Record, Side};
use super::diff::{Compare, IgnoreRule, Reply, Rules, Tally, Thresholds};
use crate::ops::Compat;

pub(crate) mod exhibit;
pub(crate) mod explain;
mod html;
pub(crate) mod latency;
pub(crate) mod svg;
mod text;

use exhibit::Exhibit;
use explain::{explain, intersect, Context, Explanation};

/// Requests kept as exhibits (request and both answers) per report; later
/// samples show only the differing values.
pub const MAX_EXHIBITS: usize = 60;

/// Field paths shown in "top differing".
pub(super) const TOP: usize = 20;

/// What a report concludes. Only `Clean` passes `--fail-on-diff`: a report
/// that compared nothing, or left requests or lines unjudged, cannot pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Something was compared, every request was, and nothing differs.
    Clean { compared: u64 },
    /// Real differences: this many findings (field paths or renames), of
    /// which `explained` have a checked explanation (see [`explain`]).
    Differences { fields: usize, explained: usize },
    /// Nothing or not everything was compared; says what.
    Incomplete { why: String },
}

impl Verdict {
    pub fn passes(&self) -> bool {
        matches!(self, Verdict::Clean { .. })
    }

    /// One line for the top of the report.
    pub fn line(&self) -> String {
        match self {
            Verdict::Clean { compared } => {
                format!("PASS: {compared} requests compared, no differences")
            }
            Verdict::Differences { fields, explained } => {
                let mut line = format!("FAIL: {fields} differences");
                if *explained > 0 {
                    let _ = write!(
                        line,
                        " ({explained} explained by a [compat] setting or the registry of differences)"
                    );
                }
                line
            }
            Verdict::Incomplete { why } => format!("FAIL: {why}"),
        }
    }
}

/// Latencies of one operation, in milliseconds.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    pub legacy: Vec<f64>,
    pub translated: Vec<f64>,
}

/// A capture, compared.
#[derive(Debug, Clone)]
pub struct Report {
    pub source: String,
    pub tally: Tally,
    pub rules: Rules,
    pub thresholds: Thresholds,
    /// Whether any record carried a baseline answer.
    pub baseline: bool,
    pub records: u64,
    /// Lines that were not capture records.
    pub unreadable: u64,
    pub latencies: BTreeMap<String, Latencies>,
    /// Why sides gave no answer: (operation, side, reason) → requests.
    pub failures: BTreeMap<(String, &'static str, String), u64>,
    /// The translation's `[compat]` settings, for [`explain`].
    pub compat: Compat,
    /// Exhibits of sampled requests, by [`Sample::seq`](super::diff::Sample::seq).
    pub exhibits: BTreeMap<u64, Exhibit>,
    /// What explains each (operation, finding key) on every request it
    /// was seen on.
    pub explained: BTreeMap<(String, String), Vec<Explanation>>,
}

fn answer(side: &Side) -> Option<Reply<'_>> {
    side.status.map(|status| Reply {
        status,
        body: &side.body,
    })
}

/// The `q`-quantile (0–1) of `v`, nearest rank; 0 for none.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

impl Report {
    /// An empty report to feed records into.
    pub fn new(source: &str, rules: Rules, thresholds: Thresholds) -> Report {
        Report {
            source: source.to_owned(),
            tally: Tally::new(&rules),
            rules,
            thresholds,
            baseline: false,
            records: 0,
            unreadable: 0,
            latencies: BTreeMap::new(),
            failures: BTreeMap::new(),
            compat: Compat::default(),
            exhibits: BTreeMap::new(),
            explained: BTreeMap::new(),
        }
    }

    /// Explains differences by these `[compat]` settings (the translation's;
    /// the defaults otherwise). Set before records are added.
    pub fn with_compat(mut self, compat: Compat) -> Report {
        self.compat = compat;
        self
    }

    /// Reads a capture file.
    pub fn load(path: &Path, rules: Rules, thresholds: Thresholds) -> std::io::Result<Report> {
        Report::new(&path.display().to_string(), rules, thresholds).read(path)
    }

    /// Adds every record of a capture file.
    pub fn read(mut self, path: &Path) -> std::io::Result<Report> {
        let file = std::fs::File::open(path)?;
        let report = &mut self;
        for line in std::io::BufReader::new(file).lines() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Record>(&line) {
                Ok(rec) => report.add(&rec),
                Err(_) => report.unreadable += 1,
            }
        }
        Ok(self)
    }

    /// Adds one record.
    pub fn add(&mut self, rec: &Record) {
        self.records += 1;
        let lat = self.latencies.entry(rec.operation.clone()).or_default();
        if let Some(l) = rec.legacy.as_ref().filter(|s| s.status.is_some()) {
            lat.legacy.push(l.latency_ms);
        }
        if let Some(t) = rec.translated.as_ref().filter(|s| s.status.is_some()) {
            lat.translated.push(t.latency_ms);
        }
        let l = rec.legacy.as_ref().and_then(answer);
        let t = rec.translated.as_ref().and_then(answer);
        match (l, t, &rec.legacy, &rec.translated) {
            (Some(l), Some(t), Some(ls), Some(ts)) => {
                let b = rec.baseline.as_ref().and_then(answer);
                self.baseline |= b.is_some();
                let added = self
                    .tally
                    .add(&rec.operation, &rec.id, l, t, b, &self.rules);
                let cx = Context {
                    op: &rec.operation,
                    request: &rec.request,
                    legacy: l,
                    translated: t,
                };
                for f in &added.findings {
                    let found = explain(f, &cx, &self.compat);
                    match self.explained.entry((rec.operation.clone(), f.key())) {
                        std::collections::btree_map::Entry::Vacant(e) => {
                            e.insert(found);
                        }
                        std::collections::btree_map::Entry::Occupied(mut e) => {
                            intersect(e.get_mut(), &found);
                        }
                    }
                }
                if added.sampled && self.exhibits.len() < MAX_EXHIBITS {
                    let paths: BTreeSet<String> = added
                        .findings
                        .iter()
                        .flat_map(|f| f.paths().map(str::to_owned))
                        .collect();
                    let exhibit = Exhibit::new(&rec.id, &rec.request, ls, ts, paths);
                    self.exhibits.insert(added.seq, exhibit);
                }
            }
            _ => {
                self.tally.add_failed(&rec.operation);
                for (name, side) in [("legacy", &rec.legacy), ("translated", &rec.translated)] {
                    let reason = match side {
                        None => "not captured".to_owned(),
                        Some(s) if s.status.is_none() => {
                            s.error.clone().unwrap_or_else(|| "no answer".into())
                        }
                        Some(_) => continue,
                    };
                    *self
                        .failures
                        .entry((rec.operation.clone(), name, reason))
                        .or_default() += 1;
                }
            }
        }
    }

    /// Requests compared (both sides answered).
    pub fn compared(&self) -> u64 {
        self.tally.ops.values().map(|o| o.compared).sum()
    }

    /// Requests not compared because a side gave no answer.
    pub fn failed(&self) -> u64 {
        self.tally.ops.values().map(|o| o.failed).sum()
    }

    /// The report's conclusion.
    pub fn verdict(&self) -> Verdict {
        let (compared, failed) = (self.compared(), self.failed());
        let real = self.real_fields();
        let mut unjudged = Vec::new();
        if failed > 0 {
            unjudged.push(format!(
                "{failed} requests not compared (a side gave no answer)"
            ));
        }
        if self.unreadable > 0 {
            unjudged.push(format!("{} unreadable lines", self.unreadable));
        }
        if compared == 0 {
            let mut why = format!("nothing compared ({} records", self.records);
            for u in &unjudged {
                why.push_str(", ");
                why.push_str(u);
            }
            why.push(')');
            return Verdict::Incomplete { why };
        }
        if !real.is_empty() {
            let explained = real
                .iter()
                .filter(|(op, key, _)| self.explanations(op, key).iter().any(|e| e.checked))
                .count();
            return Verdict::Differences {
                fields: real.len(),
                explained,
            };
        }
        if !unjudged.is_empty() {
            return Verdict::Incomplete {
                why: format!(
                    "{compared} compared without differences, but {}",
                    unjudged.join(", ")
                ),
            };
        }
        Verdict::Clean { compared }
    }

    /// Real differences: `(operation, field, requests)`.
    pub fn real_fields(&self) -> Vec<(String, String, u64)> {
        self.tally.real_fields(&self.thresholds)
    }

    /// What explains a finding (operation, key) on every request it was
    /// seen on; checked explanations first.
    pub fn explanations(&self, op: &str, key: &str) -> &[Explanation] {
        self.explained
            .get(&(op.to_owned(), key.to_owned()))
            .map_or(&[], Vec::as_slice)
    }

    /// The ignore rules that hid something, with how many differences
    /// each hid, most first.
    pub fn hidden(&self) -> Vec<(&IgnoreRule, u64)> {
        let mut out: Vec<_> = self
            .rules
            .ignore
            .iter()
            .zip(self.tally.rule_hits.iter().copied())
            .filter(|(_, n)| *n > 0)
            .collect();
        out.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        out
    }
}

/// A finding's key for people: `a` or `renamed a → b`.
pub(super) fn finding_name(key: &str, rename: bool) -> String {
    if rename {
        format!("renamed {key}")
    } else {
        key.to_owned()
    }
}

/// The first sentence-ish of an ignore rule's reason, for the summary
/// under the verdict (the full text is in the rules table).
pub(super) fn brief(reason: &str, max: usize) -> String {
    if reason.chars().count() <= max {
        return reason.to_owned();
    }
    format!("{}…", reason.chars().take(max - 1).collect::<String>())
}

pub(super) fn compare_name(c: Compare) -> &'static str {
    match c {
        Compare::Skip => "skip",
        Compare::Shape => "shape",
    }
}

/// An element id for a finding: letters, digits, `-`, `_` and `.` only.
pub(super) fn anchor(op: &str, path: &str) -> String {
    format!("f-{op}-{path}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A value on one line, shortened; `(absent)` for a missing field.
pub(super) fn short(v: Option<&Value>) -> String {
    let Some(v) = v else {
        return "(absent)".into();
    };
    let s = v.to_string();
    if s.chars().count() > 80 {
        format!("{}…", s.chars().take(79).collect::<String>())
    } else {
        s
    }
}

pub(super) fn pretty(v: Option<&Value>) -> String {
    match v {
        None => "(absent)".into(),
        Some(v) => serde_json::to_string_pretty(v).unwrap_or_default(),
    }
}

pub(crate) use crate::common::html::esc;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shadow::capture::CapturedRequest;
    use crate::shadow::diff::IgnoreRule;
    use serde_json::json;

    fn side(body: Value) -> Side {
        Side {
            at_ms: 0,
            latency_ms: 2.0,
            status: Some(200),
            body,
            error: None,
        }
    }

    fn record(op: &str, l: Value, t: Value) -> Record {
        Record {
            id: "01J".into(),
            operation: op.into(),
            at_ms: 0,
            primary: "replay".into(),
            request: CapturedRequest::default(),
            legacy: Some(side(l)),
            translated: Some(side(t)),
            baseline: None,
        }
    }

    #[test]
    fn escape_covers_markup_and_quotes() {
        assert_eq!(
            esc("<script>alert(\"x\" & 'y')</script>"),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;"
        );
    }

    #[test]
    fn quantiles_use_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&[], 0.99), 0.0);
    }

    #[test]
    fn report_names_differences_rules_and_escapes_values() {
        let rules = Rules::new(
            vec![IgnoreRule {
                operation: None,
                path: "data.at".into(),
                compare: Compare::Skip,
                reason: "clock".into(),
            }],
            [],
        );
        let mut r = Report::new("t.jsonl", rules, Thresholds::default());
        r.add(&record(
            "run_detail",
            json!({"code": 0, "data": {"at": 1, "x": "<b>"}}),
            json!({"code": 0, "data": {"at": 2, "x": "<i>"}}),
        ));
        r.add(&record(
            "account_info",
            json!({"code": 0}),
            json!({"code": 0}),
        ));
        assert_eq!(
            r.real_fields(),
            vec![("run_detail".into(), "data.x".into(), 1)]
        );
        let text = r.text();
        assert!(text.contains("run_detail"), "{text}");
        assert!(text.contains("data.x"), "{text}");
        assert!(text.contains("*:data.at (skip) — clock"), "{text}");
        let html = r.html();
        assert!(html.contains("&quot;&lt;b&gt;&quot;"), "{html}");
        assert!(!html.contains("\"<b>\""));
        assert!(html.contains("clock"));
    }

    #[test]
    fn sides_without_an_answer_are_listed_with_their_reason() {
        let mut r = Report::new("t", Rules::default(), Thresholds::default());
        let mut rec = record("run_log", json!({"code": 0}), json!({}));
        rec.translated = Some(Side {
            status: None,
            error: Some("upstream did not answer within 5s".into()),
            ..side(Value::Null)
        });
        r.add(&rec);
        assert_eq!(r.tally.ops["run_log"].failed, 1);
        let text = r.text();
        assert!(
            text.contains("run_log          translated upstream did not answer within 5s"),
            "{text}"
        );
        assert!(r.html().contains("No answer"));
    }

    #[test]
    fn a_clean_report_says_none() {
        let mut r = Report::new("t", Rules::default(), Thresholds::default());
        r.add(&record(
            "store_search",
            json!({"code": 0}),
            json!({"code": 0}),
        ));
        assert!(r.text().contains("Differences: none"));
        assert!(r.html().contains("No differences."));
    }

    fn failed_record(op: &str, legacy_error: &str) -> Record {
        let mut r = record(op, json!(null), json!({"code": 0}));
        if let Some(l) = r.legacy.as_mut() {
            l.status = None;
            l.error = Some(legacy_error.into());
        }
        r
    }

    #[test]
    fn an_empty_capture_does_not_pass() {
        let report = Report::new("empty", Rules::default(), Thresholds::default());
        let v = report.verdict();
        assert!(!v.passes());
        assert_eq!(v.line(), "FAIL: nothing compared (0 records)");
        assert!(report.text().contains("Verdict: FAIL: nothing compared"));
        assert!(report.text().contains("Differences: nothing was compared"));
        let html = report.html();
        assert!(!html.contains("No differences."), "green on nothing");
        assert!(html.contains("Nothing was compared."));
        assert!(html.contains("verdict fail"));
    }

    #[test]
    fn every_request_failing_does_not_pass_and_names_the_failed_side() {
        let mut report = Report::new("down", Rules::default(), Thresholds::default());
        for _ in 0..3 {
            report.add(&failed_record(
                "run_detail",
                "legacy V1 service unreachable: connection refused",
            ));
        }
        let v = report.verdict();
        assert!(!v.passes());
        assert_eq!(
            v.line(),
            "FAIL: nothing compared (3 records, 3 requests not compared (a side gave no answer))"
        );
        let text = report.text();
        assert!(
            text.contains("run_detail       legacy     legacy V1 service unreachable"),
            "{text}"
        );
        let html = report.html();
        assert!(html.contains("<td>legacy</td><td>legacy V1 service unreachable"));
        assert!(!html.contains("No differences."));
    }

    #[test]
    fn unreadable_lines_or_some_failures_do_not_pass_either() {
        let same = || record("run_detail", json!({"code": 0}), json!({"code": 0}));
        let mut report = Report::new("mixed", Rules::default(), Thresholds::default());
        report.add(&same());
        assert_eq!(report.verdict(), Verdict::Clean { compared: 1 });
        assert_eq!(
            report.verdict().line(),
            "PASS: 1 requests compared, no differences"
        );
        report.unreadable = 2;
        assert_eq!(
            report.verdict().line(),
            "FAIL: 1 compared without differences, but 2 unreadable lines"
        );
        report.unreadable = 0;
        report.add(&failed_record("run_detail", "translation did not answer"));
        assert!(!report.verdict().passes());
        report.add(&record(
            "run_detail",
            json!({"code": 0}),
            json!({"code": 1}),
        ));
        assert_eq!(
            report.verdict(),
            Verdict::Differences {
                fields: 1,
                explained: 0
            }
        );
    }
}
