//! The delivery worker: which due deliveries one pass takes, and how one delivery's outcome
//! is recorded (retried with backoff, given up for a head, or its registration disabled).
//!
//! Isolation: a registration has at most one delivery in flight (it is claimed by a
//! compare-and-set), an origin at most `callbacks_in_flight_per_origin_max`, a tenant at most
//! `callbacks_fanout_per_tenant_max` taken per pass; what is deferred is skipped, not waited
//! for, and the pass reads on past it, so the deliveries of healthy receivers are taken while a
//! failing one's run out their timeouts.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use inbox_api::StreamSignal;
use inbox_api::time::format_utc;
use inbox_core::{InboxSeq, Recipient, RecipientKey, UnixMillis};
use inbox_store::{CallbackAttempt, CallbackRegistration, DeliveryResult, DueDelivery, RegistrationId};
use tokio::sync::OwnedSemaphorePermit;

use super::delivery_id;
use super::origins::OriginSlot;
use super::sender::CallbackSender;
use crate::node::AppState;
use crate::periodic::{Failure, Job, Outcome};

/// Due deliveries read per page, per free in-flight permit.
const DUE_READ_FACTOR: u32 = 2;
/// Pages one pass reads at most: deferred deliveries can fill a page, so the pass reads on,
/// but never without bound.
const DUE_PAGES_MAX: u32 = 4;

/// The delivery worker: every `callbacks_poll_interval`, takes due deliveries within the caps
/// (see the module) and sends each one in its own task.
#[derive(Debug)]
pub struct Dispatcher;

impl Job for Dispatcher {
    const NAME: &'static str = "callback dispatcher";

    async fn tick(&mut self, state: &AppState) -> Outcome {
        pass(state).await.map_err(|err| Failure::new("callback delivery pass", err))
    }
}

/// What a delivery holds while it runs: its node permit, its origin slot and its lease.
struct Taken {
    _permit: OwnedSemaphorePermit,
    _origin: Option<OriginSlot>,
    lease_until: UnixMillis,
}

async fn pass(state: &AppState) -> Result<(), inbox_store::StoreError> {
    let webhooks = &state.callback_sender;
    let available = webhooks.in_flight.available_permits() as u32;
    if available == 0 {
        return Ok(());
    }
    let now = state.store.now();
    let page = available * DUE_READ_FACTOR;
    let per_tenant_max = state.config.callbacks.fanout_per_tenant_max as usize;
    let mut per_tenant: HashMap<String, usize> = HashMap::new();
    let mut after: Option<(UnixMillis, RegistrationId)> = None;
    for _ in 0..DUE_PAGES_MAX {
        let cursor = after.as_ref().map(|(at, id)| (*at, id));
        let due = state.store.callbacks().due_deliveries(now, cursor, page).await?;
        let full = due.len() as u32 == page;
        for delivery in due {
            let registration = &delivery.registration;
            after = Some((registration.next_attempt_at, registration.registration_id.clone()));
            let taken = per_tenant.entry(registration.tenant_id.to_string()).or_default();
            if *taken >= per_tenant_max {
                state.metrics.callback_fanout_deferred_total().add([], 1);
                continue;
            }
            // A URL that no longer parses has no origin; its delivery fails and says why.
            let origin = match webhooks.parse(&registration.callback_url) {
                Ok(target) => match webhooks.origins.try_take(&origin_of(&target)) {
                    Some(slot) => Some(slot),
                    None => {
                        state.metrics.callback_origin_deferred_total().add([], 1);
                        continue;
                    }
                },
                Err(_) => None,
            };
            let Ok(permit) = webhooks.in_flight.clone().try_acquire_owned() else {
                return Ok(());
            };
            // Held while the request runs; a node that dies mid-delivery releases it by expiry.
            let lease_until = now.plus_ms((webhooks.timeout * 2 + Duration::from_secs(5)).as_millis() as u64);
            let claimed = state
                .store
                .callbacks()
                .claim_delivery(&registration.registration_id, registration.next_attempt_at, lease_until)
                .await?;
            if !claimed {
                continue;
            }
            *taken += 1;
            let state = state.clone();
            let taken = Taken { _permit: permit, _origin: origin, lease_until };
            tokio::spawn(async move {
                deliver(&state, delivery, taken.lease_until).await;
                drop(taken);
            });
        }
        if !full {
            break;
        }
    }
    Ok(())
}

/// Scheme, host and port: what the per-origin cap counts by.
fn origin_of(target: &inbox_trust::ssrf::CallbackTarget) -> String {
    format!("{}://{}", target.scheme.as_str(), target.authority())
}

