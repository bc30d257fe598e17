//! Real-time hints: the thin signal SSE and WebSocket streams carry, stream credentials for
//! browsers, the WebSocket request/response envelope, and the session heartbeat.
//!
//! A signal is never the record: it says "your inbox head is at least `head_seq`", and the
//! agent then polls after its own cursor.

use inbox_core::limits::{StreamCookieSeconds, StreamTicketSeconds};
use inbox_core::{InboxSeq, RecipientId, SessionId, TenantId};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// Seed 001's thin signal: the `data` of an SSE `inbox.updated` event, and a WebSocket text
/// message. Duplicates and reordering are harmless: act on the highest `head_seq` seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StreamSignal {
    /// `inbox.updated`, `heartbeat` (WebSocket only), or `session.superseded`: the last message
    /// of a stream whose session a newer subscribe of the same agent superseded (the tenant's
    /// single-active-session policy); the stream then closes. Stop taking work, or subscribe
    /// again to take over.
    pub signal_type: String,
    pub tenant_id: TenantId,
    pub recipient_id: RecipientId,
    pub head_seq: u64,
    /// On `inbox.updated`: how many of the inbox's events were not yet acknowledged or parked
    /// (available, scheduled or claimed) when the hint was written, counted up to 10,000. A
    /// hint for a glance (a badge, a log line), not for deciding what to fetch; absent when it
    /// could not be counted at that moment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approximate_unacked: Option<u64>,
    pub sent_at_utc: String,
    /// Unique per message, for tracing a hint through logs.
    pub delivery_id: String,
}

/// The `data:` of seed 000's SSE route (`event: inbox_updated`): the thin signal with seed
/// 000's `cursor_hint` (the head) beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Seed000Signal {
    #[serde(flatten)]
    pub signal: StreamSignal,
    pub cursor_hint: u64,
}

/// `POST /v1/streams/tickets` (the body is optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StreamTicketRequest {
    /// The agent session the stream will serve; it is touched while the stream is open.
    pub session_id: Option<SessionId>,
    /// How long the ticket stays valid: 1 s to the server's `stream_ticket_ttl` (60 s by
    /// default), which is also the default.
    pub ttl_seconds: Option<StreamTicketSeconds>,
}

/// `POST /v1/streams/cookie` (the body is optional): the ticket's fields, with a cookie's
/// longer bounds, so the document states each credential's own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StreamCookieRequest {
    /// The agent session the stream will serve; it is touched while the stream is open.
    pub session_id: Option<SessionId>,
    /// How long the cookie stays valid: 1 s to the access token lifetime, which is also the
    /// default.
    pub ttl_seconds: Option<StreamCookieSeconds>,
}

/// A single-use stream ticket: put it in the stream URL as `?ticket=` within `expires_in`
/// seconds. It works once, on any node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StreamTicketResponse {
    pub ticket: String,
    pub expires_at_utc: String,
    pub expires_in: u64,
    /// Ready-made URLs carrying the ticket (use one of them, once).
    pub sse_url: String,
    pub websocket_url: String,
}

/// The answer to `POST /v1/streams/cookie`; the credential itself is only in the
/// `Set-Cookie` header (HttpOnly), never in the body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StreamCookieResponse {
    pub expires_at_utc: String,
    pub expires_in: u64,
    pub sse_url: String,
    pub websocket_url: String,
}

/// A WebSocket message from the client: one operation of the HTTP contract.
/// `{"op":"claim","id":"c1","body":{...the JSON of POST /v1/inbox/claim...}}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WsRequest {
    /// `claim`, `acknowledge`, `release` or `heartbeat`.
    pub op: String,
    /// Echoed in the response, so a client can have several requests in flight.
    #[serde(default)]
    pub id: Option<String>,
    /// Exactly the HTTP request body of the operation; absent means `{}`.
    #[serde(default)]
    pub body: Option<Box<RawValue>>,
}

/// The server's answer to a [`WsRequest`]: the HTTP status and body the same request would
/// have had over HTTP (a problem document when `status` is 4xx or 5xx).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WsResponse {
    pub id: Option<String>,
    pub status: u16,
    pub body: serde_json::Value,
}

/// `POST /v1/agent-sessions/{session_id}/heartbeat` (the body is optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SessionHeartbeatRequest {
    /// The highest sequence the agent has processed; never moves the recorded value back.
    pub last_seen_seq: Option<InboxSeq>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionHeartbeatResponse {
    pub session_id: SessionId,
    pub status: String,
    pub heartbeat_interval_seconds: u64,
    /// A session silent past this time is marked gone.
    pub gone_after_utc: String,
}
