//! Push notifications (A2A's webhooks): the config methods (`Create`, `Get`, `List`, `Delete`
//! `TaskPushNotificationConfig`) and the worker that delivers a task's updates to them.
//!
//! A config's URL is held to the callbacks' SSRF rules when it is made (parsed strictly, its
//! host resolved and every address checked) and again by the callback sender on every request
//! (`ops/callbacks/sender.rs`: the connection pinned to the checked address, no proxy, no
//! redirects, bounded time and size). Each notification is one update of the task's log as
//! A2A's `StreamResponse` (`application/a2a+json`), in order, with `Authorization: {scheme}
//! {credentials}` when the config gave them, `X-A2A-Notification-Token`, and the callbacks' RFC
//! 9421 signature (hmac-sha256, `keyid` = the config's id) under a key made from the token
//! ([`signing_key`]), so a receiver that knows its token can check it came from here. A failing webhook is retried with the
//! callbacks' backoff; an update is given up on after `callbacks_attempts_max` attempts and
//! the next one is tried. The task itself never waits for a webhook.

use std::time::Duration;

use inbox_api::a2a::{
    AuthenticationInfo, ListTaskPushNotificationConfigsRequest, ListTaskPushNotificationConfigsResponse,
    TaskPushNotificationConfig, TaskPushNotificationConfigRequest,
};
use inbox_core::KeyId;
use inbox_store::{DuePush, NewPushConfig, PushConfig, PushResult};
use serde_json::{Value, json};

use super::convert::{self, check_id, rpc};
use super::tasks::{Face, check_tenant_param, face, visible_task};
use super::{A2A_SCOPES, A2aError, RpcError};
use crate::caller::Caller;
use crate::node::AppState;
use crate::ops::callbacks::sender::Outgoing;
use crate::periodic::{Failure, Job, Outcome};

/// Longest token a client may give (it is also the signing key), in bytes.
const TOKEN_BYTES_MAX: usize = 256;
/// Longest `authentication.credentials`, in bytes.
const CREDENTIALS_BYTES_MAX: usize = 4_096;
/// Longest `authentication.scheme`.
const SCHEME_BYTES_MAX: usize = 64;
/// Configs one `ListTaskPushNotificationConfigs` page answers at most.
const LIST_PAGE_MAX: u32 = 100;
/// Updates one delivery sends at most before it lets the config go.
const UPDATES_PER_DELIVERY: u32 = 20;

/// A config from the client's params, checked: a URL the callback rules accept (resolved and
/// every address checked), an id of the id alphabet (one made when absent), a token (one made
/// when absent), and header-safe credentials.
pub(in crate::ops) async fn new_config(
    state: &AppState,
    face: &Face,
    field: &str,
    config: &TaskPushNotificationConfig,
) -> Result<NewPushConfig, A2aError> {
    check_tenant_param(face, config.tenant.as_deref())?;
    let url_field = format!("{field}.url");
    if config.url.is_empty() {
        return Err(RpcError::invalid_params(&url_field, "is required: the webhook to notify").into());
    }
    let sender = &state.callback_sender;
    let target = sender
        .parse(&config.url)
        .map_err(|refusal| RpcError::invalid_params(&url_field, format!("is refused: {refusal}")))?;
    sender
        .check(&target)
        .await
        .map_err(|refusal| RpcError::invalid_params(&url_field, format!("is refused: {refusal}")))?;
    let config_id = match &config.id {
        Some(id) if !id.is_empty() => KeyId::new(id.as_str())
            .map_err(|e| RpcError::invalid_params(&format!("{field}.id"), e.problem))?
            .to_string(),
        _ => format!("pnc_{}", hex::encode(inbox_store::random_bytes::<8>())),
    };
    let token = match &config.token {
        Some(token) if !token.is_empty() => {
            header_safe(&format!("{field}.token"), token, TOKEN_BYTES_MAX)?;
            token.clone()
        }
        _ => hex::encode(inbox_store::random_bytes::<24>()),
    };
    let (auth_scheme, credentials) = match &config.authentication {
        None => (None, None),
        Some(AuthenticationInfo { scheme, credentials }) => {
            let scheme_field = format!("{field}.authentication.scheme");
            check_id(&scheme_field, scheme, SCHEME_BYTES_MAX).map_err(rpc)?;
            if !scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~+!#$%&'*^`|".contains(&b)) {
                return Err(RpcError::invalid_params(
                    &scheme_field,
                    "is not an HTTP authentication scheme such as Bearer",
                )
                .into());
            }
            let credentials = match credentials {
                Some(text) if !text.is_empty() => {
                    header_safe(&format!("{field}.authentication.credentials"), text, CREDENTIALS_BYTES_MAX)?;
                    Some(text.clone())
                }
                _ => None,
            };
            (Some(scheme.clone()), credentials)
        }
    };
    Ok(NewPushConfig {
        tenant_id: face.tenant_id.clone(),
        // Set by the caller: the task's.
        task_id: inbox_store::TaskId::new(state.store.now()),
        config_id,
        url: config.url.clone(),
        token,
        auth_scheme,
        credentials,
    })
}