/// Sends one hint and records how it went.
async fn deliver(state: &AppState, due: DueDelivery, lease_until: UnixMillis) {
    let registration = &due.registration;
    let now = state.store.now();
    let delivery_id = delivery_id(now);
    let inbox = RecipientKey {
        tenant_id: registration.tenant_id.clone(),
        recipient: Recipient::agent(registration.recipient_id.clone()),
    };
    // Best effort, as on streams: without the count the hint still goes out.
    let approximate_unacked = state.store.inbox().unacked_estimate(&inbox).await.ok();
    let signal = StreamSignal {
        signal_type: "inbox.updated".to_owned(),
        tenant_id: registration.tenant_id.clone(),
        recipient_id: registration.recipient_id.clone(),
        head_seq: due.head_seq.get(),
        approximate_unacked,
        sent_at_utc: format_utc(now.get()),
        delivery_id: delivery_id.clone(),
    };
    let body = serde_json::to_vec(&signal).unwrap_or_default();
    let secrets: Vec<(&str, &[u8])> = registration
        .signing_secrets(now)
        .into_iter()
        .map(|(keyid, secret)| (keyid.as_str(), secret))
        .collect();
    let webhooks = &state.callback_sender;
    let started = Instant::now();
    let sent =
        webhooks.send(&registration.callback_url, body, &secrets, &delivery_id, now, webhooks.timeout).await;
    let elapsed = started.elapsed();
    let finished = state.store.now();
    let attempt = registration.failed_attempts + 1;
    let (result, outcome, http_status, error) = match &sent {
        Ok(answer) => {
            let interval_ms = 60_000 / u64::from(registration.max_rate_per_minute.max(1));
            let next_attempt_at = finished.plus_ms(interval_ms);
            (
                DeliveryResult::Delivered { head_seq: due.head_seq, next_attempt_at },
                "delivered",
                Some(answer.status),
                None,
            )
        }
        Err(err) => {
            let error = err.to_string();
            let (result, outcome) = failed(webhooks, state, registration, due.head_seq, &error, finished);
            (result, outcome, err.status(), Some(error))
        }
    };
    let disabled = matches!(&result, DeliveryResult::Failed { disable: Some(_), .. });
    if let Some(error) = &error {
        tracing::info!(
            registration_id = %registration.registration_id, head_seq = due.head_seq.get(), attempt, outcome,
            error = %error, "webhook delivery failed; the agent still recovers by polling"
        );
    }
    match state.store.callbacks().finish_delivery(&registration.registration_id, lease_until, &result).await {
        Ok(true) if disabled => {
            tracing::warn!(
                registration_id = %registration.registration_id, tenant_id = %registration.tenant_id,
                consecutive_failures = registration.consecutive_failures + 1,
                "callback disabled after failing past the bound; an operator re-enables it"
            );
            let tenant = state.metrics.tenant_label(registration.tenant_id.as_str());
            state.metrics.callback_endpoints_disabled_total().add([tenant], 1);
        }
        Ok(_) => {}
        Err(err) => {
            tracing::warn!(error = %err, "recording a webhook delivery failed; it will be retried after its lease");
        }
    }
    let logged = CallbackAttempt {
        delivery_id,
        registration_id: registration.registration_id.clone(),
        tenant_id: registration.tenant_id.clone(),
        kind: "hint".to_owned(),
        head_seq: Some(due.head_seq.get()),
        attempt,
        outcome: outcome.to_owned(),
        http_status,
        error,
        duration_ms: elapsed.as_millis() as u64,
        created_at: now,
    };
    if let Err(err) = state.store.callbacks().record_attempt(&logged).await {
        tracing::warn!(error = %err, "logging a webhook delivery failed");
    }
    let tenant = state.metrics.tenant_label(registration.tenant_id.as_str());
    state.metrics.callback_deliveries_total().add([tenant, outcome.to_owned()], 1);
    state.metrics.callback_delivery_seconds().observe([], elapsed);
}

/// A failed attempt: retried after a backoff that grows with the registration's failures in
/// a row (not only this head's, so a receiver that stays down is asked ever less often),
/// given up for this head after `callbacks_attempts_max`, and the registration disabled once
/// past the bound.
fn failed(
    webhooks: &CallbackSender,
    state: &AppState,
    registration: &CallbackRegistration,
    head_seq: InboxSeq,
    error: &str,
    finished: UnixMillis,
) -> (DeliveryResult, &'static str) {
    let attempt = registration.failed_attempts + 1;
    let in_a_row = registration.consecutive_failures.saturating_add(1);
    let jitter = f64::from(u32::from_le_bytes(inbox_store::random_bytes::<4>())) / f64::from(u32::MAX);
    let backoff_ms = webhooks.backoff.delay_ms(in_a_row.max(attempt), jitter);
    let give_up = attempt >= state.config.callbacks.attempts_max;
    let failing_since = registration.failing_since.unwrap_or(finished);
    let disable = webhooks.disabling.disables(in_a_row, failing_since, finished).then(|| {
        let hours = (finished.get() - failing_since.get()) as f64 / 3_600_000.0;
        format!("{in_a_row} failed deliveries in a row over {hours:.1} h; the last: {error}")
    });
    let outcome = match (&disable, give_up) {
        (Some(_), _) => "disabled",
        (None, true) => "abandoned",
        (None, false) => "failed",
    };
    let result = DeliveryResult::Failed {
        error: error.to_owned(),
        next_attempt_at: finished.plus_ms(backoff_ms),
        give_up_head: give_up.then_some(head_seq),
        disable,
    };
    (result, outcome)
}
