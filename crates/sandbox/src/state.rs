//! The sandbox's memory: accounts, workers, tasks and runs, found by key and
//! account. Both API surfaces (V2 and the native V1) read this same state;
//! what a run shows over time is its lifecycle (`lifecycle`).

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::catalog::WorkerSpec;
use super::config::SandboxConfig;
use super::lifecycle::{AbortError, NewRun, Run};

#[derive(Debug, Clone)]
pub(crate) struct Account {
    pub balance: String,
    pub balance_expiration_at: i64,
    pub traffic: i64,
    pub traffic_expiration_at: i64,
}

#[derive(Debug, Clone)]
pub(crate) struct Task {
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

pub(crate) struct State {
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
    pub(crate) fn new(cfg: &SandboxConfig) -> Self {
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

    pub(crate) fn account(&self, key: &str) -> Option<&Account> {
        self.accounts.get(key)
    }

    /// V2 worker id: slug or `owner~name`.
    pub(crate) fn find_worker(&self, id: &str) -> Option<usize> {
        self.workers
            .iter()
            .position(|w| w.slug == id || w.path() == id)
    }

    /// V1 worker id: slug or `owner/name`.
    pub(crate) fn find_worker_v1(&self, id: &str) -> Option<usize> {
        self.workers
            .iter()
            .position(|w| w.slug == id || w.slash_path() == id)
    }

    pub(crate) fn worker(&self, i: usize) -> Option<&WorkerSpec> {
        self.workers.get(i)
    }

    /// `None`/`latest` → the latest version; a listed version → itself; else `None`.
    pub(crate) fn resolve_version(&self, worker: usize, asked: Option<&str>) -> Option<String> {
        let w = self.workers.get(worker)?;
        match asked {
            None | Some("latest") => Some(w.latest_version().to_string()),
            Some(v) if w.versions.iter().any(|x| x == v) => Some(v.to_string()),
            Some(_) => None,
        }
    }

    pub(crate) fn create_run(&mut self, new: NewRun, now_ms: i64) -> String {
        let Some(w) = self.workers.get(new.worker) else {
            return String::new();
        };
        let run = Run::new(new, w, self.seed, now_ms);
        let slug = run.slug.clone();
        if run.callback_url.is_some() {
            self.pending_callbacks.push(self.runs.len());
        }
        self.run_index.insert(slug.clone(), self.runs.len());
        self.runs.push(run);
        slug
    }

    /// A run of this account (another account's run is invisible).
    pub(crate) fn run(&self, account: &str, slug: &str) -> Option<&Run> {
        let r = self.runs.get(*self.run_index.get(slug)?)?;
        (r.account == account).then_some(r)
    }

    /// Copies of a run and its worker, so rows can be generated without the lock.
    pub(crate) fn snapshot(&self, account: &str, slug: &str) -> Option<(Run, WorkerSpec)> {
        let r = self.run(account, slug)?;
        Some((r.clone(), self.workers.get(r.worker)?.clone()))
    }

    /// A run whatever its account (for the unauthenticated full-log file).
    pub(crate) fn run_any(&self, slug: &str) -> Option<&Run> {
        self.runs.get(*self.run_index.get(slug)?)
    }

    /// Runs of an account, newest first, optionally of one worker.
    pub(crate) fn runs_of<'a>(
        &'a self,
        account: &'a str,
        worker: Option<usize>,
    ) -> impl Iterator<Item = &'a Run> + 'a {
        self.runs
            .iter()
            .rev()
            .filter(move |r| r.account == account && worker.is_none_or(|w| r.worker == w))
    }

    /// Call `f` on every run still waiting for callbacks; `f` returns whether the
    /// run still waits (false once its completion has been reported).
    pub(crate) fn for_pending_callbacks(&mut self, mut f: impl FnMut(&mut Run) -> bool) {
        let runs = &mut self.runs;
        self.pending_callbacks
            .retain(|i| runs.get_mut(*i).is_some_and(&mut f));
    }

    pub(crate) fn abort(
        &mut self,
        account: &str,
        slug: &str,
        now_ms: i64,
    ) -> Result<(), AbortError> {
        let i = *self.run_index.get(slug).ok_or(AbortError::NotFound)?;
        let r = self.runs.get_mut(i).ok_or(AbortError::NotFound)?;
        if r.account != account {
            return Err(AbortError::NotFound);
        }
        r.abort(now_ms)
    }

    pub(crate) fn add_task(&mut self, task: Task) {
        self.tasks.push(task);
    }

    pub(crate) fn task(&self, account: &str, slug: &str) -> Option<&Task> {
        self.tasks
            .iter()
            .find(|t| t.slug == slug && t.account == account)
    }

    pub(crate) fn task_mut(&mut self, account: &str, slug: &str) -> Option<&mut Task> {
        self.tasks
            .iter_mut()
            .find(|t| t.slug == slug && t.account == account)
    }

    pub(crate) fn delete_task(&mut self, account: &str, slug: &str) -> bool {
        let before = self.tasks.len();
        self.tasks
            .retain(|t| !(t.slug == slug && t.account == account));
        before != self.tasks.len()
    }

    /// Tasks of an account, newest first.
    pub(crate) fn tasks_of<'a>(&'a self, account: &'a str) -> impl Iterator<Item = &'a Task> + 'a {
        self.tasks
            .iter()
            .rev()
            .filter(move |t| t.account == account)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::{Origin, Status};
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
    fn a_run_is_its_accounts_only() {
        let mut st = state();
        let nr = new_run(
            &st,
            "coreclaw~google-maps-scraper",
            json!({"parameters":{"custom":{"max_results": 30}}}),
        );
        let slug = st.create_run(nr, 1_000_000);
        let r = st.run("sandbox-key", &slug).unwrap();
        assert_eq!(r.total_rows, 30);
        assert!(st.run("other", &slug).is_none());
    }

    #[test]
    fn abort_finds_the_run_of_its_account() {
        let mut st = state();
        let nr = new_run(&st, "coreclaw~slow-site-crawler", json!({}));
        let slug = st.create_run(nr, 0);
        assert_eq!(st.abort("nobody", &slug, 10_000), Err(AbortError::NotFound));
        assert_eq!(st.abort("sandbox-key", &slug, 10_000), Ok(()));
        let r = st.run("sandbox-key", &slug).unwrap();
        assert_eq!(r.view(11_000).status, Status::Aborting);
        assert_eq!(
            st.abort("sandbox-key", &slug, 14_000),
            Err(AbortError::Completed)
        );
        assert_eq!(st.abort("nobody", &slug, 14_000), Err(AbortError::NotFound));
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
