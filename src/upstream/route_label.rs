//! The `route` label of upstream metrics: the V2 path of a call with every
//! identifier replaced by `{id}`. Computed once per call in the client, before
//! the first attempt, so metrics stay bounded whatever ids clients send.

/// Path segments that V2 routes are built from ([`crate::v2::V2Path`] takes
/// them as `'static` literals). Anything else in a path is an identifier.
const V2_LITERALS: &[&str] = &[
    "api",
    "v2",
    "workers",
    "worker-runs",
    "worker-tasks",
    "users",
    "account",
    "store",
    "proxy",
    "region",
    "runs",
    "result",
    "export",
    "log",
    "rerun",
    "abort",
    "input-schema",
    "last",
    "input",
];

/// The `route` of every V2 call the operations make, registered at zero at
/// start (`telemetry`). A route missing here is still counted once called;
/// a test checks each entry is a route label.
pub const V2_ROUTES: &[&str] = &[
    "/api/v2/store",
    "/api/v2/workers/{id}",
    "/api/v2/workers/{id}/input-schema",
    "/api/v2/workers/{id}/runs",
    "/api/v2/worker-tasks/{id}/runs",
    "/api/v2/proxy/region",
    "/api/v2/users/account",
    "/api/v2/worker-runs",
    "/api/v2/worker-runs/{id}",
    "/api/v2/worker-runs/{id}/result",
    "/api/v2/worker-runs/{id}/result/export",
    "/api/v2/worker-runs/{id}/log",
    "/api/v2/worker-runs/{id}/rerun",
    "/api/v2/worker-runs/{id}/abort",
];

/// `/api/v2/worker-runs/01KS…/log` → `/api/v2/worker-runs/{id}/log`.
///
/// Takes the path without its query (`V2Path::path`); a query, if one slips
/// in, is dropped so values never become label values. Empty segments are
/// kept as they are so the label still mirrors the path's shape.
pub(crate) fn route_label(path: &str) -> String {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let mut out = String::with_capacity(path.len());
    for (i, segment) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        if segment.is_empty() || V2_LITERALS.contains(&segment) {
            out.push_str(segment);
        } else {
            out.push_str("{id}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{route_label, V2_ROUTES};

    #[test]
    fn registered_routes_are_route_labels() {
        for route in V2_ROUTES {
            assert_eq!(route_label(route), *route);
        }
    }

    #[test]
    fn identifiers_become_placeholders() {
        assert_eq!(
            route_label("/api/v2/worker-runs/01KS2A1M515HG7PZX9STTB0KPH/log"),
            "/api/v2/worker-runs/{id}/log"
        );
        assert_eq!(
            route_label("/api/v2/workers/coreclaw~google-maps/input-schema"),
            "/api/v2/workers/{id}/input-schema"
        );
        assert_eq!(
            route_label("/api/v2/worker-tasks/t1/runs/last/result"),
            "/api/v2/worker-tasks/{id}/runs/last/result"
        );
    }

    #[test]
    fn fixed_routes_are_unchanged() {
        for p in [
            "/api/v2/users/account",
            "/api/v2/store",
            "/api/v2/proxy/region",
            "/api/v2/worker-runs/export",
        ] {
            assert_eq!(route_label(p), p);
        }
    }

    #[test]
    fn encoded_and_odd_segments_never_leak() {
        assert_eq!(
            route_label("/api/v2/workers/w%C3%B6rker%3A1"),
            "/api/v2/workers/{id}"
        );
        // A literal in the wrong case is still an identifier.
        assert_eq!(route_label("/api/v2/STORE"), "/api/v2/{id}");
        assert_eq!(route_label("/api/v2/store?keyword=secret"), "/api/v2/store");
        assert_eq!(route_label(""), "");
        assert_eq!(route_label("/"), "/");
    }
}
