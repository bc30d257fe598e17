//! Seed 001's inbox contract over HTTP: poll after cursor (with long polling), head (with
//! ETag), claim, acknowledge, release, heartbeat, and the resync route that follows a cursor
//! reset. Each handler extracts and makes one call into [`crate::ops::inbox`].

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use inbox_api::{
    AcknowledgeRequest, AcknowledgeResponse, ClaimRequest, ClaimResponse, HeadResponse, HeartbeatRequest,
    HeartbeatResponse, PollRequest, PollResponse, ReleaseRequest, ReleaseResponse, ResyncResponse,
};
use serde::Deserialize;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::http::extract::{ApiJson, ApiQuery};
use crate::http::signed::SignedJson;
use crate::node::AppState;
use crate::ops::inbox;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/inbox/poll-after-cursor", post(poll))
        .route("/v1/inbox/head", get(head))
        .route("/v1/inbox/claim", post(claim))
        .route("/v1/inbox/acknowledge", post(acknowledge))
        .route("/v1/inbox/release", post(release))
        .route("/v1/inbox/heartbeat", post(heartbeat))
        .route("/v1/inbox/resync", get(resync))
}

/// Events after the cursor, in sequence order.
#[utoipa::path(post, path = "/v1/inbox/poll-after-cursor", tag = "inbox", request_body = PollRequest,
    responses((status = 200, body = PollResponse), (status = 410, description = "cursor_reset_required", body = inbox_api::Problem)))]
pub async fn poll(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<PollRequest>,
) -> Result<Json<PollResponse>, ApiError> {
    inbox::poll(&state, &caller, request).await.map(Json)
}

/// The recipient's head. Answers `304 Not Modified` while the head matches `If-None-Match`.
#[utoipa::path(get, path = "/v1/inbox/head", tag = "inbox",
    responses((status = 200, body = HeadResponse), (status = 304, description = "the head has not moved")))]
pub async fn head(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let if_none_match = headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok());
    let head = inbox::head(&state, &caller, if_none_match).await?;
    let etag = HeaderValue::from_str(&head.etag).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(match head.body {
        None => (StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response(),
        Some(body) => (
            [(header::ETAG, etag), (header::CACHE_CONTROL, HeaderValue::from_static("no-cache"))],
            Json(body),
        )
            .into_response(),
    })
}

/// Claims the named events, or the next `limit` claimable ones.
#[utoipa::path(post, path = "/v1/inbox/claim", tag = "inbox", request_body = ClaimRequest,
    responses((status = 200, body = ClaimResponse),
        (status = 409, description = "session_superseded or session_required: the tenant allows one active session per agent (single-active-session policy), and session_id does not name the agent's newest session", body = inbox_api::Problem)))]
pub async fn claim(
    State(state): State<AppState>,
    caller: Caller,
    SignedJson(request): SignedJson<ClaimRequest>,
) -> Result<Json<ClaimResponse>, ApiError> {
    inbox::claim(&state, &caller, request).await.map(Json)
}

/// Acknowledges events; repeats with the same token succeed.
///
/// Entries with `follow_ups` are hand-offs: under the tenant's quotas their deliveries count (less the events they
/// acknowledge), and a request that would pass a quota is refused whole before any of it
/// commits, its events left claimed under their leases.
#[utoipa::path(post, path = "/v1/inbox/acknowledge", tag = "inbox", request_body = AcknowledgeRequest,
    responses((status = 200, body = AcknowledgeResponse),
        (status = 429, description = "tenant_pending_limit, rate_limited or auth_throttled: the hand-offs' follow-ups would pass the tenant's pending-events quota (or a rate limit); nothing of the request committed and its events stay claimed; retry after Retry-After seconds", body = inbox_api::Problem),
        (status = 507, description = "tenant_storage_limit: the hand-offs' follow-ups would pass the tenant's stored-bytes quota; nothing of the request committed and its events stay claimed; retry after Retry-After seconds", body = inbox_api::Problem)))]
pub async fn acknowledge(
    State(state): State<AppState>,
    caller: Caller,
    SignedJson(request): SignedJson<AcknowledgeRequest>,
) -> Result<Json<AcknowledgeResponse>, ApiError> {
    inbox::acknowledge(&state, &caller, request).await.map(Json)
}

/// Gives a claimed event back, to be retried after `retry_after_seconds`.
#[utoipa::path(post, path = "/v1/inbox/release", tag = "inbox", request_body = ReleaseRequest,
    responses((status = 200, body = ReleaseResponse), (status = 409, description = "lease_mismatch or lease_expired", body = inbox_api::Problem)))]
pub async fn release(
    State(state): State<AppState>,
    caller: Caller,
    SignedJson(request): SignedJson<ReleaseRequest>,
) -> Result<Json<ReleaseResponse>, ApiError> {
    inbox::release(&state, &caller, request).await.map(Json)
}

/// Extends leases of events still being worked on.
#[utoipa::path(post, path = "/v1/inbox/heartbeat", tag = "inbox", request_body = HeartbeatRequest, responses((status = 200, body = HeartbeatResponse)))]
pub async fn heartbeat(
    State(state): State<AppState>,
    caller: Caller,
    SignedJson(request): SignedJson<HeartbeatRequest>,
) -> Result<Json<HeartbeatResponse>, ApiError> {
    inbox::heartbeat(&state, &caller, request).await.map(Json)
}

/// Query parameters of `GET /v1/inbox/resync`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ResyncQuery {
    /// Open events after this sequence: the last `inbox_seq` of the previous page (default 0).
    #[param(value_type = inbox_core::InboxSeq)]
    #[serde(default)]
    after_seq: u64,
    /// Open events per page (default: the most a page holds).
    #[param(value_type = Option<inbox_core::limits::BatchLimit>)]
    limit: Option<u32>,
}

/// After `cursor_reset_required`: the head, the oldest retained sequence and the events still
/// open, page by page, so the agent can rebuild from its domain's state and continue polling.
#[utoipa::path(get, path = "/v1/inbox/resync", tag = "inbox", params(ResyncQuery), responses((status = 200, body = ResyncResponse)))]
pub async fn resync(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ResyncQuery>,
) -> Result<Json<ResyncResponse>, ApiError> {
    inbox::resync(&state, &caller, query.after_seq, query.limit).await.map(Json)
}