/// Printable ASCII, at most `max` bytes: what an HTTP header value may carry.
fn header_safe(field: &str, text: &str, max: usize) -> Result<(), RpcError> {
    if text.len() > max {
        return Err(RpcError::invalid_params(field, format!("is {} bytes; the limit is {max}", text.len())));
    }
    if !text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(RpcError::invalid_params(
            field,
            "holds characters an HTTP header cannot carry; use printable ASCII",
        ));
    }
    Ok(())
}

/// The key a notification is signed with: SHA-256 of `agent-inbox a2a push v1\0` and the
/// token, 32 bytes whatever the token's length, which a receiver that knows its token makes too.
pub fn signing_key(token: &str) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::new().chain_update(b"agent-inbox a2a push v1\0").chain_update(token.as_bytes()).finalize().into()
}

/// A stored config as the client sees it: never its credentials.
fn view(config: &PushConfig) -> TaskPushNotificationConfig {
    TaskPushNotificationConfig {
        tenant: None,
        id: Some(config.config_id.clone()),
        task_id: config.task_id.to_string(),
        url: config.url.clone(),
        token: Some(config.token.clone()),
        authentication: config
            .auth_scheme
            .as_ref()
            .map(|scheme| AuthenticationInfo { scheme: scheme.clone(), credentials: None }),
    }
}

/// `CreateTaskPushNotificationConfig`: a webhook for one of the caller's tasks (its id named
/// again replaces it).
pub async fn create(
    state: &AppState,
    caller: &Caller,
    tenant: &str,
    agent: &str,
    params: Value,
) -> Result<TaskPushNotificationConfig, A2aError> {
    let reach = caller.operator_or(|c| c.require_any(&A2A_SCOPES))?;
    let face = face(caller, reach, tenant, agent)?;
    let request: TaskPushNotificationConfig = convert::params(params)?;
    let task = visible_task(state, &face, "params.taskId", &request.task_id).await?;
    let new = NewPushConfig {
        task_id: task.task_id.clone(),
        ..new_config(state, &face, "params", &request).await?
    };
    match state.store.a2a().create_push(&new).await? {
        Ok(Some(config)) => Ok(view(&config)),
        Ok(None) => Err(RpcError::task_not_found(&request.task_id).into()),
        Err(limit) => Err(RpcError::invalid_params(
            "params.taskId",
            format!("names a task with {limit} push configs, the most it may have; delete one first"),
        )
        .into()),
    }
}

