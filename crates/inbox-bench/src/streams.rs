//! `inbox-bench streams`: what connected agents cost one node. The node runs on SQLite in a
//! child process (`inbox-bench node`), the streams are opened by client processes of their
//! own (`inbox-bench streams-clients`) from many loopback source addresses (127.0.0.0/8, so
//! ephemeral ports do not run out), and the report gives:
//!
//! - the node's resident memory per idle stream, for SSE and for WebSocket (VmRSS of the node
//!   before and after each transport's streams open);
//! - the node's CPU while every stream idles, per 1,000 streams, over one heartbeat interval
//!   (so each stream sends one heartbeat in the window), less the same window with no stream;
//! - the time to open them;
//! - publish → hint latency to the last of 1,000 and of 10,000 subscribers of one inbox (half
//!   SSE, half WebSocket), from the moment the publish request is sent.
//!
//! Every count is bounded (`COUNT_MAX` in `args.rs`) and everything runs on loopback.

use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use inbox_core::{RecipientId, TenantId};
use inbox_server::{CallerKind, TokenService};
use inbox_store::{ConnectOptions, SqlStore, StoreConfig};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::BenchError;
use crate::cpu::pid_cpu;
use crate::node::Node;
use crate::report::percentile;

/// Sizes of the `streams` benchmark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamsArgs {
    /// Idle streams in all, half SSE and half WebSocket.
    pub streams: usize,
    /// Subscriber counts of the fan-out rows.
    pub fanout: Vec<usize>,
    /// Publishes per fan-out row.
    pub publishes: usize,
}

impl Default for StreamsArgs {
    fn default() -> Self {
        Self { streams: 16_000, fanout: vec![1_000, 10_000], publishes: 40 }
    }
}

/// Streams one client process holds at most (its open-files limit must allow them).
const STREAMS_PER_CLIENT: usize = 8_000;
/// Connections a client process opens at once.
pub(crate) const CONNECT_BATCH: usize = 256;
/// The node's heartbeat interval (the default): the CPU window is one interval long.
const HEARTBEAT: Duration = Duration::from_secs(30);
/// Time between two publishes of a fan-out row, so one hint's fan-out ends before the next.
const PACE: Duration = Duration::from_millis(250);
const TENANT: &str = "bench";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Sse,
    WebSocket,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Sse => "sse",
            Transport::WebSocket => "ws",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Transport> {
        match text {
            "sse" => Some(Transport::Sse),
            "ws" => Some(Transport::WebSocket),
            _ => None,
        }
    }
}

