//! The A2A 1.0 protocol's JSON (ProtoJSON of `lf.a2a.v1`, camelCase names, enums as their
//! proto names such as `TASK_STATE_COMPLETED`) for the A2A face of each agent: the agent card,
//! the JSON-RPC methods' params and results, and the streaming events. Beside them, the one
//! field of the inbox's own API that speaks A2A: [`A2aReport`], what an agent's acknowledgement
//! reports for the A2A task of the event it acknowledges (`acks[i].a2a`).
//!
//! Unlike the rest of this crate, the A2A shapes follow the A2A specification's rules, not the
//! inbox's: unknown fields are ignored (forward compatibility, spec section 5.7), a field may
//! come in its proto name (`message_id`) as ProtoJSON parsers accept, and an enum may come as
//! its number. The server checks what a shape alone cannot (a part holds exactly one kind of
//! content, a message has parts, ...) and names the field of every refusal.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// The A2A protocol version this server speaks (`A2A-Version`, `Major.Minor`).
pub const A2A_PROTOCOL_VERSION: &str = "1.0";

/// The `protocolBinding` of the JSON-RPC interface.
pub const A2A_JSONRPC_BINDING: &str = "JSONRPC";

/// The event type an A2A message is delivered to an agent's inbox as.
pub const A2A_MESSAGE_EVENT_TYPE: &str = "a2a.message";

/// Defines an A2A enum: serialized by its proto name, read by its proto name, its number, or
/// (as A2A 0.3 and hand-written clients write it) its short name.
macro_rules! a2a_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $number:literal, $wire:literal, $short:literal;)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        pub enum $name {
            $($(#[$vdoc])* #[cfg_attr(feature = "openapi", schema(rename = $wire))] $variant,)+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The proto name, as the wire carries it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire,)+
                }
            }

            /// The short name (`completed`, `input-required`, `user`).
            pub const fn short(self) -> &'static str {
                match self {
                    $($name::$variant => $short,)+
                }
            }

            /// The value a wire string names: the proto name or the short one.
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $($wire | $short => Some($name::$variant),)+
                    _ => None,
                }
            }

            fn from_number(number: i64) -> Option<$name> {
                match number {
                    $($number => Some($name::$variant),)+
                    _ => None,
                }
            }

            fn names() -> String {
                [$($wire,)+].join(", ")
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value = Value::deserialize(deserializer)?;
                let found = match &value {
                    Value::String(text) => $name::parse(text),
                    Value::Number(number) => number.as_i64().and_then($name::from_number),
                    _ => None,
                };
                found.ok_or_else(|| {
                    serde::de::Error::custom(format!("is {value}; use one of {}", $name::names()))
                })
            }
        }
    };
}

a2a_enum! {
    /// Who sent a message.
    Role {
        User = 1, "ROLE_USER", "user";
        Agent = 2, "ROLE_AGENT", "agent";
    }
}

a2a_enum! {
    /// Where a task stands.
    TaskState {
        /// Received and kept; no agent has taken it yet.
        Submitted = 1, "TASK_STATE_SUBMITTED", "submitted";
        /// An agent holds it under a lease.
        Working = 2, "TASK_STATE_WORKING", "working";
        Completed = 3, "TASK_STATE_COMPLETED", "completed";
        Failed = 4, "TASK_STATE_FAILED", "failed";
        Canceled = 5, "TASK_STATE_CANCELED", "canceled";
        /// The agent asks the client for more: a message with this task's id continues it.
        InputRequired = 6, "TASK_STATE_INPUT_REQUIRED", "input-required";
        /// The agent declined it (the inbox's quarantine: set aside for a person).
        Rejected = 7, "TASK_STATE_REJECTED", "rejected";
        AuthRequired = 8, "TASK_STATE_AUTH_REQUIRED", "auth-required";
    }
}

impl TaskState {
    /// Completed, failed, canceled or rejected: nothing changes it any more.
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected)
    }

    /// Waiting for the client (input or authorization): a blocking send and a stream end here.
    pub fn is_interrupted(self) -> bool {
        matches!(self, TaskState::InputRequired | TaskState::AuthRequired)
    }
}

