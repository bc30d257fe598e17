//! Prometheus metrics: a small registry of counters, gauges and histograms rendered in the text
//! exposition format. Every metric is declared once, in [`catalog`] (kind, name, label names,
//! help), and recorded through the handle its declaration gives (`metrics.claims_total()`), so
//! the names and labels at the call sites cannot drift from what `/metrics` exports.
//!
//! Label values that come from tenants are capped: past [`TENANT_LABELS_MAX`] distinct tenants,
//! new ones share the label `_other`, so a series per tenant can be told apart without
//! unbounded cardinality.
//!
//! The exposition is written here rather than by `prometheus-client`: that crate writes only
//! OpenMetrics, which names counter families without `_total`, ends every help text with a
//! period, prints whole floats as `0.0` and adds `# EOF`, so `/metrics` would change under
//! every dashboard and test that reads it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const TENANT_LABELS_MAX: usize = 1_000;

/// Upper bounds (seconds) of every latency histogram's buckets.
const BUCKETS: &[f64] =
    &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];
/// Upper bounds of the histograms that count things (a batch's size).
const SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

/// Declares every metric: a method on [`Metrics`] per metric, returning its handle, and the
/// list of families the exposition writes, in order. Used once, by [`catalog`].
macro_rules! declare_metrics {
    ($($kind:ident $method:ident($($label:literal),*) $help:literal;)+) => {
        impl super::Metrics {
            $(
                #[doc = $help]
                pub fn $method(&self) -> super::Metric<'_, $kind, { <[&str]>::len(&[$($label),*]) }> {
                    super::Metric::new(self, concat!("agent_inbox_", stringify!($method)), [$($label),*])
                }
            )+
        }

        /// Every family, in the order of the exposition.
        pub(super) const FAMILIES: &[super::Family] = &[$(
            super::Family {
                name: concat!("agent_inbox_", stringify!($method)),
                kind: <$kind as super::Kind>::KIND,
                help: $help,
            },
        )+];
    };
}

mod catalog;

/// The registry behind every handle.
#[derive(Debug, Default)]
pub struct Metrics {
    families: Mutex<Families>,
    tenants: Mutex<BTreeSet<String>>,
}

/// One declared metric, bound to the registry: `N` label values go with every sample.
#[derive(Debug)]
pub struct Metric<'a, K, const N: usize> {
    metrics: &'a Metrics,
    name: &'static str,
    labels: [&'static str; N],
    kind: PhantomData<K>,
}

/// A count that only goes up.
#[derive(Debug)]
pub struct Counter;
/// A value that goes up and down, or is replaced by a fresh snapshot.
#[derive(Debug)]
pub struct Gauge;
/// Durations, in seconds, in [`BUCKETS`].
#[derive(Debug)]
pub struct Histogram;
/// How many of something (a batch's size), in [`SIZE_BUCKETS`].
#[derive(Debug)]
pub struct SizeHistogram;

impl<const N: usize> Metric<'_, Counter, N> {
    pub fn add(&self, values: [String; N], by: u64) {
        self.series(values).add(by);
    }

    /// One series, its labels resolved once, for a caller that counts on it often (each
    /// stream's hints): every [`CounterSeries::add`] is then one atomic increment.
    pub fn series(&self, values: [String; N]) -> CounterSeries {
        let labels = self.labelled(values);
        let mut families = self.metrics.families.lock().expect("metrics lock");
        CounterSeries(families.counters.entry(self.name).or_default().entry(labels).or_default().clone())
    }
}

/// A counter series held by whoever counts on it.
#[derive(Debug, Clone)]
pub struct CounterSeries(Arc<AtomicU64>);

impl CounterSeries {
    pub fn add(&self, by: u64) {
        self.0.fetch_add(by, Ordering::Relaxed);
    }
}

