//! (d): a taken deduplication key returns the existing event, even one committed after the caller's
//! snapshot.

use inbox_conformance::{Backend, Harness};
use inbox_core::{EventBody, InboxSeq};

use crate::*;

// ---- (d) deduplication ----

#[tokio::test(flavor = "multi_thread")]
async fn d_a_taken_deduplication_key_returns_the_existing_event_and_writes_nothing() {
    let h = Harness::new(Backend::MySql).await;
    let mut conn = host_connection(&h).await;
    let keyed = Call { deduplication_key: Some("order-7:shipped".into()), ..call_to("alpha") };
    let first = publish_committed(&mut conn, 1, std::slice::from_ref(&keyed)).await[0];
    assert!(!first.deduplicated);
    let updated_at = h.scalar("SELECT updated_at_utc AS n FROM inbox_head", &[]).await;

    // Again, with a different body, in a later transaction and twice in one.
    let different = Call { payload_json: Some(r#"{"other":true}"#.into()), ..keyed.clone() };
    let repeats = publish_committed(&mut conn, 2, &[different.clone(), keyed.clone()]).await;
    for repeat in repeats {
        assert_eq!(repeat, Published { deduplicated: true, ..first });
    }
    assert_eq!(count(&h, "agent_inbox").await, 1);
    assert_eq!(count(&h, "outbox_signal").await, 1);
    assert_eq!(head_seq(&h, "alpha").await, 1, "the head did not advance");
    assert_eq!(h.scalar("SELECT updated_at_utc AS n FROM inbox_head", &[]).await, updated_at);
    assert_eq!(poll_all(&h, "alpha").await[0].body, EventBody::Json(r#"{"text":"hello"}"#.into()));

    // The Rust store honours the key the procedure wrote.
    let rust = h.store.inbox().publish(&rust_publish(&["alpha"], Some("order-7:shipped"))).await.unwrap();
    assert!(rust.deliveries[0].deduplicated);
    assert_eq!((rust.deliveries[0].event_id, rust.deliveries[0].inbox_seq), (first.event_id, InboxSeq(1)));
    assert_eq!(rust.outbox_id, None);

    // Keys are per recipient and per exact bytes.
    let beta =
        publish_committed(&mut conn, 3, &[Call { recipient_id: Some("beta".into()), ..keyed.clone() }]).await
            [0];
    assert_eq!((beta.inbox_seq, beta.deduplicated), (1, false));
    let upper = publish_committed(
        &mut conn,
        4,
        &[Call { deduplication_key: Some("ORDER-7:shipped".into()), ..keyed }],
    )
    .await[0];
    assert_eq!((upper.inbox_seq, upper.deduplicated), (2, false));
    assert_eq!(count(&h, "agent_inbox").await, 3);
    assert_eq!(count(&h, "outbox_signal").await, 3);
}

/// A host transaction in REPEATABLE READ whose snapshot predates a publish of the same key
/// still finds that event (a plain read would miss it and the insert would hit the unique key),
/// and a fresh key behind such a snapshot still takes the next number.
#[tokio::test(flavor = "multi_thread")]
async fn d_deduplication_sees_events_committed_after_the_callers_snapshot() {
    let h = Harness::new(Backend::MySql).await;
    let mut conn = host_connection(&h).await;
    sql(&mut conn, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ").await;
    h.store.inbox().publish(&rust_publish(&["alpha"], None)).await.unwrap();

    sql(&mut conn, "START TRANSACTION").await;
    sql(&mut conn, "SELECT COUNT(*) FROM agent_inbox").await; // takes the snapshot
    // Committed after the snapshot: alpha's head moves from 1 to 2, beta's head is created.
    let keyed =
        h.store.inbox().publish(&rust_publish(&["alpha"], Some("k1"))).await.unwrap().deliveries.remove(0);
    h.store.inbox().publish(&rust_publish(&["beta"], None)).await.unwrap();
    let repeat =
        call(&mut conn, &Call { deduplication_key: Some("k1".into()), ..call_to("alpha") }).await.unwrap();
    assert_eq!(repeat, Published { event_id: keyed.event_id, inbox_seq: 2, deduplicated: true });
    let fresh =
        call(&mut conn, &Call { deduplication_key: Some("k2".into()), ..call_to("beta") }).await.unwrap();
    assert_eq!((fresh.inbox_seq, fresh.deduplicated), (2, false));
    sql(&mut conn, "COMMIT").await;

    assert_eq!(count(&h, "agent_inbox").await, 4);
    assert_eq!(count(&h, "outbox_signal").await, 4);
    assert_eq!((head_seq(&h, "alpha").await, head_seq(&h, "beta").await), (2, 2));
}
