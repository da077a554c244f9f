//! The one table of every V1 endpoint: method + path → [`Operation`].
//! Anything else is answered with a V1 404 envelope by the caller.

use http::Method;

/// The V2 calls that replace a V1 operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V2Replacement {
    /// `METHOD /api/v2/…`, as the spec writes them.
    pub calls: &'static [&'static str],
    /// What else changes, or `""`.
    pub note: &'static str,
}

/// The 13 V1 operations. The name doubles as the bounded `operation` label of
/// metrics and logs, so raw paths never become label values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    StoreSearch,
    WorkerDetail,
    ProxyRegions,
    StartRun,
    StartTaskRun,
    Rerun,
    RunDetail,
    RunList,
    ResultList,
    ResultExport,
    RunLog,
    AbortRun,
    AccountInfo,
}

impl Operation {
    pub const ALL: [Operation; 13] = [
        Operation::StoreSearch,
        Operation::WorkerDetail,
        Operation::ProxyRegions,
        Operation::StartRun,
        Operation::StartTaskRun,
        Operation::Rerun,
        Operation::RunDetail,
        Operation::RunList,
        Operation::ResultList,
        Operation::ResultExport,
        Operation::RunLog,
        Operation::AbortRun,
        Operation::AccountInfo,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Operation::StoreSearch => "store_search",
            Operation::WorkerDetail => "worker_detail",
            Operation::ProxyRegions => "proxy_regions",
            Operation::StartRun => "start_run",
            Operation::StartTaskRun => "start_task_run",
            Operation::Rerun => "rerun",
            Operation::RunDetail => "run_detail",
            Operation::RunList => "run_list",
            Operation::ResultList => "result_list",
            Operation::ResultExport => "result_export",
            Operation::RunLog => "run_log",
            Operation::AbortRun => "abort_run",
            Operation::AccountInfo => "account_info",
        }
    }

    /// The V1 method and path of the operation.
    pub fn v1_endpoint(self) -> (Method, &'static str) {
        match self {
            Operation::StoreSearch => (Method::GET, "/api/store"),
            Operation::WorkerDetail => (Method::GET, "/api/scraper"),
            Operation::ProxyRegions => (Method::GET, "/api/proxy/region"),
            Operation::StartRun => (Method::POST, "/api/v1/scraper/run"),
            Operation::StartTaskRun => (Method::POST, "/api/v1/task/run"),
            Operation::Rerun => (Method::POST, "/api/v1/rerun"),
            Operation::RunDetail => (Method::POST, "/api/v1/run/detail"),
            Operation::RunList => (Method::POST, "/api/v1/run/list"),
            Operation::ResultList => (Method::POST, "/api/v1/run/result/list"),
            Operation::ResultExport => (Method::POST, "/api/v1/run/result/export"),
            Operation::RunLog => (Method::POST, "/api/v1/run/last/log"),
            Operation::AbortRun => (Method::POST, "/api/v1/scraper/abort"),
            Operation::AccountInfo => (Method::POST, "/api/v1/account/info"),
        }
    }

    /// The V2 operation that replaces this one (the spec's mapping): what a
    /// client calls to leave V1, as `METHOD /api/v2/…` with V2's path
    /// parameters, and what else changes, if anything.
    pub fn v2_replacement(self) -> V2Replacement {
        let (calls, note): (&'static [&'static str], &'static str) = match self {
            Operation::StoreSearch => (
                &["GET /api/v2/store"],
                "`search` becomes `keyword`; send your key",
            ),
            Operation::WorkerDetail => (
                &[
                    "GET /api/v2/workers/{workerId}",
                    "GET /api/v2/workers/{workerId}/input-schema",
                ],
                "`owner/name` is written `owner~name`",
            ),
            Operation::ProxyRegions => (&["GET /api/v2/proxy/region"], ""),
            Operation::StartRun => (
                &["POST /api/v2/workers/{workerId}/runs"],
                "leave out `system` limits of 0",
            ),
            Operation::StartTaskRun => (&["POST /api/v2/worker-tasks/{workerTaskId}/runs"], ""),
            Operation::Rerun => (&["POST /api/v2/worker-runs/{runId}/rerun"], ""),
            Operation::RunDetail => (&["GET /api/v2/worker-runs/{runId}"], "`status` is a string"),
            Operation::RunList => (
                &["GET /api/v2/worker-runs"],
                "`scraper_slug` becomes `worker_id`; pages by `offset` and `limit`",
            ),
            Operation::ResultList => (
                &["GET /api/v2/worker-runs/{runId}/result"],
                "pages by `offset` and `limit`",
            ),
            Operation::ResultExport => (&["GET /api/v2/worker-runs/{runId}/result/export"], ""),
            Operation::RunLog => (&["GET /api/v2/worker-runs/{runId}/log"], ""),
            Operation::AbortRun => (&["POST /api/v2/worker-runs/{runId}/abort"], ""),
            Operation::AccountInfo => (&["GET /api/v2/users/account"], "no `traffic`"),
        };
        V2Replacement { calls, note }
    }

    /// V1 operations that needed no key. For these the gateway may fall back
    /// to its configured service key; for all others it never does.
    pub fn is_public(self) -> bool {
        matches!(
            self,
            Operation::StoreSearch | Operation::WorkerDetail | Operation::ProxyRegions
        )
    }

    /// Operations that read only, and so may be mirrored by the shadow tester.
    pub fn is_read_only(self) -> bool {
        !matches!(
            self,
            Operation::StartRun | Operation::StartTaskRun | Operation::Rerun | Operation::AbortRun
        )
    }
}

/// Finds the operation for a V1 request: its method and path exactly, as
/// the V1 service's router matched them. A trailing slash or a `HEAD` is
/// another route there (V1 answered 404 4040), and so here: a client that
/// worked against V1 never sent one.
pub fn route(method: &Method, path: &str) -> Option<Operation> {
    Operation::ALL.into_iter().find(|op| {
        let (m, p) = op.v1_endpoint();
        m == method && p == path
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_routes_to_itself() {
        for op in Operation::ALL {
            let (m, p) = op.v1_endpoint();
            assert_eq!(route(&m, p), Some(op));
            // Another route on V1: not found there.
            assert_eq!(route(&m, &format!("{p}/")), None);
            assert_eq!(route(&Method::HEAD, p), None);
        }
    }

    #[test]
    fn wrong_method_or_unknown_path_is_none() {
        assert_eq!(route(&Method::GET, "/api/v1/run/detail"), None);
        assert_eq!(route(&Method::POST, "/api/store"), None);
        assert_eq!(route(&Method::GET, "/api/v2/store"), None);
        assert_eq!(route(&Method::POST, "/api/v1/run/detail/x"), None);
        assert_eq!(route(&Method::GET, "/"), None);
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = Operation::ALL.iter().map(|o| o.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 13);
    }
}