impl<const N: usize> Metric<'_, Gauge, N> {
    /// Moves one series up or down (open connections).
    pub fn add(&self, values: [String; N], delta: f64) {
        let labels = self.labelled(values);
        let mut families = self.metrics.families.lock().expect("metrics lock");
        *families.gauges.entry(self.name).or_default().entry(labels).or_default() += delta;
    }

    /// Sets one series.
    pub fn set(&self, values: [String; N], value: f64) {
        let labels = self.labelled(values);
        let mut families = self.metrics.families.lock().expect("metrics lock");
        families.gauges.entry(self.name).or_default().insert(labels, value);
    }

    /// Replaces every series at once (a fresh snapshot of backlogs).
    pub fn replace(&self, series: Vec<([String; N], f64)>) {
        let series = series.into_iter().map(|(values, value)| (self.labelled(values), value)).collect();
        let mut families = self.metrics.families.lock().expect("metrics lock");
        families.gauges.insert(self.name, series);
    }
}

impl<const N: usize> Metric<'_, Histogram, N> {
    pub fn observe(&self, values: [String; N], value: Duration) {
        self.metrics.record(self.name, BUCKETS, self.labelled(values), value.as_secs_f64());
    }
}

impl<const N: usize> Metric<'_, SizeHistogram, N> {
    pub fn observe(&self, values: [String; N], n: usize) {
        self.metrics.record(self.name, SIZE_BUCKETS, self.labelled(values), n as f64);
    }
}

