//! Callbacks (seed 001's webhooks): the registration challenge and the delivery worker that sends signed
//! thin hints (`inbox.updated`, `head_seq`) to verified callbacks.
//!
//! Every request leaves through [`CallbackSender::send`], which is where the SSRF rules hold: the
//! URL was parsed strictly at registration and is parsed again here; the host name is
//! resolved through the [`Resolver`] and **every** address is checked
//! (`inbox_trust::ssrf::check_resolved`); the connection is pinned to the checked address
//! (`reqwest::ClientBuilder::resolve`), so no second lookup can swap in another (DNS
//! rebinding); proxies from the environment are ignored (a proxy would resolve the name
//! itself); redirects are never followed; time and response size are bounded.
//!
//! Deliveries are driven by the database (`inbox_store` callbacks): any node may send a due
//! delivery, exactly one does, and a failing callback is retried with backoff, logged, and
//! finally given up on for that head. The inbox itself is never touched: an agent whose
//! callback fails still finds its events by polling.
//!
//! One receiver cannot slow the others (`dispatch.rs`): a registration has at most one
//! delivery in flight, an origin at most `callbacks_in_flight_per_origin_max` of the node's
//! `callbacks_in_flight_max`, and the worker reads on past the deliveries it defers. A
//! registration that keeps failing is backed off by its failures in a row and, past
//! `callbacks_disable_after_failures` and `callbacks_disable_after`, disabled until an
//! operator re-enables it (`registrations::enable`).

mod dispatch;
mod origins;
pub mod registrations;
pub mod sender;

pub use dispatch::Dispatcher;
pub use sender::{Resolver, ResolverOverride, SendError, SystemResolver};

use std::time::{Duration, Instant};

use inbox_api::time::format_utc;
use inbox_api::{CallbackChallenge, CallbackChallengeAnswer};
use inbox_core::{EventId, UnixMillis};
use inbox_store::{CallbackAttempt, CallbackRegistration};
use inbox_trust::webhooks::{challenge_string, check_challenge_response};

use crate::node::AppState;

/// How long a challenge stays answerable.
pub const CHALLENGE_TTL: Duration = Duration::from_secs(30);

/// A fresh delivery id (a UUIDv7, like seed 001's `delivery_id`).
pub fn delivery_id(now: UnixMillis) -> String {
    EventId::new_v7(now, inbox_store::random_bytes::<10>()).to_string()
}

/// The outcome of one challenge.
#[derive(Debug)]
pub struct ChallengeOutcome {
    pub delivery_id: String,
    pub expires_at: UnixMillis,
    /// `Err` carries what the tenant should fix.
    pub result: Result<(), String>,
}

/// Sends a registration challenge and, when the receiver answers it correctly before it
/// expires, marks the registration verified. Every attempt is logged.
async fn challenge(state: &AppState, registration: &CallbackRegistration) -> ChallengeOutcome {
    let webhooks = &state.callback_sender;
    let now = state.store.now();
    let delivery_id = delivery_id(now);
    let timestamp = now.get().div_euclid(1000);
    let nonce = hex::encode(inbox_store::random_bytes::<16>());
    let expires_at = now.plus_ms(CHALLENGE_TTL.as_millis() as u64);
    let challenge = challenge_string(&delivery_id, timestamp, &nonce);
    let body = CallbackChallenge {
        signal_type: "callback.challenge".to_owned(),
        registration_id: registration.registration_id.to_string(),
        delivery_id: delivery_id.clone(),
        timestamp,
        nonce,
        expires_at_utc: format_utc(expires_at.get()),
        challenge: challenge.clone(),
    };
    let body = serde_json::to_vec(&body).unwrap_or_default();
    let secrets = [(registration.key_id.as_str(), registration.secret.as_slice())];
    let started = Instant::now();
    let timeout = webhooks.timeout.min(CHALLENGE_TTL);
    let sent = webhooks.send(&registration.callback_url, body, &secrets, &delivery_id, now, timeout).await;
    let answered_at = state.store.now();
    let (result, http_status) = match sent {
        Err(err) => (Err(format!("the challenge could not be delivered: {err}")), err.status()),
        Ok(answer) if answered_at > expires_at => {
            (Err("the challenge was answered after it expired".to_owned()), Some(answer.status))
        }
        Ok(answer) => {
            let answer_ok = serde_json::from_slice::<CallbackChallengeAnswer>(&answer.body).is_ok_and(|a| {
                check_challenge_response(&registration.secret, &challenge, &a.challenge_response)
            });
            if answer_ok {
                (Ok(()), Some(answer.status))
            } else {
                (
                    Err("the receiver did not answer with {\"challenge_response\": base64(HMAC-SHA256(secret, challenge))}"
                        .to_owned()),
                    Some(answer.status),
                )
            }
        }
    };
    let store = &state.store;
    let stored = match &result {
        Ok(()) => store
            .callbacks()
            .mark_verified(&registration.tenant_id, &registration.registration_id)
            .await
            .map(drop),
        Err(error) => {
            store
                .callbacks()
                .record_error(&registration.tenant_id, &registration.registration_id, error)
                .await
        }
    };
    if let Err(err) = stored {
        tracing::warn!(error = %err, registration_id = %registration.registration_id, "recording a challenge failed");
    }
    let attempt = CallbackAttempt {
        delivery_id: delivery_id.clone(),
        registration_id: registration.registration_id.clone(),
        tenant_id: registration.tenant_id.clone(),
        kind: "challenge".to_owned(),
        head_seq: None,
        attempt: 1,
        outcome: if result.is_ok() { "verified" } else { "verification_failed" }.to_owned(),
        http_status,
        error: result.as_ref().err().cloned(),
        duration_ms: started.elapsed().as_millis() as u64,
        created_at: now,
    };
    if let Err(err) = store.callbacks().record_attempt(&attempt).await {
        tracing::warn!(error = %err, "logging a challenge attempt failed");
    }
    let outcome = if result.is_ok() { "verified" } else { "failed" };
    state.metrics.callback_challenges_total().add([outcome.to_owned()], 1);
    ChallengeOutcome { delivery_id, expires_at, result }
}
