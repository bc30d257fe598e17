//! The meeting rooms' use cases with rules of their own: who may read a room, and a post
//! whose commit is measured and whose members' waiters are hinted after it (as a publish's).

use std::time::Instant;

use inbox_rooms::{PostMessage, PostedMessage, Room, RoomId, RoomsExt as _};
use inbox_store::StoreError;

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::ops::inbox::record_published;

/// A room, for a caller who may write rooms (`writer`) or is one of its members; anyone else
/// is told it does not exist, the same answer as for a room of another tenant.
pub async fn read(
    state: &AppState,
    caller: &Caller,
    room_id: &RoomId,
    writer: bool,
) -> Result<Room, ApiError> {
    let room = state.store.rooms().get(&caller.tenant_id, room_id).await?;
    if !writer && room.members.binary_search(&caller.subject).is_err() {
        return Err(StoreError::NotFound { what: "room", id: room_id.to_string() }.into());
    }
    Ok(room)
}

/// Posts a message: the message and one event per member commit together; then the members'
/// waiters on this node are hinted.
pub async fn post(state: &AppState, post: &PostMessage) -> Result<PostedMessage, ApiError> {
    let started = Instant::now();
    let posted = state.store.rooms().post(post).await?;
    state.metrics.publish_commit_seconds().observe([], started.elapsed());
    record_published(state, &post.tenant_id, &posted.receipt);
    Ok(posted)
}
