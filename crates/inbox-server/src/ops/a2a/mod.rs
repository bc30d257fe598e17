//! The A2A face of each agent (issue 44): an A2A 1.0 client sends a message to an agent of a
//! tenant; the message and a durable inbox event commit together and the client gets a task in
//! `submitted`; the agent's runner claims the event whenever it comes back (the claim makes the
//! task `working`) and reports the outcome with its acknowledgement, lease-fenced
//! (`report.rs`); what the inbox does to the event otherwise (a plain acknowledgement, a dead
//! letter, a quarantine) the reconciler turns into the task's state (`reconcile.rs`). The
//! client reads tasks, lists, cancels and follows them from durable state (`tasks.rs`,
//! `follow.rs`, which resumes after a cursor, beyond the specification), and webhooks get
//! their updates through the callback sender (`push.rs`).
//!
//! Who may: a token of the agent's tenant with `a2a.send` (or `events.publish`, which already
//! publishes anything); a task is its sender's (the token subject that started it), and an
//! operator's. A task another caller started is "not found", so its id is not confirmed.
//!
//! The use cases answer [`A2aError`]: authentication, authorization and availability stay HTTP
//! problems (401, 403, 429, 503, before anything is judged); everything else is a JSON-RPC
//! error with A2A's codes (`http/a2a.rs` renders both).

pub mod card;
mod convert;
pub mod follow;
pub mod push;
pub mod reconcile;
pub mod report;
pub mod tasks;

use axum::http::StatusCode;
use inbox_api::{ProblemCode, Scope};
use serde_json::{Value, json};

use crate::error::ApiError;

/// The scopes that may talk to an agent's A2A face, one of them enough.
pub(in crate::ops) const A2A_SCOPES: [Scope; 2] = [Scope::A2aSend, Scope::EventsPublish];

/// What an A2A use case refuses with.
#[derive(Debug)]
pub enum A2aError {
    /// An HTTP problem: the caller is not authenticated or allowed, or the node cannot serve.
    Http(ApiError),
    /// A JSON-RPC error.
    Rpc(RpcError),
}

/// A JSON-RPC error object: A2A's codes, with `google.rpc` details in `data`.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Vec<Value>,
}

/// The domain of A2A's `ErrorInfo` details.
const ERROR_DOMAIN: &str = "a2a-protocol.org";

