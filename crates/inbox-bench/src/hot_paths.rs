//! The claim+ack and `304` head rows of `inbox-bench publish`, and the paired-round bookkeeping
//! its tables share: claim(10)+ack through the node against the same claim and acknowledgement
//! by hand at READ COMMITTED (an inbox per agent, a fresh backlog per round), and conditional
//! head checks answered `304` against `SELECT head_seq` by primary key.

use std::time::{Duration, Instant};

use inbox_core::{RecipientId, TenantId};
use inbox_server::{CallerKind, TokenService};
use serde_json::json;
use tokio::task::JoinSet;

use crate::http::{acks_for, call};
use crate::node::Node;
use crate::report::percentile;
use crate::subjects::Subjects;
use crate::{BenchError, raw, verify};

/// Agents of the claim+ack rows, an inbox each.
const AGENTS: [usize; 3] = [1, 4, 16];
/// Backlog events of one claim+ack side and round, shared out over its agents.
const CLAIM_EVENTS: usize = 2_000;
/// Events a claim asks for.
const CLAIM_BATCH: u32 = 10;
/// The target of the issue for claim(10)+ack at every agent count.
const CLAIM_TARGET: f64 = 0.9;
/// Concurrent connections of the head rows.
const HEAD_CONNECTIONS: usize = 16;
/// Length of one head side and round.
const HEAD_SECONDS: Duration = Duration::from_secs(3);
/// The target of the issue for the `304` head.
const HEAD_TARGET: f64 = 1.0;

/// One side of one round.
#[derive(Debug, Default)]
pub struct Side {
    pub events: usize,
    pub elapsed: Duration,
    pub latencies: Vec<Duration>,
    pub fsyncs: u64,
    pub statements: u64,
}

