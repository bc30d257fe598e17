//! (a) and (b): a committed CALL publishes what the store then reads, claims and acknowledges; a
//! rolled-back one leaves nothing.

use inbox_conformance::{Backend, Harness};
use inbox_core::{
    AckResult, AckState, Clock, Correlation, DeadLetterReason, EventBody, InboxSeq, PayloadRef, Priority,
    UnixMillis,
};
use inbox_store::{AckItem, Acknowledge, ClaimNext};
use sqlx::Row;

use crate::*;

// ---- (a) commit ----

#[tokio::test(flavor = "multi_thread")]
async fn a_committed_call_publishes_an_event_the_store_reads_claims_and_acks() {
    let h = Harness::new(Backend::MySql).await;
    let mut conn = host_connection(&h).await;
    let expires_at = h.clock.now().get() + 3_600_000;
    let correlation = [
        "company_1",
        "workspace_2",
        "project_3",
        "room_4",
        "message_5",
        "routing_6",
        "memory_7",
        "assignment_8",
    ]
    .map(|v| Some(v.to_owned()));
    let c = Call {
        priority: Some(1),
        expires_at_utc: Some(expires_at),
        max_attempts: Some(3),
        payload_json: Some(r#"{"text": "héllo", "n": [1, 2]}"#.into()),
        correlation,
        ..call_to("alpha")
    };
    let before = h.clock.now();
    let published = publish_committed(&mut conn, 1, &[c]).await[0];
    assert_eq!(published.inbox_seq, 1);
    assert!(!published.deduplicated);

    let uuid = published.event_id.as_uuid();
    assert_eq!(uuid.get_version_num(), 7, "{uuid} is a UUIDv7");
    assert_eq!(uuid.as_bytes()[8] >> 6, 0b10, "{uuid} has variant bits 10");

    let events = poll_all(&h, "alpha").await;
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(h.store.inbox().event(&inbox("alpha"), published.event_id).await.unwrap().as_ref(), Some(e));
    assert_eq!(e.inbox, inbox("alpha"));
    assert_eq!(e.inbox_seq, InboxSeq(1));
    assert_eq!(e.event_id, published.event_id);
    assert_eq!(e.event_type.as_str(), "meeting_room.message_posted");
    assert_eq!(e.priority, Priority::High);
    assert_eq!(e.deduplication_key, None);
    assert_eq!(e.state(), AckState::Available);
    assert_eq!(e.lifecycle.delivery_attempts, 0);
    assert_eq!(e.lifecycle.max_attempts, 3);
    assert_eq!(e.lifecycle.available_at, e.created_at, "available_at defaults to now");
    assert_eq!(e.lifecycle.expires_at, Some(UnixMillis(expires_at)));
    assert_eq!(e.lifecycle.next_retry_at, None);
    assert_eq!(e.lifecycle.lease, None);
    assert_eq!(e.lifecycle.dead_letter_reason, DeadLetterReason::None);
    assert_eq!(e.lease_owner_session_id, None);
    assert_eq!(
        e.correlation,
        Correlation {
            company_id: Some("company_1".into()),
            workspace_id: Some("workspace_2".into()),
            project_id: Some("project_3".into()),
            meeting_room_id: Some("room_4".into()),
            message_id: Some("message_5".into()),
            routing_decision_id: Some("routing_6".into()),
            memory_update_id: Some("memory_7".into()),
            assignment_id: Some("assignment_8".into()),
        }
    );
    assert_eq!(e.body, EventBody::Json(r#"{"text": "héllo", "n": [1, 2]}"#.into()), "kept byte for byte");
    assert_eq!(e.updated_at, e.created_at);
    assert_eq!((e.acked_at, e.terminal_at, e.last_error.as_deref()), (None, None, None));
    // The database clock stamped the row: near the store's (both are this machine's clock).
    assert!(
        e.created_at.get().abs_diff(before.get()) < 60_000,
        "created_at {} is far from now {}",
        e.created_at,
        before
    );
    // The UUIDv7 timestamp is the creation time.
    let id_bytes = e.event_id.as_bytes();
    let id_ms = id_bytes[..6].iter().fold(0i64, |ms, b| (ms << 8) | i64::from(*b));
    assert_eq!(id_ms, e.created_at.get());

    let head = h.store.inbox().head(&inbox("alpha")).await.unwrap();
    assert_eq!((head.head_seq, head.oldest_available_seq), (InboxSeq(1), InboxSeq(1)));
    assert_eq!(
        outbox_rows(&mut conn).await,
        [(r#"[["agent","alpha",1]]"#.to_owned(), 1, "pending".to_owned(), 0)]
    );
    let outbox = sqlx::query(
        "SELECT tenant_id, signal_type, next_attempt_at_utc, last_error_code, created_at_utc FROM outbox_signal",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(text(&outbox, "tenant_id"), "t1");
    assert_eq!(text(&outbox, "signal_type"), "inbox.updated");
    assert_eq!(outbox.get::<Option<i64>, _>("next_attempt_at_utc"), None);
    assert_eq!(outbox.try_get_unchecked::<Option<String>, _>("last_error_code").unwrap(), None);
    assert_eq!(outbox.get::<i64, _>("created_at_utc"), e.created_at.get());
    assert_eq!(count(&h, "room_message").await, 1);

    // The store takes it from here: claim, then acknowledge.
    clock_reaches(&h, e.created_at);
    let claimed = h
        .store
        .inbox()
        .claim_next(&ClaimNext {
            inbox: inbox("alpha"),
            session_id: None,
            limit: 10,
            lease_ms: Some(60_000),
            order: Default::default(),
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].event.event_id, published.event_id);
    assert_eq!(claimed[0].event.lifecycle.delivery_attempts, 1);
    let acked = h
        .store
        .inbox()
        .acknowledge(&Acknowledge {
            inbox: inbox("alpha"),
            session_id: None,
            items: vec![AckItem::new(
                published.event_id,
                claimed[0].lease_token.clone(),
                AckResult::Completed,
            )],
        })
        .await
        .unwrap();
    assert_eq!(acked[0].as_ref().map(|r| r.state).ok(), Some(AckState::Acked));
    let after = h.store.inbox().event(&inbox("alpha"), published.event_id).await.unwrap().unwrap();
    assert_eq!(after.state(), AckState::Acked);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_payload_reference_or_no_body_round_trips_with_defaults() {
    let h = Harness::new(Backend::MySql).await;
    let mut conn = host_connection(&h).await;
    let available_at = h.clock.now().get() + 60_000;
    let calls = [
        Call {
            payload_json: None,
            payload_ref_type: Some("room_message".into()),
            payload_ref_id: Some("42".into()),
            available_at_utc: Some(available_at),
            priority: Some(3),
            deduplication_key: Some("msg-42".into()),
            ..call_to("alpha")
        },
        Call { payload_json: None, ..call_to("alpha") },
    ];
    let published = publish_committed(&mut conn, 1, &calls).await;
    assert_eq!(published.iter().map(|p| p.inbox_seq).collect::<Vec<_>>(), [1, 2]);
    let events = poll_all(&h, "alpha").await;
    assert_eq!(
        events[0].body,
        EventBody::Reference(PayloadRef { kind: "room_message".into(), id: "42".into() })
    );
    assert_eq!(events[0].lifecycle.available_at, UnixMillis(available_at));
    assert_eq!(events[0].priority, Priority::Low);
    assert_eq!(events[0].deduplication_key.as_ref().map(|k| k.as_str()), Some("msg-42"));
    assert_eq!(events[1].body, EventBody::Empty);
    assert_eq!(events[1].priority, Priority::Normal, "NULL priority means normal");
    assert_eq!(events[1].lifecycle.max_attempts, 10, "NULL max_attempts means 10");
    assert_eq!(events[1].lifecycle.expires_at, None);
    assert_eq!(events[1].correlation, Correlation::default());
}

// ---- (b) rollback ----

#[tokio::test(flavor = "multi_thread")]
async fn b_rollback_leaves_nothing_behind() {
    let h = Harness::new(Backend::MySql).await;
    let mut conn = host_connection(&h).await;
    h.store.inbox().publish(&rust_publish(&["alpha"], None)).await.unwrap();

    sql(&mut conn, "START TRANSACTION").await;
    sql(&mut conn, "INSERT INTO room_message VALUES (1, 'hello')").await;
    let alpha = call(&mut conn, &call_to("alpha")).await.unwrap();
    let beta = call(&mut conn, &call_to("beta")).await.unwrap();
    assert_eq!((alpha.inbox_seq, beta.inbox_seq), (2, 1));
    sql(&mut conn, "ROLLBACK").await;

    assert_eq!(count(&h, "room_message").await, 0);
    assert_eq!(count(&h, "agent_inbox").await, 1, "only the Rust publish");
    assert_eq!(count(&h, "outbox_signal").await, 1, "only the Rust publish");
    assert_eq!(head_seq(&h, "alpha").await, 1, "the head is back where it was");
    assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM inbox_head WHERE recipient_id = 'beta'", &[]).await, 0);
    assert!(h.store.inbox().event(&inbox("alpha"), alpha.event_id).await.unwrap().is_none());

    // No sequence number was used up.
    let again = publish_committed(&mut conn, 2, &[call_to("alpha")]).await[0];
    assert_eq!(again.inbox_seq, 2);
    assert_ne!(again.event_id, alpha.event_id);
}
