//! `inbox-bench trust`: what RFC 9421 request signatures cost.
//!
//! Two measurements: the cost of verifying one signed request in process (header parsing,
//! signature base, the ed25519 or hmac-sha256 check and the Content-Digest, no I/O), and the
//! throughput of claim+ack through the HTTP API on MariaDB with every claim and ack signed
//! (ed25519, then hmac-sha256), beside the same loop unsigned. The three modes take turns in
//! rotating order, so drift in the database spreads over all of them, after one unmeasured
//! warm-up phase each; each phase drains a fresh backlog. The service runs in a child process (as in `http`); the agents run in this
//! process and sign there, on the same CPUs as the service and the database (a pessimistic
//! setup: real agents sign on their own machines). Beside throughput it prints the CPU time
//! per event of the node, of the agents and of a local database server: steadier than
//! throughput when other work shares the machine, and the node's share says how much of a
//! node's capacity signatures take wherever the agents and the database run.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use inbox_core::{EventBody, EventType, Recipient, RecipientId, TenantId};
use inbox_server::{CallerKind, TokenService};
use inbox_store::{ConnectOptions, Publish, SqlStore, StoreConfig};
use inbox_trust::content_digest::content_digest_header;
use inbox_trust::message_signatures::{
    RequestParts, SignatureParams, SigningKey, VerifyPolicy, check_signature_headers, sign,
};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::http::acks_for;
use crate::node::Node;
use crate::{BenchError, cpu, mysql_db};

/// Sizes of the `trust` benchmark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustArgs {
    /// Concurrent agents, each with its own key and inbox.
    pub agents: usize,
    /// Events per phase (rounded up to a multiple of `agents`).
    pub events: usize,
    /// Phases per mode (signed and unsigned alternate).
    pub rounds: usize,
}

impl Default for TrustArgs {
    fn default() -> Self {
        Self { agents: 16, events: 16_000, rounds: 6 }
    }
}

/// Signed claim+ack must keep this share of the unsigned throughput.
const TARGET_RATIO: f64 = 0.9;
const BATCH: u32 = 10;
const TENANT: &str = "bench-trust";
const VERIFY_ITERATIONS: u32 = 20_000;

pub async fn main(args: TrustArgs) -> ExitCode {
    mysql_db::report_in_fresh_database(micro(), |db| http(args, db.url.clone())).await
}

/// Verification cost per request, in process, for both algorithms.
fn micro() -> String {
    let body = br#"{"acks":[{"event_id":"0197f0ab-44f7-7f1a-b0ef-1f5d0f9a1c70","lease_token":"lt_0123456789abcdef0123456789abcdef","result":"completed"}]}"#;
    let mut out = String::from("inbox-bench trust: RFC 9421 signatures on claim/acknowledge\n\n");
    out.push_str(&format!("{:<48}{:>12}\n", "in process, one request", "us/request"));
    for (name, key) in [
        ("ed25519", SigningKey::ed25519_from_seed(&[7; 32])),
        ("hmac-sha256", SigningKey::hmac_sha256(&[7; 32]).expect("a 32-byte secret")),
    ] {
        let now = inbox_api::time::now_ms() / 1000;
        let mut parts = RequestParts::new("POST", "https", "inbox.example.com", "/v1/inbox/acknowledge")
            .with_header("content-type", "application/json")
            .with_header("content-digest", &content_digest_header(body));
        let params =
            SignatureParams::for_inbox_request(now, 120, "k1", "nonce-0001").with_alg(key.algorithm());
        let signed = sign(&parts, "sig1", &params, &key).expect("signing works");
        parts = parts
            .with_header("signature-input", &signed.signature_input)
            .with_header("signature", &signed.signature);
        let verifying = key.verifying_key();
        let started = Instant::now();
        for _ in 0..VERIFY_ITERATIONS {
            let policy = VerifyPolicy::inbox(now);
            let unverified = check_signature_headers(&parts, &policy).expect("headers check");
            unverified.verify_with_key(body, &verifying).expect("the signature verifies");
        }
        let per = started.elapsed().as_secs_f64() * 1e6 / f64::from(VERIFY_ITERATIONS);
        out.push_str(&format!("{:<48}{per:>12.1}\n", format!("{name} verify (parse, base, check, digest)")));
        let started = Instant::now();
        for n in 0..VERIFY_ITERATIONS {
            let nonce = format!("nonce-{n}");
            inbox_trust::sign_inbox_request(
                "POST",
                "inbox.example.com",
                "/v1/inbox/acknowledge",
                body,
                &key,
                "k1",
                now,
                &nonce,
            )
            .expect("signing works");
        }
        let per = started.elapsed().as_secs_f64() * 1e6 / f64::from(VERIFY_ITERATIONS);
        out.push_str(&format!("{:<48}{per:>12.1}\n", format!("{name} sign (agent side, digest included)")));
    }
    out.push('\n');
    out
}

