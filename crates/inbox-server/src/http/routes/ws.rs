//! `GET /v1/streams/ws`: the same hints as SSE, down, as JSON text messages (a
//! [`StreamSignal`]: `inbox.updated`, or `heartbeat` every `heartbeat_interval`), and the
//! inbox operations up, for clients that want one connection for both.
//!
//! Up: `{"op":"claim","id":"c1","body":{...the JSON body of POST /v1/inbox/claim...}}` with op
//! `claim`, `acknowledge`, `release` or `heartbeat`. Down, for each: `{"id":"c1","status":200,
//! "body":{...the HTTP response body...}}`, or the problem document with the status HTTP would
//! have answered. Every op runs through the same functions as its HTTP route, so scopes,
//! validation, rate limits and errors are the same; ops on one connection run one at a time.
//! A claim without a `session_id` claims for the connection's session (`?session_id=`).
//!
//! Under the single-active-session policy, a socket whose session is superseded gets a last
//! `session.superseded` signal and is closed with 1008 (policy violation).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade, close_code};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::any;
use inbox_api::{
    AcknowledgeRequest, ClaimRequest, HeartbeatRequest, ProblemCode, ReleaseRequest, StreamSignal, WsRequest,
    WsResponse,
};
use inbox_core::SessionId;
use serde::Serialize;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::hints::SharedHint;
use crate::http::extract::{StreamAuth, StreamCaller, StreamQuery, admit, parse_json};
use crate::http::origin::RequestOrigin;
use crate::node::AppState;
use crate::ops::inbox;
use crate::ops::streams::{Subscription, Wake};

/// How long a WebSocket send may wait for a client that does not read before the connection
/// is dropped (SSE needs none: its frames are produced only when the connection can take them).
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// The socket's read buffer to begin with: an operation is a few hundred bytes, and a larger
/// message grows the buffer to its size (tungstenite's default, 128 KiB, was most of an idle
/// socket's memory).
const READ_BUFFER_BYTES: usize = 256;

pub fn router() -> Router<AppState> {
    // `any`: HTTP/1.1 upgrades with GET, HTTP/2 (RFC 8441) with an extended CONNECT.
    Router::new().route("/v1/streams/ws", any(websocket))
}

/// Hints down and inbox operations up, over one WebSocket.
#[utoipa::path(get, path = "/v1/streams/ws", tag = "streams", params(StreamQuery),
    responses(
        (status = 101, description = "switching to the WebSocket protocol; messages are StreamSignal down and op requests up", body = StreamSignal),
        (status = 400, description = "websocket_upgrade_required", body = inbox_api::Problem),
        (status = 401, description = "unauthorized, invalid_ticket or invalid_stream_cookie", body = inbox_api::Problem),
        (status = 403, description = "scope_missing or origin_mismatch", body = inbox_api::Problem),
        (status = 409, description = "session_superseded or session_required (single-active-session policy)", body = inbox_api::Problem),
        (status = 429, description = "too_many_waiters", body = inbox_api::Problem),
        (status = 503, description = "streams_at_capacity (this node holds streams_max streams; another node may take it sooner, and polling still works) or database_unavailable: come back after Retry-After seconds", body = inbox_api::Problem)))]
pub async fn websocket(
    State(state): State<AppState>,
    caller: StreamCaller,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let upgrade = upgrade.map_err(|e| {
        ApiError::bad_request(
            ProblemCode::WebsocketUpgradeRequired,
            format!(
                "this endpoint speaks WebSocket only ({}); connect with a WebSocket client",
                e.body_text()
            ),
        )
    })?;
    if caller.via == StreamAuth::Cookie {
        cookie_origin(&state, &headers)?;
    }
    let session_id = caller.session_id.clone();
    let (subscription, first) = Subscription::open(
        &state,
        &caller.caller,
        None,
        "websocket",
        caller.session_id,
        caller.last_event_id,
    )
    .await?;
    let message_bytes_max = state.body_bytes_limit();
    let connection = Connection { caller: caller.caller, session_id };
    Ok(upgrade
        .max_message_size(message_bytes_max)
        .read_buffer_size(READ_BUFFER_BYTES)
        // Every message is written at once (one at a time), so none waits in a buffer.
        .write_buffer_size(0)
        .on_upgrade(move |socket| serve(socket, state, connection, subscription, first)))
}

