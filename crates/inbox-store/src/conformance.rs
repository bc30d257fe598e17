//! The conformance suite: one exercise per promise of the store, run unchanged against every
//! backend (`tests/conformance.rs` runs each case on SQLite and on MariaDB, a fresh database per
//! case). A behaviour change starts by extending this file (or, for the meeting-room domain,
//! `conformance/rooms.rs`).
//!
//! Time is a [`ManualClock`]: cases move it instead of sleeping.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inbox_core::{
    AckResult, AckState, Clock, DeadLetterReason, DeduplicationKey, EventBody, EventId, EventType, InboxSeq,
    LeaseToken, ManualClock, PayloadRef, Priority, Recipient, RecipientId, RecipientKey, RefusalReason,
    SessionId, TenantId,
};

use crate::db::Arg;
use crate::{
    AckItem, Acknowledge, ClaimByIds, ClaimNext, ClaimedEvent, ConnectOptions, Delivery, Dialect, Heartbeat,
    HeartbeatItem, ParkedQuery, PollQuery, Publish, Refusal, Release, SqlStore, StoreConfig, StoreError,
};

mod batches;
pub mod proxy;
mod rooms;
mod sessions;
mod trust;

pub use batches::*;
pub use rooms::*;
pub use sessions::*;
pub use trust::*;

/// Which database a harness runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    MySql,
    /// A MariaDB Galera cluster ([`GALERA_URLS_ENV`]): the store reaches its members through a
    /// forwarder that sends each new connection to the next member, so one store's
    /// connections sit on different members; [`Harness::second_node`] is on the second member.
    Galera,
}

/// The environment variable naming the members of a Galera cluster for tests, comma-separated
/// (`mysql://root@127.0.0.1:P1/,mysql://root@127.0.0.1:P2/,...`, as `scripts/galera.sh start`
/// prints). The Galera cases run only when it is set.
pub const GALERA_URLS_ENV: &str = "AGENT_INBOX_TEST_GALERA_URLS";

/// The Galera members' URLs, if the environment names a cluster.
pub fn galera_urls() -> Option<Vec<String>> {
    let urls: Vec<String> = std::env::var(GALERA_URLS_ENV)
        .ok()?
        .split(',')
        .map(|url| url.trim().trim_end_matches('/').to_owned())
        .filter(|url| !url.is_empty())
        .collect();
    (!urls.is_empty()).then_some(urls)
}

/// `host:port` of a `mysql://user@host:port/...` URL.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    rest.split(['/', '?']).next().unwrap_or(rest).to_owned()
}

/// The environment variable naming the MariaDB/MySQL server tests use.
pub const MYSQL_URL_ENV: &str = "AGENT_INBOX_TEST_MYSQL_URL";
pub const MYSQL_URL_DEFAULT: &str = "mysql://root@127.0.0.1:3306/test";

/// A fresh, migrated database with a store on a manual clock. Dropping it drops the database
/// (MySQL) or deletes the file (SQLite).
#[derive(Debug)]
pub struct Harness {
    pub backend: Backend,
    pub store: SqlStore,
    pub clock: Arc<ManualClock>,
    /// The URL of this harness's own database, for a second store or a host connection.
    pub url: String,
    /// On Galera, the URL of this database on the second member.
    second_url: Option<String>,
    _forwarder: Option<proxy::Forwarder>,
    cleanup: Cleanup,
}

#[derive(Debug)]
enum Cleanup {
    DropDatabase { server_url: String, database: String },
    RemoveFile(std::path::PathBuf),
}

impl Harness {
    pub async fn new(backend: Backend) -> Harness {
        Self::with_config(backend, StoreConfig::default()).await
    }

    pub async fn with_config(backend: Backend, config: StoreConfig) -> Harness {
        let name = format!("agent_inbox_t_{}", hex::encode(crate::entropy::random_bytes::<8>()));
        let mut second_url = None;
        let mut forwarder = None;
        let (url, cleanup) = match backend {
            Backend::Galera => {
                let members =
                    galera_urls().unwrap_or_else(|| panic!("{GALERA_URLS_ENV} names no Galera members"));
                assert!(members.len() >= 2, "{GALERA_URLS_ENV} must name at least two members");
                let server_url = members[0].clone();
                create_database(&server_url, &name).await;
                // DDL replicates in total order, but a member applies it a moment later: wait
                // until every member has the database before spreading connections over them.
                for member in &members {
                    wait_for_database(&format!("{member}/{name}")).await;
                }
                let spread =
                    proxy::Forwarder::round_robin(members.iter().map(|m| host_port(m)).collect()).await;
                let user = members[0].split_once("://").map_or("", |(_, rest)| rest);
                let user = user.rsplit_once('@').map_or("root", |(user, _)| user);
                let url = format!("mysql://{user}@{}/{name}", spread.addr);
                second_url = Some(format!("{}/{name}", members[1]));
                forwarder = Some(spread);
                (url, Cleanup::DropDatabase { server_url, database: name })
            }
            Backend::MySql => {
                let server_url =
                    std::env::var(MYSQL_URL_ENV).unwrap_or_else(|_| MYSQL_URL_DEFAULT.to_owned());
                let server = SqlStore::connect(&ConnectOptions::new(&server_url), StoreConfig::default())
                    .await
                    .unwrap_or_else(|err| {
                        panic!("cannot reach MariaDB at {server_url} ({MYSQL_URL_ENV}): {err}")
                    });
                let mut pooled = server.pools().writer().await.expect("a server connection");
                pooled
                    .conn()
                    .execute_raw(&format!(
                        "CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
                    ))
                    .await
                    .expect("create a test database");
                drop(pooled);
                server.close().await;
                let base = server_url.rsplit_once('/').map_or(server_url.as_str(), |(base, _)| base);
                (
                    format!("{base}/{name}"),
                    Cleanup::DropDatabase { server_url: server_url.clone(), database: name },
                )
            }
            Backend::Sqlite => {
                let path = std::env::temp_dir().join(format!("{name}.db"));
                (format!("sqlite://{}", path.display()), Cleanup::RemoveFile(path))
            }
        };
        let clock = Arc::new(ManualClock::new(crate::system_now()));
        let store = SqlStore::connect_with_clock(&ConnectOptions::new(&url), config, clock.clone())
            .await
            .expect("connect to the test database");
        store.migrate().await.expect("migrate the test database");
        Harness { backend, store, clock, url, second_url, _forwarder: forwarder, cleanup }
    }

    /// A second store on the same database, as a second service node would have.
    pub async fn second_node(&self) -> SqlStore {
        SqlStore::connect_with_clock(
            &ConnectOptions::new(self.second_url.as_deref().unwrap_or(&self.url)),
            self.store.config().clone(),
            self.clock.clone(),
        )
        .await
        .expect("connect a second node")
    }

    /// Runs a statement beneath the store's API (a trigger that stands in for a refusal).
    pub async fn execute_raw(&self, sql: &str) {
        let mut pooled = self.store.pools().writer().await.expect("a connection");
        pooled.conn().execute_raw(sql).await.expect(sql);
    }

    /// This harness's database reached through `addr` (`host:port`, a forwarder in front of
    /// the same server), in clear text so a forwarder can read the SQL.
    pub fn url_through(&self, addr: std::net::SocketAddr) -> String {
        let (scheme_user, _) = self.url.rsplit_once('@').expect("a MySQL URL names its user");
        let database = self.url.rsplit_once('/').map_or("", |(_, db)| db);
        format!("{scheme_user}@{addr}/{database}?ssl-mode=disabled")
    }

    /// `host:port` of this harness's database server.
    pub fn server_addr(&self) -> String {
        host_port(&self.url)
    }

    /// One integer from a query, for checks that look beneath the store's API.
    pub async fn scalar(&self, sql: &str, args: &[&str]) -> i64 {
        let args: Vec<Arg> = args.iter().map(|a| Arg::Str(a)).collect();
        let mut pooled = self.store.pools().reader().await.expect("a connection");
        let row = pooled.conn().fetch_optional(sql, &args).await.expect(sql).expect("one row");
        row.i64("n").expect("an integer column named n")
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        match &self.cleanup {
            Cleanup::RemoveFile(path) => {
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
            }
            Cleanup::DropDatabase { server_url, database } => {
                let (server_url, database) = (server_url.clone(), database.clone());
                // Drop runs inside the test's runtime; a helper thread owns a runtime of its own.
                let dropped = std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
                    runtime.block_on(async {
                        let server =
                            SqlStore::connect(&ConnectOptions::new(&server_url), StoreConfig::default())
                                .await
                                .ok()?;
                        let mut pooled = server.pools().writer().await.ok()?;
                        pooled
                            .conn()
                            .execute_raw(&format!("DROP DATABASE IF EXISTS `{database}`"))
                            .await
                            .ok()?;
                        Some(())
                    })
                })
                .join();
                if !matches!(dropped, Ok(Some(()))) {
                    eprintln!("could not drop test database {}", self.url);
                }
            }
        }
    }
}

