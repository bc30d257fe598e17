//! The agent side, measured end to end against a real `agent-inbox serve` (SQLite, local):
//! publish-to-handler latency for an SSE agent, a long-poll agent and a polling-only agent;
//! the requests an idle, disconnected agent sends per hour at the 5-minute ceiling (from the
//! schedule the runner uses); and the events per second one agent sustains with a no-op
//! handler, in process (SDK) and as `listen --exec true` (a process per event).
//!
//! ```sh
//! cargo build --release -p agent-inbox -p inbox-bench
//! target/release/inbox-bench agent
//! ```
//!
//! Progress goes to stderr, the table to stdout. Not a timed test: numbers depend on the
//! machine, and the service and the agents share its cores. `--events-max N` caps every
//! phase's event count (a quick check that the benchmark runs, not a measurement).

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use inbox_api::PublishRequest;
use inbox_client::schedule::PollSchedule;
use inbox_client::{
    Agent, AgentConfig, Api, ContinueAfterReset, Credentials, Event, LocalState, Secret, TransportConfig,
    TransportKind,
};
use inbox_core::{EventType, RecipientId, TenantId};
use inbox_server::{CallerKind, Config, TokenService};
use inbox_testkit::{Serve, ServeChild};
use tokio::sync::mpsc;

use crate::BenchError;

const TENANT: &str = "bench";

/// Sizes of the `agent` benchmark: the events of each phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentArgs {
    /// Caps every phase's count; `None` runs the counts below.
    pub events_max: Option<usize>,
}

impl AgentArgs {
    fn events(&self, n: usize) -> usize {
        self.events_max.map_or(n, |max| n.min(max))
    }
}

