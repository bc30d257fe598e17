//! Group commit: one task per node takes whatever requests queued up while its previous
//! batch ran and hands them to the database together, so a busy node pays for one statement
//! or one commit per batch instead of one per request. An idle node sends each request at
//! once; a busy one (whose last batch held more than one) may wait a short `linger` for more.
//! Used by the nonce writer and the publish batcher.

use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

/// How a batch is gathered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gathering {
    /// Requests one batch takes at most.
    pub batch_max: usize,
    /// Times the task steps aside first, so requests that are ready to queue join.
    pub yields: usize,
    /// How long a busy node waits for more before it commits (zero: never).
    pub linger: Duration,
}

/// What the commit function answers for a batch.
#[derive(Debug)]
pub(crate) struct Committed<A> {
    /// One answer per item, in order.
    pub answers: Vec<A>,
    /// The backend did not answer at all (the database is away): everything that queued
    /// meanwhile is answered the same way at once, instead of waiting out another timeout.
    pub unreachable: bool,
}

/// A batch handed to the commit function.
#[derive(Debug)]
pub(crate) struct Batch<T> {
    pub items: Vec<T>,
    /// From the first request's arrival at the task to the commit's start.
    pub gathered_for: Duration,
}

/// The handle requests use; the task stops when the last handle is dropped.
pub(crate) struct GroupCommit<T, A> {
    queue: mpsc::UnboundedSender<(T, oneshot::Sender<A>)>,
}

impl<T, A> Clone for GroupCommit<T, A> {
    fn clone(&self) -> Self {
        GroupCommit { queue: self.queue.clone() }
    }
}

impl<T, A> std::fmt::Debug for GroupCommit<T, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit").finish_non_exhaustive()
    }
}

impl<T: Send + 'static, A: Send + 'static> GroupCommit<T, A> {
    /// Starts the task on the current runtime. `commit` answers each item of a batch, in order.
    pub(crate) fn start(
        gathering: Gathering,
        mut commit: impl FnMut(Batch<T>) -> BoxFuture<'static, Committed<A>> + Send + 'static,
        unreachable: impl Fn() -> A + Send + 'static,
    ) -> Self {
        let (queue, mut requests) = mpsc::unbounded_channel::<(T, oneshot::Sender<A>)>();
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(gathering.batch_max);
            let mut busy = false;
            while requests.recv_many(&mut batch, gathering.batch_max).await > 0 {
                let first_arrived = Instant::now();
                for _ in 0..gathering.yields {
                    tokio::task::yield_now().await;
                    take_queued(&mut requests, &mut batch, gathering.batch_max);
                }
                if busy && !gathering.linger.is_zero() && batch.len() < gathering.batch_max {
                    // One timer wake-up, not one per request that arrives meanwhile.
                    tokio::time::sleep(gathering.linger).await;
                    take_queued(&mut requests, &mut batch, gathering.batch_max);
                }
                busy = batch.len() > 1;
                let (items, replies): (Vec<T>, Vec<oneshot::Sender<A>>) = batch.drain(..).unzip();
                let committed = commit(Batch { items, gathered_for: first_arrived.elapsed() }).await;
                for (reply, answer) in replies.into_iter().zip(committed.answers) {
                    // A request that went away no longer needs its answer.
                    let _ = reply.send(answer);
                }
                if committed.unreachable {
                    while let Ok((_, reply)) = requests.try_recv() {
                        let _ = reply.send(unreachable());
                    }
                    busy = false;
                }
            }
        });
        GroupCommit { queue }
    }

    /// Queues `item` and waits for its answer; `None` if the task is gone (it panicked), in
    /// which case the caller does the work itself.
    pub(crate) async fn submit(&self, item: T) -> Option<A> {
        let (answer, answered) = oneshot::channel();
        self.queue.send((item, answer)).ok()?;
        answered.await.ok()
    }
}

/// Moves what is queued into `batch`, up to `max`, without waiting.
fn take_queued<R>(requests: &mut mpsc::UnboundedReceiver<R>, batch: &mut Vec<R>, max: usize) {
    while batch.len() < max {
        let Ok(next) = requests.try_recv() else { break };
        batch.push(next);
    }
}
