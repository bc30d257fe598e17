//! The store's requests, records and receipts: plain data, checked on the way in.

use inbox_core::{
    AckResult, AckState, Correlation, DeduplicationKey, EventBody, EventId, EventLifecycle, EventType,
    FairnessKey, InboxSeq, LeaseToken, Priority, QuarantineClass, Recipient, RecipientKey, SessionId,
    TenantId, UnixMillis,
};

pub use inbox_core::EventState;

use crate::Field;
use crate::inbox::history::{Actor, HistoryEntry};
use crate::{StoreConfig, StoreError};

/// Most delivery attempts a publisher may give one event (`max_attempts`); the server's own
/// default for events (the `max_attempts` setting) has the same bound.
pub use inbox_core::limits::DELIVERY_ATTEMPTS_MAX;

/// One event for one or more recipients, published atomically: every recipient gets its own
/// inbox row and sequence number, or none does.
#[derive(Debug, Clone)]
pub struct Publish {
    pub tenant_id: TenantId,
    pub recipients: Vec<Recipient>,
    pub event_type: EventType,
    pub priority: Priority,
    /// Delayed delivery: not claimable before this time. Defaults to now.
    pub available_at: Option<UnixMillis>,
    /// Past this time an unclaimed event becomes `expired`.
    pub expires_at: Option<UnixMillis>,
    /// Publishing the same key to the same recipient again returns the existing event.
    pub deduplication_key: Option<DeduplicationKey>,
    /// The source this event is fair to: with a key, the event gets a fair rank, which fair
    /// claims ([`ClaimOrder::Fair`]) serve by (`fairness.rs`). The server sets it only for
    /// tenants whose policy turns fair claims on.
    pub fairness_key: Option<FairnessKey>,
    pub correlation: Correlation,
    pub body: EventBody,
    /// Delivery attempts before dead-lettering; defaults to the store's setting.
    pub max_attempts: Option<u32>,
}

impl Publish {
    /// A publish with default options, for tests and simple callers.
    pub fn new(
        tenant_id: TenantId,
        recipients: Vec<Recipient>,
        event_type: EventType,
        body: EventBody,
    ) -> Self {
        Self {
            tenant_id,
            recipients,
            event_type,
            priority: Priority::Normal,
            available_at: None,
            expires_at: None,
            deduplication_key: None,
            fairness_key: None,
            correlation: Correlation::default(),
            body,
            max_attempts: None,
        }
    }

    /// Refuses a publish whose expiry has come by `now`: it could never be delivered.
    pub(crate) fn check_unexpired(&self, now: UnixMillis) -> Result<(), StoreError> {
        match self.expires_at {
            Some(at) if at <= now => Err(StoreError::invalid(Field::ExpiresAt, "is already in the past")),
            _ => Ok(()),
        }
    }

    /// Checks every limit and returns the recipients in canonical (lock) order, deduplicated.
    pub(crate) fn checked_recipients(&self, config: &StoreConfig) -> Result<Vec<Recipient>, StoreError> {
        if self.recipients.is_empty() {
            return Err(StoreError::invalid(Field::Recipients, "must name at least one recipient"));
        }
        if self.recipients.len() > config.fanout_recipients_max {
            return Err(StoreError::invalid(
                Field::Recipients,
                format!(
                    "names {} recipients; the limit is {}",
                    self.recipients.len(),
                    config.fanout_recipients_max
                ),
            ));
        }
        let bytes = self.body.json_bytes();
        if bytes > config.payload_bytes_limit {
            return Err(StoreError::PayloadTooLarge { bytes, limit: config.payload_bytes_limit });
        }
        if let EventBody::Reference(reference) = &self.body {
            reference.validate().map_err(|e| {
                let field =
                    if e.field.ends_with("kind") { Field::PayloadRefKind } else { Field::PayloadRefId };
                StoreError::invalid(field, e.problem)
            })?;
        }
        // The problem names which id, since the field is the whole of `correlation`.
        self.correlation.validate().map_err(|e| StoreError::invalid(Field::Correlation, e.to_string()))?;
        if let (Some(available), Some(expires)) = (self.available_at, self.expires_at)
            && expires <= available
        {
            return Err(StoreError::invalid(Field::ExpiresAt, "must be later than available_at_utc"));
        }
        if self.max_attempts == Some(0) || self.max_attempts.is_some_and(|n| n > DELIVERY_ATTEMPTS_MAX) {
            return Err(StoreError::invalid(
                Field::MaxAttempts,
                format!("must be between 1 and {DELIVERY_ATTEMPTS_MAX}"),
            ));
        }
        let mut recipients = self.recipients.clone();
        recipients.sort();
        recipients.dedup();
        Ok(recipients)
    }
}

