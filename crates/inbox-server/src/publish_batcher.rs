//! The per-node publish batcher: concurrent publishes (`POST /v1/events`) are committed
//! together, in one transaction, by [`SqlStore::publish_batch`]. An idle node commits each
//! publish at once; a busy one commits what arrived while its previous batch committed (and,
//! with `publish_linger`, what arrives within that short wait). No publish is answered before
//! its batch's commit returns. While several tenants' publishes wait, a batch takes at most
//! `publish_tenant_share` of each tenant's (issue 31), so one tenant's flood cannot make the
//! others wait behind a batch of its own.

use std::sync::Arc;

use inbox_core::TenantId;
use inbox_store::{Publish, PublishReceipt, SqlStore, StoreError};

use crate::config::Config;
use crate::group_commit::{Committed, Gathering, GroupCommit, unreachable};
use crate::metrics::Metrics;

type Answer = Result<PublishReceipt, StoreError>;

#[derive(Debug, Clone)]
pub struct PublishBatcher {
    batcher: GroupCommit<Arc<Publish>, Answer>,
    store: SqlStore,
}

impl PublishBatcher {
    /// Starts the committing task on the current runtime.
    pub fn start(store: SqlStore, metrics: Arc<Metrics>, config: &Config) -> PublishBatcher {
        let gathering = Gathering {
            batch_max: config.inbox.publish_batch_max as usize,
            yields: 1,
            linger: config.inbox.publish_linger,
            in_flight_max: config.inbox.publish_batches_in_flight as usize,
            share_per_key: config.inbox.publish_tenant_share as usize,
        };
        let committing = store.clone();
        let batcher = GroupCommit::start_shared(
            gathering,
            |publish: &Arc<Publish>| tenant_key(publish),
            move |batch| {
                let (store, metrics) = (committing.clone(), metrics.clone());
                Box::pin(async move {
                    metrics.publish_batch_size().observe([], batch.items.len());
                    metrics.publish_linger_seconds().observe([], batch.gathered_for);
                    // A batch is mostly one tenant's: its label is resolved once per run of it.
                    let mut label: Option<(&TenantId, String)> = None;
                    for (publish, waited) in batch.items.iter().zip(&batch.waited) {
                        let tenant = match &label {
                            Some((id, tenant)) if *id == &publish.tenant_id => tenant.clone(),
                            _ => {
                                let tenant = metrics.tenant_label(publish.tenant_id.as_str());
                                label = Some((&publish.tenant_id, tenant.clone()));
                                tenant
                            }
                        };
                        metrics.publish_queue_wait_seconds().observe([tenant], *waited);
                    }
                    let answers = store.inbox().publish_batch(&batch.items).await;
                    Committed::from_store(answers)
                })
            },
            || Err(unreachable()),
        );
        PublishBatcher { batcher, store }
    }

    /// Publishes, in whichever batch this node is gathering (or the next, past its tenant's
    /// share).
    pub async fn publish(&self, publish: Publish) -> Answer {
        let publish = Arc::new(publish);
        match self.batcher.submit(publish.clone()).await {
            Some(answer) => answer,
            // The task outlives every handle unless it panicked: then each request commits alone.
            None => self.store.inbox().publish(&publish).await,
        }
    }
}

/// The share a publish counts against: its tenant.
fn tenant_key(publish: &Publish) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    publish.tenant_id.as_str().hash(&mut hasher);
    hasher.finish()
}
