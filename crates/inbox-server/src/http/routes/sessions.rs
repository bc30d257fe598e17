//! Agent sessions: `POST /v1/agent-sessions/subscribe` records a session and tells the agent
//! how to learn about new work (the recommended transport and its URLs) and where to fetch it;
//! `POST /v1/agent-sessions/{session_id}/heartbeat` keeps a session without a stream alive.
//!
//! Under the tenant's single-active-session policy a subscribe supersedes the agent's earlier
//! sessions (see `ops/sessions.rs` for what they may still do); their open streams on this
//! node are told right after the commit, on other nodes through the notifier.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use inbox_api::time::format_utc;
use inbox_api::{
    RecipientView, Scope, SessionHeartbeatRequest, SessionHeartbeatResponse, SubscribeRequest,
    SubscribeResponse,
};
use inbox_core::SessionId;

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::http::extract::{ApiJson, parse_json};
use crate::http::stream_params::websocket_url;
use crate::ops::sessions::{self, Subscribed};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/agent-sessions/subscribe", post(subscribe))
        .route("/v1/agent-sessions/{session_id}/heartbeat", post(heartbeat))
}

/// Opens a session. When the tenant runs the single-active-session policy, the new session
/// supersedes the agent's earlier ones: they are kept, marked `superseded`, and from now on
/// refused for claims and stream opens (409 `session_superseded`), their open streams get a last
/// `session.superseded` signal and close, and their session heartbeats answer 409; the leases
/// they hold stay valid, so in-flight work can be acknowledged or released. A later subscribe
/// (the old process starting again) takes over in turn.
#[utoipa::path(post, path = "/v1/agent-sessions/subscribe", tag = "sessions", request_body = SubscribeRequest,
    responses((status = 200, body = SubscribeResponse)))]
pub async fn subscribe(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(request): ApiJson<SubscribeRequest>,
) -> Result<Json<SubscribeResponse>, ApiError> {
    let subscribed = sessions::subscribe(&state, &caller, request).await?;
    let Subscribed { session_id, recommended, streams_allowed, head_seq } = subscribed;
    let config = &state.config;
    Ok(Json(SubscribeResponse {
        session_id: session_id.to_string(),
        recipient: RecipientView {
            tenant_id: caller.tenant_id.to_string(),
            recipient_kind: "agent".to_owned(),
            recipient_id: caller.subject.to_string(),
        },
        current_head_seq: head_seq,
        recommended_transport: recommended.to_owned(),
        poll_after_cursor_url: "/v1/inbox/poll-after-cursor".to_owned(),
        sse_url: streams_allowed.then(|| format!("/v1/streams/sse?session_id={session_id}")),
        websocket_url: streams_allowed.then(|| websocket_url(&headers, &format!("?session_id={session_id}"))),
        heartbeat_interval_seconds: config.sessions.heartbeat_interval.as_secs(),
        lease_default_seconds: config.inbox.lease_default.as_secs(),
        retention_days: config.inbox.retention.as_secs() / 86_400,
    }))
}

/// Keeps a session alive for clients on long poll or poll (a stream keeps its session alive by
/// itself); a session silent for three heartbeat intervals is marked gone. Optionally records
/// the last sequence the agent processed. A session superseded under the single-active-session
/// policy gets 409 `session_superseded`, which is how a polling agent learns it.
#[utoipa::path(post, path = "/v1/agent-sessions/{session_id}/heartbeat", tag = "sessions",
    params(("session_id" = String, Path)), request_body(content = SessionHeartbeatRequest, description = "optional"),
    responses((status = 200, body = SessionHeartbeatResponse), (status = 404, description = "session_not_found", body = inbox_api::Problem),
        (status = 409, description = "session_superseded", body = inbox_api::Problem)))]
pub async fn heartbeat(
    State(state): State<AppState>,
    caller: Caller,
    Path(session_id): Path<String>,
    body: Bytes,
) -> Result<Json<SessionHeartbeatResponse>, ApiError> {
    caller.require(Scope::InboxPoll)?;
    let session_id =
        SessionId::new(session_id).map_err(|e| ApiError::invalid_field("session_id", e.problem))?;
    let request: SessionHeartbeatRequest = if body.iter().all(u8::is_ascii_whitespace) {
        SessionHeartbeatRequest::default()
    } else {
        parse_json(&body)?
    };
    let gone_after = sessions::heartbeat(&state, &caller, &session_id, request.last_seen_seq).await?;
    let interval = state.config.sessions.heartbeat_interval;
    Ok(Json(SessionHeartbeatResponse {
        session_id: session_id.to_string(),
        status: "active".to_owned(),
        heartbeat_interval_seconds: interval.as_secs(),
        gone_after_utc: format_utc(gone_after.get()),
    }))
}
