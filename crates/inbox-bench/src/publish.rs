//! The publish workload: `concurrency` publishers share a fixed number of publishes, each one
//! event to one recipient, recipients taken round robin over [`RECIPIENTS`]; run once through
//! `SqlStore::publish` and once through the raw baseline.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use inbox_core::{EventBody, EventType, Recipient, RecipientId, TenantId};
use inbox_store::Publish;
use tokio::task::JoinSet;

use crate::report::Measured;
use crate::subjects::{Side, Subjects};
use crate::{BenchError, cpu, raw, verify};

/// Recipients per run. Enough that concurrent publishers rarely queue on the same head row,
/// few enough that every head row is created early and then only advanced.
pub const RECIPIENTS: usize = 100;

/// Publishes the events numbered `publishes` (publish `i` goes to recipient `i % RECIPIENTS`)
/// into `tenant`'s inboxes with `concurrency` concurrent publishers, then checks that the
/// tenant holds exactly `publishes.end` events: a row's later rounds continue the numbering
/// in the same tenant, so head rows are created once per row, not once per round.
pub async fn run(
    subjects: &Subjects,
    side: Side,
    tenant: TenantId,
    concurrency: usize,
    publishes: Range<usize>,
) -> Result<Measured, BenchError> {
    // Built before the clock starts: request values are the caller's work, not the store's.
    let event_type = EventType::new(raw::EVENT_TYPE)?;
    let body = EventBody::json(raw::PAYLOAD_JSON)?;
    let requests = (0..RECIPIENTS)
        .map(|i| {
            let recipient = Recipient::agent(RecipientId::new(format!("agent-{i:03}"))?);
            Ok(Publish::new(tenant.clone(), vec![recipient], event_type.clone(), body.clone()))
        })
        .collect::<Result<Vec<_>, BenchError>>()?;
    let requests = Arc::new(requests);

    let cpu_before = cpu::process_cpu();
    let started = Instant::now();
    let mut workers = JoinSet::new();
    for worker in 0..concurrency {
        let subjects = subjects.clone();
        let requests = Arc::clone(&requests);
        let publishes = publishes.clone();
        workers.spawn(async move {
            let mut measured = Measured::default();
            measured.latencies.reserve(publishes.len() / concurrency + 1);
            for i in (publishes.start + worker..publishes.end).step_by(concurrency) {
                let request = &requests[i % RECIPIENTS];
                let call = Instant::now();
                match side {
                    Side::Store => drop(subjects.store.inbox().publish(request).await?),
                    Side::Raw => {
                        measured.contention_retries += u64::from(
                            raw::publish(
                                &subjects.raw,
                                request.tenant_id.as_str(),
                                request.recipients[0].id.as_str(),
                            )
                            .await?,
                        );
                    }
                }
                measured.latencies.push(call.elapsed());
                measured.events += 1;
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

    if total.events != publishes.len() as u64 {
        return Err(format!("{tenant}: {} of {} publishes ran", total.events, publishes.len()).into());
    }
    verify::published(&subjects.raw, &tenant, publishes.end as u64).await?;
    Ok(total)
}
