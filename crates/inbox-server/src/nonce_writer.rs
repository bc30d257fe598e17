//! Records the nonces of signed requests, many per statement. Every signed call must write
//! its nonce to the database before it acts (that is what refuses a replay on any node), and
//! one statement per request would cost as much as the operation it guards. So requests hand
//! their nonce to one task per node, which writes whatever has queued up while its previous
//! statement ran. An idle node writes each nonce at once; a busy one (whose last statement
//! held more than one) waits [`LINGER`] for more, and writes several, or dozens, in one
//! statement (`inbox-bench trust` prints how many).

use std::sync::Arc;

use inbox_store::{NonceUse, SignatureNonce, SqlStore, StoreError};

use crate::group_commit::{Committed, Gathering, GroupCommit};
use crate::metrics::Metrics;

/// Nonces one statement takes at most (each batch size is its own prepared statement).
const BATCH_MAX: usize = 64;
/// Times the task steps aside before writing, to gather more of a busy node's nonces.
const GATHER_YIELDS: usize = 2;
/// How long a busy node's task waits for more nonces before it writes. A statement costs
/// the database far more than a row in it (about 190 us of MariaDB CPU for 4 rows, 290 us
/// for 16), so on a busy node a short wait saves more than it costs. An idle node (whose
/// last statement held one nonce) never waits.
const LINGER: std::time::Duration = std::time::Duration::from_millis(2);

type Answer = Result<NonceUse, StoreError>;

/// The handle requests use; the writing task stops when the last handle is dropped.
#[derive(Debug, Clone)]
pub struct NonceWriter {
    writer: GroupCommit<SignatureNonce, Answer>,
    store: SqlStore,
}

impl NonceWriter {
    /// Starts the writing task on the current runtime.
    pub fn start(store: SqlStore, metrics: Arc<Metrics>) -> NonceWriter {
        let gathering = Gathering {
            batch_max: BATCH_MAX,
            yields: GATHER_YIELDS,
            linger: LINGER,
            in_flight_max: 1,
            share_per_key: 0,
        };
        let writing = store.clone();
        let writer = GroupCommit::start(
            gathering,
            move |batch| {
                let (store, metrics) = (writing.clone(), metrics.clone());
                Box::pin(async move {
                    let answers = store.signatures().remember_nonces(&batch.items).await;
                    metrics.signature_nonce_writes_total().add([], 1);
                    Committed::from_store(answers)
                })
            },
            || Err(crate::group_commit::unreachable()),
        );
        NonceWriter { writer, store }
    }

    /// Records `nonce`, or reports it replayed.
    pub async fn remember(&self, nonce: SignatureNonce) -> Answer {
        match self.writer.submit(nonce).await {
            Some(answer) => answer,
            // The task outlives every handle unless it panicked: then each request writes its own.
            None => self.store.signatures().remember_nonce(&nonce.hash, nonce.until).await,
        }
    }
}
