//! Tasks from the client's side: a message sent (a new task, or the next turn of one waiting
//! for input) in one transaction with its inbox event, a task read, a page of them, the update
//! log after a cursor, and a cancellation.

use inbox_core::{
    AckState, Correlation, DeduplicationKey, EventBody, EventId, EventType, FairnessKey, Priority, Recipient,
    RecipientId, RecipientKey, TenantId, Transition, UnixMillis,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::push::{NewPushConfig, create_in};
use super::queries::{self, ListFilters};
use super::rows::{self, Change, load_task};
use super::{A2A_KEY_PREFIX, A2a, Task, TaskId, TaskState, TaskStatus, TaskUpdate, UpdateKind, fit_note};
use crate::db::{Arg, DbConnection};
use crate::inbox::apply::Change as EventChange;
use crate::inbox::history::Attribution;
use crate::inbox::rows::load_events;
use crate::store::with_retries;
use crate::{Actor, Publish, PublishReceipt, StoreError};

/// A client's message to an agent.
#[derive(Debug, Clone)]
pub struct SendMessage {
    pub tenant_id: TenantId,
    pub agent_id: RecipientId,
    /// The token subject sending it: the task's owner.
    pub sender_id: RecipientId,
    /// The client's `messageId`: sending it again (from the same sender) answers the task it
    /// made, and publishes nothing.
    pub message_id: String,
    /// The message (an A2A JSON object); its `taskId` and `contextId` are set here.
    pub message: Value,
    /// The type of the inbox event that carries it.
    pub event_type: EventType,
    pub target: SendTarget,
    /// A push-notification config created with the task (its `task_id` is the task's).
    pub push: Option<NewPushConfig>,
    pub fairness_key: Option<FairnessKey>,
}

/// Which task a message goes to.
#[derive(Debug, Clone)]
pub enum SendTarget {
    /// A new task, with the id and context the server chose (the client's context, if it gave
    /// one).
    New { task_id: TaskId, context_id: String },
    /// A task waiting for input (the message's `taskId`); a context, when the message names
    /// one, must be the task's.
    Continue { task_id: TaskId, context_id: Option<String> },
}

/// What a send did.
#[derive(Debug, Clone)]
pub struct Sent {
    pub task: Task,
    /// The inbox event carrying the message.
    pub event_id: EventId,
    /// The message was sent before: this is the task it made, and nothing was published.
    pub repeated: bool,
    /// The publish, for the server's hints (none for a repeat).
    pub receipt: Option<PublishReceipt>,
}

/// Why a message was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendRefusal {
    /// The message names a task this sender has not started with this agent.
    TaskNotFound,
    /// The named task is over.
    Terminal(TaskState),
    /// The named task is not waiting for input.
    NotAwaitingInput(TaskState),
    /// The message's context is not the named task's.
    ContextMismatch { context_id: String },
    /// The push config would pass the limit of configs per task.
    PushLimit { limit: usize },
}

/// Tasks of one agent, newest status first.
#[derive(Debug, Clone)]
pub struct TaskQuery {
    pub tenant_id: TenantId,
    pub agent_id: RecipientId,
    /// Only this sender's; every sender's when absent (an operator).
    pub sender_id: Option<RecipientId>,
    pub context_id: Option<String>,
    pub state: Option<TaskState>,
    /// Only tasks whose status changed after this time.
    pub changed_after: Option<UnixMillis>,
    /// Continue after this task of the previous page.
    pub cursor: Option<TaskCursor>,
    pub limit: u32,
}

/// Where a page of tasks ended: the last task's status time and id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskCursor {
    pub status_at: UnixMillis,
    pub task_id: TaskId,
}

#[derive(Debug, Clone)]
pub struct TaskPage {
    pub tasks: Vec<Task>,
    /// How many tasks the query matches, pages aside.
    pub total: u64,
    /// Where the next page starts, when there is one.
    pub next: Option<TaskCursor>,
}

/// Why a task was not canceled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelRefusal {
    NotFound,
    /// Completed, failed or rejected: over already.
    NotCancelable(TaskState),
}

/// The idempotency key of a message: its sender and `messageId`, hashed.
pub(super) fn message_key(sender: &RecipientId, message_id: &str) -> [u8; 32] {
    Sha256::new()
        .chain_update(b"a2a message v1\0")
        .chain_update(sender.as_str().as_bytes())
        .chain_update([0])
        .chain_update(message_id.as_bytes())
        .finalize()
        .into()
}

