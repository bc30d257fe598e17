//! Turning `agent_inbox` rows into [`EventRecord`]s and lifecycles back into column values.

use inbox_core::{
    AckState, Correlation, DeadLetterReason, DeduplicationKey, EventBody, EventId, EventLifecycle, EventType,
    InboxSeq, Lease, LeaseTokenHash, PayloadRef, Priority, Recipient, RecipientId, RecipientKey,
    RecipientKind, SessionId, TenantId, UnixMillis,
};

use crate::db::{Arg, DbRow};
use crate::{EventRecord, StoreError};

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

fn count(value: i64, col: &str) -> Result<u32, StoreError> {
    u32::try_from(value).map_err(|_| corrupt(format!("{col} is {value}")))
}

pub(crate) fn seq(value: i64) -> Result<InboxSeq, StoreError> {
    u64::try_from(value).map(InboxSeq).map_err(|_| corrupt(format!("sequence {value} is negative")))
}

pub(crate) fn seq_arg(seq: InboxSeq) -> Arg<'static> {
    // InboxSeq is bounded by i64::MAX at construction and in the database.
    Arg::I64(i64::try_from(seq.get()).unwrap_or(i64::MAX))
}

pub(crate) fn recipient_from_row(row: &DbRow) -> Result<Recipient, StoreError> {
    Ok(Recipient {
        kind: RecipientKind::new(row.string("recipient_kind")?).map_err(corrupt)?,
        id: RecipientId::new(row.string("recipient_id")?).map_err(corrupt)?,
    })
}

pub(crate) fn event_from_row(row: &DbRow) -> Result<EventRecord, StoreError> {
    let millis = |col: &str| row.i64(col).map(UnixMillis);
    let opt_millis = |col: &str| row.opt_i64(col).map(|v| v.map(UnixMillis));
    let state_text = row.string("ack_state")?;
    let state = AckState::parse(&state_text).ok_or_else(|| corrupt(format!("ack_state {state_text:?}")))?;
    let reason_text = row.string("dead_letter_state")?;
    let dead_letter_reason = DeadLetterReason::parse(&reason_text)
        .ok_or_else(|| corrupt(format!("dead_letter_state {reason_text:?}")))?;
    let lease = match (row.opt_bytes("lease_token_hash")?, opt_millis("visibility_lease_until_utc")?) {
        (Some(hash), Some(until)) => Some(Lease {
            token_hash: LeaseTokenHash::from_slice(&hash)
                .ok_or_else(|| corrupt("lease_token_hash length"))?,
            until,
        }),
        _ => None,
    };
    let priority_rank = row.i64("priority")?;
    let priority = u8::try_from(priority_rank)
        .ok()
        .and_then(Priority::from_rank)
        .ok_or_else(|| corrupt(format!("priority {priority_rank}")))?;
    let body = match (
        row.opt_string("payload_json")?,
        row.opt_string("payload_ref_type")?,
        row.opt_string("payload_ref_id")?,
    ) {
        (Some(json), _, _) => EventBody::Json(json),
        (None, Some(kind), Some(id)) => EventBody::Reference(PayloadRef { kind, id }),
        _ => EventBody::Empty,
    };
    let opt_text = |col: &str| row.opt_string(col);
    Ok(EventRecord {
        inbox: RecipientKey {
            tenant_id: TenantId::new(row.string("tenant_id")?).map_err(corrupt)?,
            recipient: recipient_from_row(row)?,
        },
        inbox_seq: seq(row.i64("inbox_seq")?)?,
        event_id: EventId::from_slice(&row.bytes("event_id")?).map_err(corrupt)?,
        event_type: EventType::new(row.string("event_type")?).map_err(corrupt)?,
        priority,
        deduplication_key: row
            .opt_string("deduplication_key")?
            .map(DeduplicationKey::new)
            .transpose()
            .map_err(corrupt)?,
        lifecycle: EventLifecycle {
            state,
            delivery_attempts: count(row.i64("delivery_attempts")?, "delivery_attempts")?,
            max_attempts: count(row.i64("max_attempts")?, "max_attempts")?,
            available_at: millis("availability_at_utc")?,
            expires_at: opt_millis("expires_at_utc")?,
            next_retry_at: opt_millis("next_retry_at_utc")?,
            lease,
            dead_letter_reason,
        },
        lease_owner_session_id: row
            .opt_string("lease_owner_session_id")?
            .map(SessionId::new)
            .transpose()
            .map_err(corrupt)?,
        correlation: Correlation {
            company_id: opt_text("company_id")?,
            workspace_id: opt_text("workspace_id")?,
            project_id: opt_text("project_id")?,
            meeting_room_id: opt_text("meeting_room_id")?,
            message_id: opt_text("message_id")?,
            routing_decision_id: opt_text("routing_decision_id")?,
            memory_update_id: opt_text("memory_update_id")?,
            assignment_id: opt_text("assignment_id")?,
        },
        body,
        created_at: millis("created_at_utc")?,
        acked_at: opt_millis("acked_at_utc")?,
        updated_at: millis("updated_at_utc")?,
        terminal_at: opt_millis("terminal_at_utc")?,
        last_error: opt_text("last_error")?,
    })
}