/// Where one recipient's copy of a published event landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub recipient: Recipient,
    pub event_id: EventId,
    pub inbox_seq: InboxSeq,
    /// The deduplication key matched an existing event, which is returned instead.
    pub deduplicated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishReceipt {
    /// One per distinct recipient, in canonical order.
    pub deliveries: Vec<Delivery>,
    /// The `outbox_signal` row written with the publish; none when every recipient deduplicated.
    pub outbox_id: Option<i64>,
}

/// A stored event: the envelope of seed 001, its lifecycle, and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    pub inbox: RecipientKey,
    pub inbox_seq: InboxSeq,
    pub event_id: EventId,
    pub event_type: EventType,
    pub priority: Priority,
    pub deduplication_key: Option<DeduplicationKey>,
    pub lifecycle: EventLifecycle,
    pub lease_owner_session_id: Option<SessionId>,
    pub correlation: Correlation,
    /// Inline JSON is cleared when the event is acknowledged; the metadata stays.
    pub body: EventBody,
    pub created_at: UnixMillis,
    pub acked_at: Option<UnixMillis>,
    pub updated_at: UnixMillis,
    /// When the event entered a terminal state; retention counts from here.
    pub terminal_at: Option<UnixMillis>,
    pub last_error: Option<String>,
}

impl EventRecord {
    pub fn state(&self) -> AckState {
        self.lifecycle.state
    }
}

/// Read the inbox after a cursor without changing anything.
#[derive(Debug, Clone)]
pub struct PollQuery {
    pub inbox: RecipientKey,
    pub after_seq: InboxSeq,
    pub limit: u32,
    /// Only events a claim could take right now.
    pub claimable_only: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollPage {
    pub head_seq: InboxSeq,
    pub events: Vec<EventRecord>,
    /// Pass as `after_seq` next time: the last event returned, or the same cursor if none.
    pub next_cursor: InboxSeq,
    pub more_available: bool,
}

/// A recipient's newest sequence number and the oldest one still retained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InboxHead {
    pub head_seq: InboxSeq,
    pub oldest_available_seq: InboxSeq,
}

impl InboxHead {
    pub const EMPTY: InboxHead = InboxHead { head_seq: InboxSeq(0), oldest_available_seq: InboxSeq(1) };
}

/// Claim the next claimable events: most urgent first, then oldest.
#[derive(Debug, Clone)]
pub struct ClaimNext {
    pub inbox: RecipientKey,
    pub session_id: Option<SessionId>,
    pub limit: u32,
    pub lease_ms: Option<u64>,
    pub order: ClaimOrder,
}

/// What a tenant's quotas count (`Inbox::tenant_usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantUsage {
    /// Events not yet acknowledged or parked.
    pub pending_events: u64,
    /// The inline payload bytes they hold.
    pub stored_bytes: u64,
}

/// The order a claim takes events in, within one priority.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ClaimOrder {
    /// Oldest first: sequence order.
    #[default]
    Sequence,
    /// Interleaved across fairness keys, quiet keys first (`fairness.rs`); events without a
    /// key first, in sequence order.
    Fair,
}

/// Claim these events, each with its own outcome.
#[derive(Debug, Clone)]
pub struct ClaimByIds {
    pub inbox: RecipientKey,
    pub session_id: Option<SessionId>,
    pub event_ids: Vec<EventId>,
    pub lease_ms: Option<u64>,
}

/// A successful claim. The token is shown here once; the store keeps only its hash.
#[derive(Debug, Clone)]
pub struct ClaimedEvent {
    pub event: EventRecord,
    pub lease_token: LeaseToken,
    pub lease_until: UnixMillis,
}

#[derive(Debug, Clone)]
pub struct AckItem {
    pub event_id: EventId,
    pub lease_token: LeaseToken,
    pub result: AckResult,
    /// Why: required to quarantine (1 to 200 bytes without control characters), kept with a
    /// failed result too (in `last_error` and the history); ignored when completed.
    pub reason: Option<String>,
    /// What kind of anomaly, with a quarantining result (default `other`); ignored otherwise.
    pub class: Option<QuarantineClass>,
}

