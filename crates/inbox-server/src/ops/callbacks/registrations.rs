//! Callback registration use cases: register (the URL checked, the secret kept or generated,
//! the tenant's limits applied, the challenge sent), verify again, and read back. The route
//! file parses the request and shapes the answer; what happens in between is here.

use inbox_api::ProblemCode;
use inbox_core::{RecipientId, TenantId};
use inbox_store::{
    CallbackLimits, CallbackRegistration, KeyId, NewCallbackRegistration, RegistrationId, SecretBytes,
};
use inbox_trust::ssrf::UrlRefusal;

use super::{ChallengeOutcome, SendError, challenge};
use crate::AppState;
use crate::error::ApiError;

/// A registration as the caller asked for it, its fields already validated.
#[derive(Debug)]
pub struct NewRegistration {
    pub tenant_id: TenantId,
    pub recipient_id: RecipientId,
    pub callback_url: String,
    pub key_id: KeyId,
    pub secret: SecretBytes,
    /// Whether the service generated `secret`: it is returned once and no challenge is sent
    /// yet, since the receiver cannot know the secret before the caller hands it over.
    pub secret_generated: bool,
    pub max_rate_per_minute: u32,
    pub replay_window_seconds: u32,
}

/// A stored registration and, when one was sent, the challenge's outcome.
#[derive(Debug)]
pub struct Registered {
    pub registration: CallbackRegistration,
    pub challenged: Option<ChallengeOutcome>,
}

/// Registers a callback: the URL is parsed strictly and every address it resolves to is
/// checked before anything is stored; with a caller-supplied secret the challenge goes out at
/// once, so the answer already says whether the receiver proved it holds the secret.
pub async fn register(state: &AppState, new: NewRegistration) -> Result<Registered, ApiError> {
    let target = state.trust.webhooks.parse(&new.callback_url).map_err(|refusal| url_refused(&refusal))?;
    state.trust.webhooks.check(&target).await.map_err(|err| address_refused(&err))?;
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
    verify(state, &registration).await
}

/// Sends a (new) challenge now and reads the registration back with its new state.
pub async fn verify(state: &AppState, registration: &CallbackRegistration) -> Result<Registered, ApiError> {
    let outcome = challenge(state, registration).await;
    let registration = state
        .store
        .callbacks()
        .registration(&registration.tenant_id, &registration.registration_id)
        .await?
        .ok_or_else(|| ApiError::internal("a callback registration vanished while it was challenged"))?;
    Ok(Registered { registration, challenged: Some(outcome) })
}

/// The registration, if `agent` may see it: its own, or any of the tenant for an operator
/// (`agent` is `None`). Others' registrations are "not found", so their ids are not confirmed.
pub async fn visible(
    state: &AppState,
    tenant_id: &TenantId,
    agent: Option<&RecipientId>,
    registration_id: &RegistrationId,
) -> Result<Option<CallbackRegistration>, ApiError> {
    Ok(state
        .store
        .callbacks()
        .registration(tenant_id, registration_id)
        .await?
        .filter(|r| agent.is_none_or(|agent| &r.recipient_id == agent)))
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
