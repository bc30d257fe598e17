//! Conversions between the store's domain types and the wire types of `inbox-api`, and the
//! checks a wire type cannot make alone (a rule across fields, times), each failure named by
//! its field. Ids, closed sets and bounded values arrive typed: they checked themselves as the
//! body was deserialized.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use inbox_api::time::format_utc;
use inbox_api::{
    AdminEventView, CallbackAttemptView, CallbackRegistrationResponse, DeliveryView, EventEnvelope,
    PayloadRef, PublishRequest, SigningAlgorithm,
};
use inbox_core::limits::{MaxAttempts, Reason};
use inbox_core::{
    AckResult, EventBody, EventId, LeaseToken, QuarantineClass, Recipient, SessionId, TenantId, UnixMillis,
};
use inbox_store::{AckItem, CallbackAttempt, CallbackRegistration, Delivery, EventRecord, Publish};
use inbox_trust::Algorithm;

use crate::error::ApiError;

pub fn envelope(record: &EventRecord, now: UnixMillis) -> EventEnvelope {
    let life = &record.lifecycle;
    let (payload, payload_ref) = match &record.body {
        EventBody::Empty => (None, None),
        // Stored text was validated as JSON when published.
        EventBody::Json(text) => (serde_json::from_str(text).ok(), None),
        EventBody::Reference(r) => (None, Some(PayloadRef { kind: r.kind.clone(), id: r.id.clone() })),
    };
    EventEnvelope {
        event_id: record.event_id,
        tenant_id: record.inbox.tenant_id.clone(),
        recipient_kind: record.inbox.recipient.kind.clone(),
        recipient_id: record.inbox.recipient.id.clone(),
        inbox_seq: record.inbox_seq.get(),
        event_type: record.event_type.clone(),
        priority: record.priority.as_str().to_owned(),
        availability_at_utc: format_utc(life.available_at.get()),
        expires_at_utc: life.expires_at.map(|t| format_utc(t.get())),
        deduplication_key: record.deduplication_key.clone(),
        ack_state: life.display_state(now).as_str().to_owned(),
        delivery_attempts: life.delivery_attempts,
        visibility_lease_until_utc: life
            .lease
            .filter(|_| life.state == inbox_core::AckState::Claimed)
            .map(|l| format_utc(l.until.get())),
        next_retry_at_utc: life.next_retry_at.filter(|at| *at > now).map(|t| format_utc(t.get())),
        dead_letter_state: life.dead_letter_reason.as_str().to_owned(),
        correlation: record.correlation.clone(),
        payload,
        payload_ref,
        created_at_utc: format_utc(record.created_at.get()),
    }
}

/// An event as operators see it: the envelope with its reason, lease session and terminal time.
pub fn admin_event(record: &EventRecord, now: UnixMillis) -> AdminEventView {
    AdminEventView {
        event: envelope(record, now),
        reason: record.last_error.clone(),
        session_id: record.lease_owner_session_id.clone(),
        terminal_at_utc: record.terminal_at.map(|t| format_utc(t.get())),
    }
}

pub fn delivery(d: &Delivery) -> DeliveryView {
    DeliveryView {
        recipient_kind: d.recipient.kind.clone(),
        recipient_id: d.recipient.id.clone(),
        event_id: d.event_id,
        inbox_seq: d.inbox_seq.get(),
        deduplicated: d.deduplicated,
    }
}

/// A registration as the tenant sees it, without a secret or a challenge (the routes that
/// generate or send one add it).
pub fn callback_registration(registration: &CallbackRegistration) -> CallbackRegistrationResponse {
    let previous = registration.previous.as_ref();
    CallbackRegistrationResponse {
        registration_id: registration.registration_id.clone(),
        tenant_id: registration.tenant_id.clone(),
        recipient_id: registration.recipient_id.clone(),
        callback_url: registration.callback_url.clone(),
        status: registration.state.as_str().to_owned(),
        auth_mode: registration.auth_mode.clone(),
        secret_id: registration.key_id.clone(),
        secret: None,
        previous_secret_id: previous.map(|p| p.key_id.clone()),
        previous_secret_retires_at_utc: previous.map(|p| format_utc(p.retires_at.get())),
        max_rate_per_minute: registration.max_rate_per_minute,
        replay_window_seconds: registration.replay_window_seconds,
        delivered_head_seq: registration.delivered_head_seq,
        created_at_utc: format_utc(registration.created_at.get()),
        verified_at_utc: registration.verified_at.map(|t| format_utc(t.get())),
        challenge_delivery_id: None,
        expires_at_utc: None,
        last_error: registration.last_error.clone(),
        disabled_at_utc: registration.disabled.as_ref().map(|d| format_utc(d.at.get())),
        disabled_reason: registration.disabled.as_ref().map(|d| d.reason.clone()),
    }
}

pub fn callback_attempt(a: &CallbackAttempt) -> CallbackAttemptView {
    CallbackAttemptView {
        delivery_id: a.delivery_id.clone(),
        kind: a.kind.clone(),
        head_seq: a.head_seq,
        attempt: a.attempt,
        outcome: a.outcome.clone(),
        http_status: a.http_status,
        error: a.error.clone(),
        duration_ms: a.duration_ms,
        created_at_utc: format_utc(a.created_at.get()),
    }
}

