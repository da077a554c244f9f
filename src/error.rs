//! The one place where a failure becomes a V1 answer. Every error on the
//! request path is a [`GatewayError`] that remembers where it came from
//! (the V1 client, the V2 upstream, or the gateway itself); [`GatewayError::render`]
//! turns it into the HTTP status and V1 envelope a legacy client expects, plus
//! diagnostic headers for operators.
//!
//! V1↔V2 differences here (see `COMPATIBILITY.md`): [`error_message_detail`](crate::differences::ERROR_MESSAGE_DETAIL), [`business_error_status`](crate::differences::BUSINESS_ERROR_STATUS), [`missing_key_status`](crate::differences::MISSING_KEY_STATUS).

use http::StatusCode;

use crate::upstream::UpstreamFailure;
use crate::v1::{code, Envelope};
use v1compat_contract::dialect::{Dialect, MissingKeyStatus};

/// What an operation is about, so that a V2 "not found" becomes the V1 code a
/// V1 client knows for that kind of thing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    Worker,
    Task,
    Run,
    /// Abort: V1 reports a failed abort as HTTP 500 / 70002.
    Abort,
    Other,
}

impl Subject {
    pub fn as_str(self) -> &'static str {
        match self {
            Subject::Worker => "worker",
            Subject::Task => "task",
            Subject::Run | Subject::Abort => "run",
            Subject::Other => "resource",
        }
    }
}

/// Who is to blame (defined with the metric labels it becomes).
pub(crate) use crate::telemetry::Origin;

#[derive(Debug, Clone, thiserror::Error)]
pub enum GatewayError {
    /// Bad V1 input, caught before anything was sent upstream.
    #[error("invalid request: {0}")]
    BadRequest(String),
    /// A key header an operation that needs a key cannot use (characters a
    /// key cannot hold, an `Authorization` scheme other than Bearer).
    #[error("missing or malformed API key: {0}")]
    Unauthorized(String),
    /// No key on an operation V1 required one for (no key header, or one
    /// that is empty or blank, as a form with an empty key field sends it):
    /// 401 / 20001, or 400 / 4000 under `compat.missing_key_status = "400"`.
    #[error("no API key sent: {0}")]
    MissingKey(String),
    /// The gateway itself knows the thing does not exist (e.g. the cached
    /// result of a worker verification).
    #[error("{} not found", .0.as_str())]
    NotFound(Subject),
    #[error("no V1 operation at this method and path")]
    UnknownRoute,
    #[error("too many requests in flight")]
    Overloaded,
    /// V2 answered with an error envelope (or a non-zero code).
    #[error("V2 refused: HTTP {}{}: {message}", status.as_u16(), code.map(|c| format!(", code {c}")).unwrap_or_default())]
    Refused {
        subject: Subject,
        status: StatusCode,
        code: Option<i64>,
        message: String,
        /// V2's `details` (which field, why), passed on in the V1 message of
        /// refusals that become 400 / 4000.
        details: Vec<String>,
        /// V2's `request_id`, returned to the client for troubleshooting.
        v2_request_id: Option<String>,
        /// V2's `Retry-After` (delta-seconds), passed on with a 429.
        retry_after: Option<u64>,
    },
    /// No answer from V2 at all.
    #[error(transparent)]
    Upstream(#[from] UpstreamFailure),
    /// No answer from V2 to an abort: V1 reported every failed abort as
    /// 500 / 70002, a transport failure included.
    #[error("abort not confirmed: {0}")]
    AbortUnconfirmed(UpstreamFailure),
    /// An answer to an abort that cannot be read: not a confirmation
    /// either, so 500 / 70002 as V1 said of every failed abort.
    #[error("abort not confirmed: unreadable upstream answer: {0}")]
    AbortUnreadable(String),
    /// V2 answered, but not with something the gateway can read.
    #[error("unreadable upstream answer: {0}")]
    Garbled(String),
    /// The whole V1 request ran out of time.
    #[error("request deadline of {} exceeded", humantime::format_duration(*.0))]
    Deadline(std::time::Duration),
    /// Still in progress when the shutdown grace period ended.
    #[error("the gateway is shutting down; the request was not completed")]
    ShuttingDown,
    /// A translation gap or a panic: our bug.
    #[error("internal error: {0}")]
    Internal(String),
    /// Refused on purpose inside a brownout window
    /// (`[[inventory.brownouts]]`): V1 is being retired. 410 / 4000, the
    /// message saying so and what to call instead.
    #[error("{0}")]
    Brownout(String),
}

/// A rendered V1 error: status, envelope and diagnostic headers.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub status: StatusCode,
    pub envelope: Envelope,
    pub origin: Origin,
    /// Short machine-readable cause for `x-v1compat-error` and metrics.
    pub cause: &'static str,
}

