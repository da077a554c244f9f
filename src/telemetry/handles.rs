//! Metric handles of the request path, resolved once. `metrics::counter!`
//! with labels builds a key (a label vector on the heap), hashes it and looks
//! it up in the recorder's registry under a lock, every time; the series every
//! request touches are looked up here once instead: per operation the
//! answered-200 count, the duration and the V2 calls per request
//! ([`RequestMetrics`], held by the pipeline), and per V2 route the 2xx count
//! and the attempt duration ([`UpstreamMetrics`], held by the V2 client).
//! Rarer series (errors, other statuses, retries) keep the macros.
//!
//! Both are resolved at their first use rather than when their owner is
//! built, so they bind to the recorder that is current when requests are
//! served: the process-wide one, installed before serving starts, or a
//! test's thread-local one.

use metrics::{Counter, Gauge, Histogram};

use crate::differences::AppliedSet;

use super::{
    IN_FLIGHT, REQUESTS, REQUEST_DURATION, UPSTREAM_CALLS_PER_REQUEST, UPSTREAM_DURATION_SECONDS,
    UPSTREAM_REACHABLE, UPSTREAM_REQUESTS_TOTAL,
};
use crate::v1::route::Operation;
use crate::v2::routes::V2_ROUTES;

/// The series of one operation that every answered request touches.
pub struct OperationMetrics {
    /// `v1compat_requests_total{operation, status="200"}`.
    pub answered_ok: Counter,
    pub duration: Histogram,
    pub upstream_calls: Histogram,
}

/// The pipeline's handles.
pub struct RequestMetrics {
    operations: Vec<OperationMetrics>,
    pub in_flight: Gauge,
    /// `v1compat_differences_applied_total`, one per registry entry, in
    /// registry order (an [`AppliedSet`]'s bits).
    differences: Vec<Counter>,
}

impl RequestMetrics {
    pub fn resolve() -> RequestMetrics {
        let operations = Operation::ALL
            .iter()
            .map(|op| {
                let name = op.name();
                OperationMetrics {
                    answered_ok: metrics::counter!(REQUESTS, "operation" => name, "status" => "200"),
                    duration: metrics::histogram!(REQUEST_DURATION, "operation" => name),
                    upstream_calls: metrics::histogram!(UPSTREAM_CALLS_PER_REQUEST, "operation" => name),
                }
            })
            .collect();
        RequestMetrics {
            operations,
            in_flight: metrics::gauge!(IN_FLIGHT),
            differences: crate::differences::ALL
                .iter()
                .map(|d| metrics::counter!(super::DIFFERENCES_APPLIED, "difference" => d.id))
                .collect(),
        }
    }

    /// Counts the differences one answer relied on.
    pub fn applied(&self, set: AppliedSet) {
        for (i, _) in set.iter() {
            if let Some(c) = self.differences.get(i) {
                c.increment(1);
            }
        }
    }

    pub fn operation(&self, op: Operation) -> &OperationMetrics {
        // `operations` follows `Operation::ALL`, which lists the variants in
        // declaration order (tested below), so the discriminant is the index.
        &self.operations[op as usize]
    }
}

/// The series of one V2 route that every successful attempt touches.
pub struct RouteMetrics {
    /// `v1compat_upstream_requests_total{route, status_class="2xx"}`.
    pub answered_2xx: Counter,
    pub duration: Histogram,
}

/// The V2 client's handles, for the routes of [`V2_ROUTES`].
pub struct UpstreamMetrics {
    routes: Vec<(&'static str, RouteMetrics)>,
    /// `v1compat_upstream_reachable`: every attempt's outcome says it.
    pub reachable: Gauge,
}

impl UpstreamMetrics {
    pub fn resolve() -> UpstreamMetrics {
        let routes = V2_ROUTES
            .iter()
            .map(|route| {
                let metrics = RouteMetrics {
                    answered_2xx: metrics::counter!(UPSTREAM_REQUESTS_TOTAL, "route" => *route, "status_class" => "2xx"),
                    duration: metrics::histogram!(UPSTREAM_DURATION_SECONDS, "route" => *route),
                };
                (*route, metrics)
            })
            .collect();
        UpstreamMetrics {
            routes,
            reachable: metrics::gauge!(UPSTREAM_REACHABLE),
        }
    }

    /// `None` for a route not in [`V2_ROUTES`] (its series are looked up by
    /// label instead).
    pub fn route(&self, route: &str) -> Option<&RouteMetrics> {
        self.routes
            .iter()
            .find(|(r, _)| *r == route)
            .map(|(_, metrics)| metrics)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    #[test]
    fn operations_are_indexed_by_their_discriminant() {
        for (i, op) in Operation::ALL.iter().enumerate() {
            assert_eq!(*op as usize, i, "{op:?} out of order in Operation::ALL");
        }
        let recorder = DebuggingRecorder::new();
        metrics::with_local_recorder(&recorder, || {
            let requests = RequestMetrics::resolve();
            assert_eq!(requests.operations.len(), Operation::ALL.len());
        });
    }

    #[test]
    fn handles_count_in_the_series_the_macros_name() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let requests = RequestMetrics::resolve();
            requests
                .operation(Operation::RunDetail)
                .answered_ok
                .increment(2);
            requests.in_flight.increment(1.0);
            let upstream = UpstreamMetrics::resolve();
            let route = upstream.route("/api/v2/worker-runs/{id}").unwrap();
            route.answered_2xx.increment(1);
            assert!(upstream.route("/api/v2/elsewhere").is_none());
        });
        let found = |name: &str, labels: &[(&str, &str)]| {
            snapshotter
                .snapshot()
                .into_vec()
                .into_iter()
                .find(|(key, ..)| {
                    let key = key.key();
                    key.name() == name
                        && key.labels().count() == labels.len()
                        && labels
                            .iter()
                            .all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v))
                })
                .map(|(.., value)| value)
        };
        assert_eq!(
            found(REQUESTS, &[("operation", "run_detail"), ("status", "200")]),
            Some(DebugValue::Counter(2))
        );
        assert_eq!(
            found(
                UPSTREAM_REQUESTS_TOTAL,
                &[
                    ("route", "/api/v2/worker-runs/{id}"),
                    ("status_class", "2xx")
                ]
            ),
            Some(DebugValue::Counter(1))
        );
        assert!(found(IN_FLIGHT, &[]).is_some());
    }
}