impl Side {
    pub fn rate(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The sides of one table row over its paired rounds.
#[derive(Debug)]
pub struct Rounds<const N: usize> {
    names: [&'static str; N],
    sides: [Vec<Side>; N],
}

impl<const N: usize> Rounds<N> {
    pub fn new(names: [&'static str; N]) -> Self {
        Rounds { names, sides: std::array::from_fn(|_| Vec::new()) }
    }

    /// Records side `side` of round `round` (rounds are added in order).
    pub fn add(&mut self, round: usize, side: usize, measured: Side) {
        debug_assert_eq!(self.sides[side].len(), round, "{} out of order", self.names[side]);
        self.sides[side].push(measured);
    }

    /// The median over the rounds of side `a`'s rate over side `b`'s.
    pub fn median_ratio(&self, a: usize, b: usize) -> f64 {
        let mut ratios: Vec<f64> =
            self.sides[a].iter().zip(&self.sides[b]).map(|(a, b)| a.rate() / b.rate().max(1e-9)).collect();
        median(&mut ratios)
    }

    /// A side's median rate and, as `show` asks, p50 and p99 over every round's latencies and
    /// its fsyncs and statements per event.
    pub fn cells(&self, side: usize, show: Show) -> String {
        let rounds = &self.sides[side];
        let mut rates: Vec<f64> = rounds.iter().map(Side::rate).collect();
        let mut latencies: Vec<Duration> = rounds.iter().flat_map(|r| r.latencies.iter().copied()).collect();
        latencies.sort_unstable();
        let ms = |p: f64| percentile(&latencies, p).as_secs_f64() * 1e3;
        let events = rounds.iter().map(|r| r.events).sum::<usize>().max(1) as f64;
        let mut cells = format!("{:>10.0}", median(&mut rates));
        if show != Show::RateP99 {
            cells.push_str(&format!(" {:>7.2}", ms(50.0)));
        }
        cells.push_str(&format!(" {:>7.2}", ms(99.0)));
        if show == Show::All {
            cells.push_str(&format!(
                " {:>8.2} {:>7.2}",
                rounds.iter().map(|r| r.fsyncs).sum::<u64>() as f64 / events,
                rounds.iter().map(|r| r.statements).sum::<u64>() as f64 / events,
            ));
        }
        cells
    }
}

/// The cells of a side in a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    RateP99,
    Latencies,
    /// With the database's fsyncs and statements per event.
    All,
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_unstable_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// One line saying whether `ratio` meets `target`.
pub fn verdict(what: &str, ratio: f64, target: f64) -> String {
    let met = if ratio >= target { "met" } else { "NOT met" };
    format!("target {what}: >= {target:.1} x by hand: {ratio:.2} ({met})\n")
}

/// Gathers the workers' latencies into one side.
pub async fn collect(
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

/// Claim(10)+ack at 1, 4 and 16 agents: by hand against the node as shipped.
pub async fn claim_ack_table(
    subjects: &Subjects,
    node: &Node,
    tokens: &TokenService,
    rounds: usize,
) -> Result<String, BenchError> {
    let mut table = format!(
        "claim({CLAIM_BATCH})+ack: {CLAIM_EVENTS} events per side and round over the agents, an inbox each; \
         by hand = the store's claim and acknowledgement statements at READ COMMITTED; latency per batch\n\n\
         {:>11} |  by hand: ev/s  p50 ms  p99 ms |    HTTP: ev/s  p50 ms  p99 ms | HTTP/hand\n",
        "agents"
    );
    let mut verdicts = String::new();
    for agents in AGENTS {
        eprintln!("claim+ack: {agents} agents, {rounds} rounds");
        let mut row = Rounds::new(["by hand", "HTTP"]);
        for round in 0..rounds {
            for turn in 0..2 {
                let side = (round + turn) % 2;
                let tenant = TenantId::new(format!("bench-claim-{side}-{agents}-{round}"))?;
                let ids = (0..agents)
                    .map(|n| RecipientId::new(format!("agent-{n:03}")))
                    .collect::<Result<Vec<_>, _>>()?;
                for id in &ids {
                    raw::seed_backlog(&subjects.raw, tenant.as_str(), id.as_str(), CLAIM_EVENTS / agents)
                        .await?;
                }
                let measured = if side == 0 {
                    claim_ack_by_hand(subjects, &tenant, &ids).await?
                } else {
                    claim_ack_http(node, tokens, &tenant, &ids).await?
                };
                verify::acknowledged(&subjects.raw, &tenant, (CLAIM_EVENTS / agents * agents) as u64).await?;
                row.add(round, side, measured);
            }
        }
        let ratio = row.median_ratio(1, 0);
        table.push_str(&format!(
            "{agents:>11} | {} | {} | {ratio:>9.2}\n",
            row.cells(0, Show::Latencies),
            row.cells(1, Show::Latencies)
        ));
        verdicts.push_str(&verdict(&format!("claim+ack at {agents:>2} agents"), ratio, CLAIM_TARGET));
    }
    table.push('\n');
    table.push_str(&verdicts);
    Ok(table)
}

async fn claim_ack_by_hand(
    subjects: &Subjects,
    tenant: &TenantId,
    ids: &[RecipientId],
) -> Result<Side, BenchError> {
    let started = Instant::now();
    let mut workers = JoinSet::new();
    for id in ids {
        let (pool, tenant, id) = (subjects.raw.clone(), tenant.to_string(), id.to_string());
        workers.spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let call = Instant::now();
                let (claimed, _) = raw::claim_next(&pool, &tenant, &id, CLAIM_BATCH).await?;
                if claimed.is_empty() {
                    return Ok::<_, BenchError>(latencies);
                }
                raw::acknowledge(&pool, &tenant, &id, &claimed).await?;
                let took = call.elapsed();
                latencies.extend(std::iter::repeat_n(took, claimed.len()));
            }
        });
    }
    collect(workers, started).await
}

async fn claim_ack_http(
    node: &Node,
    tokens: &TokenService,
    tenant: &TenantId,
    ids: &[RecipientId],
) -> Result<Side, BenchError> {
    let mut agents = Vec::new();
    for id in ids {
        let issued = tokens
            .issue(tenant, id, CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES, None, false)
            .await;
        agents.push(issued.map_err(|e| format!("{}: {}", e.code, e.detail))?.access_token);
    }
    let started = Instant::now();
    let mut workers = JoinSet::new();
    for token in agents {
        let (client, base) = (node.client.clone(), node.base.clone());
        workers.spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let call_started = Instant::now();
                let (_, claimed) =
                    call(&client, &base, &token, "/v1/inbox/claim", json!({"limit": CLAIM_BATCH})).await?;
                let acks = acks_for(&claimed);
                if acks.is_empty() {
                    return Ok::<_, BenchError>(latencies);
                }
                let n = acks.len();
                call(&client, &base, &token, "/v1/inbox/acknowledge", json!({"acks": acks})).await?;
                latencies.extend(std::iter::repeat_n(call_started.elapsed(), n));
            }
        });
    }
    collect(workers, started).await
}