struct Agent {
    token: String,
    /// One key per signing mode: ed25519, hmac-sha256.
    keys: [(SigningKey, String); 2],
}

/// What a phase sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Unsigned,
    Ed25519,
    HmacSha256,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Unsigned, Mode::Ed25519, Mode::HmacSha256];

    fn label(self) -> &'static str {
        match self {
            Mode::Unsigned => "unsigned claim+ack",
            Mode::Ed25519 => "signed claim+ack, ed25519",
            Mode::HmacSha256 => "signed claim+ack, hmac-sha256",
        }
    }

    fn key(self) -> Option<usize> {
        match self {
            Mode::Unsigned => None,
            Mode::Ed25519 => Some(0),
            Mode::HmacSha256 => Some(1),
        }
    }
}

async fn http(args: TrustArgs, url: String) -> Result<String, BenchError> {
    let store = SqlStore::connect(&ConnectOptions::new(&url), StoreConfig::default()).await?;
    store.migrate().await?;
    crate::secrets::prepare(&store, &url).await?;
    let config = Node::config(&url);
    let node = Node::spawn(&url).await?;
    let node_pid = node.pid();
    let base = node.base.clone();
    let client = reqwest::Client::builder().pool_max_idle_per_host(64).build()?;
    let tokens = TokenService::new(store.clone(), &config).await.map_err(|e| -> BenchError { e.into() })?;
    let tenant_id = TenantId::new(TENANT)?;
    let mut agents = Vec::new();
    for n in 0..args.agents {
        let id = RecipientId::new(format!("agent-{n:03}"))?;
        let token = tokens
            .issue(&tenant_id, &id, CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES, None, false)
            .await
            .map_err(|e| format!("{}: {}", e.code, e.detail))?
            .access_token;
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed)?;
        let ed25519 = SigningKey::ed25519_from_seed(&seed);
        let public = ed25519.verifying_key().ed25519_public_bytes().unwrap_or_default();
        let body = json!({"algorithm": "ed25519", "public_key": base64url(&public)});
        let response =
            client.post(format!("{base}/v1/agent-keys")).bearer_auth(&token).json(&body).send().await?;
        let registered: Value = response.json().await?;
        let ed25519_id = registered["key_id"]
            .as_str()
            .ok_or_else(|| format!("key registration failed: {registered}"))?
            .to_owned();
        // The second key must be signed by the first.
        let body = json!({"algorithm": "hmac-sha256"});
        let issued = post(
            &client,
            &base,
            node.authority(),
            &token,
            "/v1/agent-keys",
            &body,
            Some((&ed25519, &ed25519_id)),
        )
        .await?;
        let secret = base64url_decode(issued["secret"].as_str().unwrap_or_default())
            .ok_or_else(|| format!("hmac key registration failed: {issued}"))?;
        let hmac = SigningKey::hmac_sha256(&secret)?;
        let hmac_id = issued["key_id"].as_str().unwrap_or_default().to_owned();
        agents.push((id, Agent { token, keys: [(ed25519, ed25519_id), (hmac, hmac_id)] }));
    }

    let authority = node.authority().to_owned();
    // One unmeasured phase per mode first: the first phase of a run otherwise drains fresh
    // tables, and the first signed ones prepare the nonce statements and fill the key cache.
    for mode in Mode::ALL {
        seed(&store, &tenant_id, &agents, args.events / 4).await?;
        drain(&client, &base, &authority, &agents, mode).await?;
    }
    let mut rates: [Vec<f64>; 3] = Default::default();
    // CPU time per mode while draining: the node, the agents (this process), the database.
    let mut cpu_used: [Cpu; 3] = Default::default();
    for phase in 0..args.rounds * 3 {
        // Rounds of three phases, one per mode, the order rotating by one each round.
        let mode = Mode::ALL[(phase + phase / 3) % 3];
        seed(&store, &tenant_id, &agents, args.events).await?;
        let before = Cpu::now(node_pid);
        let started = Instant::now();
        let drained = drain(&client, &base, &authority, &agents, mode).await?;
        let rate = drained as f64 / started.elapsed().as_secs_f64();
        eprintln!("phase {phase}: {} {rate:.0} events/s", mode.label());
        let index = Mode::ALL.iter().position(|m| *m == mode).unwrap_or(0);
        rates[index].push(rate);
        cpu_used[index].add(&before, &Cpu::now(node_pid), drained);
    }
    let mean_of = async |histogram: &str| -> Result<Option<f64>, BenchError> {
        let sum = node.metric(&format!("{histogram}_sum")).await?;
        let count = node.metric(&format!("{histogram}_count")).await?;
        Ok((count > 0.0).then(|| sum / count))
    };
    let server_verify_us = mean_of("agent_inbox_signature_verify_seconds").await?.map(|s| s * 1e6);
    let nonce_wait_us = mean_of("agent_inbox_signature_nonce_seconds").await?.map(|s| s * 1e6);
    let nonces = node.metric(r#"agent_inbox_signature_verifications_total{result="valid"}"#).await?;
    let nonce_writes = node.metric("agent_inbox_signature_nonce_writes_total").await?;
    node.stop().await;
    store.close().await;

    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let unsigned_rate = mean(&rates[0]);
    let mut out = String::new();
    out.push_str(&format!(
        "HTTP claim {BATCH} + ack, {} agents (own keys and inbox each), {} events x {} phases per mode, MariaDB\n",
        args.agents, args.events, args.rounds
    ));
    out.push_str(&format!(
        "{:<36}{:>10}{:>12}{:>12}{:>12}{:>12}\n",
        "throughput and cpu us/event", "events/s", "/ unsigned", "node", "agents", "database"
    ));
    for ((mode, rates), cpu) in Mode::ALL.iter().zip(&rates).zip(&cpu_used) {
        let rate = mean(rates);
        out.push_str(&format!(
            "{:<36}{rate:>10.0}{:>12.2}{:>12}{:>12}{:>12}\n",
            mode.label(),
            rate / unsigned_rate,
            cpu.per_event(cpu.node),
            cpu.per_event(cpu.agents),
            cpu.per_event(cpu.database)
        ));
    }
    out.push_str(
        "(node: the service, in a child process; agents: this process, which signs; database: a local \
         MariaDB)\n",
    );
    let node_share = |mode: usize| {
        let (unsigned, signed) = (&cpu_used[0], &cpu_used[mode]);
        Some(
            unsigned.node?.as_secs_f64()
                / unsigned.events.max(1) as f64
                / (signed.node?.as_secs_f64() / signed.events.max(1) as f64),
        )
    };
    for (index, mode) in Mode::ALL.iter().enumerate().skip(1) {
        if let Some(share) = node_share(index) {
            out.push_str(&format!(
                "node cpu per event, unsigned / {}: {share:.2} (the node's capacity left with signatures)\n",
                mode.label()
            ));
        }
    }
    if let Some(us) = server_verify_us {
        out.push_str(&format!(
            "\nserver-side verification, wall time incl. the key cache: {us:.0} us/request (mean)\n"
        ));
    }
    if let Some(us) = nonce_wait_us {
        out.push_str(&format!("wait for the nonce to be recorded: {us:.0} us/request (mean)\n"));
    }
    if nonce_writes > 0.0 {
        out.push_str(&format!(
            "nonces recorded: {nonces:.0} in {nonce_writes:.0} statements ({:.1} per statement)\n",
            nonces / nonce_writes
        ));
    }
    for (mode, signed) in Mode::ALL.iter().zip(&rates).skip(1) {
        // Each round holds one phase of every mode, close in time: its ratio is free of the
        // slow drift between rounds, and the spread shows how noisy the machine was.
        let mut paired: Vec<f64> = signed.iter().zip(&rates[0]).map(|(s, u)| s / u).collect();
        paired.sort_by(f64::total_cmp);
        let ratio = mean(signed) / unsigned_rate;
        out.push_str(&format!(
            "{} / unsigned = {ratio:.2} (target >= {TARGET_RATIO}): {}; per round {:.2} median, {:.2}-{:.2}\n",
            mode.label(),
            if ratio >= TARGET_RATIO { "met" } else { "NOT met" },
            median(&paired),
            paired.first().copied().unwrap_or_default(),
            paired.last().copied().unwrap_or_default(),
        ));
    }
    Ok(out)
}

