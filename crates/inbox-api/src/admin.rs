//! Operators' endpoints over events: parked (dead-lettered and quarantined) events, quarantine
//! and its release, an inbox's events by state, one event with its history, and each inbox's
//! backlog. Every route needs an admin token and stays within its tenant.

use inbox_core::limits::{EventIds, Reason};
use inbox_core::{EventId, QuarantineClass, RecipientId, RecipientKind, SessionId};
use serde::{Deserialize, Serialize};

use crate::{EventEnvelope, ItemError};

/// `GET /v1/admin/parked`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ParkedEventsResponse {
    pub events: Vec<AdminEventView>,
}

/// Requeue or purge parked events of one recipient, or release quarantined ones
/// (`POST /v1/admin/quarantine/release`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ParkedEventsRequest {
    pub recipient_id: RecipientId,
    pub event_ids: EventIds,
}

/// `POST /v1/admin/quarantine`: set available or claimed events aside for a person. A claimed
/// event's lease ends: its holder's later acknowledge or heartbeat is refused. Quarantining a
/// quarantined event again is accepted and changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct QuarantineRequest {
    pub recipient_id: RecipientId,
    pub event_ids: EventIds,
    /// Why, on one line: kept on the event and in its history.
    pub reason: Reason,
    /// `other` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<QuarantineClass>,
}

/// One outcome per named event, in the order named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ItemResults {
    pub results: Vec<ItemResult>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ItemResult {
    pub event_id: EventId,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ItemError>,
}

/// An event as operators see it: the agent's envelope and what an operator needs beside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AdminEventView {
    #[serde(flatten)]
    pub event: EventEnvelope,
    /// Why it was last released, dead-lettered or quarantined, when a reason was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The session that holds (or last held) the event's lease, when the claim named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    /// When the event entered its terminal state (acked, dead letter, quarantined, expired).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal_at_utc: Option<String>,
}

/// Which end of an inbox an events listing starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum EventsOrder {
    /// Lowest `inbox_seq` first: page on with `after_seq`.
    #[default]
    OldestFirst,
    /// Highest `inbox_seq` first: page on with `before_seq`.
    NewestFirst,
}

/// `GET /v1/admin/inboxes/{recipient_id}/events`: in `inbox_seq` order, oldest or newest
/// first; page on with `after_seq` (oldest first) or `before_seq` (newest first) set to the
/// last event's `inbox_seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AdminEventsResponse {
    pub events: Vec<AdminEventView>,
}

/// `GET /v1/admin/inboxes/{recipient_id}/events/{event_id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AdminEventDetail {
    pub event: AdminEventView,
    /// The event has left the live table for the archive (retention): it is kept for the
    /// record and can no longer change.
    pub archived: bool,
    /// Every recorded transition, oldest first (empty when the server records no history).
    pub history: Vec<HistoryEntryView>,
}

/// One transition of an event, as recorded when it happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryEntryView {
    pub at_utc: String,
    /// `claimed`, `acknowledged`, `released`, `lease_expired`, `dead_lettered`,
    /// `quarantined`, `requeued`, `released_from_quarantine` or `expired`.
    pub action: String,
    /// The event's `ack_state` after the transition.
    #[cfg_attr(feature = "openapi", schema(value_type = inbox_core::AckState))]
    pub state: String,
    /// `delivery_attempts` after the transition.
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    /// `agent`, `operator:<subject>` or `scavenger`.
    pub actor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The quarantine class, on a `quarantined` entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<inbox_core::QuarantineClass>))]
    pub class: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InboxStatsResponse {
    pub inboxes: Vec<InboxStatsView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InboxStatsView {
    pub recipient_kind: RecipientKind,
    pub recipient_id: RecipientId,
    pub head_seq: u64,
    /// Events not yet acknowledged or parked: available, retry-scheduled and claimed.
    pub depth: u64,
    pub claimed: u64,
    /// Available events waiting out a retry delay (part of `depth`).
    #[serde(default)]
    pub retry_scheduled: u64,
    pub parked: u64,
    pub oldest_unacked_age_seconds: Option<u64>,
    /// Sessions of this agent neither gone nor superseded.
    #[serde(default)]
    pub online_sessions: u64,
    /// The newest sign of life of any of the agent's sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen_at_utc: Option<String>,
}