/// One piece of a message or artifact: exactly one of `text`, `raw` (base64), `url` or `data`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Part {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Bytes, base64 (standard or URL-safe alphabet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Any JSON value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    #[serde(default, alias = "media_type", skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Part {
        Part { text: Some(text.into()), ..Part::default() }
    }
}

/// A message between a client and an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Message {
    #[serde(default, alias = "message_id")]
    pub message_id: String,
    #[serde(default, alias = "context_id", skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(default, alias = "task_id", skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    pub role: Role,
    #[serde(default)]
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    #[serde(default, alias = "reference_task_ids", skip_serializing_if = "Vec::is_empty")]
    pub reference_task_ids: Vec<String>,
}

/// What a task produced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Given by the server when the agent leaves it out.
    #[serde(default, alias = "artifact_id")]
    pub artifact_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
}

/// A task's state, with the agent's message about it and when it was reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// RFC 3339 UTC, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

/// A task: the unit of work a message started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub id: String,
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<Map<String, Value>>,
}

/// A change of a task's status, as streams and push notifications carry it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    pub task_id: String,
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<Map<String, Value>>,
}

/// An artifact a task produced, as streams and push notifications carry it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    pub task_id: String,
    pub context_id: String,
    pub artifact: Artifact,
    #[serde(default)]
    pub append: bool,
    #[serde(default)]
    pub last_chunk: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<Map<String, Value>>,
}

/// One event of a stream (`SendStreamingMessage`, `SubscribeToTask`) or push notification:
/// exactly one of its members.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    Task(Task),
    Message(Message),
    StatusUpdate(TaskStatusUpdateEvent),
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

/// `SendMessage`'s and `SendStreamingMessage`'s options.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SendMessageConfiguration {
    #[serde(default, alias = "accepted_output_modes")]
    pub accepted_output_modes: Vec<String>,
    /// A push notification config created with the task, in the same transaction.
    #[serde(default, alias = "task_push_notification_config")]
    pub task_push_notification_config: Option<TaskPushNotificationConfig>,
    #[serde(default, alias = "history_length")]
    pub history_length: Option<i64>,
    /// Answer at once; otherwise the answer waits a few seconds for the agent to finish.
    #[serde(default, alias = "return_immediately")]
    pub return_immediately: bool,
}

/// `SendMessage`'s and `SendStreamingMessage`'s params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SendMessageRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    pub message: Message,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<SendMessageConfiguration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<Map<String, Value>>,
}

/// `SendMessage`'s result: always a task here (the inbox answers no message itself).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SendMessageResponse {
    pub task: Task,
}

/// `GetTask`'s params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct GetTaskRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default)]
    pub id: String,
    #[serde(default, alias = "history_length", skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i64>,
}

/// `ListTasks`' params: newest status first, paged by `pageToken`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ListTasksRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, alias = "context_id", skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    #[serde(default, alias = "page_size", skip_serializing_if = "Option::is_none")]
    pub page_size: Option<i64>,
    #[serde(default, alias = "page_token", skip_serializing_if = "Option::is_none")]
    pub page_token: Option<String>,
    #[serde(default, alias = "history_length", skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i64>,
    /// RFC 3339: only tasks whose status changed after it.
    #[serde(default, alias = "status_timestamp_after", skip_serializing_if = "Option::is_none")]
    pub status_timestamp_after: Option<String>,
    #[serde(default, alias = "include_artifacts", skip_serializing_if = "Option::is_none")]
    pub include_artifacts: Option<bool>,
}

/// `ListTasks`' result. `nextPageToken` is empty on the last page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ListTasksResponse {
    pub tasks: Vec<Task>,
    pub next_page_token: String,
    pub page_size: i64,
    pub total_size: i64,
}

/// `CancelTask`'s params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct CancelTaskRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default)]
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<Map<String, Value>>,
}

/// `SubscribeToTask`'s params. Beyond the specification, the stream resumes after the update
/// a `Last-Event-ID` header names (each event's SSE `id` is the task's update sequence).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SubscribeToTaskRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default)]
    pub id: String,
}

