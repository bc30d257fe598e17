//! `inbox-bench publish`: HTTP publishing (the node in a child process, so its batcher commits
//! concurrent publishes together) beside raw SQL committing one transaction per event, at 1,
//! 4, 16 and 64 concurrent publishers, in one run on MariaDB. For each: events/s, p50/p99, and
//! what explains them, fsyncs, redo-log writes and statements per event, read from the
//! server's own counters (`Innodb_os_log_fsyncs` on MySQL, `Innodb_data_fsyncs` on MariaDB,
//! which counts its log flushes there; `Innodb_log_writes`; `Questions`). They are
//! server-wide: the node's background reads are in them, as part of what the service costs.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use inbox_core::TenantId;
use inbox_server::TokenService;
use serde_json::json;
use sqlx::{MySqlPool, Row as _};
use tokio::task::JoinSet;

use crate::node::Node;
use crate::report::percentile;
use crate::subjects::Subjects;
use crate::{BenchError, mysql_db, raw};

/// Sizes of the `publish` benchmark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishArgs {
    /// Publishes per row (each of one event to one recipient).
    pub publishes: usize,
}

impl Default for PublishArgs {
    fn default() -> Self {
        Self { publishes: 4_000 }
    }
}

const CONCURRENCY: [usize; 4] = [1, 4, 16, 64];
/// Recipients, taken round robin, so publishers rarely queue on one head row.
const RECIPIENTS: usize = 100;
/// The targets of the group-commit issue: HTTP over raw at 1, 4 and 16 publishers.
const TARGETS: [(usize, f64); 3] = [(1, 0.9), (4, 1.0), (16, 1.5)];

/// One side of one row.
#[derive(Debug, Default)]
struct Side {
    events: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    fsyncs: u64,
    log_writes: u64,
    statements: u64,
}

