//! Reading the subsystem's rows, and writing back a task with the log entries a change made:
//! every change of a task goes through [`Change`], so its log, its row and its push configs
//! move together in the caller's transaction.

use inbox_core::{EventId, RecipientId, TenantId, UnixMillis};
use serde_json::Value;

use super::queries;
use super::{
    ARTIFACTS_BYTES_MAX, ARTIFACTS_PER_TASK_MAX, HISTORY_MESSAGES_MAX, Task, TaskId, TaskState, TaskStatus,
    TaskUpdate, UpdateKind,
};
use crate::StoreError;
use crate::db::{Arg, DbConnection, DbRow};

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(format!("a2a: {what}"))
}

fn json_array(text: &str, what: &str) -> Result<Vec<Value>, StoreError> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(items)) => Ok(items),
        _ => Err(corrupt(what)),
    }
}

fn opt_json(text: Option<String>, what: &str) -> Result<Option<Value>, StoreError> {
    text.map(|text| serde_json::from_str(&text).map_err(|_| corrupt(what))).transpose()
}

fn state(text: &str) -> Result<TaskState, StoreError> {
    TaskState::parse(text).ok_or_else(|| corrupt(&format!("unknown task state {text:?}")))
}

fn seq(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

pub(super) fn task(row: &DbRow) -> Result<Task, StoreError> {
    Ok(Task {
        tenant_id: TenantId::new(row.string("tenant_id")?).map_err(|_| corrupt("tenant id"))?,
        task_id: TaskId::parse(&row.string("task_id")?).ok_or_else(|| corrupt("task id"))?,
        agent_id: RecipientId::new(row.string("agent_id")?).map_err(|_| corrupt("agent id"))?,
        sender_id: RecipientId::new(row.string("sender_id")?).map_err(|_| corrupt("sender id"))?,
        context_id: row.string("context_id")?,
        event_id: EventId::from_slice(&row.bytes("event_id")?).map_err(|_| corrupt("event id"))?,
        status: TaskStatus {
            state: state(&row.string("state")?)?,
            seq: seq(row.i64("status_seq")?),
            message: opt_json(row.opt_string("status_message_json")?, "status message")?,
            note: row.opt_string("status_note")?,
            at: UnixMillis(row.i64("status_at_utc")?),
        },
        artifacts: json_array(&row.string("artifacts_json")?, "artifacts")?,
        history: json_array(&row.string("history_json")?, "history")?,
        last_seq: seq(row.i64("last_seq")?),
        created_at: UnixMillis(row.i64("created_at_utc")?),
    })
}

/// The event whose acknowledgement reported the task's outcome, if one did.
pub(super) fn reported_event(row: &DbRow) -> Result<Option<EventId>, StoreError> {
    row.opt_bytes("reported_event_id")?
        .map(|bytes| EventId::from_slice(&bytes).map_err(|_| corrupt("reported event id")))
        .transpose()
}

pub(super) fn update(row: &DbRow) -> Result<TaskUpdate, StoreError> {
    let kind = row.string("kind")?;
    Ok(TaskUpdate {
        seq: seq(row.i64("seq")?),
        kind: UpdateKind::parse(&kind).ok_or_else(|| corrupt(&format!("unknown update kind {kind:?}")))?,
        state: state(&row.string("state")?)?,
        message: opt_json(row.opt_string("message_json")?, "update message")?,
        note: row.opt_string("note")?,
        artifact: opt_json(row.opt_string("artifact_json")?, "update artifact")?,
        at: UnixMillis(row.i64("created_at_utc")?),
    })
}

/// Reads one task by id, locked with `lock`.
pub(super) async fn load_task(
    conn: &mut DbConnection<'_>,
    tenant_id: &TenantId,
    task_id: &TaskId,
    lock: &str,
) -> Result<Option<(Task, Option<EventId>)>, StoreError> {
    let row = conn
        .fetch_optional(&queries::task(lock), &[Arg::Str(tenant_id.as_str()), Arg::Str(task_id.as_str())])
        .await?;
    row.map(|row| Ok((task(&row)?, reported_event(&row)?))).transpose()
}

/// Why a change could not be made to a task: it would hold more than a task may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overfull {
    /// More than [`ARTIFACTS_PER_TASK_MAX`] artifacts.
    Artifacts { limit: usize },
    /// More than [`ARTIFACTS_BYTES_MAX`] bytes of artifacts.
    ArtifactBytes { bytes: usize, limit: usize },
}

/// The changes made to one task in a transaction, written by [`Change::save`].
pub(super) struct Change {
    pub task: Task,
    pub reported_event: Option<EventId>,
    pub updates: Vec<TaskUpdate>,
}

impl Change {
    pub fn of(task: Task, reported_event: Option<EventId>) -> Change {
        Change { task, reported_event, updates: Vec::new() }
    }

