//! `inbox-bench publish`: the paths a deployment runs most, through a node as shipped (its
//! default `info` access log, written to a file), beside the SQL a user would write by hand, in
//! one run on MariaDB:
//! - publishing at 1, 4, 16 and 64 publishers, one event to one recipient each, against one
//!   transaction per event (advance the head, read it, insert the row, commit), and through a
//!   second node logging at `warn`, for what the access log costs;
//! - claim(10)+ack at 1, 4 and 16 agents, an inbox each ([`crate::hot_paths`]);
//! - the `304` head at 16 connections against `SELECT head_seq` by primary key;
//! - the HTTP floor: `GET /healthz` (no database, no token) at 1, 4 and 16 connections, what
//!   the hop from client to node costs before a route does any work, so a publish's latency
//!   reads as the database's share, the hop's and the node's own.
//!
//! Each row runs in paired rounds (the sides take turns, in a rotating order); a ratio is the
//! median of the rounds' ratios. The node runs in a child process, so the load generator here
//! does not share its runtime. Fsyncs, redo-log writes and statements per event are read from
//! the server's own counters (`Innodb_os_log_fsyncs` on MySQL, `Innodb_data_fsyncs` on MariaDB,
//! which counts its log flushes there; `Innodb_log_writes`; `Questions`): server-wide, so the
//! node's background reads are in them, as part of what the service costs.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use inbox_core::TenantId;
use inbox_server::TokenService;
use serde_json::json;
use sqlx::{MySqlPool, Row as _};
use tokio::task::JoinSet;

use crate::hot_paths::{self, Rounds, Show, Side};
use crate::node::{Node, NodeSettings};
use crate::subjects::Subjects;
use crate::{BenchError, mysql_db, raw};

/// Sizes of the `publish` benchmark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishArgs {
    /// Publishes per side and round (each of one event to one recipient).
    pub publishes: usize,
    /// Paired rounds per row.
    pub rounds: usize,
}

impl Default for PublishArgs {
    fn default() -> Self {
        Self { publishes: 2_000, rounds: 3 }
    }
}

const CONCURRENCY: [usize; 4] = [1, 4, 16, 64];
/// Recipients, taken round robin, so publishers rarely queue on one head row.
const RECIPIENTS: usize = 100;
/// The targets of the issue: HTTP over the hand-written transaction at 1, 4 and 16 publishers.
const TARGETS: [(usize, f64); 3] = [(1, 0.9), (4, 1.2), (16, 2.0)];

/// Where a publish goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Publisher {
    ByHand,
    /// The node as shipped (`info`).
    Shipped,
    /// The node logging at `warn`.
    Quiet,
}

pub async fn main(args: PublishArgs) -> ExitCode {
    mysql_db::report_in_fresh_database(String::new(), |db| run(args, db.url.clone())).await
}

async fn run(args: PublishArgs, url: String) -> Result<String, BenchError> {
    let subjects = Subjects::connect(&url).await?;
    let config = Node::config(&url);
    let logging = |level: &str| NodeSettings { log: Some(level.to_owned()), ..NodeSettings::default() };
    let shipped = Node::spawn_with(&url, true, &logging("info")).await?;
    let quiet = Node::spawn_with(&url, true, &logging("warn")).await?;
    let tokens =
        TokenService::new(subjects.store.clone(), &config).await.map_err(|e| -> BenchError { e.into() })?;
    let publisher = crate::node::publisher_token(&tokens, &TenantId::new("bench-publish-http")?).await?;
    let targets = Targets { subjects: &subjects, shipped: &shipped, quiet: &quiet, publisher: &publisher };
    // Warm every path (connections, prepared statements, head rows) before measuring.
    for side in [Publisher::ByHand, Publisher::Shipped, Publisher::Quiet] {
        targets.row(side, 16, RECIPIENTS * 2).await?;
    }

    let mut report = String::from(
        "publish: one event to one recipient per publish; by hand = one transaction per event \
         (UPDATE head, SELECT head, INSERT event, COMMIT); HTTP = the node as shipped (info access \
         log to a file); warn = a node logging at warn\n\n\
         publishers |  by hand: ev/s  p50 ms  p99 ms fsync/ev stmt/ev |  HTTP: ev/s  p50 ms  p99 ms fsync/ev stmt/ev |  warn: ev/s  p99 ms | HTTP/hand warn/hand\n",
    );
    let mut ratios = Vec::new();
    for concurrency in CONCURRENCY {
        eprintln!("publish: {concurrency} publishers, {} rounds", args.rounds);
        let mut rounds = Rounds::new(["by hand", "HTTP", "warn"]);
        for round in 0..args.rounds {
            for turn in 0..3 {
                let side = (round + turn) % 3;
                let publisher = [Publisher::ByHand, Publisher::Shipped, Publisher::Quiet][side];
                let measured =
                    measured(&subjects.raw, targets.row(publisher, concurrency, args.publishes)).await?;
                rounds.add(round, side, measured);
            }
        }
        let http = rounds.median_ratio(1, 0);
        let warn = rounds.median_ratio(2, 0);
        ratios.push((concurrency, http));
        report.push_str(&format!(
            "{concurrency:>10} | {} | {} | {} | {http:>9.2} {warn:>9.2}\n",
            rounds.cells(0, Show::All),
            rounds.cells(1, Show::All),
            rounds.cells(2, Show::RateP99)
        ));
    }
    report.push('\n');
    for (concurrency, target) in TARGETS {
        let ratio = ratios.iter().find(|(c, _)| *c == concurrency).map_or(0.0, |(_, r)| *r);
        report.push_str(&hot_paths::verdict(
            &format!("publish at {concurrency:>2} publishers"),
            ratio,
            target,
        ));
    }
    report.push('\n');
    report.push_str(&hot_paths::claim_ack_table(&subjects, &shipped, &tokens, args.rounds).await?);
    report.push('\n');
    report.push_str(&hot_paths::head_table(&subjects, &shipped, &tokens, args.rounds).await?);
    report.push('\n');
    report.push_str(&floor_table(&shipped, args.publishes).await?);
    shipped.stop().await;
    quiet.stop().await;
    subjects.close().await;
    Ok(report)
}

