//! The SQL contract: `agent_inbox_publish`, the stored procedure through which applications in
//! other languages publish inside their own MySQL/MariaDB transaction (docs/sql-contract.md).
//! Every case speaks plain SQL on a raw connection, as such an application would, and checks
//! the outcome through the Rust store, which must read, claim and acknowledge what the
//! procedure wrote exactly as if it had published it itself.

use std::time::{Duration, Instant};

use inbox_conformance::{Backend, Harness};
use inbox_core::{
    AckResult, AckState, Clock, Correlation, DeadLetterReason, DeduplicationKey, EventBody, EventId,
    EventType, InboxSeq, PayloadRef, Priority, Recipient, RecipientId, RecipientKey, TenantId, UnixMillis,
};
use inbox_store::{AckItem, Acknowledge, ClaimNext, EventRecord, PollQuery, Publish};
use sqlx::{Connection, MySqlConnection, Row};

const CALL: &str =
    "CALL agent_inbox_publish(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, @e, @s, @d)";

/// The arguments of one CALL; `Default` plus a tenant, kind, recipient and event type is the
/// smallest valid call.
#[derive(Debug, Clone, Default)]
struct Call {
    tenant_id: Option<String>,
    recipient_kind: Option<String>,
    recipient_id: Option<String>,
    event_type: Option<String>,
    priority: Option<i64>,
    available_at_utc: Option<i64>,
    expires_at_utc: Option<i64>,
    deduplication_key: Option<String>,
    max_attempts: Option<i64>,
    payload_json: Option<String>,
    payload_ref_type: Option<String>,
    payload_ref_id: Option<String>,
    correlation: [Option<String>; 8],
}

/// The OUT parameters of a successful CALL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Published {
    event_id: EventId,
    inbox_seq: u64,
    deduplicated: bool,
}

