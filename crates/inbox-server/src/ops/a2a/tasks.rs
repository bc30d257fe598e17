//! The client's methods: `SendMessage` and `SendStreamingMessage` (a message and its inbox
//! event in one transaction, idempotent by `messageId`), `GetTask`, `ListTasks`, `CancelTask`,
//! `SubscribeToTask` and `GetExtendedAgentCard`. Each decides who may call first, then reads
//! the params, naming any refused field.
//!
//! A blocking `SendMessage` (the SDKs' default) waits at most [`BLOCKING_WAIT`] for the task to
//! finish, then answers it as it stands: the agent may be away for days, and a client's default
//! read timeout (five seconds for the Python SDK) must not turn a kept message into an error.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures_util::Stream;
use inbox_api::a2a::{
    CancelTaskRequest, GetTaskRequest, ListTasksRequest, ListTasksResponse, Role, SendMessageRequest,
    SendMessageResponse, SubscribeToTaskRequest, Task as WireTask, TaskState,
};
use inbox_api::time::parse_utc;
use inbox_core::{EventType, RecipientId, TenantId, UnixMillis};
use inbox_store::{SendMessage, SendRefusal, SendTarget, Sent, Task, TaskCursor, TaskId, TaskQuery};
use serde_json::Value;

use super::convert::{self, CONTEXT_ID_BYTES_MAX, check_id, check_message, rpc};
use super::follow::{Frame, Held, follow};
use super::{A2A_SCOPES, A2aError, RpcError, push};
use crate::caller::{Caller, Reach};
use crate::error::ApiError;
use crate::node::AppState;
use crate::ops::publishing::{fairness_key, record_published, subject_key};
use crate::ops::streams::Connected;
use crate::quotas;

/// The longest a blocking `SendMessage` waits for its task to finish.
pub const BLOCKING_WAIT: Duration = Duration::from_secs(3);
/// `ListTasks`' default and largest page.
pub const LIST_PAGE_DEFAULT: u32 = 50;
pub const LIST_PAGE_MAX: u32 = 100;

/// The agent a call is for, from its path (`/a2a/{tenant}/{agent}`), and how far the caller
/// reaches among its tasks.
#[derive(Debug, Clone)]
pub struct Face {
    pub tenant_id: TenantId,
    pub agent_id: RecipientId,
    reach: Reach,
    subject: RecipientId,
}

impl Face {
    /// Whether the caller may see `task`: one of this agent's, started by the caller (any, for
    /// an operator).
    pub(in crate::ops) fn sees(&self, task: &Task) -> bool {
        task.agent_id == self.agent_id && (self.reach == Reach::Tenant || task.sender_id == self.subject)
    }
}

/// The agent of the path, once the caller was admitted: the token's tenant, a valid agent id.
pub(in crate::ops) fn face(
    caller: &Caller,
    reach: Reach,
    tenant: &str,
    agent: &str,
) -> Result<Face, A2aError> {
    let tenant_id = TenantId::new(tenant)
        .map_err(|e| RpcError::invalid_params("tenant (the path's)", format!("{tenant:?} {}", e.problem)))?;
    caller.check_tenant(Some(&tenant_id))?;
    let agent_id = RecipientId::new(agent)
        .map_err(|e| RpcError::invalid_params("agent (the path's)", format!("{agent:?} {}", e.problem)))?;
    Ok(Face { tenant_id: caller.tenant_id.clone(), agent_id, reach, subject: caller.subject.clone() })
}

