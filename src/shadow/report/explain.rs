//! Attribution, off the request path: which `[compat]` setting or entry of
//! the registry of differences ([`crate::differences`]) explains a finding
//! of one compared request. Pure: the finding, both answers, the captured
//! request and the translation's `[compat]` settings in, explanations out.
//!
//! An entry explains a finding in one of two ways. *Checked*: the entry has
//! a test of its own on the two answers (a 404 against a 200 with the same
//! error code under `business_error_status = "200"`; `memory_bytes` renamed
//! to `memory` under `worker_memory_field = "memory"`), and this request
//! passes it — or fails it, and the entry is dropped. *Documented*: the
//! entry names the field but has no such test, so it is offered as what the
//! difference may be.

use serde_json::Value;

use super::super::capture::{CapturedRequest, SECRET_HEADERS};
use super::super::diff::{normalise, Finding, Reply};
use crate::differences;
use crate::ops::Compat;

/// One compared request, as the checks read it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context<'a> {
    pub op: &'a str,
    pub request: &'a CapturedRequest,
    pub legacy: Reply<'a>,
    pub translated: Reply<'a>,
}

/// Why a finding differs, as far as the registry knows.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// The registry entry's id (`COMPATIBILITY.md`).
    pub id: &'static str,
    /// The setting that changes this answer, with its value in this
    /// configuration where it is a `[compat]` key:
    /// `compat.business_error_status = "200"`.
    pub setting: Option<String>,
    /// Whether the entry's own test passed on the request (see the module
    /// doc); otherwise the entry only names the field.
    pub checked: bool,
    pub summary: &'static str,
}

impl Explanation {
    /// One line: `compat.x = v (id)` or `id`, with "may be" when unchecked.
    pub fn line(&self) -> String {
        let what = match &self.setting {
            Some(s) => format!("{s} ({})", self.id),
            None => self.id.to_owned(),
        };
        if self.checked {
            format!("explained by {what}")
        } else {
            format!("documented, may be {what}")
        }
    }
}

/// The explanations of `finding` on this request, checked ones first.
pub(crate) fn explain(finding: &Finding, cx: &Context<'_>, compat: &Compat) -> Vec<Explanation> {
    let paths: Vec<String> = finding.paths().map(normalise).collect();
    let mut out: Vec<Explanation> = differences::ALL
        .iter()
        .filter_map(|d| {
            let named = d.fields.iter().any(|f| {
                let op_matches = match f.operation {
                    Some(o) => o.name() == cx.op,
                    None => true,
                };
                op_matches && paths.iter().any(|p| covers(f.path, p))
            });
            let checked = match check(d.id, finding, cx, compat) {
                Some(true) => true,
                Some(false) => return None,
                None if named => false,
                None => return None,
            };
            Some(Explanation {
                id: d.id,
                setting: d.setting.map(|s| setting_text(s, compat)),
                checked,
                summary: d.summary,
            })
        })
        .collect();
    out.sort_by_key(|e| !e.checked);
    out
}

/// Keeps in `acc` only what `next` (the same finding on another request)
/// also offers; an entry stays checked only if it was checked on both.
pub(crate) fn intersect(acc: &mut Vec<Explanation>, next: &[Explanation]) {
    acc.retain_mut(|e| match next.iter().find(|n| n.id == e.id) {
        Some(n) => {
            e.checked &= n.checked;
            true
        }
        None => false,
    });
    acc.sort_by_key(|e| !e.checked);
}

/// Whether a registry path covers a normalised answer path: the same
/// field, or one below it.
fn covers(entry: &str, path: &str) -> bool {
    match path.strip_prefix(entry) {
        Some(rest) => rest.is_empty() || rest.starts_with('.') || rest.starts_with('['),
        None => false,
    }
}

