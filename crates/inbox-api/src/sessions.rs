//! `POST /v1/agent-sessions/subscribe`: an agent announces a session and learns how to be
//! told about new work.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SubscribeRequest {
    pub tenant_id: Option<String>,
    pub agent_id: Option<String>,
    pub device_id: Option<String>,
    /// Any of `sse`, `websocket`, `long-poll`, `poll`; empty means all. The server
    /// recommends the first of sse, websocket, long-poll, poll the client supports.
    #[serde(default)]
    pub supported_transports: Vec<String>,
    pub last_seen_seq: Option<u64>,
    #[serde(default)]
    pub wants_claims: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SubscribeResponse {
    pub session_id: String,
    pub recipient: RecipientView,
    pub current_head_seq: u64,
    pub recommended_transport: String,
    pub poll_after_cursor_url: String,
    /// Relative to this server; carries the session id. Authenticate with the bearer header,
    /// a `?ticket=` from `POST /v1/streams/tickets`, or the stream cookie.
    pub sse_url: Option<String>,
    /// Absolute (`ws://` or `wss://`, from the request's Host) when the Host header is
    /// usable, otherwise relative.
    pub websocket_url: Option<String>,
    pub heartbeat_interval_seconds: u64,
    pub lease_default_seconds: u64,
    pub retention_days: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecipientView {
    pub tenant_id: String,
    pub recipient_kind: String,
    pub recipient_id: String,
}
