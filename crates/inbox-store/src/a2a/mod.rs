//! The `a2a` subsystem: A2A tasks kept beside the inbox events that carry their messages to
//! agents (issue 44). A client's message to an agent is one transaction: the task (or the next
//! turn of one waiting for input), its first entry in the task's update log, the inbox event
//! (through the one publishing path, `inbox/publish.rs`) and the message's idempotency row. An
//! agent's acknowledgement that reports an outcome moves the task in the acknowledgement's own
//! transaction, only while its lease holds (`report.rs`, as a hand-off does); what the inbox's
//! own machinery does to the event (a claim, a plain acknowledgement, a dead letter, a
//! quarantine, an expiry) the reconciler turns into the task's state after it commits
//! (`reconcile.rs`). Push-notification configs are delivered from the update log (`push.rs`).
//!
//! The store keeps A2A's messages and artifacts as opaque JSON values: what they hold is the
//! server's to check. It writes one shape of its own, the event's payload
//! (`{"task_id", "context_id", "sender_id", "message"}`), and notes of its own (why a task
//! failed), which the server renders as the agent's messages.
//!
//! Tables: `a2a_task`, `a2a_task_update`, `a2a_message` and `a2a_push_config`, written by this
//! subsystem's statements only (`queries.rs`); it reads `agent_inbox` (and its archive) to
//! follow an event's state, and writes an inbox row only through the inbox's own paths (the
//! publish, and the slow path's expiry of a canceled task's unclaimed event).

mod push;
mod queries;
mod reconcile;
mod report;
mod rows;
mod tasks;

pub use push::{DuePush, NewPushConfig, PUSH_CONFIGS_PER_TASK_MAX, PushConfig, PushResult};
pub use reconcile::ReconcileReport;
pub use report::{Report, ReportReceipt, ReportRefusal, TaskOutcome};
pub use rows::Overfull;
pub use tasks::{CancelRefusal, SendMessage, SendRefusal, SendTarget, Sent, TaskCursor, TaskPage, TaskQuery};

use inbox_core::{EventId, RecipientId, TenantId, UnixMillis};
use serde_json::Value;

use crate::SqlStore;

/// Messages a task's history keeps, the newest.
pub const HISTORY_MESSAGES_MAX: usize = 100;
/// Artifacts one task may hold.
pub const ARTIFACTS_PER_TASK_MAX: usize = 256;
/// Bytes of JSON a task's artifacts may hold together.
pub const ARTIFACTS_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Longest note the store keeps with a status (a failure's reason), in bytes.
pub const NOTE_BYTES_MAX: usize = 500;
/// The prefix of an A2A event's deduplication key: `a2a:` and the hex of its message key.
pub const A2A_KEY_PREFIX: &str = "a2a:";

/// The A2A subsystem of one [`SqlStore`]. A borrowed view, free to make: `store.a2a()`.
#[derive(Debug, Clone, Copy)]
pub struct A2a<'s> {
    pub(crate) store: &'s SqlStore,
}

impl SqlStore {
    /// A2A tasks, their update logs and push-notification configs, see [`A2a`].
    pub fn a2a(&self) -> A2a<'_> {
        A2a { store: self }
    }
}

/// A task's id: a UUIDv7 in text, made by the server when a message starts a task.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(String);

impl TaskId {
    /// A new id for a task created at `now`.
    pub fn new(now: UnixMillis) -> TaskId {
        TaskId(EventId::new_v7(now, crate::random_bytes::<10>()).to_string())
    }

