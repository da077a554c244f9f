//! Fault injection on the V2 surface: rules (from config or `POST /__sandbox/faults`)
//! that make a matching operation slow, fail, rate-limit, answer garbage, cut the body
//! short or drop the connection. Lets tests exercise the gateway's error paths.
//!
//! Which requests are hit is deterministic: probabilities are rolled with an RNG seeded
//! from the sandbox seed, and `times` counts matching requests down to zero.

use std::sync::Mutex;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::lock;

/// What a fault does to the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// Wait `latency_ms`, then answer normally.
    Latency,
    /// Answer an error envelope with `status` / `code` / `message`.
    Error,
    /// Answer 429 / 13000 with a `Retry-After` header.
    RateLimit,
    /// Answer 200 with a body that is not JSON.
    Malformed,
    /// Announce a longer Content-Length than the body, then close.
    Truncated,
    /// Close the connection without an answer.
    Drop,
}

/// One rule. `route` is a V2 operationId (e.g. `getWorkerRun`) or `*` for all.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRule {
    pub route: String,
    pub kind: FaultKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Seconds, for `rate_limit` (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
    /// Chance (0..=1) that a matching request is hit; default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f64>,
    /// Hit only the next N matching requests; absent = unlimited. Counts down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u64>,
}

impl FaultRule {
    /// Problems with the rule, for config and admin validation.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.route.is_empty() {
            out.push("fault route must not be empty".to_string());
        }
        if let Some(p) = self.probability {
            if !(0.0..=1.0).contains(&p) {
                out.push(format!("fault probability {p} is outside 0..1"));
            }
        }
        if let Some(s) = self.status {
            if !(100..=599).contains(&s) {
                out.push(format!("fault status {s} is not an HTTP status"));
            }
        }
        if self.kind == FaultKind::Latency && self.latency_ms.is_none() {
            out.push("a latency fault needs latency_ms".to_string());
        }
        out
    }

    /// HTTP status and V2 code of an `error` fault (defaults: 500 / 10000).
    pub fn error_status_code(&self) -> (u16, i64) {
        let status = self.status.unwrap_or(500);
        let code = self.code.unwrap_or(match status {
            400 | 422 => 11000,
            401 => 12001,
            404 => 11004,
            429 => 13000,
            _ => 10000,
        });
        (status, code)
    }
}

/// The active rule set and the RNG that decides probabilistic hits.
pub(crate) struct Faults {
    rules: Mutex<Vec<FaultRule>>,
    rng: Mutex<StdRng>,
}

impl Faults {
    pub(crate) fn new(seed: u64, rules: Vec<FaultRule>) -> Self {
        Faults {
            rules: Mutex::new(rules),
            rng: Mutex::new(StdRng::seed_from_u64(seed ^ 0xFA17_FA17)),
        }
    }

    pub(crate) fn replace(&self, rules: Vec<FaultRule>) {
        *lock(&self.rules) = rules;
    }

    pub(crate) fn list(&self) -> Vec<FaultRule> {
        lock(&self.rules).clone()
    }

    /// The first rule that hits this operation, consuming one of its `times`.
    /// Exhausted rules are removed.
    pub(crate) fn pick(&self, operation: &str) -> Option<FaultRule> {
        let mut rules = lock(&self.rules);
        let mut hit = None;
        for (i, rule) in rules.iter_mut().enumerate() {
            if rule.route != "*" && rule.route != operation {
                continue;
            }
            if rule.times == Some(0) {
                continue;
            }
            let p = rule.probability.unwrap_or(1.0);
            if p < 1.0 {
                let roll: f64 = lock(&self.rng).gen();
                if roll >= p {
                    continue;
                }
            }
            if let Some(t) = rule.times.as_mut() {
                *t -= 1;
            }
            hit = Some((i, rule.clone()));
            break;
        }
        let (i, rule) = hit?;
        if rules.get(i).and_then(|r| r.times) == Some(0) {
            rules.remove(i);
        }
        Some(rule)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(route: &str, kind: FaultKind) -> FaultRule {
        FaultRule {
            route: route.into(),
            kind,
            latency_ms: None,
            status: None,
            code: None,
            message: None,
            retry_after: None,
            probability: None,
            times: None,
        }
    }

    #[test]
    fn times_counts_down_and_expires() {
        let mut r = rule("getWorkerRun", FaultKind::Drop);
        r.times = Some(2);
        let f = Faults::new(7, vec![r]);
        assert!(f.pick("listWorkerRuns").is_none());
        assert!(f.pick("getWorkerRun").is_some());
        assert!(f.pick("getWorkerRun").is_some());
        assert!(f.pick("getWorkerRun").is_none());
        assert!(f.list().is_empty());
    }

    #[test]
    fn probability_is_deterministic() {
        let mut r = rule("*", FaultKind::Error);
        r.probability = Some(0.5);
        let roll = |seed| {
            let f = Faults::new(seed, vec![r.clone()]);
            (0..50).map(|_| f.pick("x").is_some()).collect::<Vec<_>>()
        };
        let a = roll(3);
        assert_eq!(a, roll(3));
        let hits = a.iter().filter(|h| **h).count();
        assert!(hits > 5 && hits < 45, "{hits}");
    }

    #[test]
    fn error_defaults_follow_status() {
        let mut r = rule("*", FaultKind::Error);
        assert_eq!(r.error_status_code(), (500, 10000));
        r.status = Some(429);
        assert_eq!(r.error_status_code(), (429, 13000));
        r.code = Some(70002);
        assert_eq!(r.error_status_code(), (429, 70002));
    }

    #[test]
    fn rule_problems() {
        let mut r = rule("", FaultKind::Latency);
        r.probability = Some(2.0);
        assert_eq!(r.problems().len(), 3);
    }
}
