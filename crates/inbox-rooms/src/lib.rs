//! The built-in meeting-room domain: rooms of agents within a tenant, where posting a message
//! writes the message row and one inbox event per member in one transaction. It is the
//! transactional-outbox promise shown with a real domain table, and it is written as a host
//! application would write it: only inbox-store's public host-transaction API
//! ([`inbox_store::host`]) and [`inbox_store::Inbox::publish_in`], nothing private to the
//! store. (Its tables are created by the store's migrations, where they began.)
//!
//! The room row is the room's lock. Posts and membership changes take it first (`FOR UPDATE`;
//! on SQLite the write lock), so a post reaches exactly the members committed before it, a
//! repeated deduplication key cannot race its first use, and message ids count up per room in
//! commit order. The publish path then locks member heads in canonical order; since every
//! transaction here holds at most one room row, rooms and plain publishes cannot deadlock.

mod queries;

use std::fmt;

use inbox_core::{
    Correlation, DeduplicationKey, EventBody, EventId, EventType, FairnessKey, InboxSeq, Priority, Recipient,
    RecipientId, RecipientKind, TenantId, UnixMillis,
};
use serde::Serialize;
use serde_json::value::RawValue;

use inbox_store::host::Arg;
use inbox_store::{DbConnection, Delivery, Field, Publish, PublishReceipt, SqlStore, StoreError};

/// The event type of the inbox event every member gets for a post.
pub const MESSAGE_POSTED_EVENT_TYPE: &str = "meeting_room.message_posted";

pub use inbox_core::limits::ROOM_NAME_BYTES_MAX;

/// Defined by the core's id macro.
pub use inbox_core::RoomId;

/// A message's id within its room: 1 for the first post, then one more per post, in commit
/// order, so "messages after N" is a complete answer. On the wire and in the event's
/// `correlation.message_id` it is the decimal text; `correlation.meeting_room_id` names the room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageId(pub u64);

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A room as stored, with its members in canonical (sorted) order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Room {
    pub tenant_id: TenantId,
    pub room_id: RoomId,
    pub name: Option<String>,
    pub members: Vec<RecipientId>,
    pub created_at: UnixMillis,
}

/// A room to create, with its first members (possibly none).
#[derive(Debug, Clone)]
pub struct NewRoom {
    pub tenant_id: TenantId,
    pub room_id: RoomId,
    pub name: Option<String>,
    pub members: Vec<RecipientId>,
}

/// One message for every current member of a room.
#[derive(Debug, Clone)]
pub struct PostMessage {
    pub tenant_id: TenantId,
    pub room_id: RoomId,
    /// Who posted (the caller's token subject); members see it in the event payload.
    pub author: RecipientId,
    /// The message as JSON text, kept byte for byte.
    pub body: String,
    /// Posting the same key to the same room again returns the first message.
    pub deduplication_key: Option<DeduplicationKey>,
    pub priority: Priority,
    /// The members' events' fairness key (see `Publish::fairness_key`); the server sets one
    /// under the tenant's fair claims.
    pub fairness_key: Option<FairnessKey>,
}

/// What a post did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostedMessage {
    pub message_id: MessageId,
    /// The key matched an earlier post, which is returned instead; nothing new was written.
    pub deduplicated: bool,
    /// One delivery per member the (first) post reached; empty for a room without members.
    /// On a duplicate every delivery is marked deduplicated and `outbox_id` is `None`.
    pub receipt: PublishReceipt,
}

/// What [`Rooms::post_reaching_at_most`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundedPost {
    Posted(PostedMessage),
    /// The room has more members than the post may reach; nothing was written.
    TooManyMembers {
        members: usize,
    },
}

/// The inline payload bytes each member's event of `post` holds: what a tenant's storage
/// quota counts.
pub fn event_payload_bytes(post: &PostMessage) -> Result<u64, StoreError> {
    Ok(event_payload(post)?.len() as u64)
}

/// Each member's event payload of `post`: the message with its author.
fn event_payload(post: &PostMessage) -> Result<String, StoreError> {
    let body: &RawValue = serde_json::from_str(&post.body)
        .map_err(|err| StoreError::invalid(Field::MessageBody, format!("is not valid JSON ({err})")))?;
    serde_json::to_string(&MessagePayload { author: post.author.as_str(), body })
        .map_err(|err| StoreError::invalid(Field::MessageBody, err.to_string()))
}