/// Publishes about `events` events, fanned out over every agent's inbox (so seeding takes a
/// fraction of the phase).
async fn seed(
    store: &SqlStore,
    tenant_id: &TenantId,
    agents: &[(RecipientId, Agent)],
    events: usize,
) -> Result<(), BenchError> {
    for _ in 0..events.div_ceil(agents.len()) {
        let publish = Publish::new(
            tenant_id.clone(),
            agents.iter().map(|(id, _)| Recipient::agent(id.clone())).collect(),
            EventType::new("bench.tick")?,
            EventBody::json("{}")?,
        );
        store.inbox().publish(&publish).await?;
    }
    Ok(())
}

/// Every agent claims and acknowledges until its inbox is empty; returns the events done.
async fn drain(
    client: &reqwest::Client,
    base: &str,
    authority: &str,
    agents: &[(RecipientId, Agent)],
    mode: Mode,
) -> Result<u64, BenchError> {
    let mut workers = JoinSet::new();
    for (_, agent) in agents {
        let client = client.clone();
        let base = base.to_owned();
        let authority = authority.to_owned();
        let token = agent.token.clone();
        let key = mode.key().map(|i| agent.keys[i].clone());
        workers.spawn(async move {
            let signer = key.as_ref().map(|(key, key_id)| (key, key_id.as_str()));
            let mut done = 0u64;
            loop {
                let claim = json!({"limit": BATCH});
                let claimed =
                    post(&client, &base, &authority, &token, "/v1/inbox/claim", &claim, signer).await?;
                let acks = acks_for(&claimed);
                if acks.is_empty() {
                    return Ok::<_, BenchError>(done);
                }
                done += acks.len() as u64;
                let ack = json!({"acks": acks});
                post(&client, &base, &authority, &token, "/v1/inbox/acknowledge", &ack, signer).await?;
            }
        });
    }
    let mut total = 0;
    while let Some(worker) = workers.join_next().await {
        total += worker??;
    }
    Ok(total)
}

