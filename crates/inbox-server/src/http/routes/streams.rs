//! Server-Sent Events: `GET /v1/streams/sse` (seed 001's `sse_url`) and seed 000's
//! `GET /api/v1/agents/{agent_id}/subscribe`, plus the browser credentials for streams:
//! single-use tickets (`POST /v1/streams/tickets`) and the HttpOnly stream cookie
//! (`POST /v1/streams/cookie`).
//!
//! The stream carries hints only. Each `inbox.updated` event has `id:` = its `head_seq`, so a
//! browser reconnecting with `Last-Event-ID` gets an immediate event when the head moved while
//! it was away. Keep-alives are seed 000's `event: heartbeat` / `data: {}` every
//! `heartbeat_interval`; the stream starts with `retry:` advice. The frames are written here,
//! in the few lines of the SSE format the stream uses, rather than through axum's `Sse`, so a
//! heartbeat is a static slice and a stream keeps no encoder of its own.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::Stream;
use inbox_api::{
    Seed000Signal, StreamCookieRequest, StreamCookieResponse, StreamSignal, StreamTicketRequest,
    StreamTicketResponse,
};

use crate::caller::Caller;
use crate::error::ApiError;
use crate::hints::SharedHint;
use crate::http::extract::{JsonOrEmpty, STREAM_COOKIE, StreamCaller, StreamQuery};
use crate::http::stream_params::forwarded_https;
use crate::node::AppState;
use crate::ops::sessions::WebsocketOrigin;
use crate::ops::streams::credentials;
use crate::ops::streams::{SESSION_SUPERSEDED, Subscription, Wake};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/streams/sse", get(sse))
        .route("/api/v1/agents/{agent_id}/subscribe", get(subscribe_alias))
        .route("/v1/streams/tickets", post(ticket))
        .route("/v1/streams/cookie", post(cookie))
}

/// Hints for the caller's inbox as Server-Sent Events.
#[utoipa::path(get, path = "/v1/streams/sse", tag = "streams", params(StreamQuery),
    responses(
        (status = 200, description = "text/event-stream of inbox.updated events (data: StreamSignal) and heartbeats", body = StreamSignal, content_type = "text/event-stream"),
        (status = 401, description = "unauthorized, invalid_ticket or invalid_stream_cookie", body = inbox_api::Problem),
        (status = 409, description = "session_superseded or session_required: the tenant allows one active session per agent, and this stream does not name the agent's newest one. A stream whose session is superseded while open gets a last `session.superseded` event, then ends", body = inbox_api::Problem),
        (status = 429, description = "too_many_waiters", body = inbox_api::Problem),
        (status = 503, description = "streams_at_capacity (this node holds streams_max streams; another node may take it sooner, and polling still works) or database_unavailable: come back after Retry-After seconds", body = inbox_api::Problem)))]
pub async fn sse(State(state): State<AppState>, caller: StreamCaller) -> Result<Response, ApiError> {
    open_sse(state, caller, None, Names::Seed001).await
}

/// Seed 000's SSE route, the same stream as `GET /v1/streams/sse`.
#[utoipa::path(get, path = "/api/v1/agents/{agent_id}/subscribe", tag = "agents (seed 000 aliases)",
    params(("agent_id" = inbox_core::RecipientId, Path), StreamQuery),
    responses((status = 200, description = "text/event-stream, as GET /v1/streams/sse, in seed 000's names: `event: inbox_updated`, data: Seed000Signal (the signal with `cursor_hint`)", body = Seed000Signal, content_type = "text/event-stream")))]
pub async fn subscribe_alias(
    State(state): State<AppState>,
    caller: StreamCaller,
    Path(agent_id): Path<String>,
) -> Result<Response, ApiError> {
    open_sse(state, caller, Some(&agent_id), Names::Seed000).await
}

/// Whose names a stream's hints carry: seed 001's (`inbox.updated`), or seed 000's on its own
/// route (`inbox_updated` with `cursor_hint`, beside the canonical fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Names {
    Seed001,
    Seed000,
}

/// Opens the stream (`agent_id`: the agent seed 000's path names) and answers with its
/// frames.
async fn open_sse(
    state: AppState,
    caller: StreamCaller,
    agent_id: Option<&str>,
    names: Names,
) -> Result<Response, ApiError> {
    let StreamCaller { caller, session_id, last_event_id, .. } = caller;
    let (subscription, first) =
        Subscription::open(&state, &caller, agent_id, "sse", session_id, last_event_id).await?;
    // The first frame: the reconnect advice, with the hint when the head is already past the
    // client's last event.
    let opening = format!("retry: {}\n", state.config.sessions.sse_retry.as_millis());
    let mut opening = opening.into_bytes();
    match &first {
        Some(hint) => opening.extend_from_slice(&hint_frame(hint, names)),
        None => opening.push(b'\n'),
    }
    let body = Body::from_stream(frames(subscription, Bytes::from(opening), names));
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        // Ask buffering proxies (nginx) to pass events through as they are written.
        (HeaderName::from_static("x-accel-buffering"), HeaderValue::from_static("no")),
    ];
    Ok((headers, body).into_response())
}