/// Member rows per INSERT statement, well under every backend's placeholder limit.
const MEMBERS_PER_INSERT: usize = 250;

/// The event payload: the message inline, with its author. Inline rather than a `payload_ref`
/// because an agent that was offline then gets the whole message from one poll, with no
/// second request that could fail or see a later state; the message row stays the record
/// (an acknowledgement clears the inbox copy).
#[derive(Serialize)]
struct MessagePayload<'a> {
    author: &'a str,
    body: &'a RawValue,
}

/// The rooms of one [`SqlStore`]: meeting rooms, members and posts.
/// A borrowed view, free to make: `store.rooms()` with [`RoomsExt`] in scope.
#[derive(Debug, Clone, Copy)]
pub struct Rooms<'s> {
    store: &'s SqlStore,
}

/// Lends a store's [`Rooms`] the way the store lends its own subsystems.
pub trait RoomsExt {
    fn rooms(&self) -> Rooms<'_>;
}

impl RoomsExt for SqlStore {
    fn rooms(&self) -> Rooms<'_> {
        Rooms { store: self }
    }
}

impl Rooms<'_> {
    /// Creates a room with its first members. An id already taken in the tenant is refused
    /// with [`StoreError::AlreadyExists`].
    pub async fn create(self, room: &NewRoom) -> Result<Room, StoreError> {
        check_name(room.name.as_deref())?;
        let members = self.checked_members(&room.members, true)?;
        let members = &members;
        self.store
            .retry_on_contention(|| async move {
                let now = self.store.now();
                let mut tx = self.store.transaction().await?;
                let mut conn = tx.conn();
                conn.execute(
                    queries::INSERT_ROOM,
                    &[
                        Arg::Str(room.tenant_id.as_str()),
                        Arg::Str(room.room_id.as_str()),
                        Arg::OptStr(room.name.as_deref()),
                        Arg::I64(now.get()),
                    ],
                )
                .await
                .map_err(|err| taken(err, &room.room_id))?;
                insert_members(&mut conn, &room.tenant_id, &room.room_id, members, now).await?;
                tx.commit().await?;
                Ok::<_, StoreError>(Room {
                    tenant_id: room.tenant_id.clone(),
                    room_id: room.room_id.clone(),
                    name: room.name.clone(),
                    members: members.clone(),
                    created_at: now,
                })
            })
            .await
    }

    /// The room and its members, or [`StoreError::NotFound`].
    pub async fn get(self, tenant_id: &TenantId, room_id: &RoomId) -> Result<Room, StoreError> {
        let mut pooled = self.store.connection().await?;
        read_room(&mut pooled.conn(), tenant_id, room_id).await
    }

    /// Adds agents to a room; those already members are left as they are. Later posts reach
    /// them; earlier posts do not. A room never grows past the fan-out limit, so every post to
    /// it can be published.
    pub async fn add_members(
        self,
        tenant_id: &TenantId,
        room_id: &RoomId,
        members: &[RecipientId],
    ) -> Result<Room, StoreError> {
        let members = self.checked_members(members, false)?;
        let members = &members;
        self.store
            .retry_on_contention(|| async move {
                let now = self.store.now();
                let mut tx = self.store.transaction().await?;
                let mut conn = tx.conn();
                self.lock_room(&mut conn, tenant_id, room_id).await?;
                let current = read_members(&mut conn, tenant_id, room_id).await?;
                let fresh: Vec<RecipientId> =
                    members.iter().filter(|m| current.binary_search(m).is_err()).cloned().collect();
                let limit = self.store.config().fanout_recipients_max;
                if current.len() + fresh.len() > limit {
                    return Err(StoreError::invalid(
                        Field::RoomMembers,
                        format!(
                            "would give the room {} members; the limit is {limit}",
                            current.len() + fresh.len()
                        ),
                    ));
                }
                insert_members(&mut conn, tenant_id, room_id, &fresh, now).await?;
                let room = read_room(&mut conn, tenant_id, room_id).await?;
                tx.commit().await?;
                Ok(room)
            })
            .await
    }

    /// Removes agents from a room; naming an agent that is not a member is not an error.
    /// Events of earlier posts stay in their inboxes.
    pub async fn remove_members(
        self,
        tenant_id: &TenantId,
        room_id: &RoomId,
        members: &[RecipientId],
    ) -> Result<Room, StoreError> {
        let members = self.checked_members(members, false)?;
        let members = &members;
        self.store
            .retry_on_contention(|| async move {
                let mut tx = self.store.transaction().await?;
                let mut conn = tx.conn();
                self.lock_room(&mut conn, tenant_id, room_id).await?;
                let mut args = vec![Arg::Str(tenant_id.as_str()), Arg::Str(room_id.as_str())];
                args.extend(members.iter().map(|m| Arg::Str(m.as_str())));
                conn.execute(&queries::delete_members(members.len()), &args).await?;
                let room = read_room(&mut conn, tenant_id, room_id).await?;
                tx.commit().await?;
                Ok(room)
            })
            .await
    }

    /// Posts a message: the message row and one `meeting_room.message_posted` event per
    /// current member commit together, or nothing does. Retried as a whole if chosen as a
    /// deadlock victim.
    pub async fn post(self, post: &PostMessage) -> Result<PostedMessage, StoreError> {
        match self.post_reaching_at_most(post, usize::MAX).await? {
            BoundedPost::Posted(posted) => Ok(posted),
            BoundedPost::TooManyMembers { .. } => unreachable!("no room has more than usize::MAX members"),
        }
    }

    /// Posts a message, as [`Rooms::post`] does, only if the room has at most `members_max`
    /// members when the post locks it: how a caller that counted (and admitted) the deliveries
    /// beforehand makes sure a member added since does not pass its count.
    pub async fn post_reaching_at_most(
        self,
        post: &PostMessage,
        members_max: usize,
    ) -> Result<BoundedPost, StoreError> {
        let payload = event_payload(post)?;
        let limit = self.store.config().payload_bytes_limit;
        if payload.len() > limit {
            return Err(StoreError::PayloadTooLarge { bytes: payload.len(), limit });
        }
        self.store.retry_on_contention(|| self.post_once(post, &payload, members_max)).await
    }

    async fn post_once(
        self,
        post: &PostMessage,
        payload: &str,
        members_max: usize,
    ) -> Result<BoundedPost, StoreError> {
        let now = self.store.now();
        let (tenant, room) = (post.tenant_id.as_str(), post.room_id.as_str());
        let mut tx = self.store.transaction().await?;
        let mut conn = tx.conn();
        let last_message_id = self.lock_room(&mut conn, &post.tenant_id, &post.room_id).await?;

        // With the room locked, an earlier post of this key has committed or does not exist.
        if let Some(key) = &post.deduplication_key {
            let first = conn
                .fetch_optional(
                    queries::MESSAGE_BY_KEY,
                    &[Arg::Str(tenant), Arg::Str(room), Arg::Str(key.as_str())],
                )
                .await?;
            if let Some(row) = first {
                let message_id = message_id(row.i64("message_id")?)?;
                let deliveries = decode_deliveries(&row.string("deliveries_json")?)?;
                tx.commit().await?;
                return Ok(BoundedPost::Posted(PostedMessage {
                    message_id,
                    deduplicated: true,
                    receipt: PublishReceipt { deliveries, outbox_id: None },
                }));
            }
        }
        let members = read_members(&mut conn, &post.tenant_id, &post.room_id).await?;
        if members.len() > members_max {
            return Ok(BoundedPost::TooManyMembers { members: members.len() });
        }

        let message_id = MessageId(last_message_id + 1);
        let message_arg = Arg::I64(i64::try_from(message_id.0).unwrap_or(i64::MAX));
        conn.execute(queries::SET_LAST_MESSAGE_ID, &[message_arg, Arg::Str(tenant), Arg::Str(room)]).await?;
        conn.execute(
            queries::INSERT_MESSAGE,
            &[
                Arg::Str(tenant),
                Arg::Str(room),
                message_arg,
                Arg::Str(post.author.as_str()),
                Arg::Str(&post.body),
                Arg::OptStr(post.deduplication_key.as_ref().map(DeduplicationKey::as_str)),
                Arg::I64(now.get()),
            ],
        )
        .await?;

        if members.is_empty() {
            tx.commit().await?;
            return Ok(BoundedPost::Posted(PostedMessage {
                message_id,
                deduplicated: false,
                receipt: PublishReceipt { deliveries: Vec::new(), outbox_id: None },
            }));
        }
        let publish = Publish {
            tenant_id: post.tenant_id.clone(),
            recipients: members.into_iter().map(Recipient::agent).collect(),
            event_type: EventType::new(MESSAGE_POSTED_EVENT_TYPE).expect("a valid event type"),
            priority: post.priority,
            available_at: None,
            expires_at: None,
            // The room deduplicates posts; a key on the events could collide with a key some
            // other publisher chose for the same agent and silently swallow the delivery.
            deduplication_key: None,
            fairness_key: post.fairness_key.clone(),
            correlation: Correlation {
                meeting_room_id: Some(room.to_owned()),
                message_id: Some(message_id.to_string()),
                ..Correlation::default()
            },
            body: EventBody::Json(payload.to_owned()),
            max_attempts: None,
        };
        let receipt = self.store.inbox().publish_in(&mut conn, &publish).await?;
        conn.execute(
            queries::SET_DELIVERIES,
            &[
                Arg::Str(&encode_deliveries(&receipt.deliveries)?),
                Arg::Str(tenant),
                Arg::Str(room),
                message_arg,
            ],
        )
        .await?;
        tx.commit().await?;
        Ok(BoundedPost::Posted(PostedMessage { message_id, deduplicated: false, receipt }))
    }

    /// Locks the room row until the transaction ends and returns the newest message id.
    async fn lock_room(
        self,
        conn: &mut DbConnection<'_>,
        tenant_id: &TenantId,
        room_id: &RoomId,
    ) -> Result<u64, StoreError> {
        let sql = queries::LOCK_ROOM.text(self.store.dialect());
        let row = conn
            .fetch_optional(sql, &[Arg::Str(tenant_id.as_str()), Arg::Str(room_id.as_str())])
            .await?
            .ok_or_else(|| not_found(room_id))?;
        message_id(row.i64("last_message_id")?).map(|id| id.0)
    }

    /// Checks a member list against the fan-out limit and returns it sorted, without repeats.
    fn checked_members(
        self,
        members: &[RecipientId],
        empty_allowed: bool,
    ) -> Result<Vec<RecipientId>, StoreError> {
        let limit = self.store.config().fanout_recipients_max;
        if members.len() > limit {
            return Err(StoreError::invalid(
                Field::RoomMembers,
                format!("names {} agents; the limit is {limit}", members.len()),
            ));
        }
        if members.is_empty() && !empty_allowed {
            return Err(StoreError::invalid(Field::RoomMembers, "must name at least one agent"));
        }
        let mut members = members.to_vec();
        members.sort();
        members.dedup();
        Ok(members)
    }
}

