//! Callback registration use cases (seed 001's `/v1/callback-registrations`, seed 000's
//! `POST /api/v1/agents/{agent_id}/callbacks`): register (the URL checked, the secret kept or
//! generated, the tenant's limits applied, the challenge sent), list, read, delete, verify
//! again (a new challenge), rotate the shared secret, and read the delivery log.
//!
//! An agent sees and changes its own registrations; an operator (the `admin` scope on an
//! admin token) every registration of the tenant, with no other scope. Another agent's
//! registration is "not found", so its id is not confirmed. A registration stays
//! `pending_verification`, receiving nothing but challenges, until its receiver answers one
//! with the HMAC of the challenge under the shared secret.

use axum::http::StatusCode;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use inbox_api::time::format_utc;
use inbox_api::{
    CallbackAttemptsResponse, CallbackRegistrationRequest, CallbackRegistrationResponse,
    CallbackRegistrationsResponse, ProblemCode, RotateCallbackSecretRequest, Scope,
};
use inbox_core::limits::{RatePerMinute, ReplayWindowSeconds, SecretOverlapSeconds};
use inbox_core::{RecipientId, TenantId};
use inbox_store::{
    CallbackLimits, CallbackRegistration, KeyId, NewCallbackRegistration, RegistrationId, SecretBytes,
};
use inbox_trust::ssrf::UrlRefusal;

use super::{ChallengeOutcome, SendError, challenge};
use crate::caller::{Caller, Reach};
use crate::convert::{self, decode_base64};
use crate::error::ApiError;
use crate::node::AppState;

/// Defaults of a registration's settings and a rotation's overlap (their bounds are their
/// types', in `inbox_core::limits`).
const RATE_PER_MINUTE_DEFAULT: RatePerMinute = RatePerMinute::of(60);
const REPLAY_WINDOW_SECONDS_DEFAULT: ReplayWindowSeconds = ReplayWindowSeconds::of(300);
const ROTATION_OVERLAP_SECONDS_DEFAULT: SecretOverlapSeconds = SecretOverlapSeconds::of(86_400);
/// Delivery attempts a registration's log answers, newest first.
const ATTEMPTS_LISTED_MAX: u32 = 100;

/// Registers a callback for the agent the request names (`recipient_id`, or the calling
/// agent's own). With a `secret`, the challenge is sent before the answer; without, the
/// generated secret is returned and [`verify`] sends the challenge.
pub async fn register(
    state: &AppState,
    caller: &Caller,
    request: CallbackRegistrationRequest,
) -> Result<CallbackRegistrationResponse, ApiError> {
    let reach = caller.operator_or(|c| c.require(Scope::CallbackRegister))?;
    caller.check_tenant(request.tenant_id.as_ref())?;
    let recipient = match &request.recipient_id {
        Some(named) => {
            if reach == Reach::Own {
                caller.check_agent(Some(named.as_str()))?;
            }
            named.clone()
        }
        None if caller.is_agent() => caller.subject.clone(),
        None => return Err(ApiError::invalid_field("recipient_id", "is required with a non-agent token")),
    };
    create(state, &caller.tenant_id, recipient, request).await
}

/// Seed 000's registration for the agent in the path (`agent_id`).
pub async fn register_for_agent(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
    request: CallbackRegistrationRequest,
) -> Result<CallbackRegistrationResponse, ApiError> {
    let reach = caller.operator_or(|c| c.require(Scope::CallbackRegister))?;
    caller.check_tenant(request.tenant_id.as_ref())?;
    if reach == Reach::Own {
        caller.check_agent(Some(agent_id))?;
    }
    if request.recipient_id.as_ref().is_some_and(|named| named.as_str() != agent_id) {
        return Err(ApiError::invalid_field(
            "recipient_id",
            "differs from the agent in the path; leave it out",
        ));
    }
    let recipient = RecipientId::new(agent_id).map_err(|e| ApiError::invalid_field("agent_id", e.problem))?;
    create(state, &caller.tenant_id, recipient, request).await
}

