//! Webhook callback registrations (seed 001's `/v1/callback-registrations`, seed 000's
//! `POST /api/v1/agents/{agent_id}/callbacks`): register, list, read, delete, verify (send
//! the challenge), rotate the shared secret, and read the delivery log.
//!
//! A URL is checked when registered (`https` only, every resolved address outside the
//! refused ranges) and again on every delivery (`ops/callbacks.rs`). A registration stays
//! `pending_verification`, receiving nothing but challenges, until its receiver answers one
//! with the HMAC of the challenge under the shared secret.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use inbox_api::time::format_utc;
use inbox_api::{
    CallbackAttemptsResponse, CallbackRegistrationRequest, CallbackRegistrationResponse,
    CallbackRegistrationsResponse, ProblemCode, RotateCallbackSecretRequest, Scope,
};
use inbox_core::{RecipientId, TenantId};
use inbox_store::{CallbackRegistration, KeyId, RegistrationId, SecretBytes};

use crate::AppState;
use crate::auth::{Caller, CallerKind};
use crate::convert::{self, decode_base64};
use crate::error::ApiError;
use crate::http::extract::ApiJson;
use crate::ops::callbacks::ChallengeOutcome;
use crate::ops::callbacks::registrations::{self, NewRegistration};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/callback-registrations", post(register).get(list))
        .route("/v1/callback-registrations/{registration_id}", get(read).delete(remove))
        .route("/v1/callback-registrations/{registration_id}/verify", post(verify))
        .route("/v1/callback-registrations/{registration_id}/rotate", post(rotate))
        .route("/v1/callback-registrations/{registration_id}/deliveries", get(deliveries))
        .route("/api/v1/agents/{agent_id}/callbacks", post(register_for_agent))
}

/// Default and bounds of `max_rate_per_minute` (the OpenAPI document states them too).
const RATE_PER_MINUTE_DEFAULT: u32 = 60;
pub(crate) const RATE_PER_MINUTE_MAX: u32 = 600;
/// Default and bounds of `replay_window_seconds`.
const REPLAY_WINDOW_SECONDS_DEFAULT: u32 = 300;
pub(crate) const REPLAY_WINDOW_SECONDS_RANGE: std::ops::RangeInclusive<u32> = 60..=86_400;
/// Default and longest overlap of a secret rotation.
const ROTATION_OVERLAP_SECONDS_DEFAULT: u64 = 86_400;
pub(crate) const ROTATION_OVERLAP_SECONDS_MAX: u64 = 7 * 86_400;

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
    require_scope(&caller, Scope::CallbackRegister)?;
    caller.check_tenant(request.tenant_id.as_deref())?;
    let recipient = match request.recipient_id.as_deref() {
        Some(named) => {
            if !is_operator(&caller) {
                caller.check_agent(Some(named))?;
            }
            RecipientId::new(named).map_err(|e| ApiError::invalid_field("recipient_id", e.problem))?
        }
        None if caller.kind == CallerKind::Agent => caller.subject.clone(),
        None => return Err(ApiError::invalid_field("recipient_id", "is required with a non-agent token")),
    };
    create(&state, &caller.tenant_id, recipient, request).await
}

/// Seed 000's alias of registration for one agent.
#[utoipa::path(post, path = "/api/v1/agents/{agent_id}/callbacks", tag = "agents (seed 000 aliases)",
    params(("agent_id" = String, Path)), request_body = CallbackRegistrationRequest,
    responses((status = 201, body = CallbackRegistrationResponse), (status = 400, body = inbox_api::Problem)))]
pub async fn register_for_agent(
    State(state): State<AppState>,
    caller: Caller,
    Path(agent_id): Path<String>,
    ApiJson(request): ApiJson<CallbackRegistrationRequest>,
) -> Result<(StatusCode, Json<CallbackRegistrationResponse>), ApiError> {
    require_scope(&caller, Scope::CallbackRegister)?;
    caller.check_tenant(request.tenant_id.as_deref())?;
    if !is_operator(&caller) {
        caller.check_agent(Some(&agent_id))?;
    }
    if request.recipient_id.as_deref().is_some_and(|named| named != agent_id) {
        return Err(ApiError::invalid_field(
            "recipient_id",
            "differs from the agent in the path; leave it out",
        ));
    }
    let recipient = RecipientId::new(agent_id).map_err(|e| ApiError::invalid_field("agent_id", e.problem))?;
    create(&state, &caller.tenant_id, recipient, request).await
}

