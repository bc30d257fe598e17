//! Operators' endpoints over parked events and backlogs, within the admin token's own tenant:
//! list, requeue and purge parked (dead-lettered and quarantined) events, quarantine events
//! and release them, and see each inbox's backlog. The rules live in `ops/admin.rs`.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use inbox_api::{
    InboxStatsResponse, ItemResults, ParkedEventsRequest, ParkedEventsResponse, QuarantineRequest,
};
use serde::Deserialize;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::http::extract::{ApiJson, ApiQuery};
use crate::node::AppState;
use crate::ops::admin::{self, ParkedFilter};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/admin/parked", get(list_parked))
        .route("/v1/admin/parked/requeue", post(requeue))
        .route("/v1/admin/parked/purge", post(purge))
        .route("/v1/admin/quarantine", post(quarantine))
        .route("/v1/admin/quarantine/release", post(release_quarantined))
        .route("/v1/admin/inboxes", get(inboxes))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ParkedParams {
    #[param(value_type = Option<inbox_core::RecipientId>)]
    recipient_id: Option<String>,
    /// `dead_letter` or `quarantined`; both when absent.
    state: Option<String>,
    #[param(value_type = Option<inbox_core::limits::BatchLimit>)]
    limit: Option<u32>,
}

/// Parked events of the tenant, oldest first, with their reasons and when they were parked.
#[utoipa::path(get, path = "/v1/admin/parked", tag = "admin", params(ParkedParams), responses((status = 200, body = ParkedEventsResponse)))]
pub async fn list_parked(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ParkedParams>,
) -> Result<Json<ParkedEventsResponse>, ApiError> {
    let filter = ParkedFilter { recipient_id: p.recipient_id, state: p.state, limit: p.limit };
    admin::list_parked(&state, &caller, filter).await.map(Json)
}

/// Sends parked events back to the inbox with a fresh budget of attempts.
#[utoipa::path(post, path = "/v1/admin/parked/requeue", tag = "admin", request_body = ParkedEventsRequest, responses((status = 200, body = ItemResults)))]
pub async fn requeue(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<ParkedEventsRequest>,
) -> Result<Json<ItemResults>, ApiError> {
    admin::requeue(&state, &caller, &request).await.map(Json)
}

/// Deletes parked events for good.
#[utoipa::path(post, path = "/v1/admin/parked/purge", tag = "admin", request_body = ParkedEventsRequest, responses((status = 200, body = ItemResults)))]
pub async fn purge(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<ParkedEventsRequest>,
) -> Result<Json<ItemResults>, ApiError> {
    admin::purge(&state, &caller, &request).await.map(Json)
}

/// Sets available or claimed events aside for a person: never delivered or retried until
/// released. A claimed event's lease ends (its holder's acknowledge is refused). An event
/// already quarantined is answered ok, unchanged; a finished one is refused (`event_terminal`).
#[utoipa::path(post, path = "/v1/admin/quarantine", tag = "admin", request_body = QuarantineRequest, responses((status = 200, body = ItemResults)))]
pub async fn quarantine(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<QuarantineRequest>,
) -> Result<Json<ItemResults>, ApiError> {
    admin::quarantine(&state, &caller, &request).await.map(Json)
}

/// Releases quarantined events back to the inbox, claimable at once with a fresh budget of
/// attempts. An event already released (available) is answered ok, unchanged; any other is
/// refused (`not_quarantined`).
#[utoipa::path(post, path = "/v1/admin/quarantine/release", tag = "admin", request_body = ParkedEventsRequest, responses((status = 200, body = ItemResults)))]
pub async fn release_quarantined(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<ParkedEventsRequest>,
) -> Result<Json<ItemResults>, ApiError> {
    admin::release_quarantined(&state, &caller, &request).await.map(Json)
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct InboxesParams {
    #[param(value_type = Option<inbox_core::limits::BatchLimit>)]
    limit: Option<u32>,
}

/// Each inbox's depth, claimed, retry-scheduled and parked counts, oldest unacknowledged age,
/// online sessions and when its agent was last heard from.
#[utoipa::path(get, path = "/v1/admin/inboxes", tag = "admin", params(InboxesParams), responses((status = 200, body = InboxStatsResponse)))]
pub async fn inboxes(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<InboxesParams>,
) -> Result<Json<InboxStatsResponse>, ApiError> {
    admin::inboxes(&state, &caller, p.limit).await.map(Json)
}
