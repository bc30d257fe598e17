//! Group commit: one task per node takes whatever requests queued up while its previous
//! batches ran and hands them to the database together, so a busy node pays for one statement
//! or one commit per batch instead of one per request. A request that finds nothing else in
//! flight commits in its own task, as a batch of one, without the two hops through the
//! gathering task (most of a lone request's overhead on a quiet node); one that finds others
//! in flight queues, and a busy task (whose last batch held more than one) may wait a short
//! `linger` for more. Up to `in_flight_max` batches run at once, a lone one included, so one
//! batch's fsync overlaps the next one's statements. Used by the nonce writer, the publish
//! batcher and the acknowledgement batcher.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use inbox_store::StoreError;
use tokio::sync::{Semaphore, mpsc, oneshot};

/// How a batch is gathered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gathering {
    /// Requests one batch takes at most.
    pub batch_max: usize,
    /// Times the task steps aside first, so requests that are ready to queue join.
    pub yields: usize,
    /// How long a busy node waits for more before it commits (zero: never).
    pub linger: Duration,
    /// Batches committing at once (at least one).
    pub in_flight_max: usize,
    /// While requests of more than one key (tenant) wait, a batch takes at most this many of
    /// any one key, in arrival order; the rest wait for the next batch (0: no shares).
    pub share_per_key: usize,
}

/// What the commit function answers for a batch.
#[derive(Debug)]
pub(crate) struct Committed<A> {
    /// One answer per item, in order.
    pub answers: Vec<A>,
    /// The backend did not answer at all (the database is away): requests that queued
    /// meanwhile are answered the same way at once, instead of each waiting out the timeout.
    pub unreachable: bool,
}

impl<T> Committed<Result<T, StoreError>> {
    /// A store's answers to a batch: the database did not answer when none got through.
    pub(crate) fn from_store(answers: Vec<Result<T, StoreError>>) -> Self {
        let unreachable = answers.iter().all(|a| matches!(a, Err(StoreError::Unavailable(_))));
        Committed { answers, unreachable }
    }
}

/// The answer of requests that queued behind a batch the database did not answer.
pub(crate) fn unreachable() -> StoreError {
    StoreError::unreachable("the database did not answer the batch ahead of this request")
}

/// A batch handed to the commit function.
#[derive(Debug)]
pub(crate) struct Batch<T> {
    pub items: Vec<T>,
    /// From the first request's arrival at the task to the commit's start.
    pub gathered_for: Duration,
    /// Per item, from its arrival at the task to the commit's start.
    pub waited: Vec<Duration>,
}

/// The handle requests use; the task stops when the last handle is dropped.
pub(crate) struct GroupCommit<T, A> {
    queue: mpsc::UnboundedSender<Queued<T, A>>,
    shared: Arc<Shared<T, A>>,
}

/// A batch's commit: one answer per item.
type CommitFn<T, A> = dyn Fn(Batch<T>) -> BoxFuture<'static, Committed<A>> + Send + Sync;

/// What the task and the requests that commit alone share.
struct Shared<T, A> {
    commit: Box<CommitFn<T, A>>,
    /// Permits for batches committing at once, lone ones included.
    in_flight: Arc<Semaphore>,
    /// Requests submitted and not yet answered: a request that finds none commits alone.
    active: AtomicUsize,
    /// When a batch last found the backend away: what queued before then is answered so.
    away_since: Mutex<Option<Instant>>,
}

impl<T, A> Shared<T, A> {
    fn committed(&self, committed: &Committed<A>) {
        if committed.unreachable {
            *self.away_since.lock().expect("group commit lock") = Some(Instant::now());
        }
    }
}

/// One submitted request, counted in [`Shared::active`] until it is answered or dropped.
struct Active<'a>(&'a AtomicUsize);

impl<'a> Active<'a> {
    /// Counts a request in; `true` when nothing else was in flight.
    fn enter(active: &'a AtomicUsize) -> (Active<'a>, bool) {
        let before = active.fetch_add(1, Ordering::AcqRel);
        (Active(active), before == 0)
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

struct Queued<T, A> {
    item: T,
    reply: oneshot::Sender<A>,
    at: Instant,
}

impl<T, A> Clone for GroupCommit<T, A> {
    fn clone(&self) -> Self {
        GroupCommit { queue: self.queue.clone(), shared: self.shared.clone() }
    }
}

impl<T, A> std::fmt::Debug for GroupCommit<T, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit").finish_non_exhaustive()
    }
}

impl<T: Send + 'static, A: Send + 'static> GroupCommit<T, A> {
    /// Starts the task on the current runtime. `commit` answers each item of a batch, in order;
    /// `unreachable` is the answer of a request that queued behind a batch the backend did not
    /// answer.
    pub(crate) fn start(
        gathering: Gathering,
        commit: impl Fn(Batch<T>) -> BoxFuture<'static, Committed<A>> + Send + Sync + 'static,
        unreachable: impl Fn() -> A + Send + 'static,
    ) -> Self {
        Self::start_shared(gathering, |_| 0, commit, unreachable)
    }

