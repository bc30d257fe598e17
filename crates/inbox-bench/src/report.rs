//! The printed result: what one side of one row measured, percentiles over sorted latencies,
//! and the plain-text table with the target the store is held to.

use std::fmt::Write as _;
use std::time::Duration;

/// The store should keep at least this share of the raw baseline's throughput on every row.
pub const TARGET_RATIO: f64 = 0.80;

/// What one side (store or raw) of one row measured.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Events published, or claimed and acknowledged.
    pub events: u64,
    /// Wall time of the row, first worker start to last worker end, summed over rounds.
    pub elapsed: Duration,
    /// One publish call, or one claim+ack batch (claim call, building the ack, ack call).
    pub latencies: Vec<Duration>,
    /// claim+ack rows only: the claim call of each batch.
    pub claim_latencies: Vec<Duration>,
    /// claim+ack rows only: the acknowledge call of each batch.
    pub ack_latencies: Vec<Duration>,
    /// CPU time of this process (every thread) while the workers ran, when measurable.
    pub client_cpu: Option<Duration>,
    /// Events per second of each round, in round order.
    pub round_rates: Vec<f64>,
    /// Transactions the raw baseline ran again after a deadlock or lock-wait timeout. The
    /// store retries the same errors inside and does not say how often.
    pub contention_retries: u64,
}

impl Measured {
    pub fn events_per_second(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds > 0.0 { self.events as f64 / seconds } else { 0.0 }
    }

    /// Folds in one round of the same row: its events, time and samples add up.
    pub fn add_round(&mut self, round: Measured) {
        let first = self.events == 0 && self.elapsed.is_zero();
        self.client_cpu = match (first, self.client_cpu, round.client_cpu) {
            (true, _, cpu) => cpu,
            (false, Some(sum), Some(cpu)) => Some(sum + cpu),
            (false, _, _) => None,
        };
        self.round_rates.push(round.events_per_second());
        self.elapsed += round.elapsed;
        self.absorb(round);
    }

    /// Client CPU per event in microseconds, when measured.
    pub fn cpu_us_per_event(&self) -> Option<f64> {
        let cpu = self.client_cpu?;
        (self.events > 0).then(|| cpu.as_secs_f64() * 1e6 / self.events as f64)
    }

    /// Folds in one worker's samples; the row's elapsed time is measured around all workers.
    pub fn absorb(&mut self, worker: Measured) {
        self.events += worker.events;
        self.contention_retries += worker.contention_retries;
        self.latencies.extend(worker.latencies);
        self.claim_latencies.extend(worker.claim_latencies);
        self.ack_latencies.extend(worker.ack_latencies);
    }

    fn sort(&mut self) {
        self.latencies.sort_unstable();
        self.claim_latencies.sort_unstable();
        self.ack_latencies.sort_unstable();
    }
}

/// One workload at one concurrency, measured through both sides.
#[derive(Debug, Clone)]
pub struct Row {
    pub workload: &'static str,
    pub concurrency: usize,
    pub store: Measured,
    pub raw: Measured,
}

impl Row {
    pub fn ratio(&self) -> f64 {
        let raw = self.raw.events_per_second();
        if raw > 0.0 { self.store.events_per_second() / raw } else { 0.0 }
    }
}

impl Row {
    /// Store/raw ratios of the rounds, sorted. In each round the two sides ran back to back,
    /// so a round's ratio is little affected by load that changes from round to round.
    fn round_ratios(&self) -> Vec<f64> {
        let mut ratios: Vec<f64> = self
            .store
            .round_rates
            .iter()
            .zip(&self.raw.round_rates)
            .filter(|(_, raw)| **raw > 0.0)
            .map(|(store, raw)| store / raw)
            .collect();
        ratios.sort_unstable_by(f64::total_cmp);
        ratios
    }
}

