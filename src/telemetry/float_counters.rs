//! Counters with fractional values, for `/metrics` (beside the request
//! path: the recorder's render). The `metrics` facade's counters hold
//! integers, so a total such as `process_cpu_seconds_total` (CPU seconds,
//! a float, only ever growing) reaches the recorder as a gauge set to the
//! running total: `metrics-process` sets it so with its
//! `use-gauge-on-cpu-seconds-total` feature (its counter form would truncate
//! to whole seconds, and an idle sidecar would read 0 for hours). Prometheus
//! counters may be fractional; the recorder hands the gauges named in
//! [`NAMES`] to a [`FloatCounters`], which writes them out typed `counter`
//! with their fractional value, so `promtool check metrics` accepts the
//! `_total` name and `rate()` sees a counter.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use metrics::{Gauge, GaugeFn, Key, SharedString};
use metrics_exporter_prometheus::formatting::write_metric_line;

use super::exposition::write_families;

/// The gauges written out as counters: running totals set as floats.
pub(super) const NAMES: &[&str] = &["process_cpu_seconds_total"];

/// One series: the running total, as the bits of an `f64`.
struct Total(AtomicU64);

impl GaugeFn for Total {
    fn increment(&self, value: f64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + value).to_bits())
            });
    }

    /// A counter never goes down: a decrement is ignored.
    fn decrement(&self, _value: f64) {}

    /// The total so far; a reading below the last one (a clock read out of
    /// order) keeps the last, so the series never looks like a restart.
    fn set(&self, value: f64) {
        if value.is_nan() {
            return;
        }
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                (value > f64::from_bits(bits)).then_some(value.to_bits())
            });
    }
}

/// The series of the names in [`NAMES`] and their descriptions.
#[derive(Default)]
pub(super) struct FloatCounters {
    /// Ordered by key, so a render groups each name's series together.
    series: Mutex<BTreeMap<Key, Arc<Total>>>,
    descriptions: Mutex<HashMap<String, SharedString>>,
}

impl FloatCounters {
    /// Whether a gauge of this name is kept here.
    pub(super) fn holds(name: &str) -> bool {
        NAMES.contains(&name)
    }

    pub(super) fn describe(&self, name: &str, description: SharedString) {
        self.descriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), description);
    }

    pub(super) fn register(&self, key: &Key) -> Gauge {
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let total = series
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Total(AtomicU64::new(0f64.to_bits()))))
            .clone();
        Gauge::from_arc(total)
    }

    /// Appends every series to `out` as the exporter writes a counter,
    /// with the value as a float: `# HELP` (when described), `# TYPE …
    /// counter`, the series, a blank line after each name.
    pub(super) fn render(&self, out: &mut String) {
        let series: Vec<(Key, f64)> = self
            .series
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(key, total)| (key.clone(), f64::from_bits(total.0.load(Ordering::Relaxed))))
            .collect();
        let descriptions = self
            .descriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        write_families(
            out,
            series,
            &descriptions,
            "counter",
            |out, name, labels, value| {
                write_metric_line::<&str, f64>(out, name, None, labels, None, value, None);
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_total_renders_as_a_fractional_counter() {
        let counters = FloatCounters::default();
        counters.describe("process_cpu_seconds_total", "CPU time".into());
        let gauge = counters.register(&Key::from_name("process_cpu_seconds_total"));
        gauge.set(0.25);
        gauge.set(1.75);
        let mut out = String::new();
        counters.render(&mut out);
        assert_eq!(
            out,
            "# HELP process_cpu_seconds_total CPU time\n\
             # TYPE process_cpu_seconds_total counter\n\
             process_cpu_seconds_total 1.75\n\n"
        );
    }

    #[test]
    fn a_counter_never_goes_down() {
        let counters = FloatCounters::default();
        let gauge = counters.register(&Key::from_name("process_cpu_seconds_total"));
        gauge.set(2.5);
        gauge.set(2.0);
        gauge.decrement(1.0);
        gauge.set(f64::NAN);
        gauge.increment(0.5);
        let mut out = String::new();
        counters.render(&mut out);
        assert!(out.ends_with("process_cpu_seconds_total 3\n\n"), "{out}");
    }

    #[test]
    fn nothing_registered_renders_nothing() {
        let mut out = String::new();
        FloatCounters::default().render(&mut out);
        assert_eq!(out, "");
        assert!(FloatCounters::holds("process_cpu_seconds_total"));
        assert!(!FloatCounters::holds("process_open_fds"));
    }
}