    /// [`Self::start`] with fair shares: `key` names an item's share (its tenant), and
    /// `gathering.share_per_key` bounds each key's items per batch while several keys wait.
    pub(crate) fn start_shared(
        gathering: Gathering,
        key: impl Fn(&T) -> u64 + Send + 'static,
        commit: impl Fn(Batch<T>) -> BoxFuture<'static, Committed<A>> + Send + Sync + 'static,
        unreachable: impl Fn() -> A + Send + 'static,
    ) -> Self {
        let (queue, mut requests) = mpsc::unbounded_channel::<Queued<T, A>>();
        let shared = Arc::new(Shared {
            commit: Box::new(commit),
            in_flight: Arc::new(Semaphore::new(gathering.in_flight_max.max(1))),
            active: AtomicUsize::new(0),
            away_since: Mutex::new(None),
        });
        let task = shared.clone();
        tokio::spawn(async move {
            let shared = task;
            let mut batch = Vec::with_capacity(gathering.batch_max);
            // Requests past their key's share in the last batch, in arrival order: they go first.
            let mut deferred: Vec<Queued<T, A>> = Vec::new();
            let mut busy = false;
            loop {
                if deferred.is_empty() && requests.recv_many(&mut batch, gathering.batch_max).await == 0 {
                    return;
                }
                // What queues while every permit is taken joins this batch.
                let Ok(permit) = shared.in_flight.clone().acquire_owned().await else { return };
                // The last batch was drained: deferred requests, if any, are all it holds now.
                batch.append(&mut deferred);
                take_queued(&mut requests, &mut batch, gathering.batch_max);
                let first_taken = Instant::now();
                for _ in 0..gathering.yields {
                    tokio::task::yield_now().await;
                    take_queued(&mut requests, &mut batch, gathering.batch_max);
                }
                if busy && !gathering.linger.is_zero() && batch.len() < gathering.batch_max {
                    // One timer wake-up, not one per request that arrives meanwhile.
                    tokio::time::sleep(gathering.linger).await;
                    take_queued(&mut requests, &mut batch, gathering.batch_max);
                }
                if gathering.share_per_key > 0 {
                    deferred = over_share(&mut batch, &key, gathering.share_per_key);
                }
                let away = shared.away_since.lock().expect("group commit lock").take();
                let mut items = Vec::with_capacity(batch.len());
                let mut replies = Vec::with_capacity(batch.len());
                let mut waited = Vec::with_capacity(batch.len());
                let starting = Instant::now();
                for queued in batch.drain(..) {
                    if away.is_some_and(|away| queued.at <= away) {
                        let _ = queued.reply.send(unreachable());
                    } else {
                        items.push(queued.item);
                        replies.push(queued.reply);
                        waited.push(starting.saturating_duration_since(queued.at));
                    }
                }
                if items.is_empty() {
                    continue;
                }
                busy = items.len() > 1;
                let committing =
                    (shared.commit)(Batch { items, gathered_for: first_taken.elapsed(), waited });
                let shared = shared.clone();
                tokio::spawn(async move {
                    let committed = committing.await;
                    shared.committed(&committed);
                    for (reply, answer) in replies.into_iter().zip(committed.answers) {
                        // A request that went away no longer needs its answer.
                        let _ = reply.send(answer);
                    }
                    drop(permit);
                });
            }
        });
        GroupCommit { queue, shared }
    }

    /// Commits `item` in the caller's task when nothing else is in flight; otherwise queues it
    /// and waits for its batch's answer. `None` if the task is gone (it panicked), in which case
    /// the caller does the work itself.
    pub(crate) async fn submit(&self, item: T) -> Option<A> {
        let (_active, alone) = Active::enter(&self.shared.active);
        if alone && let Ok(_permit) = self.shared.in_flight.try_acquire() {
            let batch =
                Batch { items: vec![item], gathered_for: Duration::ZERO, waited: vec![Duration::ZERO] };
            let committed = (self.shared.commit)(batch).await;
            self.shared.committed(&committed);
            return committed.answers.into_iter().next();
        }
        let (reply, answered) = oneshot::channel();
        self.queue.send(Queued { item, reply, at: Instant::now() }).ok()?;
        answered.await.ok()
    }
}

