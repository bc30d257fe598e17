//! Operators' views of a tenant beyond its events: agent sessions, callback registrations with
//! their recent deliveries, agents' signing keys (never their material) and activity per
//! minute for the console's charts.

use inbox_core::{KeyId, RecipientId, SessionId};
use serde::{Deserialize, Serialize};

use crate::{CallbackAttemptView, CallbackRegistrationResponse};

/// `GET /v1/admin/sessions`: newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AdminSessionsResponse {
    pub sessions: Vec<AdminSessionView>,
}

/// One agent session: a device or process that subscribed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AdminSessionView {
    pub session_id: SessionId,
    pub agent_id: RecipientId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<String>,
    /// The transport it last used: `sse`, `websocket`, `long-poll` or `poll`.
    pub transport: String,
    /// `active`, `gone` (stopped heartbeating) or `superseded`.
    pub status: String,
    pub connected_at_utc: String,
    pub last_heartbeat_at_utc: String,
    pub last_seen_seq: u64,
    /// The token subject that opened it.
    pub auth_subject: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by_session_id: Option<SessionId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_at_utc: Option<String>,
}

/// `GET /v1/admin/callbacks`: every registration of the tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AdminCallbacksResponse {
    pub registrations: Vec<AdminCallbackView>,
}

/// A registration with its delivery state: what an operator checks when hints stop arriving.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AdminCallbackView {
    #[serde(flatten)]
    pub registration: CallbackRegistrationResponse,
    /// Failed attempts in a row for the current head.
    pub failed_attempts: u32,
    /// Failed deliveries in a row across heads since the last success, and when the first of
    /// them failed: what the disabling bound counts.
    pub consecutive_failures: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since_utc: Option<String>,
    /// When the next delivery may be sent (the rate limit or a retry's backoff).
    pub next_attempt_at_utc: String,
    /// The last deliveries and challenges, newest first (at most 10).
    pub recent_deliveries: Vec<CallbackAttemptView>,
}

/// `GET /v1/admin/agent-keys`: every agent key of the tenant, retired ones included.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AdminAgentKeysResponse {
    pub keys: Vec<AdminAgentKeyView>,
}

/// An agent's request-signing key, without its material.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AdminAgentKeyView {
    pub key_id: KeyId,
    pub agent_id: RecipientId,
    #[cfg_attr(feature = "openapi", schema(value_type = crate::SigningAlgorithm))]
    pub algorithm: String,
    pub created_at_utc: String,
    /// When it stopped (or stops) verifying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_at_utc: Option<String>,
}

/// `GET /v1/admin/activity?minutes=`: one entry per minute, oldest first, the current minute
/// last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ActivityResponse {
    pub minutes: Vec<MinuteActivityView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MinuteActivityView {
    pub minute_start_utc: String,
    /// Events published to the tenant's inboxes in this minute.
    pub published: u64,
    /// Events acknowledged in this minute.
    pub acked: u64,
    /// Unacknowledged events at the end of this minute, reconstructed from today's depth and
    /// the counts of the later minutes (an estimate: dead-lettered, expired and purged
    /// events are not subtracted minute by minute).
    pub depth: u64,
}

/// `GET /v1/admin/quota-refusals`: this node's refusals of the tenant's publishes by its
/// quotas since the node started (each node counts its own), and the latest ones.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QuotaRefusalsResponse {
    /// Publishes refused with 429 `tenant_pending_limit`.
    pub pending_events_refused: u64,
    /// Publishes refused with 507 `tenant_storage_limit`.
    pub stored_bytes_refused: u64,
    /// The latest refusals, newest first (at most 20).
    pub recent: Vec<QuotaRefusalView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QuotaRefusalView {
    pub refused_at_utc: String,
    /// `pending_events` or `stored_bytes`.
    pub limit: String,
    /// The sentence the publisher got.
    pub detail: String,
}