/// The caller's registrations (an operator sees the tenant's).
pub async fn list(state: &AppState, caller: &Caller) -> Result<CallbackRegistrationsResponse, ApiError> {
    let reach = caller.operator_or(|c| c.require(Scope::CallbackRegister))?;
    let recipient = (reach == Reach::Own).then_some(&caller.subject);
    let registrations = state.store.callbacks().registrations(&caller.tenant_id, recipient).await?;
    Ok(CallbackRegistrationsResponse {
        registrations: registrations.iter().map(|r| view(r, None, None)).collect(),
    })
}

/// One registration the caller may see.
pub async fn read(
    state: &AppState,
    caller: &Caller,
    registration_id: &str,
) -> Result<CallbackRegistrationResponse, ApiError> {
    let reach = caller.operator_or(|c| c.require(Scope::CallbackRegister))?;
    let registration = visible(state, caller, reach, registration_id).await?;
    Ok(view(&registration, None, None))
}

/// Deletes a registration the caller may see.
pub async fn remove(state: &AppState, caller: &Caller, registration_id: &str) -> Result<(), ApiError> {
    let reach = caller.operator_or(|c| c.require(Scope::CallbackRegister))?;
    let registration = visible(state, caller, reach, registration_id).await?;
    state.store.callbacks().delete_registration(&caller.tenant_id, &registration.registration_id).await?;
    Ok(())
}

/// Sends a (new) challenge now; the answer says whether the registration is active.
pub async fn verify(
    state: &AppState,
    caller: &Caller,
    registration_id: &str,
) -> Result<CallbackRegistrationResponse, ApiError> {
    let reach = caller.operator_or(|c| c.require(Scope::CallbackRegister))?;
    let registration = visible(state, caller, reach, registration_id).await?;
    let verified = challenge_again(state, &registration).await?;
    Ok(view(&verified.registration, None, verified.challenged.as_ref()))
}

/// Replaces the shared secret (the supplied one, or a generated one returned this once); the
/// previous one keeps signing beside it for the overlap.
pub async fn rotate(
    state: &AppState,
    caller: &Caller,
    registration_id: &str,
    request: RotateCallbackSecretRequest,
) -> Result<CallbackRegistrationResponse, ApiError> {
    let reach = caller.operator_or(|c| c.require(Scope::CallbackRotate))?;
    let registration = visible(state, caller, reach, registration_id).await?;
    let overlap_seconds = request.overlap_seconds.unwrap_or(ROTATION_OVERLAP_SECONDS_DEFAULT).get();
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
        .ok_or_else(|| not_found(registration_id))?;
    Ok(view(&rotated, generated, None))
}

/// The newest delivery attempts of a registration the caller may see, newest first.
pub async fn deliveries(
    state: &AppState,
    caller: &Caller,
    registration_id: &str,
) -> Result<CallbackAttemptsResponse, ApiError> {
    let reach = caller.operator_or(|c| c.require(Scope::CallbackRegister))?;
    let registration = visible(state, caller, reach, registration_id).await?;
    let attempts = state
        .store
        .callbacks()
        .attempts(&caller.tenant_id, &registration.registration_id, ATTEMPTS_LISTED_MAX)
        .await?;
    Ok(CallbackAttemptsResponse { attempts: attempts.iter().map(convert::callback_attempt).collect() })
}

