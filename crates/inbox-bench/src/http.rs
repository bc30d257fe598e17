//! `inbox-bench http`: the HTTP API under load against MariaDB, beside the raw-SQL claim+ack
//! baseline of the store bench measured in the same process.
//!
//! The service runs in a child process, so the load generator here does not share its
//! runtime (it still shares the machine's cores with it and with MariaDB).
//!
//! Four phases: the raw baselines (16 workers draining one shared recipient, as in `store`,
//! and 16 workers each draining its own); the HTTP drain (16 agents, each its own identity and
//! inbox, looping poll → claim 10 → ack over a pre-seeded backlog), whose rate the throughput
//! target compares with the raw baseline of the same shape, an inbox each; the live peak
//! (publishers as fast as they can while the agents long-poll and keep up); and the live
//! workload at half of that peak rate, paced, where the latency target applies.
//!
//! Why two peaks: draining a backlog claims full batches of 10, while live agents woken by
//! each publish claim one or two events at a time, several times the requests per event. Half
//! of the drain rate would overload the live workload; half of the live peak is half load.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use inbox_core::{EventBody, EventType, Recipient, RecipientId, TenantId};
use inbox_server::{CallerKind, TokenService};
use inbox_store::Publish;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::claim_ack::Inboxes;
use crate::node::Node;
use crate::report::percentile;
use crate::subjects::{Side, Subjects, tenant};
use crate::{BenchError, claim_ack, mysql_db};

/// Sizes of the `http` benchmark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpArgs {
    /// Concurrent agents (and raw workers).
    pub agents: usize,
    /// Backlog events of the peak phase (and of the raw baseline).
    pub events: usize,
    /// Length of the half-load phase, in seconds.
    pub seconds: u64,
}

impl Default for HttpArgs {
    fn default() -> Self {
        Self { agents: 16, events: 6_000, seconds: 10 }
    }
}

/// The throughput the HTTP claim+ack path must keep relative to raw SQL.
const TARGET_RATIO: f64 = 0.5;
/// The p99 claim and ack latency allowed at half of peak load.
const TARGET_P99: Duration = Duration::from_millis(20);
const BATCH: u32 = 10;
const TENANT: &str = "bench-http";
/// Concurrent paced publishers: enough that one slow publish does not hold back the rate.
const PUBLISHERS: usize = 8;
/// Agents each paced publish fans out to, so the generator reaches half of peak with a
/// quarter of the requests (it shares the machine with the server and the database).
const FANOUT: usize = 4;

/// Latencies of one HTTP operation.
#[derive(Debug, Default)]
struct Samples {
    poll: Vec<Duration>,
    claim: Vec<Duration>,
    ack: Vec<Duration>,
    publish: Vec<Duration>,
    events: u64,
    published: u64,
}

impl Samples {
    fn absorb(&mut self, other: Samples) {
        self.poll.extend(other.poll);
        self.claim.extend(other.claim);
        self.ack.extend(other.ack);
        self.publish.extend(other.publish);
        self.events += other.events;
        self.published += other.published;
    }

    fn sort(&mut self) {
        for v in [&mut self.poll, &mut self.claim, &mut self.ack, &mut self.publish] {
            v.sort_unstable();
        }
    }
}

pub async fn main(args: HttpArgs) -> ExitCode {
    mysql_db::report_in_fresh_database(String::new(), |db| run(args, db.url.clone())).await
}

