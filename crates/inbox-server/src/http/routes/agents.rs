//! Seed 000's resource-style routes, thin aliases onto the use cases of [`crate::ops::inbox`]
//! that seed 001's routes call too. The `{agent_id}` in the path must be the token's own agent.

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use inbox_api::{
    AckOneRequest, AckOutcome, AgentInboxPage, ClaimRequest, ClaimResponse, ReleaseOneRequest,
    ReleaseResponse,
};
use serde::Deserialize;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::http::extract::ApiQuery;
use crate::http::signed::{SignedJson, SignedJsonOrEmpty};
use crate::node::AppState;
use crate::ops::inbox;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/agents/{agent_id}/inbox", get(inbox))
        .route("/api/v1/agents/{agent_id}/inbox/claim", post(claim))
        .route("/api/v1/agents/{agent_id}/inbox/{event_id}/ack", post(ack))
        .route("/api/v1/agents/{agent_id}/inbox/{event_id}/release", post(release))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct InboxQuery {
    #[serde(default)]
    after_cursor: u64,
    #[param(value_type = Option<inbox_core::limits::BatchLimit>)]
    limit: Option<u32>,
}

/// Poll after cursor, as `GET /api/v1/agents/{agent_id}/inbox?after_cursor=..&limit=..`.
#[utoipa::path(get, path = "/api/v1/agents/{agent_id}/inbox", tag = "agents (seed 000 aliases)",
    params(("agent_id" = inbox_core::RecipientId, Path), InboxQuery), responses((status = 200, body = AgentInboxPage)))]
pub async fn inbox(
    State(state): State<AppState>,
    caller: Caller,
    Path(agent_id): Path<String>,
    ApiQuery(query): ApiQuery<InboxQuery>,
) -> Result<Json<AgentInboxPage>, ApiError> {
    inbox::page(&state, &caller, &agent_id, query.after_cursor, query.limit).await.map(Json)
}

/// Claim, as `POST /api/v1/agents/{agent_id}/inbox/claim` (body optional).
#[utoipa::path(post, path = "/api/v1/agents/{agent_id}/inbox/claim", tag = "agents (seed 000 aliases)",
    params(("agent_id" = inbox_core::RecipientId, Path)), request_body = ClaimRequest,
    responses((status = 200, body = ClaimResponse),
        (status = 409, description = "session_superseded or session_required (single-active-session policy): name the agent's newest session_id in the body", body = inbox_api::Problem)))]
pub async fn claim(
    State(state): State<AppState>,
    caller: Caller,
    Path(agent_id): Path<String>,
    SignedJsonOrEmpty(request): SignedJsonOrEmpty<ClaimRequest>,
) -> Result<Json<ClaimResponse>, ApiError> {
    inbox::claim_for_agent(&state, &caller, &agent_id, request).await.map(Json)
}

/// Acknowledge one event, as `POST /api/v1/agents/{agent_id}/inbox/{event_id}/ack`.
#[utoipa::path(post, path = "/api/v1/agents/{agent_id}/inbox/{event_id}/ack", tag = "agents (seed 000 aliases)",
    params(("agent_id" = inbox_core::RecipientId, Path), ("event_id" = inbox_core::EventId, Path)), request_body = AckOneRequest,
    responses((status = 200, body = AckOutcome), (status = 409, body = inbox_api::Problem)))]
pub async fn ack(
    State(state): State<AppState>,
    caller: Caller,
    Path((agent_id, event_id)): Path<(String, String)>,
    SignedJson(request): SignedJson<AckOneRequest>,
) -> Result<Json<AckOutcome>, ApiError> {
    inbox::acknowledge_one(&state, &caller, &agent_id, &event_id, request).await.map(Json)
}

/// Release one event, as `POST /api/v1/agents/{agent_id}/inbox/{event_id}/release`.
#[utoipa::path(post, path = "/api/v1/agents/{agent_id}/inbox/{event_id}/release", tag = "agents (seed 000 aliases)",
    params(("agent_id" = inbox_core::RecipientId, Path), ("event_id" = inbox_core::EventId, Path)), request_body = ReleaseOneRequest,
    responses((status = 200, body = ReleaseResponse), (status = 409, body = inbox_api::Problem)))]
pub async fn release(
    State(state): State<AppState>,
    caller: Caller,
    Path((agent_id, event_id)): Path<(String, String)>,
    SignedJson(request): SignedJson<ReleaseOneRequest>,
) -> Result<Json<ReleaseResponse>, ApiError> {
    inbox::release_one(&state, &caller, &agent_id, &event_id, request).await.map(Json)
}
