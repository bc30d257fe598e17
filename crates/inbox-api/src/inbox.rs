//! The inbox contract of seed 001: poll after cursor, head, claim, acknowledge, release and
//! heartbeat. `tenant_id` and `recipient_id` in a request are optional: the access token names
//! both, and a request that names others is refused.

use inbox_core::limits::{
    BATCH_EVENTS_MAX, BatchLimit, EventIds, FOLLOW_UPS_MAX, LeaseSeconds, Reason, ReleaseReason,
    RetryAfterSeconds, WaitSeconds,
};
use inbox_core::{
    AckResult, DeduplicationKey, EventId, EventType, InboxSeq, LeaseToken, QuarantineClass, RecipientId,
    RecipientKind, SessionId, TenantId, bounded_list,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ItemError;

/// An event as agents see it: seed 001's envelope, with the payload when there is one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventEnvelope {
    pub event_id: EventId,
    pub tenant_id: TenantId,
    pub recipient_kind: RecipientKind,
    pub recipient_id: RecipientId,
    pub inbox_seq: u64,
    pub event_type: EventType,
    #[cfg_attr(feature = "openapi", schema(value_type = inbox_core::Priority))]
    pub priority: String,
    pub availability_at_utc: String,
    pub expires_at_utc: Option<String>,
    pub deduplication_key: Option<DeduplicationKey>,
    /// `retry_scheduled` is an `available` event waiting for its retry time.
    #[cfg_attr(feature = "openapi", schema(value_type = inbox_core::EventState))]
    pub ack_state: String,
    pub delivery_attempts: u32,
    pub visibility_lease_until_utc: Option<String>,
    pub next_retry_at_utc: Option<String>,
    /// Why the event is parked (`none` while it is not).
    #[cfg_attr(feature = "openapi", schema(value_type = inbox_core::DeadLetterReason))]
    pub dead_letter_state: String,
    pub correlation: Correlation,
    /// Inline JSON payload; cleared once the event is acknowledged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub payload: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_ref: Option<PayloadRef>,
    pub created_at_utc: String,
}

/// Ids of the domain objects an event concerns: the core's type, which the wire carries as is.
pub use inbox_core::Correlation;

/// Where the data of an event lives when it is not inline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PayloadRef {
    pub kind: String,
    pub id: String,
}

/// `POST /v1/inbox/poll-after-cursor`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PollRequest {
    pub tenant_id: Option<TenantId>,
    pub recipient_id: Option<RecipientId>,
    /// Events with a larger `inbox_seq` are returned; 0 starts at the beginning.
    #[serde(default)]
    pub after_seq: InboxSeq,
    /// Default 100.
    pub limit: Option<BatchLimit>,
    /// Long poll: wait up to this many seconds for an event past the cursor (at most the
    /// server's `long_poll_wait_max`).
    pub wait_seconds: Option<WaitSeconds>,
    /// Only events a claim could take now.
    #[serde(default)]
    pub include_claimable_only: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PollResponse {
    pub head_seq: u64,
    pub events: Vec<EventEnvelope>,
    /// Send as `after_seq` next time.
    pub next_cursor: u64,
    pub more_available: bool,
    /// A long poll ended because events behind the cursor went back to the inbox (an
    /// operator's requeue or release from quarantine): claim, since no poll after the cursor
    /// shows them. Only ever present as `true`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nudged: bool,
}

/// `GET /v1/inbox/head`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeadResponse {
    pub tenant_id: TenantId,
    pub recipient_kind: RecipientKind,
    pub recipient_id: RecipientId,
    pub head_seq: u64,
    /// Cursors below `oldest_available_seq - 1` must resync first.
    pub oldest_available_seq: u64,
}