/// Takes out of `batch`, in arrival order, the requests past `share` of their key, when
/// `batch` holds more than one key; a batch of one key keeps everything.
fn over_share<T, A>(
    batch: &mut Vec<Queued<T, A>>,
    key: &impl Fn(&T) -> u64,
    share: usize,
) -> Vec<Queued<T, A>> {
    let first = match batch.first() {
        Some(queued) => key(&queued.item),
        None => return Vec::new(),
    };
    if batch.iter().all(|queued| key(&queued.item) == first) {
        return Vec::new();
    }
    let mut taken: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    let mut over = Vec::new();
    let mut kept = Vec::with_capacity(batch.len());
    for queued in batch.drain(..) {
        let n = taken.entry(key(&queued.item)).or_default();
        if *n < share {
            *n += 1;
            kept.push(queued);
        } else {
            over.push(queued);
        }
    }
    *batch = kept;
    over
}

/// Moves what is queued into `batch`, up to `max`, without waiting.
fn take_queued<R>(requests: &mut mpsc::UnboundedReceiver<R>, batch: &mut Vec<R>, max: usize) {
    while batch.len() < max {
        let Ok(next) = requests.try_recv() else { break };
        batch.push(next);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tokio::sync::Semaphore;

    use super::*;

    #[tokio::test]
    async fn a_request_alone_commits_in_its_own_task_and_one_behind_it_queues() {
        let gathering =
            Gathering { batch_max: 8, yields: 0, linger: Duration::ZERO, in_flight_max: 2, share_per_key: 0 };
        type Seen = Arc<Mutex<Vec<(u32, Option<tokio::task::Id>)>>>;
        let seen: Seen = Arc::default();
        let hold = Arc::new(Semaphore::new(0));
        let (log, gate) = (seen.clone(), hold.clone());
        let commit = GroupCommit::start(
            gathering,
            move |batch: Batch<u32>| {
                let (log, gate) = (log.clone(), gate.clone());
                // The commit function runs where the batch is made: in the request's task or
                // in the gathering task.
                let made_in = tokio::task::try_id();
                Box::pin(async move {
                    for item in &batch.items {
                        log.lock().unwrap().push((*item, made_in));
                    }
                    if batch.items == [1] {
                        let _ = gate.acquire().await;
                    }
                    Committed { answers: batch.items.clone(), unreachable: false }
                })
            },
            || 0,
        );
        let first = commit.clone();
        let lone = tokio::spawn(async move { (first.submit(1).await, tokio::task::id()) });
        while seen.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        let second = commit.clone();
        let behind = tokio::spawn(async move { (second.submit(2).await, tokio::task::id()) });
        while seen.lock().unwrap().len() < 2 {
            tokio::task::yield_now().await;
        }
        hold.add_permits(1);
        let (lone, behind) = (lone.await.unwrap(), behind.await.unwrap());
        assert_eq!((lone.0, behind.0), (Some(1), Some(2)), "each is answered its own");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen[0], (1, Some(lone.1)), "alone, the request commits in its own task");
        assert_eq!(seen[1].0, 2);
        assert_ne!(seen[1].1, Some(behind.1), "behind one in flight, it goes through the task");
    }

    #[tokio::test]
    async fn a_batch_takes_each_key_up_to_its_share_while_others_wait() {
        let gathering = Gathering {
            batch_max: 64,
            yields: 1,
            linger: Duration::ZERO,
            in_flight_max: 1,
            share_per_key: 2,
        };
        type Batches = Arc<Mutex<Vec<Vec<(u64, u32)>>>>;
        let batches: Batches = Arc::default();
        // The first batch holds until every other request has queued.
        let hold = Arc::new(Semaphore::new(0));
        let (seen, gate) = (batches.clone(), hold.clone());
        let commit = GroupCommit::start_shared(
            gathering,
            |item: &(u64, u32)| item.0,
            move |batch: Batch<(u64, u32)>| {
                let (seen, gate) = (seen.clone(), gate.clone());
                Box::pin(async move {
                    let first = seen.lock().unwrap().is_empty();
                    seen.lock().unwrap().push(batch.items.clone());
                    if first {
                        let _ = gate.acquire().await;
                    }
                    Committed { answers: batch.items.iter().map(|_| ()).collect(), unreachable: false }
                })
            },
            || (),
        );
        let mut waiting = Vec::new();
        let first = commit.clone();
        waiting.push(tokio::spawn(async move { first.submit((1, 0)).await }));
        while batches.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        for n in 1..=6 {
            let flood = commit.clone();
            waiting.push(tokio::spawn(async move { flood.submit((1, n)).await }));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let quiet = commit.clone();
        waiting.push(tokio::spawn(async move { quiet.submit((2, 0)).await }));
        tokio::time::sleep(Duration::from_millis(20)).await;
        hold.add_permits(1);
        for request in waiting {
            assert_eq!(request.await.unwrap(), Some(()), "every request is answered");
        }
        let batches = batches.lock().unwrap().clone();
        assert_eq!(
            batches[1],
            [(1, 1), (1, 2), (2, 0)],
            "key 2 rides in the next batch, key 1 gets its share"
        );
        assert_eq!(batches[2], [(1, 3), (1, 4), (1, 5), (1, 6)], "alone, a key fills the batch");
    }
}
