//! The `route` label values of upstream metrics. A
//! [`V2Path`](crate::v2::V2Path) carries its own label, built with the path
//! ([`V2Path::route`](crate::v2::V2Path::route): every identifier is
//! `{id}`), so nothing parses a path back; this file lists the routes the
//! operations build, so their series exist at zero from the start.

/// The `route` of every V2 call the operations make, registered at zero at
/// start (`telemetry`). A route missing here is still counted once called;
/// a test checks each entry is what a [`V2Path`](crate::v2::V2Path) of that
/// shape reports.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v2::{Part, Segment, V2Path};

    /// The path a pattern describes, with `id` in every `{id}`.
    fn path_of(pattern: &'static str, id: &Segment) -> V2Path {
        let parts: Vec<Part<'_>> = pattern
            .trim_start_matches("/api/v2/")
            .split('/')
            .map(|s| {
                if s == "{id}" {
                    Part::Id(id)
                } else {
                    Part::Lit(s)
                }
            })
            .collect();
        V2Path::new(&parts)
    }

    #[test]
    fn registered_routes_are_the_labels_their_paths_carry() {
        let id = Segment::run("01KS2A1M515HG7PZX9STTB0KPH").unwrap();
        for route in V2_ROUTES {
            let path = path_of(route, &id);
            assert_eq!(path.route(), *route);
            assert_eq!(path.path(), route.replace("{id}", id.as_str()));
        }
    }

    #[test]
    fn identifiers_never_become_label_values() {
        // Ids that look like literals, or carry encoded text, are still ids.
        for raw in ["store", "log", "wörker:1", "LAST-ish"] {
            let id = Segment::new(raw).unwrap();
            let path = V2Path::new(&[
                Part::Lit("workers"),
                Part::Id(&id),
                Part::Lit("input-schema"),
            ])
            .query("keyword", "secret");
            assert_eq!(path.route(), "/api/v2/workers/{id}/input-schema");
        }
    }
}
