//! `inbox-bench galera`: publish and claim+ack through 3 service nodes on 3 Galera members,
//! beside 1 node on 1 member, in one run, with the certification conflicts the members count.
//!
//! The cluster is `AGENT_INBOX_TEST_GALERA_URLS` (the members' server URLs, comma-separated) when
//! it is set, else one this run starts with `scripts/galera.sh` and stops at the end. Nodes run
//! in child processes (`inbox-bench node`), so the load generator here shares no runtime with
//! them. One fresh database, created through member 1 (Galera replicates DDL), holds both
//! topologies; each topology and workload has its own tenant.
//!
//! Claim+ack is measured with competing consumers: a few agents' inboxes, each drained by
//! workers spread over every node of the topology, so on three members two of them lock the
//! same rows locally and one loses certification at COMMIT; the store retries it inside. The
//! members' `wsrep_local_cert_failures` and `wsrep_local_bf_aborts` say how often that happened.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use inbox_core::{EventBody, EventType, Recipient, RecipientId, TenantId};
use inbox_server::{CallerKind, TokenService};
use inbox_store::Publish;
use serde_json::json;
use sqlx::{Connection as _, Row as _};
use tokio::task::JoinSet;

use crate::http::{acks_for, call};
use crate::node::Node;
use crate::report::percentile;
use crate::subjects::Subjects;
use crate::{BenchError, mysql_db};

/// Sizes of the `galera` benchmark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GaleraArgs {
    /// Length of each publish row, in seconds.
    pub seconds: u64,
    /// Backlog events of each claim+ack row.
    pub events: usize,
}

impl Default for GaleraArgs {
    fn default() -> Self {
        Self { seconds: 10, events: 3_000 }
    }
}

const URLS_ENV: &str = "AGENT_INBOX_TEST_GALERA_URLS";
/// Concurrent HTTP publishers, spread over the topology's nodes, each to its own agent.
const PUBLISHERS: usize = 12;
/// Inboxes the claim+ack row drains; each has `WORKERS_PER_INBOX` competing workers.
const INBOXES: usize = 4;
const WORKERS_PER_INBOX: usize = 3;
const BATCH: u32 = 10;

/// The figures of one row.
#[derive(Debug, Default)]
struct Row {
    events: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
    cert_failures: u64,
}