async fn run(args: HttpArgs, url: String) -> Result<String, BenchError> {
    let subjects = Subjects::connect(&url).await?;
    eprintln!("raw baselines: {} workers draining {} events", args.agents, args.events);
    let shared = claim_ack::run(
        &subjects,
        Side::Raw,
        tenant("http-raw-shared", args.agents, Side::Raw),
        args.agents,
        args.events,
        Inboxes::Shared,
    )
    .await?;
    let own = claim_ack::run(
        &subjects,
        Side::Raw,
        tenant("http-raw-own", args.agents, Side::Raw),
        args.agents,
        args.events,
        Inboxes::OnePerWorker,
    )
    .await?;
    let (shared_rate, raw_rate) = (shared.events_per_second(), own.events_per_second());

    let config = Node::config(&url);
    let node = Node::spawn(&url).await?;
    let base = node.base.clone();
    let tokens =
        TokenService::new(subjects.store.clone(), &config).await.map_err(|e| -> BenchError { e.into() })?;
    let tenant_id = TenantId::new(TENANT)?;
    let mut agents = Vec::new();
    for n in 0..args.agents {
        let id = RecipientId::new(format!("agent-{n:03}"))?;
        let token = tokens
            .issue(&tenant_id, &id, CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES, None, false)
            .await;
        agents.push((id, token.map_err(|e| format!("{}: {}", e.code, e.detail))?.access_token));
    }
    let publisher = crate::node::publisher_token(&tokens, &tenant_id).await?;
    let client = reqwest::Client::builder().pool_max_idle_per_host(64).build()?;

    eprintln!("http peak: seeding {} events over {} agents", args.events, args.agents);
    for n in 0..args.events {
        let recipient = Recipient::agent(agents[n % agents.len()].0.clone());
        let publish = Publish::new(
            tenant_id.clone(),
            vec![recipient],
            EventType::new("bench.tick")?,
            EventBody::json(r#"{"bench":"tick"}"#)?,
        );
        subjects.store.inbox().publish(&publish).await?;
    }
    let (mut peak, peak_elapsed) = drive_agents(&client, &base, &agents, None).await?;
    let peak_rate = peak.events as f64 / peak_elapsed.as_secs_f64();

    eprintln!("http live peak: publishers unpaced for {} s", args.seconds);
    let mut live = live_load(&client, &base, &publisher, &agents, None, args.seconds).await?;
    let live_rate = live.events as f64 / args.seconds as f64;

    let half_rate = live_rate / 2.0;
    eprintln!("http at half load: {half_rate:.0} events/s published for {} s", args.seconds);
    let mut half = live_load(&client, &base, &publisher, &agents, Some(half_rate), args.seconds).await?;

    node.stop().await;
    subjects.close().await;

    peak.sort();
    live.sort();
    half.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let p = |v: &[Duration], q: f64| if v.is_empty() { 0.0 } else { ms(percentile(v, q)) };
    let mut out = String::new();
    out.push_str("inbox-bench http: the HTTP API (server in a child process, loopback) on MariaDB\n");
    out.push_str(&format!(
        "{} agents, each its own identity and inbox; batches of {BATCH}; {} backlog events drained; {} s live peak and {} s at half load\n\n",
        args.agents, args.events, args.seconds, args.seconds
    ));
    out.push_str(&format!("{:<36}{:>12}\n", "throughput", "events/s"));
    out.push_str(&format!("{:<36}{:>12.0}\n", "raw SQL claim+ack, one shared inbox", shared_rate));
    out.push_str(&format!("{:<36}{:>12.0}\n", "raw SQL claim+ack, an inbox each", raw_rate));
    out.push_str(&format!("{:<36}{:>12.0}\n", "HTTP drain (poll+claim+ack)", peak_rate));
    out.push_str(&format!("{:<36}{:>12.0}\n", "HTTP live peak processed", live_rate));
    out.push_str(&format!("{:<36}{:>12.0}\n", "HTTP half load (target)", half_rate));
    out.push_str(&format!(
        "{:<36}{:>12.0}\n",
        "HTTP half load published",
        half.published as f64 / args.seconds as f64
    ));
    out.push_str(&format!(
        "{:<36}{:>12.0}\n\n",
        "HTTP half load processed",
        half.events as f64 / args.seconds as f64
    ));
    out.push_str(&format!(
        "{:<10}{:>12}{:>12}{:>12}{:>12}{:>12}{:>12}\n",
        "ms", "drain p50", "drain p99", "live p50", "live p99", "half p50", "half p99"
    ));
    for (name, peak_v, live_v, half_v) in [
        ("poll", &peak.poll, &live.poll, &half.poll),
        ("claim", &peak.claim, &live.claim, &half.claim),
        ("ack", &peak.ack, &live.ack, &half.ack),
        ("publish", &peak.publish, &live.publish, &half.publish),
    ] {
        out.push_str(&format!(
            "{name:<10}{:>12.2}{:>12.2}{:>12.2}{:>12.2}{:>12.2}{:>12.2}\n",
            p(peak_v, 50.0),
            p(peak_v, 99.0),
            p(live_v, 50.0),
            p(live_v, 99.0),
            p(half_v, 50.0),
            p(half_v, 99.0)
        ));
    }
    let ratio = peak_rate / raw_rate;
    let claim_p99 = if half.claim.is_empty() { Duration::ZERO } else { percentile(&half.claim, 99.0) };
    let ack_p99 = if half.ack.is_empty() { Duration::ZERO } else { percentile(&half.ack, 99.0) };
    out.push_str(&format!(
        "\nHTTP drain / raw SQL with an inbox each = {ratio:.2} (target >= {TARGET_RATIO}): {}\n",
        if ratio >= TARGET_RATIO { "met" } else { "NOT met" }
    ));
    out.push_str(&format!(
        "p99 at half load: claim {:.2} ms, ack {:.2} ms (target < {} ms): {}\n",
        ms(claim_p99),
        ms(ack_p99),
        TARGET_P99.as_millis(),
        if claim_p99 < TARGET_P99 && ack_p99 < TARGET_P99 { "met" } else { "NOT met" }
    ));
    Ok(out)
}

/// Publishers (paced at `rate` events/s, or as fast as they can) while every agent long-polls
/// and drains its inbox, for `seconds`.
async fn live_load(
    client: &reqwest::Client,
    base: &str,
    publisher: &str,
    agents: &[(RecipientId, String)],
    rate: Option<f64>,
    seconds: u64,
) -> Result<Samples, BenchError> {
    let until = Instant::now() + Duration::from_secs(seconds);
    let publishing = publish(client, base, publisher, agents, rate, until);
    let draining = drive_agents(client, base, agents, Some(until));
    let (published, drained) = tokio::join!(publishing, draining);
    let mut samples = drained?.0;
    samples.absorb(published?);
    Ok(samples)
}

/// Every agent loops poll → claim → ack. Without `until`, each stops when its inbox is empty
/// (the peak phase); with it, each keeps going (long-polling when idle) until the deadline.
async fn drive_agents(
    client: &reqwest::Client,
    base: &str,
    agents: &[(RecipientId, String)],
    until: Option<Instant>,
) -> Result<(Samples, Duration), BenchError> {
    let started = Instant::now();
    let mut workers = JoinSet::new();
    for (_, token) in agents {
        let (client, base, token) = (client.clone(), base.to_owned(), token.clone());
        workers.spawn(async move {
            let mut samples = Samples::default();
            let mut cursor = 0u64;
            loop {
                if until.is_some_and(|u| Instant::now() >= u) {
                    return Ok::<_, BenchError>(samples);
                }
                let wait = if until.is_some() { 1 } else { 0 };
                let body = json!({"after_seq": cursor, "limit": BATCH, "include_claimable_only": true, "wait_seconds": wait});
                let (took, page) = call(&client, &base, &token, "/v1/inbox/poll-after-cursor", body).await?;
                samples.poll.push(took);
                cursor = page["next_cursor"].as_u64().unwrap_or(cursor);
                if page["events"].as_array().is_none_or(Vec::is_empty) {
                    if until.is_none() {
                        return Ok(samples);
                    }
                    continue;
                }
                let (took, claimed) = call(&client, &base, &token, "/v1/inbox/claim", json!({"limit": BATCH})).await?;
                samples.claim.push(took);
                let acks = acks_for(&claimed);
                if acks.is_empty() {
                    continue;
                }
                let n = acks.len() as u64;
                let (took, _) = call(&client, &base, &token, "/v1/inbox/acknowledge", json!({"acks": acks})).await?;
                samples.ack.push(took);
                samples.events += n;
            }
        });
    }
    let mut total = Samples::default();
    while let Some(worker) = workers.join_next().await {
        total.absorb(worker??);
    }
    Ok((total, started.elapsed()))
}

/// Publishes at `rate` events per second (or unpaced) over HTTP until `until`, spread over
/// the agents.
async fn publish(
    client: &reqwest::Client,
    base: &str,
    publisher: &str,
    agents: &[(RecipientId, String)],
    rate: Option<f64>,
    until: Instant,
) -> Result<Samples, BenchError> {
    let interval = rate.map(|rate| Duration::from_secs_f64((PUBLISHERS * FANOUT) as f64 / rate.max(1.0)));
    let agents: Arc<Vec<String>> = Arc::new(agents.iter().map(|(id, _)| id.to_string()).collect());
    let mut workers = JoinSet::new();
    for p in 0..PUBLISHERS {
        let (client, base, publisher, agents) =
            (client.clone(), base.to_owned(), publisher.to_owned(), agents.clone());
        workers.spawn(async move {
            let mut samples = Samples::default();
            let mut tick = interval.map(tokio::time::interval);
            if let Some(tick) = &mut tick {
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            }
            let mut n = p;
            while Instant::now() < until {
                if let Some(tick) = &mut tick {
                    tick.tick().await;
                }
                let recipients: Vec<&String> =
                    (0..FANOUT).map(|k| &agents[(n * FANOUT + k) % agents.len()]).collect();
                let body = json!({"recipients": recipients, "event_type": "bench.tick", "payload": {"n": n}});
                let (took, _) = call(&client, &base, &publisher, "/v1/events", body).await?;
                samples.publish.push(took);
                samples.published += FANOUT as u64;
                n += PUBLISHERS;
            }
            Ok::<_, BenchError>(samples)
        });
    }
    let mut total = Samples::default();
    while let Some(worker) = workers.join_next().await {
        total.absorb(worker??);
    }
    Ok(total)
}

/// The acknowledgements for every event of a claim answer: its ids with their lease tokens.
pub(crate) fn acks_for(claimed: &Value) -> Vec<Value> {
    claimed["claims"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| json!({"event_id": c["event_id"], "lease_token": c["lease_token"]}))
        .collect()
}

/// One authenticated POST; fails the benchmark on any non-2xx answer.
pub(crate) async fn call(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    path: &str,
    body: Value,
) -> Result<(Duration, Value), BenchError> {
    let started = Instant::now();
    let response = client.post(format!("{base}{path}")).bearer_auth(token).json(&body).send().await?;
    let status = response.status();
    let value: Value = response.json().await?;
    let took = started.elapsed();
    if !status.is_success() {
        return Err(format!("{path} answered {status}: {value}").into());
    }
    Ok((took, value))
}
