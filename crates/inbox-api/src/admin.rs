//! Operators' endpoints: parked (dead-lettered and quarantined) events and inbox backlogs.

use serde::{Deserialize, Serialize};

use crate::{EventEnvelope, ItemError};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ParkedEventsResponse {
    pub events: Vec<EventEnvelope>,
}

/// Requeue or purge parked events of one recipient.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ParkedEventsRequest {
    pub recipient_id: String,
    pub event_ids: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ItemResults {
    pub results: Vec<ItemResult>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ItemResult {
    pub event_id: String,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ItemError>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InboxStatsResponse {
    pub inboxes: Vec<InboxStatsView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InboxStatsView {
    pub recipient_kind: String,
    pub recipient_id: String,
    pub head_seq: u64,
    /// Events not yet acknowledged or parked.
    pub depth: u64,
    pub claimed: u64,
    pub parked: u64,
    pub oldest_unacked_age_seconds: Option<u64>,
}
