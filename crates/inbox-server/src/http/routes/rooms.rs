//! The built-in meeting-room domain: create a room, read it, change its members, and post
//! messages. Who may do what, and the post's one transaction, live in `ops/rooms.rs`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use inbox_api::{CreateRoomRequest, PostMessageRequest, PostMessageResponse, RoomMembersRequest, RoomView};

use crate::caller::Caller;
use crate::error::ApiError;
use crate::http::extract::ApiJson;
use crate::node::AppState;
use crate::ops::rooms;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/rooms", post(create_room))
        .route("/v1/rooms/{room_id}", get(get_room))
        .route("/v1/rooms/{room_id}/members", post(add_members))
        .route("/v1/rooms/{room_id}/members/{agent_id}", delete(remove_member))
        .route("/v1/rooms/{room_id}/messages", post(post_message))
}

/// Creates a room in the caller's tenant, with its first member agents.
#[utoipa::path(post, path = "/v1/rooms", tag = "rooms", request_body = CreateRoomRequest,
    responses((status = 201, body = RoomView), (status = 409, description = "room_exists", body = inbox_api::Problem)))]
pub async fn create_room(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<CreateRoomRequest>,
) -> Result<(StatusCode, Json<RoomView>), ApiError> {
    let room = rooms::create(&state, &caller, request).await?;
    Ok((StatusCode::CREATED, Json(room)))
}

/// A room and its members.
#[utoipa::path(get, path = "/v1/rooms/{room_id}", tag = "rooms", params(("room_id" = inbox_core::RoomId, Path)),
    responses((status = 200, body = RoomView), (status = 404, description = "room_not_found", body = inbox_api::Problem)))]
pub async fn get_room(
    State(state): State<AppState>,
    caller: Caller,
    Path(room_id): Path<String>,
) -> Result<Json<RoomView>, ApiError> {
    rooms::read(&state, &caller, &room_id).await.map(Json)
}

/// Adds member agents; posts from now on reach them, earlier posts do not.
#[utoipa::path(post, path = "/v1/rooms/{room_id}/members", tag = "rooms", params(("room_id" = inbox_core::RoomId, Path)),
    request_body = RoomMembersRequest,
    responses((status = 200, body = RoomView), (status = 404, description = "room_not_found", body = inbox_api::Problem)))]
pub async fn add_members(
    State(state): State<AppState>,
    caller: Caller,
    Path(room_id): Path<String>,
    ApiJson(request): ApiJson<RoomMembersRequest>,
) -> Result<Json<RoomView>, ApiError> {
    rooms::add_members(&state, &caller, &room_id, request).await.map(Json)
}

/// Removes one member agent (removing a non-member succeeds); events it already has stay.
#[utoipa::path(delete, path = "/v1/rooms/{room_id}/members/{agent_id}", tag = "rooms",
    params(("room_id" = inbox_core::RoomId, Path), ("agent_id" = inbox_core::RecipientId, Path)),
    responses((status = 200, body = RoomView), (status = 404, description = "room_not_found", body = inbox_api::Problem)))]
pub async fn remove_member(
    State(state): State<AppState>,
    caller: Caller,
    Path((room_id, agent_id)): Path<(String, String)>,
) -> Result<Json<RoomView>, ApiError> {
    rooms::remove_member(&state, &caller, &room_id, &agent_id).await.map(Json)
}

/// Posts a message: the message and one `meeting_room.message_posted` event per member commit
/// together. `201` for a new message; `200` when `deduplication_key` matched an earlier post,
/// which is returned instead.
#[utoipa::path(post, path = "/v1/rooms/{room_id}/messages", tag = "rooms", params(("room_id" = inbox_core::RoomId, Path)),
    request_body = PostMessageRequest,
    responses((status = 201, body = PostMessageResponse), (status = 200, description = "deduplicated", body = PostMessageResponse),
        (status = 404, description = "room_not_found", body = inbox_api::Problem),
        (status = 413, description = "payload_too_large", body = inbox_api::Problem),
        (status = 429, description = "tenant_pending_limit or rate_limited: the tenant's pending-events quota (or a rate limit); retry after Retry-After seconds", body = inbox_api::Problem),
        (status = 507, description = "tenant_storage_limit: the tenant's stored-bytes quota; retry after Retry-After seconds", body = inbox_api::Problem)))]
pub async fn post_message(
    State(state): State<AppState>,
    caller: Caller,
    Path(room_id): Path<String>,
    ApiJson(request): ApiJson<PostMessageRequest>,
) -> Result<(StatusCode, Json<PostMessageResponse>), ApiError> {
    let posted = rooms::post(&state, &caller, &room_id, request).await?;
    let status = if posted.deduplicated { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(posted)))
}
