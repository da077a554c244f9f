//! The terminal summary of a [`Report`]: verdict, per-operation table, top
//! differing fields with an example each, failures, noise, ignore rules.

use std::fmt::Write as _;

use super::{compare_name, quantile, short, Report, TOP};

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
        let _ = writeln!(o, "Verdict: {}", self.verdict().line());
        if self.unreadable > 0 {
            let _ = writeln!(o, "({} unreadable lines skipped)", self.unreadable);
        }
        let _ = writeln!(o, "{}", self.baseline_line());
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "{:<16} {:>8} {:>8} {:>6} {:>9}  {:>21}  {:>21}",
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
                "{:<16} {:>8} {:>8} {:>6} {:>9}  {:>21}  {:>21}",
                op,
                t.requests,
                t.compared,
                t.failed,
                self.tally.differing_requests(op, th),
                format!(
                    "{:.1} / {:.1}",
                    quantile(&lat.legacy, 0.5),
                    quantile(&lat.legacy, 0.99)
                ),
                format!(
                    "{:.1} / {:.1}",
                    quantile(&lat.translated, 0.5),
                    quantile(&lat.translated, 0.99)
                ),
            );
        }
        let _ = writeln!(o);
        let real = self.real_fields();
        if self.compared() == 0 {
            let _ = writeln!(o, "Differences: nothing was compared");
        } else if real.is_empty() {
            let _ = writeln!(o, "Differences: none");
        } else {
            let _ = writeln!(o, "Differences ({} field paths):", real.len());
            for (op, path, n) in real.iter().take(TOP) {
                let _ = writeln!(o, "  {n:>6}  {op:<16} {path}");
                if let Some(s) = self.tally.ops[op].fields[path].samples.first() {
                    let _ = writeln!(
                        o,
                        "          e.g. {}: legacy {} | translated {}",
                        s.path,
                        short(s.legacy.as_ref()),
                        short(s.translated.as_ref())
                    );
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
        let noise = self.tally.noise_fields(th);
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
