//! Seed 000's resource-style routes, thin aliases onto the handlers of `inbox.rs`. The
//! `{agent_id}` in the path must be the token's own agent.

use axum::extract::{Path, Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use inbox_api::{
    AckOneRequest, AckOutcome, AgentInboxPage, ClaimRequest, ClaimResponse, ReleaseOneRequest,
    ReleaseResponse,
};
use inbox_core::InboxSeq;
use inbox_store::{AckItem, PollQuery, Release};
use serde::Deserialize;

use crate::AppState;
use crate::auth::Caller;
use crate::convert::{self, envelope};
use crate::error::ApiError;
use crate::http::extract::parse_json;
use crate::http::routes::inbox::{
    POLL_LIMIT_DEFAULT, ack_outcome, acknowledge_items, claim_for, count_fetch, poll_page, release_event,
};
use crate::http::signed::{self, SignedBody, SignedJson};

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
    caller.require("inbox.poll")?;
    caller.check_agent(Some(&agent_id))?;
    let Query(query) = query.map_err(|e| crate::http::extract::query_problem(&e))?;
    let query = PollQuery {
        inbox: caller.inbox(),
        after_seq: InboxSeq::new(query.after_cursor)
            .map_err(|e| ApiError::invalid_field("after_cursor", e.problem))?,
        limit: query.limit.unwrap_or(POLL_LIMIT_DEFAULT),
        claimable_only: false,
    };
    let page = poll_page(&state, &caller, &query, None).await?;
    count_fetch(&state, &caller, "poll");
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
    SignedBody { body, nonce }: SignedBody,
) -> Result<Json<ClaimResponse>, ApiError> {
    signatures::spend(&state, nonce).await?;
    caller.check_agent(Some(&agent_id))?;
    let request: ClaimRequest =
        if body.iter().all(u8::is_ascii_whitespace) { ClaimRequest::default() } else { parse_json(&body)? };
    claim_for(&state, &caller, request).await.map(Json)
}

/// Acknowledge one event, as `POST /api/v1/agents/{agent_id}/inbox/{event_id}/ack`.
#[utoipa::path(post, path = "/api/v1/agents/{agent_id}/inbox/{event_id}/ack", tag = "agents (seed 000 aliases)",
    params(("agent_id" = String, Path), ("event_id" = String, Path)), request_body = AckOneRequest,
    responses((status = 200, body = AckOutcome), (status = 409, body = inbox_api::Problem)))]
pub async fn ack(
    State(state): State<AppState>,
    caller: Caller,
    Path((agent_id, event_id)): Path<(String, String)>,
    SignedJson(request, nonce): SignedJson<AckOneRequest>,
) -> Result<Json<AckOutcome>, ApiError> {
    signatures::spend(&state, nonce).await?;
    caller.check_agent(Some(&agent_id))?;
    let item = AckItem {
        event_id: convert::event_id("event_id", &event_id)?,
        lease_token: convert::lease_token("lease_token", &request.lease_token)?,
        result: convert::ack_result("result", request.result.as_deref())?,
    };
    let receipt = acknowledge_items(&state, &caller, vec![item]).await?.remove(0)?;
    Ok(Json(ack_outcome(Ok(receipt))))
}

/// Release one event, as `POST /api/v1/agents/{agent_id}/inbox/{event_id}/release`.
#[utoipa::path(post, path = "/api/v1/agents/{agent_id}/inbox/{event_id}/release", tag = "agents (seed 000 aliases)",
    params(("agent_id" = String, Path), ("event_id" = String, Path)), request_body = ReleaseOneRequest,
    responses((status = 200, body = ReleaseResponse), (status = 409, body = inbox_api::Problem)))]
pub async fn release(
    State(state): State<AppState>,
    caller: Caller,
    Path((agent_id, event_id)): Path<(String, String)>,
    SignedJson(request, nonce): SignedJson<ReleaseOneRequest>,
) -> Result<Json<ReleaseResponse>, ApiError> {
    signatures::spend(&state, nonce).await?;
    caller.check_agent(Some(&agent_id))?;
    let release = Release {
        inbox: caller.inbox(),
        event_id: convert::event_id("event_id", &event_id)?,
        lease_token: convert::lease_token("lease_token", &request.lease_token)?,
        retry_after_ms: convert::seconds_to_ms("retry_after_seconds", request.retry_after_seconds)?,
        reason: request.reason,
    };
    release_event(&state, &caller, release).await.map(Json)
}