async fn post(
    client: &reqwest::Client,
    base: &str,
    authority: &str,
    token: &str,
    path: &str,
    body: &Value,
    signer: Option<(&SigningKey, &str)>,
) -> Result<Value, BenchError> {
    let bytes = serde_json::to_vec(body)?;
    let mut request =
        client.post(format!("{base}{path}")).bearer_auth(token).header("content-type", "application/json");
    if let Some((key, key_id)) = signer {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce)?;
        let now = inbox_api::time::now_ms() / 1000;
        let headers = inbox_trust::sign_inbox_request(
            "POST",
            authority,
            path,
            &bytes,
            key,
            key_id,
            now,
            &base64url(&nonce),
        )?;
        for (name, value) in headers.pairs() {
            request = request.header(name, value);
        }
    }
    let response = request.body(bytes).send().await?;
    let status = response.status();
    let value: Value = response.json().await?;
    if !status.is_success() {
        return Err(format!("{path} answered {status}: {value}").into());
    }
    Ok(value)
}

/// CPU time spent while draining, and the events drained meanwhile.
#[derive(Debug, Default)]
struct Cpu {
    node: Option<Duration>,
    agents: Option<Duration>,
    database: Option<Duration>,
    events: u64,
}

impl Cpu {
    /// Readings now (cumulative since each process started).
    fn now(node_pid: Option<u32>) -> Cpu {
        Cpu {
            node: node_pid.and_then(cpu::pid_cpu),
            agents: cpu::process_cpu(),
            database: cpu::database_server_cpu(),
            events: 0,
        }
    }

    /// Adds what was spent between the readings `before` and `after`.
    fn add(&mut self, before: &Cpu, after: &Cpu, events: u64) {
        let spent = |sum: Option<Duration>, then: Option<Duration>, now: Option<Duration>| {
            Some(sum.unwrap_or_default() + now?.saturating_sub(then?))
        };
        self.node = spent(self.node, before.node, after.node);
        self.agents = spent(self.agents, before.agents, after.agents);
        self.database = spent(self.database, before.database, after.database);
        self.events += events;
    }

    fn per_event(&self, cpu: Option<Duration>) -> String {
        cpu.map_or_else(
            || "-".to_owned(),
            |cpu| format!("{:.0}", cpu.as_secs_f64() * 1e6 / self.events.max(1) as f64),
        )
    }
}

/// The middle of sorted `values` (the mean of the two middle ones for an even count).
fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

fn base64url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text).ok()
}