/// `POST /v1/inbox/claim`: name `event_ids` to claim those, or leave them out to claim the
/// next `limit` claimable events (most urgent first, then oldest).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    pub tenant_id: Option<TenantId>,
    pub recipient_id: Option<RecipientId>,
    /// The session (from subscribe) claiming. Required when the tenant's policy is
    /// single-active-session: a session other than the agent's newest is refused with 409
    /// `session_superseded`, a missing one with 409 `session_required`.
    pub session_id: Option<SessionId>,
    pub event_ids: Option<EventIds>,
    /// Claim-next batch size; default 10.
    pub limit: Option<BatchLimit>,
    /// Lease length; default and maximum are the server's settings.
    pub lease_seconds: Option<LeaseSeconds>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClaimResponse {
    pub claims: Vec<Claim>,
    /// Named events that could not be claimed, each with its reason.
    #[serde(default)]
    pub rejected: Vec<RejectedEvent>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Claim {
    pub event_id: EventId,
    /// Shown once: keep it to acknowledge, release or heartbeat this event.
    pub lease_token: LeaseToken,
    pub visibility_lease_until_utc: String,
    #[cfg_attr(feature = "openapi", schema(value_type = inbox_core::AckState))]
    pub ack_state: String,
    pub event: EventEnvelope,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RejectedEvent {
    pub event_id: EventId,
    pub error: ItemError,
}

/// `POST /v1/inbox/acknowledge`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AcknowledgeRequest {
    pub tenant_id: Option<TenantId>,
    pub recipient_id: Option<RecipientId>,
    pub session_id: Option<SessionId>,
    pub acks: Acks,
}

bounded_list!(
    /// The acknowledgements of one request.
    #[derive(Debug, Clone, PartialEq)]
    Acks(AckEntry), min = 1, max = BATCH_EVENTS_MAX as usize
);

bounded_list!(
    /// A hand-off's publishes.
    #[derive(Debug, Clone, PartialEq)]
    FollowUps(crate::PublishRequest), min = 0, max = FOLLOW_UPS_MAX
);

impl Default for FollowUps {
    fn default() -> Self {
        FollowUps::new(Vec::new()).expect("no follow-ups is a hand-off of none")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AckEntry {
    pub event_id: EventId,
    pub lease_token: LeaseToken,
    /// `completed` (default), `failed` (park the event as a dead letter for an operator) or
    /// `quarantined` (set it aside for a person, never retried: a payload that looks like a
    /// prompt injection, a bad signature; `reason` is then required).
    #[serde(default)]
    pub result: Option<AckResult>,
    /// Why, on one line. Required with `result: quarantined`; with `failed` it is kept as the
    /// dead letter's reason; refused with `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// The kind of anomaly, for operators and metrics: `prompt_injection`,
    /// `malformed_payload`, `bad_signature`, `policy` or `other` (the default). Only with
    /// `result: quarantined`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<QuarantineClass>,
    /// A hand-off: publishes (each the body of `POST /v1/events`) committed in the
    /// same transaction as this acknowledgement, and only while its lease holds; a stale lease
    /// refuses both. Each gets the deduplication key `handoff:{event_id}:{index}`, so a
    /// retried request answers the first publishes. Only with `result: completed`; needs the
    /// `events.handoff` (or `events.publish`) scope; recipients are agents of the token's
    /// tenant.
    #[serde(default, skip_serializing_if = "FollowUps::is_empty")]
    pub follow_ups: FollowUps,
    /// For an `a2a.message` event (a message an A2A client sent this agent): its task's outcome,
    /// committed with this acknowledgement and only while its lease holds, as a hand-off is.
    /// Not with `follow_ups`. An acknowledgement without it still ends the task, without a
    /// result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a: Option<crate::a2a::A2aReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AcknowledgeResponse {
    pub results: Vec<AckOutcome>,
}

/// One ack's outcome: `ack_state` when it was accepted (repeats included), `error` when not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AckOutcome {
    pub event_id: EventId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<inbox_core::AckState>))]
    pub ack_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ItemError>,
    /// A hand-off's publishes, one per follow-up in request order (on a retry the first ones,
    /// marked `deduplicated`); absent for a plain acknowledgement or a refused one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub follow_ups: Vec<crate::PublishResponse>,
}