/// Checks a room's name by the rule of [`RoomName`](inbox_core::limits::RoomName).
fn check_name(name: Option<&str>) -> Result<(), StoreError> {
    match name.map(inbox_core::limits::RoomName::new) {
        Some(Err(e)) => Err(StoreError::invalid(Field::RoomName, e.0)),
        _ => Ok(()),
    }
}

fn not_found(room_id: &RoomId) -> StoreError {
    StoreError::NotFound { what: "room", id: room_id.to_string() }
}

/// A duplicate primary key on `meeting_room` means the id is taken (perhaps by a concurrent
/// create that committed first).
fn taken(err: StoreError, room_id: &RoomId) -> StoreError {
    if err.is_unique_violation() {
        return StoreError::AlreadyExists { what: "room", id: room_id.to_string() };
    }
    err
}

fn message_id(value: i64) -> Result<MessageId, StoreError> {
    u64::try_from(value).map(MessageId).map_err(|_| StoreError::Corrupt(format!("message id {value}")))
}

async fn read_room(
    conn: &mut DbConnection<'_>,
    tenant_id: &TenantId,
    room_id: &RoomId,
) -> Result<Room, StoreError> {
    let row = conn
        .fetch_optional(queries::ROOM, &[Arg::Str(tenant_id.as_str()), Arg::Str(room_id.as_str())])
        .await?
        .ok_or_else(|| not_found(room_id))?;
    Ok(Room {
        tenant_id: tenant_id.clone(),
        room_id: room_id.clone(),
        name: row.opt_string("name")?,
        members: read_members(conn, tenant_id, room_id).await?,
        created_at: UnixMillis(row.i64("created_at_utc")?),
    })
}

