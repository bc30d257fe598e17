//! Records the nonces of signed requests, many per statement. Every signed call must write
//! its nonce to the database before it acts (that is what refuses a replay on any node), and
//! one statement per request would cost as much as the operation it guards. So requests hand
//! their nonce to one task per node, which writes whatever has queued up while its previous
//! statement ran. An idle node writes each nonce at once; a busy one (whose last statement
//! held more than one) waits [`LINGER`] for more, and writes several, or dozens, in one
//! statement (`inbox-bench trust` prints how many).

use std::sync::Arc;

use inbox_store::{NonceUse, SignatureNonce, SqlStore, StoreError};
use tokio::sync::{mpsc, oneshot};

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
    queue: mpsc::UnboundedSender<Request>,
    store: SqlStore,
}

impl NonceWriter {
    /// Starts the writing task on the current runtime.
    pub fn start(store: SqlStore, metrics: Arc<Metrics>) -> NonceWriter {
        let (queue, requests) = mpsc::unbounded_channel();
        tokio::spawn(write(store.clone(), metrics, requests));
        NonceWriter { queue, store }
    }

    /// Records `nonce`, or reports it replayed.
    pub async fn remember(&self, nonce: SignatureNonce) -> Answer {
        let (answer, answered) = oneshot::channel();
        if self.queue.send((nonce, answer)).is_ok() {
            if let Ok(answer) = answered.await {
                return answer;
            }
        }
        // The task outlives every handle unless it panicked: then each request writes its own.
        self.store.remember_nonce(&nonce.hash, nonce.until).await
    }
}

type Request = (SignatureNonce, oneshot::Sender<Answer>);

async fn write(store: SqlStore, metrics: Arc<Metrics>, mut requests: mpsc::UnboundedReceiver<Request>) {
    let mut batch = Vec::with_capacity(BATCH_MAX);
    let mut busy = false;
    while requests.recv_many(&mut batch, BATCH_MAX).await > 0 {
        // Let the requests that are ready run first, so their nonces share this statement.
        for _ in 0..GATHER_YIELDS {
            tokio::task::yield_now().await;
            take_queued(&mut requests, &mut batch);
        }
        if busy {
            // One timer wake-up, not one per nonce that arrives meanwhile.
            tokio::time::sleep(LINGER).await;
            take_queued(&mut requests, &mut batch);
        }
        busy = batch.len() > 1;
        let nonces: Vec<SignatureNonce> = batch.iter().map(|(nonce, _)| *nonce).collect();
        let answers = store.remember_nonces(&nonces).await;
        metrics.count("agent_inbox_signature_nonce_writes_total", vec![], 1);
        for ((_, reply), answer) in batch.drain(..).zip(answers) {
            // A request that went away no longer needs its answer.
            let _ = reply.send(answer);
        }
    }
}

/// Moves what is queued into `batch`, up to [`BATCH_MAX`], without waiting.
fn take_queued(requests: &mut mpsc::UnboundedReceiver<Request>, batch: &mut Vec<Request>) {
    while batch.len() < BATCH_MAX {
        let Ok(next) = requests.try_recv() else { break };
        batch.push(next);
    }
}
