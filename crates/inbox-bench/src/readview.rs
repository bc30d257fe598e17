//! `inbox-bench readview`: claims while an old read view holds back InnoDB's purge (issue 27).
//!
//! On MariaDB, in a database of its own: `--agents` inboxes seeded with `--seed-events`
//! acknowledged events in all (copies of one real event, made in SQL), then a steady load
//! through `inbox_store::SqlStore` — one publisher at `--rate` events/s spread over the
//! agents, each agent claiming 10 and acknowledging them (one in 500 left to its 5 s lease,
//! which the scavenger returns), and the scavenger every second — for `--before-seconds`; then
//! one connection holds `START TRANSACTION WITH CONSISTENT SNAPSHOT` (what `mariadb-dump
//! --single-transaction` does) for `--view-seconds`, then lets go, and the load runs
//! `--after-seconds` more. With `--no-view` nothing holds a view: the control run.
//!
//! Per 10 s window it prints claim p50/p99, the scavenger pass's longest time, what the claim
//! statement of agent 0 costs at the end of the window (MariaDB's `ANALYZE FORMAT=JSON`:
//! entries estimated, rows read, pages touched) and InnoDB's history list length. The target:
//! claim p99 while the view is held at most twice the p99 of the minute before it.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use inbox_core::{AckResult, EventBody, EventType, Recipient, RecipientId, RecipientKey, TenantId};
use inbox_store::{AckItem, Acknowledge, ClaimNext, ConnectOptions, Publish, SqlStore, StoreConfig};
use sqlx::{Connection as _, Executor as _, Row as _};
use tokio::sync::Mutex;
use tokio::task::JoinSet;

use crate::report::percentile;
use crate::{BenchError, mysql_db};

/// Events per claim, as in the trial.
const CLAIM_LIMIT: u32 = 10;
/// The agents' lease: short, so an abandoned event comes back within the run.
const LEASE_MS: u64 = 5_000;
/// One claimed event in this many is left to its lease instead of being acknowledged.
const ABANDON_ONE_IN: u64 = 500;
/// How long an agent whose claim came back empty waits before the next.
const IDLE_POLL: Duration = Duration::from_millis(50);
/// Length of one reported window.
const WINDOW: Duration = Duration::from_secs(10);
/// Rows per seeding statement.
const SEED_CHUNK: u64 = 50_000;
/// The target: claim p99 with the view held, against the minute before it.
const TARGET_RATIO: f64 = 2.0;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadViewArgs {
    pub seed_events: u64,
    pub agents: usize,
    pub rate: u64,
    pub before_seconds: u64,
    pub view_seconds: u64,
    pub after_seconds: u64,
    /// Hold no view: the control run.
    pub no_view: bool,
}

impl Default for ReadViewArgs {
    fn default() -> Self {
        Self {
            seed_events: 1_000_000,
            agents: 8,
            rate: 150,
            before_seconds: 90,
            view_seconds: 600,
            after_seconds: 30,
            no_view: false,
        }
    }
}

pub async fn main(args: ReadViewArgs) -> ExitCode {
    mysql_db::report_in_fresh_database(String::new(), move |db| {
        let url = db.url.clone();
        async move { run(&args, &url).await }
    })
    .await
}

/// One reported window.
#[derive(Debug, Default)]
struct Window {
    claims: Vec<Duration>,
    scavenge_max: Duration,
}

