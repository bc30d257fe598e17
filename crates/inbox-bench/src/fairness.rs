//! `inbox-bench fairness`: fair claims (issue 31) against sequence claims, on MariaDB,
//! through `inbox_store::SqlStore` (the claim path is the store's; no HTTP in between).
//!
//! **Noisy sender.** Sender A's `--backlog` events wait in one agent's inbox; the agent claims
//! 10 at a time and acknowledges them, as fast as it can; after `--b-after` claims sender B
//! publishes 20. Per order (sequence, fair): in which claim after B's publish B's last event
//! was taken, and A's claim+ack throughput over the run. Target: with fair claims all of B's
//! events within 5 claims, A's throughput within 10 % of sequence claims.
//!
//! **Claim cost by keys.** The same backlog spread over 1, 100 and 10,000 keys; claim p50/p99
//! of fair claims of 10 (with their acknowledgements), beside sequence claims of the same inbox
//! shape. Target: fair claim p99 flat as the keys grow.
//!
//! **Noisy tenant** (`noisy_tenant.rs`): one tenant's publishing flood beside another's steady
//! publishes, through a node in a child process.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use inbox_core::{
    AckResult, EventBody, EventType, FairnessKey, Recipient, RecipientId, RecipientKey, TenantId,
};
use inbox_store::{
    AckItem, Acknowledge, ClaimNext, ClaimOrder, ConnectOptions, Publish, SqlStore, StoreConfig,
};

use crate::report::percentile;
use crate::{BenchError, mysql_db};

/// Events per claim, as the issue states.
const CLAIM_LIMIT: u32 = 10;
/// Sender B's events.
const B_EVENTS: usize = 20;
/// Publishes per seeding batch.
const SEED_BATCH: usize = 200;
/// Key counts of the claim-cost rows.
const KEY_COUNTS: [usize; 3] = [1, 100, 10_000];
/// Claims measured per claim-cost row.
const CLAIMS_PER_ROW: usize = 500;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FairnessArgs {
    /// Sender A's backlog.
    pub backlog: usize,
    /// Claims before sender B publishes.
    pub b_after: usize,
    /// Length of each phase of the noisy-tenant part.
    pub phase_seconds: u64,
}

impl Default for FairnessArgs {
    fn default() -> Self {
        Self { backlog: 20_000, b_after: 50, phase_seconds: 10 }
    }
}

pub async fn main(args: FairnessArgs) -> ExitCode {
    mysql_db::report_in_fresh_database(String::new(), move |db| {
        let url = db.url.clone();
        async move { run(&args, &url).await }
    })
    .await
}

async fn run(args: &FairnessArgs, url: &str) -> Result<String, BenchError> {
    let mut options = ConnectOptions::new(url);
    options.connections_max = 8;
    let store = SqlStore::connect(&options, StoreConfig::default()).await?;
    store.migrate().await?;

    let mut out = String::new();
    out.push_str(&format!(
        "noisy sender: A's {} events waiting, B publishes {B_EVENTS} after {} claims of {CLAIM_LIMIT}\n\n",
        args.backlog, args.b_after
    ));
    out.push_str(
        "| order | B's last event taken in claim | A claim+ack events/s | vs sequence |\n|---|---|---|---|\n",
    );
    let mut sequence_rate = None;
    for (n, order) in [ClaimOrder::Sequence, ClaimOrder::Fair, ClaimOrder::Sequence, ClaimOrder::Fair]
        .into_iter()
        .enumerate()
    {
        let inbox = inbox(&format!("noisy-{n}"))?;
        eprintln!("noisy sender, {order:?}: seeding {} events", args.backlog);
        seed(&store, &inbox, args.backlog, 1).await?;
        let run = noisy_sender(&store, &inbox, order, args.b_after).await?;
        let ratio = match order {
            ClaimOrder::Sequence => {
                sequence_rate = Some(run.a_rate);
                String::from("1.00")
            }
            ClaimOrder::Fair => sequence_rate.map_or("-".into(), |base| format!("{:.2}", run.a_rate / base)),
        };
        out.push_str(&format!(
            "| {} | {} | {:.0} | {ratio} |\n",
            label(order),
            run.b_done_in.map_or("not within the run".into(), |k| k.to_string()),
            run.a_rate
        ));
    }

    out.push_str("\nclaim cost by keys: fair and sequence claims of 10 (each acknowledged)\n\n");
    out.push_str("| keys | order | claim p50 ms | claim p99 ms |\n|---|---|---|---|\n");
    for keys in KEY_COUNTS {
        for order in [ClaimOrder::Sequence, ClaimOrder::Fair] {
            let inbox = inbox(&format!("keys-{keys}-{}", label(order)))?;
            let events = CLAIMS_PER_ROW * CLAIM_LIMIT as usize * 2;
            eprintln!("claim cost, {keys} keys, {order:?}: seeding {events} events");
            seed(&store, &inbox, events, keys).await?;
            let mut latencies = Vec::with_capacity(CLAIMS_PER_ROW);
            for _ in 0..CLAIMS_PER_ROW {
                let started = Instant::now();
                let claimed = claim_and_ack(&store, &inbox, order).await?;
                latencies.push(started.elapsed());
                if claimed == 0 {
                    return Err("the inbox ran dry before the row ended".into());
                }
            }
            latencies.sort();
            out.push_str(&format!(
                "| {keys} | {} | {:.2} | {:.2} |\n",
                label(order),
                millis(percentile(&latencies, 50.0)),
                millis(percentile(&latencies, 99.0))
            ));
        }
    }
    out.push_str(&crate::noisy_tenant::section(url, args.phase_seconds).await?);
    Ok(out)
}