/// Who is on the other end of a socket.
struct Connection {
    caller: Caller,
    /// The session the socket was opened for: what its claims claim for by default.
    session_id: Option<SessionId>,
}

/// A cookie rides along on any request the browser makes, so a cookie-authenticated
/// WebSocket must come from a page of this server's own origin or of one in `cors_origins`
/// (cross-site WebSocket hijacking).
fn cookie_origin(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    match RequestOrigin::of(&state.config, headers) {
        RequestOrigin::Unnamed | RequestOrigin::Own | RequestOrigin::Listed => Ok(()),
        RequestOrigin::Other => Err(ApiError::forbidden(
            ProblemCode::OriginMismatch,
            "a cookie-authenticated WebSocket must come from a page of this server's own origin or of one listed in cors_origins; use a ticket otherwise",
        )),
    }
}

async fn serve(
    mut socket: WebSocket,
    state: AppState,
    connection: Connection,
    mut subscription: Subscription,
    first: Option<Arc<SharedHint>>,
) {
    // Every phase but the wait is boxed (the operations, the sends, the session checks): each
    // is short and its future large, and inline they would size every idle socket's task as
    // the largest of them for as long as the socket stays open.
    if let Some(hint) = first {
        if Box::pin(send(&mut socket, Outgoing::Hint(hint))).await.is_err() {
            return;
        }
    }
    loop {
        let outgoing = tokio::select! {
            received = socket.recv() => match received {
                Some(Ok(Message::Text(text))) => Outgoing::Reply(Box::pin(answer(&state, &connection, text.as_str())).await),
                Some(Ok(Message::Binary(_))) => Outgoing::Reply(refuse(None, ApiError::bad_request(
                    ProblemCode::UnsupportedMessage,
                    "send operations as JSON text messages, not binary ones",
                ))),
                // Pings are answered by the protocol layer; pongs need nothing.
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
            },
            wake = subscription.next() => match wake {
                Wake::Signal(hint) => Outgoing::Hint(hint),
                Wake::Heartbeat => match subscription.beat().await {
                    None => Outgoing::Heartbeat(subscription.heartbeat_signal()),
                    Some(last) => return Box::pin(superseded(&mut socket, &last)).await,
                },
                Wake::SessionChanged => match subscription.superseded().await {
                    None => continue,
                    Some(last) => return Box::pin(superseded(&mut socket, &last)).await,
                },
                Wake::Closed => {
                    let close = CloseFrame { code: close_code::AWAY, reason: "the server is shutting down".into() };
                    return Box::pin(close_with(&mut socket, close)).await;
                }
            },
        };
        if Box::pin(send(&mut socket, outgoing)).await.is_err() {
            return;
        }
    }
}

/// Sends the last signal of a superseded session and closes with 1008 (policy violation).
async fn superseded(socket: &mut WebSocket, last: &StreamSignal) {
    if send_json(socket, last).await.is_ok() {
        close_with(socket, CloseFrame { code: close_code::POLICY, reason: "session_superseded".into() })
            .await;
    }
}

/// Sends a close frame, waiting at most [`SEND_TIMEOUT`] for the client to take it.
async fn close_with(socket: &mut WebSocket, close: CloseFrame) {
    let _ = tokio::time::timeout(SEND_TIMEOUT, socket.send(Message::Close(Some(close)))).await;
}