async fn run(args: &ReadViewArgs, url: &str) -> Result<String, BenchError> {
    let mut options = ConnectOptions::new(url);
    options.connections_max = (args.agents as u32 + 8).max(16);
    let store = SqlStore::connect(&options, StoreConfig::default()).await?;
    store.migrate().await?;
    let tenant = TenantId::new("readview")?;
    let inboxes: Vec<RecipientKey> = (0..args.agents)
        .map(|n| {
            Ok(RecipientKey {
                tenant_id: tenant.clone(),
                recipient: Recipient::agent(RecipientId::new(format!("agent-{n:03}"))?),
            })
        })
        .collect::<Result<_, BenchError>>()?;
    let mut raw = sqlx::mysql::MySqlConnection::connect(url).await?;
    let version: String = raw.fetch_one("SELECT VERSION() AS v").await?.try_get("v")?;
    seed(&store, &mut raw, &inboxes, args.seed_events).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let window = Arc::new(Mutex::new(Window::default()));
    let mut load = JoinSet::new();
    load.spawn(publisher(store.clone(), inboxes.clone(), args.rate, stop.clone()));
    for inbox in &inboxes {
        load.spawn(agent(store.clone(), inbox.clone(), window.clone(), stop.clone()));
    }
    load.spawn(scavenger(store.clone(), window.clone(), stop.clone()));

    let started = Instant::now();
    let view_from = Duration::from_secs(args.before_seconds);
    let view_until = view_from + Duration::from_secs(args.view_seconds);
    let end = view_until + Duration::from_secs(args.after_seconds);
    let mut holder: Option<sqlx::mysql::MySqlConnection> = None;
    let mut rows = Vec::new();
    let mut next = started + WINDOW;
    while started.elapsed() < end {
        tokio::time::sleep_until(next.into()).await;
        next += WINDOW;
        let at = started.elapsed();
        let held = holder.is_some();
        let finished = std::mem::take(&mut *window.lock().await);
        let plan = store.inbox().analyze_claim(&inboxes[0], CLAIM_LIMIT).await?;
        let history_length: i64 = raw
            .fetch_one("SELECT count AS n FROM information_schema.innodb_metrics WHERE name = 'trx_rseg_history_len'")
            .await?
            .try_get("n")?;
        let mut claims = finished.claims;
        claims.sort();
        let row = WindowRow {
            at_seconds: at.as_secs(),
            held,
            claims: claims.len(),
            p50: percentile(&claims, 50.0),
            p99: percentile(&claims, 99.0),
            scavenge_max: finished.scavenge_max,
            rows_estimate: plan.as_ref().map_or(0, |p| p.rows_estimate),
            rows_read: plan.as_ref().and_then(|p| p.rows_read).unwrap_or(0),
            pages: plan.as_ref().and_then(|p| p.pages_accessed).unwrap_or(0),
            history_length,
            latencies: claims,
        };
        eprintln!("{}", row.line());
        rows.push(row);
        if !args.no_view && holder.is_none() && at + WINDOW / 2 >= view_from && at < view_until {
            let mut conn = sqlx::mysql::MySqlConnection::connect(url).await?;
            conn.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT").await?;
            conn.fetch_one("SELECT COUNT(*) AS n FROM inbox_head").await?;
            eprintln!("read view opened");
            holder = Some(conn);
        } else if let Some(conn) = holder.take_if(|_| at + WINDOW / 2 >= view_until) {
            let mut conn = conn;
            conn.execute("COMMIT").await?;
            eprintln!("read view closed");
        }
    }
    stop.store(true, Ordering::Relaxed);
    while let Some(task) = load.join_next().await {
        task??;
    }
    store.close().await;
    Ok(render(args, &version, &rows))
}

/// One window as measured.
struct WindowRow {
    at_seconds: u64,
    held: bool,
    claims: usize,
    p50: Duration,
    p99: Duration,
    scavenge_max: Duration,
    rows_estimate: u64,
    rows_read: u64,
    pages: u64,
    history_length: i64,
    latencies: Vec<Duration>,
}

