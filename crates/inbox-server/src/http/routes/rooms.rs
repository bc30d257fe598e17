//! The built-in meeting-room domain: create a room, read it, change its members, and post
//! messages. A post commits the message and one inbox event per member in one transaction
//! (`SqlStore::post_message`, through [`crate::ops::rooms`]); only after the commit are the
//! members' waiters hinted.
//!
//! Creating rooms, changing members and posting need `rooms.write`. Reading a room needs
//! `rooms.write`, or an agent token with `inbox.poll` whose agent is a member, so an agent can
//! see who else its room's posts reach. Anyone else is told the room does not exist, the same
//! answer as for a room of another tenant.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use inbox_api::time::format_utc;
use inbox_api::{
    CreateRoomRequest, PostMessageRequest, PostMessageResponse, RoomMembersRequest, RoomView, Scope,
};
use inbox_core::{DeduplicationKey, RecipientId};
use inbox_rooms::{NewRoom, PostMessage, Room, RoomId, RoomsExt as _};

use crate::AppState;
use crate::auth::{Caller, CallerKind};
use crate::convert;
use crate::error::ApiError;
use crate::http::extract::ApiJson;
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
    caller.require(Scope::RoomsWrite)?;
    let room = state
        .store
        .rooms()
        .create(&NewRoom {
            tenant_id: caller.tenant_id.clone(),
            room_id: room_id(&request.room_id)?,
            name: request.name,
            members: agent_ids(&request.members)?,
        })
        .await?;
    Ok((StatusCode::CREATED, Json(room_view(&room))))
}

/// A room and its members.
#[utoipa::path(get, path = "/v1/rooms/{room_id}", tag = "rooms", params(("room_id" = String, Path)),
    responses((status = 200, body = RoomView), (status = 404, description = "room_not_found", body = inbox_api::Problem)))]
pub async fn get_room(
    State(state): State<AppState>,
    caller: Caller,
    Path(room_id_text): Path<String>,
) -> Result<Json<RoomView>, ApiError> {
    let writer = caller.has(Scope::RoomsWrite);
    let polling_agent = caller.kind == CallerKind::Agent && caller.has(Scope::InboxPoll);
    if !(writer || polling_agent) {
        // Neither way in applies; name the scope that opens every room of the tenant.
        caller.require(Scope::RoomsWrite)?;
    }
    let room = rooms::read(&state, &caller, &room_id(&room_id_text)?, writer).await?;
    Ok(Json(room_view(&room)))
}

/// Adds member agents; posts from now on reach them, earlier posts do not.
#[utoipa::path(post, path = "/v1/rooms/{room_id}/members", tag = "rooms", params(("room_id" = String, Path)),
    request_body = RoomMembersRequest,
    responses((status = 200, body = RoomView), (status = 404, description = "room_not_found", body = inbox_api::Problem)))]
pub async fn add_members(
    State(state): State<AppState>,
    caller: Caller,
    Path(room_id_text): Path<String>,
    ApiJson(request): ApiJson<RoomMembersRequest>,
) -> Result<Json<RoomView>, ApiError> {
    caller.require(Scope::RoomsWrite)?;
    let room = state
        .store
        .rooms()
        .add_members(&caller.tenant_id, &room_id(&room_id_text)?, &agent_ids(&request.members)?)
        .await?;
    Ok(Json(room_view(&room)))
}

/// Removes one member agent (removing a non-member succeeds); events it already has stay.
#[utoipa::path(delete, path = "/v1/rooms/{room_id}/members/{agent_id}", tag = "rooms",
    params(("room_id" = String, Path), ("agent_id" = String, Path)),
    responses((status = 200, body = RoomView), (status = 404, description = "room_not_found", body = inbox_api::Problem)))]
pub async fn remove_member(
    State(state): State<AppState>,
    caller: Caller,
    Path((room_id_text, agent_id)): Path<(String, String)>,
) -> Result<Json<RoomView>, ApiError> {
    caller.require(Scope::RoomsWrite)?;
    let agent_id = RecipientId::new(agent_id).map_err(|e| ApiError::invalid_field("agent_id", e.problem))?;
    let room =
        state.store.rooms().remove_members(&caller.tenant_id, &room_id(&room_id_text)?, &[agent_id]).await?;
    Ok(Json(room_view(&room)))
}

/// Posts a message: the message and one `meeting_room.message_posted` event per member commit
/// together. `201` for a new message; `200` when `deduplication_key` matched an earlier post,
/// which is returned instead.
#[utoipa::path(post, path = "/v1/rooms/{room_id}/messages", tag = "rooms", params(("room_id" = String, Path)),
    request_body = PostMessageRequest,
    responses((status = 201, body = PostMessageResponse), (status = 200, description = "deduplicated", body = PostMessageResponse),
        (status = 404, description = "room_not_found", body = inbox_api::Problem),
        (status = 413, description = "payload_too_large", body = inbox_api::Problem)))]
pub async fn post_message(
    State(state): State<AppState>,
    caller: Caller,
    Path(room_id_text): Path<String>,
    ApiJson(request): ApiJson<PostMessageRequest>,
) -> Result<(StatusCode, Json<PostMessageResponse>), ApiError> {
    caller.require(Scope::RoomsWrite)?;
    let post = PostMessage {
        tenant_id: caller.tenant_id.clone(),
        room_id: room_id(&room_id_text)?,
        author: caller.subject.clone(),
        body: request.body.to_string(),
        deduplication_key: request
            .deduplication_key
            .map(DeduplicationKey::new)
            .transpose()
            .map_err(|e| ApiError::invalid_field("deduplication_key", e.problem))?,
        priority: convert::priority(request.priority.as_deref())?,
    };
    let posted = rooms::post(&state, &post).await?;
    let status = if posted.deduplicated { StatusCode::OK } else { StatusCode::CREATED };
    Ok((
        status,
        Json(PostMessageResponse {
            room_id: post.room_id.to_string(),
            message_id: posted.message_id.to_string(),
            deduplicated: posted.deduplicated,
            deliveries: posted.receipt.deliveries.iter().map(convert::delivery).collect(),
        }),
    ))
}

fn room_id(text: &str) -> Result<RoomId, ApiError> {
    RoomId::new(text).map_err(|e| ApiError::invalid_field("room_id", e.problem))
}

fn agent_ids(members: &[String]) -> Result<Vec<RecipientId>, ApiError> {
    members
        .iter()
        .enumerate()
        .map(|(i, id)| {
            RecipientId::new(id.as_str())
                .map_err(|e| ApiError::invalid_field(&format!("members[{i}]"), e.problem))
        })
        .collect()
}

fn room_view(room: &Room) -> RoomView {
    RoomView {
        room_id: room.room_id.to_string(),
        name: room.name.clone(),
        members: room.members.iter().map(ToString::to_string).collect(),
        created_at_utc: format_utc(room.created_at.get()),
    }
}
