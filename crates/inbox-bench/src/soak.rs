//! `inbox-bench soak`: an hour of steady load through the HTTP API while retention turns rows
//! over into the archive and prunes the archive (issue 27), with a backup's read view held for
//! ten minutes in the middle (issue 42). Not for CI: it runs for `--minutes`.
//!
//! A service node in a child process on MariaDB (a database of its own), with a short
//! `retention` and `archive_retention` so that acknowledged rows leave `agent_inbox` for the
//! archive, and archived ones are pruned, all through the run. This process publishes
//! `--rate` events/s over `--agents` agents (one recipient a publish, paced) and each agent
//! claims 10 and acknowledges them. From minute `--read-view-at` one more connection holds
//! `START TRANSACTION WITH CONSISTENT SNAPSHOT` (what `mariadb-dump --single-transaction`
//! does) for `--read-view-minutes`, so InnoDB's purge stops meanwhile. Per `--window-minutes`
//! it prints the p99 of publish, claim and acknowledge, the node's resident memory (VmRSS) and
//! open file descriptors, and the rows in the live table and the archive. At the end the
//! publishers stop, the agents drain the inboxes, and every publish answered 201 must have
//! been acknowledged. Targets: every window's p99 at most twice the first window's, the RSS of
//! the last within 10 % of the first's, nothing lost.

use std::collections::HashSet;
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
/// The targets: p99 growth of any window over the first, and RSS change.
const TARGET_P99_RATIO: f64 = 2.0;
/// How long the drain at the end may take before what is left counts as lost.
const DRAIN_MAX: Duration = Duration::from_secs(120);
const TARGET_RSS_CHANGE: f64 = 0.10;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoakArgs {
    pub minutes: u64,
    pub rate: u64,
    pub agents: usize,
    pub window_minutes: u64,
    pub retention_seconds: u64,
    pub archive_retention_seconds: u64,
    /// The minute the held read view starts (0: none).
    pub read_view_at_minute: u64,
    pub read_view_minutes: u64,
}

