//! The inventory as text, for a terminal (`v1compat inventory`) or
//! `GET /inventory` without `format`: one block per client, what it calls
//! and what to call instead, what it relies on and how to stop.

use std::fmt::Write;

use super::{thousands, time, Report};

impl Report {
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "V1 clients: {} active, {} gone (not seen for {}), as of {}",
            self.clients_active,
            self.clients_gone,
            humantime::format_duration(std::time::Duration::from_secs(self.gone_after_secs)),
            time(self.generated_ms)
        );
        if self.clients_active == 0 {
            let _ = writeln!(
                out,
                "No client has called V1 within that period: nothing depends on the gateway any more."
            );
        }
        for c in &self.clients {
            let _ = writeln!(out);
            let state = if c.gone { "GONE" } else { "active" };
            let kind = if c.keyed { "key" } else { "no key" };
            match &c.name {
                Some(name) => {
                    let _ = writeln!(out, "{name} ({}, {kind}) [{state}]", c.fingerprint);
                }
                None => {
                    let _ = writeln!(out, "{} ({kind}) [{state}]", c.fingerprint);
                }
            }
            let _ = writeln!(out, "  {}", c.seen_line());
            if !c.user_agents.is_empty() {
                let _ = writeln!(out, "  user-agents: {}", c.user_agents.join(" | "));
            }
            if !c.addresses.is_empty() {
                let _ = writeln!(out, "  addresses: {}", c.addresses.join(", "));
            }
            let _ = writeln!(out, "  calls:");
            for op in &c.operations {
                let note = if op.note.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", op.note)
                };
                let _ = writeln!(
                    out,
                    "    {} x{} -> {}{note}",
                    op.v1,
                    thousands(op.requests),
                    op.v2.join(" + ")
                );
            }
            if !c.differences.is_empty() {
                let _ = writeln!(out, "  relies on:");
                for d in &c.differences {
                    let _ = writeln!(
                        out,
                        "    {} in {} answers: {}. Fix: {}.",
                        d.id,
                        thousands(d.answers),
                        d.summary,
                        d.fix
                    );
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_client_says_what_to_call_and_what_to_change() {
        let t = super::super::tests::sample().text();
        assert!(
            t.starts_with("V1 clients: 1 active, 1 gone (not seen for 30days)"),
            "{t}"
        );
        assert!(
            t.contains("billing-service (k-00000000000000aa, key) [active]"),
            "{t}"
        );
        assert!(
            t.contains("POST /api/v1/scraper/run x1,204 -> POST /api/v2/workers/{workerId}/runs"),
            "{t}"
        );
        assert!(t.contains("zero_system_limits in 1,204 answers"), "{t}");
        assert!(t.contains("anon-00000000000000bb (no key) [GONE]"), "{t}");
    }
}
