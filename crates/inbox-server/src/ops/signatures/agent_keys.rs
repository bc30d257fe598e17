//! An agent's request-signing keys: register an ed25519 public key or issue an hmac-sha256
//! shared secret (returned once), list the live ones, retire one. The route file
//! (`http/routes/agent_keys.rs`) extracts the request; the checks, the key material and the
//! secret are made here.
//!
//! The first key is registered with the access token alone. Once an agent has a key, adding
//! or retiring one must be signed with one of its keys (the store refuses an unsigned second
//! key under the tenant's lock), so a stolen access token cannot swap the agent's keys for the
//! thief's. An operator (admin token) can retire any key of the tenant, for an agent that lost
//! its keys.

use axum::http::StatusCode;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use inbox_api::time::format_utc;
use inbox_api::{AgentKeyRequest, AgentKeyResponse, AgentKeysResponse, ProblemCode};
use inbox_core::{RecipientId, TenantId};
use inbox_store::{AgentKey, KeyId, NewAgentKey, SecretBytes, StoreError};
use inbox_trust::Algorithm;
use inbox_trust::message_signatures::VerifyingKey;

use inbox_core::limits::KeyRetireAfterSeconds;

use crate::caller::{Caller, Reach};
use crate::convert::decode_base64;
use crate::error::ApiError;
use crate::node::AppState;

/// Registers a signing key for the calling agent; `signed` says whether the request carried a
/// verified signature (needed once the agent has a key). An hmac-sha256 secret is generated
/// here and answered this once.
pub async fn register(
    state: &AppState,
    caller: &Caller,
    request: AgentKeyRequest,
    signed: bool,
) -> Result<AgentKeyResponse, ApiError> {
    caller.require_agent()?;
    let algorithm = crate::convert::algorithm(request.algorithm);
    let (key_material, secret) = key_material(algorithm, request.public_key.as_deref())?;
    let key_id = match request.key_id {
        Some(key_id) => key_id,
        None => KeyId::new(format!("ak_{}", hex::encode(inbox_store::random_bytes::<8>())))
            .map_err(|e| ApiError::internal(e.to_string()))?,
    };
    let new = NewAgentKey {
        tenant_id: caller.tenant_id.clone(),
        key_id,
        agent_id: caller.subject.clone(),
        algorithm,
        key_material,
        signed,
    };
    let stored = state.store.signatures().insert_agent_key(&new).await.map_err(|err| match err {
        StoreError::SignatureRequired { .. } => signature_required_for_keys(),
        other => ApiError::from(other),
    })?;
    // Drops any cached "no such key" answer for its id, so this node verifies with it at once
    // (other nodes' negative entries expire on their own).
    state.key_cache.forget_key(&new.tenant_id, &new.key_id);
    let mut view = key_view(&stored);
    view.secret = secret;
    Ok(view)
}

/// The key material to store and, for hmac-sha256, the generated secret to answer once.
fn key_material(
    algorithm: Algorithm,
    public_key: Option<&str>,
) -> Result<(SecretBytes, Option<String>), ApiError> {
    match algorithm {
        Algorithm::Ed25519 => {
            let text =
                public_key.ok_or_else(|| ApiError::invalid_field("public_key", "is required for ed25519"))?;
            let bytes = decode_base64("public_key", text)?;
            let key = match <[u8; 32]>::try_from(bytes.as_slice()) {
                Ok(raw) => VerifyingKey::ed25519_from_bytes(&raw),
                Err(_) => VerifyingKey::ed25519_from_spki_der(&bytes),
            }
            .map_err(|e| {
                ApiError::invalid_field("public_key", format!("is not an ed25519 public key: {e}"))
            })?;
            Ok((SecretBytes::new(key.ed25519_public_bytes().map(Vec::from).unwrap_or_default()), None))
        }
        Algorithm::HmacSha256 => {
            if public_key.is_some() {
                return Err(ApiError::invalid_field(
                    "public_key",
                    "must be absent for hmac-sha256; the service generates the shared secret",
                ));
            }
            let secret = SecretBytes::new(inbox_store::random_bytes::<32>().to_vec());
            let text = URL_SAFE_NO_PAD.encode(secret.as_slice());
            Ok((secret, Some(text)))
        }
    }
}

/// The calling agent's live keys (never a secret), and whether its tenant requires signatures.
pub async fn list(state: &AppState, caller: &Caller) -> Result<AgentKeysResponse, ApiError> {
    caller.require_agent()?;
    let keys = state.store.signatures().agent_keys(&caller.tenant_id, &caller.subject).await?;
    let signatures_required =
        state.tenant_policies.get(&state.store, &caller.tenant_id).await?.signatures_required;
    Ok(AgentKeysResponse { keys: keys.iter().map(key_view).collect(), signatures_required })
}

/// Retires a key `after_seconds` from now (0, the default: at once): the agent's own, on a
/// signed request (`signed`), or any key of the tenant for an operator.
pub async fn retire(
    state: &AppState,
    caller: &Caller,
    key_id: &str,
    after_seconds: Option<u64>,
    signed: bool,
) -> Result<(), ApiError> {
    let owner = match caller.operator_or(Caller::require_agent)? {
        Reach::Tenant => None,
        Reach::Own if !signed => return Err(signature_required_for_keys()),
        Reach::Own => Some(&caller.subject),
    };
    // A query value, read as text by the route and checked here, after who may call.
    let after_seconds = after_seconds
        .map(KeyRetireAfterSeconds::new)
        .transpose()
        .map_err(|e| ApiError::invalid_field("after_seconds", e))?
        .unwrap_or_default()
        .get();
    let key_id = KeyId::new(key_id).map_err(|e| ApiError::invalid_field("key_id", e.problem))?;
    let retired =
        retire_key(state, &caller.tenant_id, owner, &key_id, after_seconds.saturating_mul(1000)).await?;
    if !retired {
        return Err(unknown_key(&key_id));
    }
    Ok(())
}

/// Retires a key `after_ms` from now. `owner` is the agent whose key it must be; `None` (an
/// operator) retires any key of the tenant. Answers whether such a live key existed.
async fn retire_key(
    state: &AppState,
    tenant_id: &TenantId,
    owner: Option<&RecipientId>,
    key_id: &KeyId,
    after_ms: u64,
) -> Result<bool, StoreError> {
    let owner = match owner {
        Some(agent) => agent.clone(),
        None => match state.store.signatures().agent_key(tenant_id, key_id).await? {
            Some(key) => key.agent_id,
            None => return Ok(false),
        },
    };
    let retired = state.store.signatures().retire_agent_key(tenant_id, &owner, key_id, after_ms).await?;
    state.key_cache.forget_key(tenant_id, key_id);
    Ok(retired)
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
        key_id: key.key_id.clone(),
        agent_id: key.agent_id.clone(),
        algorithm: key.algorithm.name().to_owned(),
        created_at_utc: format_utc(key.created_at.get()),
        retires_at_utc: key.retired_at.map(|t| format_utc(t.get())),
        public_key: (key.algorithm == Algorithm::Ed25519).then(|| URL_SAFE_NO_PAD.encode(&key.key_material)),
        secret: None,
    }
}
