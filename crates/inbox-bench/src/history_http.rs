//! `inbox-bench history`, through the HTTP API: claim+ack as agents do it, against a service
//! node in a child process that records each event's history (`[inbox] history = true`, the
//! default) or not, on one database. The agents (this process) drain equal backlogs through
//! a node of one setting, then of the other, in turns (on, off, off, on, ...), so load that
//! drifts during the run falls on both. Beside throughput, the node's CPU time per event:
//! steadier than throughput on a shared machine, and the node's share of the cost.

use std::time::{Duration, Instant};

use inbox_core::{EventBody, EventType, Recipient, RecipientId, TenantId};
use inbox_server::{CallerKind, TokenService};
use inbox_store::{ConnectOptions, Publish, SqlStore, StoreConfig};
use serde_json::json;
use tokio::task::JoinSet;

use crate::http::{acks_for, call};
use crate::node::Node;
use crate::{BenchError, cpu};

/// Events per claim and per acknowledge, as in the other claim+ack rows.
const BATCH_EVENTS: u32 = 10;
/// Rounds per setting; the order alternates so neither setting always goes first.
const ROUNDS: usize = 8;
/// Concurrent agents, each with its own inbox (the HTTP agents' shape).
const AGENTS: usize = 16;
/// Slowdown of claim+ack with history that issue 16 allows.
const TARGET_SLOWDOWN: f64 = 0.10;
const TENANT: &str = "bench-history-http";
/// Events drained unmeasured through each freshly started node.
const WARMUP_EVENTS: usize = 160;

/// What one setting measured over its rounds.
#[derive(Debug, Default)]
struct Side {
    events: u64,
    elapsed: Duration,
    round_rates: Vec<f64>,
    node_cpu: Option<Duration>,
}