/// A heartbeat frame: the same bytes every time, so a beat allocates nothing.
const HEARTBEAT_FRAME: &[u8] = b"event: heartbeat\ndata: {}\n\n";

/// The event stream: the opening frame, then hints and heartbeats until the client goes away
/// (the response body is dropped), the server shuts down, or the session is superseded (a last
/// `session.superseded` event, then the end). A frame is made only when the connection asks
/// for the next one, so a client that stops reading costs nothing but its socket buffers, and
/// the hint it gets when it reads again is the latest head; a client that reads nothing for
/// `write_stall_timeout` is disconnected by the listener (`http/stall.rs`).
fn frames(
    subscription: Subscription,
    opening: Bytes,
    names: Names,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    let start = (Some(subscription), Some(opening));
    futures_util::stream::unfold(start, move |(subscription, opening)| async move {
        // No subscription: the last event went out.
        let mut subscription = subscription?;
        if let Some(frame) = opening {
            return Some((Ok(frame), (Some(subscription), None)));
        }
        let final_signal = loop {
            match subscription.next().await {
                Wake::Signal(hint) => {
                    return Some((Ok(hint_frame(&hint, names)), (Some(subscription), None)));
                }
                Wake::Heartbeat => match subscription.beat().await {
                    None => {
                        return Some((Ok(Bytes::from_static(HEARTBEAT_FRAME)), (Some(subscription), None)));
                    }
                    Some(last) => break last,
                },
                Wake::SessionChanged => {
                    if let Some(last) = subscription.superseded().await {
                        break last;
                    }
                }
                Wake::Closed => return None,
            }
        };
        let data = serde_json::to_string(&final_signal).unwrap_or_default();
        Some((Ok(Bytes::from(format!("event: {SESSION_SUPERSEDED}\ndata: {data}\n\n"))), (None, None)))
    })
}

/// One `inbox.updated` event (`inbox_updated` with `cursor_hint` in seed 000's names), its id
/// the head, so a reconnecting `EventSource` sends it back as `Last-Event-ID`. Seed 001's frame
/// is made once per hint for all of the inbox's streams.
fn hint_frame(hint: &SharedHint, names: Names) -> Bytes {
    let frame = |event: &str, data: String, head: u64| {
        Bytes::from(format!("id: {head}\nevent: {event}\ndata: {data}\n\n"))
    };
    match names {
        Names::Seed001 => hint.sse_frame(|signal| {
            frame("inbox.updated", serde_json::to_string(signal).unwrap_or_default(), signal.head_seq)
        }),
        Names::Seed000 => {
            let signal = &hint.signal;
            let seed_000 = Seed000Signal { signal: signal.clone(), cursor_hint: signal.head_seq };
            frame("inbox_updated", serde_json::to_string(&seed_000).unwrap_or_default(), signal.head_seq)
        }
    }
}

/// Mints a single-use stream ticket for the caller, valid for at most 60 s on any node.
#[utoipa::path(post, path = "/v1/streams/tickets", tag = "streams", request_body(content = StreamTicketRequest, description = "optional"),
    responses((status = 201, body = StreamTicketResponse), (status = 403, description = "scope_missing", body = inbox_api::Problem)))]
pub async fn ticket(
    State(state): State<AppState>,
    caller: Caller,
    origin: WebsocketOrigin,
    JsonOrEmpty(request): JsonOrEmpty<StreamTicketRequest>,
) -> Result<(StatusCode, Json<StreamTicketResponse>), ApiError> {
    let ticket = credentials::ticket(&state, &caller, &origin, request).await?;
    Ok((StatusCode::CREATED, Json(ticket)))
}

/// Sets the stream cookie: HttpOnly, SameSite=Strict, reusable until it expires, so a
/// browser's `EventSource` can reconnect on its own. It authenticates the stream endpoints
/// only; every other endpoint ignores cookies.
#[utoipa::path(post, path = "/v1/streams/cookie", tag = "streams", request_body(content = StreamCookieRequest, description = "optional"),
    responses((status = 201, body = StreamCookieResponse, headers(("set-cookie" = String, description = "agent_inbox_stream=...; HttpOnly; SameSite=Strict"))),
        (status = 403, description = "scope_missing", body = inbox_api::Problem)))]
pub async fn cookie(
    State(state): State<AppState>,
    caller: Caller,
    origin: WebsocketOrigin,
    headers: HeaderMap,
    JsonOrEmpty(request): JsonOrEmpty<StreamCookieRequest>,
) -> Result<Response, ApiError> {
    let cookie = credentials::cookie(&state, &caller, &origin, request).await?;
    let secure = if forwarded_https(&headers) { "; Secure" } else { "" };
    let set_cookie = format!(
        "{STREAM_COOKIE}={}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{secure}",
        cookie.value, cookie.max_age_seconds
    );
    let set_cookie = HeaderValue::from_str(&set_cookie).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok((
        StatusCode::CREATED,
        [(header::SET_COOKIE, set_cookie), (header::CACHE_CONTROL, HeaderValue::from_static("no-store"))],
        Json(cookie.body),
    )
        .into_response())
}