impl WindowRow {
    fn line(&self) -> String {
        format!(
            "{:>5} {:<5} {:>7} {:>9.2} {:>9.2} {:>10.1} {:>9} {:>6} {:>8} {:>9}",
            self.at_seconds,
            if self.held { "held" } else { "-" },
            self.claims,
            ms(self.p50),
            ms(self.p99),
            ms(self.scavenge_max),
            self.rows_estimate,
            self.rows_read,
            self.pages,
            self.history_length
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

fn render(args: &ReadViewArgs, version: &str, rows: &[WindowRow]) -> String {
    let mut out = format!(
        "inbox-bench readview: claims while a read view is held, {version}\n\
         {} acknowledged events seeded over {} agents; {} events/s published; claim {CLAIM_LIMIT} + ack, \
         one in {ABANDON_ONE_IN} left to its {} s lease; scavenger every 1 s; {}\n\
         per window: claims, claim p50/p99 (ms, SqlStore::claim_next), the scavenger pass's longest (ms), \
         and agent 0's claim statement under ANALYZE at the window's end (rows estimated, rows read, pages touched), \
         InnoDB history list length\n\n",
        args.seed_events,
        args.agents,
        args.rate,
        LEASE_MS / 1_000,
        if args.no_view {
            format!(
                "no read view (control), view period {}-{} s",
                args.before_seconds,
                args.before_seconds + args.view_seconds
            )
        } else {
            format!("read view held {}-{} s", args.before_seconds, args.before_seconds + args.view_seconds)
        }
    );
    out.push_str(&format!(
        "{:>5} {:<5} {:>7} {:>9} {:>9} {:>10} {:>9} {:>6} {:>8} {:>9}\n",
        "t s", "view", "claims", "p50 ms", "p99 ms", "scav ms", "est rows", "r_rows", "pages", "history"
    ));
    for row in rows {
        out.push_str(&row.line());
        out.push('\n');
    }
    let view_from = args.before_seconds;
    let view_until = args.before_seconds + args.view_seconds;
    // A window is reported at its end: the one ending at `t` covers t-10..t.
    let pooled = |keep: &dyn Fn(u64) -> bool| {
        let mut all: Vec<Duration> =
            rows.iter().filter(|r| keep(r.at_seconds)).flat_map(|r| r.latencies.iter().copied()).collect();
        all.sort();
        all
    };
    let minute_before = pooled(&|t| t > view_from.saturating_sub(60) + 5 && t <= view_from + 5);
    let during = pooled(&|t| t > view_from + 5 && t <= view_until + 5);
    let worst_window = rows
        .iter()
        .filter(|r| r.at_seconds > view_from + 5 && r.at_seconds <= view_until + 5)
        .map(|r| r.p99)
        .max()
        .unwrap_or_default();
    let before_p99 = percentile(&minute_before, 99.0);
    let during_p99 = percentile(&during, 99.0);
    let ratio = ms(during_p99) / ms(before_p99).max(f64::MIN_POSITIVE);
    out.push_str(&format!(
        "\nclaim p99: minute before the view {:.2} ms ({} claims), during it {:.2} ms ({} claims), \
         worst 10 s window {:.2} ms; during/before {:.2} (target <= {TARGET_RATIO}): {}\n",
        ms(before_p99),
        minute_before.len(),
        ms(during_p99),
        during.len(),
        ms(worst_window),
        ratio,
        if ratio <= TARGET_RATIO { "met" } else { "NOT met" }
    ));
    out
}

/// Makes `total` acknowledged events, spread over the inboxes: one real event per inbox,
/// published, claimed and acknowledged through the store, then copied in SQL (MariaDB's
/// sequence engine numbers the copies) under new seqs and event ids.
async fn seed(
    store: &SqlStore,
    raw: &mut sqlx::mysql::MySqlConnection,
    inboxes: &[RecipientKey],
    total: u64,
) -> Result<(), BenchError> {
    let per_inbox = total / inboxes.len() as u64;
    let event_type = EventType::new("bench.readview")?;
    for (n, inbox) in inboxes.iter().enumerate() {
        let body = EventBody::json("{\"seed\":true}".to_owned())?;
        let publish =
            Publish::new(inbox.tenant_id.clone(), vec![inbox.recipient.clone()], event_type.clone(), body);
        store.inbox().publish(&publish).await?;
        let claim = ClaimNext {
            inbox: inbox.clone(),
            session_id: None,
            limit: 1,
            lease_ms: None,
            order: Default::default(),
        };
        let claimed = store.inbox().claim_next(&claim).await?;
        let items = claimed
            .into_iter()
            .map(|c| AckItem::new(c.event.event_id, c.lease_token, AckResult::Completed))
            .collect();
        store.inbox().acknowledge(&Acknowledge { inbox: inbox.clone(), session_id: None, items }).await?;
        let started = Instant::now();
        let mut from = 1;
        while from <= per_inbox {
            let to = (from + SEED_CHUNK - 1).min(per_inbox);
            let sql = seed_statement(n, from, to);
            sqlx::query(&sql).bind(inbox.recipient.id.as_str()).execute(&mut *raw).await?;
            from = to + 1;
        }
        sqlx::query("UPDATE inbox_head SET head_seq = ? WHERE recipient_id = ?")
            .bind((per_inbox + 1) as i64)
            .bind(inbox.recipient.id.as_str())
            .execute(&mut *raw)
            .await?;
        eprintln!(
            "seeded {} with {per_inbox} acknowledged events in {:.0?}",
            inbox.recipient.id,
            started.elapsed()
        );
    }
    raw.execute("ANALYZE TABLE agent_inbox").await?;
    Ok(())
}

/// Copies of inbox seq 1 as seqs `from + 1 ..= to + 1` (binds: recipient id).
fn seed_statement(inbox_index: usize, from: u64, to: u64) -> String {
    const COLUMNS: [&str; 35] = [
        "tenant_id",
        "recipient_kind",
        "recipient_id",
        "inbox_seq",
        "event_id",
        "event_type",
        "priority",
        "availability_at_utc",
        "expires_at_utc",
        "deduplication_key",
        "ack_state",
        "delivery_attempts",
        "max_attempts",
        "visibility_lease_until_utc",
        "lease_token_hash",
        "lease_owner_session_id",
        "next_retry_at_utc",
        "dead_letter_state",
        "company_id",
        "workspace_id",
        "project_id",
        "meeting_room_id",
        "message_id",
        "routing_decision_id",
        "memory_update_id",
        "assignment_id",
        "payload_json",
        "payload_ref_type",
        "payload_ref_id",
        "created_at_utc",
        "acked_at_utc",
        "updated_at_utc",
        "terminal_at_utc",
        "last_error",
        "history_json",
    ];
    let values: Vec<String> = COLUMNS
        .iter()
        .map(|c| match *c {
            "inbox_seq" => "s.seq + 1".to_owned(),
            "event_id" => format!("UNHEX(CONCAT('{inbox_index:08x}', LPAD(HEX(s.seq), 24, '0')))"),
            other => format!("t.{other}"),
        })
        .collect();
    format!(
        "INSERT INTO agent_inbox ({}) SELECT {} FROM agent_inbox t JOIN seq_{from}_to_{to} s \
         WHERE t.recipient_id = ? AND t.inbox_seq = 1",
        COLUMNS.join(", "),
        values.join(", ")
    )
}

/// Publishes `rate` events a second, round robin over the inboxes, one publish each.
async fn publisher(
    store: SqlStore,
    inboxes: Vec<RecipientKey>,
    rate: u64,
    stop: Arc<AtomicBool>,
) -> Result<(), BenchError> {
    let event_type = EventType::new("bench.readview")?;
    let tick = Duration::from_millis(100);
    let per_tick = (rate / 10).max(1);
    let mut next = Instant::now();
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..per_tick {
            let inbox = &inboxes[n % inboxes.len()];
            n += 1;
            let body = EventBody::json(format!("{{\"n\":{n}}}"))?;
            let publish = Publish::new(
                inbox.tenant_id.clone(),
                vec![inbox.recipient.clone()],
                event_type.clone(),
                body,
            );
            store.inbox().publish(&publish).await?;
        }
        next += tick;
        tokio::time::sleep_until(next.into()).await;
    }
    Ok(())
}

/// Claims 10 and acknowledges them, again at once while there is work, after [`IDLE_POLL`]
/// when there is none; leaves one event in [`ABANDON_ONE_IN`] to its lease.
async fn agent(
    store: SqlStore,
    inbox: RecipientKey,
    window: Arc<Mutex<Window>>,
    stop: Arc<AtomicBool>,
) -> Result<(), BenchError> {
    let mut claimed_total = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let claim = ClaimNext {
            inbox: inbox.clone(),
            session_id: None,
            limit: CLAIM_LIMIT,
            lease_ms: Some(LEASE_MS),
            order: Default::default(),
        };
        let started = Instant::now();
        let claimed = store.inbox().claim_next(&claim).await?;
        window.lock().await.claims.push(started.elapsed());
        if claimed.is_empty() {
            tokio::time::sleep(IDLE_POLL).await;
            continue;
        }
        let mut items = Vec::new();
        for c in claimed {
            claimed_total += 1;
            if claimed_total % ABANDON_ONE_IN != 0 {
                items.push(AckItem::new(c.event.event_id, c.lease_token, AckResult::Completed));
            }
        }
        if !items.is_empty() {
            store.inbox().acknowledge(&Acknowledge { inbox: inbox.clone(), session_id: None, items }).await?;
        }
    }
    Ok(())
}

/// The scavenger, every second, as a node runs it.
async fn scavenger(
    store: SqlStore,
    window: Arc<Mutex<Window>>,
    stop: Arc<AtomicBool>,
) -> Result<(), BenchError> {
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        store.inbox().scavenge(500).await?;
        let took = started.elapsed();
        let mut w = window.lock().await;
        w.scavenge_max = w.scavenge_max.max(took);
        drop(w);
        next += Duration::from_secs(1);
        tokio::time::sleep_until(next.into()).await;
    }
    Ok(())
}