    /// A new status, logged.
    pub fn status(
        &mut self,
        state: TaskState,
        message: Option<Value>,
        note: Option<String>,
        now: UnixMillis,
    ) {
        let seq = self.task.last_seq + 1;
        self.task.last_seq = seq;
        self.task.status = TaskStatus { state, seq, message: message.clone(), note: note.clone(), at: now };
        if let Some(message) = &message {
            self.remember(message.clone());
        }
        self.updates.push(TaskUpdate {
            seq,
            kind: UpdateKind::Status,
            state,
            message,
            note,
            artifact: None,
            at: now,
        });
    }

    /// A new artifact, logged.
    pub fn artifact(&mut self, artifact: Value, now: UnixMillis) -> Result<(), Overfull> {
        if self.task.artifacts.len() >= ARTIFACTS_PER_TASK_MAX {
            return Err(Overfull::Artifacts { limit: ARTIFACTS_PER_TASK_MAX });
        }
        self.task.artifacts.push(artifact.clone());
        let bytes = serde_json::to_string(&self.task.artifacts).map_or(0, |text| text.len());
        if bytes > ARTIFACTS_BYTES_MAX {
            return Err(Overfull::ArtifactBytes { bytes, limit: ARTIFACTS_BYTES_MAX });
        }
        let seq = self.task.last_seq + 1;
        self.task.last_seq = seq;
        let state = self.task.status.state;
        self.updates.push(TaskUpdate {
            seq,
            kind: UpdateKind::Artifact,
            state,
            message: None,
            note: None,
            artifact: Some(artifact),
            at: now,
        });
        Ok(())
    }

    /// Keeps a message in the history, dropping the oldest past [`HISTORY_MESSAGES_MAX`].
    pub fn remember(&mut self, message: Value) {
        self.task.history.push(message);
        let excess = self.task.history.len().saturating_sub(HISTORY_MESSAGES_MAX);
        self.task.history.drain(..excess);
    }

    /// Writes the row (inserted when `new`), its log entries, and makes its idle push configs
    /// due.
    pub async fn save(
        &self,
        conn: &mut DbConnection<'_>,
        new: bool,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        let task = &self.task;
        let status_message = task.status.message.as_ref().map(Value::to_string);
        let artifacts = Value::Array(task.artifacts.clone()).to_string();
        let history = Value::Array(task.history.clone()).to_string();
        let reported = self.reported_event.map(|id| *id.as_bytes());
        let (tenant, task_id) = (task.tenant_id.as_str(), task.task_id.as_str());
        if new {
            conn.execute(
                queries::INSERT_TASK,
                &[
                    Arg::Str(tenant),
                    Arg::Str(task_id),
                    Arg::Str(task.agent_id.as_str()),
                    Arg::Str(task.sender_id.as_str()),
                    Arg::Str(&task.context_id),
                    Arg::Bytes(task.event_id.as_bytes()),
                    Arg::Str(task.status.state.as_str()),
                    Arg::I64(task.status.seq as i64),
                    Arg::OptStr(status_message.as_deref()),
                    Arg::OptStr(task.status.note.as_deref()),
                    Arg::I64(task.status.at.get()),
                    Arg::Str(&artifacts),
                    Arg::Str(&history),
                    Arg::I64(task.last_seq as i64),
                    Arg::OptBytes(reported.as_ref().map(|b| b.as_slice())),
                    Arg::I64(task.created_at.get()),
                ],
            )
            .await?;
        } else {
            conn.execute(
                queries::SAVE_TASK,
                &[
                    Arg::Bytes(task.event_id.as_bytes()),
                    Arg::Str(task.status.state.as_str()),
                    Arg::I64(task.status.seq as i64),
                    Arg::OptStr(status_message.as_deref()),
                    Arg::OptStr(task.status.note.as_deref()),
                    Arg::I64(task.status.at.get()),
                    Arg::Str(&artifacts),
                    Arg::Str(&history),
                    Arg::I64(task.last_seq as i64),
                    Arg::OptBytes(reported.as_ref().map(|b| b.as_slice())),
                    Arg::Str(tenant),
                    Arg::Str(task_id),
                ],
            )
            .await?;
        }
        for update in &self.updates {
            let message = update.message.as_ref().map(Value::to_string);
            let artifact = update.artifact.as_ref().map(Value::to_string);
            conn.execute(
                queries::INSERT_UPDATE,
                &[
                    Arg::Str(tenant),
                    Arg::Str(task_id),
                    Arg::I64(update.seq as i64),
                    Arg::Str(update.kind.as_str()),
                    Arg::Str(update.state.as_str()),
                    Arg::OptStr(message.as_deref()),
                    Arg::OptStr(update.note.as_deref()),
                    Arg::OptStr(artifact.as_deref()),
                    Arg::I64(update.at.get()),
                ],
            )
            .await?;
        }
        if !new && !self.updates.is_empty() {
            conn.execute(
                queries::MARK_PUSH_DUE,
                &[Arg::I64(now.get()), Arg::Str(tenant), Arg::Str(task_id), Arg::I64(now.get())],
            )
            .await?;
        }
        Ok(())
    }
}