impl GatewayError {
    pub fn bad(field: &str, problem: impl std::fmt::Display) -> GatewayError {
        GatewayError::BadRequest(format!("{field} {problem}"))
    }

    /// Whether this error tells a V1 client the worker does not exist
    /// (404 / 50001), whichever way V2 said so.
    pub fn is_unknown_worker(&self) -> bool {
        match self {
            GatewayError::NotFound(Subject::Worker) => true,
            GatewayError::Refused {
                subject,
                status,
                code,
                ..
            } => map_refusal(*subject, *status, *code).1 .0 == code::SCRIPT_NOT_FOUND.0,
            _ => false,
        }
    }

    /// Whether V2 refused the key (V1 401 / 20001), whichever way V2 said
    /// so: HTTP 401/403, or code 12001/12002 under any status (V2 does not
    /// bind business codes to one, and may send them with HTTP 200).
    pub fn is_invalid_key(&self) -> bool {
        match self {
            GatewayError::Refused {
                subject,
                status,
                code,
                ..
            } => map_refusal(*subject, *status, *code).1 .0 == code::INVALID_KEY.0,
            _ => false,
        }
    }

    /// Seconds a client should wait before trying again, for answers that
    /// render as 429: V2's own `Retry-After` when it sent one, else 1 s for
    /// the gateway's overload refusals.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            GatewayError::Overloaded | GatewayError::Upstream(UpstreamFailure::OverBudget(_)) => {
                Some(1)
            }
            GatewayError::Refused { retry_after, .. }
                if self.render().status == StatusCode::TOO_MANY_REQUESTS =>
            {
                Some(retry_after.unwrap_or(1))
            }
            _ => None,
        }
    }

    /// The V1 answer under a V1 dialect: the missing-key reading and the HTTP
    /// status of business errors (`compat.business_error_status`) applied to
    /// [`GatewayError::render`]. Key problems (a missing key, and any 20001
    /// however it arose) keep their status whatever that setting says (see
    /// [`Dialect::error_status`]).
    pub fn render_in(&self, dialect: &Dialect) -> Rendered {
        let mut rendered = match self {
            GatewayError::MissingKey(_)
                if dialect.missing_key_status == MissingKeyStatus::BadRequest =>
            {
                let (c, m) = code::INVALID_PARAMS;
                Rendered {
                    status: StatusCode::BAD_REQUEST,
                    envelope: Envelope::error(c, format!("{m}: the api-key header is missing")),
                    origin: Origin::Client,
                    cause: "invalid_request",
                }
            }
            _ => self.render(),
        };
        let about_key = matches!(self, GatewayError::MissingKey(_))
            || rendered.envelope.code == code::INVALID_KEY.0;
        rendered.status = dialect.error_status(rendered.status, about_key);
        rendered
    }

    /// The V1 answer in the default dialect.
    pub fn render(&self) -> Rendered {
        use GatewayError::*;
        let (status, (code, message), origin, cause) = match self {
            BadRequest(detail) => {
                let (c, m) = code::INVALID_PARAMS;
                let env = Envelope::error(c, format!("{m}: {detail}"));
                return Rendered {
                    status: StatusCode::BAD_REQUEST,
                    envelope: env,
                    origin: Origin::Client,
                    cause: "invalid_request",
                };
            }
            Unauthorized(detail) | MissingKey(detail) => {
                let (c, m) = code::INVALID_KEY;
                let env = Envelope::error(c, format!("{m}: {detail}"));
                return Rendered {
                    status: StatusCode::UNAUTHORIZED,
                    envelope: env,
                    origin: Origin::Client,
                    cause: "unauthorized",
                };
            }
            NotFound(subject) => (
                StatusCode::NOT_FOUND,
                not_found(*subject),
                Origin::Client,
                "not_found",
            ),
            UnknownRoute => (
                StatusCode::NOT_FOUND,
                code::NOT_FOUND,
                Origin::Client,
                "unknown_route",
            ),
            Overloaded => (
                StatusCode::TOO_MANY_REQUESTS,
                code::RATE_LIMITED,
                Origin::Gateway,
                "overloaded",
            ),
            Refused {
                subject,
                status,
                code,
                message,
                details,
                ..
            } => {
                let (s, (c, m)) = map_refusal(*subject, *status, *code);
                let (origin, cause) = refusal_origin(*status, s);
                // V2's reason (which field, why) belongs in the V1 message of
                // a refused request (4000), as V1 named its own validation
                // failures; other codes keep V1's fixed texts.
                if c == code::INVALID_PARAMS.0 {
                    if let Some(reason) = refusal_reason(message, details) {
                        return Rendered {
                            status: s,
                            envelope: Envelope::error(c, format!("{m}: {reason}")),
                            origin,
                            cause,
                        };
                    }
                }
                (s, (c, m), origin, cause)
            }
            // A V2 answer refused at the memory budget: the gateway's
            // overload, as the edge answers a request at the budget (429 /
            // 4290, `memory_budget`); only reads are refused, so the client
            // may send it again.
            Upstream(failure @ UpstreamFailure::OverBudget(_)) => (
                StatusCode::TOO_MANY_REQUESTS,
                code::RATE_LIMITED,
                Origin::Gateway,
                failure.kind(),
            ),
            Upstream(failure) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                code::INTERNAL,
                Origin::Upstream,
                failure.kind(),
            ),
            AbortUnconfirmed(failure) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                code::ABORT_FAILED,
                // An abort is sent once and its answer never refused; were
                // it, the gateway would be the one to blame.
                match failure {
                    UpstreamFailure::OverBudget(_) => Origin::Gateway,
                    _ => Origin::Upstream,
                },
                failure.kind(),
            ),
            Garbled(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                code::INTERNAL,
                Origin::Upstream,
                "garbled",
            ),
            AbortUnreadable(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                code::ABORT_FAILED,
                Origin::Upstream,
                "garbled",
            ),
            Deadline(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                code::INTERNAL,
                Origin::Gateway,
                "deadline",
            ),
            ShuttingDown => (
                StatusCode::INTERNAL_SERVER_ERROR,
                (
                    code::INTERNAL.0,
                    "Shutting down: the request was not completed, please retry",
                ),
                Origin::Gateway,
                "shutdown",
            ),
            Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                code::INTERNAL,
                Origin::Gateway,
                "internal",
            ),
            Brownout(message) => {
                return Rendered {
                    status: StatusCode::GONE,
                    envelope: Envelope::error(code::INVALID_PARAMS.0, message.clone()),
                    origin: Origin::Gateway,
                    cause: "brownout",
                }
            }
        };
        Rendered {
            status,
            envelope: Envelope::error(code, message),
            origin,
            cause,
        }
    }
}

