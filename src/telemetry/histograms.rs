//! The gateway's histograms, kept as a count per bucket. Every answered
//! request records its duration and V2 calls, and every V2 attempt its
//! duration, so a sample's cost is on the request path: here it is a short
//! search of the bucket bounds and two atomic adds.
//!
//! The Prometheus exporter would instead keep every sample until a drain
//! folds it into buckets: per sample a push into a lock-free bucket under an
//! epoch guard, the samples' memory until the next drain, and a thread
//! counting requests to drain by load. [`WithHistograms`] sits in front of
//! the exporter's recorder and keeps the histograms itself; counters and
//! gauges stay the exporter's, but for the running totals that are
//! fractional counters ([`FloatCounters`]). [`MetricsHandle::render`] writes
//! them all, ours in the exporter's own format (its `formatting` helpers).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::formatting::write_metric_line;
use metrics_exporter_prometheus::{PrometheusHandle, PrometheusRecorder};

use super::exposition::write_families;
use super::float_counters::FloatCounters;

/// Upper bounds of a histogram's buckets, ascending; the `+Inf` bucket
/// follows them.
pub(super) type Bounds = &'static [f64];

/// One histogram series: a count per bucket (not cumulative: the render adds
/// them up) and the sum of the samples.
struct Buckets {
    bounds: Bounds,
    /// One more than `bounds`: the last counts the samples above them all.
    counts: Box<[AtomicU64]>,
    /// The sum, as the bits of an `f64`.
    sum: AtomicU64,
}

impl Buckets {
    fn new(bounds: Bounds) -> Buckets {
        Buckets {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// The counts so far, cumulative, one per bound and the `+Inf` one
    /// last, and the sum. A sample recorded meanwhile may be in the counts
    /// and not yet in the sum: a scrape is a moment, not a transaction.
    fn read(&self) -> (Vec<u64>, f64) {
        let mut total = 0;
        let cumulative = self
            .counts
            .iter()
            .map(|count| {
                total += count.load(Ordering::Relaxed);
                total
            })
            .collect();
        (cumulative, f64::from_bits(self.sum.load(Ordering::Relaxed)))
    }
}

impl HistogramFn for Buckets {
    fn record(&self, value: f64) {
        // A NaN would make the sum NaN for good; no caller records one.
        if value.is_nan() {
            return;
        }
        // Durations land in the first buckets: a forward search ends soonest.
        let bucket = self
            .bounds
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(self.bounds.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + value).to_bits())
            });
    }
}

/// Every histogram series registered, and the histograms' descriptions.
struct Registry {
    /// Ordered by key, so a render groups each name's series together.
    series: Mutex<BTreeMap<Key, Arc<Buckets>>>,
    descriptions: Mutex<HashMap<String, SharedString>>,
    /// The bounds of a histogram by its name.
    bounds: fn(&str) -> Bounds,
}

impl Registry {
    fn register(&self, key: &Key) -> Arc<Buckets> {
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        match series.get(key) {
            Some(buckets) => buckets.clone(),
            None => {
                let buckets = Arc::new(Buckets::new((self.bounds)(key.name())));
                series.insert(key.clone(), buckets.clone());
                buckets
            }
        }
    }

    /// Appends every series to `out` as the exporter writes a histogram:
    /// `# HELP` (when described), `# TYPE`, then per series its cumulative
    /// buckets, `_sum` and `_count`, and a blank line after each name.
    fn render(&self, out: &mut String) {
        let series: Vec<(Key, Arc<Buckets>)> = self
            .series
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(key, buckets)| (key.clone(), buckets.clone()))
            .collect();
        let descriptions = self
            .descriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        write_families(
            out,
            series,
            &descriptions,
            "histogram",
            |out, name, labels, buckets| {
                let (cumulative, sum) = buckets.read();
                let les = buckets.bounds.iter().map(|b| b.to_string());
                for (le, count) in les.chain(["+Inf".to_owned()]).zip(&cumulative) {
                    write_metric_line(
                        out,
                        name,
                        Some("bucket"),
                        labels,
                        Some(("le", le)),
                        count,
                        None,
                    );
                }
                write_metric_line::<&str, f64>(out, name, Some("sum"), labels, None, sum, None);
                let count = cumulative.last().copied().unwrap_or(0);
                write_metric_line::<&str, u64>(out, name, Some("count"), labels, None, count, None);
            },
        );
    }
}

/// A recorder that keeps the histograms as [`Buckets`] and the fractional
/// counters as [`FloatCounters`], and hands the other counters and gauges
/// (and their descriptions) to `inner`.
pub(super) struct WithHistograms<R> {
    inner: R,
    histograms: Arc<Registry>,
    float_counters: Arc<FloatCounters>,
}

impl WithHistograms<PrometheusRecorder> {
    /// `bounds` gives each histogram's bucket bounds by its name.
    pub(super) fn new(inner: PrometheusRecorder, bounds: fn(&str) -> Bounds) -> Self {
        WithHistograms {
            inner,
            histograms: Arc::new(Registry {
                series: Mutex::new(BTreeMap::new()),
                descriptions: Mutex::new(HashMap::new()),
                bounds,
            }),
            float_counters: Arc::default(),
        }
    }

    /// What `/metrics` renders from.
    pub(super) fn handle(&self) -> MetricsHandle {
        MetricsHandle {
            prometheus: self.inner.handle(),
            histograms: self.histograms.clone(),
            float_counters: self.float_counters.clone(),
        }
    }
}

