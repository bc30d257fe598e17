//! The meeting-room domain: posts that write the message and every member's event together, or nothing.

use inbox_conformance::Harness;
use inbox_conformance::vocabulary::{assert_invalid, inbox_of, poll, tenant};
use inbox_core::{
    DeduplicationKey, EventBody, EventId, EventType, InboxSeq, Priority, RecipientId, TenantId,
};
use inbox_rooms::{BoundedPost, MessageId, NewRoom, PostMessage, PostedMessage, Room, RoomId, RoomsExt as _};
use inbox_store::Field;
use inbox_store::StoreError;

fn room_id(name: &str) -> RoomId {
    RoomId::new(name).unwrap()
}

fn agents(names: &[&str]) -> Vec<RecipientId> {
    names.iter().map(|n| RecipientId::new(*n).unwrap()).collect()
}

async fn create(h: &Harness, tenant_name: &str, room: &str, members: &[&str]) -> Room {
    h.store
        .rooms()
        .create(&NewRoom {
            tenant_id: tenant(tenant_name),
            room_id: room_id(room),
            name: Some(format!("Room {room}")),
            members: agents(members),
        })
        .await
        .unwrap()
}

fn message(tenant_name: &str, room: &str, body: &str) -> PostMessage {
    PostMessage {
        tenant_id: tenant(tenant_name),
        room_id: room_id(room),
        author: RecipientId::new("carol").unwrap(),
        body: body.to_owned(),
        deduplication_key: None,
        priority: Priority::Normal,
        fairness_key: None,
    }
}

fn keyed(tenant_name: &str, room: &str, body: &str, key: &str) -> PostMessage {
    PostMessage {
        deduplication_key: Some(DeduplicationKey::new(key).unwrap()),
        ..message(tenant_name, room, body)
    }
}

/// (recipient, inbox_seq) of each delivery, in canonical order.
fn reached(posted: &PostedMessage) -> Vec<(String, u64)> {
    posted.receipt.deliveries.iter().map(|d| (d.recipient.id.to_string(), d.inbox_seq.get())).collect()
}

async fn count(h: &Harness, table: &str) -> i64 {
    h.scalar(&format!("SELECT COUNT(*) AS n FROM {table}"), &[]).await
}

fn assert_room_not_found<T: std::fmt::Debug>(result: Result<T, StoreError>, room: &str) {
    match result {
        Err(StoreError::NotFound { what: "room", id }) => assert_eq!(id, room),
        other => panic!("expected room {room} not found, got {other:?}"),
    }
}

