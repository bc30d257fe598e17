//! Agent sessions: subscribe (which recommends a transport), the session heartbeat of clients
//! without a stream, session touches, and seed 001's optional single-active-session policy,
//! enforced where an agent takes new work.
//!
//! Seed 001: "Two processes using one agent identity: allow multiple sessions to receive hints,
//! but serialize actual consumption through row-level claims. If shared identities are
//! undesirable, add a concurrency policy of single-active-session." Without the policy nothing
//! here refuses anything. With it, an agent's newest session (every subscribe records itself
//! as such, durably, so all nodes agree) is its only active one: claims (HTTP, seed 000's alias,
//! WebSocket) and stream opens must name it, and are refused with 409 `session_superseded`, or
//! 409 `session_required` when they name none. Acknowledge, release and lease heartbeats are
//! not checked: the lease token is their guard, so a superseded process can finish or give
//! back what it holds.
//!
//! The check is a read before the claim, not part of the claim's statement: a session
//! superseded a moment before its claim may still get that one batch. Leases still keep any
//! event from being processed twice, and its next claim is refused.
//!
//! Each node caches the policy ([`crate::tenant_policies`]), which is how long turning it on or
//! off takes to reach other nodes; subscribes read it from the database.

use axum::http::StatusCode;
use inbox_api::time::format_utc;
use inbox_api::{
    ProblemCode, RecipientView, Scope, SessionHeartbeatRequest, SessionHeartbeatResponse, SubscribeRequest,
    SubscribeResponse, Transport,
};
use inbox_core::limits::DeviceId;
use inbox_core::{RecipientId, RecipientKind, SessionId, TenantId};
use inbox_store::{SessionRecord, SessionStanding, SessionTouch};

use crate::caller::Caller;
use crate::error::ApiError;
use crate::node::AppState;

/// Lets `session_id` take new work (claim, open a stream), or refuses it when the tenant runs
/// the policy and the session is not the agent's newest.
pub(in crate::ops) async fn require_active_session(
    state: &AppState,
    caller: &Caller,
    session_id: Option<&SessionId>,
) -> Result<(), ApiError> {
    if !state.tenant_policies.get(&state.store, &caller.tenant_id).await?.single_active_session {
        return Ok(());
    }
    let Some(session_id) = session_id else { return Err(session_required()) };
    match state.store.sessions().standing(&caller.tenant_id, &caller.subject, session_id).await? {
        SessionStanding::Newest => Ok(()),
        SessionStanding::Older { .. } => Err(session_superseded(session_id)),
        SessionStanding::Unknown => Err(session_not_found()),
    }
}

/// Whether an open stream's session has been superseded under the policy (an unknown session
/// counts as not superseded: the stream keeps the behaviour it opened with).
pub(in crate::ops) async fn is_superseded(
    state: &AppState,
    tenant_id: &TenantId,
    agent_id: &RecipientId,
    session_id: &SessionId,
) -> Result<bool, ApiError> {
    if !state.tenant_policies.get(&state.store, tenant_id).await?.single_active_session {
        return Ok(false);
    }
    let standing = state.store.sessions().standing(tenant_id, agent_id, session_id).await?;
    Ok(matches!(standing, SessionStanding::Older { .. }))
}

pub(crate) fn session_required() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        ProblemCode::SessionRequired,
        "this tenant allows one active session per agent: name your session_id (from POST \
         /v1/agent-sessions/subscribe) in the claim body or the stream URL",
    )
}

pub(crate) fn session_superseded(session_id: &SessionId) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        ProblemCode::SessionSuperseded,
        "a newer session of this agent took over (this tenant allows one active session per \
         agent): finish or release the events you hold, then stop; subscribe again only to take \
         the work back",
    )
    .with("session_id", session_id.as_str())
}

/// Records a sign of life of `session_id`, which must be the caller's (404
/// `session_not_found` otherwise).
pub(in crate::ops) async fn touch(
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
    if state.store.sessions().touch(&touch).await? { Ok(()) } else { Err(session_not_found()) }
}

pub(crate) fn session_not_found() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::NOT_FOUND,
        ProblemCode::SessionNotFound,
        "no session with this session_id belongs to you; open one with POST /v1/agent-sessions/subscribe",
    )
}

/// How the client reached this node, for the WebSocket URLs an answer names: `ws://host` or
/// `wss://host`, or `None` when the request's `Host` is missing or not a plain authority (the
/// URL is then relative). The HTTP layer reads it from the request (`http/stream_params.rs`).
#[derive(Debug, Clone, Default)]
pub struct WebsocketOrigin(pub Option<String>);

