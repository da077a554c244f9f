//! A sandbox run's lifecycle: how a new run is derived from its input, and
//! what it shows at any simulated instant.
//!
//! A run's status is not stored: it is derived from the simulated clock each time it
//! is read (`Run::view`), from the creation time, a deterministic duration and an
//! optional abort time. So no per-run timers exist, and advancing the clock moves every
//! run forward at once. Where runs are kept and found is the store (`state`).

use serde_json::{Map, Value};

use super::catalog::WorkerSpec;
use super::data::{hash, row, Level, LogLine};

/// Run status. V1 numbers them 1-5, V2 names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Ready,
    Running,
    Succeeded,
    Failed,
    Aborting,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Ready => "ready",
            Status::Running => "running",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Aborting => "aborting",
        }
    }

    pub(crate) fn v1_code(self) -> i64 {
        match self {
            Status::Ready => 1,
            Status::Running => 2,
            Status::Succeeded => 3,
            Status::Failed => 4,
            Status::Aborting => 5,
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "ready" => Status::Ready,
            "running" => Status::Running,
            "succeeded" => Status::Succeeded,
            "failed" => Status::Failed,
            "aborting" => Status::Aborting,
            _ => return None,
        })
    }

    /// Only succeeded and failed are completed states.
    pub(crate) fn is_completed(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed)
    }
}

/// Where a run was started from (reported as `origin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    V1,
    V2,
}

impl Origin {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Origin::V1 => "api",
            Origin::V2 => "api_v2",
        }
    }
}

/// The text of the failure of an aborted run.
pub(crate) const ABORTED_MESSAGE: &str = "run aborted";
/// Simulated time from accepted to running.
const START_DELAY_MS: i64 = 1_000;
/// Simulated time an abort spends in `aborting`.
const ABORT_DELAY_MS: i64 = 3_000;
/// Upper bound on rows of one run, whatever the input asks for.
const MAX_ROWS: u64 = 100_000;

#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub slug: String,
    pub account: String,
    pub worker: usize,
    pub version: String,
    pub input: Value,
    pub origin: Origin,
    pub created_ms: i64,
    pub duration_ms: i64,
    pub total_rows: u64,
    pub fail_message: Option<String>,
    pub abort_ms: Option<i64>,
    pub callback_url: Option<String>,
    pub data_seed: u64,
    pub group: String,
    /// Last status a callback was sent for (callbacks fire on changes).
    pub notified: Status,
}

/// A run as seen at one instant.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunView {
    pub status: Status,
    pub started_at: i64,
    pub finished_at: i64,
    pub duration: i64,
    pub results: u64,
    pub usage: String,
    pub traffic: i64,
    pub err_msg: Option<String>,
}

impl Run {
    /// A new run of worker `w`: its row count, duration, data seed and log
    /// group are derived from the sandbox seed and the run's input, so the
    /// same input gives the same rows.
    pub(crate) fn new(new: NewRun, w: &WorkerSpec, seed: u64, now_ms: i64) -> Run {
        let custom = new
            .input
            .pointer("/parameters/custom")
            .cloned()
            .unwrap_or(Value::Object(Map::new()));
        let rows = w
            .rows_param
            .as_deref()
            .and_then(|p| custom.get(p).or_else(|| w.property_default(p)))
            .and_then(Value::as_u64)
            .unwrap_or(w.default_rows)
            .min(MAX_ROWS);
        let data_seed = hash(&[
            &seed.to_le_bytes(),
            w.slug.as_bytes(),
            super::data::canonical(&custom).as_bytes(),
        ]);
        let span = w
            .max_duration_seconds
            .saturating_sub(w.min_duration_seconds)
            + 1;
        let dur_s = w.min_duration_seconds + hash(&[&data_seed.to_le_bytes(), b"duration"]) % span;
        let group = (10_000_000_000_000_000u64
            + hash(&[&data_seed.to_le_bytes(), b"group"]) % 80_000_000_000_000_000)
            .to_string();
        let rand_part: u128 = rand::random();
        let slug = ulid::Ulid::from_parts(now_ms.max(0) as u64, rand_part).to_string();
        Run {
            slug,
            account: new.account,
            worker: new.worker,
            version: new.version,
            input: new.input,
            origin: new.origin,
            created_ms: now_ms,
            duration_ms: dur_s as i64 * 1000,
            total_rows: rows,
            fail_message: w.fail_message.clone(),
            abort_ms: None,
            callback_url: new.callback_url,
            data_seed,
            group,
            notified: Status::Ready,
        }
    }

