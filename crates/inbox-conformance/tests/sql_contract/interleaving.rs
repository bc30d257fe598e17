//! (c): sequences continue across SQL and Rust publishes, and the head row stays locked until the
//! caller commits.

use std::time::{Duration, Instant};

use inbox_conformance::{Backend, Harness};
use inbox_core::{EventId, InboxSeq};

use crate::*;

// ---- (c) interleaving with the Rust store ----

#[tokio::test(flavor = "multi_thread")]
async fn c_sequences_continue_across_sql_and_rust_publishes() {
    let h = Harness::new(Backend::MySql).await;
    let mut conn = host_connection(&h).await;
    let mut expected = Vec::new();
    let rust = |d: inbox_store::PublishReceipt| {
        d.deliveries.iter().map(|d| (d.event_id, d.inbox_seq.get())).collect::<Vec<_>>()
    };

    expected.extend(rust(h.store.inbox().publish(&rust_publish(&["alpha"], None)).await.unwrap()));
    let p = publish_committed(&mut conn, 1, &[call_to("alpha")]).await[0];
    expected.push((p.event_id, p.inbox_seq));
    expected
        .extend(rust(h.store.inbox().publish(&rust_publish(&["alpha"], Some("rust-key"))).await.unwrap()));
    let p = publish_committed(
        &mut conn,
        2,
        &[Call { deduplication_key: Some("sql-key".into()), ..call_to("alpha") }],
    )
    .await[0];
    expected.push((p.event_id, p.inbox_seq));
    let fan_out = rust(h.store.inbox().publish(&rust_publish(&["alpha", "beta"], None)).await.unwrap());
    expected.push(fan_out[0]);
    // Fan-out from SQL: one call per recipient, in sorted order, in one transaction.
    let sql_fan_out = publish_committed(&mut conn, 3, &[call_to("alpha"), call_to("beta")]).await;
    expected.push((sql_fan_out[0].event_id, sql_fan_out[0].inbox_seq));

    let seqs: Vec<u64> = expected.iter().map(|(_, s)| *s).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
    let polled: Vec<(EventId, u64)> =
        poll_all(&h, "alpha").await.iter().map(|e| (e.event_id, e.inbox_seq.get())).collect();
    assert_eq!(polled, expected);
    assert_eq!(head_seq(&h, "alpha").await, 6);
    let beta: Vec<(EventId, u64)> =
        poll_all(&h, "beta").await.iter().map(|e| (e.event_id, e.inbox_seq.get())).collect();
    assert_eq!(beta, [fan_out[1], (sql_fan_out[1].event_id, 2)]);

    // The outbox rows read the same whichever side wrote them.
    let heads: Vec<String> = outbox_rows(&mut conn).await.into_iter().map(|r| r.0).collect();
    assert_eq!(
        heads,
        [
            r#"[["agent","alpha",1]]"#,
            r#"[["agent","alpha",2]]"#,
            r#"[["agent","alpha",3]]"#,
            r#"[["agent","alpha",4]]"#,
            r#"[["agent","alpha",5],["agent","beta",1]]"#,
            r#"[["agent","alpha",6]]"#,
            r#"[["agent","beta",2]]"#,
        ]
    );
}

/// The head row stays locked until the caller commits, so a Rust publish to the same
/// recipient waits and takes the next number: sequence order is commit order.
#[tokio::test(flavor = "multi_thread")]
async fn c_the_head_stays_locked_until_the_caller_commits() {
    let h = Harness::new(Backend::MySql).await;
    let mut conn = host_connection(&h).await;
    sql(&mut conn, "START TRANSACTION").await;
    let held = call(&mut conn, &call_to("alpha")).await.unwrap();
    assert_eq!(held.inbox_seq, 1);

    let store = h.store.clone();
    let waiting = tokio::spawn(async move { store.inbox().publish(&rust_publish(&["alpha"], None)).await });
    // Wait, with a deadline, until the Rust publish is inside its head upsert; from there it
    // cannot finish before the host commits.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = h
            .scalar(
                "SELECT COUNT(*) AS n FROM information_schema.processlist \
                 WHERE db = DATABASE() AND info LIKE 'INSERT INTO inbox_head%'",
                &[],
            )
            .await;
        if n > 0 {
            break;
        }
        assert!(!waiting.is_finished(), "the Rust publish did not wait for the head lock");
        assert!(Instant::now() < deadline, "the Rust publish never reached the head row");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let n_before_commit = count(&h, "agent_inbox").await;
    assert!(!waiting.is_finished(), "the Rust publish did not wait for the head lock");
    assert_eq!(n_before_commit, 0, "nothing is visible before the host commits");
    sql(&mut conn, "COMMIT").await;
    let receipt = waiting.await.unwrap().unwrap();
    assert_eq!(receipt.deliveries[0].inbox_seq, InboxSeq(2));
    let seqs: Vec<u64> = poll_all(&h, "alpha").await.iter().map(|e| e.inbox_seq.get()).collect();
    assert_eq!(seqs, [1, 2]);
}