/// The value at or below which `p` percent of the samples fall (nearest rank), from samples
/// already sorted ascending; zero when there are none.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The report as text: the main table, the claim/ack split, and the target.
pub fn render(title: &str, notes: &[String], rows: &mut [Row]) -> String {
    for row in rows.iter_mut() {
        row.store.sort();
        row.raw.sort();
    }
    let mut out = String::new();
    let _ = writeln!(out, "{title}");
    for note in notes {
        let _ = writeln!(out, "{note}");
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<10} {:>4} {:>12} {:>12} {:>9} {:>10} {:>10} {:>10} {:>10}",
        "workload",
        "conc",
        "store ev/s",
        "raw ev/s",
        "store/raw",
        "store p50",
        "store p99",
        "raw p50",
        "raw p99"
    );
    for row in rows.iter() {
        let ratio = row.ratio();
        let _ = writeln!(
            out,
            "{:<10} {:>4} {:>12.0} {:>12.0} {:>9.2} {:>10} {:>10} {:>10} {:>10}{}",
            row.workload,
            row.concurrency,
            row.store.events_per_second(),
            row.raw.events_per_second(),
            ratio,
            ms(percentile(&row.store.latencies, 50.0)),
            ms(percentile(&row.store.latencies, 99.0)),
            ms(percentile(&row.raw.latencies, 50.0)),
            ms(percentile(&row.raw.latencies, 99.0)),
            if ratio < TARGET_RATIO { "  < below target" } else { "" }
        );
    }
    let _ = writeln!(
        out,
        "latencies in ms: publish = one publish call; claim+ack = one batch (claim 10, ack 10)"
    );

    let split: Vec<&Row> = rows.iter().filter(|r| !r.store.claim_latencies.is_empty()).collect();
    if !split.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "claim+ack per call, ms (p50 / p99):");
        let _ = writeln!(
            out,
            "{:<10} {:>4} {:>15} {:>15} {:>15} {:>15}",
            "workload", "conc", "store claim", "raw claim", "store ack", "raw ack"
        );
        for row in split {
            let _ = writeln!(
                out,
                "{:<10} {:>4} {:>15} {:>15} {:>15} {:>15}",
                row.workload,
                row.concurrency,
                pair(&row.store.claim_latencies),
                pair(&row.raw.claim_latencies),
                pair(&row.store.ack_latencies),
                pair(&row.raw.ack_latencies),
            );
        }
    }

    let _ = writeln!(out);
    let _ = writeln!(out, "per round (sides back to back) and client CPU (this process, not the server):");
    let _ = writeln!(
        out,
        "{:<10} {:>4} {:>27} {:>15} {:>15}",
        "workload", "conc", "round store/raw min/med/max", "store CPU us/ev", "raw CPU us/ev"
    );
    for row in rows.iter() {
        let ratios = row.round_ratios();
        let spread = match (ratios.first(), ratios.last()) {
            (Some(min), Some(max)) => format!("{min:.2} / {:.2} / {max:.2}", ratios[ratios.len() / 2]),
            _ => "n/a".to_owned(),
        };
        let _ = writeln!(
            out,
            "{:<10} {:>4} {:>27} {:>15} {:>15}",
            row.workload,
            row.concurrency,
            spread,
            micros(row.store.cpu_us_per_event()),
            micros(row.raw.cpu_us_per_event()),
        );
    }

    let retried: Vec<String> = rows
        .iter()
        .filter(|r| r.raw.contention_retries > 0)
        .map(|r| format!("{} x{}: {}", r.workload, r.concurrency, r.raw.contention_retries))
        .collect();
    if !retried.is_empty() {
        let _ = writeln!(
            out,
            "raw transactions retried after a deadlock or lock-wait timeout (the store retries these \
             silently): {}",
            retried.join(", ")
        );
    }

    let _ = writeln!(out);
    let _ = writeln!(out, "target: ratio >= {TARGET_RATIO:.2} for every row");
    let below = rows.iter().filter(|r| r.ratio() < TARGET_RATIO).count();
    if below == 0 {
        let _ = writeln!(out, "every row meets the target");
    } else {
        let _ = writeln!(out, "{below} row(s) below target, marked with <");
    }
    for row in rows.iter().filter(|r| r.ratio() < TARGET_RATIO) {
        let ratios = row.round_ratios();
        if let Some(median) = ratios.get(ratios.len() / 2).filter(|m| **m >= TARGET_RATIO) {
            let _ = writeln!(
                out,
                "{} x{}: the median round ratio is {median:.2}, so load changing between rounds \
                 most likely moved the whole-row ratio; rerun on a quieter machine",
                row.workload, row.concurrency
            );
        }
    }
    out
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1_000.0)
}

fn micros(value: Option<f64>) -> String {
    value.map_or_else(|| "n/a".to_owned(), |us| format!("{us:.0}"))
}

fn pair(sorted: &[Duration]) -> String {
    format!("{} / {}", ms(percentile(sorted, 50.0)), ms(percentile(sorted, 99.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&samples, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&samples, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&samples, 100.0), Duration::from_millis(100));
        assert_eq!(percentile(&samples[..1], 99.0), Duration::from_millis(1));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }
}
