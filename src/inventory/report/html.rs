//! The inventory as one self-contained HTML page (`GET /inventory?format=html`,
//! `v1compat inventory --format html`): a summary, then a card per client
//! with a small inline SVG chart of its V1 requests by hour over the last
//! week, the operations with their V2 replacements and the differences with
//! their fixes. No script, no style or font from elsewhere; every string a
//! client sent (user-agents) is escaped.

use std::fmt::Write;

use super::{thousands, time, Client, Report, CHART_HOURS};
use crate::common::html::esc;

const WIDTH: u64 = 336;
const HEIGHT: u64 = 48;

impl Report {
    pub fn html(&self) -> String {
        let mut out = String::from(concat!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">",
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
            "<title>v1compat: V1 clients</title><style>",
            "body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:70rem;padding:0 1rem;color:#1d2330}",
            "h1{font-size:1.4rem}.card{border:1px solid #d6dae3;border-radius:8px;padding:1rem;margin:1rem 0}",
            ".gone{opacity:.6}.tag{font-size:.8rem;padding:.1rem .5rem;border-radius:1rem;background:#e6f0ff}",
            ".gone .tag{background:#eee}table{border-collapse:collapse;width:100%;margin:.5rem 0}",
            "td,th{text-align:left;padding:.25rem .5rem;border-bottom:1px solid #eef0f4;vertical-align:top}",
            "code{font-size:.9em}.muted{color:#5c6475}svg{display:block;margin:.5rem 0}",
            "</style></head><body>"
        ));
        let _ = write!(
            out,
            "<h1>V1 clients</h1><p><strong>{}</strong> active, <strong>{}</strong> gone (not seen for {}), as of {}.</p>",
            self.clients_active,
            self.clients_gone,
            esc(&humantime::format_duration(std::time::Duration::from_secs(self.gone_after_secs)).to_string()),
            time(self.generated_ms)
        );
        if self.clients_active == 0 {
            out.push_str("<p>No client has called V1 within that period: nothing depends on the gateway any more.</p>");
        }
        for c in &self.clients {
            card(&mut out, c, self.generated_ms);
        }
        out.push_str("</body></html>\n");
        out
    }
}

fn card(out: &mut String, c: &Client, now_ms: u64) {
    let _ = write!(
        out,
        "<section class=\"card{}\"><h2>{} <span class=\"tag\">{}</span></h2>",
        if c.gone { " gone" } else { "" },
        esc(c.label()),
        if c.gone { "gone" } else { "active" }
    );
    let _ = write!(
        out,
        "<p class=\"muted\"><code>{}</code> · {} · {}</p>",
        esc(&c.fingerprint),
        if c.keyed { "API key" } else { "no key" },
        esc(&c.seen_line()),
    );
    chart(out, c, now_ms);
    if !c.user_agents.is_empty() || !c.addresses.is_empty() {
        let _ = write!(
            out,
            "<p class=\"muted\">{} {}</p>",
            c.user_agents
                .iter()
                .map(|u| format!("<code>{}</code>", esc(u)))
                .collect::<Vec<_>>()
                .join(" "),
            esc(&c.addresses.join(", "))
        );
    }
    out.push_str("<table><tr><th>V1 call</th><th>requests</th><th>call instead</th></tr>");
    for op in &c.operations {
        let _ = write!(
            out,
            "<tr><td><code>{}</code></td><td>{}</td><td><code>{}</code>{}</td></tr>",
            esc(&op.v1),
            thousands(op.requests),
            esc(&op.v2.join(" + ")),
            if op.note.is_empty() {
                String::new()
            } else {
                format!("<br><span class=\"muted\">{}</span>", esc(&op.note))
            }
        );
    }
    out.push_str("</table>");
    if !c.differences.is_empty() {
        out.push_str(
            "<table><tr><th>relies on</th><th>answers</th><th>what differs, and the fix</th></tr>",
        );
        for d in &c.differences {
            let _ = write!(
                out,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}<br><strong>Fix:</strong> {}</td></tr>",
                esc(&d.id),
                thousands(d.answers),
                esc(&d.summary),
                esc(&d.fix)
            );
        }
        out.push_str("</table>");
    }
    out.push_str("</section>");
}

/// Bars of requests per hour over the last [`CHART_HOURS`], newest right.
fn chart(out: &mut String, c: &Client, now_ms: u64) {
    let last = now_ms / 3_600_000;
    let first = last.saturating_sub(CHART_HOURS - 1);
    let max = c.hours.iter().map(|(_, n)| *n).max().unwrap_or(0).max(1);
    let bar = WIDTH / CHART_HOURS;
    let _ = write!(
        out,
        "<svg width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"V1 requests by hour, last 7 days (peak {} an hour)\"><rect width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"#f5f7fb\"/>",
        thousands(max)
    );
    for (hour, n) in &c.hours {
        if *hour < first || *hour > last {
            continue;
        }
        let h = (n * (HEIGHT - 2)).div_ceil(max).max(1);
        let x = (hour - first) * bar;
        let _ = write!(
            out,
            "<rect x=\"{x}\" y=\"{}\" width=\"{bar}\" height=\"{h}\" fill=\"#3b6fd8\"><title>{}: {}</title></rect>",
            HEIGHT - h,
            time(hour * 3_600_000),
            thousands(*n)
        );
    }
    out.push_str("</svg>");
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_page_with_a_chart_and_nothing_a_client_sent_unescaped() {
        let page = super::super::tests::sample().html();
        assert!(page.contains("<h2>billing-service <span class=\"tag\">active</span></h2>"));
        assert!(page.contains("n8n &lt;script&gt;"));
        assert!(!page.contains("<script"));
        assert!(page.contains("<svg width=\"336\""));
        // Two bars in the week, the hour 200 ago left out.
        assert_eq!(page.matches("fill=\"#3b6fd8\"").count(), 2);
        assert!(page.contains("GET /api/v2/worker-runs/{runId}"));
        assert!(page.contains("<strong>Fix:</strong> leave a `system` limit out"));
    }
}
