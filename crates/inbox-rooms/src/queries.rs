//! Every SQL statement of the meeting rooms, by name: rooms (whose row is the room's lock),
//! members and messages. Written against the store's public host API; the one statement whose
//! text differs by backend is the host API's [`Sql`] pair.

use inbox_store::host::{Sql, placeholders, push_repeated};

// ---- rooms ----

/// A new room without messages (tenant, room, name, created at); a duplicate key means the id
/// is taken.
pub(crate) const INSERT_ROOM: &str = "INSERT INTO meeting_room (tenant_id, room_id, name, last_message_id, \
    created_at_utc) VALUES (?, ?, ?, 0, ?)";

/// Locks the room row until the transaction ends and reads its newest message id (tenant,
/// room). SQLite's `BEGIN IMMEDIATE` already holds the only write lock.
pub(crate) const LOCK_ROOM: Sql = Sql {
    mysql: "SELECT last_message_id FROM meeting_room WHERE tenant_id = ? AND room_id = ? FOR UPDATE",
    sqlite: "SELECT last_message_id FROM meeting_room WHERE tenant_id = ? AND room_id = ?",
};

/// A room's name and creation time (tenant, room).
pub(crate) const ROOM: &str =
    "SELECT name, created_at_utc FROM meeting_room WHERE tenant_id = ? AND room_id = ?";

/// Moves the room's newest message id on (message id, tenant, room).
pub(crate) const SET_LAST_MESSAGE_ID: &str =
    "UPDATE meeting_room SET last_message_id = ? WHERE tenant_id = ? AND room_id = ?";

// ---- members ----

/// The room's members in canonical order (tenant, room).
pub(crate) const MEMBERS: &str =
    "SELECT agent_id FROM meeting_room_member WHERE tenant_id = ? AND room_id = ? ORDER BY agent_id";

/// `n` members added at once (tenant, room, agent, added at per member).
pub(crate) fn insert_members(n: usize) -> String {
    let mut sql =
        String::from("INSERT INTO meeting_room_member (tenant_id, room_id, agent_id, added_at_utc) VALUES ");
    push_repeated(&mut sql, n, "(?, ?, ?, ?)");
    sql
}

/// Removes `n` agents from a room (tenant, room, agent per member).
pub(crate) fn delete_members(n: usize) -> String {
    format!(
        "DELETE FROM meeting_room_member WHERE tenant_id = ? AND room_id = ? AND agent_id IN ({})",
        placeholders(n)
    )
}

// ---- messages ----

/// The earlier post of a deduplication key, with its deliveries (tenant, room, key).
pub(crate) const MESSAGE_BY_KEY: &str = "SELECT message_id, deliveries_json FROM meeting_room_message \
    WHERE tenant_id = ? AND room_id = ? AND deduplication_key = ?";

/// A new message, its deliveries written once published (tenant, room, message id, author,
/// body, key, created at).
pub(crate) const INSERT_MESSAGE: &str = "INSERT INTO meeting_room_message (tenant_id, room_id, message_id, \
    author, body_json, deduplication_key, deliveries_json, created_at_utc) VALUES (?, ?, ?, ?, ?, ?, '[]', ?)";

/// The deliveries a message's publish made (deliveries, tenant, room, message id).
pub(crate) const SET_DELIVERIES: &str = "UPDATE meeting_room_message SET deliveries_json = ? \
    WHERE tenant_id = ? AND room_id = ? AND message_id = ?";
