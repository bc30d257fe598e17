//! What every real-time stream (SSE, WebSocket) shares: a [`Subscription`] holds the waiter
//! slot that caps streams per agent and tenant, watches the inbox's hints, keeps the agent
//! session alive, and turns "the head moved" into seed 001's thin signal.
//!
//! A subscription subscribes to hints *before* it reads the head from the database, so a
//! commit between the two cannot be missed; it only ever announces a head higher than the
//! last one it announced, and a burst of commits coalesces into one signal. A nudge (events
//! behind the head back in the inbox, [`crate::hints`]) is announced with the head last
//! announced: clients claim on every hint, so it reaches events behind their cursor.
//!
//! A stream's idle cost is kept small on purpose (a node may hold tens of thousands): its
//! heartbeat is a place in the node's shared [`crate::heartbeats`] wheel rather than a timer of
//! its own, the count of unacknowledged events is shared by the streams of one inbox, and it
//! holds one of the node's `streams_max` slots.
//!
//! Under the single-active-session policy (`ops/sessions.rs`) a stream must name its agent's
//! newest session to open, and ends with a final `session.superseded` signal when a newer
//! subscribe supersedes that session: at once when the notifier reports it, at the latest at
//! the stream's next heartbeat.
//!
//! The tickets and cookie that let a browser open a stream are minted in [`credentials`].

pub mod credentials;

use inbox_api::time::format_utc;
use inbox_api::{Scope, StreamSignal};
use inbox_core::{EventId, RecipientKey, SessionId};
use inbox_store::SessionTouch;
use std::sync::Arc;

use tokio::sync::watch;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::heartbeats::Beat;
use crate::hints::{HintMemo, InboxWake, SharedHint};
use crate::limits::{StreamSlot, WaiterGuard};
use crate::metrics::{CounterSeries, Metrics};
use crate::node::AppState;
use crate::ops::sessions::{is_superseded, require_active_session, touch};

/// What woke a subscription.
#[derive(Debug)]
pub(crate) enum Wake {
    /// The head moved past what was last announced (or events behind it are back): send this
    /// hint, shared with the inbox's other streams.
    Signal(Arc<SharedHint>),
    /// Time for a keep-alive (and a session touch, [`Subscription::beat`]).
    Heartbeat,
    /// A subscribe superseded sessions of this agent; ask [`Subscription::superseded`] whether
    /// this stream's was one of them.
    SessionChanged,
    /// The server is shutting down: end the stream.
    Closed,
}

/// One open stream of one agent.
#[derive(Debug)]
pub(crate) struct Subscription {
    state: AppState,
    inbox: RecipientKey,
    transport: &'static str,
    session_id: Option<SessionId>,
    hints: watch::Receiver<InboxWake>,
    /// The hint each wake-up announces, made once for all of the inbox's streams.
    memo: Arc<HintMemo>,
    /// Reports that a subscribe superseded sessions of this agent (with a session only).
    session_changes: Option<watch::Receiver<u64>>,
    announced: u64,
    /// A head newer than `announced` whose signal is being written. Kept here, not in a local,
    /// so a `next` cancelled while it counts the unacknowledged events loses no hint.
    pending: Option<u64>,
    /// Nudges seen on `hints`, and whether one still has to be announced.
    nudges_seen: u64,
    nudge_pending: bool,
    heartbeat: Beat,
    /// `hints_sent_total` for this stream's tenant and transport, resolved once.
    hints_sent: CounterSeries,
    _stream: StreamSlot,
    _slot: WaiterGuard,
    _connected: Connected,
}