impl AckItem {
    /// A plain acknowledgement with no reason or class.
    pub fn new(event_id: EventId, lease_token: LeaseToken, result: AckResult) -> Self {
        Self { event_id, lease_token, result, reason: None, class: None }
    }
}

#[derive(Debug, Clone)]
pub struct Acknowledge {
    pub inbox: RecipientKey,
    /// The session acknowledging, for the history (else the session that claimed is named).
    pub session_id: Option<SessionId>,
    pub items: Vec<AckItem>,
}

/// The state an acknowledged event is in now (`acked`, or `dead_letter` for a failed result).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckReceipt {
    pub event_id: EventId,
    pub state: AckState,
}

#[derive(Debug, Clone)]
pub struct Release {
    pub inbox: RecipientKey,
    pub event_id: EventId,
    pub lease_token: LeaseToken,
    /// Not claimable again before this long from now.
    pub retry_after_ms: u64,
    /// Why the agent gave the event back, kept in `last_error` (at most 200 bytes).
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseReceipt {
    pub event_id: EventId,
    pub state: AckState,
    pub next_retry_at: Option<UnixMillis>,
}

#[derive(Debug, Clone)]
pub struct HeartbeatItem {
    pub event_id: EventId,
    pub lease_token: LeaseToken,
    pub extend_ms: u64,
}

#[derive(Debug, Clone)]
pub struct Heartbeat {
    pub inbox: RecipientKey,
    pub items: Vec<HeartbeatItem>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatReceipt {
    pub event_id: EventId,
    pub lease_until: UnixMillis,
}

/// What one scavenger pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScavengeReport {
    /// Leases past their end, returned to the inbox for a retry.
    pub leases_returned: u64,
    /// Leases past their end whose event had no attempts left.
    pub dead_lettered: u64,
    /// Events past `expires_at`.
    pub expired: u64,
    /// Terminal events moved to `agent_inbox_archive`.
    pub archived: u64,
    /// Archived events older than `archive_retention`, deleted.
    pub pruned: u64,
}

/// Dead-lettered and quarantined events waiting for an operator.
#[derive(Debug, Clone)]
pub struct ParkedQuery {
    pub tenant_id: TenantId,
    pub recipient: Option<Recipient>,
    /// `dead_letter` or `quarantined`; both when absent.
    pub state: Option<AckState>,
    pub limit: u32,
}

/// Backlog of one inbox, for operators and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxStats {
    pub recipient: Recipient,
    /// Events not yet acknowledged or parked: available, scheduled or claimed.
    pub depth: u64,
    pub claimed: u64,
    /// Available events waiting for their retry time (part of `depth`).
    pub retry_scheduled: u64,
    pub parked: u64,
    /// Creation time of the oldest unacknowledged event.
    pub oldest_unacked_at: Option<UnixMillis>,
    pub head_seq: InboxSeq,
    /// Sessions of the agent that are neither gone nor superseded.
    pub online_sessions: u64,
    /// The newest sign of life of any of the agent's sessions.
    pub last_seen_at: Option<UnixMillis>,
}

/// An operator's quarantine of events they name.
#[derive(Debug, Clone)]
pub struct QuarantineRequest {
    /// Why, 1 to 200 bytes without control characters: kept in `last_error` and the history.
    pub reason: String,
    /// Defaults to `other`.
    pub class: Option<QuarantineClass>,
    pub actor: Actor,
}

/// The events of one inbox in one display state, for operators: those between `after_seq`
/// and `before_seq` (each bound exclusive, either one optional), ordered by `inbox_seq`, oldest
/// first (page on with `after_seq`) or newest first (page on with `before_seq`).
#[derive(Debug, Clone)]
pub struct EventsQuery {
    pub inbox: RecipientKey,
    /// Every state when absent.
    pub state: Option<EventState>,
    pub after_seq: Option<InboxSeq>,
    pub before_seq: Option<InboxSeq>,
    pub newest_first: bool,
    pub limit: u32,
}

/// One event with its history, from the live table or the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDetail {
    pub record: EventRecord,
    /// Oldest first.
    pub history: Vec<HistoryEntry>,
    /// Found in `agent_inbox_archive`: retention moved it there.
    pub archived: bool,
}

/// Events published and acknowledged in one minute of a tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinuteActivity {
    /// The minute's first millisecond (`t - t % 60000`).
    pub minute_start: UnixMillis,
    pub published: u64,
    pub acked: u64,
}