/// Sends one message down.
async fn send(socket: &mut WebSocket, outgoing: Outgoing) -> Result<(), ()> {
    match outgoing {
        Outgoing::Reply(reply) => send_json(socket, &reply).await,
        Outgoing::Hint(hint) => send_text(socket, hint.json()).await,
        Outgoing::Heartbeat(signal) => send_json(socket, &signal).await,
    }
}

enum Outgoing {
    Reply(WsResponse),
    /// A hint, its JSON made once for all of the inbox's streams.
    Hint(Arc<SharedHint>),
    Heartbeat(StreamSignal),
}

/// Sends one JSON message.
async fn send_json(socket: &mut WebSocket, message: &impl Serialize) -> Result<(), ()> {
    let text = serde_json::to_string(message).map_err(|_| ())?;
    send_text(socket, text.into()).await
}

/// Sends one text message; a client that does not take it within [`SEND_TIMEOUT`] is dropped
/// so it cannot hold its stream slot forever.
async fn send_text(socket: &mut WebSocket, text: Utf8Bytes) -> Result<(), ()> {
    match tokio::time::timeout(SEND_TIMEOUT, socket.send(Message::Text(text))).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(()),
    }
}

/// Runs one operation and returns what HTTP would have answered.
async fn answer(state: &AppState, connection: &Connection, text: &str) -> WsResponse {
    let request: WsRequest = match parse_json(text.as_bytes()) {
        Ok(request) => request,
        Err(err) => return refuse(None, err),
    };
    let id = request.id.clone();
    let op = request.op.clone();
    let outcome = run(state, connection, request).await;
    let status = outcome.as_ref().map_or_else(|e| e.status, |_| StatusCode::OK);
    state.metrics.ws_requests_total().add([known_op(&op).to_owned(), status.as_u16().to_string()], 1);
    match outcome {
        Ok(body) => WsResponse { id, status: StatusCode::OK.as_u16(), body },
        Err(err) => refuse(id, err),
    }
}

const OPS: &[&str] = &["claim", "acknowledge", "release", "heartbeat"];

/// The op as a metric label: one of [`OPS`] or `unknown`, never caller text.
fn known_op(op: &str) -> &'static str {
    OPS.iter().find(|known| **known == op).copied().unwrap_or("unknown")
}

async fn run(
    state: &AppState,
    connection: &Connection,
    request: WsRequest,
) -> Result<serde_json::Value, ApiError> {
    let caller = &connection.caller;
    admit(state, caller)?;
    let body = request.body.as_deref().map_or("{}", |raw| raw.get()).as_bytes();
    if OPS.contains(&request.op.as_str()) {
        crate::http::signed::refuse_unsigned_if_required(state, caller).await?;
    }
    match request.op.as_str() {
        "claim" => {
            let mut claim = parse_json::<ClaimRequest>(body)?;
            if claim.session_id.is_none() {
                claim.session_id = connection.session_id.clone();
            }
            to_value(inbox::claim(state, caller, claim).await?)
        }
        "acknowledge" => {
            to_value(inbox::acknowledge(state, caller, parse_json::<AcknowledgeRequest>(body)?).await?)
        }
        "release" => to_value(inbox::release(state, caller, parse_json::<ReleaseRequest>(body)?).await?),
        "heartbeat" => {
            to_value(inbox::heartbeat(state, caller, parse_json::<HeartbeatRequest>(body)?).await?)
        }
        other => Err(ApiError::bad_request(
            ProblemCode::UnknownOp,
            format!(
                "op {other:?} is not one of {}; see the WebSocket section of the API docs",
                OPS.join(", ")
            ),
        )
        .with("field", "op")),
    }
}

fn to_value(body: impl Serialize) -> Result<serde_json::Value, ApiError> {
    serde_json::to_value(body).map_err(|e| ApiError::internal(format!("serializing a reply: {e}")))
}

fn refuse(id: Option<String>, err: ApiError) -> WsResponse {
    let status = err.status.as_u16();
    let problem = err.into_problem();
    WsResponse { id, status, body: serde_json::to_value(problem).unwrap_or_default() }
}