    /// The id a client names, if it is one this server could have made (a UUID).
    pub fn parse(text: &str) -> Option<TaskId> {
        EventId::parse(text).ok().map(|id| TaskId(id.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a task stands, as the store keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    AuthRequired,
    Completed,
    Failed,
    Canceled,
    Rejected,
}

impl TaskState {
    pub const ALL: [TaskState; 8] = [
        TaskState::Submitted,
        TaskState::Working,
        TaskState::InputRequired,
        TaskState::AuthRequired,
        TaskState::Completed,
        TaskState::Failed,
        TaskState::Canceled,
        TaskState::Rejected,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Submitted => "submitted",
            TaskState::Working => "working",
            TaskState::InputRequired => "input_required",
            TaskState::AuthRequired => "auth_required",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Canceled => "canceled",
            TaskState::Rejected => "rejected",
        }
    }

    pub fn parse(text: &str) -> Option<TaskState> {
        TaskState::ALL.into_iter().find(|state| state.as_str() == text)
    }

    /// Completed, failed, canceled or rejected: nothing moves it any more.
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected)
    }

    /// Waiting for the client: its next message with this task's id continues it.
    pub fn is_interrupted(self) -> bool {
        matches!(self, TaskState::InputRequired | TaskState::AuthRequired)
    }

    /// Submitted or working: its event's state may still move it.
    pub fn is_open(self) -> bool {
        matches!(self, TaskState::Submitted | TaskState::Working)
    }
}

/// A task's status: its state, with the agent's message or the store's note about it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStatus {
    pub state: TaskState,
    /// The update that set it.
    pub seq: u64,
    /// The agent's message (A2A JSON), when its acknowledgement gave one.
    pub message: Option<Value>,
    /// Why, in the store's words (a dead letter's reason, a cancellation), when no agent said.
    pub note: Option<String>,
    pub at: UnixMillis,
}

/// A task as it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub tenant_id: TenantId,
    pub task_id: TaskId,
    /// The agent the task's messages go to.
    pub agent_id: RecipientId,
    /// Who started it: the token subject that sent its first message, the only caller (besides
    /// an operator) who sees it.
    pub sender_id: RecipientId,
    pub context_id: String,
    /// The inbox event of its latest message.
    pub event_id: EventId,
    pub status: TaskStatus,
    /// A2A artifacts, in the order the agent reported them.
    pub artifacts: Vec<Value>,
    /// A2A messages, oldest first, at most [`HISTORY_MESSAGES_MAX`].
    pub history: Vec<Value>,
    /// The newest entry of the update log.
    pub last_seq: u64,
    pub created_at: UnixMillis,
}

impl Task {
    pub fn state(&self) -> TaskState {
        self.status.state
    }
}

/// What an entry of the update log records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateKind {
    /// The task as created: the first entry.
    Task,
    /// A change of status.
    Status,
    /// An artifact the agent reported.
    Artifact,
}

impl UpdateKind {
    fn as_str(self) -> &'static str {
        match self {
            UpdateKind::Task => "task",
            UpdateKind::Status => "status",
            UpdateKind::Artifact => "artifact",
        }
    }

    fn parse(text: &str) -> Option<UpdateKind> {
        [UpdateKind::Task, UpdateKind::Status, UpdateKind::Artifact].into_iter().find(|k| k.as_str() == text)
    }
}

/// One entry of a task's update log: what `SubscribeToTask` replays after a cursor and push
/// notifications deliver, in `seq` order.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskUpdate {
    pub seq: u64,
    pub kind: UpdateKind,
    /// The task's state right after the entry.
    pub state: TaskState,
    /// A status's message from the agent.
    pub message: Option<Value>,
    /// A status's note from the store.
    pub note: Option<String>,
    /// An artifact entry's artifact.
    pub artifact: Option<Value>,
    pub at: UnixMillis,
}

impl TaskUpdate {
    /// Whether a stream ends after this entry: the task reached a terminal or interrupted
    /// state.
    pub fn is_final(&self) -> bool {
        self.kind != UpdateKind::Artifact && (self.state.is_terminal() || self.state.is_interrupted())
    }
}

/// Fits a note to what the store keeps: control characters as spaces, at most
/// [`NOTE_BYTES_MAX`] bytes, cut at a character boundary.
pub(crate) fn fit_note(text: &str) -> String {
    let mut note: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if note.len() > NOTE_BYTES_MAX {
        let mut end = NOTE_BYTES_MAX;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
    }
    note.trim().to_owned()
}
