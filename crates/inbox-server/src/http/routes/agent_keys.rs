//! An agent's request-signing keys: `POST /v1/agent-keys` registers an ed25519 public key or
//! issues an hmac-sha256 shared secret (returned once); `GET` lists the live ones; `DELETE
//! /v1/agent-keys/{key_id}` retires one. The rules (who may, when a signature is needed) live
//! in `ops/signatures/agent_keys.rs`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, post};
use axum::{Json, Router};
use inbox_api::{AgentKeyRequest, AgentKeyResponse, AgentKeysResponse};
use serde::Deserialize;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::http::extract::ApiQuery;
use crate::http::signed::{OptionallySignedBody, OptionallySignedJson};
use crate::node::AppState;
use crate::ops::signatures::agent_keys;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/agent-keys", post(register).get(list))
        .route("/v1/agent-keys/{key_id}", delete(retire))
}

/// Registers a signing key for the calling agent.
#[utoipa::path(post, path = "/v1/agent-keys", tag = "trust", request_body = AgentKeyRequest,
    responses((status = 201, body = AgentKeyResponse),
        (status = 401, description = "signature_required: the agent already has keys; sign with one", body = inbox_api::Problem),
        (status = 409, description = "key_exists or key_limit_reached", body = inbox_api::Problem)))]
pub async fn register(
    State(state): State<AppState>,
    caller: Caller,
    request: OptionallySignedJson<AgentKeyRequest>,
) -> Result<(StatusCode, Json<AgentKeyResponse>), ApiError> {
    let signed = request.signature.is_some();
    let key = agent_keys::register(&state, &caller, request.value, signed).await?;
    Ok((StatusCode::CREATED, Json(key)))
}

/// The calling agent's live keys (never a secret), and whether its tenant requires signatures.
#[utoipa::path(get, path = "/v1/agent-keys", tag = "trust", responses((status = 200, body = AgentKeysResponse)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<AgentKeysResponse>, ApiError> {
    agent_keys::list(&state, &caller).await.map(Json)
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RetireParams {
    /// Seconds the key keeps verifying (a rotation overlap); 0 (the default) retires it now.
    #[param(value_type = Option<inbox_core::limits::KeyRetireAfterSeconds>)]
    after_seconds: Option<u64>,
}

/// Retires a key: the agent's own (signed with one of its keys), or any key of the tenant
/// with an admin token.
#[utoipa::path(delete, path = "/v1/agent-keys/{key_id}", tag = "trust", params(("key_id" = inbox_core::KeyId, Path), RetireParams),
    responses((status = 204, description = "retired"), (status = 404, description = "unknown_signing_key", body = inbox_api::Problem)))]
pub async fn retire(
    State(state): State<AppState>,
    caller: Caller,
    Path(key_id): Path<String>,
    ApiQuery(query): ApiQuery<RetireParams>,
    request: OptionallySignedBody,
) -> Result<StatusCode, ApiError> {
    let signed = request.signature.is_some();
    agent_keys::retire(&state, &caller, &key_id, query.after_seconds, signed).await?;
    Ok(StatusCode::NO_CONTENT)
}