impl Subscription {
    /// Opens a stream for `caller`: checks the scope, the agent a path names (`agent_id`, seed
    /// 000's route: it must be the caller) and the session policy (409
    /// `session_superseded` or `session_required`), takes one of the node's stream slots (503
    /// `streams_at_capacity` past `streams_max`) and a waiter slot (429 `too_many_waiters`
    /// past the caps), touches the session, and returns the signal to send at once when the
    /// head is already past `last_event_id` (missing counts as 0).
    pub async fn open(
        state: &AppState,
        caller: &Caller,
        agent_id: Option<&str>,
        transport: &'static str,
        session_id: Option<SessionId>,
        last_event_id: Option<u64>,
    ) -> Result<(Subscription, Option<Arc<SharedHint>>), ApiError> {
        caller.require(Scope::StreamSubscribe)?;
        caller.check_agent(agent_id)?;
        // Watch before checking, so a supersede between the two still wakes this stream.
        let session_changes =
            session_id.as_ref().map(|_| state.session_changes.watch(&caller.tenant_id, &caller.subject));
        require_active_session(state, caller, session_id.as_ref()).await?;
        let refused = |err: ApiError| {
            state.metrics.streams_refused_total().add([transport.to_owned(), err.code.to_string()], 1);
            err
        };
        let stream = state.limits.hold_stream().map_err(refused)?;
        let slot =
            state.limits.hold_waiter(caller.tenant_id.as_str(), caller.subject.as_str()).map_err(refused)?;
        let inbox = caller.inbox();
        if let Some(session_id) = &session_id {
            touch(state, caller, session_id, Some(transport)).await?;
        }
        let (hints, memo) = state.hints.watch_shared(&inbox);
        let nudges_seen = hints.borrow().nudges;
        let head = state.store.inbox().head(&inbox).await?.head_seq.get();
        let labels = [transport.to_owned()];
        state.metrics.stream_connects_total().add(labels.clone(), 1);
        if last_event_id.is_some() {
            state.metrics.stream_reconnects_total().add(labels, 1);
        }
        let mut subscription = Subscription {
            state: state.clone(),
            hints_sent: state
                .metrics
                .hints_sent_total()
                .series([state.metrics.tenant_label(inbox.tenant_id.as_str()), transport.to_owned()]),
            inbox,
            transport,
            session_id,
            hints,
            memo,
            session_changes,
            announced: last_event_id.unwrap_or(0),
            pending: None,
            nudges_seen,
            nudge_pending: false,
            heartbeat: state.heartbeats.join(),
            _stream: stream,
            _slot: slot,
            _connected: Connected::new(state, transport),
        };
        subscription.note(head);
        let first = subscription.announce().await;
        Ok((subscription, first))
    }

    /// Waits for the next thing to send. Cancel-safe: nothing is lost when another branch of a
    /// `select!` wins.
    pub async fn next(&mut self) -> Wake {
        loop {
            // Boxed here and below: the database calls' futures are large and short-lived; kept
            // inline they would make every idle stream's task as large as the largest of them.
            if let Some(signal) = Box::pin(self.announce()).await {
                return Wake::Signal(signal);
            }
            tokio::select! {
                changed = self.hints.changed() => {
                    if changed.is_err() {
                        // The channel was swept, which only happens without receivers; not
                        // while we hold one. Re-subscribe to be safe.
                        self.hints = self.state.hints.watch(&self.inbox);
                        continue;
                    }
                    let wake = *self.hints.borrow_and_update();
                    self.note(wake.head);
                    if wake.nudges != self.nudges_seen {
                        self.nudges_seen = wake.nudges;
                        self.nudge_pending = true;
                    }
                }
                changed = session_changed(&mut self.session_changes) => {
                    if changed.is_err() {
                        // Swept only without receivers, as with hints: re-subscribe.
                        let (tenant, agent) = (&self.inbox.tenant_id, &self.inbox.recipient.id);
                        self.session_changes = Some(self.state.session_changes.watch(tenant, agent));
                    }
                    return Wake::SessionChanged;
                }
                _ = self.heartbeat.tick() => return Wake::Heartbeat,
                _ = self.state.shutdown.cancelled() => return Wake::Closed,
            }
        }
    }

    /// A heartbeat is due: keeps the session from being swept as gone, and returns the final
    /// signal to send before closing when the session has been superseded (this is how a
    /// supersede is learnt when its signal was missed).
    pub async fn beat(&self) -> Option<StreamSignal> {
        Box::pin(async {
            self.touch().await;
            self.superseded().await
        })
        .await
    }

