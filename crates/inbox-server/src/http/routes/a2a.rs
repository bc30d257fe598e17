//! Each agent's A2A 1.0 face: its public card (`GET
//! /a2a/{tenant_id}/{agent_id}/.well-known/agent-card.json`, where the SDKs' card resolvers look
//! under the agent's base URL) and its JSON-RPC interface (`POST /a2a/{tenant_id}/{agent_id}`),
//! each method one use case of `ops/a2a/`. Streams (`SendStreamingMessage`, `SubscribeToTask`)
//! answer SSE; everything else one JSON-RPC answer.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use crate::caller::Caller;
use crate::error::ApiError;
use crate::http::a2a::{self, Method, RpcCall, answer, stream};
use crate::node::AppState;
use crate::ops::a2a::{card, push, tasks};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/a2a/{tenant_id}/{agent_id}/.well-known/agent-card.json", get(agent_card))
        .route("/a2a/{tenant_id}/{agent_id}", post(rpc))
}

/// An agent's A2A card: its JSON-RPC interface, capabilities (streaming, push notifications)
/// and security scheme (this service's bearer tokens, with the `a2a.send` scope). Public.
#[utoipa::path(get, path = "/a2a/{tenant_id}/{agent_id}/.well-known/agent-card.json", tag = "a2a",
    params(("tenant_id" = inbox_core::TenantId, Path), ("agent_id" = inbox_core::RecipientId, Path)),
    security(()),
    responses((status = 200, description = "The agent's card (A2A 1.0 ProtoJSON)", body = inbox_api::a2a::AgentCard)))]
pub async fn agent_card(
    State(state): State<AppState>,
    Path((tenant_id, agent_id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let origin = a2a::origin(&headers, state.config.tls.cert.is_some());
    let card = card::card(&tenant_id, &agent_id, origin.as_deref())?;
    let cache = [(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=300"))];
    Ok((cache, Json(card)).into_response())
}

/// The agent's A2A JSON-RPC interface: `SendMessage` (a message kept in the agent's inbox; its
/// task in `submitted` until the agent takes it), `SendStreamingMessage`, `GetTask`,
/// `ListTasks`, `CancelTask`, `SubscribeToTask` (resuming after the `Last-Event-ID` a client
/// sends), the push-notification config methods and `GetExtendedAgentCard`. Needs
/// `A2A-Version: 1.0`; JSON-RPC errors answer HTTP 200 with A2A's codes.
#[utoipa::path(post, path = "/a2a/{tenant_id}/{agent_id}", tag = "a2a",
    params(("tenant_id" = inbox_core::TenantId, Path), ("agent_id" = inbox_core::RecipientId, Path),
        ("A2A-Version" = String, Header, description = "The A2A protocol version: 1.0"),
        ("Last-Event-ID" = Option<u64>, Header, description = "SubscribeToTask: resume after this event (the SSE id of the last one received)")),
    request_body = inbox_api::a2a::JsonRpcRequest,
    responses(
        (status = 200, description = "A JSON-RPC answer (result or error); for SendStreamingMessage and SubscribeToTask a text/event-stream of JSON-RPC answers, each `id:` the task's update sequence", body = inbox_api::a2a::JsonRpcResponse),
        (status = 401, description = "unauthorized or invalid_token", body = inbox_api::Problem),
        (status = 403, description = "scope_missing (a2a.send) or tenant_mismatch (the path's tenant is not the token's)", body = inbox_api::Problem)))]
pub async fn rpc(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, agent)): Path<(String, String)>,
    call: RpcCall,
) -> Response {
    let RpcCall { id, method, params, last_event_id } = call;
    let (s, c, t, a) = (&state, &caller, tenant.as_str(), agent.as_str());
    match method {
        Method::SendMessage => answer(&id, tasks::send(s, c, t, a, params).await),
        Method::SendStreamingMessage => stream(&id, tasks::send_streaming(s, c, t, a, params).await),
        Method::GetTask => answer(&id, tasks::get(s, c, t, a, params).await),
        Method::ListTasks => answer(&id, tasks::list(s, c, t, a, params).await),
        Method::CancelTask => answer(&id, tasks::cancel(s, c, t, a, params).await),
        Method::SubscribeToTask => stream(&id, tasks::subscribe(s, c, t, a, params, last_event_id).await),
        Method::CreateTaskPushNotificationConfig => answer(&id, push::create(s, c, t, a, params).await),
        Method::GetTaskPushNotificationConfig => answer(&id, push::get(s, c, t, a, params).await),
        Method::ListTaskPushNotificationConfigs => answer(&id, push::list(s, c, t, a, params).await),
        Method::DeleteTaskPushNotificationConfig => answer(&id, push::delete(s, c, t, a, params).await),
        Method::GetExtendedAgentCard => answer(&id, tasks::extended_card(c, t, a).await),
    }
}