impl Default for SoakArgs {
    fn default() -> Self {
        Self {
            minutes: 60,
            rate: 150,
            agents: 8,
            window_minutes: 5,
            retention_seconds: 300,
            archive_retention_seconds: 1_200,
            read_view_at_minute: 20,
            read_view_minutes: 10,
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
    open_fds: Option<usize>,
    read_view: bool,
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
    let (rows, ledger) = outcome?;
    Ok(render(args, &rows, &ledger))
}

async fn soak(
    args: &SoakArgs,
    url: &str,
    node: &Node,
    publisher: &str,
    agents: &[(String, String)],
) -> Result<(Vec<WindowRow>, Ledger), BenchError> {
    let client = reqwest::Client::builder().pool_max_idle_per_host(64).build()?;
    let samples = Arc::new(Mutex::new(Samples::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let drained = Arc::new(AtomicBool::new(false));
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut load = JoinSet::new();
    let mut agents_load = JoinSet::new();
    let recipients: Vec<String> = agents.iter().map(|(id, _)| id.clone()).collect();
    for p in 0..PUBLISHERS {
        let (client, base, token) = (client.clone(), node.base.clone(), publisher.to_owned());
        let (samples, stop, recipients, ledger) =
            (samples.clone(), stop.clone(), recipients.clone(), ledger.clone());
        let interval = Duration::from_secs_f64(PUBLISHERS as f64 / args.rate.max(1) as f64);
        load.spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut n = p as usize;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let body = json!({"recipients": [recipients[n % recipients.len()]], "event_type": "bench.soak", "payload": {"n": n}});
                let (took, published) = call(&client, &base, &token, "/v1/events", body).await?;
                samples.lock().await.publish.push(took);
                let mut ledger = ledger.lock().await;
                for delivery in published["deliveries"].as_array().into_iter().flatten() {
                    ledger.published.insert(delivery["event_id"].as_str().unwrap_or_default().to_owned());
                }
                n += PUBLISHERS as usize;
            }
            Ok::<_, BenchError>(())
        });
    }
    for (_, token) in agents {
        let (client, base, token) = (client.clone(), node.base.clone(), token.clone());
        let (samples, drained, ledger) = (samples.clone(), drained.clone(), ledger.clone());
        let stop = stop.clone();
        agents_load.spawn(async move {
            loop {
                let (took, claimed) =
                    call(&client, &base, &token, "/v1/inbox/claim", json!({"limit": CLAIM_LIMIT})).await?;
                samples.lock().await.claim.push(took);
                let acks = acks_for(&claimed);
                if acks.is_empty() {
                    // Publishing has stopped and this inbox is empty: the drain is done here.
                    if stop.load(Ordering::Relaxed) && drained.load(Ordering::Relaxed) {
                        return Ok::<_, BenchError>(());
                    }
                    tokio::time::sleep(IDLE_POLL).await;
                    continue;
                }
                let (took, answer) =
                    call(&client, &base, &token, "/v1/inbox/acknowledge", json!({"acks": acks})).await?;
                samples.lock().await.ack.push(took);
                let mut ledger = ledger.lock().await;
                for result in answer["results"].as_array().into_iter().flatten() {
                    if result["ack_state"] == "acked" {
                        ledger.acked.insert(result["event_id"].as_str().unwrap_or_default().to_owned());
                    }
                }
            }
        });
    }

    let mut raw = sqlx::mysql::MySqlConnection::connect(url).await?;
    let window = Duration::from_secs(args.window_minutes * 60);
    let view_from = Duration::from_secs(args.read_view_at_minute * 60);
    let view_until = view_from + Duration::from_secs(args.read_view_minutes * 60);
    let mut holder: Option<sqlx::mysql::MySqlConnection> = None;
    let started = Instant::now();
    let mut next = started + window;
    let mut rows = Vec::new();
    let mut failed = None;
    while started.elapsed() < Duration::from_secs(args.minutes * 60) {
        // Wake at the next window's end, or when the read view opens or closes before it.
        let mut wake = next;
        for edge in [view_from, view_until] {
            if args.read_view_at_minute > 0 && started + edge > Instant::now() && started + edge < wake {
                wake = started + edge;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep_until(wake.into()) => {}
            Some(done) = load.join_next() => {
                failed = Some(match done { Ok(Err(err)) => err, Err(err) => err.into(), Ok(Ok(())) => "a load task ended".into() });
                break;
            }
            Some(done) = agents_load.join_next() => {
                failed = Some(match done { Ok(Err(err)) => err, Err(err) => err.into(), Ok(Ok(())) => "an agent ended".into() });
                break;
            }
        }
        let at = started.elapsed();
        if args.read_view_at_minute > 0 && holder.is_none() && at >= view_from && at < view_until {
            let mut conn = sqlx::mysql::MySqlConnection::connect(url).await?;
            sqlx::Executor::execute(&mut conn, "START TRANSACTION WITH CONSISTENT SNAPSHOT").await?;
            sqlx::query("SELECT COUNT(*) AS n FROM inbox_head").fetch_one(&mut conn).await?;
            eprintln!("minute {}: read view opened", at.as_secs() / 60);
            holder = Some(conn);
        } else if let Some(mut conn) = holder.take_if(|_| at >= view_until) {
            sqlx::Executor::execute(&mut conn, "COMMIT").await?;
            eprintln!("minute {}: read view closed", at.as_secs() / 60);
        }
        if Instant::now() < next {
            continue;
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
            open_fds: node.pid().and_then(open_fds),
            read_view: holder.is_some(),
            live_rows,
            archived_rows,
        };
        eprintln!("{}", row.line());
        rows.push(row);
    }
    if let Some(mut conn) = holder.take() {
        sqlx::Executor::execute(&mut conn, "COMMIT").await?;
    }
    stop.store(true, Ordering::Relaxed);
    while let Some(task) = load.join_next().await {
        if let Ok(Err(err)) = task {
            failed.get_or_insert(err);
        }
    }
    // The publishers are done: the agents drain what is left, then stop at an empty claim.
    let drain_started = Instant::now();
    while drain_started.elapsed() < DRAIN_MAX {
        let open: i64 =
            sqlx::query("SELECT COUNT(*) AS n FROM agent_inbox WHERE ack_state IN ('available', 'claimed')")
                .fetch_one(&mut raw)
                .await?
                .try_get("n")?;
        if open == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drained.store(true, Ordering::Relaxed);
    let agents_done = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(task) = agents_load.join_next().await {
            if let Ok(Err(err)) = task {
                return Err(err);
            }
        }
        Ok(())
    })
    .await;
    match agents_done {
        Ok(Err(err)) => {
            failed.get_or_insert(err);
        }
        Err(_) => agents_load.abort_all(),
        Ok(Ok(())) => {}
    }
    let mut ledger = std::mem::take(&mut *ledger.lock().await);
    ledger.drain_seconds = drain_started.elapsed().as_secs_f64();
    match failed {
        Some(err) => Err(err),
        None => Ok((rows, ledger)),
    }
}

/// Every event a publish was answered 201 for, and every event an acknowledgement took.
#[derive(Debug, Default)]
struct Ledger {
    published: HashSet<String>,
    acked: HashSet<String>,
    drain_seconds: f64,
}

impl WindowRow {
    fn line(&self) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
        format!(
            "{:>6} {:>9} {:>9} {:>10.2} {:>10.2} {:>10.2} {:>10} {:>8} {:>5} {:>10} {:>10}",
            self.minute,
            self.published,
            self.acked,
            ms(self.p99[0]),
            ms(self.p99[1]),
            ms(self.p99[2]),
            self.rss_kib.map_or_else(|| "-".to_owned(), |k| (k / 1024).to_string()),
            self.open_fds.map_or_else(|| "-".to_owned(), |n| n.to_string()),
            if self.read_view { "held" } else { "-" },
            self.live_rows,
            self.archived_rows
        )
    }
}

