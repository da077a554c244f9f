//! The self-contained HTML page of a [`Report`], off the request path: no
//! script and nothing loaded from elsewhere. From the top: the verdict and,
//! right under it, what the ignore rules hid; cards; the differences, each
//! with what explains it; per-operation table and latency charts (inline
//! SVG); the samples — request and both answers side by side, differing
//! lines marked; failures, noise and ignore rules. Every value is escaped
//! with [`esc`].

use std::collections::HashSet;
use std::fmt::Write as _;

use super::exhibit::{Exhibit, Line};
use super::latency::p50_p99;
use super::svg::{latency_chart, LEGACY_COLOUR, TRANSLATED_COLOUR};
use super::{anchor, brief, compare_name, esc, finding_name, pretty, Report, TOP};
use crate::shadow::diff::Sample;

const STYLE: &str = concat!(
    "<style>",
    "body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:1280px;color:#1d1d1f;padding:0 1rem}",
    "h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}h3{font-size:1rem;margin:1.6rem 0 .3rem}",
    "table{border-collapse:collapse;width:100%}th,td{padding:.3rem .6rem;border-bottom:1px solid #eee;text-align:left;vertical-align:top}",
    "th{background:#f5f5f7}td.n{text-align:right;font-variant-numeric:tabular-nums}",
    ".ok{color:#1a7f37;font-weight:600}.bad{color:#c62828;font-weight:600}.muted{color:#6e6e73}",
    ".cards{display:flex;gap:1rem;flex-wrap:wrap;margin-top:1rem}.card{border:1px solid #ddd;border-radius:8px;padding:.6rem 1rem;min-width:9rem}",
    ".card b{display:block;font-size:1.4rem}.card.bad{border-color:#c62828}",
    ".verdict{font-size:1.2rem;font-weight:700;padding:.6rem 1rem;border-radius:8px;margin-bottom:0}.verdict.pass{background:#e6f4ea;color:#1a7f37}.verdict.fail{background:#fdecea;color:#c62828}",
    ".hidden-note{border:2px solid #e0a800;background:#fff8e1;border-radius:0 0 8px 8px;border-top:none;padding:.5rem 1rem;margin-top:0}",
    ".hidden-note ul{margin:.3rem 0 0;padding-left:1.2rem}.hidden-note.none{border-color:#ddd;background:#fafafa}",
    "pre{margin:0;white-space:pre-wrap;word-break:break-all;font:12px/1.45 ui-monospace,monospace}",
    "mark{background:#ffd6d6;color:inherit;display:inline-block;width:100%;box-shadow:-4px 0 0 #c62828}",
    ".fold{color:#6e6e73;font-style:italic}",
    ".side{width:50%}.legacy{background:#fff8e1}.translated{background:#e8f4fd}code{font:13px ui-monospace,monospace}",
    ".why{margin:.2rem 0}.why.checked{color:#1a5fb4}.tag{display:inline-block;border-radius:4px;padding:0 .35rem;font-size:12px;background:#eef;color:#334}",
    ".exhibit{border:1px solid #ddd;border-radius:8px;margin:.6rem 0 1rem;overflow:hidden}",
    ".exhibit .req{background:#f5f5f7;padding:.4rem .8rem;border-bottom:1px solid #ddd}",
    ".exhibit .sides{display:grid;grid-template-columns:1fr 1fr}.exhibit .pane{padding:.4rem .8rem;min-width:0}",
    ".exhibit .pane.translated{border-left:1px solid #ddd}.label{font-size:12px;font-weight:600;margin-bottom:.2rem}",
    ".status.diff{background:#ffd6d6;padding:0 .3rem;border-radius:3px}.paths{font-size:12px;padding:.3rem .8rem;border-top:1px solid #eee;margin:0}",
    ".charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:.5rem 1.5rem}.chart h3{margin:.8rem 0 .2rem}",
    ".key{display:inline-block;width:.8rem;height:.8rem;border-radius:50%;vertical-align:middle;margin:0 .3rem 0 .8rem}",
    "</style>"
);

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
        h.push_str(STYLE);
        h.push_str("</head><body>");
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
            "<p class=\"verdict {}\" id=\"verdict\">{}</p>",
            if verdict.passes() { "pass" } else { "fail" },
            esc(&verdict.line())
        );
        self.hidden_note(&mut h, verdict.passes());
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
            "<div class=\"cards\"><div class=\"card\"><b>{}</b>requests</div><div class=\"card\"><b>{compared}</b>compared</div><div class=\"card{failed_class}\"><b>{failed}</b>failed</div><div class=\"card\"><b>{differing}</b>differing requests</div><div class=\"card\">{fields}differences</div></div>",
            self.records
        );

        h.push_str("<h2>Differences</h2>");
        if compared == 0 {
            h.push_str("<p class=\"bad\">Nothing was compared.</p>");
        } else if real.is_empty() {
            h.push_str("<p class=\"ok\">No differences.</p>");
        } else {
            h.push_str("<table><tr><th>requests</th><th>operation</th><th>difference</th><th>share of compared</th><th>why</th></tr>");
            for (op, key, n) in real.iter().take(TOP) {
                let compared = self.tally.ops[op].compared.max(1);
                let rename = self.tally.ops[op].fields[key].rename;
                let _ = write!(
                    h,
                    "<tr><td class=\"n\">{n}</td><td><code>{}</code></td><td><a href=\"#{}\"><code>{}</code></a></td><td class=\"n\">{:.0}%</td><td>{}</td></tr>",
                    esc(op),
                    esc(&anchor(op, key)),
                    esc(&finding_name(key, rename)),
                    *n as f64 * 100.0 / compared as f64,
                    self.why_short(op, key)
                );
            }
            h.push_str("</table>");
            if real.len() > TOP {
                let _ = write!(
                    h,
                    "<p class=\"muted\">… and {} more, with their samples below.</p>",
                    real.len() - TOP
                );
            }
        }

        h.push_str("<h2>Operations</h2><table><tr><th>operation</th><th>requests</th><th>compared</th><th>failed</th><th>differing</th><th>legacy p50 / p99 ms</th><th>translated p50 / p99 ms</th></tr>");
        for (op, t) in &self.tally.ops {
            let lat = self.latencies.get(op).cloned().unwrap_or_default();
            let d = self.tally.differing_requests(op, th);
            let _ = write!(
                h,
                "<tr><td><code>{}</code></td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n {}\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                esc(op),
                t.requests,
                t.compared,
                t.failed,
                if d == 0 { "ok" } else { "bad" },
                d,
                esc(&p50_p99(&lat.legacy)),
                esc(&p50_p99(&lat.translated)),
            );
        }
        h.push_str("</table>");
        let _ = write!(
            h,
            "<p class=\"muted\">Percentiles need {} answers or more; a p99 whose rank is the slowest answer is shown as that maximum.</p>",
            super::latency::MIN_SAMPLES
        );

        if !self.latencies.is_empty() {
            let _ = write!(
                h,
                "<h2>Latency</h2><p class=\"muted\"><span class=\"key\" style=\"background:{LEGACY_COLOUR}\"></span>legacy<span class=\"key\" style=\"background:{TRANSLATED_COLOUR}\"></span>translated — one dot per answer; box p25–p75, bar p50, dashed p99 (with enough answers).</p><div class=\"charts\">"
            );
            for (op, lat) in &self.latencies {
                let _ = write!(
                    h,
                    "<figure class=\"chart\" id=\"latency-{}\"><h3><code>{}</code></h3>{}</figure>",
                    esc(&anchor(op, "")),
                    esc(op),
                    latency_chart(op, &lat.legacy, &lat.translated)
                );
            }
            h.push_str("</div>");
        }

        if !real.is_empty() {
            h.push_str("<h2>Samples</h2><p class=\"muted\">Each shows the request (keys redacted) and both answers, the lines of differing fields marked.</p>");
            let mut shown = HashSet::new();
            for (op, key, n) in &real {
                let field = &self.tally.ops[op].fields[key];
                let _ = write!(
                    h,
                    "<section class=\"finding\" id=\"{}\"><h3><code>{}</code> · <code>{}</code> <span class=\"muted\">({n} request{})</span></h3>",
                    esc(&anchor(op, key)),
                    esc(op),
                    esc(&finding_name(key, field.rename)),
                    if *n == 1 { "" } else { "s" }
                );
                self.why_full(&mut h, op, key);
                for s in &field.samples {
                    match self.exhibits.get(&s.seq) {
                        Some(e) if shown.insert(s.seq) => exhibit(&mut h, s.seq, e),
                        Some(e) => {
                            let _ = write!(
                                h,
                                "<p class=\"muted\">Request <a href=\"#ex-{}\"><code>{}</code></a>, shown above: {}</p>",
                                s.seq,
                                esc(&e.id),
                                values(s)
                            );
                        }
                        None => {
                            let _ = write!(
                                h,
                                "<p class=\"muted\">Request <code>{}</code> (not kept in full: {} requests are): {}</p>",
                                esc(&s.id),
                                super::MAX_EXHIBITS,
                                values(s)
                            );
                        }
                    }
                }
                h.push_str("</section>");
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
            h.push_str("<h2 id=\"noise\">Judged noise by the baseline</h2><table><tr><th>operation</th><th>field path</th><th>translated vs legacy</th><th>legacy vs legacy</th></tr>");
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

        h.push_str("<h2 id=\"ignore-rules\">Ignore rules</h2>");
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

    /// Right under the verdict: every ignore rule that hid something, with
    /// its count (a pass says "but"), and the fields the baseline judged
    /// noise.
    fn hidden_note(&self, h: &mut String, passes: bool) {
        let hidden = self.hidden();
        let noise = self.tally.noise_fields(&self.thresholds);
        if hidden.is_empty() && noise.is_empty() {
            h.push_str(
                "<div class=\"hidden-note none\" id=\"hidden\">Ignore rules hid nothing.</div>",
            );
            return;
        }
        let total: u64 = hidden.iter().map(|(_, n)| n).sum();
        h.push_str("<div class=\"hidden-note\" id=\"hidden\">");
        if !hidden.is_empty() {
            let _ = write!(
                h,
                "<b>{}ignore rules hid {total} differences</b> (<a href=\"#ignore-rules\">all rules</a>):<ul>",
                if passes { "Passed, but " } else { "Besides, " }
            );
            for (rule, n) in &hidden {
                let _ = write!(
                    h,
                    "<li><b>{n}</b> × <code>{}</code> ({}) — <span title=\"{}\">{}</span></li>",
                    esc(&rule.label()),
                    compare_name(rule.compare),
                    esc(&rule.reason),
                    esc(&brief(&rule.reason, 140))
                );
            }
            h.push_str("</ul>");
        }
        if !noise.is_empty() {
            let _ = write!(
                h,
                "<b>The baseline judged {} field paths noise</b> (<a href=\"#noise\">which</a>).",
                noise.len()
            );
        }
        h.push_str("</div>");
    }

    /// The explanation column of the differences table.
    fn why_short(&self, op: &str, key: &str) -> String {
        let ex = self.explanations(op, key);
        match ex.first() {
            None => "<span class=\"muted\">not in the registry</span>".into(),
            Some(e) if e.checked => format!(
                "<span class=\"tag\">explained</span> <code>{}</code>",
                esc(e.setting.as_deref().unwrap_or(e.id))
            ),
            Some(_) => {
                let ids: Vec<String> = ex
                    .iter()
                    .map(|e| format!("<code>{}</code>", esc(e.id)))
                    .collect();
                format!("<span class=\"muted\">may be</span> {}", ids.join(", "))
            }
        }
    }

    /// The explanation paragraphs of a finding's samples.
    fn why_full(&self, h: &mut String, op: &str, key: &str) {
        let ex = self.explanations(op, key);
        if ex.is_empty() {
            h.push_str("<p class=\"why muted\">No [compat] setting or registry entry explains this difference.</p>");
        }
        for e in ex {
            let _ = write!(
                h,
                "<p class=\"why{}\"><span class=\"tag\">{}</span> {}{} — {}</p>",
                if e.checked { " checked" } else { "" },
                if e.checked {
                    "explained by"
                } else {
                    "documented, may be"
                },
                match &e.setting {
                    Some(s) => format!("<code>{}</code> ", esc(s)),
                    None => String::new(),
                },
                format_args!("(<code>{}</code>)", esc(e.id)),
                esc(e.summary)
            );
        }
    }
}

/// A sample's differing values on one line, for samples without an
/// exhibit of their own.
fn values(s: &Sample) -> String {
    let path = match &s.renamed_to {
        Some(to) => format!("{} → {}", s.path, to),
        None => s.path.clone(),
    };
    format!(
        "<code>{}</code>: legacy <code>{}</code> · translated <code>{}</code>",
        esc(&path),
        esc(&pretty(s.legacy.as_ref())),
        esc(&pretty(s.translated.as_ref()))
    )
}

fn lines_html(h: &mut String, lines: &[Line]) {
    for l in lines {
        match l {
            Line::Text { text, marked: true } => {
                let _ = writeln!(h, "<mark>{}</mark>", esc(text));
            }
            Line::Text { text, .. } => {
                let _ = writeln!(h, "{}", esc(text));
            }
            Line::Folded(n) => {
                let _ = writeln!(h, "<span class=\"fold\">… {n} lines …</span>");
            }
        }
    }
}

/// One request and both answers side by side.
fn exhibit(h: &mut String, seq: u64, e: &Exhibit) {
    let _ = writeln!(
        h,
        "<div class=\"exhibit\" id=\"ex-{seq}\"><div class=\"req\"><div class=\"label\">request <code class=\"muted\">{}</code></div><pre class=\"request\">{}",
        esc(&e.id),
        esc(&e.target)
    );
    for (k, v) in &e.headers {
        let _ = writeln!(h, "{}: {}", esc(k), esc(v));
    }
    if !e.body.is_empty() {
        h.push('\n');
        lines_html(h, &e.body);
    }
    h.push_str("</pre></div><div class=\"sides\">");
    let status_class = if e.status_differs() {
        "status diff"
    } else {
        "status"
    };
    for (name, pane) in [("legacy", &e.legacy), ("translated", &e.translated)] {
        let status = match (pane.status, &pane.error) {
            (Some(s), _) => format!("HTTP {s}"),
            (None, Some(why)) => format!("no answer: {why}"),
            (None, None) => "no answer".into(),
        };
        let _ = write!(
            h,
            "<div class=\"pane {name}\"><div class=\"label\">{name} · <span class=\"{status_class}\">{}</span></div><pre class=\"answer\">",
            esc(&status)
        );
        lines_html(h, &pane.lines);
        h.push_str("</pre></div>");
    }
    h.push_str("</div>");
    let paths: Vec<String> = e
        .paths
        .iter()
        .map(|p| format!("<code>{}</code>", esc(p)))
        .collect();
    let _ = write!(
        h,
        "<p class=\"paths\">differs at {}</p></div>",
        paths.join(", ")
    );
}