impl WebsocketOrigin {
    /// The WebSocket URL with `query` appended, absolute when the origin is known.
    pub fn url(&self, query: &str) -> String {
        format!("{}/v1/streams/ws{query}", self.0.as_deref().unwrap_or_default())
    }
}

/// Opens a session for the caller, superseding the agent's earlier ones when the tenant runs
/// the single-active-session policy (their open streams on this node are told at once, on
/// other nodes through the notifier), and tells the agent how to learn about new work (the
/// recommended transport and its URLs) and where to fetch it.
pub async fn subscribe(
    state: &AppState,
    caller: &Caller,
    origin: &WebsocketOrigin,
    request: SubscribeRequest,
) -> Result<SubscribeResponse, ApiError> {
    caller.require(Scope::InboxPoll)?;
    caller.check_tenant(request.tenant_id.as_ref())?;
    caller.check_agent(request.agent_id.as_ref().map(RecipientId::as_str))?;
    // The server offers every transport, in `Transport::ALL`'s order of preference; streams
    // only to a token that may subscribe to them.
    let streams_allowed = caller.has(Scope::StreamSubscribe);
    let recommended = Transport::ALL
        .into_iter()
        .filter(|t| streams_allowed || !t.is_stream())
        .find(|t| request.supported_transports.is_empty() || request.supported_transports.contains(t))
        .unwrap_or(Transport::Poll);
    let session_id = SessionId::new(format!("sess_{}", hex::encode(inbox_store::random_bytes::<16>())))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let opened = state
        .store
        .sessions()
        .open(&SessionRecord {
            session_id: session_id.clone(),
            tenant_id: caller.tenant_id.clone(),
            agent_id: caller.subject.clone(),
            device_id: request.device_id.map(DeviceId::into_string),
            transport: recommended.as_str().to_owned(),
            last_seen_seq: request.last_seen_seq.unwrap_or_default(),
            auth_subject: caller.subject.to_string(),
        })
        .await?;
    if opened.superseded > 0 {
        state.session_changes.superseded(&caller.tenant_id, &caller.subject);
    }
    let head = state.store.inbox().head(&caller.inbox()).await?;
    let config = &state.config;
    Ok(SubscribeResponse {
        session_id: session_id.clone(),
        recipient: RecipientView {
            tenant_id: caller.tenant_id.clone(),
            recipient_kind: RecipientKind::agent(),
            recipient_id: caller.subject.clone(),
        },
        current_head_seq: head.head_seq.get(),
        recommended_transport: recommended.as_str().to_owned(),
        poll_after_cursor_url: "/v1/inbox/poll-after-cursor".to_owned(),
        sse_url: streams_allowed.then(|| format!("/v1/streams/sse?session_id={session_id}")),
        websocket_url: streams_allowed.then(|| origin.url(&format!("?session_id={session_id}"))),
        heartbeat_interval_seconds: config.sessions.heartbeat_interval.as_secs(),
        lease_default_seconds: config.inbox.lease_default.as_secs(),
        retention_days: config.inbox.retention.as_secs() / 86_400,
    })
}

/// A session heartbeat of a client without a stream: the session (`session_id`, from the path)
/// must be the caller's and, under the policy, its agent's newest. Answers when the session
/// counts as gone if silent.
pub async fn heartbeat(
    state: &AppState,
    caller: &Caller,
    session_id: &str,
    request: SessionHeartbeatRequest,
) -> Result<SessionHeartbeatResponse, ApiError> {
    caller.require(Scope::InboxPoll)?;
    let session_id =
        &SessionId::new(session_id).map_err(|e| ApiError::invalid_field("session_id", e.problem))?;
    let last_seen_seq = request.last_seen_seq;
    require_active_session(state, caller, Some(session_id)).await?;
    let touch = SessionTouch {
        session_id,
        tenant_id: &caller.tenant_id,
        agent_id: &caller.subject,
        transport: None,
        last_seen_seq,
    };
    if !state.store.sessions().touch(&touch).await? {
        return Err(session_not_found());
    }
    let interval = state.config.sessions.heartbeat_interval;
    let gone_after = state.store.now().plus_ms((interval * 3).as_millis() as u64);
    Ok(SessionHeartbeatResponse {
        session_id: session_id.clone(),
        status: "active".to_owned(),
        heartbeat_interval_seconds: interval.as_secs(),
        gone_after_utc: format_utc(gone_after.get()),
    })
}
