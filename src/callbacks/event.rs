//! One received V2 callback as the store keeps it, and the rules that keep
//! notifications monotone: a status has a rank, and an event's id is derived
//! from (run, status, the token it came in on) so V2 repeating itself
//! de-duplicates while a callback posted on another token (someone else's,
//! naming this run) stays apart from the run's own. The receiver
//! de-duplicates on the `webhook-id`, derived from (run, status) alone.

use ring::digest;
use serde::{Deserialize, Serialize};

/// Where an event is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Waiting for its next attempt.
    Pending,
    /// Delivered, or made redundant by a newer status of the same run.
    Done,
    /// Every attempt failed (or the receiver said 410): kept for redelivery.
    Dead,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Done => "done",
            State::Dead => "dead",
        }
    }

    pub fn parse(s: &str) -> Option<State> {
        Some(match s {
            "pending" => State::Pending,
            "done" => State::Done,
            "dead" => State::Dead,
            _ => return None,
        })
    }
}

/// A stored event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// `msg_` + hex of SHA-256(run, status, token): see [`store_id`].
    pub id: String,
    pub run_slug: String,
    /// V2 `run_status`, lower case.
    pub status: String,
    /// The sealed token the callback came in on (target URL and key stay
    /// encrypted at rest).
    pub token: String,
    /// V2's `result_count`, for deliveries without enrichment.
    pub results: i64,
    pub received_ms: u64,
    pub attempts: u32,
    pub next_ms: u64,
    pub state: State,
    #[serde(default)]
    pub last_error: String,
    /// The status the run had when it was delivered (may be newer than `status`).
    #[serde(default)]
    pub delivered_status: Option<String>,
    /// Claimed by a deliverer until then (ms); 0 = free.
    #[serde(default)]
    pub lease_until_ms: u64,
    #[serde(default)]
    pub lease_owner: String,
    #[serde(default)]
    pub finished_ms: u64,
}

impl Event {
    pub fn new(
        run_slug: &str,
        status: &str,
        token: &str,
        results: i64,
        now_ms: u64,
        first_delay_ms: u64,
    ) -> Event {
        let status = status.trim().to_ascii_lowercase();
        Event {
            id: store_id(run_slug, &status, token),
            run_slug: run_slug.to_owned(),
            status,
            token: token.to_owned(),
            results,
            received_ms: now_ms,
            attempts: 0,
            next_ms: now_ms + first_delay_ms,
            state: State::Pending,
            last_error: String::new(),
            delivered_status: None,
            lease_until_ms: 0,
            lease_owner: String::new(),
            finished_ms: 0,
        }
    }

    pub fn rank(&self) -> u8 {
        rank(&self.status)
    }
}

/// The stable id of (run, status): the `webhook-id` a notification carries.
pub fn event_id(run_slug: &str, status: &str) -> String {
    id_of(&[run_slug, &status.trim().to_ascii_lowercase()])
}

/// The id the store keeps an event under: (run, status) on the token it
/// came in on. Each token's events of a run are de-duplicated and ordered
/// among themselves (`store::plan_insert`), so a callback that names a run
/// on a token that is not the run's cannot stand in for the run's own.
pub fn store_id(run_slug: &str, status: &str, token: &str) -> String {
    id_of(&[run_slug, &status.trim().to_ascii_lowercase(), token])
}

fn id_of(parts: &[&str]) -> String {
    let mut ctx = digest::Context::new(&digest::SHA256);
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            ctx.update(b"\n");
        }
        ctx.update(part.as_bytes());
    }
    let d = ctx.finish();
    let hex: String = d.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("msg_{hex}")
}

/// Order of run statuses: a notification never goes to a lower rank.
pub fn rank(status: &str) -> u8 {
    match status.trim().to_ascii_lowercase().as_str() {
        "ready" | "queued" | "pending" => 0,
        "running" => 1,
        "aborting" => 2,
        "succeeded" | "failed" | "aborted" | "cancelled" | "canceled" => 3,
        // Unknown statuses sit with `running`: not final, not first.
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_per_run_and_status() {
        assert_eq!(event_id("R1", "running"), event_id("R1", " Running"));
        assert_ne!(event_id("R1", "running"), event_id("R1", "succeeded"));
        assert_ne!(event_id("R1", "running"), event_id("R2", "running"));
        let id = event_id("R1", "running");
        assert!(id.starts_with("msg_") && id.len() == 36 && !id.contains('.'));
        // The store's id tells tokens apart; the webhook-id does not.
        assert_ne!(
            store_id("R1", "running", "t1"),
            store_id("R1", "running", "t2")
        );
        assert_eq!(
            store_id("R1", "Running", "t1"),
            Event::new("R1", "running", "t1", 0, 0, 0).id
        );
    }

    #[test]
    fn ranks_only_go_forward_to_terminal() {
        assert!(rank("ready") < rank("running"));
        assert!(rank("running") < rank("aborting"));
        assert!(rank("aborting") < rank("failed"));
        assert_eq!(rank("succeeded"), rank("failed"));
    }
}