async fn create_database(server_url: &str, name: &str) {
    let server = SqlStore::connect(&ConnectOptions::new(server_url), StoreConfig::default())
        .await
        .unwrap_or_else(|err| panic!("cannot reach the database server at {server_url}: {err}"));
    let mut pooled = server.pools().writer().await.expect("a server connection");
    pooled
        .conn()
        .execute_raw(&format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
        .await
        .expect("create a test database");
    drop(pooled);
    server.close().await;
}

/// Waits (at most 30 s) until a connection to `url`'s database succeeds.
async fn wait_for_database(url: &str) {
    use sqlx::Connection as _;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match sqlx::MySqlConnection::connect(url).await {
            Ok(conn) => {
                let _ = conn.close().await;
                return;
            }
            Err(err) if std::time::Instant::now() >= deadline => {
                panic!("{url} never became reachable: {err}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

// ---- vocabulary for the cases ----

fn tenant(name: &str) -> TenantId {
    TenantId::new(name).unwrap()
}

fn agent(name: &str) -> Recipient {
    Recipient::agent(RecipientId::new(name).unwrap())
}

fn inbox_of(tenant_name: &str, agent_name: &str) -> RecipientKey {
    RecipientKey { tenant_id: tenant(tenant_name), recipient: agent(agent_name) }
}

fn event(tenant_name: &str, recipients: &[&str], body: &str) -> Publish {
    Publish::new(
        tenant(tenant_name),
        recipients.iter().map(|r| agent(r)).collect(),
        EventType::new("meeting_room.message_posted").unwrap(),
        EventBody::json(body).unwrap(),
    )
}

async fn publish_to(h: &Harness, tenant_name: &str, recipient: &str, body: &str) -> Delivery {
    h.store.inbox().publish(&event(tenant_name, &[recipient], body)).await.unwrap().deliveries.remove(0)
}

fn claim_next(inbox: &RecipientKey, limit: u32) -> ClaimNext {
    ClaimNext { inbox: inbox.clone(), session_id: None, limit, lease_ms: Some(60_000) }
}

fn ack_of(inbox: &RecipientKey, claimed: &ClaimedEvent) -> Acknowledge {
    ack_with(inbox, claimed.event.event_id, &claimed.lease_token, AckResult::Completed)
}

fn ack_with(inbox: &RecipientKey, event_id: EventId, token: &LeaseToken, result: AckResult) -> Acknowledge {
    Acknowledge {
        inbox: inbox.clone(),
        items: vec![AckItem { event_id, lease_token: token.clone(), result }],
    }
}

fn refusal<T: std::fmt::Debug>(outcome: &Result<T, crate::ItemRefusal>) -> Refusal {
    outcome.as_ref().expect_err("expected a refusal").reason
}

fn poll(inbox: &RecipientKey, after: u64, limit: u32) -> PollQuery {
    PollQuery { inbox: inbox.clone(), after_seq: InboxSeq(after), limit, claimable_only: false }
}

fn assert_invalid<T: std::fmt::Debug>(result: Result<T, StoreError>, field: &str) {
    match result {
        Err(StoreError::Invalid { field: f, .. }) => assert_eq!(f, field),
        other => panic!("expected an invalid {field}, got {other:?}"),
    }
}

// ---- publishing ----

/// Sequences start at 1 per recipient, follow commit order, and fan-out gives each recipient
/// its own row; one outbox row per publish.
pub async fn publish_assigns_per_recipient_sequences(h: &Harness) {
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

/// A publish inside the host's transaction commits or rolls back with the host's own rows.
pub async fn publish_in_host_transaction_is_atomic(h: &Harness) {
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

/// Publishing the same deduplication key again returns the existing events and adds only
/// the recipients that did not have it.
pub async fn deduplication_key_returns_the_existing_event(h: &Harness) {
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

/// A host transaction whose snapshot predates a concurrent publish of the same key still gets
/// the existing event back (MySQL's REPEATABLE READ snapshot must not hide it).
pub async fn deduplication_sees_commits_after_the_host_snapshot(h: &Harness) {
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

/// One publish in a host transaction, committed; `Err` says why either step failed.
async fn host_publish(
    h: &Harness,
    tx: &mut sqlx::Transaction<'_, sqlx::MySql>,
    publish: &Publish,
) -> Result<crate::PublishReceipt, String> {
    let receipt = h.store.inbox().publish_in(&mut **tx, publish).await.map_err(|e| e.to_string())?;
    sqlx::raw_sql("COMMIT").execute(&mut **tx).await.map_err(|e| e.to_string())?;
    Ok(receipt)
}

/// Bad publishes are refused with the field named, and leave nothing behind.
pub async fn publish_refusals_change_nothing(h: &Harness) {
    let limit = h.store.config().payload_bytes_limit;
    let big = format!("\"{}\"", "x".repeat(limit));
    match h.store.inbox().publish(&event("t1", &["alpha"], &big)).await {
        Err(StoreError::PayloadTooLarge { bytes, limit: l }) => {
            assert_eq!((bytes, l), (limit + 2, limit))
        }
        other => panic!("expected payload_too_large, got {other:?}"),
    }
    assert_invalid(h.store.inbox().publish(&event("t1", &[], "{}")).await, "recipients");
    let many: Vec<String> = (0..=h.store.config().fanout_recipients_max).map(|i| format!("a{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert_invalid(h.store.inbox().publish(&event("t1", &many, "{}")).await, "recipients");
    let now = h.clock.now();
    let mut window = event("t1", &["alpha"], "{}");
    window.available_at = Some(now.plus_ms(10_000));
    window.expires_at = Some(now.plus_ms(5_000));
    assert_invalid(h.store.inbox().publish(&window).await, "expires_at_utc");
    let mut stale = event("t1", &["alpha"], "{}");
    stale.expires_at = Some(now.minus_ms(1));
    assert_invalid(h.store.inbox().publish(&stale).await, "expires_at_utc");
    let mut attempts = event("t1", &["alpha"], "{}");
    attempts.max_attempts = Some(0);
    assert_invalid(h.store.inbox().publish(&attempts).await, "max_attempts");
    let mut reference = event("t1", &["alpha"], "{}");
    reference.body = EventBody::Reference(PayloadRef { kind: String::new(), id: "1".into() });
    assert_invalid(h.store.inbox().publish(&reference).await, "payload_ref.kind");
    assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox", &[]).await, 0);
    assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM inbox_head", &[]).await, 0);
    assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM outbox_signal", &[]).await, 0);
}

/// Every envelope field survives the round trip, and a payload reference is kept as one.
pub async fn envelope_round_trips(h: &Harness) {
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

// ---- reading ----

/// Polling pages through the inbox in sequence order without changing anything.
pub async fn poll_after_cursor_pages_in_order(h: &Harness) {
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
    assert_invalid(h.store.inbox().poll_after_cursor(&poll(&inbox, 0, 0)).await, "limit");
    assert_invalid(h.store.inbox().poll_after_cursor(&poll(&inbox, 0, 100_000)).await, "limit");

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

// ---- leases ----

/// Claims take the most urgent event first, then the oldest; tokens are shown once and only
/// their hash is stored.
pub async fn claim_next_orders_by_priority_then_sequence(h: &Harness) {
    let inbox = inbox_of("t1", "alpha");
    for (n, priority) in [Priority::Low, Priority::Normal, Priority::Urgent, Priority::Normal, Priority::High]
        .into_iter()
        .enumerate()
    {
        let mut p = event("t1", &["alpha"], &format!("{{\"n\":{n}}}"));
        p.priority = priority;
        h.store.inbox().publish(&p).await.unwrap();
    }
    let session = SessionId::new("sess_1").unwrap();
    let claim = ClaimNext { session_id: Some(session.clone()), ..claim_next(&inbox, 4) };
    let claimed = h.store.inbox().claim_next(&claim).await.unwrap();
    let seqs: Vec<u64> = claimed.iter().map(|c| c.event.inbox_seq.get()).collect();
    assert_eq!(seqs, [3, 5, 2, 4]);
    for c in &claimed {
        assert_eq!(c.event.state(), AckState::Claimed);
        assert_eq!(c.event.lifecycle.delivery_attempts, 1);
        assert_eq!(c.lease_until, h.clock.now().plus_ms(60_000));
        assert_eq!(c.event.lease_owner_session_id.as_ref(), Some(&session));
        assert!(matches!(c.event.body, EventBody::Json(_)), "a claim delivers the payload");
    }
    let tokens: HashSet<&str> = claimed.iter().map(|c| c.lease_token.as_str()).collect();
    assert_eq!(tokens.len(), 4, "every lease has its own token");
    let stored = h.store.inbox().event(&inbox, claimed[0].event.event_id).await.unwrap().unwrap();
    assert_eq!(
        stored.lifecycle.lease.unwrap().token_hash,
        claimed[0].lease_token.hash(),
        "only the hash is kept"
    );
    let rest = h.store.inbox().claim_next(&claim_next(&inbox, 10)).await.unwrap();
    assert_eq!(rest.iter().map(|c| c.event.inbox_seq.get()).collect::<Vec<_>>(), [1]);
    assert!(h.store.inbox().claim_next(&claim_next(&inbox, 10)).await.unwrap().is_empty());
    assert_invalid(
        h.store.inbox().claim_next(&ClaimNext { lease_ms: Some(500), ..claim_next(&inbox, 1) }).await,
        "lease_seconds",
    );
    assert_invalid(
        h.store.inbox().claim_next(&ClaimNext { lease_ms: Some(u64::MAX), ..claim_next(&inbox, 1) }).await,
        "lease_seconds",
    );
    assert_invalid(h.store.inbox().claim_next(&claim_next(&inbox, 0)).await, "limit");
}

/// Claiming named events gives each its own outcome.
pub async fn claim_by_ids_reports_each_event(h: &Harness) {
    let inbox = inbox_of("t1", "alpha");
    let a = publish_to(h, "t1", "alpha", "{}").await.event_id;
    let b = publish_to(h, "t1", "alpha", "{}").await.event_id;
    let c = publish_to(h, "t1", "alpha", "{}").await.event_id;
    let elsewhere = publish_to(h, "t1", "beta", "{}").await.event_id;
    let unknown = EventId::new_v7(h.clock.now(), [9; 10]);
    let first = h
        .store
        .inbox()
        .claim_by_ids(&ClaimByIds {
            inbox: inbox.clone(),
            session_id: None,
            event_ids: vec![b],
            lease_ms: None,
        })
        .await
        .unwrap();
    let held = first[0].as_ref().unwrap();
    h.store.inbox().acknowledge(&ack_of(&inbox, held)).await.unwrap();
    h.store
        .inbox()
        .claim_by_ids(&ClaimByIds {
            inbox: inbox.clone(),
            session_id: None,
            event_ids: vec![c],
            lease_ms: None,
        })
        .await
        .unwrap();

    let outcomes = h
        .store
        .inbox()
        .claim_by_ids(&ClaimByIds {
            inbox: inbox.clone(),
            session_id: None,
            event_ids: vec![a, b, c, unknown, elsewhere],
            lease_ms: Some(30_000),
        })
        .await
        .unwrap();
    let claimed = outcomes[0].as_ref().unwrap();
    assert_eq!(claimed.event.event_id, a);
    assert_eq!(claimed.lease_until, h.clock.now().plus_ms(30_000));
    assert_eq!(refusal(&outcomes[1]), Refusal::Refused(RefusalReason::NotClaimable("acked")));
    assert_eq!(refusal(&outcomes[2]), Refusal::Refused(RefusalReason::NotClaimable("claimed")));
    assert_eq!(refusal(&outcomes[3]), Refusal::NotFound);
    assert_eq!(refusal(&outcomes[4]), Refusal::NotFound, "another recipient's event is not in this inbox");
    assert_invalid(
        h.store
            .inbox()
            .claim_by_ids(&ClaimByIds {
                inbox: inbox.clone(),
                session_id: None,
                event_ids: vec![a, a],
                lease_ms: None,
            })
            .await,
        "event_ids",
    );
}

/// Acknowledging is idempotent for the lease holder, clears the payload but keeps the row,
/// and refuses everyone else precisely.
pub async fn acknowledge_is_idempotent_and_refuses_strangers(h: &Harness) {
    let inbox = inbox_of("t1", "alpha");
    publish_to(h, "t1", "alpha", r#"{"secret":"payload"}"#).await;
    publish_to(h, "t1", "alpha", "{}").await;
    let claimed = h.store.inbox().claim_next(&claim_next(&inbox, 2)).await.unwrap();
    let (first, second) = (&claimed[0], &claimed[1]);

    let foreign = LeaseToken::from_random([1; 16]);
    let outcome = h
        .store
        .inbox()
        .acknowledge(&ack_with(&inbox, first.event.event_id, &foreign, AckResult::Completed))
        .await
        .unwrap();
    assert_eq!(refusal(&outcome[0]), Refusal::Refused(RefusalReason::LeaseMismatch));
    let swapped = h
        .store
        .inbox()
        .acknowledge(&ack_with(&inbox, first.event.event_id, &second.lease_token, AckResult::Completed))
        .await
        .unwrap();
    assert_eq!(
        refusal(&swapped[0]),
        Refusal::Refused(RefusalReason::LeaseMismatch),
        "another event's token does not fit"
    );

    for _ in 0..3 {
        let outcome = h.store.inbox().acknowledge(&ack_of(&inbox, first)).await.unwrap();
        assert_eq!(outcome[0].as_ref().unwrap().state, AckState::Acked, "repeats succeed");
    }
    let stored = h.store.inbox().event(&inbox, first.event.event_id).await.unwrap().unwrap();
    assert_eq!(stored.state(), AckState::Acked);
    assert_eq!(stored.body, EventBody::Empty, "payload cleared");
    assert_eq!(stored.acked_at, Some(h.clock.now()));
    assert_eq!(stored.event_type, first.event.event_type, "metadata kept");
    let stranger = h
        .store
        .inbox()
        .acknowledge(&ack_with(&inbox, first.event.event_id, &foreign, AckResult::Completed))
        .await
        .unwrap();
    assert_eq!(refusal(&stranger[0]), Refusal::Refused(RefusalReason::AlreadyAcked));
    let unknown = EventId::new_v7(h.clock.now(), [3; 10]);
    let outcome = h
        .store
        .inbox()
        .acknowledge(&ack_with(&inbox, unknown, &foreign, AckResult::Completed))
        .await
        .unwrap();
    assert_eq!(refusal(&outcome[0]), Refusal::NotFound);

    // A batch: one good, one bad; the good one lands.
    let batch = Acknowledge {
        inbox: inbox.clone(),
        items: vec![
            AckItem {
                event_id: second.event.event_id,
                lease_token: second.lease_token.clone(),
                result: AckResult::Failed,
            },
            AckItem { event_id: unknown, lease_token: foreign.clone(), result: AckResult::Completed },
        ],
    };
    let outcome = h.store.inbox().acknowledge(&batch).await.unwrap();
    assert_eq!(outcome[0].as_ref().unwrap().state, AckState::DeadLetter, "a failed result parks the event");
    assert_eq!(refusal(&outcome[1]), Refusal::NotFound);
    let parked = h.store.inbox().event(&inbox, second.event.event_id).await.unwrap().unwrap();
    assert_eq!(parked.lifecycle.dead_letter_reason, DeadLetterReason::HandlerFailed);
    assert!(matches!(parked.body, EventBody::Json(_)), "a parked event keeps its payload for requeue");
    assert_invalid(
        h.store.inbox().acknowledge(&Acknowledge { inbox: inbox.clone(), items: vec![] }).await,
        "acks",
    );
}

/// Release returns the event, after `retry_after` if asked; the holder's repeat is harmless,
/// a stranger is refused, and the last attempt dead-letters.
pub async fn release_schedules_retries_and_dead_letters_at_the_limit(h: &Harness) {
    let inbox = inbox_of("t1", "alpha");
    let mut p = event("t1", &["alpha"], "{}");
    p.max_attempts = Some(2);
    let id = h.store.inbox().publish(&p).await.unwrap().deliveries[0].event_id;
    let claimed = h.store.inbox().claim_next(&claim_next(&inbox, 1)).await.unwrap().remove(0);
    let release = Release {
        inbox: inbox.clone(),
        event_id: id,
        lease_token: claimed.lease_token.clone(),
        retry_after_ms: 60_000,
        reason: Some("transient_dependency_failure".into()),
    };
    let stranger = Release { lease_token: LeaseToken::from_random([2; 16]), ..release.clone() };
    match h.store.inbox().release(&stranger).await {
        Err(StoreError::Event(item)) => {
            assert_eq!(item.reason, Refusal::Refused(RefusalReason::LeaseMismatch))
        }
        other => panic!("expected lease_mismatch, got {other:?}"),
    }
    let receipt = h.store.inbox().release(&release).await.unwrap();
    assert_eq!(receipt.state, AckState::Available);
    assert_eq!(receipt.next_retry_at, Some(h.clock.now().plus_ms(60_000)));
    assert_eq!(
        h.store.inbox().release(&release).await.unwrap().state,
        AckState::Available,
        "a repeated release is harmless"
    );
    let stored = h.store.inbox().event(&inbox, id).await.unwrap().unwrap();
    assert_eq!(stored.lifecycle.display_state(h.clock.now()), "retry_scheduled");
    assert_eq!(stored.last_error.as_deref(), Some("transient_dependency_failure"));
    assert!(
        h.store.inbox().claim_next(&claim_next(&inbox, 1)).await.unwrap().is_empty(),
        "not before retry_after"
    );
    let ack = h.store.inbox().acknowledge(&ack_of(&inbox, &claimed)).await.unwrap();
    assert_eq!(refusal(&ack[0]), Refusal::Refused(RefusalReason::LeaseExpired), "a released lease is over");

    h.clock.advance_ms(60_000);
    let second = h.store.inbox().claim_next(&claim_next(&inbox, 1)).await.unwrap().remove(0);
    assert_eq!(second.event.lifecycle.delivery_attempts, 2);
    let last = Release { lease_token: second.lease_token.clone(), retry_after_ms: 0, ..release.clone() };
    assert_eq!(h.store.inbox().release(&last).await.unwrap().state, AckState::DeadLetter, "no attempts left");
    let stored = h.store.inbox().event(&inbox, id).await.unwrap().unwrap();
    assert_eq!(stored.lifecycle.dead_letter_reason, DeadLetterReason::MaxAttemptsExceeded);
    assert_invalid(
        h.store
            .inbox()
            .release(&Release { retry_after_ms: crate::RETRY_AFTER_MS_MAX + 1, ..release.clone() })
            .await,
        "retry_after_seconds",
    );
    assert_invalid(
        h.store.inbox().release(&Release { reason: Some("x".repeat(201)), ..release }).await,
        "reason",
    );
}

/// Heartbeats extend live leases up to the maximum, never revive dead ones, and refuse
/// strangers.
pub async fn heartbeat_extends_only_live_leases(h: &Harness) {
    let inbox = inbox_of("t1", "alpha");
    publish_to(h, "t1", "alpha", "{}").await;
    publish_to(h, "t1", "alpha", "{}").await;
    let claimed = h.store.inbox().claim_next(&claim_next(&inbox, 2)).await.unwrap();
    let beat = |items: Vec<(usize, u64)>| Heartbeat {
        inbox: inbox.clone(),
        items: items
            .into_iter()
            .map(|(i, extend_ms)| HeartbeatItem {
                event_id: claimed[i].event.event_id,
                lease_token: claimed[i].lease_token.clone(),
                extend_ms,
            })
            .collect(),
    };
    h.clock.advance_ms(50_000);
    let now = h.clock.now();
    let receipts = h.store.inbox().heartbeat(&beat(vec![(0, 120_000), (1, 120_000)])).await.unwrap();
    assert!(receipts.iter().all(|r| r.as_ref().unwrap().lease_until == now.plus_ms(120_000)));
    // Different extensions, one shorter than the lease already held: the lease never shrinks.
    let receipts = h.store.inbox().heartbeat(&beat(vec![(0, 10_000), (1, 180_000)])).await.unwrap();
    assert_eq!(receipts[0].as_ref().unwrap().lease_until, now.plus_ms(120_000));
    assert_eq!(receipts[1].as_ref().unwrap().lease_until, now.plus_ms(180_000));
    let stranger = Heartbeat {
        inbox: inbox.clone(),
        items: vec![HeartbeatItem {
            event_id: claimed[0].event.event_id,
            lease_token: LeaseToken::from_random([5; 16]),
            extend_ms: 60_000,
        }],
    };
    assert_eq!(
        refusal(&h.store.inbox().heartbeat(&stranger).await.unwrap()[0]),
        Refusal::Refused(RefusalReason::LeaseMismatch)
    );
    h.clock.advance_ms(150_000);
    let receipts = h.store.inbox().heartbeat(&beat(vec![(0, 60_000), (1, 60_000)])).await.unwrap();
    assert_eq!(
        refusal(&receipts[0]),
        Refusal::Refused(RefusalReason::LeaseExpired),
        "a dead lease is not revived"
    );
    assert!(receipts[1].is_ok());
    assert_invalid(h.store.inbox().heartbeat(&beat(vec![(0, 500)])).await, "extend_by_seconds");
    assert_invalid(
        h.store.inbox().heartbeat(&beat(vec![(0, h.store.config().lease_ms_max + 1_000)])).await,
        "extend_by_seconds",
    );
}

// ---- the scavenger ----

/// Expired leases return with backoff or dead-letter, expired events expire, and the old
/// holder's late calls are refused precisely.
pub async fn scavenger_returns_expired_leases_and_expires_events(h: &Harness) {
    let inbox = inbox_of("t1", "alpha");
    let mut p = event("t1", &["alpha"], "{}");
    p.max_attempts = Some(2);
    let id = h.store.inbox().publish(&p).await.unwrap().deliveries[0].event_id;
    let mut short = event("t1", &["alpha"], "{}");
    short.expires_at = Some(h.clock.now().plus_ms(30_000));
    let short_id = h.store.inbox().publish(&short).await.unwrap().deliveries[0].event_id;
    let first = h
        .store
        .inbox()
        .claim_by_ids(&ClaimByIds {
            inbox: inbox.clone(),
            session_id: None,
            event_ids: vec![id],
            lease_ms: Some(10_000),
        })
        .await
        .unwrap()
        .remove(0)
        .unwrap();

    assert_eq!(
        h.store.inbox().scavenge(100).await.unwrap(),
        crate::ScavengeReport::default(),
        "nothing is due yet"
    );
    h.clock.advance_ms(10_000);
    let late_ack_before_scavenge = h.store.inbox().event(&inbox, id).await.unwrap().unwrap();
    assert_eq!(late_ack_before_scavenge.state(), AckState::Claimed);
    let report = h.store.inbox().scavenge(100).await.unwrap();
    assert_eq!(report.leases_returned, 1);
    let returned = h.store.inbox().event(&inbox, id).await.unwrap().unwrap();
    assert_eq!(returned.state(), AckState::Available);
    assert_eq!(returned.lifecycle.delivery_attempts, 1, "attempts are kept");
    let retry_at = returned.lifecycle.next_retry_at.expect("a backoff delay");
    assert!(retry_at > h.clock.now() && retry_at <= h.clock.now().plus_ms(h.store.config().backoff.base_ms));
    let late = h
        .store
        .inbox()
        .acknowledge(&ack_with(&inbox, id, &first.lease_token, AckResult::Completed))
        .await
        .unwrap();
    assert_eq!(refusal(&late[0]), Refusal::Refused(RefusalReason::LeaseExpired));

    h.clock.advance_ms(h.store.config().backoff.base_ms);
    let second = h
        .store
        .inbox()
        .claim_by_ids(&ClaimByIds {
            inbox: inbox.clone(),
            session_id: None,
            event_ids: vec![id],
            lease_ms: Some(10_000),
        })
        .await
        .unwrap()
        .remove(0)
        .unwrap();
    let stale = h
        .store
        .inbox()
        .acknowledge(&ack_with(&inbox, id, &first.lease_token, AckResult::Completed))
        .await
        .unwrap();
    assert_eq!(
        refusal(&stale[0]),
        Refusal::Refused(RefusalReason::LeaseMismatch),
        "someone else holds it now"
    );
    h.clock.advance_ms(20_000);
    let report = h.store.inbox().scavenge(100).await.unwrap();
    assert_eq!((report.dead_lettered, report.expired), (1, 1));
    assert_eq!(h.store.inbox().event(&inbox, id).await.unwrap().unwrap().state(), AckState::DeadLetter);
    assert_eq!(h.store.inbox().event(&inbox, short_id).await.unwrap().unwrap().state(), AckState::Expired);
    let late = h
        .store
        .inbox()
        .acknowledge(&ack_with(&inbox, id, &second.lease_token, AckResult::Completed))
        .await
        .unwrap();
    assert_eq!(refusal(&late[0]), Refusal::Refused(RefusalReason::LeaseExpired));
    assert_invalid(h.store.inbox().scavenge(0).await, "batch_limit");
}

/// Terminal events older than the retention window move to the archive as a prefix of the
/// sequence, and a cursor into the archived range is told to resync.
pub async fn retention_archives_a_prefix_and_requires_cursor_reset(h: &Harness) {
    let inbox = inbox_of("t1", "alpha");
    for _ in 0..5 {
        publish_to(h, "t1", "alpha", "{}").await;
    }
    // Ack 1, 2, 4 and 5; 3 stays available and holds back everything after it.
    let claimed = h.store.inbox().claim_next(&claim_next(&inbox, 5)).await.unwrap();
    for c in claimed.iter().filter(|c| c.event.inbox_seq != InboxSeq(3)) {
        h.store.inbox().acknowledge(&ack_of(&inbox, c)).await.unwrap();
    }
    let three = claimed.iter().find(|c| c.event.inbox_seq == InboxSeq(3)).unwrap();
    h.store
        .inbox()
        .release(&Release {
            inbox: inbox.clone(),
            event_id: three.event.event_id,
            lease_token: three.lease_token.clone(),
            retry_after_ms: 0,
            reason: None,
        })
        .await
        .unwrap();
    h.clock.advance_ms(h.store.config().retention_ms - 1);
    assert_eq!(h.store.inbox().scavenge(100).await.unwrap().archived, 0, "not old enough yet");
    h.clock.advance_ms(2);
    assert_eq!(h.store.inbox().scavenge(100).await.unwrap().archived, 2);
    assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox_archive", &[]).await, 2);
    assert_eq!(h.scalar("SELECT MIN(inbox_seq) AS n FROM agent_inbox", &[]).await, 3);
    let head = h.store.inbox().head(&inbox).await.unwrap();
    assert_eq!((head.head_seq, head.oldest_available_seq), (InboxSeq(5), InboxSeq(3)));
    match h.store.inbox().poll_after_cursor(&poll(&inbox, 1, 10)).await {
        Err(StoreError::CursorResetRequired { oldest_available_seq, head_seq, .. }) => {
            assert_eq!((oldest_available_seq, head_seq), (InboxSeq(3), InboxSeq(5)))
        }
        other => panic!("expected cursor_reset_required, got {other:?}"),
    }
    let page = h.store.inbox().poll_after_cursor(&poll(&inbox, 2, 10)).await.unwrap();
    assert_eq!(page.events.first().map(|e| e.inbox_seq), Some(InboxSeq(3)));

    // Once 3 is acknowledged and old, the rest follows; new publishes continue the sequence.
    let again = h.store.inbox().claim_next(&claim_next(&inbox, 1)).await.unwrap().remove(0);
    h.store.inbox().acknowledge(&ack_of(&inbox, &again)).await.unwrap();
    h.clock.advance_ms(h.store.config().retention_ms + 1);
    assert_eq!(h.store.inbox().scavenge(100).await.unwrap().archived, 3);
    assert_eq!(h.store.inbox().head(&inbox).await.unwrap().oldest_available_seq, InboxSeq(6));
    assert_eq!(publish_to(h, "t1", "alpha", "{}").await.inbox_seq, InboxSeq(6));
    assert!(h.store.inbox().poll_after_cursor(&poll(&inbox, 5, 10)).await.is_ok());
}

// ---- operators ----

/// Parked events can be listed, requeued with a fresh budget, quarantined and purged; live
/// events are refused by requeue and purge.
pub async fn operators_list_requeue_quarantine_and_purge(h: &Harness) {
    let inbox = inbox_of("t1", "alpha");
    let ids: Vec<EventId> = {
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(publish_to(h, "t1", "alpha", "{}").await.event_id);
        }
        ids
    };
    let claimed = h.store.inbox().claim_next(&claim_next(&inbox, 1)).await.unwrap().remove(0);
    h.store
        .inbox()
        .acknowledge(&ack_with(&inbox, claimed.event.event_id, &claimed.lease_token, AckResult::Failed))
        .await
        .unwrap();
    let quarantined = h.store.inbox().quarantine(&inbox, ids[1], "signature anomaly").await.unwrap();
    assert_eq!(quarantined.state(), AckState::Quarantined);
    assert_eq!(quarantined.last_error.as_deref(), Some("signature anomaly"));
    let refused = h
        .store
        .inbox()
        .claim_by_ids(&ClaimByIds {
            inbox: inbox.clone(),
            session_id: None,
            event_ids: vec![ids[1]],
            lease_ms: None,
        })
        .await
        .unwrap();
    assert_eq!(refusal(&refused[0]), Refusal::Refused(RefusalReason::NotClaimable("quarantined")));

    let all = ParkedQuery { tenant_id: tenant("t1"), recipient: None, state: None, limit: 10 };
    assert_eq!(h.store.inbox().list_parked(&all).await.unwrap().len(), 2);
    let dead = ParkedQuery { state: Some(AckState::DeadLetter), ..all.clone() };
    assert_eq!(h.store.inbox().list_parked(&dead).await.unwrap()[0].event_id, ids[0]);
    assert_invalid(
        h.store.inbox().list_parked(&ParkedQuery { state: Some(AckState::Acked), ..all.clone() }).await,
        "state",
    );
    assert!(
        h.store
            .inbox()
            .list_parked(&ParkedQuery { tenant_id: tenant("t2"), ..all.clone() })
            .await
            .unwrap()
            .is_empty()
    );

    let stats = h.store.inbox().inbox_stats(&tenant("t1"), 10).await.unwrap();
    assert_eq!(stats.len(), 1);
    assert_eq!(
        (stats[0].depth, stats[0].claimed, stats[0].parked, stats[0].head_seq),
        (1, 0, 2, InboxSeq(3))
    );
    assert!(stats[0].oldest_unacked_at.is_some());

    let outcomes = h.store.inbox().requeue(&inbox, &[ids[0], ids[2]]).await.unwrap();
    let requeued = outcomes[0].as_ref().unwrap();
    assert_eq!((requeued.state(), requeued.lifecycle.delivery_attempts), (AckState::Available, 1));
    assert_eq!(requeued.lifecycle.max_attempts, 1 + h.store.config().max_attempts_default);
    assert_eq!(refusal(&outcomes[1]), Refusal::Refused(RefusalReason::NotParked("available")));
    let again = h
        .store
        .inbox()
        .claim_by_ids(&ClaimByIds {
            inbox: inbox.clone(),
            session_id: None,
            event_ids: vec![ids[0]],
            lease_ms: None,
        })
        .await
        .unwrap();
    assert!(again[0].is_ok(), "a requeued event is claimable");

    let purged = h.store.inbox().purge(&inbox, &[ids[1], ids[2]]).await.unwrap();
    assert_eq!(purged[0].as_ref().unwrap(), &ids[1]);
    assert_eq!(refusal(&purged[1]), Refusal::Refused(RefusalReason::NotParked("available")));
    assert!(h.store.inbox().event(&inbox, ids[1]).await.unwrap().is_none());
    assert!(h.store.inbox().event(&inbox, ids[2]).await.unwrap().is_some());
}

/// Nothing crosses tenants or recipients: the same names under another tenant are another
/// inbox, and a valid token does not reach across.
pub async fn tenants_and_recipients_are_isolated(h: &Harness) {
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

/// Running migrations again changes nothing.
pub async fn migrations_are_idempotent(h: &Harness) {
    assert_eq!(h.store.migrate().await.unwrap(), 0);
    assert!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox_migrations", &[]).await >= 1);
    h.store.ping().await.unwrap();
}

// ---- concurrency ----

/// Sixteen workers share one recipient and drain a 10,000-event backlog while publishers
/// keep inserting. Every event is acknowledged exactly once, none is lost, none is held by two
/// leases at once, and no deadlock or lock timeout reaches a caller.
pub async fn sixteen_workers_drain_a_backlog_while_publishers_insert(h: &Harness) {
    const BACKLOG: usize = 10_000;
    const LIVE_PUBLISHERS: usize = 2;
    const LIVE_EACH: usize = 500;
    const WORKERS: usize = 16;
    let inbox = inbox_of("t1", "busy");
    let published = Arc::new(Mutex::new(HashSet::new()));

    // The backlog, from four concurrent publishers (they serialize on the head row).
    let mut seeders = Vec::new();
    for p in 0..4 {
        let (store, published) = (h.store.clone(), published.clone());
        seeders.push(tokio::spawn(async move {
            for n in 0..BACKLOG / 4 {
                let receipt = store
                    .inbox()
                    .publish(&event("t1", &["busy"], &format!("{{\"p\":{p},\"n\":{n}}}")))
                    .await
                    .expect("publish");
                published.lock().unwrap().insert(receipt.deliveries[0].event_id);
            }
        }));
    }
    for seeder in seeders {
        seeder.await.unwrap();
    }

    let holders: Arc<Mutex<HashMap<EventId, usize>>> = Arc::default();
    let acks: Arc<Mutex<HashMap<EventId, u32>>> = Arc::default();
    let publishing_done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for p in 0..LIVE_PUBLISHERS {
        let (store, published, done) = (h.store.clone(), published.clone(), publishing_done.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0..LIVE_EACH {
                let receipt = store
                    .inbox()
                    .publish(&event("t1", &["busy"], &format!("{{\"live\":{p},\"n\":{n}}}")))
                    .await
                    .expect("publish");
                published.lock().unwrap().insert(receipt.deliveries[0].event_id);
            }
            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }));
    }
    let total = BACKLOG + LIVE_PUBLISHERS * LIVE_EACH;
    for worker in 0..WORKERS {
        let (store, inbox, holders, acks, done) =
            (h.store.clone(), inbox.clone(), holders.clone(), acks.clone(), publishing_done.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let claimed = store.inbox().claim_next(&claim_next(&inbox, 10)).await.expect("claim");
                if claimed.is_empty() {
                    let finished = done.load(std::sync::atomic::Ordering::SeqCst) == LIVE_PUBLISHERS;
                    if finished && acks.lock().unwrap().len() >= total {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                }
                {
                    let mut holders = holders.lock().unwrap();
                    for c in &claimed {
                        if let Some(other) = holders.insert(c.event.event_id, worker) {
                            panic!("event {} held by workers {other} and {worker} at once", c.event.event_id);
                        }
                    }
                }
                let items = claimed
                    .iter()
                    .map(|c| AckItem {
                        event_id: c.event.event_id,
                        lease_token: c.lease_token.clone(),
                        result: AckResult::Completed,
                    })
                    .collect();
                // Release holdership before the ack commits could let a double claim hide, so
                // the holder entry is removed only after the ack succeeded.
                let outcomes = store
                    .inbox()
                    .acknowledge(&Acknowledge { inbox: inbox.clone(), items })
                    .await
                    .expect("ack");
                let mut holders = holders.lock().unwrap();
                let mut acks = acks.lock().unwrap();
                for (c, outcome) in claimed.iter().zip(outcomes) {
                    assert_eq!(outcome.expect("the lease holder's ack succeeds").state, AckState::Acked);
                    holders.remove(&c.event.event_id);
                    *acks.entry(c.event.event_id).or_default() += 1;
                }
            }
        }));
    }
    let all = futures_join(tasks);
    tokio::time::timeout(Duration::from_secs(600), all)
        .await
        .expect("the workers finished within ten minutes");

    let published = published.lock().unwrap().clone();
    let acks = acks.lock().unwrap().clone();
    assert_eq!(published.len(), total, "every publish returned a distinct event");
    assert_eq!(acks.len(), total, "every event was acknowledged");
    assert!(acks.values().all(|n| *n == 1), "no event was acknowledged under two leases");
    assert!(acks.keys().all(|id| published.contains(id)));
    let n = total.to_string();
    assert_eq!(
        h.scalar("SELECT COUNT(*) AS n FROM agent_inbox WHERE ack_state = 'acked'", &[]).await.to_string(),
        n
    );
    assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox WHERE delivery_attempts <> 1", &[]).await, 0);
    assert_eq!(h.scalar("SELECT MAX(inbox_seq) AS n FROM agent_inbox", &[]).await.to_string(), n, "no gaps");
    assert_eq!(h.scalar("SELECT COUNT(DISTINCT inbox_seq) AS n FROM agent_inbox", &[]).await.to_string(), n);
    assert_eq!(h.store.inbox().head(&inbox).await.unwrap().head_seq, InboxSeq(total as u64));
}

/// Fan-outs to overlapping recipient sets, listed in different orders, run concurrently
/// without a deadlock reaching a caller, and every recipient's sequence stays gap-free.
pub async fn concurrent_fan_outs_never_deadlock(h: &Harness) {
    const TASKS: usize = 8;
    const EACH: usize = 40;
    let names = ["r0", "r1", "r2", "r3", "r4", "r5"];
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = h.store.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..EACH {
                // A different subset and order each time: canonical locking must absorb it.
                let mut chosen: Vec<&str> = names.to_vec();
                chosen.rotate_left((t + n) % names.len());
                chosen.truncate(2 + (t + n) % 4);
                if (t + n) % 2 == 0 {
                    chosen.reverse();
                }
                store.inbox().publish(&event("t1", &chosen, "{}")).await.expect("fan-out publish");
            }
        }));
    }
    futures_join(tasks).await;
    for name in names {
        let rows = h.scalar("SELECT COUNT(*) AS n FROM agent_inbox WHERE recipient_id = ?", &[name]).await;
        let max =
            h.scalar("SELECT MAX(inbox_seq) AS n FROM agent_inbox WHERE recipient_id = ?", &[name]).await;
        assert_eq!(rows, max, "{name}: sequence has gaps or repeats");
        assert_eq!(h.store.inbox().head(&inbox_of("t1", name)).await.unwrap().head_seq, InboxSeq(max as u64));
    }
}

/// Two scavengers (two nodes) on the same expired leases return each event exactly once.
pub async fn scavengers_on_two_nodes_do_each_event_once(h: &Harness) {
    let inbox = inbox_of("t1", "alpha");
    for _ in 0..60 {
        publish_to(h, "t1", "alpha", "{}").await;
    }
    let mut claimed = 0;
    while claimed < 60 {
        claimed += h
            .store
            .inbox()
            .claim_next(&ClaimNext { lease_ms: Some(5_000), ..claim_next(&inbox, 20) })
            .await
            .unwrap()
            .len();
    }
    h.clock.advance_ms(5_000);
    let second = h.second_node().await;
    let (a, b) = tokio::join!(
        async {
            let mut n = 0;
            for _ in 0..10 {
                n += h.store.inbox().scavenge(7).await.unwrap().leases_returned;
            }
            n
        },
        async {
            let mut n = 0;
            for _ in 0..10 {
                n += second.inbox().scavenge(7).await.unwrap().leases_returned;
            }
            n
        }
    );
    assert_eq!(a + b, 60, "every lease returned once across both nodes ({a} + {b})");
    assert_eq!(
        h.scalar(
            "SELECT COUNT(*) AS n FROM agent_inbox WHERE ack_state = 'available' AND delivery_attempts = 1",
            &[]
        )
        .await,
        60
    );
}

// ---- real-time hints ----

/// A signal row becomes readable only when its publish commits, a rolled-back publish leaves
/// none, a skipped id can be asked for again, and old rows are deleted.
pub async fn signals_appear_only_after_commit(h: &Harness) {
    let start = h.store.signals().start_id(h.store.now().minus_ms(10_000)).await.unwrap();
    assert_eq!(start, 0, "an empty table starts at 0");
    let publish = event("t1", &["alpha", "beta"], "{}");
    let read_all = || async { h.store.signals().after(0, 100).await.unwrap() };
    match h.store.dialect() {
        Dialect::MySql => {
            use sqlx::Connection as _;
            let mut conn = sqlx::MySqlConnection::connect(&h.url).await.unwrap();
            for commit in [false, true] {
                let mut tx = conn.begin().await.unwrap();
                h.store.inbox().publish_in(&mut *tx, &publish).await.unwrap();
                assert!(read_all().await.is_empty(), "nothing is readable before commit");
                if commit { tx.commit().await.unwrap() } else { tx.rollback().await.unwrap() }
            }
        }
        Dialect::Sqlite => {
            use sqlx::Connection as _;
            let mut conn = sqlx::SqliteConnection::connect(&h.url).await.unwrap();
            for commit in [false, true] {
                let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.unwrap();
                h.store.inbox().publish_in(&mut *tx, &publish).await.unwrap();
                assert!(read_all().await.is_empty(), "nothing is readable before commit");
                if commit { tx.commit().await.unwrap() } else { tx.rollback().await.unwrap() }
            }
        }
    }
    let signals = read_all().await;
    assert_eq!(signals.len(), 1, "only the committed publish signals: {signals:?}");
    let signal = &signals[0];
    assert_eq!(signal.tenant_id, tenant("t1"));
    assert_eq!(signal.heads, vec![(agent("alpha"), InboxSeq(1)), (agent("beta"), InboxSeq(1))]);
    publish_to(h, "t1", "alpha", "{}").await;
    let after = h.store.signals().after(signal.outbox_id, 100).await.unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].heads, vec![(agent("alpha"), InboxSeq(2))]);
    let again = h.store.signals().by_ids(&[after[0].outbox_id, after[0].outbox_id + 1_000]).await.unwrap();
    assert_eq!(again, after, "ids that exist are returned, others are not");
    assert_eq!(
        h.store.signals().start_id(h.store.now().minus_ms(10_000)).await.unwrap(),
        signal.outbox_id - 1,
        "a starting notifier re-reads recent signals"
    );
    h.clock.advance_ms(60_000);
    assert_eq!(
        h.store.signals().start_id(h.store.now().minus_ms(10_000)).await.unwrap(),
        after[0].outbox_id,
        "and starts after old ones"
    );
    assert_eq!(h.store.signals().delete_before(h.store.now(), 1).await.unwrap(), 1, "bounded");
    assert_eq!(h.store.signals().delete_before(h.store.now(), 100).await.unwrap(), 1);
    assert!(read_all().await.is_empty());
}

/// A stream ticket is redeemed once, on any node; an expired one never; a cookie credential
/// until it expires.
pub async fn stream_tickets_redeem_once_on_any_node(h: &Harness) {
    use crate::{StreamCredential, StreamGrant};
    let grant = StreamGrant {
        tenant_id: tenant("t1"),
        subject: "alpha".into(),
        kind: "agent".into(),
        scope: "stream.subscribe inbox.claim".into(),
        session_id: Some(SessionId::new("sess_1").unwrap()),
    };
    let ticket = [7u8; 32];
    h.store
        .sessions()
        .insert_stream_credential(&ticket, StreamCredential::Ticket, &grant, 60_000)
        .await
        .unwrap();
    let second = h.second_node().await;
    let (a, b) = tokio::join!(
        h.store.sessions().redeem_stream_credential(&ticket, StreamCredential::Ticket),
        second.sessions().redeem_stream_credential(&ticket, StreamCredential::Ticket)
    );
    let winners: Vec<_> = [a.unwrap(), b.unwrap()].into_iter().flatten().collect();
    assert_eq!(winners, vec![grant.clone()], "exactly one node redeems it");
    assert_eq!(
        h.store.sessions().redeem_stream_credential(&ticket, StreamCredential::Cookie).await.unwrap(),
        None
    );

    let late = [8u8; 32];
    h.store
        .sessions()
        .insert_stream_credential(&late, StreamCredential::Ticket, &grant, 60_000)
        .await
        .unwrap();
    let cookie = [9u8; 32];
    h.store
        .sessions()
        .insert_stream_credential(&cookie, StreamCredential::Cookie, &grant, 120_000)
        .await
        .unwrap();
    for _ in 0..2 {
        assert_eq!(
            h.store
                .sessions()
                .redeem_stream_credential(&cookie, StreamCredential::Cookie)
                .await
                .unwrap()
                .as_ref(),
            Some(&grant),
            "a cookie is reusable"
        );
    }
    assert_eq!(
        h.store.sessions().redeem_stream_credential(&cookie, StreamCredential::Ticket).await.unwrap(),
        None
    );
    h.clock.advance_ms(60_001);
    assert_eq!(
        h.store.sessions().redeem_stream_credential(&late, StreamCredential::Ticket).await.unwrap(),
        None,
        "expired"
    );
    assert_eq!(h.store.sessions().delete_expired_stream_credentials(h.store.now()).await.unwrap(), 2);
    assert!(
        h.store
            .sessions()
            .redeem_stream_credential(&cookie, StreamCredential::Cookie)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        h.store
            .sessions()
            .insert_stream_credential(&[1u8; 32], StreamCredential::Ticket, &grant, 0)
            .await
            .is_err(),
        "a credential must live a while"
    );
}

/// A touched session stays active and records its transport and progress; a silent one is
/// swept as gone and a touch revives it; a stranger's touch finds nothing.
pub async fn sessions_are_touched_and_swept(h: &Harness) {
    use crate::{SessionRecord, SessionTouch};
    let session_id = SessionId::new("sess_touch").unwrap();
    let (t1, alpha) = (tenant("t1"), RecipientId::new("alpha").unwrap());
    h.store
        .sessions()
        .open(&SessionRecord {
            session_id: session_id.clone(),
            tenant_id: t1.clone(),
            agent_id: alpha.clone(),
            device_id: Some("laptop".into()),
            transport: "sse".into(),
            last_seen_seq: InboxSeq(4),
            auth_subject: "alpha".into(),
        })
        .await
        .unwrap();
    let touch = SessionTouch {
        session_id: &session_id,
        tenant_id: &t1,
        agent_id: &alpha,
        transport: Some("websocket"),
        last_seen_seq: Some(InboxSeq(2)),
    };
    h.clock.advance_ms(1_000);
    assert!(h.store.sessions().touch(&touch).await.unwrap());
    let status = || {
        h.scalar(
            "SELECT (CASE WHEN status = 'active' THEN 1 ELSE 0 END) * 1000 + last_seen_seq AS n \
             FROM agent_session WHERE session_id = 'sess_touch'",
            &[],
        )
    };
    assert_eq!(status().await, 1_004, "active, and a lower last_seen_seq does not move it back");
    assert_eq!(
        h.scalar("SELECT COUNT(*) AS n FROM agent_session WHERE transport = 'websocket'", &[]).await,
        1
    );
    h.clock.advance_ms(100_000);
    assert_eq!(h.store.sessions().mark_silent_gone(h.store.now().minus_ms(90_000)).await.unwrap(), 1);
    assert_eq!(status().await, 4, "gone");
    assert!(
        h.store
            .sessions()
            .touch(&SessionTouch { last_seen_seq: Some(InboxSeq(9)), transport: None, ..touch.clone() })
            .await
            .unwrap()
    );
    assert_eq!(status().await, 1_009, "revived, with progress");
    assert!(
        h.store.sessions().touch(&touch).await.unwrap(),
        "a touch in the same millisecond still finds it"
    );
    let beta = RecipientId::new("beta").unwrap();
    assert!(!h.store.sessions().touch(&SessionTouch { agent_id: &beta, ..touch.clone() }).await.unwrap());
    assert!(
        h.store.sessions().touch(&SessionTouch { transport: Some("Bad Transport"), ..touch }).await.is_err()
    );
}

async fn futures_join(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for task in tasks {
        if let Err(err) = task.await {
            std::panic::resume_unwind(err.into_panic());
        }
    }
}

// ---- the engine, and two nodes on (possibly) two members ----

/// The engine check passes on every supported backend and names what it found; on Galera the
/// store reads with `wsrep_sync_wait`.
pub async fn engine_check_proves_skip_locked_and_read_committed(h: &Harness) {
    let report = h.store.check_engine().await.expect("a supported engine passes the check");
    assert!(report.locks_checked, "two probe connections reached one server");
    let engine = h.store.engine();
    match h.backend {
        Backend::Sqlite => assert_eq!(engine.product, crate::Product::Sqlite),
        Backend::MySql => assert!(!engine.galera, "{engine}"),
        Backend::Galera => {
            assert!(engine.galera, "{engine} is detected as a Galera member");
            assert!(engine.to_string().contains("Galera"), "{engine}");
            let sync_wait = h.scalar("SELECT CAST(@@wsrep_sync_wait AS SIGNED) AS n", &[]).await;
            assert_eq!(sync_wait, i64::from(crate::engine::GALERA_SYNC_WAIT));
        }
    }
    // Nothing is left behind in the probe table.
    if h.store.dialect() == Dialect::MySql {
        assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox_engine_probe", &[]).await, 0);
    }
}

/// Claimers on two nodes (on Galera, two members, where row locks do not reach across) never
/// hold one event at once, every acknowledgement made right after a claim finds its lease, and
/// every event is acknowledged exactly once. On Galera, the loser of two claims of one row fails
/// certification at COMMIT and is retried inside the store; no lease it returned is unreal.
pub async fn claimers_on_two_nodes_never_share_an_event(h: &Harness) {
    const EVENTS: usize = 200;
    const WORKERS_PER_NODE: usize = 4;
    let inbox = inbox_of("t1", "shared");
    for n in 0..EVENTS {
        h.store.inbox().publish(&event("t1", &["shared"], &format!("{{\"n\":{n}}}"))).await.unwrap();
    }
    let second = h.second_node().await;
    let holders: Arc<Mutex<HashMap<EventId, usize>>> = Arc::default();
    let acked: Arc<Mutex<HashMap<EventId, u32>>> = Arc::default();
    let mut tasks = Vec::new();
    for worker in 0..2 * WORKERS_PER_NODE {
        let store = if worker % 2 == 0 { h.store.clone() } else { second.clone() };
        let (inbox, holders, acked) = (inbox.clone(), holders.clone(), acked.clone());
        tasks.push(tokio::spawn(async move {
            let mut idle_rounds = 0;
            while idle_rounds < 3 {
                let claimed = store.inbox().claim_next(&claim_next(&inbox, 5)).await.expect("claim");
                if claimed.is_empty() {
                    idle_rounds += 1;
                    continue;
                }
                idle_rounds = 0;
                for c in &claimed {
                    if let Some(other) = holders.lock().unwrap().insert(c.event.event_id, worker) {
                        panic!("event {} held by workers {other} and {worker} at once", c.event.event_id);
                    }
                }
                let items: Vec<AckItem> = claimed
                    .iter()
                    .map(|c| AckItem {
                        event_id: c.event.event_id,
                        lease_token: c.lease_token.clone(),
                        result: AckResult::Completed,
                    })
                    .collect();
                let outcomes = store
                    .inbox()
                    .acknowledge(&Acknowledge { inbox: inbox.clone(), items })
                    .await
                    .expect("acknowledge");
                for (outcome, c) in outcomes.iter().zip(&claimed) {
                    outcome.as_ref().unwrap_or_else(|e| panic!("the lease just granted was refused: {e}"));
                    holders.lock().unwrap().remove(&c.event.event_id);
                    *acked.lock().unwrap().entry(c.event.event_id).or_default() += 1;
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let acked = acked.lock().unwrap();
    assert_eq!(acked.len(), EVENTS, "every event acknowledged");
    assert!(acked.values().all(|n| *n == 1), "each event acknowledged once");
    eprintln!(
        "contention retries: {} on the first node, {} on the second",
        h.store.contention_retries(),
        second.contention_retries()
    );
}

/// Publishers on two nodes (on Galera, two members) fanning out to the same two inboxes: each
/// inbox's sequence is dense, and both inboxes list the publishes in one order (commit order).
pub async fn publishers_on_two_nodes_keep_sequences_dense_and_in_one_order(h: &Harness) {
    const PER_PUBLISHER: usize = 40;
    let second = h.second_node().await;
    let mut tasks = Vec::new();
    for publisher in 0..4 {
        let store = if publisher % 2 == 0 { h.store.clone() } else { second.clone() };
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for n in 0..PER_PUBLISHER {
                let receipt = store
                    .inbox()
                    .publish(&event("t1", &["left", "right"], &format!("{{\"p\":{publisher},\"n\":{n}}}")))
                    .await
                    .expect("publish");
                let seq_of = |name: &str| {
                    receipt.deliveries.iter().find(|d| d.recipient == agent(name)).unwrap().inbox_seq.get()
                };
                seqs.push((seq_of("left"), seq_of("right")));
            }
            seqs
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let seqs = task.await.unwrap();
        assert!(seqs.windows(2).all(|w| w[0].0 < w[1].0), "one publisher's events keep its order");
        all.extend(seqs);
    }
    all.sort();
    let total = 4 * PER_PUBLISHER as u64;
    assert_eq!(all.iter().map(|s| s.0).collect::<Vec<_>>(), (1..=total).collect::<Vec<_>>(), "left is dense");
    assert_eq!(
        all.iter().map(|s| s.1).collect::<Vec<_>>(),
        (1..=total).collect::<Vec<_>>(),
        "right is dense and in the same order as left"
    );
    // A read right after, on the other node, sees every commit.
    let page = second.inbox().poll_after_cursor(&poll(&inbox_of("t1", "right"), 0, 500)).await.unwrap();
    assert_eq!(page.events.len() as u64, total);
}

// ---- cold storage ----

/// Publishes `n` events to each of `recipients` (tenant `t1`), acknowledges them all, moves the
/// clock past retention and lets the scavenger archive them; returns how many rows the archive
/// holds.
pub async fn archive_acknowledged(h: &Harness, recipients: &[&str], n: usize) -> i64 {
    for name in recipients {
        let inbox = inbox_of("t1", name);
        for i in 0..n {
            publish_to(h, "t1", name, &format!("{{\"n\":{i}}}")).await;
        }
        let claimed = h.store.inbox().claim_next(&claim_next(&inbox, n as u32)).await.unwrap();
        for c in &claimed {
            h.store.inbox().acknowledge(&ack_of(&inbox, c)).await.unwrap();
        }
    }
    h.clock.advance_ms(h.store.config().retention_ms + 1);
    while h.store.inbox().scavenge(500).await.unwrap().archived > 0 {}
    h.scalar("SELECT COUNT(*) AS n FROM agent_inbox_archive", &[]).await
}

/// An export pages through the rows archived before a time in key order, each with all its
/// metadata; deleting the keys it read removes exactly those rows, and rows archived later stay.
pub async fn cold_storage_pages_in_key_order_and_deletes_exactly_the_keys_given(h: &Harness) {
    assert_eq!(archive_acknowledged(h, &["alpha", "beta"], 7).await, 14);
    let before = h.store.now().plus_ms(1);
    h.clock.advance_ms(10);
    // Archived after `before`: must survive the export.
    assert_eq!(archive_acknowledged(h, &["gamma"], 3).await, 17);

    let mut rows = Vec::new();
    let mut after = None;
    loop {
        let page = h.store.inbox().archived_page(before, after.as_ref(), 4).await.unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.key.clone());
        rows.extend(page);
    }
    assert_eq!(rows.len(), 14);
    let keys: Vec<crate::ArchiveKey> = rows.iter().map(|r| r.key.clone()).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "pages come in key order without repeats");
    sorted.dedup();
    assert_eq!(sorted.len(), 14);
    let first = &rows[0].columns;
    assert_eq!(first["recipient_id"], "alpha");
    assert_eq!(first["ack_state"], "acked");
    assert_eq!(first["event_id"].as_str().map(str::len), Some(32), "binary ids as hex");
    assert!(first.contains_key("archived_at_utc") && first.contains_key("payload_json"));
    assert_eq!(crate::archive_key_of_line(first).as_ref(), Some(&keys[0]));

    // Deleting half the keys removes exactly those; a key archived after `before` is kept.
    let (gone, kept) = keys.split_at(5);
    assert_eq!(h.store.inbox().delete_archived(before, gone).await.unwrap(), 5);
    assert_eq!(
        h.store.inbox().delete_archived(before, gone).await.unwrap(),
        0,
        "deleting again changes nothing"
    );
    assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox_archive", &[]).await, 12);
    let left = h.store.inbox().archived_page(before, None, 100).await.unwrap();
    assert_eq!(left.iter().map(|r| r.key.clone()).collect::<Vec<_>>(), kept);
    let late = h.store.inbox().archived_page(h.store.now().plus_ms(1), None, 100).await.unwrap();
    let late_key = late.iter().find(|r| r.key.recipient_id == "gamma").unwrap().key.clone();
    assert_eq!(
        h.store.inbox().delete_archived(before, &[late_key]).await.unwrap(),
        0,
        "archived after the cut"
    );
}

/// The scavenger prunes archived rows once they are older than `archive_retention`, at most
/// one batch per pass, and never younger ones.
pub async fn scavenger_prunes_the_archive_after_archive_retention(h: &Harness) {
    assert_eq!(archive_acknowledged(h, &["alpha"], 6).await, 6);
    h.clock.advance_ms(h.store.config().archive_retention_ms - 1);
    assert_eq!(h.store.inbox().scavenge(4).await.unwrap().pruned, 0, "not old enough yet");
    h.clock.advance_ms(2);
    assert_eq!(h.store.inbox().scavenge(4).await.unwrap().pruned, 4, "one bounded batch");
    assert_eq!(h.store.inbox().scavenge(4).await.unwrap().pruned, 2);
    assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox_archive", &[]).await, 0);
}
