//! The sandbox's memory: accounts, workers, tasks and runs, and the run lifecycle.
//!
//! A run's status is not stored: it is derived from the simulated clock each time it
//! is read (`Run::view`), from the creation time, a deterministic duration and an
//! optional abort time. So no per-run timers exist, and advancing the clock moves every
//! run forward at once. Both API surfaces (V2 and the native V1) read this same state.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::catalog::WorkerSpec;
use super::config::SandboxConfig;
use super::data::{hash, row, Level, LogLine};

/// Run status. V1 numbers them 1-5, V2 names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ready,
    Running,
    Succeeded,
    Failed,
    Aborting,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ready => "ready",
            Status::Running => "running",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Aborting => "aborting",
        }
    }

    pub fn v1_code(self) -> i64 {
        match self {
            Status::Ready => 1,
            Status::Running => 2,
            Status::Succeeded => 3,
            Status::Failed => 4,
            Status::Aborting => 5,
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
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
    pub fn is_completed(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed)
    }
}

/// Where a run was started from (reported as `origin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    V1,
    V2,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::V1 => "api",
            Origin::V2 => "api_v2",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Account {
    pub balance: String,
    pub balance_expiration_at: i64,
    pub traffic: i64,
    pub traffic_expiration_at: i64,
}

/// The text of the failure of an aborted run.
pub const ABORTED_MESSAGE: &str = "run aborted";
/// Simulated time from accepted to running.
const START_DELAY_MS: i64 = 1_000;
/// Simulated time an abort spends in `aborting`.
const ABORT_DELAY_MS: i64 = 3_000;
/// Upper bound on rows of one run, whatever the input asks for.
const MAX_ROWS: u64 = 100_000;

#[derive(Debug, Clone)]
pub struct Run {
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
pub struct RunView {
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

    /// When the run completes (or completed), given what is known now.
    pub fn end_ms(&self) -> i64 {
        match self.abort_ms {
            Some(a) => a + ABORT_DELAY_MS,
            None => self.natural_end_ms(),
        }
    }

    pub fn status_at(&self, now_ms: i64) -> Status {
        self.view(now_ms).status
    }

