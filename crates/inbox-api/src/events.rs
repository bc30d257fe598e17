//! Publishing: `POST /v1/events`, one event to many recipients, atomically.

use inbox_core::limits::{MaxAttempts, Recipients};
use inbox_core::{
    DeduplicationKey, EventId, EventType, FairnessKey, Priority, RecipientId, RecipientKind, TenantId,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Correlation, PayloadRef};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PublishRequest {
    /// Must equal the token's tenant when present.
    pub tenant_id: Option<TenantId>,
    /// Agent ids; every one gets its own inbox row and sequence number, or none does.
    pub recipients: Recipients,
    pub event_type: EventType,
    /// `normal` when absent.
    pub priority: Option<Priority>,
    /// Delayed delivery: not claimable before this time. Also accepted as
    /// `availability_at_utc`, the name every event answers with (seed 001's).
    #[serde(alias = "availability_at_utc")]
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub available_at_utc: Option<String>,
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub expires_at_utc: Option<String>,
    /// Publishing the same key again returns the existing event instead of a second one.
    pub deduplication_key: Option<DeduplicationKey>,
    /// The source this event is fair to (a room, a project, a person). Used only when the
    /// tenant's policy turns `fair_claims` on, where it defaults to the publishing token's
    /// subject: within one priority, claims then interleave keys, quiet ones first, so one
    /// key's backlog cannot hold another key's events back. Ignored otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairness_key: Option<FairnessKey>,
    #[serde(default)]
    pub correlation: Correlation,
    /// Inline JSON payload (at most the server's payload limit).
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub payload: Option<Value>,
    pub payload_ref: Option<PayloadRef>,
    /// Delivery attempts before dead-lettering.
    pub max_attempts: Option<MaxAttempts>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PublishResponse {
    pub deliveries: Vec<DeliveryView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeliveryView {
    pub recipient_kind: RecipientKind,
    pub recipient_id: RecipientId,
    pub event_id: EventId,
    pub inbox_seq: u64,
    /// The deduplication key matched an earlier event, which is returned instead.
    pub deduplicated: bool,
}
