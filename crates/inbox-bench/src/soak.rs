//! `inbox-bench soak`: an hour of steady load through the HTTP API while retention turns rows
//! over into the archive and prunes the archive (issue 27). Not for CI: it runs for
//! `--minutes`.
//!
//! A service node in a child process on MariaDB (a database of its own), with a short
//! `retention` and `archive_retention` so that acknowledged rows leave `agent_inbox` for the
//! archive, and archived ones are pruned, all through the run. This process publishes
//! `--rate` events/s over `--agents` agents (one recipient a publish, paced) and each agent
//! claims 10 and acknowledges them. Per `--window-minutes` it prints the p99 of publish, claim
//! and acknowledge, the node's resident memory (VmRSS), and the rows in the live table and
//! the archive. Targets: each p99 of the last window at most 1.5 times the first's, the RSS of
//! the last within 10 % of the first's.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use inbox_core::{RecipientId, TenantId};
use inbox_server::{CallerKind, TokenService};
use inbox_store::{ConnectOptions, SqlStore, StoreConfig};
use serde_json::json;
use sqlx::{Connection as _, Row as _};
use tokio::sync::Mutex;
use tokio::task::JoinSet;

use crate::http::{acks_for, call};
use crate::node::{Node, NodeSettings};
use crate::report::percentile;
use crate::{BenchError, mysql_db};

const TENANT: &str = "bench-soak";
const CLAIM_LIMIT: u32 = 10;
/// How long an agent whose claim came back empty waits before the next.
const IDLE_POLL: Duration = Duration::from_millis(100);
/// Concurrent publishers sharing the rate.
const PUBLISHERS: u64 = 4;
/// The targets: p99 growth first to last window, and RSS change.
const TARGET_P99_RATIO: f64 = 1.5;
const TARGET_RSS_CHANGE: f64 = 0.10;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoakArgs {
    pub minutes: u64,
    pub rate: u64,
    pub agents: usize,
    pub window_minutes: u64,
    pub retention_seconds: u64,
    pub archive_retention_seconds: u64,
}

impl Default for SoakArgs {
    fn default() -> Self {
        Self {
            minutes: 60,
            rate: 100,
            agents: 8,
            window_minutes: 5,
            retention_seconds: 300,
            archive_retention_seconds: 1_200,
        }
    }
}

pub async fn main(args: SoakArgs) -> ExitCode {
    mysql_db::report_in_fresh_database(String::new(), move |db| {
        let url = db.url.clone();
        async move { run(&args, &url).await }
    })
    .await
}

/// Latencies of one window, by operation.
#[derive(Debug, Default)]
struct Samples {
    publish: Vec<Duration>,
    claim: Vec<Duration>,
    ack: Vec<Duration>,
}

struct WindowRow {
    minute: u64,
    published: usize,
    acked: usize,
    p99: [Duration; 3],
    rss_kib: Option<u64>,
    live_rows: i64,
    archived_rows: i64,
}

async fn run(args: &SoakArgs, url: &str) -> Result<String, BenchError> {
    let store = SqlStore::connect(&ConnectOptions::new(url), StoreConfig::default()).await?;
    store.migrate().await?;
    crate::secrets::prepare(&store, url).await?;
    let settings = NodeSettings {
        retention: Some(Duration::from_secs(args.retention_seconds)),
        archive_retention: Some(Duration::from_secs(args.archive_retention_seconds)),
        log: None,
        tenant_requests_per_second: None,
    };
    let tokens =
        TokenService::new(store.clone(), &Node::config(url)).await.map_err(|e| -> BenchError { e.into() })?;
    let tenant_id = TenantId::new(TENANT)?;
    // Tokens for the whole run: the default access token lives 15 minutes.
    let ttl = Some(Duration::from_secs((args.minutes + 10) * 60));
    let publisher = tokens
        .issue(
            &tenant_id,
            &RecipientId::new("bench-app")?,
            CallerKind::Publisher,
            "events.publish",
            ttl,
            false,
        )
        .await
        .map_err(|e| format!("{}: {}", e.code, e.detail))?
        .access_token;
    let mut agents = Vec::with_capacity(args.agents);
    for n in 0..args.agents {
        let id = RecipientId::new(format!("agent-{n:03}"))?;
        let token = tokens
            .issue(&tenant_id, &id, CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES, ttl, false)
            .await
            .map_err(|e| format!("{}: {}", e.code, e.detail))?
            .access_token;
        agents.push((id.to_string(), token));
    }
    store.close().await;
    let node = Node::spawn_with(url, true, &settings).await?;
    let outcome = soak(args, url, &node, &publisher, &agents).await;
    node.stop().await;
    let rows = outcome?;
    Ok(render(args, &rows))
}