impl RpcError {
    fn new(code: i64, reason: &str, message: impl Into<String>) -> RpcError {
        let data = vec![json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": ERROR_DOMAIN,
        })];
        RpcError { code, message: message.into(), data }
    }

    fn with_metadata(mut self, key: &str, value: impl Into<Value>) -> RpcError {
        if let Some(info) = self.data.first_mut() {
            info["metadata"][key] = Value::String(match value.into() {
                Value::String(text) => text,
                other => other.to_string(),
            });
        }
        self
    }

    pub fn parse_error(detail: impl std::fmt::Display) -> RpcError {
        RpcError::new(-32700, "PARSE_ERROR", format!("invalid JSON payload: {detail}"))
    }

    pub fn invalid_request(detail: impl Into<String>) -> RpcError {
        RpcError::new(-32600, "INVALID_REQUEST", detail)
    }

    pub fn method_not_found(method: &str) -> RpcError {
        RpcError::new(
            -32601,
            "METHOD_NOT_FOUND",
            format!(
                "method {method:?} does not exist; this agent answers SendMessage, SendStreamingMessage, GetTask, \
                 ListTasks, CancelTask, SubscribeToTask, CreateTaskPushNotificationConfig, \
                 GetTaskPushNotificationConfig, ListTaskPushNotificationConfigs, DeleteTaskPushNotificationConfig \
                 and GetExtendedAgentCard"
            ),
        )
        .with_metadata("method", method)
    }

    /// Refused params: `field` is the path of the one refused (`params.message.parts[0]`).
    pub fn invalid_params(field: &str, description: impl std::fmt::Display) -> RpcError {
        let description = description.to_string();
        let mut error = RpcError::new(-32602, "INVALID_PARAMS", format!("{field} {description}"));
        error.data.push(json!({
            "@type": "type.googleapis.com/google.rpc.BadRequest",
            "fieldViolations": [{"field": field, "description": description}],
        }));
        error.with_metadata("field", field)
    }

    pub fn internal() -> RpcError {
        RpcError::new(
            -32603,
            "INTERNAL",
            "the server failed to handle this request; it has been logged, retry later",
        )
    }

    pub fn task_not_found(task_id: &str) -> RpcError {
        RpcError::new(
            -32001,
            "TASK_NOT_FOUND",
            format!(
                "no task {task_id:?} of yours exists at this agent; check the id (ListTasks lists yours)"
            ),
        )
        .with_metadata("taskId", task_id)
    }

    pub fn not_cancelable(task_id: &str, state: &str) -> RpcError {
        RpcError::new(
            -32002,
            "TASK_NOT_CANCELABLE",
            format!("task {task_id:?} is {state}: it is over already"),
        )
        .with_metadata("taskId", task_id)
        .with_metadata("state", state)
    }

    pub fn unsupported(detail: impl Into<String>) -> RpcError {
        RpcError::new(-32004, "UNSUPPORTED_OPERATION", detail)
    }

    pub fn version_not_supported(asked: &str) -> RpcError {
        let asked = if asked.is_empty() { "0.3 (no A2A-Version header)" } else { asked };
        RpcError::new(
            -32009,
            "VERSION_NOT_SUPPORTED",
            format!(
                "A2A version {asked} is not supported; this agent speaks {}: send 'A2A-Version: {}'",
                inbox_api::a2a::A2A_PROTOCOL_VERSION,
                inbox_api::a2a::A2A_PROTOCOL_VERSION
            ),
        )
        .with_metadata("supportedVersions", inbox_api::a2a::A2A_PROTOCOL_VERSION)
    }
}

impl From<RpcError> for A2aError {
    fn from(error: RpcError) -> A2aError {
        A2aError::Rpc(error)
    }
}

/// Who may not, and what the node cannot do now, stay HTTP problems; a refused field becomes
/// invalid params naming it; anything else that went wrong inside is an internal error (logged
/// once, by the problem's own path).
impl From<ApiError> for A2aError {
    fn from(error: ApiError) -> A2aError {
        match error.status {
            StatusCode::UNAUTHORIZED
            | StatusCode::FORBIDDEN
            | StatusCode::TOO_MANY_REQUESTS
            | StatusCode::SERVICE_UNAVAILABLE => A2aError::Http(error),
            StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => {
                let field =
                    error.extensions.get("field").and_then(Value::as_str).unwrap_or("params").to_owned();
                let detail = error.detail.strip_prefix(&field).map(str::trim_start).unwrap_or(&error.detail);
                A2aError::Rpc(RpcError::invalid_params(&field, detail))
            }
            _ => {
                if error.code != ProblemCode::InternalError {
                    tracing::warn!(code = error.code.as_str(), detail = %error.detail, "an a2a call failed");
                }
                drop(error.into_problem());
                A2aError::Rpc(RpcError::internal())
            }
        }
    }
}

impl From<inbox_store::StoreError> for A2aError {
    fn from(error: inbox_store::StoreError) -> A2aError {
        ApiError::from(error).into()
    }
}

/// Tells this node's streams that a task changed: each reads its task's log again. One counter
/// for the node: a wake-up costs each open A2A stream one read by primary key; other nodes'
/// changes are read by each stream's recheck (`follow.rs`).
#[derive(Debug)]
pub struct Updates {
    sender: tokio::sync::watch::Sender<u64>,
}

impl Default for Updates {
    fn default() -> Self {
        Updates { sender: tokio::sync::watch::channel(0).0 }
    }
}

impl Updates {
    pub fn changed(&self) {
        self.sender.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub fn watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.sender.subscribe()
    }
}
