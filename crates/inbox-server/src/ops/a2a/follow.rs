//! Following a task from durable state (`SendStreamingMessage`, `SubscribeToTask`): the task as
//! it stands first, then each entry of its update log after a cursor, in order, until an entry
//! leaves the task terminal or waiting for the client. Every event carries its update's seq
//! (the SSE `id`), so a client that lost the connection resumes after the last one it got by
//! sending it back as `Last-Event-ID`, beyond what the specification offers: nothing between
//! is lost, even when the task finished while it was away.
//!
//! A stream reads its task's log again when this node changed a task ([`super::Updates`]) and
//! every [`RECHECK`] for changes other nodes made; it holds one of the node's stream slots and
//! a waiter slot of the caller, sends a comment every [`KEEP_ALIVE`] (short enough for clients'
//! default read timeouts, five seconds for the Python SDK's httpx) and ends after
//! [`STREAM_MAX`], at shutdown, or when the client goes away.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::Stream;
use inbox_api::a2a::StreamResponse;
use inbox_core::TenantId;
use inbox_store::{Task, TaskId, TaskUpdate};
use tokio::time::Instant;

use super::convert;
use crate::limits::{StreamSlot, WaiterGuard};
use crate::node::AppState;
use crate::ops::streams::Connected;

/// How often a stream reads its task's log when no change on this node woke it.
pub const RECHECK: Duration = Duration::from_secs(1);
/// How often a quiet stream sends a comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(3);
/// How long one stream lasts; the client resumes with `Last-Event-ID`.
pub const STREAM_MAX: Duration = Duration::from_secs(3_600);
/// Log entries read at a time.
const READ_BATCH: u32 = 50;

/// What a stream sends.
#[derive(Debug)]
pub enum Frame {
    /// An event, with its update's seq.
    Event { seq: u64, response: Box<StreamResponse> },
    /// A comment, to keep the connection open.
    KeepAlive,
}

/// What a stream holds while it is open.
#[derive(Debug)]
pub(in crate::ops) struct Held {
    pub _stream: StreamSlot,
    pub _waiter: WaiterGuard,
    pub _connected: Connected,
}

struct Following {
    state: AppState,
    tenant_id: TenantId,
    task_id: TaskId,
    context_id: String,
    after: u64,
    first: Option<Frame>,
    pending: VecDeque<TaskUpdate>,
    done: bool,
    watch: tokio::sync::watch::Receiver<u64>,
    keep_alive_at: Instant,
    deadline: Instant,
    _held: Held,
}

/// The task as it stands, then its updates after `after` (its newest when `None`), each as
/// it commits. `history_length` bounds the first event's history.
pub(in crate::ops) fn follow(
    state: AppState,
    task: Task,
    after: Option<u64>,
    history_length: Option<usize>,
    held: Held,
) -> impl Stream<Item = Frame> + Send + 'static {
    let after = after.unwrap_or(task.last_seq).min(task.last_seq);
    let settled = task.state().is_terminal() || task.state().is_interrupted();
    let now = Instant::now();
    let watch = state.a2a.watch();
    let following = Following {
        tenant_id: task.tenant_id.clone(),
        task_id: task.task_id.clone(),
        context_id: task.context_id.clone(),
        after,
        first: Some(Frame::Event {
            seq: task.last_seq,
            response: Box::new(StreamResponse::Task(convert::task(&task, history_length, true))),
        }),
        pending: VecDeque::new(),
        done: settled && after >= task.last_seq,
        watch,
        keep_alive_at: now + KEEP_ALIVE,
        deadline: now + STREAM_MAX,
        state,
        _held: held,
    };
    futures_util::stream::unfold(following, |mut f| async move {
        if let Some(first) = f.first.take() {
            return Some((first, f));
        }
        loop {
            if f.done {
                return None;
            }
            if let Some(update) = f.pending.pop_front() {
                f.after = update.seq;
                f.done = update.is_final();
                let response = convert::update(f.task_id.as_str(), &f.context_id, &update);
                return Some((Frame::Event { seq: update.seq, response: Box::new(response) }, f));
            }
            f.watch.mark_unchanged();
            match f.state.store.a2a().updates_after(&f.tenant_id, &f.task_id, f.after, READ_BATCH).await {
                Ok(updates) if !updates.is_empty() => {
                    f.pending.extend(updates);
                    continue;
                }
                Ok(_) => {}
                // Read again at the next wake-up; the keep-alives hold the connection meanwhile.
                Err(err) => {
                    tracing::debug!(error = %err, task_id = %f.task_id, "reading a task's updates failed")
                }
            }
            let recheck = Instant::now() + RECHECK;
            tokio::select! {
                _ = f.watch.changed() => {}
                _ = tokio::time::sleep_until(recheck.min(f.deadline)) => {
                    if Instant::now() >= f.deadline {
                        return None;
                    }
                }
                _ = tokio::time::sleep_until(f.keep_alive_at) => {
                    f.keep_alive_at = Instant::now() + KEEP_ALIVE;
                    return Some((Frame::KeepAlive, f));
                }
                _ = f.state.shutdown.cancelled() => return None,
            }
        }
    })
}
