//! The self-contained HTML page of a [`Report`]: verdict banner, cards,
//! per-operation table, top differing fields, side-by-side samples, failures,
//! noise and ignore rules. Every value is escaped with [`esc`].

use std::fmt::Write as _;

use super::{anchor, compare_name, esc, pretty, quantile, Report, TOP};

impl Report {
    /// The self-contained HTML report.
    pub fn html(&self) -> String {
        let th = &self.thresholds;
        let real = self.real_fields();
        let mut h = String::new();
        h.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
        let _ = write!(
            h,
            "<title>v1compat shadow report — {}</title>",
            esc(&self.source)
        );
        h.push_str(concat!(
            "<style>",
            "body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:1200px;color:#1d1d1f;padding:0 1rem}",
            "h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}",
            "table{border-collapse:collapse;width:100%}th,td{padding:.3rem .6rem;border-bottom:1px solid #eee;text-align:left;vertical-align:top}",
            "th{background:#f5f5f7}td.n{text-align:right;font-variant-numeric:tabular-nums}",
            ".ok{color:#1a7f37;font-weight:600}.bad{color:#c62828;font-weight:600}.muted{color:#6e6e73}",
            ".cards{display:flex;gap:1rem;flex-wrap:wrap}.card{border:1px solid #ddd;border-radius:8px;padding:.6rem 1rem;min-width:9rem}",
            ".card b{display:block;font-size:1.4rem}.card.bad{border-color:#c62828}",
            ".verdict{font-size:1.2rem;font-weight:700;padding:.6rem 1rem;border-radius:8px}.verdict.pass{background:#e6f4ea;color:#1a7f37}.verdict.fail{background:#fdecea;color:#c62828}",
            "pre{margin:0;white-space:pre-wrap;word-break:break-all;font:12px/1.4 ui-monospace,monospace}",
            ".side{width:50%}.legacy{background:#fff8e1}.translated{background:#e8f4fd}code{font:13px ui-monospace,monospace}",
            "</style></head><body>"
        ));
        let _ = write!(
            h,
            "<h1>v1compat shadow report</h1><p class=\"muted\">{} · {}</p>",
            esc(&self.source),
            esc(&self.baseline_line())
        );
        let compared = self.compared();
        let failed = self.failed();
        let verdict = self.verdict();
        let _ = write!(
            h,
            "<p class=\"verdict {}\">{}</p>",
            if verdict.passes() { "pass" } else { "fail" },
            esc(&verdict.line())
        );
        let differing: u64 = self
            .tally
            .ops
            .keys()
            .map(|op| self.tally.differing_requests(op, th))
            .sum();
        let fields = if real.is_empty() && compared > 0 {
            "<b class=\"ok\">0</b>".to_owned()
        } else {
            format!("<b class=\"bad\">{}</b>", real.len())
        };
        let failed_class = if failed > 0 { " bad" } else { "" };
        let _ = write!(
            h,
            "<div class=\"cards\"><div class=\"card\"><b>{}</b>requests</div><div class=\"card\"><b>{compared}</b>compared</div><div class=\"card{failed_class}\"><b>{failed}</b>failed</div><div class=\"card\"><b>{differing}</b>differing requests</div><div class=\"card\">{fields}differing field paths</div></div>",
            self.records
        );

        h.push_str("<h2>Operations</h2><table><tr><th>operation</th><th>requests</th><th>compared</th><th>failed</th><th>differing</th><th>legacy p50 / p99 ms</th><th>translated p50 / p99 ms</th></tr>");
        for (op, t) in &self.tally.ops {
            let lat = self.latencies.get(op).cloned().unwrap_or_default();
            let d = self.tally.differing_requests(op, th);
            let _ = write!(
                h,
                "<tr><td><code>{}</code></td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n {}\">{}</td><td class=\"n\">{:.1} / {:.1}</td><td class=\"n\">{:.1} / {:.1}</td></tr>",
                esc(op),
                t.requests,
                t.compared,
                t.failed,
                if d == 0 { "ok" } else { "bad" },
                d,
                quantile(&lat.legacy, 0.5),
                quantile(&lat.legacy, 0.99),
                quantile(&lat.translated, 0.5),
                quantile(&lat.translated, 0.99),
            );
        }
        h.push_str("</table>");

        h.push_str("<h2>Top differing field paths</h2>");
        if compared == 0 {
            h.push_str("<p class=\"bad\">Nothing was compared.</p>");
        } else if real.is_empty() {
            h.push_str("<p class=\"ok\">No differences.</p>");
        } else {
            h.push_str("<table><tr><th>requests</th><th>operation</th><th>field path</th><th>share of compared</th></tr>");
            for (op, path, n) in real.iter().take(TOP) {
                let compared = self.tally.ops[op].compared.max(1);
                let _ = write!(
                    h,
                    "<tr><td class=\"n\">{n}</td><td><code>{}</code></td><td><a href=\"#{}\"><code>{}</code></a></td><td class=\"n\">{:.0}%</td></tr>",
                    esc(op),
                    esc(&anchor(op, path)),
                    esc(path),
                    *n as f64 * 100.0 / compared as f64
                );
            }
            h.push_str("</table>");
            h.push_str("<h2>Samples</h2>");
            for (op, path, _) in &real {
                let _ = write!(
                    h,
                    "<h3 id=\"{}\"><code>{}</code> · <code>{}</code></h3><table><tr><th>request / path</th><th class=\"side\">legacy</th><th class=\"side\">translated</th></tr>",
                    esc(&anchor(op, path)),
                    esc(op),
                    esc(path)
                );
                for s in &self.tally.ops[op].fields[path].samples {
                    let _ = write!(
                        h,
                        "<tr><td><code>{}</code><br><code class=\"muted\">{}</code></td><td class=\"legacy\"><pre>{}</pre></td><td class=\"translated\"><pre>{}</pre></td></tr>",
                        esc(&s.path),
                        esc(&s.id),
                        esc(&pretty(s.legacy.as_ref())),
                        esc(&pretty(s.translated.as_ref()))
                    );
                }
                h.push_str("</table>");
            }
        }

        if !self.failures.is_empty() {
            h.push_str("<h2>No answer (not compared)</h2><table><tr><th>requests</th><th>operation</th><th>side</th><th>reason</th></tr>");
            for ((op, side, reason), n) in &self.failures {
                let _ = write!(
                    h,
                    "<tr><td class=\"n\">{n}</td><td><code>{}</code></td><td>{side}</td><td>{}</td></tr>",
                    esc(op),
                    esc(reason)
                );
            }
            h.push_str("</table>");
        }
        let noise = self.tally.noise_fields(th);
        if !noise.is_empty() {
            h.push_str("<h2>Judged noise by the baseline</h2><table><tr><th>operation</th><th>field path</th><th>translated vs legacy</th><th>legacy vs legacy</th></tr>");
            for (op, path, t, b) in &noise {
                let _ = write!(
                    h,
                    "<tr><td><code>{}</code></td><td><code>{}</code></td><td class=\"n\">{t}</td><td class=\"n\">{b}</td></tr>",
                    esc(op),
                    esc(path)
                );
            }
            h.push_str("</table>");
        }

        h.push_str("<h2>Ignore rules</h2>");
        if self.rules.ignore.is_empty() {
            h.push_str("<p class=\"muted\">None.</p>");
        } else {
            h.push_str("<table><tr><th>differences hidden</th><th>operation</th><th>field path</th><th>compare</th><th>reason</th></tr>");
            for (rule, hits) in self.rules.ignore.iter().zip(&self.tally.rule_hits) {
                let _ = write!(
                    h,
                    "<tr><td class=\"n\">{hits}</td><td><code>{}</code></td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                    esc(rule.operation.as_deref().unwrap_or("*")),
                    esc(&rule.path),
                    compare_name(rule.compare),
                    esc(&rule.reason)
                );
            }
            h.push_str("</table>");
        }
        if !self.rules.unordered.is_empty() {
            h.push_str("<p class=\"muted\">Compared without regard to order: ");
            let list: Vec<String> = self
                .rules
                .unordered
                .iter()
                .map(|p| format!("<code>{}[*]</code>", esc(p)))
                .collect();
            h.push_str(&list.join(", "));
            h.push_str("</p>");
        }
        h.push_str("</body></html>\n");
        h
    }
}