/// Longest V2 reason passed on in a V1 message, in characters.
const MAX_REASON_CHARS: usize = 500;

/// V2's reason for a refusal: its `details` joined, else its message unless
/// that is only V2's generic text for the code. Control characters become
/// spaces and the whole is bounded, since it is V2's text echoed to a client.
fn refusal_reason(message: &str, details: &[String]) -> Option<String> {
    const GENERIC: [&str; 3] = ["", "invalid argument", "bad request"];
    let text = if details.is_empty() {
        let m = message.trim();
        if GENERIC.contains(&m.to_ascii_lowercase().as_str()) {
            return None;
        }
        m.to_owned()
    } else {
        details.join("; ")
    };
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_REASON_CHARS)
        .collect();
    if text.chars().count() > MAX_REASON_CHARS {
        out.push('…');
    }
    Some(out)
}

/// V2's `details` as strings: an array of strings (the documented form), a
/// single string, or other JSON written out.
pub(crate) fn details_of(details: Option<&serde_json::Value>) -> Vec<String> {
    use serde_json::Value;
    let one = |v: &Value| match v {
        Value::String(s) => s.trim().to_owned(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    match details {
        Some(Value::Array(items)) => items
            .iter()
            .take(20)
            .map(one)
            .filter(|s| !s.is_empty())
            .collect(),
        Some(v) => Some(one(v)).filter(|s| !s.is_empty()).into_iter().collect(),
        None => Vec::new(),
    }
}

/// Whose fault a V2 refusal is. V2 answering 4xx (or a business code that
/// V1 answers with 4xx) refused what the client sent — its input, its key,
/// an id that does not exist, its plan's rate — so the client is to blame,
/// and the upstream alerts stay quiet. A V2 5xx is V2's.
fn refusal_origin(v2_status: StatusCode, v1_status: StatusCode) -> (Origin, &'static str) {
    let client_caused = v2_status.is_client_error()
        || (!v2_status.is_server_error() && v1_status.is_client_error());
    if !client_caused {
        return (Origin::Upstream, "refused");
    }
    let cause = match v1_status.as_u16() {
        400 => "invalid_request",
        401 => "unauthorized",
        404 => "not_found",
        429 => "rate_limited",
        _ => "refused",
    };
    (Origin::Client, cause)
}

fn not_found(subject: Subject) -> (i64, &'static str) {
    match subject {
        Subject::Worker => code::SCRIPT_NOT_FOUND,
        Subject::Task => code::TASK_NOT_FOUND,
        Subject::Run | Subject::Abort => code::RUN_NOT_FOUND,
        Subject::Other => code::NOT_FOUND,
    }
}

/// The error table: V2 HTTP status + application code → V1 HTTP status + V1
/// code and message. Business codes win over the HTTP status because V2 does
/// not bind them to one (they may even arrive with HTTP 200).
pub(crate) fn map_refusal(
    subject: Subject,
    status: StatusCode,
    v2_code: Option<i64>,
) -> (StatusCode, (i64, &'static str)) {
    let s = |n: u16| StatusCode::from_u16(n).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if subject == Subject::Abort {
        // V1 reports every failure to abort an existing run as 500 / 70002;
        // not-found, auth and rate limits keep their own meaning.
        let keeps_meaning = matches!(status.as_u16(), 401 | 404 | 429)
            || matches!(v2_code, Some(12001 | 12002 | 13000 | 11004 | 70001));
        if !keeps_meaning {
            return (s(500), code::ABORT_FAILED);
        }
    }
    match v2_code {
        Some(50001) => return (s(404), code::SCRIPT_NOT_FOUND),
        Some(60001) => return (s(404), code::TASK_NOT_FOUND),
        Some(70001) => return (s(404), code::RUN_NOT_FOUND),
        Some(70002) => return (s(500), code::ABORT_FAILED),
        Some(50002) => return (s(500), code::SCRIPT_RUN_FAILED),
        Some(50003) => return (s(400), code::VERSION_UNAVAILABLE),
        Some(30001) => return (s(400), code::BALANCE),
        // Plan concurrency limit (V2 only): V1 clients back off on 429.
        Some(30003) | Some(13000) => return (s(429), code::RATE_LIMITED),
        Some(12001) | Some(12002) => return (s(401), code::INVALID_KEY),
        Some(11004) => return (s(404), not_found(subject)),
        _ => {}
    }
    match status.as_u16() {
        401 | 403 => (s(401), code::INVALID_KEY),
        404 => (s(404), not_found(subject)),
        429 => (s(429), code::RATE_LIMITED),
        400..=499 => (s(400), code::INVALID_PARAMS),
        _ => (s(500), code::INTERNAL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(subject: Subject, status: u16, code: Option<i64>) -> (u16, i64) {
        let (s, (c, _)) = map_refusal(subject, StatusCode::from_u16(status).unwrap(), code);
        (s.as_u16(), c)
    }

    #[test]
    fn v2_statuses_map_to_v1() {
        assert_eq!(table(Subject::Run, 400, Some(11000)), (400, 4000));
        assert_eq!(table(Subject::Run, 422, Some(11000)), (400, 4000));
        assert_eq!(table(Subject::Run, 401, Some(12001)), (401, 20001));
        assert_eq!(table(Subject::Run, 429, Some(13000)), (429, 4290));
        assert_eq!(table(Subject::Run, 500, Some(10000)), (500, 5000));
        assert_eq!(table(Subject::Other, 404, Some(11004)), (404, 4040));
    }

    /// A V2 refusal about `subject`, with no text.
    fn v2_refusal(subject: Subject, status: u16, code: Option<i64>) -> GatewayError {
        GatewayError::Refused {
            subject,
            status: StatusCode::from_u16(status).unwrap(),
            code,
            message: String::new(),
            details: Vec::new(),
            v2_request_id: None,
            retry_after: None,
        }
    }

    #[test]
    fn a_refused_key_is_recognised_however_v2_says_it() {
        for (status, code) in [
            (401, Some(12001)),
            (401, None),
            (403, None),
            (200, Some(12002)),
        ] {
            assert!(
                v2_refusal(Subject::Other, status, code).is_invalid_key(),
                "{status} {code:?}"
            );
        }
        for (status, code) in [(404, Some(11004)), (429, Some(13000)), (500, None)] {
            assert!(
                !v2_refusal(Subject::Other, status, code).is_invalid_key(),
                "{status} {code:?}"
            );
        }
        assert!(!GatewayError::NotFound(Subject::Worker).is_invalid_key());
    }

    #[test]
    fn not_found_depends_on_subject() {
        assert_eq!(table(Subject::Worker, 404, Some(11004)), (404, 50001));
        assert_eq!(table(Subject::Task, 404, None), (404, 60001));
        assert_eq!(table(Subject::Run, 404, Some(11004)), (404, 70001));
        assert_eq!(table(Subject::Abort, 404, Some(70001)), (404, 70001));
    }

    #[test]
    fn business_codes_win_even_on_http_200() {
        assert_eq!(table(Subject::Worker, 200, Some(50001)), (404, 50001));
        assert_eq!(table(Subject::Run, 200, Some(30003)), (429, 4290));
        assert_eq!(table(Subject::Run, 400, Some(50003)), (400, 50003));
    }

    #[test]
    fn failed_abort_is_500_70002() {
        assert_eq!(table(Subject::Abort, 400, Some(70002)), (500, 70002));
        assert_eq!(table(Subject::Abort, 422, Some(11000)), (500, 70002));
        assert_eq!(table(Subject::Abort, 500, Some(10000)), (500, 70002));
        assert_eq!(table(Subject::Abort, 429, Some(13000)), (429, 4290));
    }

    #[test]
    fn unknown_worker_whichever_way_v2_says_it() {
        let refused = |status, code| v2_refusal(Subject::Worker, status, code);
        assert!(refused(404, Some(50001)).is_unknown_worker());
        assert!(refused(404, Some(11004)).is_unknown_worker());
        assert!(refused(200, Some(50001)).is_unknown_worker());
        assert!(GatewayError::NotFound(Subject::Worker).is_unknown_worker());
        assert!(!refused(500, Some(10000)).is_unknown_worker());
        assert!(!GatewayError::NotFound(Subject::Run).is_unknown_worker());
    }

    fn refused(status: u16, code: i64, message: &str, details: &[&str]) -> GatewayError {
        GatewayError::Refused {
            subject: Subject::Run,
            status: StatusCode::from_u16(status).unwrap(),
            code: Some(code),
            message: message.into(),
            details: details.iter().map(|d| d.to_string()).collect(),
            v2_request_id: None,
            retry_after: None,
        }
    }

    #[test]
    fn v2_reasons_reach_the_v1_message_of_4000_answers() {
        let r = refused(
            422,
            11000,
            "invalid argument",
            &["limit must be between 1 and 100"],
        )
        .render();
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            r.envelope.message,
            "Invalid request parameters: limit must be between 1 and 100"
        );
        let r = refused(400, 11000, "invalid argument", &["a", "b\nc"]).render();
        assert_eq!(r.envelope.message, "Invalid request parameters: a; b c");
        // Only V2's generic text: nothing to add.
        let r = refused(400, 11000, "invalid argument", &[]).render();
        assert_eq!(r.envelope.message, "Invalid request parameters");
        let r = refused(400, 11000, "run list time range cannot cross months", &[]).render();
        assert_eq!(
            r.envelope.message,
            "Invalid request parameters: run list time range cannot cross months"
        );
        // Other codes keep V1's fixed texts.
        let r = refused(400, 50003, "x", &["version \"v9.9.9\" is not available"]).render();
        assert_eq!(r.envelope.message, "The script version is not available");
        let r = refused(404, 70001, "run record does not exist", &["x"]).render();
        assert_eq!(r.envelope.message, "Run record does not exist");
        let long = "x".repeat(2000);
        let r = refused(422, 11000, "", &[long.as_str()]).render();
        assert!(r.envelope.message.chars().count() < 600);
    }

    #[test]
    fn details_are_read_in_every_shape() {
        use serde_json::json;
        assert_eq!(details_of(Some(&json!(["a", " b ", ""]))), vec!["a", "b"]);
        assert_eq!(details_of(Some(&json!("one"))), vec!["one"]);
        assert_eq!(details_of(Some(&json!(null))), Vec::<String>::new());
        assert_eq!(
            details_of(Some(&json!([{"field": "x"}]))),
            vec![r#"{"field":"x"}"#]
        );
        assert!(details_of(None).is_empty());
    }

    #[test]
    fn dialects_change_statuses_and_the_missing_key_answer() {
        use v1compat_contract::dialect::BusinessErrorStatus;
        let missing = GatewayError::MissingKey("send your key".into());
        let http = Dialect::default();
        let r = missing.render_in(&http);
        assert_eq!((r.status.as_u16(), r.envelope.code), (401, 20001));
        let four_hundred = Dialect {
            missing_key_status: MissingKeyStatus::BadRequest,
            ..Dialect::default()
        };
        let r = missing.render_in(&four_hundred);
        assert_eq!((r.status.as_u16(), r.envelope.code), (400, 4000));
        assert!(r.envelope.message.contains("api-key"));
        let always_200 = Dialect {
            business_error_status: BusinessErrorStatus::Always200,
            ..Dialect::default()
        };
        let r = missing.render_in(&always_200);
        assert_eq!((r.status.as_u16(), r.envelope.code), (401, 20001));
        for err in [
            GatewayError::UnknownRoute,
            GatewayError::Overloaded,
            GatewayError::NotFound(Subject::Task),
            refused(500, 70002, "", &[]),
            GatewayError::Internal("x".into()),
        ] {
            let default = err.render();
            let r = err.render_in(&always_200);
            assert_eq!(r.status, StatusCode::OK, "{err}");
            assert_eq!(r.envelope, default.envelope, "{err}");
        }
    }

    /// The n8n V1 node's dialect: its credential test reads 200 as a good
    /// key, 401 as a wrong one and 400 as a missing one, and its workflow
    /// steps read business errors from `code` under HTTP 200.
    #[test]
    fn the_n8n_dialect_keeps_key_statuses_and_sends_business_errors_as_200() {
        use v1compat_contract::dialect::{BusinessErrorStatus, EmptyStoreSearch};
        let n8n = Dialect {
            business_error_status: BusinessErrorStatus::Always200,
            empty_store_search: EmptyStoreSearch::All,
            missing_key_status: MissingKeyStatus::BadRequest,
        };
        let answer = |e: GatewayError| {
            let r = e.render_in(&n8n);
            (r.status.as_u16(), r.envelope.code)
        };
        assert_eq!(answer(GatewayError::MissingKey("x".into())), (400, 4000));
        let r = GatewayError::MissingKey("x".into()).render_in(&n8n);
        assert!(
            r.envelope.message.contains("api-key"),
            "{}",
            r.envelope.message
        );
        assert_eq!(answer(GatewayError::Unauthorized("x".into())), (401, 20001));
        // V2 refusing the key, with its status or with HTTP 200 and its code.
        assert_eq!(
            answer(v2_refusal(Subject::Other, 401, Some(12001))),
            (401, 20001)
        );
        assert_eq!(
            answer(v2_refusal(Subject::Run, 200, Some(12002))),
            (401, 20001)
        );
        assert_eq!(answer(v2_refusal(Subject::Other, 403, None)), (401, 20001));
        // Business errors and everything else: 200 with the code.
        assert_eq!(
            answer(GatewayError::NotFound(Subject::Worker)),
            (200, 50001)
        );
        assert_eq!(
            answer(v2_refusal(Subject::Worker, 404, Some(50001))),
            (200, 50001)
        );
        assert_eq!(
            answer(GatewayError::bad("run_slug", "is required")),
            (200, 4000)
        );
        assert_eq!(answer(GatewayError::Overloaded), (200, 4290));
        assert_eq!(answer(GatewayError::Internal("x".into())), (200, 5000));
    }

    #[test]
    fn an_abort_without_an_answer_is_70002() {
        let r =
            GatewayError::AbortUnconfirmed(UpstreamFailure::Unreachable("refused".into())).render();
        assert_eq!((r.status.as_u16(), r.envelope.code), (500, 70002));
        assert_eq!((r.origin, r.cause), (Origin::Upstream, "unreachable"));
        let r = GatewayError::AbortUnreadable("not JSON".into()).render();
        assert_eq!((r.status.as_u16(), r.envelope.code), (500, 70002));
        assert_eq!((r.origin, r.cause), (Origin::Upstream, "garbled"));
    }

    #[test]
    fn refusals_caused_by_the_client_are_the_clients() {
        let refused = |status: u16, code: Option<i64>| {
            GatewayError::Refused {
                subject: Subject::Run,
                status: StatusCode::from_u16(status).unwrap(),
                code,
                message: "no".into(),
                details: Vec::new(),
                v2_request_id: None,
                retry_after: None,
            }
            .render()
        };
        for (status, code, cause) in [
            (401, Some(12002), "unauthorized"),
            (404, Some(70001), "not_found"),
            (400, Some(11000), "invalid_request"),
            (429, Some(13000), "rate_limited"),
            (200, Some(70001), "not_found"),
        ] {
            let r = refused(status, code);
            assert_eq!(
                (r.origin, r.cause),
                (Origin::Client, cause),
                "{status} {code:?}"
            );
        }
        for (status, code) in [(500, Some(10000)), (503, None), (200, Some(50002))] {
            let r = refused(status, code);
            assert_eq!(
                (r.origin, r.cause),
                (Origin::Upstream, "refused"),
                "{status}"
            );
        }
    }

    #[test]
    fn messages_read_as_words_not_rust_values() {
        let e = GatewayError::Refused {
            subject: Subject::Run,
            status: StatusCode::UNAUTHORIZED,
            code: Some(12002),
            message: "key revoked".into(),
            details: Vec::new(),
            v2_request_id: None,
            retry_after: None,
        };
        assert_eq!(
            e.to_string(),
            "V2 refused: HTTP 401, code 12002: key revoked"
        );
        assert_eq!(
            GatewayError::NotFound(Subject::Worker).to_string(),
            "worker not found"
        );
        let d = GatewayError::Deadline(std::time::Duration::from_secs(30));
        assert_eq!(d.to_string(), "request deadline of 30s exceeded");
    }

    #[test]
    fn client_errors_name_the_problem() {
        let r = GatewayError::bad("run_slug", "is required").render();
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(r.envelope.code, 4000);
        assert_eq!(
            r.envelope.message,
            "Invalid request parameters: run_slug is required"
        );
        assert!(r.envelope.data.is_null());
    }
}
