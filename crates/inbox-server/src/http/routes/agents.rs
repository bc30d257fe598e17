//! Seed 000's resource-style routes, thin aliases onto the use cases of [`crate::ops::inbox`]
//! that seed 001's routes call too. The `{agent_id}` in the path must be the token's own agent.

use axum::extract::{Path, Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use inbox_api::{
    AckOneRequest, AckOutcome, AgentInboxPage, ClaimRequest, ClaimResponse, ReleaseOneRequest,
    ReleaseResponse, Scope,
};
use serde::Deserialize;

use crate::AppState;
use crate::auth::Caller;
use crate::convert::envelope;
use crate::error::ApiError;
use crate::http::extract::parse_json;
use crate::http::signed::{SignedBody, SignedJson};
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
    limit: Option<u32>,
}

/// Poll after cursor, as `GET /api/v1/agents/{agent_id}/inbox?after_cursor=..&limit=..`.
#[utoipa::path(get, path = "/api/v1/agents/{agent_id}/inbox", tag = "agents (seed 000 aliases)",
    params(("agent_id" = String, Path), InboxQuery), responses((status = 200, body = AgentInboxPage)))]
pub async fn inbox(
    State(state): State<AppState>,
    caller: Caller,
    Path(agent_id): Path<String>,
    query: Result<Query<InboxQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<AgentInboxPage>, ApiError> {
    caller.require(Scope::InboxPoll)?;
    caller.check_agent(Some(&agent_id))?;
    let Query(query) = query.map_err(|e| crate::http::extract::query_problem(&e))?;
    let page = inbox::page(&state, &caller, query.after_cursor, query.limit).await?;
    let now = state.store.now();
    Ok(Json(AgentInboxPage {
        events: page.events.iter().map(|e| envelope(e, now).into()).collect(),
        next_cursor: page.next_cursor.get(),
        has_more: page.more_available,
        head_seq: page.head_seq.get(),
    }))
}

/// Claim, as `POST /api/v1/agents/{agent_id}/inbox/claim` (body optional).
#[utoipa::path(post, path = "/api/v1/agents/{agent_id}/inbox/claim", tag = "agents (seed 000 aliases)",
    params(("agent_id" = String, Path)), request_body = ClaimRequest,
    responses((status = 200, body = ClaimResponse),
        (status = 409, description = "session_superseded or session_required (single-active-session policy): name the agent's newest session_id in the body", body = inbox_api::Problem)))]
pub async fn claim(
    State(state): State<AppState>,
    caller: Caller,
    Path(agent_id): Path<String>,
    SignedBody { body }: SignedBody,
) -> Result<Json<ClaimResponse>, ApiError> {
    caller.check_agent(Some(&agent_id))?;
    let request: ClaimRequest =
        if body.iter().all(u8::is_ascii_whitespace) { ClaimRequest::default() } else { parse_json(&body)? };
    inbox::claim(&state, &caller, request).await.map(Json)
}

/// Acknowledge one event, as `POST /api/v1/agents/{agent_id}/inbox/{event_id}/ack`.
#[utoipa::path(post, path = "/api/v1/agents/{agent_id}/inbox/{event_id}/ack", tag = "agents (seed 000 aliases)",
    params(("agent_id" = String, Path), ("event_id" = String, Path)), request_body = AckOneRequest,
    responses((status = 200, body = AckOutcome), (status = 409, body = inbox_api::Problem)))]
pub async fn ack(
    State(state): State<AppState>,
    caller: Caller,
    Path((agent_id, event_id)): Path<(String, String)>,
    SignedJson(request): SignedJson<AckOneRequest>,
) -> Result<Json<AckOutcome>, ApiError> {
    caller.check_agent(Some(&agent_id))?;
    inbox::acknowledge_one(&state, &caller, &event_id, request).await.map(Json)
}

/// Release one event, as `POST /api/v1/agents/{agent_id}/inbox/{event_id}/release`.
#[utoipa::path(post, path = "/api/v1/agents/{agent_id}/inbox/{event_id}/release", tag = "agents (seed 000 aliases)",
    params(("agent_id" = String, Path), ("event_id" = String, Path)), request_body = ReleaseOneRequest,
    responses((status = 200, body = ReleaseResponse), (status = 409, body = inbox_api::Problem)))]
pub async fn release(
    State(state): State<AppState>,
    caller: Caller,
    Path((agent_id, event_id)): Path<(String, String)>,
    SignedJson(request): SignedJson<ReleaseOneRequest>,
) -> Result<Json<ReleaseResponse>, ApiError> {
    caller.check_agent(Some(&agent_id))?;
    inbox::release_one(&state, &caller, &event_id, request).await.map(Json)
}
