//! `POST /v1/agent-sessions/subscribe`: an agent announces a session and learns how to be
//! told about new work.

use inbox_core::limits::DeviceId;
use inbox_core::{InboxSeq, RecipientId, RecipientKind, SessionId, TenantId};
use serde::{Deserialize, Serialize};

/// How an agent learns of new work. [`Transport::ALL`] is the order the server recommends
/// them in: SSE is the cheapest push that survives proxies, WebSocket when the client cannot
/// do SSE, then long poll and poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    Sse,
    Websocket,
    LongPoll,
    Poll,
}

impl Transport {
    pub const ALL: [Transport; 4] =
        [Transport::Sse, Transport::Websocket, Transport::LongPoll, Transport::Poll];

    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Sse => "sse",
            Transport::Websocket => "websocket",
            Transport::LongPoll => "long-poll",
            Transport::Poll => "poll",
        }
    }

    /// A stream (SSE or WebSocket), which needs the `stream.subscribe` scope.
    pub fn is_stream(self) -> bool {
        matches!(self, Transport::Sse | Transport::Websocket)
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SubscribeRequest {
    pub tenant_id: Option<TenantId>,
    pub agent_id: Option<RecipientId>,
    pub device_id: Option<DeviceId>,
    /// Any of `sse`, `websocket`, `long-poll`, `poll`; empty means all. The server
    /// recommends the first of sse, websocket, long-poll, poll the client supports.
    #[serde(default)]
    pub supported_transports: Vec<Transport>,
    pub last_seen_seq: Option<InboxSeq>,
    #[serde(default)]
    pub wants_claims: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SubscribeResponse {
    pub session_id: SessionId,
    pub recipient: RecipientView,
    pub current_head_seq: u64,
    #[cfg_attr(feature = "openapi", schema(value_type = Transport))]
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
    pub tenant_id: TenantId,
    pub recipient_kind: RecipientKind,
    pub recipient_id: RecipientId,
}