/// Runs the benchmark on a SQLite database in a temporary directory and prints the report.
pub async fn main(args: StreamsArgs) -> ExitCode {
    let dir = std::env::temp_dir().join(format!("inbox-bench-streams-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let url = format!("sqlite://{}", dir.join("inbox.db").display());
    let outcome = run(&args, &url).await;
    let _ = std::fs::remove_dir_all(&dir);
    crate::secrets::forget(&url);
    match outcome {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("inbox-bench streams: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &StreamsArgs, url: &str) -> Result<String, BenchError> {
    let node = Node::spawn(url).await?;
    let pid = node.pid().ok_or("the node runs in a child process")?;
    let store = SqlStore::connect(&ConnectOptions::new(url), StoreConfig::default()).await?;
    crate::secrets::prepare(&store, url).await?;
    let tokens = TokenService::new(store.clone(), &Node::config(url)).await?;
    let tenant = TenantId::new(TENANT)?;
    let issue = async |subject: &str, kind: CallerKind, scope: &str| -> Result<String, BenchError> {
        let subject = RecipientId::new(subject)?;
        Ok(tokens
            .issue(&tenant, &subject, kind, scope, None, false)
            .await
            .map_err(|e| e.detail)?
            .access_token)
    };

    eprintln!("idle: {} tokens", args.streams);
    let mut idle_tokens = Vec::with_capacity(args.streams);
    for n in 0..args.streams {
        idle_tokens.push(issue(&format!("idle_{n:06}"), CallerKind::Agent, "stream.subscribe").await?);
    }
    eprintln!("idle: the node's CPU over {} s without streams", HEARTBEAT.as_secs());
    let quiet_cpu = cpu_over(pid, HEARTBEAT).await?;
    let half = args.streams / 2;
    let mut idle = Vec::new();
    let mut clients = Vec::new();
    let mut source = 0;
    for (transport, tokens) in
        [(Transport::Sse, &idle_tokens[..half]), (Transport::WebSocket, &idle_tokens[half..])]
    {
        eprintln!("idle: opening {} {} streams", tokens.len(), transport.name());
        let rss_before = vm_rss_kib(pid)?;
        let started = Instant::now();
        let (opened, mut group) = open_clients(&node, transport, Mode::Idle, tokens, &mut source).await?;
        let open_time = started.elapsed();
        wait_for_gauge(&node, transport, opened).await?;
        settle().await;
        let rss_after = vm_rss_kib(pid)?;
        idle.push(IdleRow { transport, asked: tokens.len(), opened, open_time, rss_before, rss_after });
        clients.append(&mut group);
    }
    drop(idle_tokens);
    let opened: usize = idle.iter().map(|row| row.opened).sum();
    eprintln!("idle: the node's CPU over {} s with {opened} idle streams", HEARTBEAT.as_secs());
    let busy_cpu = cpu_over(pid, HEARTBEAT).await?;
    let rss_end = vm_rss_kib(pid)?;
    for client in clients {
        client.close().await;
    }
    for transport in [Transport::Sse, Transport::WebSocket] {
        wait_for_gauge(&node, transport, 0).await?;
    }

    let publisher = issue("publisher", CallerKind::Publisher, "events.publish").await?;
    let mut fanout = Vec::new();
    for &subscribers in &args.fanout {
        let agent = format!("fanout_{subscribers}");
        let token = issue(&agent, CallerKind::Agent, "stream.subscribe").await?;
        eprintln!("fan-out: {subscribers} subscribers of {agent}, {} publishes", args.publishes);
        fanout.push(
            fan_out(&node, pid, &publisher, &agent, &token, subscribers, args.publishes, &mut source).await?,
        );
    }
    node.stop().await;
    store.close().await;
    let cpu = CpuRow { quiet: quiet_cpu, busy: busy_cpu, streams: opened, rss_end };
    Ok(render(args, &idle, &cpu, &fanout))
}

/// Waits a moment for the allocator and the node's tasks to settle before reading its RSS.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// What a client process does with its streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Open them and never read.
    Idle,
    /// Read every hint and report when all its streams have seen each head.
    Watch,
}

/// One running client process.
struct ClientProcess {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl ClientProcess {
    async fn close(mut self) {
        drop(self.stdin);
        let _ = self.child.wait().await;
    }
}

/// Starts client processes holding one `transport` stream per token; returns how many opened.
async fn open_clients(
    node: &Node,
    transport: Transport,
    mode: Mode,
    tokens: &[String],
    source: &mut usize,
) -> Result<(usize, Vec<ClientProcess>), BenchError> {
    let mut clients = Vec::new();
    for share in tokens.chunks(STREAMS_PER_CLIENT) {
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .args(["streams-clients", node.authority()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let mut stdin = child.stdin.take().ok_or("no stdin for a client process")?;
        let stdout = child.stdout.take().ok_or("no stdout for a client process")?;
        let mode_name = if mode == Mode::Idle { "idle" } else { "watch" };
        let mut text = format!("{} {mode_name} {}\n", transport.name(), *source);
        *source += 1;
        for token in share {
            text.push_str(token);
            text.push('\n');
        }
        text.push('\n');
        stdin.write_all(text.as_bytes()).await?;
        clients.push(ClientProcess { child, stdin, lines: BufReader::new(stdout).lines() });
    }
    let mut opened = 0;
    for client in &mut clients {
        let ready = client.lines.next_line().await?.ok_or("a client process exited early")?;
        let mut words = ready.split_whitespace().skip(1);
        let (ok, failed) = (words.next(), words.next());
        let ok: usize = ok.and_then(|n| n.parse().ok()).ok_or_else(|| format!("a client said {ready:?}"))?;
        if failed != Some("0") {
            eprintln!("streams: a client process could not open every stream: {ready}");
        }
        opened += ok;
    }
    Ok((opened, clients))
}

/// Waits until the node counts `count` open streams of `transport`.
async fn wait_for_gauge(node: &Node, transport: Transport, count: usize) -> Result<(), BenchError> {
    let series = format!("agent_inbox_connected_streams{{transport=\"{}\"}}", gauge_label(transport));
    let deadline = Instant::now() + Duration::from_secs(60);
    while node.metric(&series).await? as usize != count {
        if Instant::now() > deadline {
            let now = node.metric(&series).await?;
            return Err(format!("the node counts {now} {} streams, not {count}", transport.name()).into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

fn gauge_label(transport: Transport) -> &'static str {
    match transport {
        Transport::Sse => "sse",
        Transport::WebSocket => "websocket",
    }
}

/// The node's CPU time over `window`.
async fn cpu_over(pid: u32, window: Duration) -> Result<Duration, BenchError> {
    let before = pid_cpu(pid).ok_or("this platform does not report a process's CPU time")?;
    tokio::time::sleep(window).await;
    let after = pid_cpu(pid).ok_or("this platform does not report a process's CPU time")?;
    Ok(after.saturating_sub(before))
}

/// A process's resident memory in KiB (`VmRSS` of `/proc/PID/status`, Linux only).
fn vm_rss_kib(pid: u32) -> Result<u64, BenchError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).ok_or("no VmRSS in /proc")?;
    Ok(line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).ok_or("VmRSS unreadable")?)
}

struct IdleRow {
    transport: Transport,
    asked: usize,
    opened: usize,
    open_time: Duration,
    rss_before: u64,
    rss_after: u64,
}

struct CpuRow {
    quiet: Duration,
    busy: Duration,
    streams: usize,
    rss_end: u64,
}

struct FanoutRow {
    subscribers: usize,
    opened: usize,
    /// CPU time per publish of the node, and of the client processes reading the hints.
    node_cpu: Duration,
    clients_cpu: Duration,
    /// Publish request sent → the last subscriber read the hint, per publish.
    to_last: Vec<Duration>,
    lost: usize,
}

/// Opens `subscribers` streams of `agent` (half SSE, half WebSocket), publishes to it
/// `publishes` times, one every [`PACE`], and measures each publish → the last hint read.
#[allow(clippy::too_many_arguments)]
async fn fan_out(
    node: &Node,
    pid: u32,
    publisher: &str,
    agent: &str,
    token: &str,
    subscribers: usize,
    publishes: usize,
    source: &mut usize,
) -> Result<FanoutRow, BenchError> {
    let tokens = vec![token.to_owned(); subscribers];
    let half = subscribers / 2;
    let (sse, mut clients) = open_clients(node, Transport::Sse, Mode::Watch, &tokens[..half], source).await?;
    let (ws, mut more) =
        open_clients(node, Transport::WebSocket, Mode::Watch, &tokens[half..], source).await?;
    clients.append(&mut more);
    let opened = sse + ws;
    // Each client reports `hint HEAD UNIX_MICROS` once all its streams have read HEAD.
    let reports = Arc::new(Mutex::new(vec![Vec::<u64>::new(); publishes + 1]));
    let mut readers = Vec::new();
    for client in &mut clients {
        let mut lines = std::mem::replace(&mut client.lines, empty_lines()?);
        let reports = reports.clone();
        readers.push(tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let mut words = line.split_whitespace().skip(1).map(|w| w.parse::<u64>().ok());
                if let (Some(Some(head)), Some(Some(at))) = (words.next(), words.next()) {
                    if let Some(slot) = reports.lock().expect("reports").get_mut(head as usize) {
                        slot.push(at);
                    }
                }
            }
        }));
    }
    let client_pids: Vec<u32> = clients.iter().filter_map(|c| c.child.id()).collect();
    let clients_cpu = || client_pids.iter().filter_map(|pid| pid_cpu(*pid)).sum::<Duration>();
    let (node_before, clients_before) = (pid_cpu(pid).unwrap_or_default(), clients_cpu());
    let mut sent = Vec::with_capacity(publishes);
    let mut pace = tokio::time::interval(PACE);
    for n in 1..=publishes {
        pace.tick().await;
        sent.push(unix_micros());
        let response = node
            .client
            .post(format!("{}/v1/events", node.base))
            .bearer_auth(publisher)
            .json(&serde_json::json!({"recipients": [agent], "event_type": "bench.fanout", "payload": {"n": n}}))
            .send()
            .await?;
        if !response.status().is_success() {
            return Err(format!("publish {n} answered {}", response.status()).into());
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let complete =
        |reports: &Mutex<Vec<Vec<u64>>>| reports.lock().expect("reports")[publishes].len() == clients.len();
    while !complete(&reports) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let per_publish = |d: Duration| d / publishes.max(1) as u32;
    let node_cpu = per_publish(pid_cpu(pid).unwrap_or_default().saturating_sub(node_before));
    let clients_cpu = per_publish(clients_cpu().saturating_sub(clients_before));
    for client in clients {
        client.close().await;
    }
    for reader in readers {
        reader.abort();
    }
    let reports = reports.lock().expect("reports");
    let mut to_last = Vec::new();
    let mut lost = 0;
    for (n, sent_at) in sent.iter().enumerate() {
        let seen = &reports[n + 1];
        if seen.len() < opened.div_ceil(STREAMS_PER_CLIENT).max(1) {
            lost += 1;
            continue;
        }
        let last = seen.iter().copied().max().unwrap_or(*sent_at);
        to_last.push(Duration::from_micros(last.saturating_sub(*sent_at)));
    }
    to_last.sort_unstable();
    Ok(FanoutRow { subscribers, opened, node_cpu, clients_cpu, to_last, lost })
}

/// A line reader that is already at its end, to take a client's own out of it.
fn empty_lines() -> Result<Lines<BufReader<ChildStdout>>, BenchError> {
    let mut child = std::process::Command::new("true").stdout(Stdio::piped()).spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let _ = child.wait();
    Ok(BufReader::new(ChildStdout::from_std(stdout)?).lines())
}

pub(crate) fn unix_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

fn render(args: &StreamsArgs, idle: &[IdleRow], cpu: &CpuRow, fanout: &[FanoutRow]) -> String {
    use std::fmt::Write as _;
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "inbox-bench streams: one node on SQLite in a child process, {cores} cores shared with the clients\n"
    );
    let _ = writeln!(
        out,
        "{:<10} {:>8} {:>8} {:>10} {:>12} {:>12} {:>14}",
        "idle", "asked", "opened", "open (s)", "RSS before", "RSS after", "KiB/stream"
    );
    for row in idle {
        let per = (row.rss_after.saturating_sub(row.rss_before)) as f64 / row.opened.max(1) as f64;
        let _ = writeln!(
            out,
            "{:<10} {:>8} {:>8} {:>10.1} {:>9} KiB {:>9} KiB {:>14.2}",
            row.transport.name(),
            row.asked,
            row.opened,
            row.open_time.as_secs_f64(),
            row.rss_before,
            row.rss_after,
            per
        );
    }
    let extra = cpu.busy.saturating_sub(cpu.quiet).as_secs_f64();
    let per_thousand = extra / HEARTBEAT.as_secs_f64() * 100.0 / (cpu.streams.max(1) as f64 / 1_000.0);
    let _ = writeln!(
        out,
        "\nidle CPU with {} streams over {} s (one heartbeat each): {:.3} s ({:.3} s without streams)\n  \
         = {:.4} % of a core per 1,000 streams, {:.3} % per 10,000; node RSS {} KiB",
        cpu.streams,
        HEARTBEAT.as_secs(),
        cpu.busy.as_secs_f64(),
        cpu.quiet.as_secs_f64(),
        per_thousand,
        per_thousand * 10.0,
        cpu.rss_end
    );
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
    let _ = writeln!(
        out,
        "\n{:<26} {:>8} {:>8} {:>8} {:>8} {:>6} {:>14} {:>14}",
        format!("fan-out, {} publishes", args.publishes),
        "opened",
        "p50 ms",
        "p99 ms",
        "max ms",
        "lost",
        "node CPU/hint",
        "clients CPU"
    );
    for row in fanout {
        let _ = writeln!(
            out,
            "{:<26} {:>8} {:>8} {:>8} {:>8} {:>6} {:>11} ms {:>11} ms",
            format!("publish -> last of {}", row.subscribers),
            row.opened,
            ms(percentile(&row.to_last, 50.0)),
            ms(percentile(&row.to_last, 99.0)),
            ms(row.to_last.last().copied().unwrap_or_default()),
            row.lost,
            ms(row.node_cpu),
            ms(row.clients_cpu)
        );
    }
    let _ = writeln!(
        out,
        "\nidle streams: half SSE, half WebSocket (bearer header), each of its own agent, from 127.x.y.z \
         source addresses; fan-out: half of each transport on one agent's inbox, a publish every {} ms",
        PACE.as_millis()
    );
    out
}
