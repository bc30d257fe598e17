//! Conversions between the store's domain types and the wire types of `inbox-api`, and the
//! parsing of wire strings into typed values (each failure names its field).

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use inbox_api::time::format_utc;
use inbox_api::{AdminEventView, DeliveryView, EventEnvelope, PayloadRef};
use inbox_core::{AckResult, EventBody, EventId, LeaseToken, Priority, UnixMillis};
use inbox_store::{Delivery, EventRecord};

use crate::error::ApiError;

pub fn envelope(record: &EventRecord, now: UnixMillis) -> EventEnvelope {
    let life = &record.lifecycle;
    let (payload, payload_ref) = match &record.body {
        EventBody::Empty => (None, None),
        // Stored text was validated as JSON when published.
        EventBody::Json(text) => (serde_json::from_str(text).ok(), None),
        EventBody::Reference(r) => (None, Some(PayloadRef { kind: r.kind.clone(), id: r.id.clone() })),
    };
    let c = &record.correlation;
    EventEnvelope {
        event_id: record.event_id.to_string(),
        tenant_id: record.inbox.tenant_id.to_string(),
        recipient_kind: record.inbox.recipient.kind.to_string(),
        recipient_id: record.inbox.recipient.id.to_string(),
        inbox_seq: record.inbox_seq.get(),
        event_type: record.event_type.to_string(),
        priority: record.priority.as_str().to_owned(),
        availability_at_utc: format_utc(life.available_at.get()),
        expires_at_utc: life.expires_at.map(|t| format_utc(t.get())),
        deduplication_key: record.deduplication_key.as_ref().map(|k| k.to_string()),
        ack_state: life.display_state(now).to_owned(),
        delivery_attempts: life.delivery_attempts,
        visibility_lease_until_utc: life
            .lease
            .filter(|_| life.state == inbox_core::AckState::Claimed)
            .map(|l| format_utc(l.until.get())),
        next_retry_at_utc: life.next_retry_at.filter(|at| *at > now).map(|t| format_utc(t.get())),
        dead_letter_state: life.dead_letter_reason.as_str().to_owned(),
        correlation: c.clone(),
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
        session_id: record.lease_owner_session_id.as_ref().map(ToString::to_string),
        terminal_at_utc: record.terminal_at.map(|t| format_utc(t.get())),
    }
}

pub fn delivery(d: &Delivery) -> DeliveryView {
    DeliveryView {
        recipient_kind: d.recipient.kind.to_string(),
        recipient_id: d.recipient.id.to_string(),
        event_id: d.event_id.to_string(),
        inbox_seq: d.inbox_seq.get(),
        deduplicated: d.deduplicated,
    }
}

pub fn event_id(field: &str, text: &str) -> Result<EventId, ApiError> {
    EventId::parse(text).map_err(|e| ApiError::invalid_field(field, e.problem))
}

pub fn lease_token(field: &str, text: &str) -> Result<LeaseToken, ApiError> {
    LeaseToken::parse(text).map_err(|e| ApiError::invalid_field(field, e.problem))
}

pub fn priority(text: Option<&str>) -> Result<Priority, ApiError> {
    match text {
        None => Ok(Priority::Normal),
        Some(text) => Priority::ALL.into_iter().find(|p| p.as_str() == text).ok_or_else(|| {
            ApiError::invalid_field("priority", format!("is {text:?}; use urgent, high, normal or low"))
        }),
    }
}

pub fn ack_result(field: &str, text: Option<&str>) -> Result<AckResult, ApiError> {
    match text {
        None | Some("completed") => Ok(AckResult::Completed),
        Some("failed") => Ok(AckResult::Failed),
        Some(other) => Err(ApiError::invalid_field(field, format!("is {other:?}; use completed or failed"))),
    }
}

pub fn time(field: &str, text: Option<&str>) -> Result<Option<UnixMillis>, ApiError> {
    text.map(|t| inbox_api::time::parse_utc(t).map(UnixMillis).map_err(|e| ApiError::invalid_field(field, e)))
        .transpose()
}

/// Seconds from the wire to milliseconds, refusing values that would overflow.
pub fn seconds_to_ms(field: &str, seconds: u64) -> Result<u64, ApiError> {
    seconds.checked_mul(1_000).ok_or_else(|| ApiError::invalid_field(field, "is far too large"))
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