struct NoisyRun {
    /// The claim, counted from B's publish, that took B's last event.
    b_done_in: Option<usize>,
    /// A's events claimed and acknowledged per second.
    a_rate: f64,
}

/// Claims until A's backlog is gone, B publishing after `b_after` claims.
async fn noisy_sender(
    store: &SqlStore,
    inbox: &RecipientKey,
    order: ClaimOrder,
    b_after: usize,
) -> Result<NoisyRun, BenchError> {
    let started = Instant::now();
    let mut a_events = 0usize;
    let mut b_left = B_EVENTS;
    let mut b_done_in = None;
    let mut claims_since_b = None;
    for claim_no in 0.. {
        if claim_no == b_after {
            let publishes: Vec<Publish> =
                (0..B_EVENTS).map(|n| publish(inbox, "sender-b", n)).collect::<Result<_, _>>()?;
            for answer in store.inbox().publish_batch(&publishes).await {
                answer?;
            }
            claims_since_b = Some(0);
        }
        let claimed = store.inbox().claim_next(&claim(inbox, order)).await?;
        if claimed.is_empty() {
            break;
        }
        let b_taken = claimed
            .iter()
            .filter(|c| matches!(&c.event.body, EventBody::Json(j) if j.contains("sender-b")))
            .count();
        a_events += claimed.len() - b_taken;
        b_left -= b_taken;
        if let Some(k) = claims_since_b.as_mut() {
            *k += 1;
            if b_left == 0 && b_done_in.is_none() {
                b_done_in = Some(*k);
            }
        }
        acknowledge(store, inbox, &claimed).await?;
    }
    Ok(NoisyRun { b_done_in, a_rate: a_events as f64 / started.elapsed().as_secs_f64() })
}

async fn claim_and_ack(
    store: &SqlStore,
    inbox: &RecipientKey,
    order: ClaimOrder,
) -> Result<usize, BenchError> {
    let claimed = store.inbox().claim_next(&claim(inbox, order)).await?;
    acknowledge(store, inbox, &claimed).await?;
    Ok(claimed.len())
}

async fn acknowledge(
    store: &SqlStore,
    inbox: &RecipientKey,
    claimed: &[inbox_store::ClaimedEvent],
) -> Result<(), BenchError> {
    if claimed.is_empty() {
        return Ok(());
    }
    let ack = Acknowledge {
        inbox: inbox.clone(),
        session_id: None,
        items: claimed
            .iter()
            .map(|c| AckItem::new(c.event.event_id, c.lease_token.clone(), AckResult::Completed))
            .collect(),
    };
    for outcome in store.inbox().acknowledge(&ack).await? {
        outcome.map_err(|refusal| format!("an acknowledgement was refused: {refusal:?}"))?;
    }
    Ok(())
}

/// `events` of sender A's kind, keyed round robin over `keys` keys, in batches.
async fn seed(store: &SqlStore, inbox: &RecipientKey, events: usize, keys: usize) -> Result<(), BenchError> {
    let mut n = 0;
    while n < events {
        let batch: Vec<Publish> = (n..(n + SEED_BATCH).min(events))
            .map(|i| {
                publish(
                    inbox,
                    &if keys == 1 { "sender-a".to_owned() } else { format!("key-{}", i % keys) },
                    i,
                )
            })
            .collect::<Result<_, _>>()?;
        for answer in store.inbox().publish_batch(&batch).await {
            answer?;
        }
        n += batch.len();
    }
    Ok(())
}

fn publish(inbox: &RecipientKey, key: &str, n: usize) -> Result<Publish, BenchError> {
    let mut publish = Publish::new(
        inbox.tenant_id.clone(),
        vec![inbox.recipient.clone()],
        EventType::new("bench.task")?,
        EventBody::json(format!("{{\"from\":\"{key}\",\"n\":{n}}}"))?,
    );
    publish.fairness_key = Some(FairnessKey::new(key)?);
    Ok(publish)
}

fn claim(inbox: &RecipientKey, order: ClaimOrder) -> ClaimNext {
    ClaimNext { inbox: inbox.clone(), session_id: None, limit: CLAIM_LIMIT, lease_ms: None, order }
}

fn inbox(name: &str) -> Result<RecipientKey, BenchError> {
    Ok(RecipientKey {
        tenant_id: TenantId::new(format!("fair-{name}"))?,
        recipient: Recipient::agent(RecipientId::new("agent")?),
    })
}

fn label(order: ClaimOrder) -> &'static str {
    match order {
        ClaimOrder::Sequence => "sequence",
        ClaimOrder::Fair => "fair",
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}
