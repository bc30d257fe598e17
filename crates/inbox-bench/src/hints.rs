//! `inbox-bench hints`: the real-time path measured end to end, with two service nodes
//! (`inbox_server::run`, in this process) on one MariaDB database:
//!
//! - commit-to-hint latency on the publishing node (its own post-commit hint) and on the other
//!   node (the notifier tailing `outbox_signal`), over paced publishes;
//! - how many idle SSE subscribers one node holds, its resident memory per subscriber (VmRSS
//!   before and after; the clients live in a child process, `hints-idle-clients`, so their
//!   memory and file descriptors are not counted), and the CPU its heartbeats cost;
//! - conditional head checks answered `304 Not Modified` per second.
//!
//! Everything shares this machine's cores with MariaDB, so the numbers are a floor.

use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inbox_server::{CallerKind, TokenService};
use inbox_store::{ConnectOptions, SqlStore, StoreConfig};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};

use crate::BenchError;
use crate::cpu::process_cpu;
use crate::node::Node;
use crate::report::percentile;

/// Sizes of the `hints` benchmark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HintsArgs {
    pub publishes: usize,
    pub subscribers: usize,
}

impl Default for HintsArgs {
    fn default() -> Self {
        Self { publishes: 1_000, subscribers: 10_000 }
    }
}

/// Time between two publishes of the latency phase: paced, so no publish queues behind another
/// and each latency is the hint path's own.
const PACE: Duration = Duration::from_millis(10);
/// Heartbeat interval of the nodes, shorter than the default 30 s so the CPU window sees
/// several rounds of heartbeats; the report scales the cost to the default.
const HEARTBEAT: Duration = Duration::from_secs(5);
const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(30);
/// Length of each CPU measuring window (two heartbeat rounds).
const CPU_WINDOW: Duration = Duration::from_secs(10);
/// Concurrent workers and duration of the head-check phase.
const HEAD_WORKERS: usize = 16;
const HEAD_DURATION: Duration = Duration::from_secs(3);
/// Connections the idle-client process opens at once.
const CONNECT_BATCH: usize = 200;
const TENANT: &str = "bench";

/// Runs the benchmark in a database of its own and prints the report.
pub async fn main(args: HintsArgs) -> ExitCode {
    crate::mysql_db::report_in_fresh_database(String::new(), |db| run(args, db.url.clone())).await
}

async fn run(args: HintsArgs, url: String) -> Result<String, BenchError> {
    let mut config = Node::config(&url);
    config.sessions.heartbeat_interval = HEARTBEAT;
    config.limits.waiters_per_tenant = 1_000_000;
    let a = Node::start(config.clone()).await?;
    let b = Node::start(config.clone()).await?;
    let store = SqlStore::connect(&ConnectOptions::new(&url), StoreConfig::default()).await?;
    crate::secrets::prepare(&store, &url).await?;
    let tokens = TokenService::new(store.clone(), &config).await?;
    let issue = async |subject: &str, kind: CallerKind, scope: &str| {
        crate::node::token(&tokens, TENANT, subject, kind, scope).await
    };
    let publisher = issue("publisher", CallerKind::Publisher, "events.publish").await?;
    let agent_scopes = inbox_server::tokens::AGENT_SCOPES;
    let on_a = issue("lat_a", CallerKind::Agent, agent_scopes).await?;
    let on_b = issue("lat_b", CallerKind::Agent, agent_scopes).await?;

    eprintln!("latency: {} publishes, one every {} ms", args.publishes, PACE.as_millis());
    let latency = latency(&a, &b, &publisher, &on_a, &on_b, args.publishes).await?;
    eprintln!("head checks: {HEAD_WORKERS} workers for {} s", HEAD_DURATION.as_secs());
    let heads_per_second = head_checks(&a, &on_a).await?;
    eprintln!("idle subscribers: {} tokens", args.subscribers);
    let mut idle_tokens = Vec::with_capacity(args.subscribers);
    for n in 0..args.subscribers {
        idle_tokens.push(issue(&format!("idle_{n:05}"), CallerKind::Agent, "stream.subscribe").await?);
    }
    let idle = idle_subscribers(&a, idle_tokens).await;
    a.stop().await;
    b.stop().await;
    store.close().await;
    Ok(render(&args, &latency, heads_per_second, &idle?))
}