/// The room's members in canonical order; at most the fan-out limit, which adding enforces.
async fn read_members(
    conn: &mut DbConnection<'_>,
    tenant_id: &TenantId,
    room_id: &RoomId,
) -> Result<Vec<RecipientId>, StoreError> {
    conn.fetch_all(queries::MEMBERS, &[Arg::Str(tenant_id.as_str()), Arg::Str(room_id.as_str())])
        .await?
        .iter()
        .map(|row| RecipientId::new(row.string("agent_id")?).map_err(|e| StoreError::Corrupt(e.to_string())))
        .collect()
}

async fn insert_members(
    conn: &mut DbConnection<'_>,
    tenant_id: &TenantId,
    room_id: &RoomId,
    members: &[RecipientId],
    now: UnixMillis,
) -> Result<(), StoreError> {
    for chunk in members.chunks(MEMBERS_PER_INSERT) {
        let mut args = Vec::with_capacity(chunk.len() * 4);
        for member in chunk {
            args.extend([
                Arg::Str(tenant_id.as_str()),
                Arg::Str(room_id.as_str()),
                Arg::Str(member.as_str()),
                Arg::I64(now.get()),
            ]);
        }
        conn.execute(&queries::insert_members(chunk.len()), &args).await?;
    }
    Ok(())
}