    /// Status and figures at simulated time `now_ms`.
    pub fn view(&self, now_ms: i64) -> RunView {
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
    pub fn rows(
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
    pub fn logs(&self, now_ms: i64) -> Vec<LogLine> {
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

#[derive(Debug, Clone)]
pub struct Task {
    pub slug: String,
    pub account: String,
    pub worker: usize,
    pub title: String,
    pub description: String,
    /// `latest` or a concrete version; resolved when the task is run.
    pub version: String,
    pub input: Value,
    /// `schedule_*` fields as given.
    pub schedule: Map<String, Value>,
    pub created_at: i64,
    pub updated_at: i64,
    pub run_times: u64,
}

/// What a new run is made of.
pub struct NewRun {
    pub account: String,
    pub worker: usize,
    pub version: String,
    pub input: Value,
    pub origin: Origin,
    pub callback_url: Option<String>,
}

/// Why an abort was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum AbortError {
    NotFound,
    Completed,
}

pub struct State {
    pub workers: Vec<WorkerSpec>,
    accounts: HashMap<String, Account>,
    runs: Vec<Run>,
    run_index: HashMap<String, usize>,
    tasks: Vec<Task>,
    /// Indexes of runs with a `callback_url` whose completion is not reported yet,
    /// so the callback task does not scan every run.
    pending_callbacks: Vec<usize>,
    seed: u64,
}

impl State {
    pub fn new(cfg: &SandboxConfig) -> Self {
        let mut accounts = HashMap::new();
        let main = super::config::AccountConfig::with_key(&cfg.api_key);
        for a in std::iter::once(&main).chain(cfg.accounts.iter()) {
            accounts.insert(
                a.key.clone(),
                Account {
                    balance: a.balance.clone(),
                    balance_expiration_at: a.balance_expiration_at,
                    traffic: a.traffic,
                    traffic_expiration_at: a.traffic_expiration_at,
                },
            );
        }
        State {
            workers: cfg.effective_workers(),
            accounts,
            runs: Vec::new(),
            run_index: HashMap::new(),
            tasks: Vec::new(),
            pending_callbacks: Vec::new(),
            seed: cfg.seed,
        }
    }

    pub fn account(&self, key: &str) -> Option<&Account> {
        self.accounts.get(key)
    }

    /// V2 worker id: slug or `owner~name`.
    pub fn find_worker(&self, id: &str) -> Option<usize> {
        self.workers
            .iter()
            .position(|w| w.slug == id || w.path() == id)
    }

    /// V1 worker id: slug or `owner/name`.
    pub fn find_worker_v1(&self, id: &str) -> Option<usize> {
        self.workers
            .iter()
            .position(|w| w.slug == id || w.slash_path() == id)
    }

    pub fn worker(&self, i: usize) -> Option<&WorkerSpec> {
        self.workers.get(i)
    }

    /// `None`/`latest` → the latest version; a listed version → itself; else `None`.
    pub fn resolve_version(&self, worker: usize, asked: Option<&str>) -> Option<String> {
        let w = self.workers.get(worker)?;
        match asked {
            None | Some("latest") => Some(w.latest_version().to_string()),
            Some(v) if w.versions.iter().any(|x| x == v) => Some(v.to_string()),
            Some(_) => None,
        }
    }

    pub fn create_run(&mut self, new: NewRun, now_ms: i64) -> String {
        let Some(w) = self.workers.get(new.worker) else {
            return String::new();
        };
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
            &self.seed.to_le_bytes(),
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
        let run = Run {
            slug: slug.clone(),
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
        };
        if run.callback_url.is_some() {
            self.pending_callbacks.push(self.runs.len());
        }
        self.run_index.insert(slug.clone(), self.runs.len());
        self.runs.push(run);
        slug
    }

    /// A run of this account (another account's run is invisible).
    pub fn run(&self, account: &str, slug: &str) -> Option<&Run> {
        let r = self.runs.get(*self.run_index.get(slug)?)?;
        (r.account == account).then_some(r)
    }

    /// Copies of a run and its worker, so rows can be generated without the lock.
    pub fn snapshot(&self, account: &str, slug: &str) -> Option<(Run, WorkerSpec)> {
        let r = self.run(account, slug)?;
        Some((r.clone(), self.workers.get(r.worker)?.clone()))
    }

    /// A run whatever its account (for the unauthenticated full-log file).
    pub fn run_any(&self, slug: &str) -> Option<&Run> {
        self.runs.get(*self.run_index.get(slug)?)
    }

    /// Runs of an account, newest first, optionally of one worker.
    pub fn runs_of<'a>(
        &'a self,
        account: &'a str,
        worker: Option<usize>,
    ) -> impl Iterator<Item = &'a Run> + 'a {
        self.runs
            .iter()
            .rev()
            .filter(move |r| r.account == account && worker.map_or(true, |w| r.worker == w))
    }

    /// Call `f` on every run still waiting for callbacks; `f` returns whether the
    /// run still waits (false once its completion has been reported).
    pub fn for_pending_callbacks(&mut self, mut f: impl FnMut(&mut Run) -> bool) {
        let runs = &mut self.runs;
        self.pending_callbacks
            .retain(|i| runs.get_mut(*i).is_some_and(&mut f));
    }

    pub fn abort(&mut self, account: &str, slug: &str, now_ms: i64) -> Result<(), AbortError> {
        let i = *self.run_index.get(slug).ok_or(AbortError::NotFound)?;
        let r = self.runs.get_mut(i).ok_or(AbortError::NotFound)?;
        if r.account != account {
            return Err(AbortError::NotFound);
        }
        match r.status_at(now_ms) {
            Status::Succeeded | Status::Failed => Err(AbortError::Completed),
            Status::Aborting => Ok(()),
            Status::Ready | Status::Running => {
                r.abort_ms = Some(now_ms);
                Ok(())
            }
        }
    }

    pub fn add_task(&mut self, task: Task) {
        self.tasks.push(task);
    }

    pub fn task(&self, account: &str, slug: &str) -> Option<&Task> {
        self.tasks
            .iter()
            .find(|t| t.slug == slug && t.account == account)
    }

    pub fn task_mut(&mut self, account: &str, slug: &str) -> Option<&mut Task> {
        self.tasks
            .iter_mut()
            .find(|t| t.slug == slug && t.account == account)
    }

    pub fn delete_task(&mut self, account: &str, slug: &str) -> bool {
        let before = self.tasks.len();
        self.tasks
            .retain(|t| !(t.slug == slug && t.account == account));
        before != self.tasks.len()
    }

    /// Tasks of an account, newest first.
    pub fn tasks_of<'a>(&'a self, account: &'a str) -> impl Iterator<Item = &'a Task> + 'a {
        self.tasks
            .iter()
            .rev()
            .filter(move |t| t.account == account)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state() -> State {
        State::new(&SandboxConfig::default())
    }

    fn new_run(st: &State, worker: &str, input: Value) -> NewRun {
        let w = st.find_worker(worker).unwrap();
        NewRun {
            account: "sandbox-key".into(),
            worker: w,
            version: st.resolve_version(w, None).unwrap(),
            input,
            origin: Origin::V2,
            callback_url: None,
        }
    }

    #[test]
    fn lifecycle_ready_running_succeeded() {
        let mut st = state();
        let nr = new_run(
            &st,
            "coreclaw~google-maps-scraper",
            json!({"parameters":{"custom":{"max_results": 30}}}),
        );
        let slug = st.create_run(nr, 1_000_000);
        let r = st.run("sandbox-key", &slug).unwrap();
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
        assert!(st.run("other", &slug).is_none());
    }

    #[test]
    fn failing_worker_fails() {
        let mut st = state();
        let nr = new_run(&st, "coreclaw~broken-news-scraper", json!({}));
        let slug = st.create_run(nr, 0);
        let v = st.run("sandbox-key", &slug).unwrap().view(1_000_000);
        assert_eq!(v.status, Status::Failed);
        assert!(!v.err_msg.unwrap().is_empty());
    }

    #[test]
    fn abort_goes_through_aborting() {
        let mut st = state();
        let nr = new_run(&st, "coreclaw~slow-site-crawler", json!({}));
        let slug = st.create_run(nr, 0);
        assert_eq!(st.abort("sandbox-key", &slug, 10_000), Ok(()));
        let r = st.run("sandbox-key", &slug).unwrap();
        assert_eq!(r.view(11_000).status, Status::Aborting);
        let v = r.view(13_000);
        assert_eq!(v.status, Status::Failed);
        assert_eq!(v.err_msg.as_deref(), Some(ABORTED_MESSAGE));
        assert_eq!(
            st.abort("sandbox-key", &slug, 14_000),
            Err(AbortError::Completed)
        );
        assert_eq!(st.abort("nobody", &slug, 14_000), Err(AbortError::NotFound));
    }

    #[test]
    fn same_input_same_rows() {
        let mut st = state();
        let a = st.create_run(
            new_run(
                &st,
                "coreclaw~google-maps-scraper",
                json!({"parameters":{"custom":{"a":1,"b":2}}}),
            ),
            0,
        );
        let b = st.create_run(
            new_run(
                &st,
                "coreclaw~google-maps-scraper",
                json!({"parameters":{"custom":{"b":2,"a":1}}}),
            ),
            0,
        );
        let (ra, rb) = (
            st.run("sandbox-key", &a).unwrap(),
            st.run("sandbox-key", &b).unwrap(),
        );
        assert_eq!(ra.data_seed, rb.data_seed);
        let w = st.worker(ra.worker).unwrap();
        assert_eq!(ra.rows(w, 10_000_000, 0, 5), rb.rows(w, 10_000_000, 0, 5));
    }

    #[test]
    fn versions_resolve() {
        let st = state();
        let w = st.find_worker("01KBHMS6A8H6A3K5FJY11MQ99Z").unwrap();
        assert_eq!(
            st.resolve_version(w, Some("latest")).as_deref(),
            Some("v1.2.6")
        );
        assert_eq!(
            st.resolve_version(w, Some("v1.0.0")).as_deref(),
            Some("v1.0.0")
        );
        assert_eq!(st.resolve_version(w, Some("v9.9.9")), None);
        assert_eq!(st.find_worker_v1("coreclaw/google-maps-scraper"), Some(w));
        assert_eq!(st.find_worker("coreclaw/google-maps-scraper"), None);
    }
}
