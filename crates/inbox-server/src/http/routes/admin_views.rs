//! Operators' views of the tenant: sessions, callback registrations with their recent
//! deliveries (and re-enabling a disabled one), agents' signing keys, activity per minute, and
//! this node's quota refusals.
//! The rules live in `ops/admin_views.rs`.

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use inbox_api::{
    ActivityResponse, AdminAgentKeysResponse, AdminCallbackView, AdminCallbacksResponse,
    AdminSessionsResponse, QuotaRefusalsResponse,
};
use serde::Deserialize;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::http::extract::ApiQuery;
use crate::node::AppState;
use crate::ops::admin_views;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/admin/sessions", get(sessions))
        .route("/v1/admin/callbacks", get(callbacks))
        .route("/v1/admin/callbacks/{registration_id}/enable", post(enable_callback))
        .route("/v1/admin/agent-keys", get(agent_keys))
        .route("/v1/admin/activity", get(activity))
        .route("/v1/admin/quota-refusals", get(quota_refusals))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SessionsParams {
    /// Only this agent's sessions.
    #[param(value_type = Option<inbox_core::RecipientId>)]
    recipient_id: Option<String>,
    #[param(value_type = Option<inbox_core::limits::SessionsLimit>)]
    limit: Option<u32>,
}

/// The tenant's agent sessions, most recently heard from first: device, transport, when
/// connected, last heartbeat, and whether gone or superseded.
#[utoipa::path(get, path = "/v1/admin/sessions", tag = "admin", params(SessionsParams),
    responses((status = 200, body = AdminSessionsResponse)))]
pub async fn sessions(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<SessionsParams>,
) -> Result<Json<AdminSessionsResponse>, ApiError> {
    admin_views::sessions(&state, &caller, p.recipient_id.as_deref(), p.limit).await.map(Json)
}

/// Every callback registration of the tenant with its state, failures in a row, next
/// attempt, last error, whether and why it is disabled, and its last 10 deliveries.
#[utoipa::path(get, path = "/v1/admin/callbacks", tag = "admin",
    responses((status = 200, body = AdminCallbacksResponse)))]
pub async fn callbacks(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<AdminCallbacksResponse>, ApiError> {
    admin_views::callbacks(&state, &caller).await.map(Json)
}

/// Re-enables a callback registration disabled after failing past the bound: its failure
/// counts start over and its agent's current head is delivered at once. One that is not
/// disabled is answered unchanged.
#[utoipa::path(post, path = "/v1/admin/callbacks/{registration_id}/enable", tag = "admin",
    params(("registration_id" = inbox_core::RegistrationId, Path)),
    responses((status = 200, body = AdminCallbackView),
        (status = 404, description = "callback_registration_not_found", body = inbox_api::Problem)))]
pub async fn enable_callback(
    State(state): State<AppState>,
    caller: Caller,
    Path(registration_id): Path<String>,
) -> Result<Json<AdminCallbackView>, ApiError> {
    admin_views::enable_callback(&state, &caller, &registration_id).await.map(Json)
}

/// Every agent key of the tenant (live and retired): id, agent, algorithm, created, retired.
/// Never the key material.
#[utoipa::path(get, path = "/v1/admin/agent-keys", tag = "admin",
    responses((status = 200, body = AdminAgentKeysResponse)))]
pub async fn agent_keys(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<AdminAgentKeysResponse>, ApiError> {
    admin_views::agent_keys(&state, &caller).await.map(Json)
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ActivityParams {
    /// How far back, in minutes; default 60.
    #[param(value_type = Option<inbox_core::limits::ActivityMinutes>)]
    minutes: Option<u32>,
}

/// Events published and acknowledged per minute, and the depth at the end of each minute
/// (reconstructed from today's depth), oldest minute first.
#[utoipa::path(get, path = "/v1/admin/activity", tag = "admin", params(ActivityParams),
    responses((status = 200, body = ActivityResponse)))]
pub async fn activity(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<ActivityParams>,
) -> Result<Json<ActivityResponse>, ApiError> {
    admin_views::activity(&state, &caller, p.minutes).await.map(Json)
}

/// This node's refusals of the tenant's publishes by its quotas since it started (each node
/// counts its own), with the latest ones.
#[utoipa::path(get, path = "/v1/admin/quota-refusals", tag = "admin",
    responses((status = 200, body = QuotaRefusalsResponse)))]
pub async fn quota_refusals(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<QuotaRefusalsResponse>, ApiError> {
    admin_views::quota_refusals(&state, &caller).map(Json)
}