/// `POST /v1/inbox/release`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    pub tenant_id: Option<TenantId>,
    pub recipient_id: Option<RecipientId>,
    pub event_id: EventId,
    pub lease_token: LeaseToken,
    pub reason: Option<ReleaseReason>,
    /// Not claimable again before this many seconds.
    #[serde(default)]
    pub retry_after_seconds: RetryAfterSeconds,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReleaseResponse {
    pub event_id: EventId,
    #[cfg_attr(feature = "openapi", schema(value_type = inbox_core::AckState))]
    pub ack_state: String,
    pub next_retry_at_utc: Option<String>,
}

/// `POST /v1/inbox/heartbeat`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    pub tenant_id: Option<TenantId>,
    pub recipient_id: Option<RecipientId>,
    pub session_id: Option<SessionId>,
    pub leases: Leases,
}

bounded_list!(
    /// The leases one heartbeat extends.
    #[derive(Debug, Clone, PartialEq)]
    Leases(HeartbeatEntry), min = 1, max = BATCH_EVENTS_MAX as usize
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HeartbeatEntry {
    pub event_id: EventId,
    pub lease_token: LeaseToken,
    /// At most the server's `lease_max`.
    pub extend_by_seconds: LeaseSeconds,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeartbeatResponse {
    pub leases: Vec<HeartbeatOutcome>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeartbeatOutcome {
    pub event_id: EventId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility_lease_until_utc: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ItemError>,
}

/// `GET /v1/inbox/resync`: what to rebuild from after `cursor_reset_required`. Open events come
/// in pages: while `more_available`, ask again with `?after_seq=` the last open event's
/// `inbox_seq`, and keep the first page's `resume_after_seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResyncResponse {
    pub head_seq: u64,
    pub oldest_available_seq: u64,
    /// Continue polling after this cursor once rebuilt: every older event that still needs
    /// handling is in `open_events`.
    pub resume_after_seq: u64,
    /// Every event not yet acknowledged or parked (available, scheduled or claimed).
    pub open_events: Vec<EventEnvelope>,
    pub more_available: bool,
}

/// Seed 000's `GET /api/v1/agents/{agent_id}/inbox` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentInboxPage {
    pub events: Vec<AgentInboxEvent>,
    pub next_cursor: u64,
    pub has_more: bool,
    pub head_seq: u64,
}

/// An event as seed 000's routes answer it: the canonical envelope with seed 000's names
/// beside it, so clients written to either seed read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentInboxEvent {
    #[serde(flatten)]
    pub event: EventEnvelope,
    /// Seed 000's name for `inbox_seq`.
    pub sequence_number: u64,
    /// Seed 000's single correlation id: the most specific id of `correlation` (message,
    /// routing decision, memory update, assignment, meeting room, project, workspace,
    /// company), if any.
    pub correlation_id: Option<String>,
}

impl From<EventEnvelope> for AgentInboxEvent {
    fn from(event: EventEnvelope) -> Self {
        let c = &event.correlation;
        let correlation_id = [
            &c.message_id,
            &c.routing_decision_id,
            &c.memory_update_id,
            &c.assignment_id,
            &c.meeting_room_id,
            &c.project_id,
            &c.workspace_id,
            &c.company_id,
        ]
        .into_iter()
        .find_map(|id| id.clone());
        AgentInboxEvent { sequence_number: event.inbox_seq, correlation_id, event }
    }
}

/// Seed 000's single-event release body (`POST .../inbox/{event_id}/release`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReleaseOneRequest {
    pub lease_token: LeaseToken,
    pub reason: Option<ReleaseReason>,
    #[serde(default)]
    pub retry_after_seconds: RetryAfterSeconds,
}

/// Seed 000's single-event ack body (`POST .../inbox/{event_id}/ack`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AckOneRequest {
    pub lease_token: LeaseToken,
    /// `completed` (default), `failed` or `quarantined` (with `reason`); `reason` and `class`
    /// as in [`AckEntry`].
    #[serde(default)]
    pub result: Option<AckResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<QuarantineClass>,
}