/// `setting = value` for a `[compat]` key, the bare key otherwise.
fn setting_text(setting: &'static str, c: &Compat) -> String {
    let quoted = |s: &str| format!("{s:?}");
    let value = match setting {
        "compat.worker_memory_field" => quoted(c.memory_field),
        "compat.account_traffic" => c.account_traffic.to_string(),
        "compat.traffic_expiration" => quoted(if c.traffic_expiration_from_balance {
            "balance_expiration_at"
        } else {
            "zero"
        }),
        "compat.aborted_status" => c.aborted_status.to_string(),
        "compat.unknown_status" => c.unknown_status.to_string(),
        "compat.extra_export_formats" => c.extra_export_formats.to_string(),
        "compat.origin_rename" => {
            let pairs: Vec<String> = c
                .origin_rename
                .iter()
                .map(|(k, v)| format!("{k} = {v:?}"))
                .collect();
            format!("{{ {} }}", pairs.join(", "))
        }
        // A dialect choice: its value's name, as the contract spells it.
        other => {
            let dialect = c.dialect.settings();
            let key = other.strip_prefix("compat.");
            match dialect.iter().find(|(k, _)| Some(*k) == key) {
                Some((_, name)) => quoted(name),
                None => return other.to_owned(),
            }
        }
    };
    format!("{setting} = {value}")
}

fn code(r: Reply<'_>) -> Option<i64> {
    r.body.get("code").and_then(Value::as_i64)
}

fn has_key(req: &CapturedRequest) -> bool {
    SECRET_HEADERS.iter().any(|h| req.headers.contains_key(*h))
}

/// A query parameter's value (`None`: not there).
fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?.split('&').find_map(|kv| match kv.split_once('=') {
        Some((k, v)) if k == name => Some(v),
        None if kv == name => Some(""),
        _ => None,
    })
}

/// Whether the finding is about the envelope's status, code or message.
fn about_the_error(paths: &[String]) -> bool {
    paths
        .iter()
        .all(|p| matches!(p.as_str(), "http_status" | "code" | "message"))
}

/// The entry's own test on this request: `Some(true)` it explains the
/// finding, `Some(false)` it does not, `None` no test (the field decides).
fn check(id: &str, f: &Finding, cx: &Context<'_>, c: &Compat) -> Option<bool> {
    use v1compat_contract::dialect::{BusinessErrorStatus, EmptyStoreSearch, MissingKeyStatus};
    let paths: Vec<String> = f.paths().map(normalise).collect();
    let only = |p: &str| paths.len() == 1 && paths[0] == p;
    let (l, t) = (cx.legacy, cx.translated);
    let (lc, tc) = (code(l), code(t));
    Some(match id {
        "worker_memory_field" => {
            if cx.op != "worker_detail" {
                return Some(false);
            }
            let field = |p: &str| {
                p.strip_prefix("data.parameters.system.")
                    .filter(|n| *n == "memory" || *n == "memory_bytes")
                    .map(str::to_owned)
            };
            match (&f.renamed_to, field(&f.path)) {
                // Legacy's name → the configured one.
                (Some(to), Some(from)) => {
                    field(to).is_some_and(|to| to == c.memory_field && from != c.memory_field)
                }
                // Only on the translated side: the configured name.
                (None, Some(name)) if f.legacy.is_none() => name == c.memory_field,
                // Only on legacy: the name not configured.
                (None, Some(name)) if f.translated.is_none() => name != c.memory_field,
                _ => false,
            }
        }
        "business_error_status" => {
            let errors = lc.is_some_and(|x| x != 0) && tc.is_some_and(|x| x != 0);
            only("http_status")
                && errors
                && match c.dialect.business_error_status {
                    BusinessErrorStatus::Always200 => t.status == 200 && l.status >= 400,
                    BusinessErrorStatus::Http => l.status == 200 && t.status >= 400,
                }
        }
        "missing_key_status" => {
            let want = match c.dialect.missing_key_status {
                MissingKeyStatus::Unauthorized => 20001,
                MissingKeyStatus::BadRequest => 4000,
            };
            !has_key(cx.request)
                && about_the_error(&paths)
                && tc == Some(want)
                && matches!(lc, Some(4000 | 20001))
                && lc != tc
        }
        "error_message_detail" => only("message") && lc == tc && matches!(lc, Some(4000 | 20001)),
        "input_before_key" => {
            has_key(cx.request) && about_the_error(&paths) && lc == Some(20001) && tc == Some(4000)
        }
        "unknown_id_before_key" => {
            has_key(cx.request)
                && about_the_error(&paths)
                && lc == Some(20001)
                && t.status == 404
                && !matches!(tc, Some(0 | 4000 | 20001) | None)
        }
        "account_traffic" => {
            cx.op == "account_info"
                && only("data.traffic")
                && f.translated == Some(Value::from(c.account_traffic))
        }
        "traffic_expiration" if !c.traffic_expiration_from_balance => {
            cx.op == "account_info"
                && only("data.traffic_expiration_at")
                && f.translated == Some(Value::from(0))
        }
        "origin_rename" => {
            let (Some(Value::String(from)), Some(Value::String(to))) = (&f.legacy, &f.translated)
            else {
                return Some(false);
            };
            c.origin_rename.get(from) == Some(to)
        }
        "empty_store_search" => {
            cx.op == "store_search"
                && query_param(cx.request.query.as_deref(), "search") == Some("")
                && match c.dialect.empty_store_search {
                    EmptyStoreSearch::Refuse => tc == Some(4000),
                    EmptyStoreSearch::All => lc == Some(4000),
                }
        }
        "extra_export_formats" => {
            let format = cx.request.body.get("format").and_then(Value::as_str);
            cx.op == "result_export"
                && c.extra_export_formats
                && format.is_some_and(|f| {
                    !f.eq_ignore_ascii_case("csv") && !f.eq_ignore_ascii_case("json")
                })
                && lc == Some(4000)
        }
        "public_catalog_key" => {
            matches!(cx.op, "store_search" | "worker_detail" | "proxy_regions")
                && !has_key(cx.request)
                && tc == Some(20001)
        }
        _ => return None,
    })
}