/// Per publish: commit-to-hint on the publishing node and on the other node (from the
/// publish response, which follows the commit; a hint that beats the response counts as 0),
/// and the publish request itself.
struct Latency {
    same_node: Vec<Duration>,
    cross_node: Vec<Duration>,
    publish: Vec<Duration>,
}

async fn latency(
    a: &Node,
    b: &Node,
    publisher: &str,
    on_a: &str,
    on_b: &str,
    publishes: usize,
) -> Result<Latency, BenchError> {
    let seen_a = Arc::new(Mutex::new(vec![None; publishes + 1]));
    let seen_b = Arc::new(Mutex::new(vec![None; publishes + 1]));
    let reader_a = tokio::spawn(read_hints(open_sse(a, on_a).await?, seen_a.clone()));
    let reader_b = tokio::spawn(read_hints(open_sse(b, on_b).await?, seen_b.clone()));
    let mut sent = Vec::with_capacity(publishes);
    let mut answered = Vec::with_capacity(publishes);
    let mut pace = tokio::time::interval(PACE);
    for n in 1..=publishes {
        pace.tick().await;
        let started = Instant::now();
        let response = a
            .client
            .post(format!("{}/v1/events", a.base))
            .bearer_auth(publisher)
            .json(&serde_json::json!({"recipients": ["lat_a", "lat_b"], "event_type": "bench.hint", "payload": {"n": n}}))
            .send()
            .await?;
        if !response.status().is_success() {
            return Err(format!("publish {n} answered {}", response.status()).into());
        }
        sent.push(started);
        answered.push(Instant::now());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while [&seen_a, &seen_b].iter().any(|seen| seen.lock().expect("hint log")[publishes].is_none()) {
        if Instant::now() > deadline {
            return Err("not every hint arrived within 10 s of the last publish".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    reader_a.abort();
    reader_b.abort();
    // A subscriber learns of head n at the first hint for any head >= n (hints coalesce).
    let learned = |seen: &Arc<Mutex<Vec<Option<Instant>>>>| {
        let seen = seen.lock().expect("hint log");
        let mut earliest: Vec<Option<Instant>> = vec![None; publishes + 2];
        for n in (1..=publishes).rev() {
            earliest[n] = match (seen[n], earliest[n + 1]) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            };
        }
        earliest
    };
    let (learned_a, learned_b) = (learned(&seen_a), learned(&seen_b));
    let since = |learned: &[Option<Instant>], n: usize| {
        learned[n + 1].map_or(Duration::MAX, |at| at.saturating_duration_since(answered[n]))
    };
    let mut result = Latency {
        same_node: (0..publishes).map(|n| since(&learned_a, n)).collect(),
        cross_node: (0..publishes).map(|n| since(&learned_b, n)).collect(),
        publish: sent.iter().zip(&answered).map(|(s, a)| a.duration_since(*s)).collect(),
    };
    for samples in [&mut result.same_node, &mut result.cross_node, &mut result.publish] {
        samples.sort_unstable();
    }
    Ok(result)
}

pub(crate) async fn open_sse(node: &Node, token: &str) -> Result<reqwest::Response, BenchError> {
    let response = node.client.get(format!("{}/v1/streams/sse", node.base)).bearer_auth(token).send().await?;
    if !response.status().is_success() {
        return Err(format!("the SSE stream answered {}", response.status()).into());
    }
    Ok(response)
}

/// Records when each head was first announced on a stream.
pub(crate) async fn read_hints(mut response: reqwest::Response, seen: Arc<Mutex<Vec<Option<Instant>>>>) {
    let mut buffer = String::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let at = Instant::now();
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let head =
                frame.lines().find_map(|l| l.strip_prefix("id: ")).and_then(|id| id.parse::<usize>().ok());
            if let Some(head) = head {
                let mut seen = seen.lock().expect("hint log");
                if let Some(slot) = seen.get_mut(head) {
                    slot.get_or_insert(at);
                }
            }
        }
    }
}

/// Conditional head checks answered 304 per second, by [`HEAD_WORKERS`] concurrent clients.
async fn head_checks(node: &Node, token: &str) -> Result<f64, BenchError> {
    let url = format!("{}/v1/inbox/head", node.base);
    let first = node.client.get(&url).bearer_auth(token).send().await?;
    let etag = first
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .ok_or("the head answered without an ETag")?
        .to_owned();
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..HEAD_WORKERS {
        let (client, url, token, etag) = (node.client.clone(), url.clone(), token.to_owned(), etag.clone());
        workers.push(tokio::spawn(async move {
            let mut not_modified = 0u64;
            while started.elapsed() < HEAD_DURATION {
                let response =
                    client.get(&url).bearer_auth(&token).header("if-none-match", &etag).send().await;
                match response {
                    Ok(r) if r.status() == reqwest::StatusCode::NOT_MODIFIED => not_modified += 1,
                    Ok(r) => return Err(format!("a head check answered {}", r.status())),
                    Err(err) => return Err(err.to_string()),
                }
            }
            Ok(not_modified)
        }));
    }
    let mut total = 0;
    for worker in workers {
        total += worker.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// What the idle-subscriber phase measured.
struct Idle {
    asked: usize,
    connected: usize,
    rss_per_subscriber_kib: Option<f64>,
    heartbeat_cpu: Option<Duration>,
    heartbeats: u64,
}

async fn idle_subscribers(node: &Node, tokens: Vec<String>) -> Result<Idle, BenchError> {
    let asked = tokens.len();
    let cpu_before = process_cpu();
    tokio::time::sleep(CPU_WINDOW).await;
    let quiet_cpu = process_cpu().zip(cpu_before).map(|(after, before)| after.saturating_sub(before));
    let rss_before = vm_rss_kib();

    let addr = node.authority().to_owned();
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .args(["hints-idle-clients", &addr])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or("no stdin for the client process")?;
    let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout for the client process")?).lines();
    let mut text = tokens.join("\n");
    text.push_str("\n\n");
    drop(tokens);
    stdin.write_all(text.as_bytes()).await?;
    drop(text);
    let ready = lines.next_line().await?.ok_or("the client process exited early")?;
    let connected: usize = ready
        .strip_prefix("ready ")
        .and_then(|n| n.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("the client process said {ready:?}"))?;
    let gauge = "agent_inbox_connected_streams{transport=\"sse\"}";
    let deadline = Instant::now() + Duration::from_secs(30);
    while node.metric(gauge).await? < connected as f64 {
        if Instant::now() > deadline {
            return Err("the node never counted every idle stream".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rss_after = vm_rss_kib();
    let cpu_before = process_cpu();
    tokio::time::sleep(CPU_WINDOW).await;
    let busy_cpu = process_cpu().zip(cpu_before).map(|(after, before)| after.saturating_sub(before));
    let heartbeat_rounds = (CPU_WINDOW.as_millis() / HEARTBEAT.as_millis()) as u64;

    drop(stdin);
    let _ = child.wait().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while node.metric(gauge).await? > 0.0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(Idle {
        asked,
        connected,
        rss_per_subscriber_kib: rss_before
            .zip(rss_after)
            .filter(|_| connected > 0)
            .map(|(before, after)| after.saturating_sub(before) as f64 / connected as f64),
        heartbeat_cpu: busy_cpu.zip(quiet_cpu).map(|(busy, quiet)| busy.saturating_sub(quiet)),
        heartbeats: heartbeat_rounds * connected as u64,
    })
}

/// This process's resident memory in KiB (`VmRSS` of `/proc/self/status`, Linux only).
fn vm_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The child process of the idle phase: reads one access token per line from stdin (until an
/// empty line), opens one SSE stream per token to `addr`, waits for each stream's first
/// frame, prints `ready <connected> <failed>`, then holds every stream open without reading
/// until stdin closes.
pub async fn idle_clients(addr: String) -> ExitCode {
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let mut tokens = Vec::new();
    while let Ok(Some(line)) = stdin.next_line().await {
        if line.is_empty() {
            break;
        }
        tokens.push(line);
    }
    let mut streams = Vec::with_capacity(tokens.len());
    let mut failed = 0usize;
    let mut first_error = None;
    for batch in tokens.chunks(CONNECT_BATCH) {
        let opening: Vec<_> =
            batch.iter().map(|token| tokio::spawn(open_idle(addr.clone(), token.clone()))).collect();
        for task in opening {
            match task.await {
                Ok(Ok(stream)) => streams.push(stream),
                Ok(Err(err)) => {
                    failed += 1;
                    first_error.get_or_insert(err.to_string());
                }
                Err(err) => {
                    failed += 1;
                    first_error.get_or_insert(err.to_string());
                }
            }
        }
    }
    if let Some(err) = first_error {
        eprintln!("inbox-bench: {failed} idle streams failed to open; the first: {err}");
    }
    println!("ready {} {failed}", streams.len());
    while let Ok(Some(_)) = stdin.next_line().await {}
    drop(streams);
    ExitCode::SUCCESS
}

async fn open_idle(addr: String, token: String) -> Result<tokio::net::TcpStream, BenchError> {
    let mut stream = tokio::net::TcpStream::connect(&addr).await?;
    let request = format!(
        "GET /v1/streams/sse HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\nauthorization: Bearer {token}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut seen = Vec::new();
    let mut chunk = [0u8; 1024];
    while !String::from_utf8_lossy(&seen).contains("retry:") {
        let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut chunk)).await??;
        if n == 0 {
            return Err(format!("closed before the first frame: {}", String::from_utf8_lossy(&seen)).into());
        }
        seen.extend_from_slice(&chunk[..n]);
        if !seen.starts_with(b"HTTP/1.1 200") && seen.len() >= 12 {
            return Err(
                format!("refused: {}", String::from_utf8_lossy(&seen).lines().next().unwrap_or("")).into()
            );
        }
    }
    Ok(stream)
}

fn render(args: &HintsArgs, latency: &Latency, heads_per_second: f64, idle: &Idle) -> String {
    use std::fmt::Write as _;
    let ms = |d: Duration| {
        if d == Duration::MAX { "lost".to_owned() } else { format!("{:.1}", d.as_secs_f64() * 1e3) }
    };
    let row = |name: &str, samples: &[Duration]| {
        format!(
            "{name:<38} {:>8} {:>8} {:>8}\n",
            ms(percentile(samples, 50.0)),
            ms(percentile(samples, 99.0)),
            ms(samples.last().copied().unwrap_or_default())
        )
    };
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let mut out = String::new();
    let _ =
        writeln!(out, "inbox-bench hints: two nodes on one MariaDB database, {cores} cores shared with it\n");
    let _ = writeln!(
        out,
        "{:<38} {:>8} {:>8} {:>8}",
        format!("latency, {} paced publishes (ms)", args.publishes),
        "p50",
        "p99",
        "max"
    );
    out.push_str(&row("commit -> hint, same node", &latency.same_node));
    out.push_str(&row("commit -> hint, other node (notifier)", &latency.cross_node));
    out.push_str(&row("publish request (for reference)", &latency.publish));
    let _ = writeln!(out);
    let _ = writeln!(out, "idle SSE subscribers on one node: {} of {} asked", idle.connected, idle.asked);
    match idle.rss_per_subscriber_kib {
        Some(kib) => {
            let verdict = if kib <= 32.0 { "within" } else { "over" };
            let _ = writeln!(
                out,
                "resident memory per subscriber: {kib:.1} KiB ({verdict} the 32 KiB target; VmRSS delta)"
            );
        }
        None => {
            let _ = writeln!(out, "resident memory per subscriber: not measurable here (/proc/self/status)");
        }
    }
    match idle.heartbeat_cpu.filter(|_| idle.heartbeats > 0) {
        Some(cpu) => {
            let us = cpu.as_secs_f64() * 1e6 / idle.heartbeats as f64;
            let share = us * 1e-6 * idle.connected as f64 / DEFAULT_HEARTBEAT.as_secs_f64() * 100.0;
            let _ = writeln!(
                out,
                "heartbeat CPU: {us:.1} us each ({} heartbeats in {} s); at the default {} s interval \
                 {} subscribers cost {share:.2}% of one core",
                idle.heartbeats,
                CPU_WINDOW.as_secs(),
                DEFAULT_HEARTBEAT.as_secs(),
                idle.connected
            );
        }
        None => {
            let _ = writeln!(out, "heartbeat CPU: not measurable here (/proc/self/task/*/schedstat)");
        }
    }
    let _ = writeln!(
        out,
        "\nconditional head checks answered 304: {heads_per_second:.0} per second ({HEAD_WORKERS} clients in this process)"
    );
    out
}