/// The three ways to publish.
struct Targets<'a> {
    subjects: &'a Subjects,
    shipped: &'a Node,
    quiet: &'a Node,
    publisher: &'a str,
}

impl Targets<'_> {
    async fn row(&self, side: Publisher, concurrency: usize, publishes: usize) -> Result<Side, BenchError> {
        match side {
            Publisher::ByHand => {
                by_hand_row(&self.subjects.raw, "bench-publish-raw", concurrency, publishes).await
            }
            Publisher::Shipped => http_row(self.shipped, self.publisher, concurrency, publishes).await,
            Publisher::Quiet => http_row(self.quiet, self.publisher, concurrency, publishes).await,
        }
    }
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
    // The two reads of the counters are statements too.
    side.statements = after.statements.saturating_sub(before.statements).saturating_sub(2);
    Ok(side)
}

/// The server's own counters of durable work, server-wide.
#[derive(Debug, Default)]
struct Counters {
    fsyncs: u64,
    statements: u64,
}

impl Counters {
    async fn read(pool: &MySqlPool) -> Result<Counters, BenchError> {
        let rows = sqlx::query(
            "SHOW GLOBAL STATUS WHERE Variable_name IN \
             ('Innodb_os_log_fsyncs', 'Innodb_data_fsyncs', 'Questions')",
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

async fn by_hand_row(
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
                raw::publish_by_hand(&pool, &tenant, &format!("agent-{:03}", i % RECIPIENTS)).await?;
                latencies.push(call.elapsed());
            }
            Ok::<_, BenchError>(latencies)
        });
    }
    hot_paths::collect(workers, started).await
}

async fn http_row(
    node: &Node,
    publisher: &str,
    concurrency: usize,
    publishes: usize,
) -> Result<Side, BenchError> {
    let (url, publisher) = (format!("{}/v1/events", node.base), Arc::<str>::from(publisher));
    http_side(node, concurrency, publishes, reqwest::StatusCode::CREATED, move |client, i| {
        let body = json!({
            "recipients": [format!("agent-{:03}", i % RECIPIENTS)],
            "event_type": raw::EVENT_TYPE,
            "payload": {"text": "Please analyze the attached logs.", "n": i},
        });
        client.post(&url).bearer_auth(&*publisher).json(&body)
    })
    .await
}

/// `requests` calls to `node` over `concurrency` workers, call `i` made by `request`, each of
/// which must answer `expected`; a call's latency runs from building its request to reading
/// the whole answer.
async fn http_side(
    node: &Node,
    concurrency: usize,
    requests: usize,
    expected: reqwest::StatusCode,
    request: impl Fn(&reqwest::Client, usize) -> reqwest::RequestBuilder + Send + Sync + 'static,
) -> Result<Side, BenchError> {
    let started = Instant::now();
    let request = Arc::new(request);
    let mut workers = JoinSet::new();
    for worker in 0..concurrency {
        let (client, request) = (node.client.clone(), request.clone());
        workers.spawn(async move {
            let mut latencies = Vec::new();
            for i in (worker..requests).step_by(concurrency) {
                let call = Instant::now();
                let response = request(&client, i).send().await?;
                if response.status() != expected {
                    let (url, status) = (response.url().path().to_owned(), response.status());
                    return Err(format!("{url} answered {status}, not {expected}").into());
                }
                let _ = response.bytes().await?;
                latencies.push(call.elapsed());
            }
            Ok::<_, BenchError>(latencies)
        });
    }
    hot_paths::collect(workers, started).await
}

/// The HTTP floor: `GET /healthz` at 1, 4 and 16 connections, through the client the publish
/// rows use.
async fn floor_table(node: &Node, requests: usize) -> Result<String, BenchError> {
    let mut table = String::from(
        "HTTP floor: GET /healthz through the same client (no database, no token): what the hop \
         to the node costs before a route works\n\n\
         connections |      req/s  p50 ms  p99 ms\n",
    );
    for concurrency in [1, 4, 16] {
        eprintln!("floor: {concurrency} connections");
        let url = format!("{}/healthz", node.base);
        let side = http_side(node, concurrency, requests, reqwest::StatusCode::OK, move |client, _| {
            client.get(&url)
        })
        .await?;
        let mut rounds = Rounds::new(["floor"]);
        rounds.add(0, 0, side);
        table.push_str(&format!("{concurrency:>11} | {}\n", rounds.cells(0, Show::Latencies)));
    }
    Ok(table)
}
