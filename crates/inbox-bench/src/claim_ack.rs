//! The claim+ack workload: `concurrency` workers drain a pre-seeded backlog, one recipient's
//! that they all share or each worker its own recipient's, each batch one `claim_next` of
//! [`BATCH_EVENTS`] and one acknowledge of everything claimed; run once through the store and
//! once through the raw baseline.

use std::time::Instant;

use inbox_core::{AckResult, Recipient, RecipientId, RecipientKey, TenantId};
use inbox_store::{AckItem, Acknowledge, ClaimNext, SqlStore};
use sqlx::mysql::MySqlPool;
use tokio::task::JoinSet;

use crate::report::Measured;
use crate::subjects::{Side, Subjects};
use crate::{BenchError, cpu, raw, verify};

/// Events per claim and per acknowledge.
pub const BATCH_EVENTS: u32 = 10;

/// Whose backlog the workers of a run drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inboxes {
    /// One recipient's, which every worker shares (claimers skip each other's locked rows).
    Shared,
    /// Each worker its own recipient's, as agents with their own identity do.
    OnePerWorker,
}

/// Seeds `n_events` (not timed), then drains them in batches spread over `concurrency`
/// workers: `n_events / BATCH_EVENTS` (rounded up) batches in all from a shared inbox, or
/// each worker's share of the events from its own.
pub async fn run(
    subjects: &Subjects,
    side: Side,
    tenant: TenantId,
    concurrency: usize,
    n_events: usize,
    inboxes: Inboxes,
) -> Result<Measured, BenchError> {
    let recipients = if inboxes == Inboxes::Shared { 1 } else { concurrency };
    let per_inbox = n_events.div_ceil(recipients);
    let mut inbox_keys = Vec::with_capacity(recipients);
    for n in 0..recipients {
        let recipient = format!("agent-{n:03}");
        raw::seed_backlog(&subjects.raw, tenant.as_str(), &recipient, per_inbox).await?;
        inbox_keys.push(RecipientKey {
            tenant_id: tenant.clone(),
            recipient: Recipient::agent(RecipientId::new(recipient)?),
        });
    }
    let batches = per_inbox.div_ceil(BATCH_EVENTS as usize);

    let cpu_before = cpu::process_cpu();
    let started = Instant::now();
    let mut workers = JoinSet::new();
    for worker in 0..concurrency {
        let subjects = subjects.clone();
        let inbox = inbox_keys[worker % recipients].clone();
        // Sharing one inbox, the workers split its batches; each draining its own, a worker
        // takes all of its own inbox's.
        let (first, step) = if recipients == 1 { (worker, concurrency) } else { (0, 1) };
        workers.spawn(async move {
            let mut measured = Measured::default();
            let share = batches / step + 1;
            measured.latencies.reserve(share);
            measured.claim_latencies.reserve(share);
            measured.ack_latencies.reserve(share);
            for _ in (first..batches).step_by(step) {
                match side {
                    Side::Store => store_batch(&subjects.store, &inbox, &mut measured).await?,
                    Side::Raw => raw_batch(&subjects.raw, &inbox, &mut measured).await?,
                }
            }
            Ok::<_, BenchError>(measured)
        });
    }
    let mut total = Measured::default();
    while let Some(worker) = workers.join_next().await {
        total.absorb(worker??);
    }
    total.elapsed = started.elapsed();
    total.client_cpu = cpu::cpu_since(cpu_before);

    verify::acknowledged(&subjects.raw, &tenant, total.events).await?;
    let seeded = per_inbox * recipients;
    if total.events != seeded as u64 {
        // Possible when SKIP LOCKED hands a claimer fewer rows than asked; the row's rate
        // still counts only the events really acknowledged.
        eprintln!("{tenant}: {} of {seeded} seeded events were claimed and acknowledged", total.events);
    }
    Ok(total)
}

/// One batch through the store, recording its claim, its ack and the whole round trip. A
/// claim that finds nothing records only its claim latency.
async fn store_batch(
    store: &SqlStore,
    inbox: &RecipientKey,
    measured: &mut Measured,
) -> Result<(), BenchError> {
    let started = Instant::now();
    let claimed = store
        .inbox()
        .claim_next(&ClaimNext {
            inbox: inbox.clone(),
            session_id: None,
            limit: BATCH_EVENTS,
            lease_ms: None,
            order: Default::default(),
        })
        .await?;
    measured.claim_latencies.push(started.elapsed());
    if claimed.is_empty() {
        return Ok(());
    }
    let ack = Acknowledge {
        inbox: inbox.clone(),
        session_id: None,
        items: claimed
            .into_iter()
            .map(|c| AckItem::new(c.event.event_id, c.lease_token, AckResult::Completed))
            .collect(),
    };
    let acking = Instant::now();
    let outcomes = store.inbox().acknowledge(&ack).await?;
    measured.ack_latencies.push(acking.elapsed());
    measured.latencies.push(started.elapsed());
    for outcome in outcomes {
        outcome?;
    }
    measured.events += ack.items.len() as u64;
    Ok(())
}

/// One batch through the raw baseline, measured like [`store_batch`].
async fn raw_batch(
    pool: &MySqlPool,
    inbox: &RecipientKey,
    measured: &mut Measured,
) -> Result<(), BenchError> {
    let tenant = inbox.tenant_id.as_str();
    let recipient_id = inbox.recipient.id.as_str();
    let started = Instant::now();
    let (claimed, retries) = raw::claim_next(pool, tenant, recipient_id, BATCH_EVENTS).await?;
    measured.contention_retries += u64::from(retries);
    measured.claim_latencies.push(started.elapsed());
    if claimed.is_empty() {
        return Ok(());
    }
    let acking = Instant::now();
    let retries = raw::acknowledge(pool, tenant, recipient_id, &claimed).await?;
    measured.contention_retries += u64::from(retries);
    measured.ack_latencies.push(acking.elapsed());
    measured.latencies.push(started.elapsed());
    measured.events += claimed.len() as u64;
    Ok(())
}