fn render(args: &SoakArgs, rows: &[WindowRow], ledger: &Ledger) -> String {
    let view = match args.read_view_at_minute {
        0 => "no held read view".to_owned(),
        at => format!("a read view held from minute {at} for {} minutes", args.read_view_minutes),
    };
    let mut out = format!(
        "inbox-bench soak: {} minutes through the HTTP API, node in a child process on MariaDB\n\
         {} events/s published (one recipient each, {PUBLISHERS} publishers) over {} agents claiming {CLAIM_LIMIT} \
         and acknowledging; retention {} s into the archive, archive pruned after {} s; {view}\n\n",
        args.minutes, args.rate, args.agents, args.retention_seconds, args.archive_retention_seconds
    );
    out.push_str(&format!(
        "{:>6} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>8} {:>5} {:>10} {:>10}\n",
        "minute",
        "publishes",
        "acks",
        "pub p99",
        "claim p99",
        "ack p99",
        "RSS MiB",
        "open fds",
        "view",
        "live rows",
        "archived"
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
        let first_p99 = first.p99[n].as_secs_f64().max(f64::MIN_POSITIVE);
        let (worst_minute, worst) = rows
            .iter()
            .map(|r| (r.minute, r.p99[n].as_secs_f64() / first_p99))
            .fold((first.minute, 1.0), |a, b| if b.1 > a.1 { b } else { a });
        out.push_str(&format!(
            "{name} p99, worst window / first: {worst:.2} (minute {worst_minute}; target <= {TARGET_P99_RATIO}): {}\n",
            if worst <= TARGET_P99_RATIO { "met" } else { "NOT met" }
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
    if let (Some(a), Some(b)) = (first.open_fds, last.open_fds) {
        out.push_str(&format!("node open file descriptors {a} -> {b}\n"));
    }
    let lost = ledger.published.difference(&ledger.acked).count();
    out.push_str(&format!(
        "published (201) {}, acknowledged {} (drained in {:.1} s), lost {lost}: {}\n",
        ledger.published.len(),
        ledger.acked.intersection(&ledger.published).count(),
        ledger.drain_seconds,
        if lost == 0 { "met" } else { "NOT met" }
    ));
    out
}

/// The open file descriptors of process `pid` (the entries of `/proc/<pid>/fd`).
fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
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