/// `GetTaskPushNotificationConfig`.
pub async fn get(
    state: &AppState,
    caller: &Caller,
    tenant: &str,
    agent: &str,
    params: Value,
) -> Result<TaskPushNotificationConfig, A2aError> {
    let reach = caller.operator_or(|c| c.require_any(&A2A_SCOPES))?;
    let face = face(caller, reach, tenant, agent)?;
    let request: TaskPushNotificationConfigRequest = convert::params(params)?;
    check_tenant_param(&face, request.tenant.as_deref())?;
    let task = visible_task(state, &face, "params.taskId", &request.task_id).await?;
    if request.id.is_empty() {
        return Err(RpcError::invalid_params("params.id", "is required: the config's id").into());
    }
    match state.store.a2a().push_config(&face.tenant_id, &task.task_id, &request.id).await? {
        Some(config) => Ok(view(&config)),
        None => Err(RpcError::task_not_found(&request.task_id).with_config(&request.id).into()),
    }
}

/// `ListTaskPushNotificationConfigs`: by id, paged by the last id.
pub async fn list(
    state: &AppState,
    caller: &Caller,
    tenant: &str,
    agent: &str,
    params: Value,
) -> Result<ListTaskPushNotificationConfigsResponse, A2aError> {
    let reach = caller.operator_or(|c| c.require_any(&A2A_SCOPES))?;
    let face = face(caller, reach, tenant, agent)?;
    let request: ListTaskPushNotificationConfigsRequest = convert::params(params)?;
    check_tenant_param(&face, request.tenant.as_deref())?;
    let task = visible_task(state, &face, "params.taskId", &request.task_id).await?;
    let page_size = match request.page_size {
        None | Some(0) => LIST_PAGE_MAX,
        Some(n) if (1..=i64::from(LIST_PAGE_MAX)).contains(&n) => n as u32,
        Some(n) => {
            return Err(RpcError::invalid_params(
                "params.pageSize",
                format!("is {n}; send 1 to {LIST_PAGE_MAX}"),
            )
            .into());
        }
    };
    let after = request.page_token.as_deref().filter(|t| !t.is_empty());
    let mut configs =
        state.store.a2a().push_configs(&face.tenant_id, &task.task_id, after, page_size + 1).await?;
    let more = configs.len() > page_size as usize;
    configs.truncate(page_size as usize);
    let next_page_token = match more {
        true => configs.last().map(|c| c.config_id.clone()).unwrap_or_default(),
        false => String::new(),
    };
    Ok(ListTaskPushNotificationConfigsResponse {
        configs: configs.iter().map(view).collect(),
        next_page_token,
    })
}

/// `DeleteTaskPushNotificationConfig`: idempotent; answers `{}`.
pub async fn delete(
    state: &AppState,
    caller: &Caller,
    tenant: &str,
    agent: &str,
    params: Value,
) -> Result<Value, A2aError> {
    let reach = caller.operator_or(|c| c.require_any(&A2A_SCOPES))?;
    let face = face(caller, reach, tenant, agent)?;
    let request: TaskPushNotificationConfigRequest = convert::params(params)?;
    check_tenant_param(&face, request.tenant.as_deref())?;
    let task = visible_task(state, &face, "params.taskId", &request.task_id).await?;
    if request.id.is_empty() {
        return Err(RpcError::invalid_params("params.id", "is required: the config's id").into());
    }
    state.store.a2a().delete_push(&face.tenant_id, &task.task_id, &request.id).await?;
    Ok(json!({}))
}

impl RpcError {
    fn with_config(self, config_id: &str) -> RpcError {
        let mut error = self;
        error.message = format!("{} (push config {config_id:?} of it)", error.message);
        error
    }
}

/// The push worker: every `callbacks_poll_interval`, takes due configs within the node's
/// in-flight permits and delivers each one's waiting updates in its own task.
#[derive(Debug)]
pub struct PushDispatcher;

impl Job for PushDispatcher {
    const NAME: &'static str = "a2a push dispatcher";

    async fn tick(&mut self, state: &AppState) -> Outcome {
        pass(state).await.map_err(|err| Failure::new("a2a push pass", err))
    }
}