/// The `304` head at [`HEAD_CONNECTIONS`] connections against `SELECT head_seq` by primary key.
pub async fn head_table(
    subjects: &Subjects,
    node: &Node,
    tokens: &TokenService,
    rounds: usize,
) -> Result<String, BenchError> {
    let tenant = TenantId::new("bench-head")?;
    let id = RecipientId::new("agent-head")?;
    raw::seed_backlog(&subjects.raw, tenant.as_str(), id.as_str(), 1).await?;
    let issued =
        tokens.issue(&tenant, &id, CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES, None, false).await;
    let token = issued.map_err(|e| format!("{}: {}", e.code, e.detail))?.access_token;
    let url = format!("{}/v1/inbox/head", node.base);
    let first = node.client.get(&url).bearer_auth(&token).send().await?;
    let etag = first
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .ok_or("the head answered without an ETag")?;
    let etag = etag.to_owned();
    eprintln!("head: {HEAD_CONNECTIONS} connections, {rounds} rounds of {} s a side", HEAD_SECONDS.as_secs());
    let mut row = Rounds::new(["SELECT", "304"]);
    for round in 0..rounds {
        for turn in 0..2 {
            let side = (round + turn) % 2;
            let started = Instant::now();
            let mut workers = JoinSet::new();
            for _ in 0..HEAD_CONNECTIONS {
                let (pool, client, url, token, etag) =
                    (subjects.raw.clone(), node.client.clone(), url.clone(), token.clone(), etag.clone());
                let (tenant, id) = (tenant.to_string(), id.to_string());
                workers.spawn(async move {
                    let mut latencies = Vec::new();
                    while started.elapsed() < HEAD_SECONDS {
                        let call = Instant::now();
                        if side == 0 {
                            raw::head_seq(&pool, &tenant, &id).await?;
                        } else {
                            let answer = client
                                .get(&url)
                                .bearer_auth(&token)
                                .header("if-none-match", &etag)
                                .send()
                                .await?;
                            if answer.status() != reqwest::StatusCode::NOT_MODIFIED {
                                return Err(format!("a head check answered {}", answer.status()).into());
                            }
                        }
                        latencies.push(call.elapsed());
                    }
                    Ok::<_, BenchError>(latencies)
                });
            }
            row.add(round, side, collect(workers, started).await?);
        }
    }
    let ratio = row.median_ratio(1, 0);
    Ok(format!(
        "head: {HEAD_CONNECTIONS} connections for {} s a side and round; by hand = SELECT head_seq by primary key; \
         HTTP = GET /v1/inbox/head answered 304 (If-None-Match)\n\n\
        connections |  by hand: q/s  p50 ms  p99 ms |     304: q/s  p50 ms  p99 ms |  304/hand\n\
        {HEAD_CONNECTIONS:>11} | {} | {} | {ratio:>9.2}\n\n{}",
        HEAD_SECONDS.as_secs(),
        row.cells(0, Show::Latencies),
        row.cells(1, Show::Latencies),
        verdict(&format!("304 head at {HEAD_CONNECTIONS} connections"), ratio, HEAD_TARGET)
    ))
}