    fn start_ms(&self) -> i64 {
        self.created_ms + START_DELAY_MS
    }

    fn natural_end_ms(&self) -> i64 {
        self.start_ms() + self.duration_ms
    }

    /// Rows the run finishes with if it is not aborted.
    fn final_rows(&self) -> u64 {
        if self.fail_message.is_some() {
            self.total_rows / 2
        } else {
            self.total_rows
        }
    }

    fn rows_at(&self, t: i64) -> u64 {
        let ran = (t - self.start_ms()).clamp(0, self.duration_ms.max(1));
        let rows = self.final_rows() as u128 * ran as u128 / self.duration_ms.max(1) as u128;
        rows as u64
    }

    /// Asks the run to stop at `now_ms`: it shows `aborting`, then `failed`.
    /// A completed run refuses; a run already aborting accepts again.
    pub(crate) fn abort(&mut self, now_ms: i64) -> Result<(), AbortError> {
        match self.status_at(now_ms) {
            Status::Succeeded | Status::Failed => Err(AbortError::Completed),
            Status::Aborting => Ok(()),
            Status::Ready | Status::Running => {
                self.abort_ms = Some(now_ms);
                Ok(())
            }
        }
    }

    /// When the run completes (or completed), given what is known now.
    pub(crate) fn end_ms(&self) -> i64 {
        match self.abort_ms {
            Some(a) => a + ABORT_DELAY_MS,
            None => self.natural_end_ms(),
        }
    }

    pub(crate) fn status_at(&self, now_ms: i64) -> Status {
        self.view(now_ms).status
    }

    /// Status and figures at simulated time `now_ms`.
    pub(crate) fn view(&self, now_ms: i64) -> RunView {
        let started_at = self.created_ms / 1000;
        let (status, rows, end, err) = match self.abort_ms {
            Some(a) if now_ms >= a + ABORT_DELAY_MS => (
                Status::Failed,
                self.rows_at(a),
                Some(a + ABORT_DELAY_MS),
                Some(ABORTED_MESSAGE.to_string()),
            ),
            Some(a) if now_ms >= a => (Status::Aborting, self.rows_at(a), None, None),
            _ if now_ms < self.start_ms() => (Status::Ready, 0, None, None),
            _ if now_ms < self.natural_end_ms() => {
                (Status::Running, self.rows_at(now_ms), None, None)
            }
            _ => match &self.fail_message {
                Some(m) => (
                    Status::Failed,
                    self.final_rows(),
                    Some(self.natural_end_ms()),
                    Some(m.clone()),
                ),
                None => (
                    Status::Succeeded,
                    self.final_rows(),
                    Some(self.natural_end_ms()),
                    None,
                ),
            },
        };
        let finished_at = end.map(|e| e / 1000).unwrap_or(0);
        let duration = if finished_at > 0 {
            (finished_at - started_at).max(0)
        } else {
            0
        };
        let ran_secs = ((end.unwrap_or(now_ms) - self.start_ms()).max(0)) / 1000;
        RunView {
            status,
            started_at,
            finished_at,
            duration,
            results: rows,
            usage: format!("{:.4}", ran_secs as f64 * 0.0002 + rows as f64 * 0.00005),
            traffic: rows as i64 * 2048 + ran_secs * 512,
            err_msg: err,
        }
    }

    /// Rows `[from, to)` clipped to what the run has produced at `now_ms`.
    pub(crate) fn rows(
        &self,
        worker: &WorkerSpec,
        now_ms: i64,
        from: u64,
        to: u64,
    ) -> Vec<Map<String, Value>> {
        let have = self.view(now_ms).results;
        (from.min(have)..to.min(have))
            .map(|i| row(worker, self.data_seed, i))
            .collect()
    }

