//! Latency figures of a report, off the request path: percentiles that say
//! when they mean little. Under [`MIN_SAMPLES`] answers a percentile is not
//! given at all; where the rank falls on the largest answer (a p99 of 40
//! answers is their maximum) it is given as that maximum.

use std::fmt;

use super::quantile;

/// Answers an operation's side needs before its percentiles are shown.
pub(crate) const MIN_SAMPLES: usize = 20;

/// A percentile as a report shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Pct {
    /// Fewer than [`MIN_SAMPLES`] answers: `n` of them.
    TooFew(usize),
    /// The rank is the largest answer: this is the maximum of `n`.
    Max(f64, usize),
    /// A percentile in the ordinary sense.
    Value(f64),
}

/// The `q`-percentile (0–1) of `v`, nearest rank, marked per [`Pct`].
pub(crate) fn percentile(v: &[f64], q: f64) -> Pct {
    let n = v.len();
    if n < MIN_SAMPLES {
        return Pct::TooFew(n);
    }
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    let x = quantile(v, q);
    if rank == n {
        Pct::Max(x, n)
    } else {
        Pct::Value(x)
    }
}

impl Pct {
    /// The figure when it means something.
    pub(crate) fn value(&self) -> Option<f64> {
        match self {
            Pct::Value(x) => Some(*x),
            _ => None,
        }
    }

    /// Whether this is a percentile in the ordinary sense.
    #[cfg(test)]
    fn meaningful(&self) -> bool {
        matches!(self, Pct::Value(_))
    }
}

impl fmt::Display for Pct {
    /// `3.1`, `max 9.0 (n=40)`, `n=3, too few`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pct::Value(x) => write!(f, "{x:.1}"),
            Pct::Max(x, n) => write!(f, "max {x:.1} (n={n})"),
            Pct::TooFew(n) => write!(f, "n={n}, too few"),
        }
    }
}

/// `p50 / p99` of one side for the operation tables: both figures, or
/// one note when there are too few answers for either.
pub(crate) fn p50_p99(v: &[f64]) -> String {
    match (percentile(v, 0.5), percentile(v, 0.99)) {
        (Pct::TooFew(n), _) => format!("n={n}, too few"),
        (a, b) => format!("{a} / {b}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_few_answers_give_no_percentile() {
        let v: Vec<f64> = (1..=19).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Pct::TooFew(19));
        assert_eq!(percentile(&[], 0.99), Pct::TooFew(0));
        assert_eq!(percentile(&[7.0], 0.99).to_string(), "n=1, too few");
        assert_eq!(p50_p99(&[1.0, 2.0]), "n=2, too few");
        assert!(!percentile(&[7.0], 0.5).meaningful());
    }

    #[test]
    fn a_rank_on_the_largest_answer_is_called_the_maximum() {
        let v: Vec<f64> = (1..=40).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Pct::Value(20.0));
        assert_eq!(percentile(&v, 0.99), Pct::Max(40.0, 40));
        assert_eq!(p50_p99(&v), "20.0 / max 40.0 (n=40)");
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.99), Pct::Value(198.0));
        assert_eq!(percentile(&v, 0.99).value(), Some(198.0));
        assert_eq!(p50_p99(&v), "100.0 / 198.0");
    }
}
