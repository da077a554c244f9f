//! The terminal summary of a [`Report`], off the request path: verdict and
//! what the ignore rules hid right under it, per-operation table (too few
//! answers for a percentile said so), the differences with what explains
//! each and an example, failures, noise, ignore rules.

use std::fmt::Write as _;

use super::latency::p50_p99;
use super::{brief, compare_name, finding_name, short, Report, TOP};

impl Report {
    /// The terminal summary.
    pub fn text(&self) -> String {
        let th = &self.thresholds;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "Shadow report: {} — {} requests, {} operations",
            self.source,
            self.records,
            self.tally.ops.len()
        );
        let verdict = self.verdict();
        let _ = writeln!(o, "Verdict: {}", verdict.line());
        let hidden = self.hidden();
        if !hidden.is_empty() {
            let total: u64 = hidden.iter().map(|(_, n)| n).sum();
            let _ = writeln!(
                o,
                "{}ignore rules hid {total} differences:",
                if verdict.passes() {
                    "Passed, but "
                } else {
                    "Besides, "
                }
            );
            for (rule, n) in &hidden {
                let _ = writeln!(
                    o,
                    "  {n:>6}  {} ({}) — {}",
                    rule.label(),
                    compare_name(rule.compare),
                    brief(&rule.reason, 100)
                );
            }
        }
        let noise = self.tally.noise_fields(th);
        if !noise.is_empty() {
            let _ = writeln!(
                o,
                "The baseline judged {} field paths noise (listed below).",
                noise.len()
            );
        }
        if self.unreadable > 0 {
            let _ = writeln!(o, "({} unreadable lines skipped)", self.unreadable);
        }
        let _ = writeln!(o, "{}", self.baseline_line());
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "{:<16} {:>8} {:>8} {:>6} {:>9}  {:>24}  {:>24}",
            "operation",
            "requests",
            "compared",
            "failed",
            "differing",
            "legacy p50/p99 ms",
            "translated p50/p99 ms"
        );
        for (op, t) in &self.tally.ops {
            let lat = self.latencies.get(op).cloned().unwrap_or_default();
            let _ = writeln!(
                o,
                "{:<16} {:>8} {:>8} {:>6} {:>9}  {:>24}  {:>24}",
                op,
                t.requests,
                t.compared,
                t.failed,
                self.tally.differing_requests(op, th),
                p50_p99(&lat.legacy),
                p50_p99(&lat.translated),
            );
        }
        let _ = writeln!(o);
        let real = self.real_fields();
        if self.compared() == 0 {
            let _ = writeln!(o, "Differences: nothing was compared");
        } else if real.is_empty() {
            let _ = writeln!(o, "Differences: none");
        } else {
            let _ = writeln!(o, "Differences ({}):", real.len());
            for (op, key, n) in real.iter().take(TOP) {
                let field = &self.tally.ops[op].fields[key];
                let _ = writeln!(o, "  {n:>6}  {op:<16} {}", finding_name(key, field.rename));
                for e in self.explanations(op, key) {
                    let _ = writeln!(o, "          {}", e.line());
                }
                if let Some(s) = field.samples.first() {
                    let path = match &s.renamed_to {
                        Some(to) => format!("{} → {to}", s.path),
                        None => s.path.clone(),
                    };
                    let _ = writeln!(
                        o,
                        "          e.g. {path}: legacy {} | translated {}",
                        short(s.legacy.as_ref()),
                        short(s.translated.as_ref())
                    );
                    if let Some(e) = self.exhibits.get(&s.seq) {
                        let _ = writeln!(o, "               request {} ({})", e.target, e.id);
                    }
                }
            }
            if real.len() > TOP {
                let _ = writeln!(o, "  … and {} more (see --html)", real.len() - TOP);
            }
        }
        if !self.failures.is_empty() {
            let _ = writeln!(o, "\nNo answer (not compared):");
            for ((op, side, reason), n) in &self.failures {
                let _ = writeln!(o, "  {n:>6}  {op:<16} {side:<10} {reason}");
            }
        }
        if !noise.is_empty() {
            let _ = writeln!(
                o,
                "\nJudged noise by the baseline (translated-vs-legacy / legacy-vs-legacy):"
            );
            for (op, path, t, b) in &noise {
                let _ = writeln!(o, "  {t:>6} / {b:<6} {op:<16} {path}");
            }
        }
        let _ = writeln!(o, "\nIgnore rules (differences hidden):");
        if self.rules.ignore.is_empty() {
            let _ = writeln!(o, "  none");
        }
        for (rule, hits) in self.rules.ignore.iter().zip(&self.tally.rule_hits) {
            let _ = writeln!(
                o,
                "  {hits:>6}  {} ({}) — {}",
                rule.label(),
                compare_name(rule.compare),
                rule.reason
            );
        }
        o
    }

    pub(super) fn baseline_line(&self) -> String {
        let th = &self.thresholds;
        if self.baseline {
            format!(
                "Baseline: on (a field counts when translated-vs-legacy > {}× legacy-vs-legacy and by ≥ {}; operations with < {} baseline pairs are not filtered)",
                th.relative, th.absolute, th.min_count
            )
        } else {
            "Baseline: off (every difference not covered by an ignore rule is reported)".into()
        }
    }
}
