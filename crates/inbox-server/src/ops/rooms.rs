//! The built-in meeting-room domain's use cases: create a room, read it, change its members,
//! and post messages. A post commits the message and one inbox event per member in one
//! transaction (`inbox_rooms`' `post`); only after the commit, which is measured as a
//! publish's, are the members' waiters hinted. Under a tenant's quotas a post counts one
//! delivery per member.
//!
//! Creating rooms, changing members and posting need `rooms.write`. Reading a room needs
//! `rooms.write`, or an agent token with `inbox.poll` whose agent is a member, so an agent can
//! see who else its room's posts reach. Anyone else is told the room does not exist, the same
//! answer as for a room of another tenant.

use std::time::Instant;

use inbox_api::time::format_utc;
use inbox_api::{
    CreateRoomRequest, PostMessageRequest, PostMessageResponse, RoomMembersRequest, RoomView, Scope,
};
use inbox_core::limits::RoomName;
use inbox_core::{FairnessKey, RecipientId};
use inbox_rooms::{BoundedPost, NewRoom, PostMessage, PostedMessage, Room, RoomId, RoomsExt as _};
use inbox_store::{StoreError, TenantPolicy};

use crate::caller::{Caller, Reach};
use crate::convert;
use crate::error::ApiError;
use crate::node::AppState;
use crate::ops::publishing::{fairness_key, record_published};
use crate::quotas;

/// Creates a room in the caller's tenant, with its first member agents.
pub async fn create(
    state: &AppState,
    caller: &Caller,
    request: CreateRoomRequest,
) -> Result<RoomView, ApiError> {
    caller.require(Scope::RoomsWrite)?;
    let room = state
        .store
        .rooms()
        .create(&NewRoom {
            tenant_id: caller.tenant_id.clone(),
            room_id: request.room_id,
            name: request.name.map(RoomName::into_string),
            members: request.members.into_vec(),
        })
        .await?;
    Ok(room_view(&room))
}

/// A room and its members, for a caller who may write rooms or is one of its members.
pub async fn read(state: &AppState, caller: &Caller, room_id_text: &str) -> Result<RoomView, ApiError> {
    let reach = match caller.require(Scope::RoomsWrite) {
        Ok(()) => Reach::Tenant,
        Err(_) if caller.is_agent() && caller.has(Scope::InboxPoll) => Reach::Own,
        // Neither way in applies: name the scope that opens every room of the tenant.
        Err(refused) => return Err(refused),
    };
    let room_id = room_id(room_id_text)?;
    let room = state.store.rooms().get(&caller.tenant_id, &room_id).await?;
    if reach == Reach::Own && room.members.binary_search(&caller.subject).is_err() {
        return Err(StoreError::NotFound { what: "room", id: room_id.to_string() }.into());
    }
    Ok(room_view(&room))
}

/// Adds member agents; posts from now on reach them, earlier posts do not.
pub async fn add_members(
    state: &AppState,
    caller: &Caller,
    room_id_text: &str,
    request: RoomMembersRequest,
) -> Result<RoomView, ApiError> {
    caller.require(Scope::RoomsWrite)?;
    let room =
        state.store.rooms().add_members(&caller.tenant_id, &room_id(room_id_text)?, &request.members).await?;
    Ok(room_view(&room))
}

/// Removes one member agent (removing a non-member succeeds); events it already has stay.
pub async fn remove_member(
    state: &AppState,
    caller: &Caller,
    room_id_text: &str,
    agent_id: &str,
) -> Result<RoomView, ApiError> {
    caller.require(Scope::RoomsWrite)?;
    let agent_id = RecipientId::new(agent_id).map_err(|e| ApiError::invalid_field("agent_id", e.problem))?;
    let room =
        state.store.rooms().remove_members(&caller.tenant_id, &room_id(room_id_text)?, &[agent_id]).await?;
    Ok(room_view(&room))
}

/// Posts a message: the message and one event per member commit together; then the members'
/// waiters on this node are hinted. `deduplicated` in the answer: an earlier post with the
/// same `deduplication_key`, returned instead.
pub async fn post(
    state: &AppState,
    caller: &Caller,
    room_id_text: &str,
    request: PostMessageRequest,
) -> Result<PostMessageResponse, ApiError> {
    caller.require(Scope::RoomsWrite)?;
    let post = PostMessage {
        tenant_id: caller.tenant_id.clone(),
        room_id: room_id(room_id_text)?,
        author: caller.subject.clone(),
        body: request.body.to_string(),
        deduplication_key: request.deduplication_key,
        priority: request.priority.unwrap_or_default(),
        fairness_key: None,
    };
    // Under fair claims a room is one source: its burst cannot hold back a member's others.
    let room_key =
        || FairnessKey::new(format!("room:{}", post.room_id)).expect("a room id makes a valid key");
    let policy = state.tenant_policies.get(&state.store, &caller.tenant_id).await?;
    let post = PostMessage { fairness_key: fairness_key(&policy, None, room_key), ..post };
    let started = Instant::now();
    let posted = if policy.has_quota() {
        post_within_quotas(state, &policy, caller, &post).await?
    } else {
        state.store.rooms().post(&post).await?
    };
    state.metrics.publish_commit_seconds().observe([], started.elapsed());
    record_published(state, &post.tenant_id, &posted.receipt);
    Ok(PostMessageResponse {
        room_id: post.room_id.clone(),
        message_id: posted.message_id.to_string(),
        deduplicated: posted.deduplicated,
        deliveries: posted.receipt.deliveries.iter().map(convert::delivery).collect(),
    })
}

/// How often a post is admitted again when members joined between its count and its commit.
const POST_RECOUNTS_MAX: usize = 3;

/// Posts under the tenant's quotas: every member's delivery counts, so the post is admitted
/// for the room's members as counted, and commits only if the room has no more by then (a
/// member added meanwhile means counting and admitting once more).
async fn post_within_quotas(
    state: &AppState,
    policy: &TenantPolicy,
    caller: &Caller,
    post: &PostMessage,
) -> Result<PostedMessage, ApiError> {
    let bytes_each = inbox_rooms::event_payload_bytes(post)?;
    let mut members = state.store.rooms().get(&post.tenant_id, &post.room_id).await?.members.len();
    for _ in 0..POST_RECOUNTS_MAX {
        let change = quotas::Change::deliveries(members, bytes_each);
        let reservation =
            state.quotas.admit(&state.store, &state.metrics, policy, &caller.tenant_id, change).await?;
        match state.store.rooms().post_reaching_at_most(post, members).await {
            Ok(BoundedPost::Posted(posted)) => {
                reservation.settle(quotas::Change::committed(&posted.receipt, bytes_each));
                return Ok(posted);
            }
            Ok(BoundedPost::TooManyMembers { members: now }) => {
                reservation.cancel();
                members = now;
            }
            Err(err) => {
                reservation.cancel();
                return Err(err.into());
            }
        }
    }
    Err(StoreError::Contention { attempts: POST_RECOUNTS_MAX as u32 }.into())
}

/// A room id from a path (a body's arrive typed).
fn room_id(text: &str) -> Result<RoomId, ApiError> {
    RoomId::new(text).map_err(|e| ApiError::invalid_field("room_id", e.problem))
}

fn room_view(room: &Room) -> RoomView {
    RoomView {
        room_id: room.room_id.clone(),
        name: room.name.clone(),
        members: room.members.clone(),
        created_at_utc: format_utc(room.created_at.get()),
    }
}