/// A row read with `event_columns_with_history!` (`queries.rs`): the record and its `history_json`.
pub(crate) fn event_with_history_from_row(row: &DbRow) -> Result<(EventRecord, Option<String>), StoreError> {
    Ok((event_from_row(row)?, row.opt_string("history_json")?))
}

/// Pushes the values of one row for `queries::insert_events`, in `EVENT_COLUMNS` order.
pub(crate) fn push_event_values<'a>(record: &'a EventRecord, args: &mut Vec<Arg<'a>>) {
    let life = &record.lifecycle;
    let (payload_json, ref_type, ref_id) = match &record.body {
        EventBody::Empty => (None, None, None),
        EventBody::Json(json) => (Some(json.as_str()), None, None),
        EventBody::Reference(r) => (None, Some(r.kind.as_str()), Some(r.id.as_str())),
    };
    args.extend([
        Arg::Str(record.inbox.tenant_id.as_str()),
        Arg::Str(record.inbox.recipient.kind.as_str()),
        Arg::Str(record.inbox.recipient.id.as_str()),
        crate::inbox::record::seq_arg(record.inbox_seq),
        Arg::Bytes(record.event_id.as_bytes()),
        Arg::Str(record.event_type.as_str()),
        Arg::I64(i64::from(record.priority.rank())),
        Arg::I64(life.available_at.get()),
        Arg::OptI64(life.expires_at.map(UnixMillis::get)),
        Arg::OptStr(record.deduplication_key.as_ref().map(DeduplicationKey::as_str)),
        Arg::Str(life.state.as_str()),
        Arg::I64(i64::from(life.delivery_attempts)),
        Arg::I64(i64::from(life.max_attempts)),
        Arg::OptI64(life.lease.map(|l| l.until.get())),
        Arg::OptBytes(life.lease.as_ref().map(|l| l.token_hash.0.as_slice())),
        Arg::OptStr(record.lease_owner_session_id.as_ref().map(SessionId::as_str)),
        Arg::OptI64(life.next_retry_at.map(UnixMillis::get)),
        Arg::Str(life.dead_letter_reason.as_str()),
    ]);
    args.extend(record.correlation.fields().map(|(_, value)| Arg::OptStr(value)));
    args.extend([
        Arg::OptStr(payload_json),
        Arg::OptStr(ref_type),
        Arg::OptStr(ref_id),
        Arg::I64(record.created_at.get()),
        Arg::OptI64(record.acked_at.map(UnixMillis::get)),
        Arg::I64(record.updated_at.get()),
        Arg::OptI64(record.terminal_at.map(UnixMillis::get)),
        Arg::OptStr(record.last_error.as_deref()),
    ]);
}

/// The binds of `queries::SAVE_LIFECYCLE` (and, after the history, of
/// `SAVE_LIFECYCLE_AND_HISTORY`) for one record.
pub(crate) fn save_lifecycle_args(record: &EventRecord) -> Vec<Arg<'_>> {
    let life = &record.lifecycle;
    let payload_json = match &record.body {
        EventBody::Json(json) => Some(json.as_str()),
        _ => None,
    };
    vec![
        Arg::Str(life.state.as_str()),
        Arg::I64(i64::from(life.delivery_attempts)),
        Arg::I64(i64::from(life.max_attempts)),
        Arg::I64(life.available_at.get()),
        Arg::OptI64(life.next_retry_at.map(UnixMillis::get)),
        Arg::OptI64(life.lease.map(|l| l.until.get())),
        Arg::OptBytes(life.lease.as_ref().map(|l| l.token_hash.0.as_slice())),
        Arg::OptStr(record.lease_owner_session_id.as_ref().map(SessionId::as_str)),
        Arg::Str(life.dead_letter_reason.as_str()),
        Arg::OptStr(payload_json),
        Arg::OptI64(record.acked_at.map(UnixMillis::get)),
        Arg::OptI64(record.terminal_at.map(UnixMillis::get)),
        Arg::OptStr(record.last_error.as_deref()),
        Arg::I64(record.updated_at.get()),
        Arg::Str(record.inbox.tenant_id.as_str()),
        Arg::Str(record.inbox.recipient.kind.as_str()),
        Arg::Str(record.inbox.recipient.id.as_str()),
        seq_arg(record.inbox_seq),
    ]
}

/// Applies the bookkeeping that follows a state change: ack time, terminal time, and the
/// payload cleared on acknowledgement (the metadata row stays for audit and retention).
pub(crate) fn settle(record: &mut EventRecord, next: EventLifecycle, now: UnixMillis) {
    let was_terminal = record.lifecycle.state.is_terminal();
    record.lifecycle = next;
    record.updated_at = now;
    let state = record.lifecycle.state;
    if state == AckState::Acked {
        record.acked_at.get_or_insert(now);
        if matches!(record.body, EventBody::Json(_)) {
            record.body = EventBody::Empty;
        }
    }
    if state.is_terminal() && !was_terminal {
        record.terminal_at = Some(now);
    }
    if !state.is_terminal() {
        record.terminal_at = None;
    }
    // A parked event keeps the session that held it last, so operators see who set it aside.
    if state != AckState::Claimed && !state.is_parked() {
        record.lease_owner_session_id = None;
    }
}
