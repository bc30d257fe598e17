//! The per-node acknowledgement batcher: concurrent acknowledgements (`POST
//! /v1/inbox/acknowledge` and seed 000's alias) are handed to the database together, by
//! [`inbox_store::Inbox::acknowledge_batch`], which acknowledges the completed items of many
//! requests in one statement and answers each request as if it had come alone (its own
//! outcome per item; a stale token refused). An idle node sends each at once, as the
//! publish batcher does; no acknowledgement is answered before its statement returns.

use std::sync::Arc;

use inbox_store::{AckReceipt, Acknowledge, ItemOutcome, SqlStore, StoreError};

use crate::group_commit::unreachable;
use crate::group_commit::{Committed, Gathering, GroupCommit};

type Answer = Result<Vec<ItemOutcome<AckReceipt>>, StoreError>;

/// How acknowledgements are gathered: what queued while the previous batch ran, up to 64
/// requests (each of at most the store's batch of events), two batches at once.
const GATHERING: Gathering = Gathering {
    batch_max: 64,
    yields: 1,
    linger: std::time::Duration::ZERO,
    in_flight_max: 2,
    share_per_key: 0,
};

#[derive(Debug, Clone)]
pub struct AckBatcher {
    batcher: GroupCommit<Arc<Acknowledge>, Answer>,
    store: SqlStore,
}

impl AckBatcher {
    /// Starts the committing task on the current runtime.
    pub fn start(store: SqlStore) -> AckBatcher {
        let committing = store.clone();
        let batcher = GroupCommit::start(
            GATHERING,
            move |batch| {
                let store = committing.clone();
                Box::pin(async move {
                    let answers = store.inbox().acknowledge_batch(&batch.items).await;
                    Committed::from_store(answers)
                })
            },
            || Err(unreachable()),
        );
        AckBatcher { batcher, store }
    }

    /// Acknowledges, in whichever batch this node is gathering.
    pub async fn acknowledge(&self, ack: Acknowledge) -> Answer {
        let ack = Arc::new(ack);
        match self.batcher.submit(ack.clone()).await {
            Some(answer) => answer,
            // The task outlives every handle unless it panicked: then each request goes alone.
            None => self.store.inbox().acknowledge(&ack).await,
        }
    }
}