case! {
    /// A post writes its message row, one event per member (with the room and message in the
    /// correlation and the message inline) and one outbox row, all in one commit; message ids
    /// count up per room. A room without members still records the message, and nothing else.
    async fn room_post_writes_message_and_member_events_together(h: &Harness) {
        let room = create(h, "t1", "room_7", &["beta", "alpha", "beta"]).await;
        assert_eq!(room.members, agents(&["alpha", "beta"]), "sorted, repeats merged");
        assert_eq!(room.name.as_deref(), Some("Room room_7"));
        assert_eq!(h.store.rooms().get(&tenant("t1"), &room_id("room_7")).await.unwrap(), room);

        let posted = h
            .store
            .rooms()
            .post(&PostMessage {
                priority: Priority::High,
                ..message("t1", "room_7", r#"{"text": "Standup moved to 10:00"}"#)
            })
            .await
            .unwrap();
        assert_eq!(posted.message_id, MessageId(1));
        assert!(!posted.deduplicated);
        assert_eq!(reached(&posted), [("alpha".into(), 1), ("beta".into(), 1)]);
        assert!(posted.receipt.outbox_id.is_some());
        assert_eq!(count(h, "meeting_room_message").await, 1);
        assert_eq!(
            h.scalar(
                "SELECT COUNT(*) AS n FROM agent_inbox WHERE meeting_room_id = ? AND message_id = ?",
                &["room_7", "1"]
            )
            .await,
            2
        );
        assert_eq!(count(h, "outbox_signal").await, 1);
        assert_eq!(
            h.scalar(
                "SELECT COUNT(*) AS n FROM meeting_room_message WHERE body_json = ? AND author = ?",
                &[r#"{"text": "Standup moved to 10:00"}"#, "carol"]
            )
            .await,
            1,
            "the message is kept byte for byte"
        );

        let page = h.store.inbox().poll_after_cursor(&poll(&inbox_of("t1", "alpha"), 0, 10)).await.unwrap();
        let event = &page.events[0];
        assert_eq!(event.event_type, EventType::new("meeting_room.message_posted").unwrap());
        assert_eq!(event.priority, Priority::High);
        assert_eq!(event.correlation.meeting_room_id.as_deref(), Some("room_7"));
        assert_eq!(event.correlation.message_id.as_deref(), Some("1"));
        assert_eq!(
            event.body,
            EventBody::Json(r#"{"author":"carol","body":{"text": "Standup moved to 10:00"}}"#.into())
        );
        assert_eq!(event.deduplication_key, None);
        assert_eq!(event.event_id, posted.receipt.deliveries[0].event_id, "the receipt names the stored event");

        let second = h.store.rooms().post(&message("t1", "room_7", "[1, 2]")).await.unwrap();
        assert_eq!(second.message_id, MessageId(2));
        assert_eq!(reached(&second), [("alpha".into(), 2), ("beta".into(), 2)]);

        create(h, "t1", "empty", &[]).await;
        let lonely = h.store.rooms().post(&message("t1", "empty", r#""anyone?""#)).await.unwrap();
        assert_eq!(lonely.message_id, MessageId(1));
        assert!(lonely.receipt.deliveries.is_empty());
        assert_eq!(lonely.receipt.outbox_id, None);
        assert_eq!(count(h, "meeting_room_message").await, 3);
        assert_eq!(count(h, "agent_inbox").await, 4);
        assert_eq!(count(h, "outbox_signal").await, 2);
    }
}

case! {
    /// A post that fails after its message row and inbox rows were written leaves none of them:
    /// no message, no event, no outbox row, no advanced head and no used message id. A message too
    /// large to publish is refused before anything is written.
    async fn room_post_failing_part_way_leaves_nothing(h: &Harness) {
        create(h, "t1", "room_7", &["alpha", "beta"]).await;
        h.store.rooms().post(&message("t1", "room_7", "{}")).await.unwrap();

        // Hide the outbox table, so the publish fails at its last statement, after the message row
        // and every member's inbox row were inserted in the same transaction.
        let rename = |from: &str, to: &str| format!("ALTER TABLE {from} RENAME TO {to}");
        let ddl = |sql: String| async move { h.execute_raw(&sql).await };
        ddl(rename("outbox_signal", "outbox_signal_hidden")).await;
        let failed = h.store.rooms().post(&message("t1", "room_7", r#"{"n": 2}"#)).await;
        ddl(rename("outbox_signal_hidden", "outbox_signal")).await;
        assert!(matches!(failed, Err(StoreError::Database(_))), "{failed:?}");
        assert_eq!(count(h, "meeting_room_message").await, 1, "the message row rolled back");
        assert_eq!(count(h, "agent_inbox").await, 2, "the events rolled back");
        assert_eq!(count(h, "outbox_signal").await, 1);
        for agent in ["alpha", "beta"] {
            assert_eq!(h.store.inbox().head(&inbox_of("t1", agent)).await.unwrap().head_seq, InboxSeq(1));
        }

        let limit = h.store.config().payload_bytes_limit;
        let huge = format!("\"{}\"", "x".repeat(limit));
        match h.store.rooms().post(&message("t1", "room_7", &huge)).await {
            Err(StoreError::PayloadTooLarge { bytes, limit: l }) => {
                assert!(bytes > limit);
                assert_eq!(l, limit);
            }
            other => panic!("expected payload too large, got {other:?}"),
        }
        assert_eq!(count(h, "meeting_room_message").await, 1);

        let next = h.store.rooms().post(&message("t1", "room_7", r#"{"n": 2}"#)).await.unwrap();
        assert_eq!(next.message_id, MessageId(2), "failed posts used no message id");
        assert_eq!(reached(&next), [("alpha".into(), 2), ("beta".into(), 2)]);
    }
}

case! {
    /// A repeated deduplication key in the same room returns the first message and its
    /// deliveries, writes nothing, and reaches no member added since; the same key in another
    /// room is a new message.
    async fn room_posts_deduplicate_per_room(h: &Harness) {
        create(h, "t1", "room_7", &["alpha", "beta"]).await;
        create(h, "t1", "room_8", &["alpha"]).await;
        let first = h.store.rooms().post(&keyed("t1", "room_7", r#"{"v": 1}"#, "msg:920155")).await.unwrap();
        assert!(!first.deduplicated);
        h.store.rooms().add_members(&tenant("t1"), &room_id("room_7"), &agents(&["gamma"])).await.unwrap();
        let again = h.store.rooms().post(&keyed("t1", "room_7", r#"{"v": 2}"#, "msg:920155")).await.unwrap();
        assert!(again.deduplicated);
        assert_eq!(again.message_id, first.message_id);
        assert_eq!(again.receipt.outbox_id, None);
        let ids = |p: &PostedMessage| -> Vec<(String, EventId, bool)> {
            p.receipt
                .deliveries
                .iter()
                .map(|d| (d.recipient.id.to_string(), d.event_id, d.deduplicated))
                .collect()
        };
        assert_eq!(
            ids(&again),
            ids(&first).into_iter().map(|(r, e, _)| (r, e, true)).collect::<Vec<_>>(),
            "the first post's deliveries, marked as duplicates"
        );
        assert_eq!(count(h, "meeting_room_message").await, 1);
        assert_eq!(count(h, "agent_inbox").await, 2, "gamma got nothing");
        assert_eq!(count(h, "outbox_signal").await, 1);

        let elsewhere = h.store.rooms().post(&keyed("t1", "room_8", "{}", "msg:920155")).await.unwrap();
        assert!(!elsewhere.deduplicated);
        assert_eq!(elsewhere.message_id, MessageId(1));
        let unkeyed = [
            h.store.rooms().post(&message("t1", "room_7", "{}")).await.unwrap(),
            h.store.rooms().post(&message("t1", "room_7", "{}")).await.unwrap(),
        ];
        assert_eq!(
            unkeyed.map(|p| (p.message_id, p.deduplicated)),
            [(MessageId(2), false), (MessageId(3), false)]
        );
    }
}

case! {
    /// Adding and removing members changes who later posts reach; earlier events stay where they
    /// were delivered. Adding is idempotent, removing a non-member is harmless, and a room never
    /// grows past the fan-out limit.
    async fn room_membership_changes_affect_later_posts_only(h: &Harness) {
        let (t1, room_7) = (tenant("t1"), room_id("room_7"));
        create(h, "t1", "room_7", &["alpha"]).await;
        let one = h.store.rooms().post(&message("t1", "room_7", "1")).await.unwrap();
        assert_eq!(reached(&one), [("alpha".into(), 1)]);

        let room = h.store.rooms().add_members(&t1, &room_7, &agents(&["beta", "alpha", "beta"])).await.unwrap();
        assert_eq!(room.members, agents(&["alpha", "beta"]));
        let two = h.store.rooms().post(&message("t1", "room_7", "2")).await.unwrap();
        assert_eq!(reached(&two), [("alpha".into(), 2), ("beta".into(), 1)]);

        let room = h.store.rooms().remove_members(&t1, &room_7, &agents(&["alpha", "nobody"])).await.unwrap();
        assert_eq!(room.members, agents(&["beta"]));
        let three = h.store.rooms().post(&message("t1", "room_7", "3")).await.unwrap();
        assert_eq!(reached(&three), [("beta".into(), 2)]);
        let alpha = h.store.inbox().poll_after_cursor(&poll(&inbox_of("t1", "alpha"), 0, 10)).await.unwrap();
        let seen: Vec<Option<&str>> = alpha.events.iter().map(|e| e.correlation.message_id.as_deref()).collect();
        assert_eq!(seen, [Some("1"), Some("2")], "removal keeps delivered events");

        // The fan-out limit bounds the room, not only one request.
        let limit = h.store.config().fanout_recipients_max;
        let many: Vec<RecipientId> = (0..limit).map(|i| RecipientId::new(format!("m{i:04}")).unwrap()).collect();
        let before = h.store.rooms().get(&t1, &room_7).await.unwrap();
        assert_invalid(h.store.rooms().add_members(&t1, &room_7, &many).await, Field::RoomMembers);
        assert_eq!(h.store.rooms().get(&t1, &room_7).await.unwrap(), before, "nothing was added");
        let room = h.store.rooms().add_members(&t1, &room_7, &many[..limit - 1]).await.unwrap();
        assert_eq!(room.members.len(), limit);
        let everyone = h.store.rooms().post(&message("t1", "room_7", "4")).await.unwrap();
        assert_eq!(everyone.receipt.deliveries.len(), limit);
    }
}

case! {
    /// Every room operation on an unknown room, or on another tenant's room, is refused with
    /// `NotFound`; a taken room id is refused with `AlreadyExists`, but only within its tenant.
    async fn room_operations_refuse_unknown_rooms(h: &Harness) {
        create(h, "t1", "room_7", &["alpha"]).await;
        for (tenant_name, room) in [("t1", "room_unknown"), ("t2", "room_7")] {
            let (t, r) = (tenant(tenant_name), room_id(room));
            assert_room_not_found(h.store.rooms().get(&t, &r).await, room);
            assert_room_not_found(h.store.rooms().post(&message(tenant_name, room, "{}")).await, room);
            assert_room_not_found(h.store.rooms().add_members(&t, &r, &agents(&["alpha"])).await, room);
            assert_room_not_found(h.store.rooms().remove_members(&t, &r, &agents(&["alpha"])).await, room);
        }
        assert_eq!(count(h, "meeting_room_message").await, 0);
        assert_eq!(count(h, "agent_inbox").await, 0);

        let again = h
            .store
            .rooms()
            .create(&NewRoom {
                tenant_id: tenant("t1"),
                room_id: room_id("room_7"),
                name: None,
                members: Vec::new(),
            })
            .await;
        match again {
            Err(StoreError::AlreadyExists { what: "room", id }) => assert_eq!(id, "room_7"),
            other => panic!("expected room_7 to exist already, got {other:?}"),
        }
        let other_tenant = create(h, "t2", "room_7", &["alpha"]).await;
        assert_eq!(other_tenant.tenant_id, TenantId::new("t2").unwrap());
        let posted = h.store.rooms().post(&message("t2", "room_7", "{}")).await.unwrap();
        assert_eq!(posted.message_id, MessageId(1));
        let t1_alpha = h.store.inbox().poll_after_cursor(&poll(&inbox_of("t1", "alpha"), 0, 10)).await.unwrap();
        assert!(t1_alpha.events.is_empty(), "t2's post stays in t2");
        assert_eq!(
            h.store.rooms().get(&tenant("t1"), &room_id("room_7")).await.unwrap().members,
            agents(&["alpha"])
        );
    }
}

case! {
    /// Malformed room requests are refused with the field named, and write nothing.
    async fn room_requests_are_validated(h: &Harness) {
        for bad in ["", "a/b", "has space", &"r".repeat(65)] {
            assert_eq!(RoomId::new(bad).unwrap_err().field, "room_id", "{bad:?}");
        }
        let new_room = |name: Option<String>, members: Vec<RecipientId>| NewRoom {
            tenant_id: tenant("t1"),
            room_id: room_id("room_7"),
            name,
            members,
        };
        for name in [String::new(), "n".repeat(201), "tab\there".into()] {
            assert_invalid(h.store.rooms().create(&new_room(Some(name), Vec::new())).await, Field::RoomName);
        }
        let limit = h.store.config().fanout_recipients_max;
        let too_many: Vec<RecipientId> =
            (0..=limit).map(|i| RecipientId::new(format!("m{i}")).unwrap()).collect();
        assert_invalid(h.store.rooms().create(&new_room(None, too_many.clone())).await, Field::RoomMembers);
        assert_eq!(count(h, "meeting_room").await, 0);

        let room = h.store.rooms().create(&new_room(Some("é".repeat(100)), Vec::new())).await.unwrap();
        assert_eq!(room.name.as_deref().map(str::len), Some(200), "the limit is in bytes");
        let (t1, room_7) = (tenant("t1"), room_id("room_7"));
        assert_invalid(h.store.rooms().add_members(&t1, &room_7, &[]).await, Field::RoomMembers);
        assert_invalid(h.store.rooms().add_members(&t1, &room_7, &too_many).await, Field::RoomMembers);
        assert_invalid(h.store.rooms().remove_members(&t1, &room_7, &[]).await, Field::RoomMembers);
        for body in ["", "{", "{} {}", "not json"] {
            assert_invalid(h.store.rooms().post(&message("t1", "room_7", body)).await, Field::MessageBody);
        }
        assert_eq!(count(h, "meeting_room_member").await, 0);
        assert_eq!(count(h, "meeting_room_message").await, 0);
        assert_eq!(h.scalar("SELECT last_message_id AS n FROM meeting_room", &[]).await, 0);
        assert_eq!(
            h.store.rooms().get(&t1, &room_7).await.unwrap().name,
            Some("é".repeat(100)),
            "names are text, read back unchanged"
        );
    }
}

case! {
    /// Concurrent posts of the same keys to one room, on two nodes, make exactly one message per
    /// key; message ids stay dense and every member gets each message once.
    async fn concurrent_room_posts_deduplicate_exactly_once(h: &Harness) {
        const TASKS: usize = 6;
        const KEYS: usize = 12;
        create(h, "t1", "room_7", &["alpha", "beta", "gamma"]).await;
        let second = h.second_node().await;
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let store = if t % 2 == 0 { h.store.clone() } else { second.clone() };
            tasks.push(tokio::spawn(async move {
                let mut fresh = Vec::new();
                for k in 0..KEYS {
                    // Each task walks the keys from a different start, so repeats truly race.
                    let key = format!("msg:{}", (k + t * 5) % KEYS);
                    let posted = store
                        .rooms()
                        .post(&keyed("t1", "room_7", &format!("{{\"task\":{t}}}"), &key))
                        .await
                        .expect("concurrent post");
                    if !posted.deduplicated {
                        fresh.push(posted.message_id.0);
                    }
                }
                fresh
            }));
        }
        let mut ids = Vec::new();
        for task in tasks {
            ids.extend(task.await.unwrap());
        }
        ids.sort_unstable();
        assert_eq!(ids, (1..=KEYS as u64).collect::<Vec<_>>(), "one message per key, dense ids");
        assert_eq!(count(h, "meeting_room_message").await, KEYS as i64);
        for agent in ["alpha", "beta", "gamma"] {
            let page = h.store.inbox().poll_after_cursor(&poll(&inbox_of("t1", agent), 0, 100)).await.unwrap();
            let mut messages: Vec<u64> = page
                .events
                .iter()
                .map(|e| e.correlation.message_id.as_deref().unwrap().parse().unwrap())
                .collect();
            assert_eq!(page.head_seq, InboxSeq(KEYS as u64));
            messages.sort_unstable();
            assert_eq!(messages, (1..=KEYS as u64).collect::<Vec<_>>(), "{agent}");
        }
    }
}

case! {
    /// A post bounded by the members it may reach (what a caller that admitted the deliveries
    /// beforehand asks for) writes nothing when the room has more by the time the post locks
    /// it, and names how many; within the bound it posts as `post` does. Each member's event
    /// holds `event_payload_bytes` of inline payload.
    async fn a_bounded_post_writes_nothing_past_its_members(h: &Harness) {
        create(h, "t1", "room_7", &["alpha", "beta", "gamma"]).await;
        let post = message("t1", "room_7", r#"{"text": "hi"}"#);
        let bounded = h.store.rooms().post_reaching_at_most(&post, 2).await.unwrap();
        assert_eq!(bounded, BoundedPost::TooManyMembers { members: 3 });
        assert_eq!(count(h, "meeting_room_message").await, 0);
        assert_eq!(count(h, "agent_inbox").await, 0);

        let BoundedPost::Posted(posted) = h.store.rooms().post_reaching_at_most(&post, 3).await.unwrap() else {
            panic!("three members fit a bound of three")
        };
        assert_eq!(posted.message_id, MessageId(1), "the refused post took no id");
        assert_eq!(posted.receipt.deliveries.len(), 3);
        let stored: i64 = h
            .scalar("SELECT MAX(LENGTH(payload_json)) AS n FROM agent_inbox WHERE recipient_id = ?", &["alpha"])
            .await;
        assert_eq!(stored as u64, inbox_rooms::event_payload_bytes(&post).unwrap());
    }
}
