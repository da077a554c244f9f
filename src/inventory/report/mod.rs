//! What the inventory tells an operator, per client: the V1 operations it
//! still calls with the V2 calls that replace them (the route table), the
//! differences its traffic relied on with each one's meaning and fix (the
//! registry), when it was first and last seen, and whether it is gone.
//! Built from the stored records ([`Report::build`]); written as JSON
//! (serde), text ([`text`]) and a self-contained HTML page ([`html`]).

use serde::Serialize;

use super::record::ClientRecord;
use crate::differences;
use crate::v1::route::Operation;

pub mod html;
pub mod text;

/// Hours of history each client's chart shows.
pub const CHART_HOURS: u64 = 7 * 24;

/// The whole inventory, as of `generated_ms`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub generated_ms: u64,
    /// A client not seen for this many seconds is gone.
    pub gone_after_secs: u64,
    pub clients_total: usize,
    pub clients_active: usize,
    pub clients_gone: usize,
    /// Active clients first, most requests first.
    pub clients: Vec<Client>,
}

/// One client.
#[derive(Debug, Clone, Serialize)]
pub struct Client {
    pub fingerprint: String,
    /// `[inventory.names]`, if any.
    pub name: Option<String>,
    pub keyed: bool,
    pub gone: bool,
    pub first_seen_ms: u64,
    pub last_seen_ms: u64,
    pub requests: u64,
    pub errors: u64,
    pub brownout_refusals: u64,
    pub user_agents: Vec<String>,
    pub addresses: Vec<String>,
    pub operations: Vec<OperationUse>,
    pub differences: Vec<DifferenceUse>,
    /// Requests by hour (hours since the epoch), the last [`CHART_HOURS`].
    pub hours: Vec<(u64, u64)>,
}

/// A V1 operation a client calls, and what replaces it.
#[derive(Debug, Clone, Serialize)]
pub struct OperationUse {
    pub operation: String,
    /// `POST /api/v1/run/detail`.
    pub v1: String,
    /// `GET /api/v2/worker-runs/{runId}`, …
    pub v2: Vec<String>,
    pub note: String,
    pub requests: u64,
    pub errors: u64,
}

/// A difference a client's answers relied on.
#[derive(Debug, Clone, Serialize)]
pub struct DifferenceUse {
    pub id: String,
    pub answers: u64,
    pub summary: String,
    pub fix: String,
    pub setting: Option<String>,
}

impl Report {
    /// The report of `records` at `now_ms`; `names` maps fingerprints to
    /// the names operators gave them.
    pub fn build(
        records: Vec<ClientRecord>,
        names: &std::collections::BTreeMap<String, String>,
        gone_after: std::time::Duration,
        now_ms: u64,
    ) -> Report {
        let gone_ms = gone_after.as_millis() as u64;
        let first_hour = (now_ms / 3_600_000).saturating_sub(CHART_HOURS - 1);
        let mut clients: Vec<Client> = records
            .into_iter()
            .map(|r| {
                let operations = Operation::ALL
                    .into_iter()
                    .filter_map(|op| {
                        let count = r.operations.get(op.name())?;
                        let (method, path) = op.v1_endpoint();
                        let replacement = op.v2_replacement();
                        Some(OperationUse {
                            operation: op.name().to_owned(),
                            v1: format!("{method} {path}"),
                            v2: replacement.calls.iter().map(|c| (*c).to_owned()).collect(),
                            note: replacement.note.to_owned(),
                            requests: count.requests,
                            errors: count.errors,
                        })
                    })
                    .collect();
                let differences = differences::ALL
                    .iter()
                    .filter_map(|d| {
                        let answers = *r.differences.get(d.id)?;
                        Some(DifferenceUse {
                            id: d.id.to_owned(),
                            answers,
                            summary: d.summary.to_owned(),
                            fix: d.fix.to_owned(),
                            setting: d.setting.map(str::to_owned),
                        })
                    })
                    .collect();
                Client {
                    name: names.get(&r.id).cloned(),
                    keyed: r.keyed,
                    gone: now_ms.saturating_sub(r.last_seen_ms) > gone_ms,
                    first_seen_ms: r.first_seen_ms,
                    last_seen_ms: r.last_seen_ms,
                    requests: r.requests(),
                    errors: r.errors(),
                    brownout_refusals: r.brownouts,
                    user_agents: r.user_agents.iter().cloned().collect(),
                    addresses: r.addresses.iter().cloned().collect(),
                    operations,
                    differences,
                    hours: r.hours.range(first_hour..).map(|(h, n)| (*h, *n)).collect(),
                    fingerprint: r.id,
                }
            })
            .collect();
        clients.sort_by(|a, b| {
            (a.gone, std::cmp::Reverse(a.requests), &a.fingerprint).cmp(&(
                b.gone,
                std::cmp::Reverse(b.requests),
                &b.fingerprint,
            ))
        });
        let gone = clients.iter().filter(|c| c.gone).count();
        Report {
            generated_ms: now_ms,
            gone_after_secs: gone_after.as_secs(),
            clients_total: clients.len(),
            clients_active: clients.len() - gone,
            clients_gone: gone,
            clients,
        }
    }

