//! Publishing (alone and in a host transaction), deduplication, refusals, the envelope, reading after a cursor, and isolation between tenants and recipients.

use inbox_store::Field;
use std::collections::HashSet;

use inbox_conformance::vocabulary::{
    ack_with, agent, assert_invalid, claim_next, event, inbox_of, poll, publish_to, refusal, tenant,
};
use inbox_conformance::{Backend, Harness};
use inbox_core::{
    AckResult, AckState, Clock, DeduplicationKey, EventBody, EventId, InboxSeq, PayloadRef, Priority,
};
use inbox_store::{ClaimByIds, Delivery, Dialect, PollQuery, Publish, Refusal, StoreError};

/// One publish in a host transaction, committed; `Err` says why either step failed.
async fn host_publish(
    h: &Harness,
    tx: &mut sqlx::Transaction<'_, sqlx::MySql>,
    publish: &Publish,
) -> Result<inbox_store::PublishReceipt, String> {
    let receipt = h.store.inbox().publish_in(&mut **tx, publish).await.map_err(|e| e.to_string())?;
    sqlx::raw_sql("COMMIT").execute(&mut **tx).await.map_err(|e| e.to_string())?;
    Ok(receipt)
}

case! {
    /// Sequences start at 1 per recipient, follow commit order, and fan-out gives each recipient
    /// its own row; one outbox row per publish.
    galera async fn publish_assigns_per_recipient_sequences(h: &Harness) {
        for n in 1..=3 {
            let d = publish_to(h, "t1", "alpha", &format!("{{\"n\":{n}}}")).await;
            assert_eq!(d.inbox_seq, InboxSeq(n));
            assert!(!d.deduplicated);
        }
        let receipt =
            h.store.inbox().publish(&event("t1", &["gamma", "alpha", "beta", "alpha"], "{}")).await.unwrap();
        let got: Vec<(&str, u64)> =
            receipt.deliveries.iter().map(|d| (d.recipient.id.as_str(), d.inbox_seq.get())).collect();
        assert_eq!(got, [("alpha", 4), ("beta", 1), ("gamma", 1)], "canonical order, duplicates merged");
        let ids: HashSet<EventId> = receipt.deliveries.iter().map(|d| d.event_id).collect();
        assert_eq!(ids.len(), 3, "each recipient's row has its own event id");
        assert!(receipt.deliveries.iter().all(|d| d.event_id.as_uuid().get_version_num() == 7));
        assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM outbox_signal", &[]).await, 4);
        assert_eq!(
            h.scalar("SELECT n_recipients AS n FROM outbox_signal WHERE outbox_id = (SELECT MAX(outbox_id) FROM outbox_signal)", &[]).await,
            3
        );
        let head = h.store.inbox().head(&inbox_of("t1", "alpha")).await.unwrap();
        assert_eq!((head.head_seq, head.oldest_available_seq), (InboxSeq(4), InboxSeq(1)));
        let nobody = h.store.inbox().head(&inbox_of("t1", "nobody")).await.unwrap();
        assert_eq!((nobody.head_seq, nobody.oldest_available_seq), (InboxSeq(0), InboxSeq(1)));
    }
}