    /// The run's log so far.
    pub(crate) fn logs(&self, now_ms: i64) -> Vec<LogLine> {
        let v = self.view(now_ms);
        let g = &self.group;
        let mut out = Vec::new();
        let mut push = |level, ts: i64, content: String| {
            out.push(LogLine {
                level,
                group: g.clone(),
                content,
                timestamp_ms: ts,
            })
        };
        let sub = format!("SYSTEM: Subtask-[{g}]");
        push(
            Level::Info,
            self.created_ms + 351,
            format!("{sub} - Preparing the execution environment."),
        );
        push(
            Level::Debug,
            self.created_ms + 402,
            format!("{sub} - Worker version {}.", self.version),
        );
        if v.status == Status::Ready {
            return out;
        }
        push(Level::Info, self.start_ms(), format!("{sub} - Running..."));
        if let Some(a) = self.abort_ms.filter(|a| now_ms >= *a) {
            push(
                Level::Warn,
                a,
                format!("{sub} - Abort requested, stopping."),
            );
        }
        if !v.status.is_completed() {
            return out;
        }
        let end = v.finished_at * 1000 + 5;
        match v.status {
            Status::Succeeded => {
                push(Level::Info, end, format!("{sub} - Execution completed."));
                push(
                    Level::Info,
                    end + 1,
                    "SYSTEM: All subtasks have completed execution! Total 1 subtasks: 1 succeeded, 0 failed."
                        .to_string(),
                );
            }
            _ => {
                let msg = v.err_msg.unwrap_or_default();
                push(Level::Error, end, format!("{sub} - {msg}"));
                push(
                    Level::Info,
                    end + 1,
                    "SYSTEM: All subtasks have completed execution! Total 1 subtasks: 0 succeeded, 1 failed."
                        .to_string(),
                );
            }
        }
        out
    }
}

/// What a new run is made of.
pub(crate) struct NewRun {
    pub account: String,
    pub worker: usize,
    pub version: String,
    pub input: Value,
    pub origin: Origin,
    pub callback_url: Option<String>,
}

/// Why an abort was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AbortError {
    NotFound,
    Completed,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed_workers;
    use serde_json::json;

    fn new_run(worker: &str, input: Value, now_ms: i64) -> Run {
        let workers = seed_workers();
        let w = workers.iter().position(|w| w.path() == worker).unwrap();
        let new = NewRun {
            account: "sandbox-key".into(),
            worker: w,
            version: workers[w].latest_version().to_string(),
            input,
            origin: Origin::V2,
            callback_url: None,
        };
        Run::new(new, &workers[w], 0, now_ms)
    }

    #[test]
    fn lifecycle_ready_running_succeeded() {
        let r = new_run(
            "coreclaw~google-maps-scraper",
            json!({"parameters":{"custom":{"max_results": 30}}}),
            1_000_000,
        );
        assert_eq!(r.total_rows, 30);
        assert_eq!(r.view(1_000_500).status, Status::Ready);
        let mid = r.view(1_002_000);
        assert_eq!(mid.status, Status::Running);
        assert_eq!(mid.finished_at, 0);
        let done = r.view(2_000_000);
        assert_eq!(done.status, Status::Succeeded);
        assert_eq!(done.results, 30);
        assert!(done.err_msg.is_none());
        assert!(done.finished_at > 0 && done.duration >= 5);
    }

    #[test]
    fn failing_worker_fails() {
        let r = new_run("coreclaw~broken-news-scraper", json!({}), 0);
        let v = r.view(1_000_000);
        assert_eq!(v.status, Status::Failed);
        assert!(!v.err_msg.unwrap().is_empty());
    }

    #[test]
    fn abort_goes_through_aborting() {
        let mut r = new_run("coreclaw~slow-site-crawler", json!({}), 0);
        assert_eq!(r.abort(10_000), Ok(()));
        assert_eq!(r.view(11_000).status, Status::Aborting);
        let v = r.view(13_000);
        assert_eq!(v.status, Status::Failed);
        assert_eq!(v.err_msg.as_deref(), Some(ABORTED_MESSAGE));
        assert_eq!(r.abort(14_000), Err(AbortError::Completed));
    }

    #[test]
    fn same_input_same_rows() {
        let a = new_run(
            "coreclaw~google-maps-scraper",
            json!({"parameters":{"custom":{"a":1,"b":2}}}),
            0,
        );
        let b = new_run(
            "coreclaw~google-maps-scraper",
            json!({"parameters":{"custom":{"b":2,"a":1}}}),
            0,
        );
        assert_eq!(a.data_seed, b.data_seed);
        let w = &seed_workers()[a.worker];
        assert_eq!(a.rows(w, 10_000_000, 0, 5), b.rows(w, 10_000_000, 0, 5));
    }
}