async fn pass(state: &AppState) -> Result<(), inbox_store::StoreError> {
    let now = state.store.now();
    let due = state.store.a2a().due_pushes(now, state.config.callbacks.in_flight_max.min(64)).await?;
    for push in due {
        let Some(permit) = state.callback_sender.try_permit() else { return Ok(()) };
        let lease_until =
            now.plus_ms((state.callback_sender.timeout() * 3 + Duration::from_secs(5)).as_millis() as u64);
        if !state.store.a2a().claim_push(&push.config, lease_until).await? {
            continue;
        }
        let state = state.clone();
        tokio::spawn(async move {
            deliver(&state, push, lease_until).await;
            drop(permit);
        });
    }
    Ok(())
}

/// Sends a config's waiting updates in order, then records how far it got.
async fn deliver(state: &AppState, push: DuePush, lease_until: inbox_core::UnixMillis) {
    let config = &push.config;
    let a2a = state.store.a2a();
    let result = match send_waiting(state, config).await {
        Ok(result) => result,
        Err(err) => {
            tracing::warn!(error = %err, task_id = %config.task_id, "reading a task's updates for its webhook failed");
            return;
        }
    };
    if let PushResult::Failed { error, .. } = &result {
        tracing::info!(
            task_id = %config.task_id, config_id = %config.config_id, attempt = config.failed_attempts + 1,
            error = %error, "an A2A push notification failed; the client still reads the task"
        );
    }
    if let Err(err) = a2a.finish_push(config, lease_until, &result).await {
        tracing::warn!(error = %err, "recording an A2A push delivery failed; it is sent again after its lease");
    }
}

async fn send_waiting(state: &AppState, config: &PushConfig) -> Result<PushResult, inbox_store::StoreError> {
    let a2a = state.store.a2a();
    let Some(task) = a2a.task(&config.tenant_id, &config.task_id).await? else {
        return Ok(PushResult::Delivered { seq: config.delivered_seq });
    };
    let updates = a2a
        .updates_after(&config.tenant_id, &config.task_id, config.delivered_seq, UPDATES_PER_DELIVERY)
        .await?;
    let sender = &state.callback_sender;
    let mut headers = vec![("x-a2a-notification-token", config.token.clone())];
    if let (Some(scheme), Some(credentials)) = (&config.auth_scheme, &config.credentials) {
        headers.push(("authorization", format!("{scheme} {credentials}")));
    }
    let key = signing_key(&config.token);
    let secrets = [(config.config_id.as_str(), key.as_slice())];
    let mut delivered = config.delivered_seq;
    for update in &updates {
        let body = serde_json::to_vec(&convert::update(task.task_id.as_str(), &task.context_id, update))
            .unwrap_or_default();
        let now = state.store.now();
        let delivery_id = crate::ops::callbacks::delivery_id(now);
        let outgoing =
            Outgoing { url: &config.url, body, content_type: "application/a2a+json", headers: &headers };
        match sender.send_with(outgoing, &secrets, &delivery_id, now, sender.timeout()).await {
            Ok(_) => delivered = update.seq,
            Err(err) => {
                let failures = config.consecutive_failures.saturating_add(1).max(config.failed_attempts + 1);
                let jitter =
                    f64::from(u32::from_le_bytes(inbox_store::random_bytes::<4>())) / f64::from(u32::MAX);
                let next_attempt_at = state.store.now().plus_ms(sender.backoff_ms(failures, jitter));
                let first_try = delivered == config.delivered_seq;
                let attempts = if first_try { config.failed_attempts + 1 } else { 1 };
                return Ok(PushResult::Failed {
                    seq: delivered,
                    error: err.to_string(),
                    next_attempt_at,
                    attempts,
                    give_up: attempts >= state.config.callbacks.attempts_max,
                });
            }
        }
    }
    Ok(PushResult::Delivered { seq: delivered })
}
