//! An agent's request-signing keys: `POST /v1/agent-keys` registers an ed25519 public key or
//! issues an hmac-sha256 shared secret (returned once); `GET` lists the live ones; `DELETE
//! /v1/agent-keys/{key_id}` retires one.
//!
//! The first key is registered with the access token alone. Once an agent has a key, adding
//! or retiring one must be signed with one of its keys, so a stolen access token cannot swap
//! the agent's keys for the thief's. An operator (admin token) can retire any key of the
//! tenant, for an agent that lost its keys.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{delete, post};
use axum::{Json, Router};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use inbox_api::time::format_utc;
use inbox_api::{AgentKeyRequest, AgentKeyResponse, AgentKeysResponse, ProblemCode, Scope};
use inbox_store::{AgentKey, KeyId, NewAgentKey, SecretBytes};
use inbox_trust::Algorithm;
use inbox_trust::message_signatures::VerifyingKey;
use serde::Deserialize;

use crate::AppState;
use crate::auth::{Caller, CallerKind};
use crate::convert::decode_base64;
use crate::error::ApiError;
use crate::http::signed::{OptionallySignedBody, OptionallySignedJson};
use crate::ops::signatures;

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
    require_agent(&caller)?;
    let signed = request.signature.is_some();
    let request = request.value;
    let algorithm = Algorithm::from_name(&request.algorithm).ok_or_else(|| {
        ApiError::invalid_field(
            "algorithm",
            format!("is {:?}; use ed25519 or hmac-sha256", request.algorithm),
        )
    })?;
    let (material, secret) = match algorithm {
        Algorithm::Ed25519 => {
            let text = request
                .public_key
                .as_deref()
                .ok_or_else(|| ApiError::invalid_field("public_key", "is required for ed25519"))?;
            let bytes = decode_base64("public_key", text)?;
            let key = match <[u8; 32]>::try_from(bytes.as_slice()) {
                Ok(raw) => VerifyingKey::ed25519_from_bytes(&raw),
                Err(_) => VerifyingKey::ed25519_from_spki_der(&bytes),
            }
            .map_err(|e| {
                ApiError::invalid_field("public_key", format!("is not an ed25519 public key: {e}"))
            })?;
            (SecretBytes::new(key.ed25519_public_bytes().map(Vec::from).unwrap_or_default()), None)
        }
        Algorithm::HmacSha256 => {
            if request.public_key.is_some() {
                return Err(ApiError::invalid_field(
                    "public_key",
                    "must be absent for hmac-sha256; the service generates the shared secret",
                ));
            }
            let secret = SecretBytes::new(inbox_store::random_bytes::<32>().to_vec());
            let text = URL_SAFE_NO_PAD.encode(secret.as_slice());
            (secret, Some(text))
        }
    };
    let key_id = match request.key_id {
        Some(key_id) => KeyId::new(key_id).map_err(|e| ApiError::invalid_field("key_id", e.problem))?,
        None => KeyId::new(format!("ak_{}", hex::encode(inbox_store::random_bytes::<8>())))
            .map_err(|e| ApiError::internal(e.to_string()))?,
    };
    let new = NewAgentKey {
        tenant_id: caller.tenant_id.clone(),
        key_id,
        agent_id: caller.subject.clone(),
        algorithm,
        key_material: material,
        signed,
    };
    let stored = signatures::register_agent_key(&state, &new).await.map_err(|err| match err {
        inbox_store::StoreError::SignatureRequired { .. } => signature_required_for_keys(),
        other => ApiError::from(other),
    })?;
    let mut view = key_view(&stored);
    view.secret = secret;
    Ok((StatusCode::CREATED, Json(view)))
}

/// The calling agent's live keys (never a secret), and whether its tenant requires signatures.
#[utoipa::path(get, path = "/v1/agent-keys", tag = "trust", responses((status = 200, body = AgentKeysResponse)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<AgentKeysResponse>, ApiError> {
    require_agent(&caller)?;
    let keys = state.store.signatures().agent_keys(&caller.tenant_id, &caller.subject).await?;
    let signatures_required =
        state.tenant_policies.get(&state.store, &caller.tenant_id).await?.signatures_required;
    Ok(Json(AgentKeysResponse { keys: keys.iter().map(key_view).collect(), signatures_required }))
}

/// The longest a retired key may keep verifying (`after_seconds`): a week.
pub(crate) const RETIRE_AFTER_SECONDS_MAX: u64 = 7 * 86_400;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RetireParams {
    /// Seconds the key keeps verifying (a rotation overlap); 0 (the default) retires it now.
    after_seconds: Option<u64>,
}

/// Retires a key: the agent's own (signed with one of its keys), or any key of the tenant
/// with an admin token.
#[utoipa::path(delete, path = "/v1/agent-keys/{key_id}", tag = "trust", params(("key_id" = String, Path), RetireParams),
    responses((status = 204, description = "retired"), (status = 404, description = "unknown_signing_key", body = inbox_api::Problem)))]
pub async fn retire(
    State(state): State<AppState>,
    caller: Caller,
    Path(key_id): Path<String>,
    query: Result<Query<RetireParams>, axum::extract::rejection::QueryRejection>,
    request: OptionallySignedBody,
) -> Result<StatusCode, ApiError> {
    let Query(query) = query.map_err(|e| crate::http::extract::query_problem(&e))?;
    let after_seconds = query.after_seconds.unwrap_or(0);
    if after_seconds > RETIRE_AFTER_SECONDS_MAX {
        return Err(ApiError::invalid_field(
            "after_seconds",
            format!("must be at most {RETIRE_AFTER_SECONDS_MAX} (7 days)"),
        ));
    }
    let key_id = KeyId::new(key_id).map_err(|e| ApiError::invalid_field("key_id", e.problem))?;
    let operator = caller.kind == CallerKind::Admin && caller.has(Scope::Admin);
    let owner = if operator {
        None
    } else {
        require_agent(&caller)?;
        if request.signature.is_none() {
            return Err(signature_required_for_keys());
        }
        Some(&caller.subject)
    };
    let retired = signatures::retire_agent_key(
        &state,
        &caller.tenant_id,
        owner,
        &key_id,
        after_seconds.saturating_mul(1000),
    )
    .await?;
    if !retired {
        return Err(unknown_key(&key_id));
    }
    Ok(StatusCode::NO_CONTENT)
}

fn require_agent(caller: &Caller) -> Result<(), ApiError> {
    if caller.kind == CallerKind::Agent {
        return Ok(());
    }
    Err(ApiError::forbidden(ProblemCode::KindNotAllowed, "signing keys belong to agents; use an agent token"))
}

fn signature_required_for_keys() -> ApiError {
    ApiError::unauthorized(
        ProblemCode::SignatureRequired,
        "this agent already has signing keys; sign this request with one of them (or ask an operator to \
         retire them)",
    )
    .with("reason", "missing")
}

fn unknown_key(key_id: &KeyId) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ProblemCode::UnknownSigningKey,
        format!(
            "no live signing key {:?} of yours exists; list them with GET /v1/agent-keys",
            key_id.as_str()
        ),
    )
}

fn key_view(key: &AgentKey) -> AgentKeyResponse {
    AgentKeyResponse {
        key_id: key.key_id.to_string(),
        agent_id: key.agent_id.to_string(),
        algorithm: key.algorithm.name().to_owned(),
        created_at_utc: format_utc(key.created_at.get()),
        retires_at_utc: key.retired_at.map(|t| format_utc(t.get())),
        public_key: (key.algorithm == Algorithm::Ed25519).then(|| URL_SAFE_NO_PAD.encode(&key.key_material)),
        secret: None,
    }
}