/// `inbox-bench agent`: prints the table, or the error, and exits accordingly.
pub async fn main(args: AgentArgs) -> ExitCode {
    let result = async {
        let binary = agent_inbox_binary()?;
        let dir = std::env::temp_dir().join(format!("agent-inbox-agent-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let result = run(&args, &binary, &dir).await;
        let _ = std::fs::remove_dir_all(&dir);
        result
    }
    .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("inbox-bench agent: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &AgentArgs, binary: &Path, dir: &Path) -> Result<(), BenchError> {
    let database_url = format!("sqlite://{}", dir.join("inbox.db").display());
    let mut config = Config::default();
    config.database.url = database_url.clone();
    let store = inbox_server::connect_store(&config).await?;
    store.migrate().await?;
    inbox_server::prepare_secrets(&store, &config).await?;
    let tokens = TokenService::new(store.clone(), &config).await?;
    let server = serve(binary, &database_url)?;
    let base = server.base.clone();
    let publisher = issue(&tokens, "app", CallerKind::Publisher, "events.publish").await?;
    let publisher = Api::new(&base, Credentials::access_token(Secret::new(publisher)))?;
    let mut rows = Vec::new();

    let n = args.events(300);
    eprintln!("SSE agent: {n} events, one at a time");
    let agent = issue(&tokens, "sse_agent", CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES).await?;
    let latencies =
        latency(&base, &agent, "sse_agent", dir, AgentConfig::default(), &publisher, n, Duration::ZERO)
            .await?;
    rows.push(latency_row("SSE agent", &latencies));

    let n = args.events(100);
    eprintln!("long-poll agent: {n} events, one at a time");
    let agent = issue(&tokens, "lp_agent", CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES).await?;
    let config = AgentConfig {
        transport: TransportConfig {
            allowed: vec![TransportKind::LongPoll, TransportKind::Poll],
            ..TransportConfig::default()
        },
        ..AgentConfig::default()
    };
    let latencies = latency(&base, &agent, "lp_agent", dir, config, &publisher, n, Duration::ZERO).await?;
    rows.push(latency_row("long-poll agent", &latencies));

    let n = args.events(25);
    eprintln!("polling-only agent (1 s after work, growing to 5 min): {n} events, 0-3 s apart");
    let agent = issue(&tokens, "poll_agent", CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES).await?;
    let config = AgentConfig {
        transport: TransportConfig { allowed: vec![TransportKind::Poll], ..TransportConfig::default() },
        ..AgentConfig::default()
    };
    let latencies =
        latency(&base, &agent, "poll_agent", dir, config, &publisher, n, Duration::from_secs(3)).await?;
    rows.push(latency_row("polling-only agent", &latencies));

    let schedule = PollSchedule::default();
    let ceiling_mean = schedule.jittered(schedule.interval_max, 0.5);
    let per_hour = 3600.0 / ceiling_mean.as_secs_f64();
    let first_hour = schedule.polls_within(Duration::from_secs(3600));
    rows.push(Row::text(
        "idle disconnected agent",
        format!("{per_hour:.1} requests/h at the 5-min ceiling ({first_hour} in the first hour from idle)"),
    ));

    let n = args.events(2000);
    eprintln!("throughput: SDK agent, no-op handler, {n} events");
    for concurrency in [1usize, 8] {
        let subject = format!("sdk_agent_{concurrency}");
        let agent = issue(&tokens, &subject, CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES).await?;
        publish_many(&publisher, &subject, n).await?;
        let rate = sdk_throughput(&base, &agent, &subject, dir, concurrency, n as u64).await?;
        rows.push(Row::text(
            &format!("SDK agent, no-op, concurrency {concurrency}"),
            format!("{rate:.0} events/s"),
        ));
    }

    let n = args.events(1000);
    eprintln!("throughput: listen --exec true, {n} events");
    for concurrency in [1u32, 8] {
        let subject = format!("listen_agent_{concurrency}");
        let agent = issue(&tokens, &subject, CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES).await?;
        publish_many(&publisher, &subject, n).await?;
        let rate = listen_throughput(binary, &base, &agent, dir, concurrency, n)?;
        rows.push(Row::text(
            &format!("listen --exec true, concurrency {concurrency}"),
            format!("{rate:.0} events/s"),
        ));
    }

    drop(server);
    store.close().await;
    println!("\nagent side, SQLite, service and agents on this machine ({} cores)", cores());
    println!("{:<40} result", "agent");
    println!("{}", "-".repeat(100));
    for row in rows {
        println!("{:<40} {}", row.label, row.value);
    }
    Ok(())
}

struct Row {
    label: String,
    value: String,
}

impl Row {
    fn text(label: &str, value: String) -> Row {
        Row { label: label.to_owned(), value }
    }
}

fn latency_row(label: &str, latencies: &[Duration]) -> Row {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    let at = |q: f64| sorted[((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1];
    Row::text(
        label,
        format!(
            "publish-to-handler p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} events)",
            ms(at(0.50)),
            ms(at(0.99)),
            ms(*sorted.last().unwrap()),
            sorted.len()
        ),
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Publishes `n` events one at a time (each after the last reached the handler, after a
/// random pause up to `gap_max`) and returns each one's publish-to-handler latency.
#[allow(clippy::too_many_arguments)]
async fn latency(
    base: &str,
    token: &str,
    subject: &str,
    dir: &Path,
    config: AgentConfig,
    publisher: &Api,
    n: usize,
    gap_max: Duration,
) -> Result<Vec<Duration>, BenchError> {
    let (arrived, mut arrivals) = mpsc::channel::<Instant>(16);
    let handler = move |_event: Event| {
        let arrived = arrived.clone();
        async move {
            let _ = arrived.send(Instant::now()).await;
            Ok(())
        }
    };
    let (stop, running) = start(base, token, dir, subject, config, handler).await?;
    // Let the agent connect and settle before measuring.
    publish_one(publisher, subject).await?;
    arrivals.recv().await.ok_or("the agent stopped")?;
    let mut latencies = Vec::with_capacity(n);
    for _ in 0..n {
        if !gap_max.is_zero() {
            tokio::time::sleep(gap_max.mul_f64(random_unit())).await;
        }
        let sent = Instant::now();
        publish_one(publisher, subject).await?;
        let at = tokio::time::timeout(Duration::from_secs(600), arrivals.recv())
            .await
            .map_err(|_| "an event did not arrive within 10 minutes")?
            .ok_or("the agent stopped")?;
        latencies.push(at.saturating_duration_since(sent));
    }
    let _ = stop.send(());
    running.await??;
    Ok(latencies)
}

async fn sdk_throughput(
    base: &str,
    token: &str,
    subject: &str,
    dir: &Path,
    concurrency: usize,
    n: u64,
) -> Result<f64, BenchError> {
    let done = Arc::new(AtomicU64::new(0));
    let (finished, mut all_done) = mpsc::channel::<()>(1);
    let handler = {
        let done = done.clone();
        move |_event: Event| {
            let (done, finished) = (done.clone(), finished.clone());
            async move {
                if done.fetch_add(1, Ordering::Relaxed) + 1 == n {
                    let _ = finished.send(()).await;
                }
                Ok(())
            }
        }
    };
    let started = Instant::now();
    let config = AgentConfig { concurrency, ..AgentConfig::default() };
    let (stop, running) = start(base, token, dir, subject, config, handler).await?;
    all_done.recv().await.ok_or("the agent stopped")?;
    let elapsed = started.elapsed();
    let _ = stop.send(());
    let summary = running.await??;
    eprintln!("  {} acked in {:.2} s", summary.acked, elapsed.as_secs_f64());
    Ok(n as f64 / elapsed.as_secs_f64())
}

type Running = tokio::task::JoinHandle<Result<inbox_client::RunSummary, inbox_client::ClientError>>;

async fn start<H: inbox_client::Handler>(
    base: &str,
    token: &str,
    dir: &Path,
    subject: &str,
    config: AgentConfig,
    handler: H,
) -> Result<(tokio::sync::oneshot::Sender<()>, Running), BenchError> {
    let api = Api::new(base, Credentials::access_token(Secret::new(token)))?;
    let state = LocalState::open(&dir.join(format!("{subject}.state.db")), 10_000).await?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(Agent::new(api, state, config).run(handler, ContinueAfterReset, async move {
        let _ = stopped.await;
    }));
    Ok((stop, running))
}

/// Runs `listen --exec true` over a backlog of `n` events; returns events per second.
fn listen_throughput(
    binary: &Path,
    base: &str,
    token: &str,
    dir: &Path,
    concurrency: u32,
    n: usize,
) -> Result<f64, BenchError> {
    let started = Instant::now();
    let mut child = Command::new(binary)
        .args(["listen", "--server", base, "--exec", "true", "--log-json"])
        .args(["--concurrency", &concurrency.to_string()])
        .arg("--state")
        .arg(dir.join(format!("listen-{concurrency}.state.db")))
        .env("AGENT_INBOX_TOKEN", token)
        .env("AGENT_INBOX_HOME", dir)
        .env("AGENT_INBOX_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let mut finished = 0;
    for line in BufReader::new(stderr).lines() {
        if line?.contains("\"message\":\"event finished\"") {
            finished += 1;
            if finished == n {
                break;
            }
        }
    }
    let elapsed = started.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    if finished < n {
        return Err(format!("listen stopped after {finished} of {n} events").into());
    }
    eprintln!("  {n} handled in {:.2} s", elapsed.as_secs_f64());
    Ok(n as f64 / elapsed.as_secs_f64())
}

async fn publish_one(publisher: &Api, recipient: &str) -> Result<(), BenchError> {
    publisher
        .publish(&PublishRequest {
            tenant_id: None,
            recipients: inbox_core::limits::Recipients::new(vec![RecipientId::new(recipient)?])?,
            event_type: EventType::new("bench.task")?,
            priority: None,
            available_at_utc: None,
            expires_at_utc: None,
            deduplication_key: None,
            fairness_key: None,
            correlation: Default::default(),
            payload: Some(serde_json::json!({"work": "none"})),
            payload_ref: None,
            max_attempts: None,
        })
        .await?;
    Ok(())
}

async fn publish_many(publisher: &Api, recipient: &str, n: usize) -> Result<(), BenchError> {
    let mut running = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let (publisher, recipient) = (publisher.clone(), recipient.to_owned());
        let share = n / 8 + usize::from(worker < n % 8);
        running.spawn(async move {
            for _ in 0..share {
                publish_one(&publisher, &recipient).await?;
            }
            Ok::<(), BenchError>(())
        });
    }
    while let Some(done) = running.join_next().await {
        done??;
    }
    Ok(())
}

async fn issue(
    tokens: &TokenService,
    subject: &str,
    kind: CallerKind,
    scope: &str,
) -> Result<String, BenchError> {
    let issued = tokens
        .issue(
            &TenantId::new(TENANT)?,
            &RecipientId::new(subject)?,
            kind,
            scope,
            Some(Duration::from_secs(3600)),
            false,
        )
        .await
        .map_err(|e| format!("{}: {}", e.code, e.detail))?;
    Ok(issued.access_token)
}

/// `agent-inbox serve` on port 0 (through `inbox-testkit`); killed on drop.
fn serve(binary: &Path, database_url: &str) -> Result<ServeChild, BenchError> {
    let child = Serve::new(binary, database_url)
        // A benchmark is one tenant hammering the service: lift the per-agent limits.
        .env("AGENT_INBOX_AGENT_REQUESTS_PER_SECOND", "100000")
        .env("AGENT_INBOX_AGENT_REQUESTS_BURST", "100000")
        .env("AGENT_INBOX_TENANT_REQUESTS_PER_SECOND", "100000")
        .env("AGENT_INBOX_TENANT_REQUESTS_BURST", "100000")
        .env("AGENT_INBOX_LOG", "warn")
        .spawn()?;
    Ok(child)
}

/// The `agent-inbox` binary beside this one (target/<profile>/).
fn agent_inbox_binary() -> Result<PathBuf, BenchError> {
    let exe = std::env::current_exe()?;
    let profile_dir = exe.parent().ok_or("cannot locate the target directory")?;
    let binary = profile_dir.join("agent-inbox");
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(format!(
            "{} is missing; build it first: cargo build --release -p agent-inbox -p inbox-bench",
            binary.display()
        )
        .into())
    }
}

fn random_unit() -> f64 {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    // A cheap, good-enough spread for pauses between publishes (splitmix64 of the clock).
    let mut z = u64::from(nanos).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as f64 / u64::MAX as f64
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