/// The checks and defaults of a new registration's settings, then [`store_registration`].
async fn create(
    state: &AppState,
    tenant_id: &TenantId,
    recipient_id: RecipientId,
    request: CallbackRegistrationRequest,
) -> Result<CallbackRegistrationResponse, ApiError> {
    let max_rate_per_minute = request.max_rate_per_minute.unwrap_or(RATE_PER_MINUTE_DEFAULT).get();
    let replay_window_seconds = request.replay_window_seconds.unwrap_or(REPLAY_WINDOW_SECONDS_DEFAULT).get();
    let (secret, generated) = secret_from(request.secret.as_deref())?;
    let registered = store_registration(
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
    Ok(view(&registered.registration, generated, registered.challenged.as_ref()))
}

/// A registration as the caller asked for it, its fields already validated.
#[derive(Debug)]
struct NewRegistration {
    tenant_id: TenantId,
    recipient_id: RecipientId,
    callback_url: String,
    key_id: KeyId,
    secret: SecretBytes,
    /// Whether the service generated `secret`: it is returned once and no challenge is sent
    /// yet, since the receiver cannot know the secret before the caller hands it over.
    secret_generated: bool,
    max_rate_per_minute: u32,
    replay_window_seconds: u32,
}

/// A stored registration and, when one was sent, the challenge's outcome.
#[derive(Debug)]
struct Registered {
    registration: CallbackRegistration,
    challenged: Option<ChallengeOutcome>,
}

/// Stores a registration: the URL is parsed strictly and every address it resolves to is
/// checked before anything is stored; with a caller-supplied secret the challenge goes out at
/// once, so the answer already says whether the receiver proved it holds the secret.
async fn store_registration(state: &AppState, new: NewRegistration) -> Result<Registered, ApiError> {
    let target = state.callback_sender.parse(&new.callback_url).map_err(|refusal| url_refused(&refusal))?;
    state.callback_sender.check(&target).await.map_err(|err| address_refused(&err))?;
    let limits = CallbackLimits {
        per_recipient_max: u64::from(state.config.callbacks.per_recipient_max),
        per_tenant_max: u64::from(state.config.callbacks.per_tenant_max),
    };
    let registration = state
        .store
        .callbacks()
        .create_registration(
            &NewCallbackRegistration {
                tenant_id: new.tenant_id,
                recipient_id: new.recipient_id,
                callback_url: target.to_string(),
                key_id: new.key_id,
                secret: new.secret,
                max_rate_per_minute: new.max_rate_per_minute,
                replay_window_seconds: new.replay_window_seconds,
            },
            limits,
        )
        .await?;
    if new.secret_generated {
        return Ok(Registered { registration, challenged: None });
    }
    challenge_again(state, &registration).await
}

/// Sends a (new) challenge now and reads the registration back with its new state.
async fn challenge_again(
    state: &AppState,
    registration: &CallbackRegistration,
) -> Result<Registered, ApiError> {
    let outcome = challenge(state, registration).await;
    let registration = state
        .store
        .callbacks()
        .registration(&registration.tenant_id, &registration.registration_id)
        .await?
        .ok_or_else(|| ApiError::internal("a callback registration vanished while it was challenged"))?;
    Ok(Registered { registration, challenged: Some(outcome) })
}

/// The registration, if the caller may see it: within `reach`, its agent's own, or any of the
/// tenant for an operator. Others' registrations are "not found", so their ids are not
/// confirmed.
async fn visible(
    state: &AppState,
    caller: &Caller,
    reach: Reach,
    registration_id: &str,
) -> Result<CallbackRegistration, ApiError> {
    let id = RegistrationId::new(registration_id)
        .map_err(|e| ApiError::invalid_field("registration_id", e.problem))?;
    let agent = (reach == Reach::Own).then_some(&caller.subject);
    state
        .store
        .callbacks()
        .registration(&caller.tenant_id, &id)
        .await?
        .filter(|r| agent.is_none_or(|agent| &r.recipient_id == agent))
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

/// The supplied secret id, or a generated one.
fn key_id_from(secret_id: Option<KeyId>) -> Result<KeyId, ApiError> {
    match secret_id {
        Some(id) => Ok(id),
        None => KeyId::new(format!("cbk_{}", hex::encode(inbox_store::random_bytes::<8>())))
            .map_err(|e| ApiError::internal(e.to_string())),
    }
}

/// The wire view of a registration, with the secret generated by this call and the outcome of
/// the challenge it sent.
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

fn url_refused(refusal: &UrlRefusal) -> ApiError {
    ApiError::bad_request(ProblemCode::CallbackUrlRefused, format!("the callback URL is refused: {refusal}"))
        .with("field", "callback_url")
}

fn address_refused(err: &SendError) -> ApiError {
    match err {
        SendError::Resolve { .. } | SendError::Timeout(_) => ApiError::bad_request(
            ProblemCode::CallbackHostUnresolvable,
            format!("the callback host cannot be resolved ({err}); check the name"),
        )
        .with("field", "callback_url"),
        _ => ApiError::bad_request(
            ProblemCode::CallbackUrlRefused,
            format!("the callback URL is refused: {err}"),
        )
        .with("field", "callback_url"),
    }
}