fn call_to(recipient: &str) -> Call {
    Call {
        tenant_id: Some("t1".into()),
        recipient_kind: Some("agent".into()),
        recipient_id: Some(recipient.into()),
        event_type: Some("meeting_room.message_posted".into()),
        payload_json: Some(r#"{"text":"hello"}"#.into()),
        ..Call::default()
    }
}

async fn call(conn: &mut MySqlConnection, c: &Call) -> Result<Published, sqlx::Error> {
    let mut query = sqlx::query(CALL)
        .bind(c.tenant_id.as_deref())
        .bind(c.recipient_kind.as_deref())
        .bind(c.recipient_id.as_deref())
        .bind(c.event_type.as_deref())
        .bind(c.priority)
        .bind(c.available_at_utc)
        .bind(c.expires_at_utc)
        .bind(c.deduplication_key.as_deref())
        .bind(c.max_attempts)
        .bind(c.payload_json.as_deref())
        .bind(c.payload_ref_type.as_deref())
        .bind(c.payload_ref_id.as_deref());
    for value in &c.correlation {
        query = query.bind(value.as_deref());
    }
    query.execute(&mut *conn).await?;
    let row = sqlx::query("SELECT @e AS e, @s AS s, @d AS d").fetch_one(&mut *conn).await?;
    let event_id: Vec<u8> = row.try_get_unchecked("e")?;
    let inbox_seq: i64 = row.try_get_unchecked("s")?;
    let deduplicated: i64 = row.try_get_unchecked("d")?;
    assert!(deduplicated == 0 || deduplicated == 1, "p_deduplicated is {deduplicated}");
    Ok(Published {
        event_id: EventId::from_slice(&event_id).expect("p_event_id holds 16 bytes"),
        inbox_seq: u64::try_from(inbox_seq).expect("a positive sequence"),
        deduplicated: deduplicated == 1,
    })
}

async fn sql(conn: &mut MySqlConnection, statement: &str) {
    sqlx::raw_sql(statement).execute(&mut *conn).await.unwrap_or_else(|e| panic!("{statement}: {e}"));
}

async fn host_connection(h: &Harness) -> MySqlConnection {
    let mut conn = MySqlConnection::connect(&h.url).await.expect("a host connection");
    sql(&mut conn, "CREATE TABLE IF NOT EXISTS room_message (id BIGINT PRIMARY KEY, body TEXT)").await;
    conn
}

/// Runs `calls` in one host transaction next to a domain row, then commits.
async fn publish_committed(conn: &mut MySqlConnection, domain_id: i64, calls: &[Call]) -> Vec<Published> {
    sql(conn, "START TRANSACTION").await;
    sqlx::query("INSERT INTO room_message VALUES (?, 'hello')")
        .bind(domain_id)
        .execute(&mut *conn)
        .await
        .unwrap();
    let mut out = Vec::new();
    for c in calls {
        out.push(call(conn, c).await.expect("the call succeeds"));
    }
    sql(conn, "COMMIT").await;
    out
}

fn inbox(recipient: &str) -> RecipientKey {
    RecipientKey {
        tenant_id: TenantId::new("t1").unwrap(),
        recipient: Recipient::agent(RecipientId::new(recipient).unwrap()),
    }
}

fn rust_publish(recipients: &[&str], key: Option<&str>) -> Publish {
    let mut publish = Publish::new(
        TenantId::new("t1").unwrap(),
        recipients.iter().map(|r| Recipient::agent(RecipientId::new(*r).unwrap())).collect(),
        EventType::new("meeting_room.message_posted").unwrap(),
        EventBody::json(r#"{"from":"rust"}"#).unwrap(),
    );
    publish.deduplication_key = key.map(|k| DeduplicationKey::new(k).unwrap());
    publish
}

async fn poll_all(h: &Harness, recipient: &str) -> Vec<EventRecord> {
    let page = h
        .store
        .inbox()
        .poll_after_cursor(&PollQuery {
            inbox: inbox(recipient),
            after_seq: InboxSeq::ZERO,
            limit: 100,
            claimable_only: false,
        })
        .await
        .unwrap();
    assert!(!page.more_available);
    page.events
}

async fn count(h: &Harness, table: &str) -> i64 {
    h.scalar(&format!("SELECT COUNT(*) AS n FROM {table}"), &[]).await
}

async fn head_seq(h: &Harness, recipient: &str) -> u64 {
    h.store.inbox().head(&inbox(recipient)).await.unwrap().head_seq.get()
}

/// The outbox rows as (recipient_heads, n_recipients, status, attempt_count), oldest first.
async fn outbox_rows(conn: &mut MySqlConnection) -> Vec<(String, i64, String, i64)> {
    sqlx::query(
        "SELECT recipient_heads, n_recipients, status, attempt_count FROM outbox_signal ORDER BY outbox_id",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap()
    .iter()
    .map(|r| {
        (text(r, "recipient_heads"), r.get::<i32, _>(1).into(), text(r, "status"), r.get::<i32, _>(3).into())
    })
    .collect()
}

/// Text from a `_bin` column, which reaches sqlx flagged as binary.
fn text(row: &sqlx::mysql::MySqlRow, column: &str) -> String {
    row.try_get_unchecked(column).unwrap_or_else(|e| panic!("{column}: {e}"))
}

/// The store's clock is a manual one; bring it up to the database's, which stamped the event.
fn clock_reaches(h: &Harness, at: UnixMillis) {
    if h.clock.now() < at {
        h.clock.set(at);
    }
}

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
        .claim_next(&ClaimNext { inbox: inbox("alpha"), session_id: None, limit: 10, lease_ms: Some(60_000) })
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

// ---- (e) validation ----

/// Every refusal is SQLSTATE 45000 with a message naming the parameter, and writes nothing:
/// each failed call is followed by COMMIT, and the tables stay empty.
#[tokio::test(flavor = "multi_thread")]
async fn e_invalid_calls_are_refused_with_45000_and_write_nothing() {
    let h = Harness::new(Backend::MySql).await;
    let mut conn = host_connection(&h).await;
    let now = h.clock.now().get();
    let s = |v: &str| Some(v.to_owned());
    let base = call_to("alpha");
    let with_correlation = |i: usize, value: &str| {
        let mut c = call_to("alpha");
        c.correlation[i] = s(value);
        c
    };
    let cases: Vec<(Call, &str)> = vec![
        (
            Call { tenant_id: s(""), ..base.clone() },
            "p_tenant_id must be 1 to 64 characters from A-Z a-z 0-9 _ - . :",
        ),
        (Call { tenant_id: None, ..base.clone() }, "p_tenant_id must be 1 to 64"),
        (Call { tenant_id: s("t 1"), ..base.clone() }, "p_tenant_id must be 1 to 64"),
        (Call { tenant_id: s("tenantö"), ..base.clone() }, "p_tenant_id must be 1 to 64"),
        (Call { tenant_id: Some("t".repeat(65)), ..base.clone() }, "p_tenant_id must be 1 to 64"),
        (
            Call { recipient_kind: s(""), ..base.clone() },
            "p_recipient_kind must be 1 to 32 characters from a-z 0-9 _ -",
        ),
        (Call { recipient_kind: s("Agent"), ..base.clone() }, "p_recipient_kind must be 1 to 32"),
        (
            Call { recipient_id: s(""), ..base.clone() },
            "p_recipient_id must be 1 to 128 characters from A-Z a-z 0-9 _ - . : @",
        ),
        (Call { recipient_id: s("alpha\n"), ..base.clone() }, "p_recipient_id must be 1 to 128"),
        (Call { recipient_id: Some("r".repeat(129)), ..base.clone() }, "p_recipient_id must be 1 to 128"),
        (
            Call { event_type: s(""), ..base.clone() },
            "p_event_type must be 1 to 128 characters from A-Z a-z 0-9 _ - . :",
        ),
        (Call { event_type: s("a/b"), ..base.clone() }, "p_event_type must be 1 to 128"),
        (
            Call { priority: Some(4), ..base.clone() },
            "p_priority must be 0 (urgent), 1 (high), 2 (normal) or 3 (low)",
        ),
        (Call { priority: Some(-1), ..base.clone() }, "p_priority must be 0 (urgent)"),
        (
            Call { deduplication_key: s("has space"), ..base.clone() },
            "p_deduplication_key must be NULL or 1 to 200 printable ASCII characters without spaces",
        ),
        (Call { deduplication_key: s(""), ..base.clone() }, "p_deduplication_key must be NULL or 1 to 200"),
        (
            Call { deduplication_key: Some("k".repeat(201)), ..base.clone() },
            "p_deduplication_key must be NULL or 1 to 200",
        ),
        (Call { max_attempts: Some(0), ..base.clone() }, "p_max_attempts must be NULL or between 1 and 1000"),
        (
            Call { max_attempts: Some(1001), ..base.clone() },
            "p_max_attempts must be NULL or between 1 and 1000",
        ),
        (Call { payload_json: s("{"), ..base.clone() }, "p_payload_json is not valid JSON"),
        (Call { payload_json: s("{} {}"), ..base.clone() }, "p_payload_json is not valid JSON"),
        (Call { payload_json: s(""), ..base.clone() }, "p_payload_json is not valid JSON"),
        (
            Call { payload_json: Some(format!("\"{}\"", "x".repeat(262_143))), ..base.clone() },
            "p_payload_json is larger than 262144 bytes; pass a payload reference instead",
        ),
        (
            Call { payload_ref_type: s("room_message"), payload_ref_id: s("1"), ..base.clone() },
            "give p_payload_json or p_payload_ref_type with p_payload_ref_id, not both",
        ),
        (
            Call { payload_json: None, payload_ref_type: s("room_message"), ..base.clone() },
            "p_payload_ref_type and p_payload_ref_id must be given together",
        ),
        (
            Call {
                payload_json: None,
                payload_ref_type: Some("k".repeat(65)),
                payload_ref_id: s("1"),
                ..base.clone()
            },
            "p_payload_ref_type must be 1 to 64 bytes without control characters",
        ),
        (
            Call {
                payload_json: None,
                payload_ref_type: s("room_message"),
                payload_ref_id: s("a\u{7}"),
                ..base.clone()
            },
            "p_payload_ref_id must be 1 to 128 bytes without control characters",
        ),
        (with_correlation(0, ""), "p_company_id must be NULL or 1 to 128 bytes without control characters"),
        (with_correlation(1, "a\tb"), "p_workspace_id must be NULL or 1 to 128 bytes"),
        (with_correlation(2, &"p".repeat(129)), "p_project_id must be NULL or 1 to 128 bytes"),
        (with_correlation(3, "\n"), "p_meeting_room_id must be NULL"),
        (with_correlation(4, ""), "p_message_id must be NULL"),
        (with_correlation(5, ""), "p_routing_decision_id must be NULL"),
        (with_correlation(6, ""), "p_memory_update_id must be NULL"),
        (with_correlation(7, &"é".repeat(65)), "p_assignment_id must be NULL or 1 to 128 bytes"),
        (
            Call {
                available_at_utc: Some(now + 7_200_000),
                expires_at_utc: Some(now + 3_600_000),
                ..base.clone()
            },
            "p_expires_at_utc must be later than p_available_at_utc",
        ),
        (
            Call { available_at_utc: Some(now), expires_at_utc: Some(now), ..base.clone() },
            "p_expires_at_utc must be later than p_available_at_utc",
        ),
        (
            Call { expires_at_utc: Some(now - 3_600_000), ..base.clone() },
            "p_expires_at_utc is already in the past",
        ),
        (
            Call {
                available_at_utc: Some(now - 7_200_000),
                expires_at_utc: Some(now - 3_600_000),
                ..base.clone()
            },
            "p_expires_at_utc is already in the past",
        ),
    ];
    for (c, message) in &cases {
        sql(&mut conn, "START TRANSACTION").await;
        let outcome = call(&mut conn, c).await;
        sql(&mut conn, "COMMIT").await;
        expect_refusal(outcome, message, c);
    }
    // Outside a transaction the call is refused before it writes.
    let outcome = call(&mut conn, &base).await;
    expect_refusal(outcome, "call it inside a transaction (START TRANSACTION ... COMMIT)", &base);
    for table in ["agent_inbox", "inbox_head", "outbox_signal"] {
        assert_eq!(count(&h, table).await, 0, "a refused call wrote to {table}");
    }

    // The limits themselves are allowed.
    let at_limits = Call {
        tenant_id: Some("t".repeat(64)),
        recipient_id: Some("r".repeat(128)),
        deduplication_key: Some("~".repeat(200)),
        payload_json: Some(format!("\"{}\"", "x".repeat(262_142))),
        max_attempts: Some(1000),
        priority: Some(0),
        correlation: std::array::from_fn(|_| Some("c".repeat(128))),
        ..base.clone()
    };
    let ok = publish_committed(&mut conn, 1, &[at_limits]).await[0];
    assert_eq!((ok.inbox_seq, ok.deduplicated), (1, false));
    assert_eq!(count(&h, "agent_inbox").await, 1);
}

fn expect_refusal(outcome: Result<Published, sqlx::Error>, message: &str, c: &Call) {
    let err = match outcome {
        Ok(published) => panic!("{c:?} was accepted as {published:?}; expected {message:?}"),
        Err(err) => err,
    };
    let db = err.as_database_error().unwrap_or_else(|| panic!("{c:?}: not a database error: {err}"));
    assert_eq!(db.code().as_deref(), Some("45000"), "{c:?}: {}", db.message());
    let expected = format!("agent_inbox_publish: {message}");
    assert!(db.message().starts_with(&expected), "{c:?}: got {:?}, expected {expected:?}", db.message());
}