impl Row {
    fn rate(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

pub async fn main(args: GaleraArgs) -> ExitCode {
    let cluster = match Cluster::from_env_or_start() {
        Ok(cluster) => cluster,
        Err(err) => {
            eprintln!("inbox-bench galera: {err}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = run(&args, &cluster.urls).await;
    cluster.stop();
    match outcome {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("inbox-bench galera: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &GaleraArgs, members: &[String]) -> Result<String, BenchError> {
    if members.len() < 3 {
        return Err(format!("{URLS_ENV} names {} member(s); the benchmark needs 3", members.len()).into());
    }
    let database = mysql_db::create(&members[0]).await?;
    let outcome = tokio::spawn(measure(args.clone(), members.to_vec(), database.name.clone())).await;
    database.drop_best_effort().await;
    outcome.map_err(|join| format!("the benchmark stopped abnormally: {join}"))?
}

async fn measure(args: GaleraArgs, members: Vec<String>, database: String) -> Result<String, BenchError> {
    let urls: Vec<String> =
        members.iter().map(|member| mysql_db::with_database(member, &database)).collect::<Result<_, _>>()?;
    let subjects = Subjects::connect(&urls[0]).await?;
    let tokens = TokenService::new(subjects.store.clone(), &Node::config(&urls[0]))
        .await
        .map_err(|e| -> BenchError { e.into() })?;

    let mut table = Vec::new();
    for (label, node_urls) in
        [("1 node, 1 member", vec![urls[0].clone()]), ("3 nodes, 3 members", urls.clone())]
    {
        eprintln!("galera: starting {label}");
        let mut nodes = Vec::new();
        for url in &node_urls {
            nodes.push(Node::spawn(url).await?);
        }
        let bases: Vec<String> = nodes.iter().map(|node| node.base.clone()).collect();
        let key = label.split(',').next().unwrap_or("t").replace(' ', "-");

        eprintln!("galera: {label}: publishing for {} s", args.seconds);
        let tenant = TenantId::new(format!("bench-galera-publish-{key}"))?;
        let publisher = crate::node::publisher_token(&tokens, &tenant).await?;
        let before = cert_failures(&members).await?;
        let mut publish = publish_row(&bases, &publisher, Duration::from_secs(args.seconds)).await?;
        publish.cert_failures = cert_failures(&members).await?.saturating_sub(before);

        eprintln!("galera: {label}: seeding {} events, then draining them", args.events);
        let tenant = TenantId::new(format!("bench-galera-claim-{key}"))?;
        let mut agents = Vec::new();
        for n in 0..INBOXES {
            let id = RecipientId::new(format!("agent-{n}"))?;
            let issued = tokens
                .issue(&tenant, &id, CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES, None, false)
                .await
                .map_err(|e| format!("{}: {}", e.code, e.detail))?;
            agents.push((id, issued.access_token));
        }
        for n in 0..args.events {
            let publish = Publish::new(
                tenant.clone(),
                vec![Recipient::agent(agents[n % INBOXES].0.clone())],
                EventType::new("bench.tick")?,
                EventBody::json(r#"{"bench":"tick"}"#)?,
            );
            subjects.store.inbox().publish(&publish).await?;
        }
        let per_inbox = (0..INBOXES).map(|i| (args.events + INBOXES - 1 - i) / INBOXES).collect();
        let before = cert_failures(&members).await?;
        let mut drain = drain_row(&bases, &agents, per_inbox).await?;
        drain.cert_failures = cert_failures(&members).await?.saturating_sub(before);

        for node in nodes {
            node.stop().await;
        }
        table.push((label, publish, drain));
    }
    subjects.close().await;
    Ok(report(&args, &mut table))
}

fn report(args: &GaleraArgs, table: &mut [(&str, Row, Row)]) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let p = |v: &[Duration], q: f64| if v.is_empty() { 0.0 } else { ms(percentile(v, q)) };
    let mut out = String::new();
    out.push_str("inbox-bench galera: service nodes (child processes, loopback) on a 3-member MariaDB Galera cluster\n");
    out.push_str(&format!(
        "publish: {PUBLISHERS} HTTP publishers for {} s; claim+ack: {} events in {INBOXES} inboxes, {WORKERS_PER_INBOX} competing workers each, batches of {BATCH}\n\n",
        args.seconds, args.events
    ));
    out.push_str(&format!(
        "{:<11}{:<20}{:>10}{:>10}{:>10}{:>14}{:>16}\n",
        "workload", "topology", "events/s", "p50 ms", "p99 ms", "cert fails", "cert fails/s"
    ));
    for (label, publish, drain) in table.iter_mut() {
        for (workload, row) in [("publish", &mut *publish), ("claim+ack", &mut *drain)] {
            row.latencies.sort_unstable();
            out.push_str(&format!(
                "{workload:<11}{label:<20}{:>10.0}{:>10.2}{:>10.2}{:>14}{:>16.1}\n",
                row.rate(),
                p(&row.latencies, 50.0),
                p(&row.latencies, 99.0),
                row.cert_failures,
                row.cert_failures as f64 / row.elapsed.as_secs_f64().max(1e-9)
            ));
        }
    }
    if let [(_, one_publish, one_drain), (_, three_publish, three_drain)] = &table[..] {
        out.push_str(&format!(
            "\n3 nodes on 3 members / 1 node on 1 member: publish {:.2}, claim+ack {:.2}\n",
            three_publish.rate() / one_publish.rate().max(1e-9),
            three_drain.rate() / one_drain.rate().max(1e-9)
        ));
    }
    out.push_str("(claim+ack latency is one claim request; all figures share the machine's cores with 3 members and the nodes)\n");
    out
}

/// `PUBLISHERS` publishers, publisher `i` on node `i % nodes`, each to its own agent, unpaced.
async fn publish_row(bases: &[String], token: &str, length: Duration) -> Result<Row, BenchError> {
    let client = reqwest::Client::builder().pool_max_idle_per_host(64).build()?;
    let started = Instant::now();
    let until = started + length;
    let mut workers = JoinSet::new();
    for n in 0..PUBLISHERS {
        let (client, base, token) = (client.clone(), bases[n % bases.len()].clone(), token.to_owned());
        workers.spawn(async move {
            let mut row = Row::default();
            let recipient = format!("agent-{n:02}");
            while Instant::now() < until {
                let body = json!({"recipients": [recipient], "event_type": "bench.tick", "payload": {"n": row.events}});
                let (took, _) = call(&client, &base, &token, "/v1/events", body).await?;
                row.latencies.push(took);
                row.events += 1;
            }
            Ok::<_, BenchError>(row)
        });
    }
    let mut total = Row::default();
    while let Some(worker) = workers.join_next().await {
        let row = worker??;
        total.events += row.events;
        total.latencies.extend(row.latencies);
    }
    total.elapsed = started.elapsed();
    Ok(total)
}

/// Drains every agent's backlog with `WORKERS_PER_INBOX` workers per inbox, worker `w` on node
/// `w % nodes`; each inbox is done when `per_inbox[i]` of its events are acknowledged.
async fn drain_row(
    bases: &[String],
    agents: &[(RecipientId, String)],
    per_inbox: Vec<usize>,
) -> Result<Row, BenchError> {
    let client = reqwest::Client::builder().pool_max_idle_per_host(64).build()?;
    let acked: Arc<Vec<AtomicU64>> = Arc::new(agents.iter().map(|_| AtomicU64::new(0)).collect());
    let started = Instant::now();
    let mut workers = JoinSet::new();
    for w in 0..agents.len() * WORKERS_PER_INBOX {
        let inbox = w % agents.len();
        let (client, base, token) = (client.clone(), bases[w % bases.len()].clone(), agents[inbox].1.clone());
        let (acked, goal) = (acked.clone(), per_inbox[inbox] as u64);
        workers.spawn(async move {
            let mut row = Row::default();
            while acked[inbox].load(Ordering::Relaxed) < goal {
                let (took, claimed) =
                    call(&client, &base, &token, "/v1/inbox/claim", json!({"limit": BATCH})).await?;
                row.latencies.push(took);
                let acks = acks_for(&claimed);
                if acks.is_empty() {
                    // The rest are leased by the other workers of this inbox.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                let n = acks.len() as u64;
                call(&client, &base, &token, "/v1/inbox/acknowledge", json!({"acks": acks})).await?;
                acked[inbox].fetch_add(n, Ordering::Relaxed);
                row.events += n;
            }
            Ok::<_, BenchError>(row)
        });
    }
    let mut total = Row::default();
    while let Some(worker) = workers.join_next().await {
        let row = worker??;
        total.events += row.events;
        total.latencies.extend(row.latencies);
    }
    total.elapsed = started.elapsed();
    Ok(total)
}

/// Certification failures plus brute-force aborts, summed over the members: each is one
/// transaction that lost to a conflicting one committed on another member.
async fn cert_failures(members: &[String]) -> Result<u64, BenchError> {
    let mut total = 0;
    for member in members {
        let mut conn = sqlx::MySqlConnection::connect(member).await?;
        let rows = sqlx::query(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')",
        )
        .fetch_all(&mut conn)
        .await?;
        for row in rows {
            let value: String = row.try_get(1)?;
            total += value.parse::<u64>().unwrap_or(0);
        }
        conn.close().await?;
    }
    Ok(total)
}

/// The members, and the directory of a cluster this run started (to stop it again).
struct Cluster {
    urls: Vec<String>,
    started_in: Option<PathBuf>,
}

impl Cluster {
    fn from_env_or_start() -> Result<Cluster, BenchError> {
        if let Some(urls) = std::env::var(URLS_ENV).ok().filter(|urls| !urls.trim().is_empty()) {
            return Ok(Cluster { urls: split_urls(&urls), started_in: None });
        }
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/galera-bench");
        eprintln!("galera: {URLS_ENV} is not set; starting a cluster in {}", dir.display());
        let out = Command::new(script()).arg("start").arg(&dir).output()?;
        if !out.status.success() {
            return Err(
                format!("scripts/galera.sh start failed: {}", String::from_utf8_lossy(&out.stderr)).into()
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let urls = stdout
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{URLS_ENV}=")))
            .ok_or("scripts/galera.sh start did not print the members' URLs")?;
        Ok(Cluster { urls: split_urls(urls), started_in: Some(dir) })
    }

    fn stop(self) {
        if let Some(dir) = self.started_in {
            match Command::new(script()).arg("stop").arg(&dir).status() {
                Ok(status) if status.success() => {}
                _ => eprintln!(
                    "inbox-bench galera: stop the cluster by hand: scripts/galera.sh stop {}",
                    dir.display()
                ),
            }
        }
    }
}

fn split_urls(urls: &str) -> Vec<String> {
    urls.split(',').map(str::trim).filter(|url| !url.is_empty()).map(str::to_owned).collect()
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/galera.sh")
}
