//! `POST /v1/agent-sessions/subscribe`: records an agent session and tells the agent how to
//! learn about new work and where to fetch it.

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use inbox_api::{RecipientView, SubscribeRequest, SubscribeResponse};
use inbox_core::{InboxSeq, SessionId};
use inbox_store::SessionRecord;

use crate::AppState;
use crate::auth::{Caller, hex, random};
use crate::error::ApiError;
use crate::extract::ApiJson;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/agent-sessions/subscribe", post(subscribe))
}

/// Transports this server offers, in the order it recommends them.
const OFFERED: &[&str] = &["long-poll", "poll"];

#[utoipa::path(post, path = "/v1/agent-sessions/subscribe", tag = "sessions", request_body = SubscribeRequest,
    responses((status = 200, body = SubscribeResponse)))]
pub async fn subscribe(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<SubscribeRequest>,
) -> Result<Json<SubscribeResponse>, ApiError> {
    caller.require("inbox.poll")?;
    caller.check_tenant(request.tenant_id.as_deref())?;
    caller.check_agent(request.agent_id.as_deref())?;
    let known = ["sse", "websocket", "long-poll", "poll"];
    if let Some(unknown) = request.supported_transports.iter().find(|t| !known.contains(&t.as_str())) {
        return Err(ApiError::invalid_field(
            "supported_transports",
            format!("names {unknown:?}; use sse, websocket, long-poll or poll"),
        ));
    }
    let recommended = OFFERED
        .iter()
        .find(|t| {
            request.supported_transports.is_empty() || request.supported_transports.iter().any(|s| s == *t)
        })
        .copied()
        .unwrap_or("poll");
    let last_seen_seq = InboxSeq::new(request.last_seen_seq.unwrap_or(0))
        .map_err(|e| ApiError::invalid_field("last_seen_seq", e.problem))?;
    let session_id = SessionId::new(format!("sess_{}", hex(&random::<16>())))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    state
        .store
        .open_session(&SessionRecord {
            session_id: session_id.clone(),
            tenant_id: caller.tenant_id.clone(),
            agent_id: caller.subject.clone(),
            device_id: request.device_id,
            transport: recommended.to_owned(),
            last_seen_seq,
            auth_subject: caller.subject.to_string(),
        })
        .await?;
    let head = state.store.head(&caller.inbox()).await?;
    let config = &state.config;
    Ok(Json(SubscribeResponse {
        session_id: session_id.to_string(),
        recipient: RecipientView {
            tenant_id: caller.tenant_id.to_string(),
            recipient_kind: "agent".to_owned(),
            recipient_id: caller.subject.to_string(),
        },
        current_head_seq: head.head_seq.get(),
        recommended_transport: recommended.to_owned(),
        poll_after_cursor_url: "/v1/inbox/poll-after-cursor".to_owned(),
        sse_url: None,
        websocket_url: None,
        heartbeat_interval_seconds: config.heartbeat_interval.as_secs(),
        lease_default_seconds: config.lease_default.as_secs(),
        retention_days: config.retention.as_secs() / 86_400,
    }))
}
