//! What every real-time stream (SSE, WebSocket) shares: a [`Subscription`] holds the waiter
//! slot that caps streams per agent and tenant, watches the inbox's hints, keeps the agent
//! session alive, and turns "the head moved" into seed 001's thin signal.
//!
//! A subscription subscribes to hints *before* it reads the head from the database, so a
//! commit between the two cannot be missed; it only ever announces a head higher than the
//! last one it announced, and a burst of commits coalesces into one signal.
//!
//! Under the single-active-session policy (`session_policy.rs`) a stream must name its agent's
//! newest session to open, and ends with a final `session.superseded` signal when a newer
//! subscribe supersedes that session: at once when the notifier reports it, at the latest at
//! the stream's next heartbeat.

use std::time::Duration;

use axum::http::{HeaderMap, header};
use inbox_api::StreamSignal;
use inbox_api::time::format_utc;
use inbox_core::{EventId, InboxSeq, RecipientKey, SessionId};
use inbox_store::SessionTouch;
use tokio::sync::watch;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use crate::AppState;
use crate::auth::{Caller, random};
use crate::error::ApiError;
use crate::limits::WaiterGuard;
use crate::ops::sessions::{is_superseded, require_active_session};

/// What woke a subscription.
#[derive(Debug)]
pub(crate) enum Wake {
    /// The head moved past what was last announced: send this.
    Signal(StreamSignal),
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
    hints: watch::Receiver<u64>,
    /// Reports that a subscribe superseded sessions of this agent (with a session only).
    session_changes: Option<watch::Receiver<u64>>,
    announced: u64,
    heartbeat: Interval,
    tenant_label: String,
    _slot: WaiterGuard,
    _connected: Connected,
}

impl Subscription {
    /// Opens a stream for `caller`: checks the scope and the session policy (409
    /// `session_superseded` or `session_required`), takes a waiter slot (429
    /// `too_many_waiters` past the caps), touches the session, and returns the signal to send
    /// at once when the head is already past `last_event_id` (missing counts as 0).
    pub async fn open(
        state: &AppState,
        caller: &Caller,
        transport: &'static str,
        session_id: Option<SessionId>,
        last_event_id: Option<u64>,
    ) -> Result<(Subscription, Option<StreamSignal>), ApiError> {
        caller.require("stream.subscribe")?;
        // Watch before checking, so a supersede between the two still wakes this stream.
        let session_changes =
            session_id.as_ref().map(|_| state.session_changes.watch(&caller.tenant_id, &caller.subject));
        require_active_session(state, caller, session_id.as_ref()).await?;
        let slot = state.limits.hold_waiter(caller.tenant_id.as_str(), caller.subject.as_str())?;
        let inbox = caller.inbox();
        if let Some(session_id) = &session_id {
            touch(state, caller, session_id, Some(transport)).await?;
        }
        let hints = state.hints.watch(&inbox);
        let head = state.store.head(&inbox).await?.head_seq.get();
        let labels = vec![("transport", transport.to_owned())];
        state.metrics.count("agent_inbox_stream_connects_total", labels.clone(), 1);
        if last_event_id.is_some() {
            state.metrics.count("agent_inbox_stream_reconnects_total", labels, 1);
        }
        let period = state.config.heartbeat_interval;
        let mut heartbeat = tokio::time::interval_at(Instant::now() + period, period);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut subscription = Subscription {
            state: state.clone(),
            tenant_label: state.metrics.tenant_label(inbox.tenant_id.as_str()),
            inbox,
            transport,
            session_id,
            hints,
            session_changes,
            announced: last_event_id.unwrap_or(0),
            heartbeat,
            _slot: slot,
            _connected: Connected::new(state, transport),
        };
        let first = subscription.announce(head);
        Ok((subscription, first))
    }