impl A2a<'_> {
    /// Sends a message to an agent: the task (new, or continued from waiting for input), its
    /// update, the inbox event carrying it and the message's idempotency row, in one
    /// transaction. A message sent again answers the task it made.
    pub async fn send(self, send: &SendMessage) -> Result<Result<Sent, SendRefusal>, StoreError> {
        if !send.message.is_object() {
            return Err(StoreError::Corrupt("a2a: a message to send must be a JSON object".into()));
        }
        with_retries!(self.store, self.send_once(send))
    }

    async fn send_once(self, send: &SendMessage) -> Result<Result<Sent, SendRefusal>, StoreError> {
        let now = self.store.now();
        let key = message_key(&send.sender_id, &send.message_id);
        let lock = self.store.dialect().for_update();
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        let known = conn
            .fetch_optional(
                &queries::message(lock),
                &[Arg::Str(send.tenant_id.as_str()), Arg::Str(send.agent_id.as_str()), Arg::Bytes(&key)],
            )
            .await?;
        if let Some(row) = known {
            let task_id = TaskId::parse(&row.string("task_id")?)
                .ok_or_else(|| StoreError::Corrupt("a2a: message row's task id".into()))?;
            let event_id = EventId::from_slice(&row.bytes("event_id")?)
                .map_err(|_| StoreError::Corrupt("a2a: message row's event id".into()))?;
            let (task, _) = load_task(&mut conn, &send.tenant_id, &task_id, "")
                .await?
                .ok_or_else(|| StoreError::Corrupt("a2a: a message names a task that is gone".into()))?;
            return Ok(Ok(Sent { task, event_id, repeated: true, receipt: None }));
        }
        let (mut change, new) = match &send.target {
            SendTarget::New { task_id, context_id } => {
                let task = Task {
                    tenant_id: send.tenant_id.clone(),
                    task_id: task_id.clone(),
                    agent_id: send.agent_id.clone(),
                    sender_id: send.sender_id.clone(),
                    context_id: context_id.clone(),
                    // Set once the event is published.
                    event_id: EventId::from_bytes([0; 16]),
                    status: TaskStatus {
                        state: TaskState::Submitted,
                        seq: 1,
                        message: None,
                        note: None,
                        at: now,
                    },
                    artifacts: Vec::new(),
                    history: Vec::new(),
                    last_seq: 1,
                    created_at: now,
                };
                (Change::of(task, None), true)
            }
            SendTarget::Continue { task_id, context_id } => {
                let Some((task, _)) = load_task(&mut conn, &send.tenant_id, task_id, lock).await? else {
                    return Ok(Err(SendRefusal::TaskNotFound));
                };
                if task.agent_id != send.agent_id || task.sender_id != send.sender_id {
                    return Ok(Err(SendRefusal::TaskNotFound));
                }
                if task.state().is_terminal() {
                    return Ok(Err(SendRefusal::Terminal(task.state())));
                }
                if !task.state().is_interrupted() {
                    return Ok(Err(SendRefusal::NotAwaitingInput(task.state())));
                }
                if context_id.as_ref().is_some_and(|named| *named != task.context_id) {
                    return Ok(Err(SendRefusal::ContextMismatch { context_id: task.context_id }));
                }
                (Change::of(task, None), false)
            }
        };
        let mut message = send.message.clone();
        message["taskId"] = json!(change.task.task_id.as_str());
        message["contextId"] = json!(change.task.context_id);
        let payload = json!({
            "task_id": change.task.task_id.as_str(),
            "context_id": change.task.context_id,
            "sender_id": send.sender_id.as_str(),
            "message": message,
        });
        let dedup = DeduplicationKey::new(format!("{A2A_KEY_PREFIX}{}", hex::encode(key)))
            .map_err(|e| StoreError::Corrupt(format!("a2a: {e}")))?;
        let publish = Publish {
            tenant_id: send.tenant_id.clone(),
            recipients: vec![Recipient::agent(send.agent_id.clone())],
            event_type: send.event_type.clone(),
            priority: Priority::Normal,
            available_at: None,
            expires_at: None,
            deduplication_key: Some(dedup),
            fairness_key: send.fairness_key.clone(),
            correlation: Correlation::default(),
            body: EventBody::Json(payload.to_string()),
            max_attempts: None,
        };
        let recipients = publish.checked_recipients(self.store.config())?;
        let receipt = self.store.inbox().publish_rows(&mut conn, &publish, &recipients).await?;
        let event_id = receipt
            .deliveries
            .first()
            .map(|delivery| delivery.event_id)
            .ok_or_else(|| StoreError::Corrupt("a2a: a publish to one agent delivered nothing".into()))?;
        change.task.event_id = event_id;
        if new {
            change.remember(message);
            change.updates.push(TaskUpdate {
                seq: 1,
                kind: UpdateKind::Task,
                state: TaskState::Submitted,
                message: None,
                note: None,
                artifact: None,
                at: now,
            });
        } else {
            change.remember(message);
            change.status(TaskState::Submitted, None, None, now);
        }
        change.save(&mut conn, new, now).await?;
        let remembered = conn
            .execute(
                queries::INSERT_MESSAGE,
                &[
                    Arg::Str(send.tenant_id.as_str()),
                    Arg::Str(send.agent_id.as_str()),
                    Arg::Bytes(&key),
                    Arg::Str(change.task.task_id.as_str()),
                    Arg::Bytes(event_id.as_bytes()),
                    Arg::I64(now.get()),
                ],
            )
            .await;
        match remembered {
            // A concurrent send of the same message committed first: start over to answer it.
            Err(err) if err.is_unique_violation() => return Err(StoreError::Contention { attempts: 1 }),
            other => other?,
        };
        if let Some(push) = &send.push {
            let push = NewPushConfig { task_id: change.task.task_id.clone(), ..push.clone() };
            if let Err(limit) = create_in(self.store, &mut conn, &push, change.task.last_seq, now).await? {
                return Ok(Err(SendRefusal::PushLimit { limit }));
            }
        }
        tx.commit().await?;
        Ok(Ok(Sent { task: change.task, event_id, repeated: false, receipt: Some(receipt) }))
    }

    /// One task of the tenant.
    pub async fn task(self, tenant_id: &TenantId, task_id: &TaskId) -> Result<Option<Task>, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        Ok(load_task(&mut pooled.conn(), tenant_id, task_id, "").await?.map(|(task, _)| task))
    }

    /// The task whose latest message an event carries.
    pub async fn task_of_event(
        self,
        tenant_id: &TenantId,
        event_id: EventId,
    ) -> Result<Option<Task>, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let row = pooled
            .conn()
            .fetch_optional(
                &queries::task_of_event(""),
                &[Arg::Str(tenant_id.as_str()), Arg::Bytes(event_id.as_bytes())],
            )
            .await?;
        row.map(|row| rows::task(&row)).transpose()
    }

    /// A page of an agent's tasks, newest status first, and how many match.
    pub async fn list(self, query: &TaskQuery) -> Result<TaskPage, StoreError> {
        let filters = ListFilters {
            sender: query.sender_id.is_some(),
            context: query.context_id.is_some(),
            state: query.state.is_some(),
            changed_after: query.changed_after.is_some(),
            cursor: query.cursor.is_some(),
        };
        let mut args = vec![Arg::Str(query.tenant_id.as_str()), Arg::Str(query.agent_id.as_str())];
        if let Some(sender) = &query.sender_id {
            args.push(Arg::Str(sender.as_str()));
        }
        if let Some(context) = &query.context_id {
            args.push(Arg::Str(context));
        }
        if let Some(state) = query.state {
            args.push(Arg::Str(state.as_str()));
        }
        if let Some(after) = query.changed_after {
            args.push(Arg::I64(after.get()));
        }
        let counted = args.clone();
        if let Some(cursor) = &query.cursor {
            args.extend([
                Arg::I64(cursor.status_at.get()),
                Arg::I64(cursor.status_at.get()),
                Arg::Str(cursor.task_id.as_str()),
            ]);
        }
        let limit = query.limit.max(1);
        args.push(Arg::I64(i64::from(limit) + 1));
        let mut pooled = self.store.pools().reader().await?;
        let mut conn = pooled.conn();
        let mut tasks = conn
            .fetch_all(&queries::list_tasks(filters), &args)
            .await?
            .iter()
            .map(rows::task)
            .collect::<Result<Vec<_>, _>>()?;
        let more = tasks.len() > limit as usize;
        tasks.truncate(limit as usize);
        let total = match conn.fetch_optional(&queries::count_tasks(filters), &counted).await? {
            Some(row) => u64::try_from(row.i64("n")?).unwrap_or(0),
            None => 0,
        };
        let next = more
            .then(|| tasks.last().map(|t| TaskCursor { status_at: t.status.at, task_id: t.task_id.clone() }))
            .flatten();
        Ok(TaskPage { tasks, total, next })
    }

    /// A task's update log after `after_seq`, in order, at most `limit` entries.
    pub async fn updates_after(
        self,
        tenant_id: &TenantId,
        task_id: &TaskId,
        after_seq: u64,
        limit: u32,
    ) -> Result<Vec<TaskUpdate>, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let rows = pooled
            .conn()
            .fetch_all(
                queries::UPDATES_AFTER,
                &[
                    Arg::Str(tenant_id.as_str()),
                    Arg::Str(task_id.as_str()),
                    Arg::I64(i64::try_from(after_seq).unwrap_or(i64::MAX)),
                    Arg::I64(i64::from(limit.max(1))),
                ],
            )
            .await?;
        rows.iter().map(rows::update).collect()
    }

    /// Cancels a task: `canceled`, and its event, when no agent has taken it, expired (never
    /// run). An event an agent holds is left to it: its acknowledgement is taken, the task
    /// stays canceled. Canceling a canceled task answers it again; a finished one is refused.
    /// `by` (the client, for the event's history) is 1 to 100 bytes without control characters.
    pub async fn cancel(
        self,
        tenant_id: &TenantId,
        task_id: &TaskId,
        by: &str,
    ) -> Result<Result<Task, CancelRefusal>, StoreError> {
        let actor = Actor::operator(format!("a2a client {by}"))?;
        with_retries!(self.store, self.cancel_once(tenant_id, task_id, &actor))
    }

    async fn cancel_once(
        self,
        tenant_id: &TenantId,
        task_id: &TaskId,
        actor: &Actor,
    ) -> Result<Result<Task, CancelRefusal>, StoreError> {
        let now = self.store.now();
        let lock = self.store.dialect().for_update();
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        // The event first, then the task: the order an acknowledgement locks them in.
        let Some((seen, _)) = load_task(&mut conn, tenant_id, task_id, "").await? else {
            return Ok(Err(CancelRefusal::NotFound));
        };
        let inbox =
            RecipientKey { tenant_id: tenant_id.clone(), recipient: Recipient::agent(seen.agent_id.clone()) };
        let events = load_events(&mut conn, &inbox, &[seen.event_id], lock).await?;
        let Some((task, reported)) = load_task(&mut conn, tenant_id, task_id, lock).await? else {
            return Ok(Err(CancelRefusal::NotFound));
        };
        if task.event_id != seen.event_id {
            // A new turn began between the two reads: read again.
            return Err(StoreError::Contention { attempts: 1 });
        }
        match task.state() {
            TaskState::Canceled => return Ok(Ok(task)),
            state if state.is_terminal() => return Ok(Err(CancelRefusal::NotCancelable(state))),
            _ => {}
        }
        if events.first().is_some_and(|event| event.state() == AckState::Available) {
            expire_unclaimed(self, &mut conn, &inbox, task.event_id, actor, now).await?;
        }
        let mut change = Change::of(task, reported);
        let note = fit_note(&format!("canceled by its client ({})", actor.label()));
        change.status(TaskState::Canceled, None, Some(note), now);
        change.save(&mut conn, false, now).await?;
        tx.commit().await?;
        Ok(Ok(change.task))
    }
}

/// Expires an unclaimed event now through the inbox's slow path, so it ends `expired` with its
/// history and no agent takes it.
async fn expire_unclaimed(
    a2a: A2a<'_>,
    conn: &mut DbConnection<'_>,
    inbox: &RecipientKey,
    event_id: EventId,
    actor: &Actor,
    now: UnixMillis,
) -> Result<(), StoreError> {
    conn.execute(queries::EXPIRE_UNCLAIMED, &[Arg::I64(now.get()), Arg::Bytes(event_id.as_bytes())]).await?;
    let change = EventChange {
        event_id,
        transition: Transition::Expire { now },
        note: Some("canceled by its A2A client"),
        by: Attribution::operator(actor, None),
    };
    // A refusal (the event is no longer available) leaves it as it is.
    let _ = a2a.store.inbox().apply_changes_in(conn, inbox, &[change], now).await?;
    Ok(())
}
