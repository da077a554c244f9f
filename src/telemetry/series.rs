//! The series `/metrics` shows from the first scrape: build info, process
//! metrics, and every label set the gateway knows in advance at zero. A
//! series that appears only after its first event makes `rate()` and
//! `increase()` blind to that event and leaves dashboards saying "no data"
//! where the truth is 0.

use super::Origin;
use crate::v1::route::Operation;

use super::*;

/// V1 HTTP statuses the gateway answers with.
const V1_STATUSES: &[&str] = &["200", "400", "401", "404", "410", "429", "500"];

/// `(origin, cause)` of every V1 error the gateway renders
/// ([`GatewayError::render`](crate::error::GatewayError::render)), except the
/// unknown route, which has no operation.
const ERROR_KINDS: &[(Origin, &str)] = &[
    (Origin::Client, "invalid_request"),
    (Origin::Client, "unauthorized"),
    // A missing key, under the dialect that answers it with 400.
    (Origin::Client, "missing_key"),
    (Origin::Client, "not_found"),
    (Origin::Client, "rate_limited"),
    (Origin::Client, "refused"),
    (Origin::Upstream, "refused"),
    (Origin::Upstream, "unreachable"),
    (Origin::Upstream, "timeout"),
    (Origin::Upstream, "broken"),
    (Origin::Upstream, "too_large"),
    (Origin::Upstream, "garbled"),
    (Origin::Gateway, "overloaded"),
    // A V2 answer refused at the memory budget.
    (Origin::Gateway, "memory_budget"),
    (Origin::Gateway, "deadline"),
    (Origin::Gateway, "shutdown"),
    (Origin::Gateway, "internal"),
    (Origin::Gateway, "brownout"),
];

const STATUS_CLASSES: &[&str] = &["2xx", "3xx", "4xx", "5xx", "error"];
const RETRY_SKIPS: &[&str] = &["budget", "deadline", "retry_after"];
const SHADOW_OUTCOMES: &[&str] = &["sent", "skipped", "dropped", "failed"];

/// `v1compat_build_info{version}` = 1.
pub const BUILD_INFO: &str = "v1compat_build_info";

