//! The access line: one log event per V1 request, written when its answer is
//! rendered (`pipeline::finish`), carrying what an operator needs to follow
//! it — method, operation, V1 status and code, duration, V2 calls, request
//! ids and, for an error, its origin, cause and message.
//!
//! It is also the one place a failure is logged: an upstream or gateway
//! failure is a `warn` access line (kept when `log.access = false`, which
//! silences only the `info` lines of answered and client-refused requests).
//! Keys never reach it: it is built from the rendered outcome, not from
//! headers.

use std::time::{Duration, Instant};

use http::{Method, StatusCode};

use crate::common::request_id::RequestId;
use crate::error::{GatewayError, Origin, Rendered};
use crate::v1::route::Operation;

/// Log target of access lines, for filters such as `v1compat::access=off`.
pub const TARGET: &str = "v1compat::access";

/// Who asked what: everything about a request the line needs beside its outcome.
pub(super) struct Context<'a> {
    pub method: &'a Method,
    pub op: Option<Operation>,
    pub request_id: &'a RequestId,
    pub started: Instant,
    /// `log.access`: write a line for every request, not only failures.
    pub every_request: bool,
    /// The V1 dialect errors are rendered in (`[compat]`).
    pub dialect: v1compat_contract::dialect::Dialect,
}

/// A request's outcome, as the access line reports it.
pub(super) struct Outcome<'a> {
    pub status: StatusCode,
    /// The V1 envelope's `code` (None when relayed from the legacy service).
    pub code: Option<i64>,
    pub upstream_calls: u32,
    pub v2_request_id: Option<&'a str>,
    pub error: Option<(&'a GatewayError, &'a Rendered)>,
    /// From the request's arrival until its outcome was known, just before
    /// the answer is rendered: read once, for this line and the request's
    /// metrics.
    pub elapsed: Duration,
}

/// Writes the access line of one request.
pub(super) fn log(cx: &Context<'_>, out: &Outcome<'_>) {
    let failed = out.error.is_some_and(|(_, r)| r.origin != Origin::Client);
    if !cx.every_request && !failed {
        return;
    }
    let operation = cx.op.map_or("unknown", Operation::name);
    let duration_ms = (out.elapsed.as_secs_f64() * 1e6).round() / 1e3;
    let origin = out.error.map(|(_, r)| r.origin.as_str());
    let cause = out.error.map(|(_, r)| r.cause);
    let error = out.error.map(|(e, _)| tracing::field::display(e));
    macro_rules! line {
        ($level:ident, $message:literal) => {
            tracing::$level!(
                target: TARGET,
                method = cx.method.as_str(),
                operation,
                status = out.status.as_u16(),
                code = out.code,
                duration_ms,
                upstream_calls = out.upstream_calls,
                request_id = cx.request_id.as_str(),
                v2_request_id = out.v2_request_id,
                origin,
                cause,
                error,
                $message
            )
        };
    }
    match out.error.map(|(_, r)| r.origin) {
        None => line!(info, "answered"),
        Some(Origin::Client) => line!(info, "refused"),
        Some(_) => line!(warn, "failed"),
    }
}