impl<'a, K, const N: usize> Metric<'a, K, N> {
    fn new(metrics: &'a Metrics, name: &'static str, labels: [&'static str; N]) -> Self {
        Metric { metrics, name, labels, kind: PhantomData }
    }

    fn labelled(&self, values: [String; N]) -> Labels {
        self.labels.iter().copied().zip(values).collect()
    }
}

/// What the exposition's `# TYPE` line says, per kind of handle.
trait Kind {
    const KIND: FamilyKind;
}

impl Kind for Counter {
    const KIND: FamilyKind = FamilyKind::Counter;
}
impl Kind for Gauge {
    const KIND: FamilyKind = FamilyKind::Gauge;
}
impl Kind for Histogram {
    const KIND: FamilyKind = FamilyKind::Histogram(BUCKETS);
}
impl Kind for SizeHistogram {
    const KIND: FamilyKind = FamilyKind::Histogram(SIZE_BUCKETS);
}

#[derive(Debug, Clone, Copy)]
enum FamilyKind {
    Counter,
    Gauge,
    Histogram(&'static [f64]),
}

/// A declared family, for the exposition.
#[derive(Debug)]
struct Family {
    name: &'static str,
    kind: FamilyKind,
    help: &'static str,
}

type Labels = Vec<(&'static str, String)>;

#[derive(Debug, Default)]
struct Buckets {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

#[derive(Debug, Default)]
struct Families {
    counters: BTreeMap<&'static str, BTreeMap<Labels, Arc<AtomicU64>>>,
    gauges: BTreeMap<&'static str, BTreeMap<Labels, f64>>,
    histograms: BTreeMap<&'static str, BTreeMap<Labels, Buckets>>,
}

impl Metrics {
    /// A tenant id as a label value, or `_other` once the cap is reached.
    pub fn tenant_label(&self, tenant: &str) -> String {
        let mut tenants = self.tenants.lock().expect("metrics lock");
        if tenants.contains(tenant) || tenants.len() < TENANT_LABELS_MAX {
            tenants.insert(tenant.to_owned());
            tenant.to_owned()
        } else {
            "_other".to_owned()
        }
    }

    fn record(&self, name: &'static str, bounds: &[f64], labels: Labels, value: f64) {
        let mut families = self.families.lock().expect("metrics lock");
        let histogram = families.histograms.entry(name).or_default().entry(labels).or_default();
        if histogram.counts.is_empty() {
            histogram.counts = vec![0; bounds.len()];
        }
        for (count, bound) in histogram.counts.iter_mut().zip(bounds) {
            if value <= *bound {
                *count += 1;
            }
        }
        histogram.sum += value;
        histogram.count += 1;
    }

    /// The Prometheus text exposition of everything recorded.
    pub fn render(&self) -> String {
        let families = self.families.lock().expect("metrics lock");
        let mut out = String::new();
        for Family { name, kind, help } in catalog::FAMILIES {
            let type_name = match kind {
                FamilyKind::Counter => "counter",
                FamilyKind::Gauge => "gauge",
                FamilyKind::Histogram(_) => "histogram",
            };
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {type_name}");
            match kind {
                FamilyKind::Counter => {
                    for (labels, value) in families.counters.get(name).into_iter().flatten() {
                        let value = value.load(Ordering::Relaxed);
                        let _ = writeln!(out, "{name}{} {value}", render_labels(labels, None));
                    }
                }
                FamilyKind::Gauge => {
                    for (labels, value) in families.gauges.get(name).into_iter().flatten() {
                        let _ = writeln!(out, "{name}{} {value}", render_labels(labels, None));
                    }
                }
                FamilyKind::Histogram(bounds) => {
                    for (labels, h) in families.histograms.get(name).into_iter().flatten() {
                        for (count, bound) in h.counts.iter().zip(*bounds) {
                            let _ = writeln!(
                                out,
                                "{name}_bucket{} {count}",
                                render_labels(labels, Some(&bound.to_string()))
                            );
                        }
                        let _ =
                            writeln!(out, "{name}_bucket{} {}", render_labels(labels, Some("+Inf")), h.count);
                        let _ = writeln!(out, "{name}_sum{} {}", render_labels(labels, None), h.sum);
                        let _ = writeln!(out, "{name}_count{} {}", render_labels(labels, None), h.count);
                    }
                }
            }
        }
        out
    }
}

fn render_labels(labels: &Labels, le: Option<&str>) -> String {
    let mut parts: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    if parts.is_empty() { String::new() } else { format!("{{{}}}", parts.join(",")) }
}

fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histograms_and_capped_tenant_labels() {
        let metrics = Metrics::default();
        metrics.claims_total().add(["t1".into()], 3);
        metrics.ack_latency_seconds().observe([], Duration::from_millis(3));
        let text = metrics.render();
        assert!(text.contains("agent_inbox_claims_total{tenant=\"t1\"} 3"));
        assert!(text.contains("agent_inbox_ack_latency_seconds_bucket{le=\"0.005\"} 1"));
        assert!(text.contains("agent_inbox_ack_latency_seconds_bucket{le=\"0.0025\"} 0"));
        assert!(text.contains("agent_inbox_ack_latency_seconds_count 1"));
        for n in 0..TENANT_LABELS_MAX {
            metrics.tenant_label(&format!("t{n}"));
        }
        assert_eq!(metrics.tenant_label("t5"), "t5");
        assert_eq!(metrics.tenant_label("newcomer"), "_other");
    }

    #[test]
    fn every_family_is_declared_once_and_exported_with_help_and_type() {
        let text = Metrics::default().render();
        let mut names = BTreeSet::new();
        for family in catalog::FAMILIES {
            assert!(names.insert(family.name), "{} is declared twice", family.name);
            assert!(
                text.contains(&format!("# HELP {} {}\n# TYPE {} ", family.name, family.help, family.name))
            );
        }
        // 47 before issue 16, which added the quarantine, release and requeue counters; 50 before
        // issue 28, which added stream refusals and stalled connections; issue 26 added the
        // secrets key's three, issue 27 the purge lag's two, issue 29 the dropped log lines and
        // the head checks answered from memory; issue 31 the quota refusals, the batcher wait,
        // the webhook deliveries deferred per origin and the callbacks disabled.
        assert_eq!(names.len(), 63, "the families exported before metrics were declared once");
    }

    #[test]
    fn gauges_and_size_histograms_keep_their_labels_and_buckets() {
        let metrics = Metrics::default();
        metrics.connected_streams().add(["sse".into()], 1.0);
        metrics.connected_streams().add(["sse".into()], -1.0);
        metrics.inbox_depth().replace(vec![(["t1".into(), "a1".into()], 4.0)]);
        metrics.publish_batch_size().observe([], 3);
        let text = metrics.render();
        assert!(text.contains("agent_inbox_connected_streams{transport=\"sse\"} 0\n"), "{text}");
        assert!(text.contains("agent_inbox_inbox_depth{tenant=\"t1\",agent=\"a1\"} 4\n"), "{text}");
        assert!(text.contains("agent_inbox_publish_batch_size_bucket{le=\"2\"} 0\n"), "{text}");
        assert!(text.contains("agent_inbox_publish_batch_size_bucket{le=\"4\"} 1\n"), "{text}");
    }
}