    /// The final `session.superseded` signal when this stream's session is no longer its
    /// agent's active one under the policy; `None` otherwise (or when that cannot be read now:
    /// the next heartbeat asks again).
    pub async fn superseded(&self) -> Option<StreamSignal> {
        let session_id = self.session_id.as_ref()?;
        let (tenant, agent) = (&self.inbox.tenant_id, &self.inbox.recipient.id);
        match Box::pin(is_superseded(&self.state, tenant, agent, session_id)).await {
            Ok(true) => Some(signal(&self.state, &self.inbox, SESSION_SUPERSEDED, self.announced)),
            Ok(false) => None,
            Err(err) => {
                let error = err.internal.as_deref().unwrap_or(&err.detail);
                tracing::warn!(error, "a stream could not check its session; asking again later");
                None
            }
        }
    }

    async fn touch(&self) {
        let Some(session_id) = &self.session_id else { return };
        let touch = SessionTouch {
            session_id,
            tenant_id: &self.inbox.tenant_id,
            agent_id: &self.inbox.recipient.id,
            transport: Some(self.transport),
            last_seen_seq: None,
        };
        if let Err(err) = self.state.store.sessions().touch(&touch).await {
            tracing::warn!(error = %err, "stream heartbeat could not touch its session");
        }
    }

    /// Remembers `head` for the next signal when it is news.
    fn note(&mut self, head: u64) {
        if head > self.announced && self.pending.is_none_or(|pending| head > pending) {
            self.pending = Some(head);
        }
    }

    /// The hint for the pending head or nudge, if any, with seed 001's `approximate_unacked`;
    /// counted as a hint sent. The count is best effort: without it the hint still goes out.
    async fn announce(&mut self) -> Option<Arc<SharedHint>> {
        let head = match self.pending {
            Some(head) => head,
            None if self.nudge_pending => self.announced,
            None => return None,
        };
        let wake = InboxWake { head, nudges: self.nudges_seen };
        let (state, inbox) = (&self.state, &self.inbox);
        let hint = self
            .memo
            .get_or_make(wake, async || {
                let mut signal = signal(state, inbox, "inbox.updated", head);
                signal.approximate_unacked = match state.store.inbox().unacked_estimate(inbox).await {
                    Ok(n) => Some(n),
                    Err(err) => {
                        tracing::debug!(error = %err, "a hint goes out without approximate_unacked");
                        None
                    }
                };
                signal
            })
            .await;
        self.pending = None;
        self.nudge_pending = false;
        self.announced = head;
        self.hints_sent.add(1);
        Some(hint)
    }

    pub fn heartbeat_signal(&self) -> StreamSignal {
        signal(&self.state, &self.inbox, "heartbeat", self.announced)
    }
}

/// The `signal_type` of a stream's last message when its session was superseded.
pub(crate) const SESSION_SUPERSEDED: &str = "session.superseded";

/// Waits for a report on `changes`; never, without a session.
async fn session_changed(changes: &mut Option<watch::Receiver<u64>>) -> Result<(), watch::error::RecvError> {
    match changes {
        Some(changes) => changes.changed().await,
        None => std::future::pending().await,
    }
}

fn signal(state: &AppState, inbox: &RecipientKey, signal_type: &str, head: u64) -> StreamSignal {
    let now = state.store.now();
    StreamSignal {
        signal_type: signal_type.to_owned(),
        tenant_id: inbox.tenant_id.clone(),
        recipient_id: inbox.recipient.id.clone(),
        head_seq: head,
        approximate_unacked: None,
        sent_at_utc: format_utc(now.get()),
        delivery_id: EventId::new_v7(now, inbox_store::random_bytes::<10>()).to_string(),
    }
}

/// One open connection in the `agent_inbox_connected_streams` gauge, for as long as it lives.
#[derive(Debug)]
pub(crate) struct Connected {
    /// The metrics alone, not the whole state: this lives as long as the stream.
    metrics: Arc<Metrics>,
    transport: &'static str,
}

impl Connected {
    pub fn new(state: &AppState, transport: &'static str) -> Connected {
        state.metrics.connected_streams().add([transport.to_owned()], 1.0);
        Connected { metrics: state.metrics.clone(), transport }
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        self.metrics.connected_streams().add([self.transport.to_owned()], -1.0);
    }
}