    /// The report as pretty JSON.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

impl Client {
    /// The name if given, else the fingerprint.
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.fingerprint)
    }

    /// When it was seen and how much it called:
    /// `seen A .. B; 1,244 V1 requests, 3 errors`.
    pub fn seen_line(&self) -> String {
        let mut line = format!(
            "seen {} .. {}; {} V1 requests, {} errors",
            time(self.first_seen_ms),
            time(self.last_seen_ms),
            thousands(self.requests),
            thousands(self.errors)
        );
        if self.brownout_refusals > 0 {
            line.push_str(&format!(
                ", {} refused by brownouts",
                thousands(self.brownout_refusals)
            ));
        }
        line
    }
}

/// How a report is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    Html,
}

impl Format {
    /// `text`, `json` or `html`.
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "text" => Some(Format::Text),
            "json" => Some(Format::Json),
            "html" => Some(Format::Html),
            _ => None,
        }
    }

    /// The format an HTTP client asks for: `?format=`, else its `Accept`
    /// (a browser's `text/html` gets the page), else text.
    pub fn negotiate(query: Option<&str>, accept: Option<&str>) -> Result<Format, String> {
        let asked = query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .find_map(|pair| pair.strip_prefix("format="));
        if let Some(asked) = asked {
            return Format::parse(asked)
                .ok_or_else(|| format!("format={asked:?} is not one of text, json, html"));
        }
        let accept = accept.unwrap_or("");
        Ok(if accept.contains("text/html") {
            Format::Html
        } else if accept.contains("application/json") {
            Format::Json
        } else {
            Format::Text
        })
    }

    /// The `Content-Type` of a report in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; charset=utf-8",
            Format::Json => "application/json",
            Format::Html => "text/html; charset=utf-8",
        }
    }
}

impl Report {
    /// The report written in `format`.
    pub fn render(&self, format: Format) -> String {
        match format {
            Format::Text => self.text(),
            Format::Json => self.json(),
            Format::Html => self.html(),
        }
    }
}

/// A Unix millisecond time as RFC 3339, to the second.
pub(crate) fn time(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// `1,204`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::inventory::record::OpCount;

    pub(crate) const NOW: u64 = 1_800_000_000_000;

    pub(crate) fn sample() -> Report {
        let hour = NOW / 3_600_000;
        let n8n = ClientRecord {
            id: "k-00000000000000aa".into(),
            keyed: true,
            first_seen_ms: NOW - 86_400_000,
            last_seen_ms: NOW - 60_000,
            operations: [
                (
                    "start_run".to_owned(),
                    OpCount {
                        requests: 1204,
                        errors: 3,
                    },
                ),
                (
                    "run_detail".to_owned(),
                    OpCount {
                        requests: 40,
                        errors: 0,
                    },
                ),
            ]
            .into(),
            differences: [("zero_system_limits".to_owned(), 1204)].into(),
            user_agents: ["n8n <script>".to_owned()].into(),
            addresses: ["10.0.0.7".to_owned()].into(),
            hours: [(hour - 200, 5), (hour - 3, 600), (hour, 644)].into(),
            brownouts: 0,
        };
        let old = ClientRecord {
            id: "anon-00000000000000bb".into(),
            keyed: false,
            first_seen_ms: NOW - 90 * 86_400_000,
            last_seen_ms: NOW - 40 * 86_400_000,
            operations: [(
                "store_search".to_owned(),
                OpCount {
                    requests: 3,
                    errors: 0,
                },
            )]
            .into(),
            ..ClientRecord::default()
        };
        Report::build(
            vec![old, n8n],
            &[(
                "k-00000000000000aa".to_owned(),
                "billing-service".to_owned(),
            )]
            .into(),
            std::time::Duration::from_secs(30 * 86_400),
            NOW,
        )
    }

    #[test]
    fn a_report_names_replacements_fixes_and_who_is_gone() {
        let r = sample();
        assert_eq!(
            (r.clients_total, r.clients_active, r.clients_gone),
            (2, 1, 1)
        );
        let c = &r.clients[0];
        assert_eq!(c.label(), "billing-service");
        assert!(!c.gone);
        assert_eq!(c.requests, 1244);
        // Operations in route-table order, each with its V2 call.
        assert_eq!(c.operations[0].v1, "POST /api/v1/scraper/run");
        assert_eq!(c.operations[0].v2, ["POST /api/v2/workers/{workerId}/runs"]);
        assert_eq!(c.operations[1].v2, ["GET /api/v2/worker-runs/{runId}"]);
        assert_eq!(c.differences[0].id, "zero_system_limits");
        assert_eq!(c.differences[0].answers, 1204);
        assert!(c.differences[0].fix.contains("leave a `system` limit out"));
        // The chart keeps the last week.
        assert_eq!(c.hours.len(), 2);
        assert!(r.clients[1].gone);
        let json: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(json["clients"][0]["name"], "billing-service");
    }

    #[test]
    fn the_format_is_asked_for_or_negotiated() {
        let f = Format::negotiate;
        assert_eq!(f(Some("format=json"), Some("text/html")), Ok(Format::Json));
        assert_eq!(f(Some("a=1&format=html"), None), Ok(Format::Html));
        assert_eq!(
            f(None, Some("text/html,application/xhtml+xml")),
            Ok(Format::Html)
        );
        assert_eq!(f(None, Some("application/json")), Ok(Format::Json));
        assert_eq!(f(None, None), Ok(Format::Text));
        assert!(f(Some("format=xml"), None)
            .unwrap_err()
            .contains("text, json, html"));
    }

    #[test]
    fn numbers_read_in_thousands() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(1204), "1,204");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(time(0), "1970-01-01T00:00:00Z");
    }
}
