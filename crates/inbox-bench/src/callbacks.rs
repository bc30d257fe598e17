//! `inbox-bench callbacks`: webhook isolation (issue 31). Ten agents each register a callback
//! with a receiver of their own on 127.0.0.1; one event is published to all ten at a steady
//! pace, and each receiver's hints are timed from the publish. Two runs on one node in this
//! process, on one MariaDB database: all ten receivers healthy, then one of the ten never
//! answering (every delivery to it times out). The report compares the nine healthy
//! receivers' publish-to-delivery p50 and p99 across the runs; the target is a p99 within 2x.

use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use inbox_server::{CallerKind, Config, TokenService};
use inbox_store::{ConnectOptions, SqlStore, StoreConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use crate::BenchError;
use crate::node::Node;
use crate::report::percentile;

/// Sizes of the `callbacks` benchmark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbacksArgs {
    /// Length of each run's publishing phase.
    pub seconds: u64,
}

impl Default for CallbacksArgs {
    fn default() -> Self {
        Self { seconds: 15 }
    }
}

const ENDPOINTS: usize = 10;
/// One publish to all ten agents this often: slower than a registration's rate limit
/// (`max_rate_per_minute` 600, 100 ms), so every publish gets a hint of its own.
const PACE: Duration = Duration::from_millis(200);
/// How often the node looks for due deliveries (the default is 250 ms); latencies below it
/// are not resolved.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How long hints still due are waited for after the last publish.
const DRAIN: Duration = Duration::from_secs(3);
const TARGET_RATIO: f64 = 2.0;
const SECRET: [u8; 32] = [0x42; 32];

pub async fn main(args: CallbacksArgs) -> ExitCode {
    crate::mysql_db::report_in_fresh_database(String::new(), |db| run(args, db.url.clone())).await
}

/// One run's measurements of the healthy receivers.
struct Run {
    latencies: Vec<Duration>,
    missing: usize,
    /// Requests the never-answering receiver got (hints only).
    failing_requests: usize,
}

async fn run(args: CallbacksArgs, url: String) -> Result<String, BenchError> {
    let mut config = Node::config(&url);
    config.callbacks.allow_http_loopback = true;
    config.callbacks.poll_interval = POLL_INTERVAL;
    let node = Node::start(config.clone()).await?;
    let store = SqlStore::connect(&ConnectOptions::new(&url), StoreConfig::default()).await?;
    crate::secrets::prepare(&store, &url).await?;
    let tokens = TokenService::new(store.clone(), &config).await?;
    let duration = Duration::from_secs(args.seconds);
    eprintln!("all {ENDPOINTS} endpoints healthy: {} s", args.seconds);
    let healthy = measure(&node, &tokens, "bench-cb-healthy", false, duration).await?;
    eprintln!("1 of {ENDPOINTS} endpoints never answers: {} s", args.seconds);
    let failing = measure(&node, &tokens, "bench-cb-failing", true, duration).await?;
    node.stop().await;
    store.close().await;
    Ok(render(&args, &config, healthy, failing))
}