/// The algorithm a wire request names.
pub fn algorithm(algorithm: SigningAlgorithm) -> Algorithm {
    match algorithm {
        SigningAlgorithm::Ed25519 => Algorithm::Ed25519,
        SigningAlgorithm::HmacSha256 => Algorithm::HmacSha256,
    }
}

/// An event id from a path (a body's arrive typed).
pub fn event_id(field: &str, text: &str) -> Result<EventId, ApiError> {
    EventId::parse(text).map_err(|e| ApiError::invalid_field(field, e.problem))
}

/// One acknowledgement of the wire, checked: a quarantine needs a reason; a reason goes only
/// with `failed` or `quarantined`, a class only with `quarantined` (nothing sent is ignored).
/// `at` is the item's field prefix (`acks[3].`, or empty for seed 000's single ack).
pub fn ack_item(
    at: &str,
    event_id: EventId,
    lease_token: LeaseToken,
    result: Option<AckResult>,
    reason: Option<&Reason>,
    class: Option<QuarantineClass>,
) -> Result<AckItem, ApiError> {
    let result = result.unwrap_or_default();
    let reason_field = format!("{at}reason");
    let reason = match (result, reason) {
        (AckResult::Quarantined, None) => {
            return Err(ApiError::invalid_field(
                &reason_field,
                "is required with result quarantined; say why the event is set aside",
            ));
        }
        (AckResult::Completed, Some(_)) => {
            return Err(ApiError::invalid_field(
                &reason_field,
                "goes only with result failed or quarantined; leave it out for completed",
            ));
        }
        (_, reason) => reason.map(|reason| reason.as_str().to_owned()),
    };
    if class.is_some() && result != AckResult::Quarantined {
        return Err(ApiError::invalid_field(
            &format!("{at}class"),
            "goes only with result quarantined; leave it out otherwise",
        ));
    }
    Ok(AckItem { event_id, lease_token, result, reason, class })
}

/// The body of `POST /v1/events` (or a hand-off's follow-up, its fields named after `at`) as
/// a publish of the caller's tenant; a body naming another tenant is refused.
pub fn publish(at: &str, tenant_id: &TenantId, request: PublishRequest) -> Result<Publish, ApiError> {
    if let Some(named) = &request.tenant_id
        && named != tenant_id
    {
        return Err(ApiError::forbidden(
            inbox_api::ProblemCode::TenantMismatch,
            format!(
                "the request names tenant {:?} (in {at}tenant_id) but your token is for tenant {:?}",
                named.as_str(),
                tenant_id.as_str()
            ),
        )
        .with("field", format!("{at}tenant_id")));
    }
    let body = match (request.payload, request.payload_ref) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid_field(
                &format!("{at}payload"),
                "and payload_ref cannot both be set; send one",
            ));
        }
        (Some(payload), None) => EventBody::Json(payload.to_string()),
        (None, Some(r)) => EventBody::Reference(inbox_core::PayloadRef { kind: r.kind, id: r.id }),
        (None, None) => EventBody::Empty,
    };
    Ok(Publish {
        tenant_id: tenant_id.clone(),
        recipients: request.recipients.into_iter().map(Recipient::agent).collect(),
        event_type: request.event_type,
        priority: request.priority.unwrap_or_default(),
        available_at: time(&format!("{at}available_at_utc"), request.available_at_utc.as_deref())?,
        expires_at: time(&format!("{at}expires_at_utc"), request.expires_at_utc.as_deref())?,
        deduplication_key: request.deduplication_key,
        // Kept only under the tenant's fair claims: `ops::inbox::fair_publish` decides.
        fairness_key: request.fairness_key,
        correlation: request.correlation,
        body,
        max_attempts: request.max_attempts.map(MaxAttempts::get),
    })
}

/// An optional session id, refused by the wire field's name when malformed.
pub fn session_id(field: &str, text: Option<&str>) -> Result<Option<SessionId>, ApiError> {
    text.map(SessionId::new).transpose().map_err(|e| ApiError::invalid_field(field, e.problem))
}

pub fn time(field: &str, text: Option<&str>) -> Result<Option<UnixMillis>, ApiError> {
    text.map(|t| inbox_api::time::parse_utc(t).map(UnixMillis).map_err(|e| ApiError::invalid_field(field, e)))
        .transpose()
}

/// Decodes base64url or standard base64, padded or not.
pub fn decode_base64(field: &str, text: &str) -> Result<Vec<u8>, ApiError> {
    let text = text.trim();
    for engine in [&URL_SAFE_NO_PAD, &URL_SAFE, &STANDARD, &STANDARD_NO_PAD] {
        if let Ok(bytes) = engine.decode(text) {
            return Ok(bytes);
        }
    }
    Err(ApiError::invalid_field(field, "is not base64 or base64url"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_algorithms_are_the_registry_names() {
        for wire in SigningAlgorithm::ALL {
            assert_eq!(algorithm(wire).name(), wire.as_str());
            assert_eq!(serde_json::to_value(wire).unwrap(), wire.as_str());
        }
    }
}
