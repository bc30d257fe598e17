//! The meeting-room domain of the seeds: rooms with members, where a posted message and one
//! inbox event per member commit in one transaction.

use inbox_core::limits::{Recipients, RoomMembers, RoomName};
use inbox_core::{DeduplicationKey, Priority, RecipientId, RoomId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::DeliveryView;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateRoomRequest {
    pub room_id: RoomId,
    pub name: Option<RoomName>,
    #[serde(default)]
    pub members: RoomMembers,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RoomView {
    pub room_id: RoomId,
    pub name: Option<String>,
    pub members: Vec<RecipientId>,
    pub created_at_utc: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RoomMembersRequest {
    pub members: Recipients,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PostMessageRequest {
    /// The message: any JSON, at most the payload limit.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub body: Value,
    /// Idempotent posting: the same key returns the first message instead of a second.
    pub deduplication_key: Option<DeduplicationKey>,
    /// `normal` when absent.
    pub priority: Option<Priority>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PostMessageResponse {
    pub room_id: RoomId,
    pub message_id: String,
    /// The first post with this deduplication key is returned instead of a new one.
    pub deduplicated: bool,
    pub deliveries: Vec<DeliveryView>,
}
