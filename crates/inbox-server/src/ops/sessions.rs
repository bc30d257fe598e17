//! Seed 001's optional single-active-session policy, enforced where an agent takes new work.
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
use inbox_core::{RecipientId, SessionId, TenantId};
use inbox_store::{SessionStanding, SessionTouch};

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

/// Lets `session_id` take new work (claim, open a stream), or refuses it when the tenant runs
/// the policy and the session is not the agent's newest.
pub(crate) async fn require_active_session(
    state: &AppState,
    caller: &Caller,
    session_id: Option<&SessionId>,
) -> Result<(), ApiError> {
    if !state.tenant_policies.get(&state.store, &caller.tenant_id).await?.single_active_session {
        return Ok(());
    }
    let Some(session_id) = session_id else { return Err(session_required()) };
    match state.store.session_standing(&caller.tenant_id, &caller.subject, session_id).await? {
        SessionStanding::Newest => Ok(()),
        SessionStanding::Older { .. } => Err(session_superseded(session_id)),
        SessionStanding::Unknown => Err(session_not_found()),
    }
}

/// Whether an open stream's session has been superseded under the policy (an unknown session
/// counts as not superseded: the stream keeps the behaviour it opened with).
pub(crate) async fn is_superseded(
    state: &AppState,
    tenant_id: &TenantId,
    agent_id: &RecipientId,
    session_id: &SessionId,
) -> Result<bool, ApiError> {
    if !state.tenant_policies.get(&state.store, tenant_id).await?.single_active_session {
        return Ok(false);
    }
    let standing = state.store.session_standing(tenant_id, agent_id, session_id).await?;
    Ok(matches!(standing, SessionStanding::Older { .. }))
}

pub(crate) fn session_required() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "session_required",
        "this tenant allows one active session per agent: name your session_id (from POST \
         /v1/agent-sessions/subscribe) in the claim body or the stream URL",
    )
}

pub(crate) fn session_superseded(session_id: &SessionId) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "session_superseded",
        "a newer session of this agent took over (this tenant allows one active session per \
         agent): finish or release the events you hold, then stop; subscribe again only to take \
         the work back",
    )
    .with("session_id", session_id.as_str())
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
