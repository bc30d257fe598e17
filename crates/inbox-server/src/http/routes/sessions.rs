//! Agent sessions: `POST /v1/agent-sessions/subscribe` records a session and tells the agent
//! how to learn about new work (the recommended transport and its URLs) and where to fetch it;
//! `POST /v1/agent-sessions/{session_id}/heartbeat` keeps a session without a stream alive.
//!
//! Under the tenant's single-active-session policy a subscribe supersedes the agent's earlier
//! sessions (see `ops/sessions.rs` for what they may still do); their open streams on this
//! node are told right after the commit, on other nodes through the notifier.

use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Json, Router};
use inbox_api::{SessionHeartbeatRequest, SessionHeartbeatResponse, SubscribeRequest, SubscribeResponse};

use crate::caller::Caller;
use crate::error::ApiError;
use crate::http::extract::{ApiJson, JsonOrEmpty};
use crate::node::AppState;
use crate::ops::sessions::{self, WebsocketOrigin};

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
    origin: WebsocketOrigin,
    ApiJson(request): ApiJson<SubscribeRequest>,
) -> Result<Json<SubscribeResponse>, ApiError> {
    sessions::subscribe(&state, &caller, &origin, request).await.map(Json)
}

/// Keeps a session alive for clients on long poll or poll (a stream keeps its session alive by
/// itself); a session silent for three heartbeat intervals is marked gone. Optionally records
/// the last sequence the agent processed. A session superseded under the single-active-session
/// policy gets 409 `session_superseded`, which is how a polling agent learns it.
#[utoipa::path(post, path = "/v1/agent-sessions/{session_id}/heartbeat", tag = "sessions",
    params(("session_id" = inbox_core::SessionId, Path)), request_body(content = SessionHeartbeatRequest, description = "optional"),
    responses((status = 200, body = SessionHeartbeatResponse), (status = 404, description = "session_not_found", body = inbox_api::Problem),
        (status = 409, description = "session_superseded", body = inbox_api::Problem)))]
pub async fn heartbeat(
    State(state): State<AppState>,
    caller: Caller,
    Path(session_id): Path<String>,
    JsonOrEmpty(request): JsonOrEmpty<SessionHeartbeatRequest>,
) -> Result<Json<SessionHeartbeatResponse>, ApiError> {
    sessions::heartbeat(&state, &caller, &session_id, request).await.map(Json)
}
