//! Webhook callback registrations (seed 001's `/v1/callback-registrations`, seed 000's
//! `POST /api/v1/agents/{agent_id}/callbacks`): register, list, read, delete, verify (send
//! the challenge), rotate the shared secret, and read the delivery log.
//!
//! A URL is checked when registered (`https` only, every resolved address outside the
//! refused ranges) and again on every delivery (`ops/callbacks.rs`). The rules live in
//! `ops/callbacks/registrations.rs`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use inbox_api::{
    CallbackAttemptsResponse, CallbackRegistrationRequest, CallbackRegistrationResponse,
    CallbackRegistrationsResponse, RotateCallbackSecretRequest,
};

use crate::caller::Caller;
use crate::error::ApiError;
use crate::http::extract::ApiJson;
use crate::node::AppState;
use crate::ops::callbacks::registrations;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/callback-registrations", post(register).get(list))
        .route("/v1/callback-registrations/{registration_id}", get(read).delete(remove))
        .route("/v1/callback-registrations/{registration_id}/verify", post(verify))
        .route("/v1/callback-registrations/{registration_id}/rotate", post(rotate))
        .route("/v1/callback-registrations/{registration_id}/deliveries", get(deliveries))
        .route("/api/v1/agents/{agent_id}/callbacks", post(register_for_agent))
}

/// Registers a callback. With a `secret`, the challenge is sent before the answer; without,
/// the generated secret is returned and `POST .../verify` sends the challenge.
#[utoipa::path(post, path = "/v1/callback-registrations", tag = "callbacks", request_body = CallbackRegistrationRequest,
    responses((status = 201, body = CallbackRegistrationResponse),
        (status = 400, description = "callback_url_refused (SSRF rules) or callback_host_unresolvable", body = inbox_api::Problem),
        (status = 409, description = "callback_limit_reached", body = inbox_api::Problem)))]
pub async fn register(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<CallbackRegistrationRequest>,
) -> Result<(StatusCode, Json<CallbackRegistrationResponse>), ApiError> {
    let registered = registrations::register(&state, &caller, request).await?;
    Ok((StatusCode::CREATED, Json(registered)))
}

/// Seed 000's alias of registration for one agent.
#[utoipa::path(post, path = "/api/v1/agents/{agent_id}/callbacks", tag = "agents (seed 000 aliases)",
    params(("agent_id" = inbox_core::RecipientId, Path)), request_body = CallbackRegistrationRequest,
    responses((status = 201, body = CallbackRegistrationResponse), (status = 400, body = inbox_api::Problem)))]
pub async fn register_for_agent(
    State(state): State<AppState>,
    caller: Caller,
    Path(agent_id): Path<String>,
    ApiJson(request): ApiJson<CallbackRegistrationRequest>,
) -> Result<(StatusCode, Json<CallbackRegistrationResponse>), ApiError> {
    let registered = registrations::register_for_agent(&state, &caller, &agent_id, request).await?;
    Ok((StatusCode::CREATED, Json(registered)))
}

/// The caller's registrations (an operator sees the tenant's).
#[utoipa::path(get, path = "/v1/callback-registrations", tag = "callbacks", responses((status = 200, body = CallbackRegistrationsResponse)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<CallbackRegistrationsResponse>, ApiError> {
    registrations::list(&state, &caller).await.map(Json)
}

#[utoipa::path(get, path = "/v1/callback-registrations/{registration_id}", tag = "callbacks",
    params(("registration_id" = inbox_core::RegistrationId, Path)),
    responses((status = 200, body = CallbackRegistrationResponse), (status = 404, body = inbox_api::Problem)))]
pub async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path(registration_id): Path<String>,
) -> Result<Json<CallbackRegistrationResponse>, ApiError> {
    registrations::read(&state, &caller, &registration_id).await.map(Json)
}

#[utoipa::path(delete, path = "/v1/callback-registrations/{registration_id}", tag = "callbacks",
    params(("registration_id" = inbox_core::RegistrationId, Path)),
    responses((status = 204, description = "deleted"), (status = 404, body = inbox_api::Problem)))]
pub async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    Path(registration_id): Path<String>,
) -> Result<StatusCode, ApiError> {
    registrations::remove(&state, &caller, &registration_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Sends a (new) challenge now; the answer says whether the registration is active.
#[utoipa::path(post, path = "/v1/callback-registrations/{registration_id}/verify", tag = "callbacks",
    params(("registration_id" = inbox_core::RegistrationId, Path)),
    responses((status = 200, body = CallbackRegistrationResponse), (status = 404, body = inbox_api::Problem)))]
pub async fn verify(
    State(state): State<AppState>,
    caller: Caller,
    Path(registration_id): Path<String>,
) -> Result<Json<CallbackRegistrationResponse>, ApiError> {
    registrations::verify(&state, &caller, &registration_id).await.map(Json)
}

/// Replaces the shared secret; the previous one keeps signing beside it for the overlap.
#[utoipa::path(post, path = "/v1/callback-registrations/{registration_id}/rotate", tag = "callbacks",
    params(("registration_id" = inbox_core::RegistrationId, Path)), request_body = RotateCallbackSecretRequest,
    responses((status = 200, body = CallbackRegistrationResponse), (status = 404, body = inbox_api::Problem)))]
pub async fn rotate(
    State(state): State<AppState>,
    caller: Caller,
    Path(registration_id): Path<String>,
    ApiJson(request): ApiJson<RotateCallbackSecretRequest>,
) -> Result<Json<CallbackRegistrationResponse>, ApiError> {
    registrations::rotate(&state, &caller, &registration_id, request).await.map(Json)
}

/// The newest delivery attempts of a registration, newest first.
#[utoipa::path(get, path = "/v1/callback-registrations/{registration_id}/deliveries", tag = "callbacks",
    params(("registration_id" = inbox_core::RegistrationId, Path)),
    responses((status = 200, body = CallbackAttemptsResponse), (status = 404, body = inbox_api::Problem)))]
pub async fn deliveries(
    State(state): State<AppState>,
    caller: Caller,
    Path(registration_id): Path<String>,
) -> Result<Json<CallbackAttemptsResponse>, ApiError> {
    registrations::deliveries(&state, &caller, &registration_id).await.map(Json)
}