/// `[[recipient_kind, recipient_id, event_id, inbox_seq], ...]`, as `outbox_signal` lists heads.
fn encode_deliveries(deliveries: &[Delivery]) -> Result<String, StoreError> {
    let rows: Vec<(&str, &str, String, u64)> = deliveries
        .iter()
        .map(|d| {
            (d.recipient.kind.as_str(), d.recipient.id.as_str(), d.event_id.to_string(), d.inbox_seq.get())
        })
        .collect();
    serde_json::to_string(&rows).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn decode_deliveries(json: &str) -> Result<Vec<Delivery>, StoreError> {
    let corrupt = |e: &dyn fmt::Display| StoreError::Corrupt(format!("deliveries_json: {e}"));
    let rows: Vec<(String, String, String, u64)> = serde_json::from_str(json).map_err(|e| corrupt(&e))?;
    rows.into_iter()
        .map(|(kind, id, event_id, inbox_seq)| {
            Ok(Delivery {
                recipient: Recipient {
                    kind: RecipientKind::new(kind).map_err(|e| corrupt(&e))?,
                    id: RecipientId::new(id).map_err(|e| corrupt(&e))?,
                },
                event_id: EventId::parse(&event_id).map_err(|e| corrupt(&e))?,
                inbox_seq: InboxSeq::new(inbox_seq).map_err(|e| corrupt(&e))?,
                deduplicated: true,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_ids_are_checked_like_tenant_ids() {
        assert!(RoomId::new("room_7:standup.v2-a").is_ok());
        for bad in ["", "a/b", "with space", "é"] {
            assert_eq!(RoomId::new(bad).unwrap_err().field, "room_id", "{bad:?}");
        }
        assert!(RoomId::new("r".repeat(64)).is_ok());
        assert!(RoomId::new("r".repeat(65)).is_err());
    }

    #[test]
    fn deliveries_round_trip_as_duplicates() {
        let delivery = Delivery {
            recipient: Recipient::agent(RecipientId::new("alpha").unwrap()),
            event_id: EventId::new_v7(UnixMillis(1_700_000_000_000), [7; 10]),
            inbox_seq: InboxSeq(3),
            deduplicated: false,
        };
        let decoded =
            decode_deliveries(&encode_deliveries(std::slice::from_ref(&delivery)).unwrap()).unwrap();
        assert_eq!(decoded, vec![Delivery { deduplicated: true, ..delivery }]);
        assert!(decode_deliveries("[[\"agent\"]]").is_err());
    }
}