/// How a push notification authenticates to the client's webhook: `Authorization: {scheme}
/// {credentials}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AuthenticationInfo {
    #[serde(default)]
    pub scheme: String,
    /// Never answered back: kept sealed, sent only to the webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<String>,
}

/// A webhook that gets a task's updates (`CreateTaskPushNotificationConfig`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TaskPushNotificationConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Given by the server when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, alias = "task_id")]
    pub task_id: String,
    #[serde(default)]
    pub url: String,
    /// Sent as `X-A2A-Notification-Token`; the notification's RFC 9421 signature (hmac-sha256,
    /// `keyid` = the config's id) is made with SHA-256 of `agent-inbox a2a push v1\0` and the
    /// token. Given by the server when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<AuthenticationInfo>,
}

/// `GetTaskPushNotificationConfig`'s and `DeleteTaskPushNotificationConfig`'s params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TaskPushNotificationConfigRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, alias = "task_id")]
    pub task_id: String,
    #[serde(default)]
    pub id: String,
}

/// `ListTaskPushNotificationConfigs`' params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ListTaskPushNotificationConfigsRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, alias = "task_id")]
    pub task_id: String,
    #[serde(default, alias = "page_size", skip_serializing_if = "Option::is_none")]
    pub page_size: Option<i64>,
    #[serde(default, alias = "page_token", skip_serializing_if = "Option::is_none")]
    pub page_token: Option<String>,
}

/// `ListTaskPushNotificationConfigs`' result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ListTaskPushNotificationConfigsResponse {
    pub configs: Vec<TaskPushNotificationConfig>,
    pub next_page_token: String,
}

/// A JSON-RPC 2.0 request to an agent's A2A endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JsonRpcRequest {
    /// Exactly `"2.0"`.
    pub jsonrpc: String,
    /// A string, a number or null; echoed in the answer.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub id: Value,
    /// `SendMessage`, `SendStreamingMessage`, `GetTask`, `ListTasks`, `CancelTask`,
    /// `SubscribeToTask`, `CreateTaskPushNotificationConfig`, `GetTaskPushNotificationConfig`,
    /// `ListTaskPushNotificationConfigs`, `DeleteTaskPushNotificationConfig` or
    /// `GetExtendedAgentCard`.
    pub method: String,
    /// The method's params (`SendMessageRequest`, `GetTaskRequest`, ...).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub params: Value,
}

/// A JSON-RPC 2.0 answer: `result`, or `error` (A2A's codes: -32001 task not found, -32002
/// not cancelable, -32003 push notifications not supported, -32004 unsupported operation,
/// -32005 content type not supported, -32009 version not supported; -32700, -32600, -32601,
/// -32602 and -32603 as JSON-RPC defines them). Errors answer HTTP 200, as the binding says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JsonRpcResponse {
    pub jsonrpc: String,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub id: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<JsonRpcError>,
}

/// A JSON-RPC error: its `data` holds `google.rpc.ErrorInfo` (reason, domain `a2a-protocol.org`)
/// and, for refused params, `google.rpc.BadRequest` naming each field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JsonRpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<Object>>))]
    pub data: Option<Vec<Value>>,
}

/// An agent's public card (`/a2a/{tenant}/{agent}/.well-known/agent-card.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AgentCard {
    pub name: String,
    pub description: String,
    pub supported_interfaces: Vec<AgentInterface>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<AgentProvider>,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation_url: Option<String>,
    pub capabilities: AgentCapabilities,
    /// By name: the schemes `securityRequirements` refer to (ProtoJSON of `SecurityScheme`,
    /// such as `{"httpAuthSecurityScheme": {"scheme": "Bearer", "bearerFormat": "JWT"}}`).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub security_schemes: Map<String, Value>,
    /// Each `{"schemes": {name: {"list": [scopes]}}}`.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub security_requirements: Vec<Value>,
    pub default_input_modes: Vec<String>,
    pub default_output_modes: Vec<String>,
    pub skills: Vec<AgentSkill>,
}