/// Registers build info and every known series at zero.
pub(super) fn register_all() {
    metrics::describe_gauge!(
        BUILD_INFO,
        "Always 1; the labels say which build of v1compat is running"
    );
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    for op in Operation::ALL {
        let name = op.name();
        for status in V1_STATUSES {
            metrics::counter!(REQUESTS, "operation" => name, "status" => *status).increment(0);
        }
        for (origin, cause) in ERROR_KINDS {
            metrics::counter!(ERRORS, "operation" => name, "origin" => origin.as_str(), "cause" => *cause)
                .increment(0);
        }
        let _ = metrics::histogram!(REQUEST_DURATION, "operation" => name);
        let _ = metrics::histogram!(UPSTREAM_CALLS_PER_REQUEST, "operation" => name);
        for outcome in SHADOW_OUTCOMES {
            metrics::counter!(SHADOW_COPIES, "operation" => name, "outcome" => *outcome)
                .increment(0);
        }
        metrics::counter!(super::BROWNOUT_REFUSALS, "operation" => name).increment(0);
    }
    metrics::counter!(REQUESTS, "operation" => "unknown", "status" => "404").increment(0);
    metrics::counter!(ERRORS, "operation" => "unknown", "origin" => "client", "cause" => "unknown_route")
        .increment(0);
    for route in crate::v2::routes::V2_ROUTES {
        for class in STATUS_CLASSES {
            metrics::counter!(UPSTREAM_REQUESTS_TOTAL, "route" => *route, "status_class" => *class)
                .increment(0);
        }
        for reason in RetryReason::ALL {
            metrics::counter!(UPSTREAM_RETRIES_TOTAL, "route" => *route, "reason" => reason.as_str())
                .increment(0);
        }
        for cause in RETRY_SKIPS {
            metrics::counter!(UPSTREAM_RETRIES_SKIPPED_TOTAL, "route" => *route, "cause" => *cause)
                .increment(0);
        }
        let _ = metrics::histogram!(UPSTREAM_DURATION_SECONDS, "route" => *route);
    }
    metrics::counter!(TRANSLATION_GAPS, "kind" => "unknown_status").increment(0);
    for listener in ["public", "admin"] {
        metrics::counter!(SHED_CONNECTIONS, "listener" => listener).increment(0);
        metrics::counter!(WRITE_STALLED_CONNECTIONS, "listener" => listener).increment(0);
        metrics::gauge!(OPEN_CONNECTIONS, "listener" => listener).set(0.0);
    }
    for outcome in ["applied", "rejected", "truncated"] {
        metrics::counter!(CONFIG_RELOADS, "outcome" => outcome).increment(0);
    }
    metrics::gauge!(IN_FLIGHT).set(0.0);
    metrics::gauge!(super::MEMORY_HELD).set(0.0);
    for reason in ["budget", "connection", "body", "v2_answer"] {
        metrics::counter!(super::MEMORY_REFUSALS, "reason" => reason).increment(0);
    }
    metrics::gauge!(SHADOW_IN_FLIGHT).set(0.0);
    metrics::counter!(SHADOW_CAPTURE_DROPPED).increment(0);
    for d in crate::differences::ALL {
        metrics::counter!(super::DIFFERENCES_APPLIED, "difference" => d.id).increment(0);
    }
    for outcome in ["ok", "failed"] {
        metrics::counter!(super::INVENTORY_FLUSHES, "outcome" => outcome).increment(0);
    }
    for reason in ["memory", "store"] {
        metrics::counter!(super::INVENTORY_EVICTED, "reason" => reason).increment(0);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::StatusCode;

    use super::*;
    use crate::error::{GatewayError, Subject};
    use crate::upstream::UpstreamFailure;

    /// One of each error the gateway can render. The `match` fails to
    /// compile when a variant is added, so this list (and [`ERROR_KINDS`])
    /// cannot silently fall behind.
    fn every_error() -> Vec<GatewayError> {
        let failures = || {
            [
                UpstreamFailure::Unreachable("x".into()),
                UpstreamFailure::Timeout(Duration::from_secs(1)),
                UpstreamFailure::Broken("x".into()),
                UpstreamFailure::TooLarge(1),
                UpstreamFailure::OverBudget(1),
            ]
        };
        let mut all = vec![
            GatewayError::BadRequest("x".into()),
            GatewayError::Unauthorized("x".into()),
            GatewayError::MissingKey("x".into()),
            GatewayError::NotFound(Subject::Run),
            GatewayError::Overloaded,
            GatewayError::Garbled("x".into()),
            GatewayError::AbortUnreadable("x".into()),
            GatewayError::Deadline(Duration::from_secs(1)),
            GatewayError::ShuttingDown,
            GatewayError::Internal("x".into()),
            GatewayError::Brownout("x".into()),
        ];
        for status in [400, 401, 404, 429, 500, 503] {
            for subject in [Subject::Run, Subject::Abort] {
                all.push(GatewayError::Refused {
                    subject,
                    status: StatusCode::from_u16(status).unwrap(),
                    code: None,
                    message: String::new(),
                    details: Vec::new(),
                    v2_request_id: None,
                    retry_after: None,
                });
            }
        }
        all.extend(failures().map(GatewayError::Upstream));
        all.extend(failures().map(GatewayError::AbortUnconfirmed));
        for e in &all {
            match e {
                GatewayError::BadRequest(_)
                | GatewayError::Unauthorized(_)
                | GatewayError::MissingKey(_)
                | GatewayError::NotFound(_)
                | GatewayError::UnknownRoute
                | GatewayError::Overloaded
                | GatewayError::Refused { .. }
                | GatewayError::Upstream(_)
                | GatewayError::AbortUnconfirmed(_)
                | GatewayError::Garbled(_)
                | GatewayError::AbortUnreadable(_)
                | GatewayError::Deadline(_)
                | GatewayError::ShuttingDown
                | GatewayError::Internal(_)
                | GatewayError::Brownout(_) => {}
            }
        }
        all
    }

    #[test]
    fn every_rendered_error_has_its_series_registered() {
        let missing_key_400 = v1compat_contract::dialect::Dialect {
            missing_key_status: v1compat_contract::dialect::MissingKeyStatus::BadRequest,
            ..Default::default()
        };
        let renders = every_error().into_iter().flat_map(|e| {
            let other = e.render_in(&missing_key_400);
            [(e.render(), e.clone()), (other, e)]
        });
        for (r, e) in renders {
            assert!(
                ERROR_KINDS.contains(&(r.origin, r.cause)),
                "{e:?} renders ({}, {}), which is not registered at start",
                r.origin.as_str(),
                r.cause
            );
            assert!(
                V1_STATUSES.contains(&r.status.as_str()),
                "{e:?} answers {}, not registered at start",
                r.status
            );
        }
    }
}