impl Side {
    fn rate(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    fn cpu_per_event_us(&self) -> Option<f64> {
        Some(self.node_cpu?.as_secs_f64() * 1e6 / self.events.max(1) as f64)
    }
}

/// The HTTP table for one backend: `events` per setting, spread over the rounds.
pub async fn report(backend: &str, url: &str, events: usize) -> Result<String, BenchError> {
    let store = SqlStore::connect(&ConnectOptions::new(url), StoreConfig::default()).await?;
    store.migrate().await?;
    crate::secrets::prepare(&store, url).await?;
    let outcome = measure(&store, url, events).await;
    store.close().await;
    let [with, without] = outcome?;

    let ratio = with.rate() / without.rate().max(f64::MIN_POSITIVE);
    let mut rounds: Vec<f64> = with
        .round_rates
        .iter()
        .zip(&without.round_rates)
        .map(|(a, b)| a / b.max(f64::MIN_POSITIVE))
        .collect();
    rounds.sort_unstable_by(f64::total_cmp);
    let median = rounds.get(rounds.len() / 2).copied().unwrap_or(0.0);
    let cpu = |side: &Side| side.cpu_per_event_us().map_or_else(|| "-".to_owned(), |us| format!("{us:.0}"));
    let mut out = format!(
        "inbox-bench history, HTTP: claim {BATCH_EVENTS} + ack through a node recording history (on) and one \
         not (off), {backend}\n{AGENTS} agents (an inbox each) in this process, the node in a child process \
         (one at a time, on one database), {events} events per setting over {ROUNDS} rounds (on, off, off, on, ...)\n\n\
         {:<10} {:>10} {:>10} {:>8} {:>13} {:>14} {:>14}\n",
        "", "on ev/s", "off ev/s", "on/off", "median round", "on node us/ev", "off node us/ev"
    );
    out.push_str(&format!(
        "{:<10} {:>10.0} {:>10.0} {ratio:>8.3} {median:>13.3} {:>14} {:>14}\n",
        "claim+ack",
        with.rate(),
        without.rate(),
        cpu(&with),
        cpu(&without)
    ));
    if let (Some(on), Some(off)) = (with.cpu_per_event_us(), without.cpu_per_event_us()) {
        out.push_str(&format!("node cpu per event, on / off: {:.3}\n", on / off));
    }
    let verdict = if median >= 1.0 - TARGET_SLOWDOWN { "met" } else { "MISSED" };
    out.push_str(&format!(
        "target: history costs claim+ack at most {:.0} % (median round on/off >= {:.2}): {verdict}; rounds {:.3}-{:.3}\n\n",
        TARGET_SLOWDOWN * 100.0,
        1.0 - TARGET_SLOWDOWN,
        rounds.first().copied().unwrap_or_default(),
        rounds.last().copied().unwrap_or_default(),
    ));
    Ok(out)
}

/// Runs the rounds. Each phase starts its node, warms it up unmeasured (connections, prepared
/// statements, caches), drains a fresh backlog through it and stops it: one node at a time,
/// so an idle node's background work never competes with the measured one (on SQLite it
/// would wait for the file's write lock).
async fn measure(store: &SqlStore, url: &str, events: usize) -> Result<[Side; 2], BenchError> {
    let tokens =
        TokenService::new(store.clone(), &Node::config(url)).await.map_err(|e| -> BenchError { e.into() })?;
    let tenant_id = TenantId::new(TENANT)?;
    let mut agents = Vec::with_capacity(AGENTS);
    for n in 0..AGENTS {
        let id = RecipientId::new(format!("agent-{n:03}"))?;
        let token = tokens
            .issue(&tenant_id, &id, CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES, None, false)
            .await
            .map_err(|e| format!("{}: {}", e.code, e.detail))?
            .access_token;
        agents.push((id, token));
    }
    let client = reqwest::Client::builder().pool_max_idle_per_host(64).build()?;
    let mut sides = [Side::default(), Side::default()];
    for round in 0..ROUNDS {
        let share = events / ROUNDS + usize::from(round < events % ROUNDS);
        let order = if round % 4 == 0 || round % 4 == 3 { [0, 1] } else { [1, 0] };
        for side in order {
            let node = Node::spawn_with_history(url, side == 0).await?;
            let phase = phase(store, &tenant_id, &agents, &client, &node, share).await;
            node.stop().await;
            let (drained, elapsed, spent) = phase?;
            let rate = drained as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
            eprintln!("round {round} history {}: {rate:>6.0} ev/s", if side == 0 { "on" } else { "off" });
            let measured = &mut sides[side];
            // Unknown (no /proc) once any phase could not read it.
            measured.node_cpu = match (round, spent, measured.node_cpu) {
                (0, Some(spent), _) => Some(spent),
                (_, Some(spent), Some(sum)) => Some(sum + spent),
                _ => None,
            };
            measured.events += drained;
            measured.elapsed += elapsed;
            measured.round_rates.push(rate);
        }
    }
    Ok(sides)
}

/// One measured phase on a started node: events drained, wall time, the node's CPU time.
async fn phase(
    store: &SqlStore,
    tenant_id: &TenantId,
    agents: &[(RecipientId, String)],
    client: &reqwest::Client,
    node: &Node,
    events: usize,
) -> Result<(u64, Duration, Option<Duration>), BenchError> {
    seed(store, tenant_id, agents, WARMUP_EVENTS).await?;
    drain(client, &node.base, agents).await?;
    seed(store, tenant_id, agents, events).await?;
    let cpu_before = node.pid().and_then(cpu::pid_cpu);
    let started = Instant::now();
    let drained = drain(client, &node.base, agents).await?;
    let elapsed = started.elapsed();
    let spent =
        node.pid().and_then(cpu::pid_cpu).zip(cpu_before).map(|(after, before)| after.saturating_sub(before));
    Ok((drained, elapsed, spent))
}

/// Publishes about `events` events fanned out over every agent's inbox (not timed).
async fn seed(
    store: &SqlStore,
    tenant_id: &TenantId,
    agents: &[(RecipientId, String)],
    events: usize,
) -> Result<(), BenchError> {
    let recipients: Vec<Recipient> = agents.iter().map(|(id, _)| Recipient::agent(id.clone())).collect();
    let event_type = EventType::new("bench.history")?;
    for _ in 0..events.div_ceil(agents.len()) {
        let publish =
            Publish::new(tenant_id.clone(), recipients.clone(), event_type.clone(), EventBody::json("{}")?);
        store.inbox().publish(&publish).await?;
    }
    Ok(())
}

/// Every agent claims and acknowledges until its inbox is empty; returns the events done.
async fn drain(
    client: &reqwest::Client,
    base: &str,
    agents: &[(RecipientId, String)],
) -> Result<u64, BenchError> {
    let mut workers = JoinSet::new();
    for (_, token) in agents {
        let (client, base, token) = (client.clone(), base.to_owned(), token.clone());
        workers.spawn(async move {
            let mut done = 0u64;
            loop {
                let (_, claimed) =
                    call(&client, &base, &token, "/v1/inbox/claim", json!({"limit": BATCH_EVENTS})).await?;
                let acks = acks_for(&claimed);
                if acks.is_empty() {
                    return Ok::<_, BenchError>(done);
                }
                done += acks.len() as u64;
                call(&client, &base, &token, "/v1/inbox/acknowledge", json!({"acks": acks})).await?;
            }
        });
    }
    let mut total = 0;
    while let Some(worker) = workers.join_next().await {
        total += worker??;
    }
    Ok(total)
}