async fn create(
    state: &AppState,
    tenant_id: &TenantId,
    recipient_id: RecipientId,
    request: CallbackRegistrationRequest,
) -> Result<(StatusCode, Json<CallbackRegistrationResponse>), ApiError> {
    if request.auth_mode.as_deref().is_some_and(|mode| mode != "hmac-sha256") {
        return Err(ApiError::invalid_field("auth_mode", "must be hmac-sha256"));
    }
    if request.delivery_scope.as_ref().is_some_and(|scope| scope.iter().any(|s| s != "signal_only")) {
        return Err(ApiError::invalid_field(
            "delivery_scope",
            "may only be [\"signal_only\"]: callbacks carry the thin hint, agents fetch events by polling",
        ));
    }
    let max_rate_per_minute = request.max_rate_per_minute.unwrap_or(RATE_PER_MINUTE_DEFAULT);
    if !(1..=RATE_PER_MINUTE_MAX).contains(&max_rate_per_minute) {
        return Err(ApiError::invalid_field(
            "max_rate_per_minute",
            format!("must be 1 to {RATE_PER_MINUTE_MAX}"),
        ));
    }
    let replay_window_seconds = request.replay_window_seconds.unwrap_or(REPLAY_WINDOW_SECONDS_DEFAULT);
    if !REPLAY_WINDOW_SECONDS_RANGE.contains(&replay_window_seconds) {
        return Err(ApiError::invalid_field(
            "replay_window_seconds",
            format!(
                "must be {} to {}",
                REPLAY_WINDOW_SECONDS_RANGE.start(),
                REPLAY_WINDOW_SECONDS_RANGE.end()
            ),
        ));
    }
    let (secret, generated) = secret_from(request.secret.as_deref())?;
    let registered = registrations::register(
        state,
        NewRegistration {
            tenant_id: tenant_id.clone(),
            recipient_id,
            callback_url: request.callback_url,
            key_id: key_id_from(request.secret_id)?,
            secret,
            secret_generated: generated.is_some(),
            max_rate_per_minute,
            replay_window_seconds,
        },
    )
    .await?;
    Ok((StatusCode::CREATED, Json(view(&registered.registration, generated, registered.challenged.as_ref()))))
}

/// The caller's registrations (an operator sees the tenant's).
#[utoipa::path(get, path = "/v1/callback-registrations", tag = "callbacks", responses((status = 200, body = CallbackRegistrationsResponse)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<CallbackRegistrationsResponse>, ApiError> {
    require_scope(&caller, Scope::CallbackRegister)?;
    let recipient = (!is_operator(&caller)).then_some(&caller.subject);
    let registrations = state.store.callbacks().registrations(&caller.tenant_id, recipient).await?;
    Ok(Json(CallbackRegistrationsResponse {
        registrations: registrations.iter().map(|r| view(r, None, None)).collect(),
    }))
}

#[utoipa::path(get, path = "/v1/callback-registrations/{registration_id}", tag = "callbacks",
    params(("registration_id" = String, Path)),
    responses((status = 200, body = CallbackRegistrationResponse), (status = 404, body = inbox_api::Problem)))]
pub async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path(registration_id): Path<String>,
) -> Result<Json<CallbackRegistrationResponse>, ApiError> {
    require_scope(&caller, Scope::CallbackRegister)?;
    let registration = visible(&state, &caller, &registration_id).await?;
    Ok(Json(view(&registration, None, None)))
}

#[utoipa::path(delete, path = "/v1/callback-registrations/{registration_id}", tag = "callbacks",
    params(("registration_id" = String, Path)),
    responses((status = 204, description = "deleted"), (status = 404, body = inbox_api::Problem)))]
pub async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    Path(registration_id): Path<String>,
) -> Result<StatusCode, ApiError> {
    require_scope(&caller, Scope::CallbackRegister)?;
    let registration = visible(&state, &caller, &registration_id).await?;
    state.store.callbacks().delete_registration(&caller.tenant_id, &registration.registration_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Sends a (new) challenge now; the answer says whether the registration is active.
#[utoipa::path(post, path = "/v1/callback-registrations/{registration_id}/verify", tag = "callbacks",
    params(("registration_id" = String, Path)),
    responses((status = 200, body = CallbackRegistrationResponse), (status = 404, body = inbox_api::Problem)))]
pub async fn verify(
    State(state): State<AppState>,
    caller: Caller,
    Path(registration_id): Path<String>,
) -> Result<Json<CallbackRegistrationResponse>, ApiError> {
    require_scope(&caller, Scope::CallbackRegister)?;
    let registration = visible(&state, &caller, &registration_id).await?;
    let verified = registrations::verify(&state, &registration).await?;
    Ok(Json(view(&verified.registration, None, verified.challenged.as_ref())))
}

/// Replaces the shared secret; the previous one keeps signing beside it for the overlap.
#[utoipa::path(post, path = "/v1/callback-registrations/{registration_id}/rotate", tag = "callbacks",
    params(("registration_id" = String, Path)), request_body = RotateCallbackSecretRequest,
    responses((status = 200, body = CallbackRegistrationResponse), (status = 404, body = inbox_api::Problem)))]
