//! Aggregation and noise judgement, off the request path: many pair
//! comparisons counted per operation and finding (a normalised field path,
//! or a rename: see [`rename`](super::rename)), ignore-rule hits counted, and
//! a finding judged real or noise against the baseline (legacy-vs-legacy
//! disagreements) under [`Thresholds`].

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use super::rename::{findings, Finding};
use super::{compare, Reply, Rules};

/// When a baseline marks a field as noise. See [`Tally::is_real`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// Baseline pairs an operation needs before its baseline is applied;
    /// with fewer, every difference is reported.
    pub min_count: u64,
    /// A field is real only if its translated-vs-legacy count exceeds the
    /// (scaled) legacy-vs-legacy count times this…
    pub relative: f64,
    /// …and by at least this many.
    pub absolute: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            min_count: 5,
            relative: 2.0,
            absolute: 1.0,
        }
    }
}

/// A differing pair kept as an example (values already redacted).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// The request's place among everything added ([`Tally::added`]), unique
    /// even where captured ids are not.
    pub seq: u64,
    pub id: String,
    pub path: String,
    /// For a rename, the translated side's path.
    pub renamed_to: Option<String>,
    pub legacy: Option<Value>,
    pub translated: Option<Value>,
}

/// Counts of one finding (normalised field path, or rename) of one operation.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FieldTally {
    /// Whether the finding is a rename (its key holds both paths).
    pub rename: bool,
    /// Requests where translated and legacy disagreed on it.
    pub translated: u64,
    /// Requests where two legacy calls disagreed on it.
    pub baseline: u64,
    pub samples: Vec<Sample>,
}

/// Counts of one operation.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OpTally {
    pub requests: u64,
    /// Pairs where both sides answered.
    pub compared: u64,
    /// Pairs where a side gave no answer (unreachable, timeout, too large).
    pub failed: u64,
    /// Pairs that also had a baseline answer.
    pub baseline_pairs: u64,
    pub fields: BTreeMap<String, FieldTally>,
    /// The set of differing fields of each compared request, counted, so
    /// "requests with a real difference" can be computed after thresholds.
    pub signatures: BTreeMap<Vec<String>, u64>,
}

/// Aggregated comparisons, e.g. of one capture file.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tally {
    pub ops: BTreeMap<String, OpTally>,
    /// Differences hidden by each ignore rule, by rule index.
    pub rule_hits: Vec<u64>,
    /// Requests added so far, compared or not.
    pub added: u64,
}

/// What [`Tally::add`] found in one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Added {
    /// Its findings, renames paired, in path order.
    pub findings: Vec<Finding>,
    /// Whether it was kept as a sample of at least one finding.
    pub sampled: bool,
    /// Its [`Sample::seq`].
    pub seq: u64,
}

/// Differing pairs kept per field.
pub const SAMPLES_PER_FIELD: usize = 3;

impl Tally {
    pub fn new(rules: &Rules) -> Tally {
        Tally {
            ops: BTreeMap::new(),
            rule_hits: vec![0; rules.ignore.len()],
            added: 0,
        }
    }

    /// A request whose other side gave no answer.
    pub fn add_failed(&mut self, op: &str) {
        self.added += 1;
        let o = self.ops.entry(op.to_owned()).or_default();
        o.requests += 1;
        o.failed += 1;
    }

    /// Adds one compared request. `baseline` is a second legacy answer.
    pub fn add(
        &mut self,
        op: &str,
        id: &str,
        legacy: Reply<'_>,
        translated: Reply<'_>,
        baseline: Option<Reply<'_>>,
        rules: &Rules,
    ) -> Added {
        let seq = self.added;
        self.added += 1;
        let cmp = compare(op, legacy, translated, rules);
        for &i in &cmp.ignored {
            if let Some(h) = self.rule_hits.get_mut(i) {
                *h += 1;
            }
        }
        let found = findings(&cmp.diffs);
        let o = self.ops.entry(op.to_owned()).or_default();
        o.requests += 1;
        o.compared += 1;
        let mut seen = BTreeSet::new();
        let mut sampled = false;
        for d in &found {
            let key = d.key();
            let f = o.fields.entry(key.clone()).or_default();
            f.rename = d.renamed_to.is_some();
            if seen.insert(key) {
                f.translated += 1;
            }
            if f.samples.len() < SAMPLES_PER_FIELD {
                sampled = true;
                f.samples.push(Sample {
                    seq,
                    id: id.to_owned(),
                    path: d.path.clone(),
                    renamed_to: d.renamed_to.clone(),
                    legacy: d.legacy.clone(),
                    translated: d.translated.clone(),
                });
            }
        }
        if let Some(b) = baseline {
            o.baseline_pairs += 1;
            // Ignore rules apply to the baseline too, but are not counted
            // twice; renames are paired the same way, so keys match.
            let noise = compare(op, legacy, b, rules);
            let keys: BTreeSet<String> = findings(&noise.diffs).iter().map(Finding::key).collect();
            for k in keys {
                o.fields.entry(k).or_default().baseline += 1;
            }
        }
        *o.signatures.entry(seen.into_iter().collect()).or_default() += 1;
        Added {
            findings: found,
            sampled,
            seq,
        }
    }

    /// Whether a field of an operation is a real difference: always without
    /// a (large enough) baseline; with one, when T > B′·relative and
    /// T − B′ ≥ absolute, B′ being the baseline count scaled to the number
    /// of compared pairs.
    pub fn is_real(&self, op: &str, path: &str, th: &Thresholds) -> bool {
        let Some(o) = self.ops.get(op) else {
            return false;
        };
        let Some(f) = o.fields.get(path) else {
            return false;
        };
        if f.translated == 0 {
            return false;
        }
        if o.baseline_pairs < th.min_count.max(1) {
            return true;
        }
        let t = f.translated as f64;
        let b = f.baseline as f64 * o.compared as f64 / o.baseline_pairs as f64;
        t > b * th.relative && t - b >= th.absolute
    }

    /// Real differing fields, `(operation, path, count)`, most frequent first.
    pub fn real_fields(&self, th: &Thresholds) -> Vec<(String, String, u64)> {
        let mut out: Vec<_> = self
            .ops
            .iter()
            .flat_map(|(op, o)| {
                o.fields
                    .iter()
                    .filter(|(p, _)| self.is_real(op, p, th))
                    .map(|(p, f)| (op.clone(), p.clone(), f.translated))
            })
            .collect();
        out.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| (&a.0, &a.1).cmp(&(&b.0, &b.1))));
        out
    }

    /// Fields that differed but were judged noise by the baseline.
    pub fn noise_fields(&self, th: &Thresholds) -> Vec<(String, String, u64, u64)> {
        self.ops
            .iter()
            .flat_map(|(op, o)| {
                o.fields
                    .iter()
                    .filter(|(p, f)| f.translated > 0 && !self.is_real(op, p, th))
                    .map(|(p, f)| (op.clone(), p.clone(), f.translated, f.baseline))
            })
            .collect()
    }

    /// Requests of an operation with at least one real difference.
    pub fn differing_requests(&self, op: &str, th: &Thresholds) -> u64 {
        let Some(o) = self.ops.get(op) else {
            return 0;
        };
        o.signatures
            .iter()
            .filter(|(paths, _)| paths.iter().any(|p| self.is_real(op, p, th)))
            .map(|(_, n)| n)
            .sum()
    }
}