/// Where and how an agent is reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AgentInterface {
    pub url: String,
    pub protocol_binding: String,
    pub protocol_version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentProvider {
    pub organization: String,
    pub url: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    pub streaming: bool,
    pub push_notifications: bool,
    pub extended_agent_card: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AgentSkill {
    pub id: String,
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
}

/// What an agent's acknowledgement reports for the A2A task of the event it acknowledges
/// (`acks[i].a2a`, only for an `a2a.message` event): committed with the acknowledgement, in its
/// transaction and only while its lease holds. With `result: completed` the task completes (or,
/// with `state`, waits for the client); `failed` fails it; `quarantined` rejects it. An
/// acknowledgement without it still ends the task, without a result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct A2aReport {
    /// With `result: completed`: `completed` (the default), or `input_required` /
    /// `auth_required` to ask the client for more (its next message with this task's id comes
    /// as a new event).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<A2aReportState>,
    /// The agent's message about the outcome (role agent): the task's status message, kept in
    /// its history. `messageId` is given by the server when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// What the task produced, added to its artifacts in order (at most 16 per report; each
    /// `artifactId` given by the server when left out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
}

/// The task state an acknowledgement with `result: completed` leaves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum A2aReportState {
    #[default]
    Completed,
    InputRequired,
    AuthRequired,
}

impl A2aReportState {
    pub fn task_state(self) -> TaskState {
        match self {
            A2aReportState::Completed => TaskState::Completed,
            A2aReportState::InputRequired => TaskState::InputRequired,
            A2aReportState::AuthRequired => TaskState::AuthRequired,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn enums_read_proto_names_numbers_and_short_names_and_write_proto_names() {
        for state in TaskState::ALL {
            let json = serde_json::to_value(state).unwrap();
            assert_eq!(json, json!(state.as_str()));
            assert_eq!(serde_json::from_value::<TaskState>(json).unwrap(), *state);
            assert_eq!(serde_json::from_value::<TaskState>(json!(state.short())).unwrap(), *state);
        }
        assert_eq!(serde_json::from_value::<TaskState>(json!(6)).unwrap(), TaskState::InputRequired);
        assert_eq!(serde_json::from_value::<Role>(json!("ROLE_USER")).unwrap(), Role::User);
        let refused = serde_json::from_value::<Role>(json!("ROLE_UNSPECIFIED")).unwrap_err().to_string();
        assert!(refused.contains("ROLE_USER, ROLE_AGENT"), "{refused}");
        assert!(serde_json::from_value::<TaskState>(json!(0)).is_err(), "unspecified is no state");
    }

    #[test]
    fn messages_read_as_the_sdks_write_them_and_ignore_unknown_fields() {
        let python = json!({
            "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}],
            "contextId": "c1", "someFutureField": {"x": 1}
        });
        let message: Message = serde_json::from_value(python).unwrap();
        assert_eq!((message.message_id.as_str(), message.role), ("m1", Role::User));
        assert_eq!(message.parts, vec![Part::text("hi")]);
        let snake: Message =
            serde_json::from_value(json!({"message_id": "m2", "role": 2, "parts": []})).unwrap();
        assert_eq!((snake.message_id.as_str(), snake.role), ("m2", Role::Agent));
        let written = serde_json::to_value(&message).unwrap();
        assert_eq!(
            written,
            json!({"messageId": "m1", "contextId": "c1", "role": "ROLE_USER", "parts": [{"text": "hi"}]})
        );
    }

    #[test]
    fn a_stream_response_is_one_member_named_as_protojson_names_it() {
        let update = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus { state: TaskState::Working, message: None, timestamp: None },
            metadata: None,
        });
        assert_eq!(
            serde_json::to_value(&update).unwrap(),
            json!({"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}})
        );
    }

    #[test]
    fn a_report_refuses_unknown_fields_of_its_own() {
        let report: A2aReport = serde_json::from_value(
            json!({"state": "input_required", "artifacts": [{"parts": [{"text": "x"}]}]}),
        )
        .unwrap();
        assert_eq!(report.state, Some(A2aReportState::InputRequired));
        assert!(serde_json::from_value::<A2aReport>(json!({"status": "completed"})).is_err());
    }
}