/// A request's `tenant`, when it names one, must be the path's.
pub(in crate::ops) fn check_tenant_param(face: &Face, tenant: Option<&str>) -> Result<(), RpcError> {
    match tenant {
        Some(named) if !named.is_empty() && named != face.tenant_id.as_str() => {
            Err(RpcError::invalid_params(
                "params.tenant",
                format!(
                    "is {named:?}, but this interface is tenant {:?}'s; leave it out",
                    face.tenant_id.as_str()
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// A task id the client names: one the caller sees at this agent, or task-not-found.
pub(in crate::ops) async fn visible_task(
    state: &AppState,
    face: &Face,
    field: &str,
    id: &str,
) -> Result<Task, A2aError> {
    if id.is_empty() {
        return Err(RpcError::invalid_params(field, "is required").into());
    }
    let Some(task_id) = TaskId::parse(id) else {
        return Err(RpcError::task_not_found(id).into());
    };
    match state.store.a2a().task(&face.tenant_id, &task_id).await? {
        Some(task) if face.sees(&task) => Ok(task),
        _ => Err(RpcError::task_not_found(id).into()),
    }
}

/// `SendMessage`: the task the message started (or continued), as it stands after at most
/// [`BLOCKING_WAIT`] unless `returnImmediately`.
pub async fn send(
    state: &AppState,
    caller: &Caller,
    tenant: &str,
    agent: &str,
    params: Value,
) -> Result<SendMessageResponse, A2aError> {
    let reach = caller.operator_or(|c| c.require_any(&A2A_SCOPES))?;
    let face = face(caller, reach, tenant, agent)?;
    let (request, sent) = send_message(state, caller, &face, params).await?;
    let configuration = request.configuration.unwrap_or_default();
    let history_length =
        convert::history_length("params.configuration.historyLength", configuration.history_length)?;
    let mut task = sent.task;
    if !configuration.return_immediately {
        task = settled(state, task, BLOCKING_WAIT).await?;
    }
    Ok(SendMessageResponse { task: convert::task(&task, history_length, true) })
}

/// `SendStreamingMessage`: the task, then its updates until it finishes or waits for the
/// client.
pub async fn send_streaming(
    state: &AppState,
    caller: &Caller,
    tenant: &str,
    agent: &str,
    params: Value,
) -> Result<impl Stream<Item = Frame> + Send + 'static, A2aError> {
    let reach = caller.operator_or(|c| c.require_any(&A2A_SCOPES))?;
    let face = face(caller, reach, tenant, agent)?;
    let held = hold(state, caller)?;
    let (request, sent) = send_message(state, caller, &face, params).await?;
    let configuration = request.configuration.unwrap_or_default();
    let history_length =
        convert::history_length("params.configuration.historyLength", configuration.history_length)?;
    Ok(follow(state.clone(), sent.task, None, history_length, held))
}

/// A stream slot of the node and a waiter slot of the caller, for as long as a stream is open.
fn hold(state: &AppState, caller: &Caller) -> Result<Held, A2aError> {
    let stream = state.limits.hold_stream()?;
    let waiter = state.limits.hold_waiter(caller.tenant_id.as_str(), caller.subject.as_str())?;
    Ok(Held { _stream: stream, _waiter: waiter, _connected: Connected::new(state, "a2a") })
}

/// Reads and checks a message send, then commits it (with its push config) under the tenant's
/// quotas, and hints the agent's streams.
async fn send_message(
    state: &AppState,
    caller: &Caller,
    face: &Face,
    params: Value,
) -> Result<(SendMessageRequest, Sent), A2aError> {
    let request: SendMessageRequest = convert::params(params)?;
    check_tenant_param(face, request.tenant.as_deref())?;
    let message = &request.message;
    check_message("params.message", message, Role::User).map_err(rpc)?;
    let configuration = request.configuration.clone().unwrap_or_default();
    convert::history_length("params.configuration.historyLength", configuration.history_length)?;
    let now = state.store.now();
    let target = match &message.task_id {
        Some(id) if !id.is_empty() => {
            let Some(task_id) = TaskId::parse(id) else { return Err(RpcError::task_not_found(id).into()) };
            SendTarget::Continue { task_id, context_id: message.context_id.clone() }
        }
        _ => SendTarget::New {
            task_id: TaskId::new(now),
            context_id: message.context_id.clone().unwrap_or_else(|| TaskId::new(now).to_string()),
        },
    };
    let push = match &configuration.task_push_notification_config {
        Some(config) => Some(
            push::new_config(state, face, "params.configuration.taskPushNotificationConfig", config).await?,
        ),
        None => None,
    };
    let mut wire = serde_json::to_value(message).map_err(|e| ApiError::internal(e.to_string()))?;
    // The message as the task keeps it: in the wire's names, without what the store sets.
    if let Some(members) = wire.as_object_mut() {
        members.remove("taskId");
    }
    let policy = state.tenant_policies.get(&state.store, &caller.tenant_id).await?;
    let send = SendMessage {
        tenant_id: face.tenant_id.clone(),
        agent_id: face.agent_id.clone(),
        sender_id: caller.subject.clone(),
        message_id: message.message_id.clone(),
        message: wire,
        event_type: EventType::new(inbox_api::a2a::A2A_MESSAGE_EVENT_TYPE).expect("the a2a event type"),
        target,
        push,
        fairness_key: fairness_key(&policy, None, || subject_key(caller)),
    };
    let bytes = serde_json::to_string(&send.message).map_or(0, |t| t.len()) as u64;
    let reservation = state
        .quotas
        .admit(&state.store, &state.metrics, &policy, &caller.tenant_id, quotas::Change::deliveries(1, bytes))
        .await?;
    let sent = match state.store.a2a().send(&send).await {
        Ok(Ok(sent)) => sent,
        Ok(Err(refusal)) => {
            reservation.cancel();
            return Err(refused(message.task_id.as_deref().unwrap_or(""), refusal).into());
        }
        Err(err) => {
            reservation.cancel();
            return Err(err.into());
        }
    };
    match &sent.receipt {
        Some(receipt) => {
            reservation.settle(quotas::Change::committed(receipt, bytes));
            record_published(state, &face.tenant_id, receipt);
            state.a2a.changed();
        }
        None => reservation.cancel(),
    }
    Ok((request, sent))
}

fn refused(task_id: &str, refusal: SendRefusal) -> RpcError {
    match refusal {
        SendRefusal::TaskNotFound => RpcError::task_not_found(task_id),
        SendRefusal::Terminal(state) => RpcError::unsupported(format!(
            "task {task_id:?} is {}: it takes no more messages; send one without taskId to start a new task",
            state.as_str()
        )),
        SendRefusal::NotAwaitingInput(state) => RpcError::unsupported(format!(
            "task {task_id:?} is {}: it takes a message only while it waits for input; follow it with SubscribeToTask",
            state.as_str()
        )),
        SendRefusal::ContextMismatch { context_id } => RpcError::invalid_params(
            "params.message.contextId",
            format!("is not task {task_id:?}'s context ({context_id:?}); leave it out or send the task's"),
        ),
        SendRefusal::PushLimit { limit } => RpcError::invalid_params(
            "params.configuration.taskPushNotificationConfig",
            format!("would pass the limit of {limit} push configs per task"),
        ),
    }
}

/// The task once it finished or waits for the client, or as it stands after `wait`.
async fn settled(state: &AppState, task: Task, wait: Duration) -> Result<Task, A2aError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut watch = state.a2a.watch();
    let mut task = task;
    loop {
        if task.state().is_terminal() || task.state().is_interrupted() {
            return Ok(task);
        }
        tokio::select! {
            _ = watch.changed() => {}
            _ = tokio::time::sleep(super::follow::RECHECK) => {}
            _ = tokio::time::sleep_until(deadline) => return Ok(task),
            _ = state.shutdown.cancelled() => return Ok(task),
        }
        watch.mark_unchanged();
        if let Some(now) = state.store.a2a().task(&task.tenant_id, &task.task_id).await? {
            task = now;
        }
    }
}

/// `GetTask`.
pub async fn get(
    state: &AppState,
    caller: &Caller,
    tenant: &str,
    agent: &str,
    params: Value,
) -> Result<WireTask, A2aError> {
    let reach = caller.operator_or(|c| c.require_any(&A2A_SCOPES))?;
    let face = face(caller, reach, tenant, agent)?;
    let request: GetTaskRequest = convert::params(params)?;
    check_tenant_param(&face, request.tenant.as_deref())?;
    let history_length = convert::history_length("params.historyLength", request.history_length)?;
    let task = visible_task(state, &face, "params.id", &request.id).await?;
    Ok(convert::task(&task, history_length, true))
}

/// `ListTasks`: the caller's tasks of this agent (an operator's: everyone's), newest status
/// first; `nextPageToken` is empty on the last page.
pub async fn list(
    state: &AppState,
    caller: &Caller,
    tenant: &str,
    agent: &str,
    params: Value,
) -> Result<ListTasksResponse, A2aError> {
    let reach = caller.operator_or(|c| c.require_any(&A2A_SCOPES))?;
    let face = face(caller, reach, tenant, agent)?;
    let request: ListTasksRequest = convert::params(params)?;
    check_tenant_param(&face, request.tenant.as_deref())?;
    let page_size = match request.page_size {
        None | Some(0) => LIST_PAGE_DEFAULT,
        Some(n) if (1..=i64::from(LIST_PAGE_MAX)).contains(&n) => n as u32,
        Some(n) => {
            return Err(RpcError::invalid_params(
                "params.pageSize",
                format!("is {n}; send 1 to {LIST_PAGE_MAX}"),
            )
            .into());
        }
    };
    let state_filter = match &request.status {
        None | Some(Value::Null) => None,
        // Unspecified: no filter. `UNRECOGNIZED` (-1) is how the JS SDK writes an absent state.
        Some(Value::String(text)) if text == "TASK_STATE_UNSPECIFIED" || text == "UNRECOGNIZED" => None,
        Some(Value::Number(n)) if matches!(n.as_i64(), Some(0 | -1)) => None,
        Some(value) => Some(convert::stored_state(
            serde_json::from_value::<TaskState>(value.clone())
                .map_err(|e| RpcError::invalid_params("params.status", e))?,
        )),
    };
    if let Some(context) = &request.context_id {
        check_id("params.contextId", context, CONTEXT_ID_BYTES_MAX).map_err(rpc)?;
    }
    let changed_after = match &request.status_timestamp_after {
        Some(text) => Some(UnixMillis(
            parse_utc(text).map_err(|e| RpcError::invalid_params("params.statusTimestampAfter", e))?,
        )),
        None => None,
    };
    let cursor = match request.page_token.as_deref() {
        None | Some("") => None,
        Some(token) => Some(page_cursor(token)?),
    };
    let history_length = convert::history_length("params.historyLength", request.history_length)?;
    let artifacts = request.include_artifacts.unwrap_or(false);
    let query = TaskQuery {
        tenant_id: face.tenant_id.clone(),
        agent_id: face.agent_id.clone(),
        sender_id: (reach == Reach::Own).then(|| caller.subject.clone()),
        context_id: request.context_id.clone(),
        state: state_filter,
        changed_after,
        cursor,
        limit: page_size,
    };
    let page = state.store.a2a().list(&query).await?;
    Ok(ListTasksResponse {
        tasks: page.tasks.iter().map(|task| convert::task(task, history_length, artifacts)).collect(),
        next_page_token: page.next.map(|cursor| page_token(&cursor)).unwrap_or_default(),
        page_size: i64::from(page_size),
        total_size: i64::try_from(page.total).unwrap_or(i64::MAX),
    })
}

/// A page's end as an opaque token: base64url of `{status_at}:{task_id}`.
fn page_token(cursor: &TaskCursor) -> String {
    URL_SAFE_NO_PAD.encode(format!("{}:{}", cursor.status_at.get(), cursor.task_id))
}

fn page_cursor(token: &str) -> Result<TaskCursor, RpcError> {
    let refused = || {
        RpcError::invalid_params(
            "params.pageToken",
            "is not a nextPageToken this server gave; leave it out to start over",
        )
    };
    let text = URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(refused)?;
    let (at, id) = text.split_once(':').ok_or_else(refused)?;
    Ok(TaskCursor {
        status_at: UnixMillis(at.parse().map_err(|_| refused())?),
        task_id: TaskId::parse(id).ok_or_else(refused)?,
    })
}

/// `CancelTask`: canceled, and its event (when no agent took it yet) never run.
pub async fn cancel(
    state: &AppState,
    caller: &Caller,
    tenant: &str,
    agent: &str,
    params: Value,
) -> Result<WireTask, A2aError> {
    let reach = caller.operator_or(|c| c.require_any(&A2A_SCOPES))?;
    let face = face(caller, reach, tenant, agent)?;
    let request: CancelTaskRequest = convert::params(params)?;
    check_tenant_param(&face, request.tenant.as_deref())?;
    let task = visible_task(state, &face, "params.id", &request.id).await?;
    match state.store.a2a().cancel(&face.tenant_id, &task.task_id, caller.subject.as_str()).await? {
        Ok(task) => {
            state.a2a.changed();
            state.hints.touched(&face.tenant_id);
            Ok(convert::task(&task, None, true))
        }
        Err(inbox_store::CancelRefusal::NotFound) => Err(RpcError::task_not_found(&request.id).into()),
        Err(inbox_store::CancelRefusal::NotCancelable(state)) => {
            Err(RpcError::not_cancelable(&request.id, convert::state(state).as_str()).into())
        }
    }
}

/// `SubscribeToTask`: the task as it stands, then its updates after `last_event_id` (the
/// `Last-Event-ID` a client resuming sends; its newest without one) until it finishes. A task
/// finished already is refused, as the specification says, unless the client resumes after a
/// cursor: then it gets what it missed.
pub async fn subscribe(
    state: &AppState,
    caller: &Caller,
    tenant: &str,
    agent: &str,
    params: Value,
    last_event_id: Option<u64>,
) -> Result<impl Stream<Item = Frame> + Send + 'static, A2aError> {
    let reach = caller.operator_or(|c| c.require_any(&A2A_SCOPES))?;
    let face = face(caller, reach, tenant, agent)?;
    let request: SubscribeToTaskRequest = convert::params(params)?;
    check_tenant_param(&face, request.tenant.as_deref())?;
    let task = visible_task(state, &face, "params.id", &request.id).await?;
    if task.state().is_terminal() && last_event_id.is_none_or(|seq| seq >= task.last_seq) {
        return Err(RpcError::unsupported(format!(
            "task {:?} is {}: there is nothing more to follow; GetTask reads it (a client resuming sends \
             Last-Event-ID with the last event id it got)",
            request.id,
            convert::state(task.state()).as_str()
        ))
        .into());
    }
    let held = hold(state, caller)?;
    Ok(follow(state.clone(), task, last_event_id, None, held))
}

/// `GetExtendedAgentCard`: this agent has no extended card (the card says so).
pub async fn extended_card(caller: &Caller, tenant: &str, agent: &str) -> Result<Value, A2aError> {
    let reach = caller.operator_or(|c| c.require_any(&A2A_SCOPES))?;
    face(caller, reach, tenant, agent)?;
    Err(RpcError::unsupported(
        "this agent has no extended agent card (capabilities.extendedAgentCard is false)",
    )
    .into())
}