impl Side {
    fn rate(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn cells(&mut self) -> String {
        self.latencies.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let per = |n: u64| n as f64 / self.events.max(1) as f64;
        format!(
            "{:>9.0} {:>7.2} {:>7.2} {:>8.2} {:>7.2} {:>7.2}",
            self.rate(),
            ms(percentile(&self.latencies, 50.0)),
            ms(percentile(&self.latencies, 99.0)),
            per(self.fsyncs),
            per(self.log_writes),
            per(self.statements)
        )
    }
}

pub async fn main(args: PublishArgs) -> ExitCode {
    mysql_db::report_in_fresh_database(String::new(), |db| run(args, db.url.clone())).await
}

async fn run(args: PublishArgs, url: String) -> Result<String, BenchError> {
    let subjects = Subjects::connect(&url).await?;
    let config = Node::config(&url);
    let node = Node::spawn(&url).await?;
    let tokens =
        TokenService::new(subjects.store.clone(), &config).await.map_err(|e| -> BenchError { e.into() })?;
    let publisher = crate::node::publisher_token(&tokens, &TenantId::new("bench-publish-http")?).await?;
    // Warm both paths (connections, prepared statements, head rows) before measuring.
    raw_row(&subjects.raw, "bench-publish-raw", 16, RECIPIENTS * 2).await?;
    http_row(&node, &publisher, 16, RECIPIENTS * 2).await?;

    let mut report = String::from(
        "publish: one event to one recipient per publish; raw SQL = one transaction per event \
         (UPDATE head, SELECT head, INSERT event, INSERT signal, COMMIT)\n\n\
         publishers |  raw SQL: ev/s  p50 ms  p99 ms fsync/ev logw/ev stmt/ev |     HTTP: ev/s  p50 ms  p99 ms fsync/ev logw/ev stmt/ev | HTTP/raw\n",
    );
    let mut ratios = Vec::new();
    for concurrency in CONCURRENCY {
        eprintln!("publish: {concurrency} publishers");
        let mut raw_side =
            measured(&subjects.raw, raw_row(&subjects.raw, "bench-publish-raw", concurrency, args.publishes))
                .await?;
        let mut http_side =
            measured(&subjects.raw, http_row(&node, &publisher, concurrency, args.publishes)).await?;
        let ratio = http_side.rate() / raw_side.rate().max(1e-9);
        ratios.push((concurrency, ratio));
        report.push_str(&format!(
            "{concurrency:>10} | {} | {} | {ratio:>7.2}\n",
            raw_side.cells(),
            http_side.cells()
        ));
    }
    report.push('\n');
    for (concurrency, target) in TARGETS {
        let ratio = ratios.iter().find(|(c, _)| *c == concurrency).map_or(0.0, |(_, r)| *r);
        let verdict = if ratio >= target { "met" } else { "NOT met" };
        report.push_str(&format!(
            "target at {concurrency:>2} publishers: HTTP >= {target:.1} x raw SQL: {ratio:.2} ({verdict})\n"
        ));
    }
    node.stop().await;
    Ok(report)
}

/// Runs `row`, reading the server's counters of durable work around it.
async fn measured(
    pool: &MySqlPool,
    row: impl Future<Output = Result<Side, BenchError>>,
) -> Result<Side, BenchError> {
    let before = Counters::read(pool).await?;
    let mut side = row.await?;
    let after = Counters::read(pool).await?;
    side.fsyncs = after.fsyncs.saturating_sub(before.fsyncs);
    side.log_writes = after.log_writes.saturating_sub(before.log_writes);
    // The two reads of the counters are statements too.
    side.statements = after.statements.saturating_sub(before.statements).saturating_sub(2);
    Ok(side)
}

/// The server's own counters of durable work, server-wide.
#[derive(Debug, Default)]
struct Counters {
    fsyncs: u64,
    log_writes: u64,
    statements: u64,
}

impl Counters {
    async fn read(pool: &MySqlPool) -> Result<Counters, BenchError> {
        let rows = sqlx::query(
            "SHOW GLOBAL STATUS WHERE Variable_name IN \
             ('Innodb_os_log_fsyncs', 'Innodb_data_fsyncs', 'Innodb_log_writes', 'Questions')",
        )
        .fetch_all(pool)
        .await?;
        let mut counters = Counters::default();
        let mut os_log_fsyncs = None;
        for row in rows {
            let name: String = row.try_get(0)?;
            let value: String = row.try_get(1)?;
            let value: u64 = value.parse().map_err(|_| format!("{name} is not a number: {value}"))?;
            match name.to_ascii_lowercase().as_str() {
                "innodb_os_log_fsyncs" => os_log_fsyncs = Some(value),
                "innodb_data_fsyncs" => counters.fsyncs = value,
                "innodb_log_writes" => counters.log_writes = value,
                "questions" => counters.statements = value,
                other => return Err(format!("unexpected status variable {other}").into()),
            }
        }
        // MySQL counts redo-log flushes apart; MariaDB 10.8+ only with the data files'.
        if let Some(log) = os_log_fsyncs {
            counters.fsyncs = log;
        }
        Ok(counters)
    }
}

async fn raw_row(
    pool: &MySqlPool,
    tenant: &str,
    concurrency: usize,
    publishes: usize,
) -> Result<Side, BenchError> {
    let started = Instant::now();
    let mut workers = JoinSet::new();
    for worker in 0..concurrency {
        let (pool, tenant) = (pool.clone(), tenant.to_owned());
        workers.spawn(async move {
            let mut latencies = Vec::new();
            for i in (worker..publishes).step_by(concurrency) {
                let call = Instant::now();
                raw::publish(&pool, &tenant, &format!("agent-{:03}", i % RECIPIENTS)).await?;
                latencies.push(call.elapsed());
            }
            Ok::<_, BenchError>(latencies)
        });
    }
    collect(workers, started).await
}

async fn http_row(
    node: &Node,
    publisher: &str,
    concurrency: usize,
    publishes: usize,
) -> Result<Side, BenchError> {
    let started = Instant::now();
    let publisher: Arc<str> = publisher.into();
    let mut workers = JoinSet::new();
    for worker in 0..concurrency {
        let (client, base, publisher) = (node.client.clone(), node.base.clone(), publisher.clone());
        workers.spawn(async move {
            let mut latencies = Vec::new();
            for i in (worker..publishes).step_by(concurrency) {
                let body = json!({
                    "recipients": [format!("agent-{:03}", i % RECIPIENTS)],
                    "event_type": raw::EVENT_TYPE,
                    "payload": {"text": "Please analyze the attached logs.", "n": i},
                });
                let call = Instant::now();
                let response = client
                    .post(format!("{base}/v1/events"))
                    .bearer_auth(&*publisher)
                    .json(&body)
                    .send()
                    .await?;
                let status = response.status();
                let _ = response.bytes().await?;
                if status != reqwest::StatusCode::CREATED {
                    return Err(format!("publish answered {status}").into());
                }
                latencies.push(call.elapsed());
            }
            Ok::<_, BenchError>(latencies)
        });
    }
    collect(workers, started).await
}

async fn collect(
    mut workers: JoinSet<Result<Vec<Duration>, BenchError>>,
    started: Instant,
) -> Result<Side, BenchError> {
    let mut side = Side::default();
    while let Some(worker) = workers.join_next().await {
        side.latencies.extend(worker??);
    }
    side.elapsed = started.elapsed();
    side.events = side.latencies.len();
    Ok(side)
}