/// Registers ten callbacks in `tenant` (the last one's receiver never answering a hint when
/// `one_fails`), publishes for `duration`, and times the healthy receivers' hints.
async fn measure(
    node: &Node,
    tokens: &TokenService,
    tenant: &str,
    one_fails: bool,
    duration: Duration,
) -> Result<Run, BenchError> {
    let issue = async |subject: &str, kind: CallerKind, scope: &str| {
        crate::node::token(tokens, tenant, subject, kind, scope).await
    };
    let agents: Vec<String> = (0..ENDPOINTS).map(|n| format!("agent_{n:02}")).collect();
    let mut receivers = Vec::with_capacity(ENDPOINTS);
    for (n, agent) in agents.iter().enumerate() {
        let hangs = one_fails && n == ENDPOINTS - 1;
        let receiver = Receiver::start(hangs).await?;
        let token = issue(agent, CallerKind::Agent, "callback.register").await?;
        let body = json!({
            "callback_url": format!("http://{}/hook", receiver.addr),
            "secret": URL_SAFE_NO_PAD.encode(SECRET),
            "max_rate_per_minute": 600,
        });
        let response = node
            .client
            .post(format!("{}/v1/callback-registrations", node.base))
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await?;
        let registered: Value = response.json().await?;
        if registered["status"] != "active" {
            return Err(format!("registering {agent}'s callback: {registered}").into());
        }
        receivers.push(receiver);
    }
    let publisher = issue("publisher", CallerKind::Publisher, "events.publish").await?;

    // Per agent: (inbox_seq, when its publish was sent).
    let mut published: Vec<Vec<(u64, Instant)>> = vec![Vec::new(); ENDPOINTS];
    let mut pace = tokio::time::interval(PACE);
    let started = Instant::now();
    while started.elapsed() < duration {
        pace.tick().await;
        let sent = Instant::now();
        let body = json!({"recipients": agents, "event_type": "bench.callback", "payload": {}});
        let response = node
            .client
            .post(format!("{}/v1/events", node.base))
            .bearer_auth(&publisher)
            .json(&body)
            .send()
            .await?;
        if !response.status().is_success() {
            return Err(format!("a publish answered {}", response.status()).into());
        }
        let answer: Value = response.json().await?;
        for delivery in answer["deliveries"].as_array().ok_or("a publish answered no deliveries")? {
            let agent = delivery["recipient_id"].as_str().unwrap_or_default();
            if let Some(n) = agents.iter().position(|a| a == agent) {
                published[n].push((delivery["inbox_seq"].as_u64().unwrap_or(0), sent));
            }
        }
    }
    let healthy = if one_fails { ENDPOINTS - 1 } else { ENDPOINTS };
    let last_heads: Vec<u64> = published.iter().map(|p| p.last().map_or(0, |(seq, _)| *seq)).collect();
    let drain_until = Instant::now() + DRAIN;
    while Instant::now() < drain_until {
        let caught_up = (0..healthy).all(|n| receivers[n].highest_head() >= last_heads[n]);
        if caught_up {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut latencies = Vec::new();
    let mut missing = 0;
    // The tenth agent's numbers are left out of both runs, so both compare the same nine.
    for n in 0..ENDPOINTS - 1 {
        let hints = receivers[n].hints();
        for (seq, sent) in &published[n] {
            match hints.iter().filter(|(head, _)| head >= seq).map(|(_, at)| *at).min() {
                Some(at) => latencies.push(at.saturating_duration_since(*sent)),
                None => missing += 1,
            }
        }
    }
    latencies.sort();
    let failing_requests = if one_fails { receivers[ENDPOINTS - 1].requests() } else { 0 };
    Ok(Run { latencies, missing, failing_requests })
}

fn render(args: &CallbacksArgs, config: &Config, healthy: Run, failing: Run) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
    let mut out = format!(
        "inbox-bench callbacks: {ENDPOINTS} webhook endpoints on 127.0.0.1, one event to all {ENDPOINTS} agents every \
         {} ms for {} s per run\n(one node in this process on MariaDB; callbacks_poll_interval {} ms, callbacks_timeout {} s, \
         callbacks_in_flight_max {}, callbacks_in_flight_per_origin_max {})\n\n",
        PACE.as_millis(),
        args.seconds,
        POLL_INTERVAL.as_millis(),
        config.callbacks.timeout.as_secs(),
        config.callbacks.in_flight_max,
        config.callbacks.in_flight_per_origin_max,
    );
    out.push_str(&format!(
        "{:<44}{:>12}{:>10}{:>10}{:>10}\n",
        "publish -> delivery, 9 healthy endpoints", "deliveries", "missing", "p50 ms", "p99 ms"
    ));
    for (label, run) in
        [("all 10 endpoints healthy", &healthy), ("1 of 10 times out on every delivery", &failing)]
    {
        out.push_str(&format!(
            "{label:<44}{:>12}{:>10}{:>10.1}{:>10.1}\n",
            run.latencies.len(),
            run.missing,
            ms(percentile(&run.latencies, 50.0)),
            ms(percentile(&run.latencies, 99.0)),
        ));
    }
    let p99 = |run: &Run| ms(percentile(&run.latencies, 99.0)).max(f64::MIN_POSITIVE);
    let ratio = p99(&failing) / p99(&healthy);
    let verdict = if ratio <= TARGET_RATIO && failing.missing == 0 { "met" } else { "NOT met" };
    out.push_str(&format!(
        "\np99 with one endpoint failing / p99 all healthy: {ratio:.2} (target at most {TARGET_RATIO:.1}: {verdict})\n\
         the failing endpoint was sent {} hints, each left to time out\n",
        failing.failing_requests
    ));
    out
}

/// A webhook receiver: answers challenges with [`SECRET`] and records each hint's head and
/// arrival; one that `hangs` reads a hint and never answers it.
struct Receiver {
    addr: std::net::SocketAddr,
    state: Arc<ReceiverState>,
}

#[derive(Default)]
struct ReceiverState {
    hangs: bool,
    hints: Mutex<Vec<(u64, Instant)>>,
    requests: Mutex<usize>,
}

impl Receiver {
    async fn start(hangs: bool) -> Result<Receiver, BenchError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(ReceiverState { hangs, ..ReceiverState::default() });
        let serving = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(answer(stream, serving.clone()));
            }
        });
        Ok(Receiver { addr, state })
    }

    fn hints(&self) -> Vec<(u64, Instant)> {
        self.state.hints.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn highest_head(&self) -> u64 {
        self.hints().iter().map(|(head, _)| *head).max().unwrap_or(0)
    }

    fn requests(&self) -> usize {
        *self.state.requests.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One request per connection (the service keeps no idle connections to receivers).
async fn answer(mut stream: TcpStream, state: Arc<ReceiverState>) {
    let Some(body) = read_request(&mut stream).await else {
        return;
    };
    let arrived = Instant::now();
    let Ok(signal) = serde_json::from_slice::<Value>(&body) else {
        return;
    };
    let reply = if signal["signal_type"] == "callback.challenge" {
        let challenge = signal["challenge"].as_str().unwrap_or_default();
        let answer =
            json!({"challenge_response": inbox_trust::webhooks::challenge_response(&SECRET, challenge)});
        let text = answer.to_string();
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
            text.len()
        )
    } else {
        *state.requests.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        if state.hangs {
            // Never answered: wait for the service to give up and close the connection.
            let mut rest = [0u8; 64];
            while matches!(stream.read(&mut rest).await, Ok(n) if n > 0) {}
            return;
        }
        let head = signal["head_seq"].as_u64().unwrap_or(0);
        state.hints.lock().unwrap_or_else(PoisonError::into_inner).push((head, arrived));
        "HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n".to_owned()
    };
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// The body of one HTTP/1.1 request with a `content-length`; `None` if the peer went away.
async fn read_request(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buffer = Vec::with_capacity(2048);
    let mut chunk = [0u8; 2048];
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await.ok().filter(|n| *n > 0)?;
        buffer.extend_from_slice(&chunk[..n]);
        if buffer.len() > 64 * 1024 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok().filter(|n| *n > 0)?;
        buffer.extend_from_slice(&chunk[..n]);
    }
    Some(buffer[head_end..head_end + length].to_vec())
}