case! {
    /// A publish inside the host's transaction commits or rolls back with the host's own rows.
    galera async fn publish_in_host_transaction_is_atomic(h: &Harness) {
        let publish = event("t1", &["alpha", "beta"], r#"{"text":"hello"}"#);
        match h.store.dialect() {
            Dialect::MySql => {
                use sqlx::Connection as _;
                let mut conn = sqlx::MySqlConnection::connect(&h.url).await.unwrap();
                sqlx::raw_sql("CREATE TABLE room_message (id BIGINT PRIMARY KEY, body TEXT)")
                    .execute(&mut conn)
                    .await
                    .unwrap();
                for commit in [false, true] {
                    let mut tx = conn.begin().await.unwrap();
                    sqlx::query("INSERT INTO room_message VALUES (?, 'hello')")
                        .bind(i64::from(commit))
                        .execute(&mut *tx)
                        .await
                        .unwrap();
                    h.store.inbox().publish_in(&mut *tx, &publish).await.unwrap();
                    if commit { tx.commit().await.unwrap() } else { tx.rollback().await.unwrap() }
                }
            }
            Dialect::Sqlite => {
                use sqlx::Connection as _;
                let mut conn = sqlx::SqliteConnection::connect(&h.url).await.unwrap();
                sqlx::raw_sql("CREATE TABLE room_message (id INTEGER PRIMARY KEY, body TEXT)")
                    .execute(&mut conn)
                    .await
                    .unwrap();
                for commit in [false, true] {
                    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.unwrap();
                    sqlx::query("INSERT INTO room_message VALUES (?, 'hello')")
                        .bind(i64::from(commit))
                        .execute(&mut *tx)
                        .await
                        .unwrap();
                    h.store.inbox().publish_in(&mut *tx, &publish).await.unwrap();
                    if commit { tx.commit().await.unwrap() } else { tx.rollback().await.unwrap() }
                }
            }
        }
        assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM room_message", &[]).await, 1);
        assert_eq!(
            h.scalar("SELECT COUNT(*) AS n FROM agent_inbox", &[]).await,
            2,
            "only the committed publish is visible"
        );
        assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM outbox_signal", &[]).await, 1);
        for recipient in ["alpha", "beta"] {
            let page = h.store.inbox().poll_after_cursor(&poll(&inbox_of("t1", recipient), 0, 10)).await.unwrap();
            assert_eq!(page.events.len(), 1);
            assert_eq!(page.events[0].inbox_seq, InboxSeq(1), "the rolled-back publish left no gap");
        }
    }
}

case! {
    /// Publishing the same deduplication key again returns the existing events and adds only
    /// the recipients that did not have it.
    galera async fn deduplication_key_returns_the_existing_event(h: &Harness) {
        let mut publish = event("t1", &["alpha", "beta"], "{}");
        publish.deduplication_key = Some(DeduplicationKey::new("msg:room_7:920155").unwrap());
        let first = h.store.inbox().publish(&publish).await.unwrap();
        publish.recipients.push(agent("gamma"));
        let second = h.store.inbox().publish(&publish).await.unwrap();
        assert_eq!(second.deliveries[0], Delivery { deduplicated: true, ..first.deliveries[0].clone() });
        assert_eq!(second.deliveries[1], Delivery { deduplicated: true, ..first.deliveries[1].clone() });
        assert!(!second.deliveries[2].deduplicated);
        assert_eq!(second.deliveries[2].inbox_seq, InboxSeq(1));
        let again = h.store.inbox().publish(&publish).await.unwrap();
        assert!(again.deliveries.iter().all(|d| d.deduplicated));
        assert_eq!(again.outbox_id, None, "nothing new, so nothing to signal");
        assert_eq!(h.store.inbox().head(&inbox_of("t1", "alpha")).await.unwrap().head_seq, InboxSeq(1));
        assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox", &[]).await, 3);
        // The key is per recipient and tenant: another tenant's identical key is a new event.
        let mut other = publish.clone();
        other.tenant_id = tenant("t2");
        assert!(h.store.inbox().publish(&other).await.unwrap().deliveries.iter().all(|d| !d.deduplicated));
    }
}

case! {
    /// A host transaction whose snapshot predates a concurrent publish of the same key still gets
    /// the existing event back (MySQL's REPEATABLE READ snapshot must not hide it).
    galera async fn deduplication_sees_commits_after_the_host_snapshot(h: &Harness) {
        let mut publish = event("t1", &["alpha"], "{}");
        publish.deduplication_key = Some(DeduplicationKey::new("route:job_5521:v4").unwrap());
        let first = match h.store.dialect() {
            Dialect::MySql => {
                use sqlx::Connection as _;
                let mut conn = sqlx::MySqlConnection::connect(&h.url).await.unwrap();
                sqlx::raw_sql("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    .execute(&mut conn)
                    .await
                    .unwrap();
                let mut tx = conn.begin().await.unwrap();
                // Establish the snapshot before the other publish commits.
                sqlx::query("SELECT COUNT(*) FROM agent_inbox").execute(&mut *tx).await.unwrap();
                let first = h.store.inbox().publish(&publish).await.unwrap();
                let mut again = host_publish(h, &mut tx, &publish).await;
                // On Galera the host's transaction, whose head lock the other member's commit
                // overrode, may be a certification victim (at a statement or at COMMIT): the host
                // retries it, as it would a deadlock victim.
                for _ in 0..5 {
                    if again.is_ok() || h.backend != Backend::Galera {
                        break;
                    }
                    drop(tx);
                    tx = conn.begin().await.unwrap();
                    again = host_publish(h, &mut tx, &publish).await;
                }
                let again = again.expect("publish in the host transaction");
                assert_eq!(
                    again.deliveries,
                    vec![Delivery { deduplicated: true, ..first.deliveries[0].clone() }]
                );
                first
            }
            Dialect::Sqlite => {
                // SQLite serializes writers (BEGIN IMMEDIATE), so there is no older snapshot to
                // race; the repeat simply deduplicates.
                let first = h.store.inbox().publish(&publish).await.unwrap();
                assert!(h.store.inbox().publish(&publish).await.unwrap().deliveries[0].deduplicated);
                first
            }
        };
        assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox", &[]).await, 1);
        assert_eq!(
            h.store.inbox().head(&inbox_of("t1", "alpha")).await.unwrap().head_seq,
            first.deliveries[0].inbox_seq
        );
    }
}

case! {
    /// Bad publishes are refused with the field named, and leave nothing behind.
    async fn publish_refusals_change_nothing(h: &Harness) {
        let limit = h.store.config().payload_bytes_limit;
        let big = format!("\"{}\"", "x".repeat(limit));
        match h.store.inbox().publish(&event("t1", &["alpha"], &big)).await {
            Err(StoreError::PayloadTooLarge { bytes, limit: l }) => {
                assert_eq!((bytes, l), (limit + 2, limit))
            }
            other => panic!("expected payload_too_large, got {other:?}"),
        }
        assert_invalid(h.store.inbox().publish(&event("t1", &[], "{}")).await, Field::Recipients);
        let many: Vec<String> = (0..=h.store.config().fanout_recipients_max).map(|i| format!("a{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_invalid(h.store.inbox().publish(&event("t1", &many, "{}")).await, Field::Recipients);
        let now = h.clock.now();
        let mut window = event("t1", &["alpha"], "{}");
        window.available_at = Some(now.plus_ms(10_000));
        window.expires_at = Some(now.plus_ms(5_000));
        assert_invalid(h.store.inbox().publish(&window).await, Field::ExpiresAt);
        let mut stale = event("t1", &["alpha"], "{}");
        stale.expires_at = Some(now.minus_ms(1));
        assert_invalid(h.store.inbox().publish(&stale).await, Field::ExpiresAt);
        let mut attempts = event("t1", &["alpha"], "{}");
        attempts.max_attempts = Some(0);
        assert_invalid(h.store.inbox().publish(&attempts).await, Field::MaxAttempts);
        let mut reference = event("t1", &["alpha"], "{}");
        reference.body = EventBody::Reference(PayloadRef { kind: String::new(), id: "1".into() });
        assert_invalid(h.store.inbox().publish(&reference).await, Field::PayloadRefKind);
        assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox", &[]).await, 0);
        assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM inbox_head", &[]).await, 0);
        assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM outbox_signal", &[]).await, 0);
    }
}

case! {
    /// Every envelope field survives the round trip, and a payload reference is kept as one.
    async fn envelope_round_trips(h: &Harness) {
        let now = h.clock.now();
        let mut publish =
            event("t1", &["alpha"], r#"{"content": "Please analyze the attached logs.", "n": [1, 2]}"#);
        publish.priority = Priority::High;
        publish.available_at = Some(now);
        publish.expires_at = Some(now.plus_ms(86_400_000));
        publish.max_attempts = Some(3);
        publish.correlation.company_id = Some("co_9".into());
        publish.correlation.meeting_room_id = Some("room_7".into());
        publish.correlation.message_id = Some("920155".into());
        publish.correlation.assignment_id = Some("asg-Ünïcode".into());
        let d = h.store.inbox().publish(&publish).await.unwrap().deliveries.remove(0);
        let stored = h.store.inbox().event(&inbox_of("t1", "alpha"), d.event_id).await.unwrap().unwrap();
        assert_eq!(stored.event_type, publish.event_type);
        assert_eq!(stored.priority, Priority::High);
        assert_eq!(stored.correlation, publish.correlation);
        assert_eq!(stored.body, publish.body, "JSON text is kept byte for byte");
        assert_eq!(stored.lifecycle.available_at, now);
        assert_eq!(stored.lifecycle.expires_at, publish.expires_at);
        assert_eq!(stored.lifecycle.max_attempts, 3);
        assert_eq!(stored.state(), AckState::Available);
        assert_eq!(stored.created_at, now);

        let mut by_ref = event("t1", &["alpha"], "{}");
        by_ref.body =
            EventBody::Reference(PayloadRef { kind: "meeting_room_message".into(), id: "920155".into() });
        let d = h.store.inbox().publish(&by_ref).await.unwrap().deliveries.remove(0);
        let stored = h.store.inbox().event(&inbox_of("t1", "alpha"), d.event_id).await.unwrap().unwrap();
        assert_eq!(stored.body, by_ref.body);
    }
}

case! {
    /// Polling pages through the inbox in sequence order without changing anything.
    galera async fn poll_after_cursor_pages_in_order(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        for n in 1..=5 {
            publish_to(h, "t1", "alpha", &format!("{{\"n\":{n}}}")).await;
        }
        let page = h.store.inbox().poll_after_cursor(&poll(&inbox, 0, 2)).await.unwrap();
        let seqs: Vec<u64> = page.events.iter().map(|e| e.inbox_seq.get()).collect();
        assert_eq!(seqs, [1, 2]);
        assert_eq!((page.head_seq, page.next_cursor, page.more_available), (InboxSeq(5), InboxSeq(2), true));
        let page = h.store.inbox().poll_after_cursor(&poll(&inbox, 2, 10)).await.unwrap();
        let seqs: Vec<u64> = page.events.iter().map(|e| e.inbox_seq.get()).collect();
        assert_eq!(seqs, [3, 4, 5]);
        assert_eq!((page.next_cursor, page.more_available), (InboxSeq(5), false));
        let page = h.store.inbox().poll_after_cursor(&poll(&inbox, 5, 10)).await.unwrap();
        assert!(page.events.is_empty());
        assert_eq!(page.next_cursor, InboxSeq(5), "an empty page keeps the cursor");
        let ahead = h.store.inbox().poll_after_cursor(&poll(&inbox, 9, 10)).await.unwrap();
        assert_eq!(
            (ahead.head_seq, ahead.next_cursor),
            (InboxSeq(5), InboxSeq(9)),
            "a cursor past the head (a restored database) learns the real head"
        );
        assert!(page.events.is_empty() && !page.more_available);
        assert_eq!(
            h.scalar("SELECT COUNT(*) AS n FROM agent_inbox WHERE ack_state = 'available'", &[]).await,
            5,
            "read-only"
        );
        assert_invalid(h.store.inbox().poll_after_cursor(&poll(&inbox, 0, 0)).await, Field::Limit);
        assert_invalid(h.store.inbox().poll_after_cursor(&poll(&inbox, 0, 100_000)).await, Field::Limit);

        // claimable_only hides claimed and not-yet-available events.
        let mut later = event("t1", &["alpha"], "{}");
        later.available_at = Some(h.clock.now().plus_ms(60_000));
        h.store.inbox().publish(&later).await.unwrap();
        h.store.inbox().claim_next(&claim_next(&inbox, 1)).await.unwrap();
        let claimable = PollQuery { claimable_only: true, ..poll(&inbox, 0, 100) };
        let seqs: Vec<u64> = h
            .store
            .inbox()
            .poll_after_cursor(&claimable)
            .await
            .unwrap()
            .events
            .iter()
            .map(|e| e.inbox_seq.get())
            .collect();
        assert_eq!(seqs, [2, 3, 4, 5]);
        h.clock.advance_ms(60_000);
        let seqs: Vec<u64> = h
            .store
            .inbox()
            .poll_after_cursor(&claimable)
            .await
            .unwrap()
            .events
            .iter()
            .map(|e| e.inbox_seq.get())
            .collect();
        assert_eq!(seqs, [2, 3, 4, 5, 6]);
    }
}

case! {
    /// Nothing crosses tenants or recipients: the same names under another tenant are another
    /// inbox, and a valid token does not reach across.
    async fn tenants_and_recipients_are_isolated(h: &Harness) {
        let ours = inbox_of("t1", "alpha");
        let theirs = inbox_of("t2", "alpha");
        let id = publish_to(h, "t1", "alpha", "{}").await.event_id;
        assert_eq!(publish_to(h, "t2", "alpha", "{}").await.inbox_seq, InboxSeq(1), "separate sequences");
        let claimed = h
            .store
            .inbox()
            .claim_by_ids(&ClaimByIds {
                inbox: ours.clone(),
                session_id: None,
                event_ids: vec![id],
                lease_ms: None,
            })
            .await
            .unwrap()
            .remove(0)
            .unwrap();
        let across = h
            .store
            .inbox()
            .claim_by_ids(&ClaimByIds {
                inbox: theirs.clone(),
                session_id: None,
                event_ids: vec![id],
                lease_ms: None,
            })
            .await
            .unwrap();
        assert_eq!(refusal(&across[0]), Refusal::NotFound);
        let ack = h
            .store
            .inbox()
            .acknowledge(&ack_with(&theirs, id, &claimed.lease_token, AckResult::Completed))
            .await
            .unwrap();
        assert_eq!(refusal(&ack[0]), Refusal::NotFound);
        assert!(h.store.inbox().event(&theirs, id).await.unwrap().is_none());
        let page = h.store.inbox().poll_after_cursor(&poll(&theirs, 0, 10)).await.unwrap();
        assert!(page.events.iter().all(|e| e.inbox.tenant_id.as_str() == "t2"));
        assert_eq!(h.store.inbox().claim_next(&claim_next(&theirs, 10)).await.unwrap().len(), 1);
        assert_eq!(h.store.inbox().event(&ours, id).await.unwrap().unwrap().state(), AckState::Claimed);
    }
}
