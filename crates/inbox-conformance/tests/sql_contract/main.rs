//! The SQL contract: `agent_inbox_publish`, the stored procedure through which applications in
//! other languages publish inside their own MySQL/MariaDB transaction (docs/sql-contract.md).
//! Every case speaks plain SQL on a raw connection, as such an application would, and checks
//! the outcome through the Rust store, which must read, claim and acknowledge what the
//! procedure wrote exactly as if it had published it itself.

use inbox_conformance::Harness;
use inbox_core::{
    Clock, DeduplicationKey, EventBody, EventId, EventType, InboxSeq, Recipient, RecipientId, RecipientKey,
    TenantId, UnixMillis,
};
use inbox_store::{EventRecord, PollQuery, Publish};
use sqlx::{Connection, MySqlConnection, Row};

mod commit;
mod deduplication;
mod interleaving;
mod validation;

pub(crate) const CALL: &str =
    "CALL agent_inbox_publish(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, @e, @s, @d)";

/// The arguments of one CALL; `Default` plus a tenant, kind, recipient and event type is the
/// smallest valid call.
#[derive(Debug, Clone, Default)]
pub(crate) struct Call {
    pub(crate) tenant_id: Option<String>,
    pub(crate) recipient_kind: Option<String>,
    pub(crate) recipient_id: Option<String>,
    pub(crate) event_type: Option<String>,
    pub(crate) priority: Option<i64>,
    pub(crate) available_at_utc: Option<i64>,
    pub(crate) expires_at_utc: Option<i64>,
    pub(crate) deduplication_key: Option<String>,
    pub(crate) max_attempts: Option<i64>,
    pub(crate) payload_json: Option<String>,
    pub(crate) payload_ref_type: Option<String>,
    pub(crate) payload_ref_id: Option<String>,
    pub(crate) correlation: [Option<String>; 8],
}

/// The OUT parameters of a successful CALL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Published {
    pub(crate) event_id: EventId,
    pub(crate) inbox_seq: u64,
    pub(crate) deduplicated: bool,
}

pub(crate) fn call_to(recipient: &str) -> Call {
    Call {
        tenant_id: Some("t1".into()),
        recipient_kind: Some("agent".into()),
        recipient_id: Some(recipient.into()),
        event_type: Some("meeting_room.message_posted".into()),
        payload_json: Some(r#"{"text":"hello"}"#.into()),
        ..Call::default()
    }
}

pub(crate) async fn call(conn: &mut MySqlConnection, c: &Call) -> Result<Published, sqlx::Error> {
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

pub(crate) async fn sql(conn: &mut MySqlConnection, statement: &str) {
    sqlx::raw_sql(statement).execute(&mut *conn).await.unwrap_or_else(|e| panic!("{statement}: {e}"));
}

pub(crate) async fn host_connection(h: &Harness) -> MySqlConnection {
    let mut conn = MySqlConnection::connect(&h.url).await.expect("a host connection");
    sql(&mut conn, "CREATE TABLE IF NOT EXISTS room_message (id BIGINT PRIMARY KEY, body TEXT)").await;
    conn
}

/// Runs `calls` in one host transaction next to a domain row, then commits.
pub(crate) async fn publish_committed(
    conn: &mut MySqlConnection,
    domain_id: i64,
    calls: &[Call],
) -> Vec<Published> {
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

pub(crate) fn inbox(recipient: &str) -> RecipientKey {
    RecipientKey {
        tenant_id: TenantId::new("t1").unwrap(),
        recipient: Recipient::agent(RecipientId::new(recipient).unwrap()),
    }
}

pub(crate) fn rust_publish(recipients: &[&str], key: Option<&str>) -> Publish {
    let mut publish = Publish::new(
        TenantId::new("t1").unwrap(),
        recipients.iter().map(|r| Recipient::agent(RecipientId::new(*r).unwrap())).collect(),
        EventType::new("meeting_room.message_posted").unwrap(),
        EventBody::json(r#"{"from":"rust"}"#).unwrap(),
    );
    publish.deduplication_key = key.map(|k| DeduplicationKey::new(k).unwrap());
    publish
}

pub(crate) async fn poll_all(h: &Harness, recipient: &str) -> Vec<EventRecord> {
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

pub(crate) async fn count(h: &Harness, table: &str) -> i64 {
    h.scalar(&format!("SELECT COUNT(*) AS n FROM {table}"), &[]).await
}

pub(crate) async fn head_seq(h: &Harness, recipient: &str) -> u64 {
    h.store.inbox().head(&inbox(recipient)).await.unwrap().head_seq.get()
}

/// The outbox rows as (recipient_heads, n_recipients, status, attempt_count), oldest first.
pub(crate) async fn outbox_rows(conn: &mut MySqlConnection) -> Vec<(String, i64, String, i64)> {
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
pub(crate) fn text(row: &sqlx::mysql::MySqlRow, column: &str) -> String {
    row.try_get_unchecked(column).unwrap_or_else(|e| panic!("{column}: {e}"))
}

/// The store's clock is a manual one; bring it up to the database's, which stamped the event.
pub(crate) fn clock_reaches(h: &Harness, at: UnixMillis) {
    if h.clock.now() < at {
        h.clock.set(at);
    }
}