/// The registry entry of an id (the tests check ids against the registry).
#[cfg(test)]
fn entry(id: &str) -> Option<&'static differences::Difference> {
    differences::ALL.iter().find(|d| d.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use v1compat_contract::dialect::BusinessErrorStatus;

    fn finding(path: &str, to: Option<&str>, l: Option<Value>, t: Option<Value>) -> Finding {
        Finding {
            path: path.into(),
            renamed_to: to.map(str::to_owned),
            legacy: l,
            translated: t,
        }
    }

    /// The context of one compared request: its operation, the request
    /// and the two answers' statuses and bodies.
    fn context<'a>(
        op: &'a str,
        request: &'a CapturedRequest,
        (legacy_status, legacy): (u16, &'a Value),
        (translated_status, translated): (u16, &'a Value),
    ) -> Context<'a> {
        Context {
            op,
            request,
            legacy: Reply {
                status: legacy_status,
                body: legacy,
            },
            translated: Reply {
                status: translated_status,
                body: translated,
            },
        }
    }

    fn keyed() -> CapturedRequest {
        CapturedRequest {
            headers: [("api-key".to_owned(), "<redacted>".to_owned())].into(),
            ..Default::default()
        }
    }

    fn ids(e: &[Explanation]) -> Vec<(&str, bool)> {
        e.iter().map(|e| (e.id, e.checked)).collect()
    }

    #[test]
    fn a_404_against_a_200_names_business_error_status_when_set_to_200() {
        let mut c = Compat::default();
        c.dialect.business_error_status = BusinessErrorStatus::Always200;
        let (lb, tb) = (json!({"code": 50002}), json!({"code": 50002}));
        let req = keyed();
        let cx = context("run_detail", &req, (404, &lb), (200, &tb));
        let f = finding("http_status", None, Some(json!(404)), Some(json!(200)));
        let e = explain(&f, &cx, &c);
        assert_eq!(ids(&e), vec![("business_error_status", true)]);
        assert_eq!(
            e[0].setting.as_deref(),
            Some("compat.business_error_status = \"200\"")
        );
        assert_eq!(
            e[0].line(),
            "explained by compat.business_error_status = \"200\" (business_error_status)"
        );

        // The default dialect does not explain a translated 200: not listed.
        let e = explain(&f, &cx, &Compat::default());
        assert!(e.is_empty(), "{e:?}");
        // A success against an error is not a dialect matter either.
        let ok = json!({"code": 0});
        let cx2 = Context {
            translated: Reply {
                status: 200,
                body: &ok,
            },
            ..cx
        };
        assert!(explain(&f, &cx2, &c).is_empty());
    }

    #[test]
    fn the_memory_rename_names_worker_memory_field_with_its_value() {
        let mut c = Compat {
            memory_field: "memory",
            ..Compat::default()
        };
        let (lb, tb) = (json!({"code": 0}), json!({"code": 0}));
        let req = keyed();
        let cx = context("worker_detail", &req, (200, &lb), (200, &tb));
        let rename = finding(
            "data.parameters.system.memory_bytes",
            Some("data.parameters.system.memory"),
            Some(json!(512)),
            Some(json!(512)),
        );
        let e = explain(&rename, &cx, &c);
        assert_eq!(ids(&e), vec![("worker_memory_field", true)]);
        assert_eq!(
            e[0].setting.as_deref(),
            Some("compat.worker_memory_field = \"memory\"")
        );
        // Another field of the same object is not the memory field's doing,
        // though the entry names the whole object.
        let cpus = finding(
            "data.parameters.system.cpus",
            None,
            Some(json!(1)),
            Some(json!(2)),
        );
        assert!(explain(&cpus, &cx, &c).is_empty());
        // The other way round the configured name must be the translated one.
        c.memory_field = "memory_bytes";
        assert!(explain(&rename, &cx, &c).is_empty());
    }

    #[test]
    fn unchecked_entries_are_offered_by_their_field_and_intersected() {
        let c = Compat::default();
        let (lb, tb) = (json!({"code": 0}), json!({"code": 0}));
        let req = keyed();
        let cx = context("run_detail", &req, (200, &lb), (200, &tb));
        let f = finding("data.status", None, Some(json!(3)), Some(json!(2)));
        let mut e = explain(&f, &cx, &c);
        assert_eq!(
            ids(&e),
            vec![("aborted_status", false), ("unknown_status", false)]
        );
        assert_eq!(e[1].setting.as_deref(), Some("compat.unknown_status = 2"));
        assert!(e[1].line().starts_with("documented, may be"));
        // A field no entry names has no explanation.
        let other = finding("data.title", None, Some(json!("a")), Some(json!("b")));
        assert!(explain(&other, &cx, &c).is_empty());
        // Only what every occurrence offers stays.
        let second = e[1].clone();
        intersect(&mut e, &[second]);
        assert_eq!(ids(&e), vec![("unknown_status", false)]);
        intersect(&mut e, &[]);
        assert!(e.is_empty());
    }

    #[test]
    fn request_side_entries_are_checked_on_the_captured_request() {
        let c = Compat::default();
        let (lb, tb) = (json!({"code": 4000}), json!({"code": 0}));
        let req = CapturedRequest {
            query: Some("search=&limit=5".into()),
            ..keyed()
        };
        let cx = context("store_search", &req, (400, &lb), (200, &tb));
        // The gateway refuses `search=` by default: legacy listing
        // everything would be `all`; here legacy refused and the
        // translation did not, which `refuse` does not explain.
        let f = finding("code", None, Some(json!(4000)), Some(json!(0)));
        assert!(explain(&f, &cx, &c).is_empty());
        let mut all = c.clone();
        all.dialect.empty_store_search = v1compat_contract::dialect::EmptyStoreSearch::All;
        let e = explain(&f, &cx, &all);
        assert_eq!(ids(&e), vec![("empty_store_search", true)]);
        assert_eq!(
            e[0].setting.as_deref(),
            Some("compat.empty_store_search = \"all\"")
        );
        assert_eq!(query_param(Some("a=1&search"), "search"), Some(""));
        assert_eq!(query_param(Some("research=x"), "search"), None);
        assert!(covers(
            "data.parameters.system",
            "data.parameters.system.memory"
        ));
        assert!(!covers("data.count", "data.counter"));
        assert!(entry("account_traffic").is_some());
    }
}