    /// Waits for the next thing to send. Cancel-safe: nothing is lost when another branch of a
    /// `select!` wins.
    pub async fn next(&mut self) -> Wake {
        loop {
            tokio::select! {
                changed = self.hints.changed() => {
                    if changed.is_err() {
                        // The channel was swept, which only happens without receivers; not
                        // while we hold one. Re-subscribe to be safe.
                        self.hints = self.state.hints.watch(&self.inbox);
                        continue;
                    }
                    let head = *self.hints.borrow_and_update();
                    if let Some(signal) = self.announce(head) {
                        return Wake::Signal(signal);
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
        self.touch().await;
        self.superseded().await
    }

    /// The final `session.superseded` signal when this stream's session is no longer its
    /// agent's active one under the policy; `None` otherwise (or when that cannot be read now:
    /// the next heartbeat asks again).
    pub async fn superseded(&self) -> Option<StreamSignal> {
        let session_id = self.session_id.as_ref()?;
        let (tenant, agent) = (&self.inbox.tenant_id, &self.inbox.recipient.id);
        match is_superseded(&self.state, tenant, agent, session_id).await {
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
        if let Err(err) = self.state.store.touch_session(&touch).await {
            tracing::warn!(error = %err, "stream heartbeat could not touch its session");
        }
    }

    /// The signal for `head` when it is news, counted as a hint sent.
    fn announce(&mut self, head: u64) -> Option<StreamSignal> {
        if head <= self.announced {
            return None;
        }
        self.announced = head;
        let labels = vec![("tenant", self.tenant_label.clone()), ("transport", self.transport.to_owned())];
        self.state.metrics.count("agent_inbox_hints_sent_total", labels, 1);
        Some(signal(&self.state, &self.inbox, "inbox.updated", head))
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
        tenant_id: inbox.tenant_id.to_string(),
        recipient_id: inbox.recipient.id.to_string(),
        head_seq: head,
        sent_at_utc: format_utc(now.get()),
        delivery_id: EventId::new_v7(now, random::<10>()).to_string(),
    }
}

/// Records a sign of life of `session_id`, which must be the caller's (404
/// `session_not_found` otherwise).
pub(crate) async fn touch(
    state: &AppState,
    caller: &Caller,
    session_id: &SessionId,
    transport: Option<&str>,
) -> Result<(), ApiError> {
    let touch = SessionTouch {
        session_id,
        tenant_id: &caller.tenant_id,
        agent_id: &caller.subject,
        transport,
        last_seen_seq: None,
    };
    if state.store.touch_session(&touch).await? { Ok(()) } else { Err(session_not_found()) }
}

pub(crate) fn session_not_found() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::NOT_FOUND,
        "session_not_found",
        "no session with this session_id belongs to you; open one with POST /v1/agent-sessions/subscribe",
    )
}

/// Checks an optional `session_id` parameter.
pub(crate) fn session_param(field: &str, value: Option<&str>) -> Result<Option<SessionId>, ApiError> {
    value.map(SessionId::new).transpose().map_err(|e| ApiError::invalid_field(field, e.problem))
}

/// The resume point of an SSE or WebSocket client: the `Last-Event-ID` header a reconnecting
/// `EventSource` sends, else the `last_event_id` query parameter (for clients that cannot set
/// headers). Event ids are head sequences.
pub(crate) fn last_event_id(headers: &HeaderMap, query: Option<&str>) -> Result<Option<u64>, ApiError> {
    let (field, text) = match headers.get("last-event-id") {
        Some(value) => ("Last-Event-ID", value.to_str().unwrap_or("\u{fffd}")),
        None => match query {
            Some(text) => ("last_event_id", text),
            None => return Ok(None),
        },
    };
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse::<u64>().ok().and_then(|n| InboxSeq::new(n).ok()).map(|seq| Some(seq.get())).ok_or_else(|| {
        ApiError::invalid_field(
            field,
            format!("is {text:?}; send the id of the last event received (a head_seq)"),
        )
    })
}

/// `ws://host` or `wss://host` for the request's Host header (`wss` behind a proxy that says
/// `X-Forwarded-Proto: https`), or `None` when the header is missing or not a plain authority,
/// in which case the caller gives a relative URL.
pub(crate) fn websocket_origin(headers: &HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let plain = !host.is_empty()
        && host.len() <= 255
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    if !plain {
        return None;
    }
    let scheme = if forwarded_https(headers) { "wss" } else { "ws" };
    Some(format!("{scheme}://{host}"))
}

/// Whether a proxy in front says the client used HTTPS.
pub(crate) fn forwarded_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').next().is_some_and(|p| p.trim().eq_ignore_ascii_case("https")))
}

/// The WebSocket URL with `query` appended, absolute when the Host header allows.
pub(crate) fn websocket_url(headers: &HeaderMap, query: &str) -> String {
    format!("{}/v1/streams/ws{query}", websocket_origin(headers).unwrap_or_default())
}

/// One open connection in the `agent_inbox_connected_streams` gauge, for as long as it lives.
#[derive(Debug)]
pub(crate) struct Connected {
    state: AppState,
    transport: &'static str,
}

impl Connected {
    pub fn new(state: &AppState, transport: &'static str) -> Connected {
        state.metrics.add_gauge(
            "agent_inbox_connected_streams",
            vec![("transport", transport.to_owned())],
            1.0,
        );
        Connected { state: state.clone(), transport }
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        self.state.metrics.add_gauge(
            "agent_inbox_connected_streams",
            vec![("transport", self.transport.to_owned())],
            -1.0,
        );
    }
}

/// How long a WebSocket send may wait for a client that does not read before the connection
/// is dropped (SSE needs none: its frames are produced only when the connection can take them).
pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn last_event_id_prefers_the_header_and_names_bad_input() {
        let mut headers = HeaderMap::new();
        assert_eq!(last_event_id(&headers, None).unwrap(), None);
        assert_eq!(last_event_id(&headers, Some("7")).unwrap(), Some(7));
        headers.insert("last-event-id", HeaderValue::from_static("12"));
        assert_eq!(last_event_id(&headers, Some("7")).unwrap(), Some(12));
        headers.insert("last-event-id", HeaderValue::from_static("twelve"));
        let err = last_event_id(&headers, None).unwrap_err();
        assert_eq!((err.code, err.extensions["field"].as_str()), ("invalid_field", Some("Last-Event-ID")));
        assert!(last_event_id(&HeaderMap::new(), Some("-1")).is_err());
    }

    #[test]
    fn websocket_urls_follow_the_host_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(websocket_url(&headers, "?a=1"), "/v1/streams/ws?a=1");
        headers.insert(header::HOST, HeaderValue::from_static("coord.example.net:8443"));
        assert_eq!(websocket_url(&headers, ""), "ws://coord.example.net:8443/v1/streams/ws");
        headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert_eq!(websocket_url(&headers, ""), "wss://coord.example.net:8443/v1/streams/ws");
        headers.insert(header::HOST, HeaderValue::from_static("evil/path?x"));
        assert_eq!(websocket_url(&headers, ""), "/v1/streams/ws");
    }
}
