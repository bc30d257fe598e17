//! Prometheus metrics: a small registry of counters, gauges and histograms rendered in the text
//! exposition format. Label values that come from tenants are capped: past
//! [`TENANT_LABELS_MAX`] distinct tenants, new ones share the label `_other`, so a series per
//! tenant can be told apart without unbounded cardinality.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

pub const TENANT_LABELS_MAX: usize = 1_000;

/// Upper bounds (seconds) of every latency histogram's buckets.
const BUCKETS: &[f64] =
    &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];
/// Upper bounds of the histograms that count things (names ending in `_size`).
const SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

fn buckets(name: &str) -> &'static [f64] {
    if name.ends_with("_size") { SIZE_BUCKETS } else { BUCKETS }
}

type Labels = Vec<(&'static str, String)>;

#[derive(Debug, Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

#[derive(Debug, Default)]
struct Families {
    counters: BTreeMap<&'static str, BTreeMap<Labels, u64>>,
    gauges: BTreeMap<&'static str, BTreeMap<Labels, f64>>,
    histograms: BTreeMap<&'static str, BTreeMap<Labels, Histogram>>,
}

#[derive(Debug, Default)]
pub struct Metrics {
    families: Mutex<Families>,
    tenants: Mutex<BTreeSet<String>>,
}

/// Help text of every metric, which is also the list of what exists.
const HELP: &[(&str, &str, &str)] = &[
    ("agent_inbox_http_requests_total", "counter", "HTTP requests by route template and status"),
    ("agent_inbox_http_request_duration_seconds", "histogram", "HTTP request latency by route template"),
    ("agent_inbox_publish_commit_seconds", "histogram", "Publish-to-inbox commit latency, per request"),
    ("agent_inbox_publish_batch_size", "histogram", "Publishes committed together in one transaction"),
    (
        "agent_inbox_publish_linger_seconds",
        "histogram",
        "How long a publish batch gathered before its commit started",
    ),
    ("agent_inbox_events_published_total", "counter", "Inbox rows written by publishes, by tenant"),
    (
        "agent_inbox_events_deduplicated_total",
        "counter",
        "Publishes answered with an existing event, by tenant",
    ),
    ("agent_inbox_claims_total", "counter", "Events claimed, by tenant"),
    (
        "agent_inbox_duplicate_claims_total",
        "counter",
        "Claims of events already claimed or finished, by tenant",
    ),
    ("agent_inbox_acks_total", "counter", "Acknowledgements accepted, by tenant and result"),
    ("agent_inbox_ack_latency_seconds", "histogram", "Acknowledge request latency"),
    (
        "agent_inbox_delivery_latency_seconds",
        "histogram",
        "Time from an event becoming available to its first claim",
    ),
    (
        "agent_inbox_lease_expirations_total",
        "counter",
        "Leases that ran out and returned their event to the inbox",
    ),
    ("agent_inbox_dead_lettered_total", "counter", "Events dead-lettered by the scavenger"),
    ("agent_inbox_expired_total", "counter", "Events that passed expires_at unclaimed"),
    ("agent_inbox_archived_total", "counter", "Terminal events moved to the archive by retention"),
    ("agent_inbox_cursor_resets_total", "counter", "Polls answered with cursor_reset_required, by tenant"),
    ("agent_inbox_rate_limited_total", "counter", "Requests refused by a rate limit or waiter cap, by code"),
    ("agent_inbox_auth_failures_total", "counter", "Requests refused for authentication, by code"),
    ("agent_inbox_database_up", "gauge", "1 while the database answers, 0 while it is unreachable"),
    (
        "agent_inbox_database_unavailable_total",
        "counter",
        "Requests answered 503 database_unavailable because the database could not be reached",
    ),
    ("agent_inbox_tls_reloads_total", "counter", "TLS certificate reloads, by result (loaded or refused)"),
    ("agent_inbox_backlog", "gauge", "Unacknowledged events (available, scheduled, claimed) per tenant"),
    ("agent_inbox_parked", "gauge", "Dead-lettered and quarantined events per tenant"),
    ("agent_inbox_oldest_unacked_age_seconds", "gauge", "Age of the oldest unacknowledged event per tenant"),
    ("agent_inbox_inbox_depth", "gauge", "Unacknowledged events of the deepest inboxes (top 20 per tenant)"),
    (
        "agent_inbox_publish_to_signal_seconds",
        "histogram",
        "Publish-to-signal latency: outbox row written to the notifier handing its hint to this node",
    ),
    ("agent_inbox_signals_read_total", "counter", "outbox_signal rows the notifier read (re-reads included)"),
    (
        "agent_inbox_signal_gaps_abandoned_total",
        "counter",
        "Skipped outbox ids the notifier stopped waiting for (rolled back, or later than the grace period)",
    ),
    ("agent_inbox_signals_deleted_total", "counter", "outbox_signal rows deleted by retention"),
    ("agent_inbox_stream_connects_total", "counter", "SSE and WebSocket streams opened, by transport"),
    (
        "agent_inbox_stream_reconnects_total",
        "counter",
        "Streams opened with a Last-Event-ID (a client resuming), by transport",
    ),
    (
        "agent_inbox_connected_streams",
        "gauge",
        "Open streams and waiting long polls on this node, by transport",
    ),
    (
        "agent_inbox_hints_sent_total",
        "counter",
        "inbox.updated hints written to streams, by tenant and transport; fetches/hints is the hint-to-fetch ratio",
    ),
    (
        "agent_inbox_fetches_total",
        "counter",
        "Poll and claim requests (what a hint should lead to), by tenant and kind",
    ),
    ("agent_inbox_ws_requests_total", "counter", "Operations sent over WebSockets, by op and status"),
    (
        "agent_inbox_long_polls_total",
        "counter",
        "Long polls by outcome (events, timeout, shutdown); timeout/total is the long-poll timeout ratio",
    ),
    (
        "agent_inbox_head_requests_total",
        "counter",
        "Head checks by result (not_modified, modified); not_modified/total is the 304 ratio",
    ),
    (
        "agent_inbox_signature_verifications_total",
        "counter",
        "Signed requests checked, by result (valid, refused); refusals also count under auth failures by code",
    ),
    (
        "agent_inbox_signature_verify_seconds",
        "histogram",
        "Time to verify one request signature, key lookup included (its nonce is written afterwards)",
    ),
    (
        "agent_inbox_signature_nonce_seconds",
        "histogram",
        "Time a signed request waits for its nonce to be recorded (shared statements, see nonce_writer)",
    ),
    (
        "agent_inbox_signature_nonce_writes_total",
        "counter",
        "Statements that recorded signature nonces; nonces recorded are valid verifications",
    ),
    ("agent_inbox_signature_replays_total", "counter", "Signed requests refused as replays of a used nonce"),
    ("agent_inbox_callback_challenges_total", "counter", "Callback registration challenges, by outcome"),
    (
        "agent_inbox_callback_deliveries_total",
        "counter",
        "Webhook hint deliveries by tenant and outcome (delivered, failed, abandoned)",
    ),
    ("agent_inbox_callback_delivery_seconds", "histogram", "Duration of one webhook delivery attempt"),
    (
        "agent_inbox_callback_fanout_deferred_total",
        "counter",
        "Due webhook deliveries left for a later pass by the per-tenant fan-out cap",
    ),
];

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

    pub fn count(&self, name: &'static str, labels: Labels, by: u64) {
        let mut families = self.families.lock().expect("metrics lock");
        *families.counters.entry(name).or_default().entry(labels).or_default() += by;
    }

    pub fn observe(&self, name: &'static str, labels: Labels, value: Duration) {
        self.record(name, labels, value.as_secs_f64());
    }

    /// Records how many of something (a batch's size) in a `_size` histogram.
    pub fn observe_size(&self, name: &'static str, labels: Labels, n: usize) {
        debug_assert!(name.ends_with("_size"), "size histograms are named *_size");
        self.record(name, labels, n as f64);
    }

    fn record(&self, name: &'static str, labels: Labels, value: f64) {
        let bounds = buckets(name);
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

    /// Moves one gauge series up or down (open connections).
    pub fn add_gauge(&self, name: &'static str, labels: Labels, delta: f64) {
        let mut families = self.families.lock().expect("metrics lock");
        *families.gauges.entry(name).or_default().entry(labels).or_default() += delta;
    }

    /// Sets one gauge series.
    pub fn set_gauge(&self, name: &'static str, labels: Labels, value: f64) {
        let mut families = self.families.lock().expect("metrics lock");
        families.gauges.entry(name).or_default().insert(labels, value);
    }

    /// Replaces every series of a gauge at once (a fresh snapshot of backlogs).
    pub fn set_gauge_family(&self, name: &'static str, series: Vec<(Labels, f64)>) {
        let mut families = self.families.lock().expect("metrics lock");
        families.gauges.insert(name, series.into_iter().collect());
    }

    /// The Prometheus text exposition of everything recorded.
    pub fn render(&self) -> String {
        let families = self.families.lock().expect("metrics lock");
        let mut out = String::new();
        for (name, kind, help) in HELP {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            match *kind {
                "counter" => {
                    for (labels, value) in families.counters.get(name).into_iter().flatten() {
                        let _ = writeln!(out, "{name}{} {value}", render_labels(labels, None));
                    }
                }
                "gauge" => {
                    for (labels, value) in families.gauges.get(name).into_iter().flatten() {
                        let _ = writeln!(out, "{name}{} {value}", render_labels(labels, None));
                    }
                }
                _ => {
                    for (labels, h) in families.histograms.get(name).into_iter().flatten() {
                        for (count, bound) in h.counts.iter().zip(buckets(name)) {
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
        metrics.count("agent_inbox_claims_total", vec![("tenant", "t1".into())], 3);
        metrics.observe("agent_inbox_ack_latency_seconds", vec![], Duration::from_millis(3));
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
}