async fn soak(
    args: &SoakArgs,
    url: &str,
    node: &Node,
    publisher: &str,
    agents: &[(String, String)],
) -> Result<Vec<WindowRow>, BenchError> {
    let client = reqwest::Client::builder().pool_max_idle_per_host(64).build()?;
    let samples = Arc::new(Mutex::new(Samples::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = JoinSet::new();
    let recipients: Vec<String> = agents.iter().map(|(id, _)| id.clone()).collect();
    for p in 0..PUBLISHERS {
        let (client, base, token) = (client.clone(), node.base.clone(), publisher.to_owned());
        let (samples, stop, recipients) = (samples.clone(), stop.clone(), recipients.clone());
        let interval = Duration::from_secs_f64(PUBLISHERS as f64 / args.rate.max(1) as f64);
        load.spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut n = p as usize;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let body = json!({"recipients": [recipients[n % recipients.len()]], "event_type": "bench.soak", "payload": {"n": n}});
                let (took, _) = call(&client, &base, &token, "/v1/events", body).await?;
                samples.lock().await.publish.push(took);
                n += PUBLISHERS as usize;
            }
            Ok::<_, BenchError>(())
        });
    }
    for (_, token) in agents {
        let (client, base, token) = (client.clone(), node.base.clone(), token.clone());
        let (samples, stop) = (samples.clone(), stop.clone());
        load.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let (took, claimed) =
                    call(&client, &base, &token, "/v1/inbox/claim", json!({"limit": CLAIM_LIMIT})).await?;
                samples.lock().await.claim.push(took);
                let acks = acks_for(&claimed);
                if acks.is_empty() {
                    tokio::time::sleep(IDLE_POLL).await;
                    continue;
                }
                let (took, _) =
                    call(&client, &base, &token, "/v1/inbox/acknowledge", json!({"acks": acks})).await?;
                samples.lock().await.ack.push(took);
            }
            Ok::<_, BenchError>(())
        });
    }

    let mut raw = sqlx::mysql::MySqlConnection::connect(url).await?;
    let window = Duration::from_secs(args.window_minutes * 60);
    let started = Instant::now();
    let mut next = started + window;
    let mut rows = Vec::new();
    let mut failed = None;
    while started.elapsed() < Duration::from_secs(args.minutes * 60) {
        tokio::select! {
            _ = tokio::time::sleep_until(next.into()) => {}
            Some(done) = load.join_next() => {
                failed = Some(match done { Ok(Err(err)) => err, Err(err) => err.into(), Ok(Ok(())) => "a load task ended".into() });
                break;
            }
        }
        next += window;
        let mut finished = std::mem::take(&mut *samples.lock().await);
        let live_rows: i64 =
            sqlx::query("SELECT COUNT(*) AS n FROM agent_inbox").fetch_one(&mut raw).await?.try_get("n")?;
        let archived_rows: i64 = sqlx::query("SELECT COUNT(*) AS n FROM agent_inbox_archive")
            .fetch_one(&mut raw)
            .await?
            .try_get("n")?;
        let p99 = [&mut finished.publish, &mut finished.claim, &mut finished.ack].map(|v| {
            v.sort();
            percentile(v, 99.0)
        });
        let row = WindowRow {
            minute: started.elapsed().as_secs() / 60,
            published: finished.publish.len(),
            acked: finished.ack.len(),
            p99,
            rss_kib: node.pid().and_then(rss_kib),
            live_rows,
            archived_rows,
        };
        eprintln!("{}", row.line());
        rows.push(row);
    }
    stop.store(true, Ordering::Relaxed);
    while let Some(task) = load.join_next().await {
        if let Ok(Err(err)) = task {
            failed.get_or_insert(err);
        }
    }
    match failed {
        Some(err) => Err(err),
        None => Ok(rows),
    }
}

impl WindowRow {
    fn line(&self) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
        format!(
            "{:>6} {:>9} {:>9} {:>10.2} {:>10.2} {:>10.2} {:>10} {:>10} {:>10}",
            self.minute,
            self.published,
            self.acked,
            ms(self.p99[0]),
            ms(self.p99[1]),
            ms(self.p99[2]),
            self.rss_kib.map_or_else(|| "-".to_owned(), |k| (k / 1024).to_string()),
            self.live_rows,
            self.archived_rows
        )
    }
}

fn render(args: &SoakArgs, rows: &[WindowRow]) -> String {
    let mut out = format!(
        "inbox-bench soak: {} minutes through the HTTP API, node in a child process on MariaDB\n\
         {} events/s published (one recipient each, {PUBLISHERS} publishers) over {} agents claiming {CLAIM_LIMIT} \
         and acknowledging; retention {} s into the archive, archive pruned after {} s\n\n",
        args.minutes, args.rate, args.agents, args.retention_seconds, args.archive_retention_seconds
    );
    out.push_str(&format!(
        "{:>6} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
        "minute", "publishes", "acks", "pub p99", "claim p99", "ack p99", "RSS MiB", "live rows", "archived"
    ));
    for row in rows {
        out.push_str(&row.line());
        out.push('\n');
    }
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        out.push_str("no complete window\n");
        return out;
    };
    out.push('\n');
    for (n, name) in ["publish", "claim", "acknowledge"].iter().enumerate() {
        let ratio = last.p99[n].as_secs_f64() / first.p99[n].as_secs_f64().max(f64::MIN_POSITIVE);
        out.push_str(&format!(
            "{name} p99 last/first window {ratio:.2} (target <= {TARGET_P99_RATIO}): {}\n",
            if ratio <= TARGET_P99_RATIO { "met" } else { "NOT met" }
        ));
    }
    if let (Some(a), Some(b)) = (first.rss_kib, last.rss_kib) {
        let change = (b as f64 - a as f64) / a as f64;
        out.push_str(&format!(
            "node RSS {} MiB -> {} MiB, {:+.1} % (target within {:.0} %): {}\n",
            a / 1024,
            b / 1024,
            change * 100.0,
            TARGET_RSS_CHANGE * 100.0,
            if change.abs() <= TARGET_RSS_CHANGE { "met" } else { "NOT met" }
        ));
    }
    out
}

/// Resident memory of process `pid` (`VmRSS` in `/proc/<pid>/status`), in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}