pub async fn rotate(
    State(state): State<AppState>,
    caller: Caller,
    Path(registration_id): Path<String>,
    ApiJson(request): ApiJson<RotateCallbackSecretRequest>,
) -> Result<Json<CallbackRegistrationResponse>, ApiError> {
    require_scope(&caller, Scope::CallbackRotate)?;
    let registration = visible(&state, &caller, &registration_id).await?;
    let overlap_seconds = request.overlap_seconds.unwrap_or(ROTATION_OVERLAP_SECONDS_DEFAULT);
    if overlap_seconds > ROTATION_OVERLAP_SECONDS_MAX {
        return Err(ApiError::invalid_field(
            "overlap_seconds",
            format!("must be at most {ROTATION_OVERLAP_SECONDS_MAX} (7 days)"),
        ));
    }
    let (secret, generated) = secret_from(request.secret.as_deref())?;
    let key_id = key_id_from(request.secret_id)?;
    let rotated = state
        .store
        .callbacks()
        .rotate_secret(
            &caller.tenant_id,
            &registration.registration_id,
            &key_id,
            &secret,
            overlap_seconds * 1000,
        )
        .await?
        .ok_or_else(|| not_found(&registration_id))?;
    Ok(Json(view(&rotated, generated, None)))
}

/// The newest delivery attempts of a registration, newest first.
#[utoipa::path(get, path = "/v1/callback-registrations/{registration_id}/deliveries", tag = "callbacks",
    params(("registration_id" = String, Path)),
    responses((status = 200, body = CallbackAttemptsResponse), (status = 404, body = inbox_api::Problem)))]
pub async fn deliveries(
    State(state): State<AppState>,
    caller: Caller,
    Path(registration_id): Path<String>,
) -> Result<Json<CallbackAttemptsResponse>, ApiError> {
    require_scope(&caller, Scope::CallbackRegister)?;
    let registration = visible(&state, &caller, &registration_id).await?;
    let attempts =
        state.store.callbacks().attempts(&caller.tenant_id, &registration.registration_id, 100).await?;
    Ok(Json(CallbackAttemptsResponse { attempts: attempts.iter().map(convert::callback_attempt).collect() }))
}

fn is_operator(caller: &Caller) -> bool {
    caller.kind == CallerKind::Admin && caller.has(Scope::Admin)
}

fn require_scope(caller: &Caller, scope: Scope) -> Result<(), ApiError> {
    if is_operator(caller) {
        return Ok(());
    }
    caller.require(scope)
}

/// The registration, if the caller may see it: its agent's own, or any for an operator.
/// Others' registrations are "not found", so their ids are not confirmed.
async fn visible(
    state: &AppState,
    caller: &Caller,
    registration_id: &str,
) -> Result<CallbackRegistration, ApiError> {
    let id = RegistrationId::new(registration_id)
        .map_err(|e| ApiError::invalid_field("registration_id", e.problem))?;
    let agent = (!is_operator(caller)).then_some(&caller.subject);
    registrations::visible(state, &caller.tenant_id, agent, &id)
        .await?
        .ok_or_else(|| not_found(registration_id))
}

fn not_found(registration_id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ProblemCode::CallbackRegistrationNotFound,
        format!(
            "no callback registration {registration_id:?} of yours exists; list them with GET /v1/callback-registrations"
        ),
    )
}

/// The supplied secret (base64, 32 to 64 bytes), or a generated one to return once.
fn secret_from(supplied: Option<&str>) -> Result<(SecretBytes, Option<String>), ApiError> {
    match supplied {
        Some(text) => {
            let secret = SecretBytes::new(decode_base64("secret", text)?);
            if !(32..=64).contains(&secret.len()) {
                return Err(ApiError::invalid_field(
                    "secret",
                    format!("is {} bytes; use 32 to 64 random bytes", secret.len()),
                ));
            }
            Ok((secret, None))
        }
        None => {
            let secret = SecretBytes::new(inbox_store::random_bytes::<32>().to_vec());
            let text = URL_SAFE_NO_PAD.encode(secret.as_slice());
            Ok((secret, Some(text)))
        }
    }
}

fn key_id_from(secret_id: Option<String>) -> Result<KeyId, ApiError> {
    match secret_id {
        Some(id) => KeyId::new(id).map_err(|e| ApiError::invalid_field("secret_id", e.problem)),
        None => KeyId::new(format!("cbk_{}", hex::encode(inbox_store::random_bytes::<8>())))
            .map_err(|e| ApiError::internal(e.to_string())),
    }
}

fn view(
    registration: &CallbackRegistration,
    secret: Option<String>,
    challenged: Option<&ChallengeOutcome>,
) -> CallbackRegistrationResponse {
    let mut view = convert::callback_registration(registration);
    view.secret = secret;
    view.challenge_delivery_id = challenged.map(|c| c.delivery_id.clone());
    view.expires_at_utc = challenged.map(|c| format_utc(c.expires_at.get()));
    view.last_error = view.last_error.or_else(|| challenged.and_then(|c| c.result.as_ref().err().cloned()));
    view
}