impl<R: Recorder> Recorder for WithHistograms<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if FloatCounters::holds(key.as_str()) {
            self.float_counters.describe(key.as_str(), description);
        } else {
            self.inner.describe_gauge(key, unit, description);
        }
    }

    fn describe_histogram(&self, key: KeyName, _unit: Option<Unit>, description: SharedString) {
        // The exporter writes no unit suffix either (its default): the
        // names already end in theirs.
        self.histograms
            .descriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.as_str().to_owned(), description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.inner.register_counter(key, metadata)
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        if FloatCounters::holds(key.name()) {
            self.float_counters.register(key)
        } else {
            self.inner.register_gauge(key, metadata)
        }
    }

    fn register_histogram(&self, key: &Key, _metadata: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.histograms.register(key))
    }
}

/// Renders the exposition `/metrics` serves.
#[derive(Clone)]
pub struct MetricsHandle {
    prometheus: PrometheusHandle,
    histograms: Arc<Registry>,
    float_counters: Arc<FloatCounters>,
}

impl MetricsHandle {
    /// Counters and gauges as the exporter renders them, then the
    /// fractional counters and the histograms.
    pub fn render(&self) -> String {
        let mut out = self.prometheus.render();
        self.float_counters.render(&mut out);
        self.histograms.render(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_exporter_prometheus::PrometheusBuilder;

    const BOUNDS: Bounds = &[0.001, 0.01, 1.0];

    fn recorder() -> WithHistograms<PrometheusRecorder> {
        WithHistograms::new(PrometheusBuilder::new().build_recorder(), |name| {
            if name == "calls" {
                &[0.0, 1.0]
            } else {
                BOUNDS
            }
        })
    }

    #[test]
    fn a_sample_counts_in_the_first_bucket_that_holds_it() {
        let buckets = Buckets::new(BOUNDS);
        for value in [0.0005, 0.001, 0.002, 1.0, 7.0, f64::NAN] {
            buckets.record(value);
        }
        let (cumulative, sum) = buckets.read();
        // ≤ 0.001: two (the bound itself included); ≤ 0.01: one more; ≤ 1:
        // one more; +Inf: the 7. The NaN is not counted.
        assert_eq!(cumulative, vec![2, 3, 4, 5]);
        assert!((sum - 8.0035).abs() < 1e-12, "{sum}");
    }

    #[test]
    fn renders_as_the_exporter_writes_a_histogram() {
        let recorder = recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            metrics::describe_gauge!("process_cpu_seconds_total", "CPU time");
            metrics::gauge!("process_cpu_seconds_total").set(0.37);
            metrics::describe_histogram!("latency", Unit::Seconds, "How long");
            metrics::describe_counter!("hits", "Hits");
            metrics::counter!("hits").increment(3);
            let by_op = |op: &'static str| metrics::histogram!("latency", "operation" => op);
            by_op("b").record(0.002);
            by_op("a").record(0.0005);
            by_op("a").record(2.0);
            metrics::histogram!("calls").record(1.0);
        });
        let text = handle.render();
        assert!(text.contains("# TYPE hits counter\nhits 3\n"), "{text}");
        // A running total set as a float is a counter, fraction and all.
        assert!(
            text.contains(
                "# HELP process_cpu_seconds_total CPU time\n\
                 # TYPE process_cpu_seconds_total counter\n\
                 process_cpu_seconds_total 0.37\n"
            ),
            "{text}"
        );
        let histograms = &text[text.find("# TYPE calls").expect(&text)..];
        assert_eq!(
            histograms,
            "# TYPE calls histogram\n\
             calls_bucket{le=\"0\"} 0\n\
             calls_bucket{le=\"1\"} 1\n\
             calls_bucket{le=\"+Inf\"} 1\n\
             calls_sum 1\n\
             calls_count 1\n\
             \n\
             # HELP latency How long\n\
             # TYPE latency histogram\n\
             latency_bucket{operation=\"a\",le=\"0.001\"} 1\n\
             latency_bucket{operation=\"a\",le=\"0.01\"} 1\n\
             latency_bucket{operation=\"a\",le=\"1\"} 1\n\
             latency_bucket{operation=\"a\",le=\"+Inf\"} 2\n\
             latency_sum{operation=\"a\"} 2.0005\n\
             latency_count{operation=\"a\"} 2\n\
             latency_bucket{operation=\"b\",le=\"0.001\"} 0\n\
             latency_bucket{operation=\"b\",le=\"0.01\"} 1\n\
             latency_bucket{operation=\"b\",le=\"1\"} 1\n\
             latency_bucket{operation=\"b\",le=\"+Inf\"} 1\n\
             latency_sum{operation=\"b\"} 0.002\n\
             latency_count{operation=\"b\"} 1\n\
             \n"
        );
    }

    #[test]
    fn one_series_per_key_however_often_it_is_looked_up() {
        let recorder = recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            let held = metrics::histogram!("latency", "operation" => "a");
            for _ in 0..3 {
                metrics::histogram!("latency", "operation" => "a").record(0.5);
            }
            held.record(0.5);
        });
        let text = handle.render();
        assert_eq!(text.matches("latency_count").count(), 1, "{text}");
        assert!(text.contains("latency_count{operation=\"a\"} 4"), "{text}");
    }
}
