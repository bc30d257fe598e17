//! The raw-SQL baseline: the statements inbox-store runs for a publish, a claim and an
//! acknowledgement, copied from its `publish.rs`, `leases.rs` and `dialect.rs` and run with
//! plain sqlx, binding the same values with the same types and decoding only what the next
//! statement needs. Also the backlog seeder both sides share.
//!
//! SQL otherwise lives only in inbox-store; this copy is the one exception, because a baseline
//! is only worth comparing against while it runs exactly the store's statements. When a store
//! statement changes, change its copy here.

use std::time::Duration;

use inbox_core::{EventId, LeaseToken, LeaseTokenHash, UnixMillis};
use inbox_store::system_now;
use sqlx::Row as _;
use sqlx::mysql::{MySql, MySqlArguments, MySqlPool};
use sqlx::query::Query;

use crate::BenchError;

/// Every benchmark recipient is an agent.
pub const RECIPIENT_KIND: &str = "agent";
pub const EVENT_TYPE: &str = "bench.tick";
/// A small inline body, so the insert, the claim's read and the ack's clearing all touch one.
pub const PAYLOAD_JSON: &str = r#"{"bench":"tick","n":1}"#;
/// `Priority::Normal.rank()`, what `Publish::new` uses.
const PRIORITY_RANK: i64 = 2;
/// `StoreConfig::default().max_attempts_default`.
const MAX_ATTEMPTS: i64 = 10;
/// `StoreConfig::default().lease_ms_default`: a claim without a lease length gets this.
const LEASE_MS: i64 = 120_000;
/// Seeded events become available this long before they are written, so a store whose
/// database clock runs a little behind this machine's still sees them as claimable.
const SEED_BACKDATE_MS: i64 = 1_000;
/// `StoreConfig::default().contention_retries_max`.
const CONTENTION_RETRIES_MAX: u32 = 8;
/// Rows per seeding INSERT: the store's own `ROWS_PER_INSERT`.
const SEED_ROWS_PER_INSERT: usize = 200;

/// `inbox::queries::EVENT_COLUMNS`, in schema order.
const EVENT_COLUMNS: &str = "tenant_id, recipient_kind, recipient_id, inbox_seq, event_id, \
    event_type, priority, availability_at_utc, expires_at_utc, deduplication_key, ack_state, \
    delivery_attempts, max_attempts, visibility_lease_until_utc, lease_token_hash, \
    lease_owner_session_id, next_retry_at_utc, dead_letter_state, company_id, workspace_id, \
    project_id, meeting_room_id, message_id, routing_decision_id, memory_update_id, assignment_id, \
    payload_json, payload_ref_type, payload_ref_id, created_at_utc, acked_at_utc, updated_at_utc, \
    terminal_at_utc, last_error";
const EVENT_ROW_PLACEHOLDERS: &str = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, \
    ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// `inbox::queries::upsert_heads(Dialect::MySql, 1, true)`.
const UPSERT_HEAD: &str = "INSERT INTO inbox_head (tenant_id, recipient_kind, recipient_id, \
    head_seq, oldest_available_seq, updated_at_utc) VALUES (?, ?, ?, 1, 1, ?) \
    ON DUPLICATE KEY UPDATE head_seq = head_seq + 1";
/// `inbox::queries::heads_of` with `recipients_predicate` for one recipient.
const SELECT_HEAD: &str = "SELECT recipient_kind, recipient_id, head_seq FROM inbox_head \
    WHERE tenant_id = ? AND ((recipient_kind = ? AND recipient_id IN (?)))";
const INSERT_OUTBOX: &str = "INSERT INTO outbox_signal (tenant_id, signal_type, recipient_heads, \
    n_recipients, status, attempt_count, created_at_utc) \
    VALUES (?, 'inbox.updated', ?, ?, 'pending', 0, ?)";
/// `inbox::queries::CLAIM_NEXT` as MySQL runs it.
const CLAIM_SELECT_HEAD: &str = "SELECT ";
const CLAIM_SELECT_TAIL: &str = " FROM agent_inbox \
    WHERE tenant_id = ? AND recipient_kind = ? AND recipient_id = ? \
    AND ack_state = 'available' AND availability_at_utc <= ? \
    AND (next_retry_at_utc IS NULL OR next_retry_at_utc <= ?) \
    AND (expires_at_utc IS NULL OR expires_at_utc > ?) AND delivery_attempts < max_attempts \
    ORDER BY priority, inbox_seq LIMIT ? FOR UPDATE SKIP LOCKED";

/// One event the baseline claimed: what a worker needs to acknowledge it.
#[derive(Debug)]
pub struct RawClaimed {
    pub event_id: EventId,
    pub inbox_seq: i64,
    pub lease_token: LeaseToken,
}

/// One event to one recipient, as `SqlStore::publish` does it: lock and advance the head,
/// read it, insert the row, write the outbox signal, commit. Returns the contention retries.
pub async fn publish(pool: &MySqlPool, tenant: &str, recipient_id: &str) -> Result<u32, BenchError> {
    retrying(|| publish_once(pool, tenant, recipient_id, Signal::Written)).await.map(|((), retries)| retries)
}

/// One event to one recipient as a user would write it by hand, with no signal for other
/// nodes: advance the head, read it, insert the row, commit (four statements). Returns the
/// contention retries.
pub async fn publish_by_hand(pool: &MySqlPool, tenant: &str, recipient_id: &str) -> Result<u32, BenchError> {
    retrying(|| publish_once(pool, tenant, recipient_id, Signal::Left)).await.map(|((), retries)| retries)
}

/// Whether a raw publish writes the outbox signal the store writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    Written,
    Left,
}

/// `SELECT head_seq` of one inbox by its primary key: what a hand-written "has anything
/// arrived?" check costs.
pub async fn head_seq(pool: &MySqlPool, tenant: &str, recipient_id: &str) -> Result<i64, BenchError> {
    let row = sqlx::query(
        "SELECT head_seq FROM inbox_head WHERE tenant_id = ? AND recipient_kind = ? AND recipient_id = ?",
    )
    .bind(tenant)
    .bind(RECIPIENT_KIND)
    .bind(recipient_id)
    .fetch_one(pool)
    .await?;
    Ok(row.try_get("head_seq")?)
}

async fn publish_once(
    pool: &MySqlPool,
    tenant: &str,
    recipient_id: &str,
    signal: Signal,
) -> Result<(), BenchError> {
    let now = system_now().get();
    let mut tx = pool.begin().await?;
    sqlx::query(UPSERT_HEAD)
        .bind(tenant)
        .bind(RECIPIENT_KIND)
        .bind(recipient_id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    let heads = sqlx::query(SELECT_HEAD)
        .bind(tenant)
        .bind(RECIPIENT_KIND)
        .bind(recipient_id)
        .fetch_all(&mut *tx)
        .await?;
    let inbox_seq: i64 =
        heads.first().ok_or("the head row vanished inside its own transaction")?.try_get("head_seq")?;
    let event_id = EventId::new_v7(UnixMillis(now), random_bytes()?);
    let sql = format!("INSERT INTO agent_inbox ({EVENT_COLUMNS}) VALUES {EVENT_ROW_PLACEHOLDERS}");
    bind_event_row(sqlx::query(&sql), tenant, recipient_id, inbox_seq, &event_id, now)
        .execute(&mut *tx)
        .await?;
    if signal == Signal::Written {
        let recipient_heads = serde_json::to_string(&[(RECIPIENT_KIND, recipient_id, inbox_seq)])?;
        sqlx::query(INSERT_OUTBOX)
            .bind(tenant)
            .bind(&recipient_heads)
            .bind(1_i64)
            .bind(now)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Up to `limit` claimable events, as `SqlStore::claim_next` does it: lock the next rows
/// (skipping rows other claimers hold), lease them all in one UPDATE, commit. Returns the
/// contention retries too.
pub async fn claim_next(
    pool: &MySqlPool,
    tenant: &str,
    recipient_id: &str,
    limit: u32,
) -> Result<(Vec<RawClaimed>, u32), BenchError> {
    retrying(|| claim_next_once(pool, tenant, recipient_id, limit)).await
}

async fn claim_next_once(
    pool: &MySqlPool,
    tenant: &str,
    recipient_id: &str,
    limit: u32,
) -> Result<Vec<RawClaimed>, BenchError> {
    let now = system_now().get();
    let mut tx = pool.begin().await?;
    let sql = format!("{CLAIM_SELECT_HEAD}{EVENT_COLUMNS}{CLAIM_SELECT_TAIL}");
    let rows = sqlx::query(&sql)
        .bind(tenant)
        .bind(RECIPIENT_KIND)
        .bind(recipient_id)
        .bind(now)
        .bind(now)
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
    if rows.is_empty() {
        tx.commit().await?;
        return Ok(Vec::new());
    }
    let mut claimed = Vec::with_capacity(rows.len());
    for row in &rows {
        let event_id: Vec<u8> = row.try_get("event_id")?;
        claimed.push(RawClaimed {
            event_id: EventId::from_slice(&event_id)?,
            inbox_seq: row.try_get("inbox_seq")?,
            lease_token: LeaseToken::from_random(random_bytes()?),
        });
    }
    let hashes: Vec<LeaseTokenHash> = claimed.iter().map(|c| c.lease_token.hash()).collect();
    let cases = " WHEN ? THEN ?".repeat(claimed.len());
    let sql = format!(
        "UPDATE agent_inbox SET ack_state = 'claimed', delivery_attempts = delivery_attempts + 1, \
         next_retry_at_utc = NULL, visibility_lease_until_utc = ?, lease_owner_session_id = ?, updated_at_utc = ?, \
         lease_token_hash = CASE inbox_seq{cases} END \
         WHERE tenant_id = ? AND recipient_kind = ? AND recipient_id = ? AND ack_state = 'available' AND inbox_seq IN ({})",
        placeholders(claimed.len())
    );
    let mut update = sqlx::query(&sql).bind(now + LEASE_MS).bind(None::<&str>).bind(now);
    for (event, hash) in claimed.iter().zip(&hashes) {
        update = update.bind(event.inbox_seq).bind(hash.0.as_slice());
    }
    update = update.bind(tenant).bind(RECIPIENT_KIND).bind(recipient_id);
    for event in &claimed {
        update = update.bind(event.inbox_seq);
    }
    let done = update.execute(&mut *tx).await?;
    if done.rows_affected() != claimed.len() as u64 {
        return Err(
            format!("raw claim leased {} of {} locked events", done.rows_affected(), claimed.len()).into()
        );
    }
    tx.commit().await?;
    Ok(claimed)
}

/// Acknowledges claimed events as completed, as `SqlStore::acknowledge`'s fast path does it:
/// one autocommit UPDATE matching every id and token hash at once. Returns the contention
/// retries.
pub async fn acknowledge(
    pool: &MySqlPool,
    tenant: &str,
    recipient_id: &str,
    claimed: &[RawClaimed],
) -> Result<u32, BenchError> {
    retrying(|| acknowledge_once(pool, tenant, recipient_id, claimed)).await.map(|((), retries)| retries)
}

async fn acknowledge_once(
    pool: &MySqlPool,
    tenant: &str,
    recipient_id: &str,
    claimed: &[RawClaimed],
) -> Result<(), BenchError> {
    let now = system_now().get();
    // The client holds tokens, not hashes, exactly as a store caller does.
    let hashes: Vec<LeaseTokenHash> = claimed.iter().map(|c| c.lease_token.hash()).collect();
    let n = placeholders(claimed.len());
    let sql = format!(
        "UPDATE agent_inbox FORCE INDEX (uq_agent_inbox_event) SET ack_state = 'acked', payload_json = NULL, acked_at_utc = ?, \
         terminal_at_utc = ?, updated_at_utc = ?, lease_owner_session_id = NULL \
         WHERE tenant_id = ? AND recipient_kind = ? AND recipient_id = ? AND ack_state = 'claimed' \
         AND event_id IN ({n}) AND lease_token_hash IN ({n})"
    );
    let mut update =
        sqlx::query(&sql).bind(now).bind(now).bind(now).bind(tenant).bind(RECIPIENT_KIND).bind(recipient_id);
    for event in claimed {
        update = update.bind(event.event_id.as_bytes().as_slice());
    }
    for hash in &hashes {
        update = update.bind(hash.0.as_slice());
    }
    let done = update.execute(pool).await?;
    if done.rows_affected() != claimed.len() as u64 {
        return Err(format!("raw ack changed {} of {} events", done.rows_affected(), claimed.len()).into());
    }
    Ok(())
}

/// Gives one recipient a backlog of `n_events` available events with sequence numbers
/// `1..=n_events`: the rows `publish` would have written, in a few multi-row INSERTs. Both
/// sides are seeded this way, and seeding is not measured.
pub async fn seed_backlog(
    pool: &MySqlPool,
    tenant: &str,
    recipient_id: &str,
    n_events: usize,
) -> Result<(), BenchError> {
    let now = system_now().get() - SEED_BACKDATE_MS;
    let event_ids = (0..n_events)
        .map(|_| Ok(EventId::new_v7(UnixMillis(now), random_bytes()?)))
        .collect::<Result<Vec<_>, BenchError>>()?;
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO inbox_head (tenant_id, recipient_kind, recipient_id, head_seq, \
         oldest_available_seq, updated_at_utc) VALUES (?, ?, ?, ?, 1, ?)",
    )
    .bind(tenant)
    .bind(RECIPIENT_KIND)
    .bind(recipient_id)
    .bind(i64::try_from(n_events)?)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    let mut next_seq: i64 = 1;
    for chunk in event_ids.chunks(SEED_ROWS_PER_INSERT) {
        let mut sql = format!("INSERT INTO agent_inbox ({EVENT_COLUMNS}) VALUES ");
        sql.push_str(&vec![EVENT_ROW_PLACEHOLDERS; chunk.len()].join(", "));
        let mut insert = sqlx::query(&sql);
        for event_id in chunk {
            insert = bind_event_row(insert, tenant, recipient_id, next_seq, event_id, now);
            next_seq += 1;
        }
        insert.execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Runs one transaction (or autocommit statement) again while MySQL picks it as a deadlock
/// victim or times out its lock wait, as the store's `with_retries!` does: the same number of
/// retries, the same growing random pause. Without this the baseline would fail where the
/// store succeeds, and would skip the pauses the store pays. Returns the value and how many
/// retries it took.
async fn retrying<T, F, Fut>(mut attempt: F) -> Result<(T, u32), BenchError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, BenchError>>,
{
    let mut retries = 0;
    loop {
        match attempt().await {
            Err(err) if is_contention(err.as_ref()) && retries < CONTENTION_RETRIES_MAX => {
                retries += 1;
                tokio::time::sleep(contention_pause(retries)?).await;
            }
            other => return other.map(|value| (value, retries)),
        }
    }
}

/// 1213 ER_LOCK_DEADLOCK and 1205 ER_LOCK_WAIT_TIMEOUT: the codes the store retries.
fn is_contention(err: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    match err.downcast_ref::<sqlx::Error>() {
        Some(sqlx::Error::Database(db)) => db
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .is_some_and(|mysql| matches!(mysql.number(), 1213 | 1205)),
        _ => false,
    }
}

/// The store's `contention_pause`: 1 ms plus a random share of 2^attempt ms, at most 200 ms.
fn contention_pause(attempt: u32) -> Result<Duration, BenchError> {
    let ceiling_ms = 2u64.saturating_pow(attempt.min(8)).min(200);
    let unit = f64::from(u32::from_le_bytes(random_bytes()?)) / f64::from(u32::MAX);
    Ok(Duration::from_millis(1 + (ceiling_ms as f64 * unit) as u64))
}

/// Binds the 34 values of a freshly published row, as `record::push_event_values` does for a
/// `Publish::new` request with an inline JSON body: no expiry, no deduplication key, no
/// correlation ids, no lease.
fn bind_event_row<'q>(
    query: Query<'q, MySql, MySqlArguments>,
    tenant: &'q str,
    recipient_id: &'q str,
    inbox_seq: i64,
    event_id: &'q EventId,
    now: i64,
) -> Query<'q, MySql, MySqlArguments> {
    let mut query = query
        .bind(tenant)
        .bind(RECIPIENT_KIND)
        .bind(recipient_id)
        .bind(inbox_seq)
        .bind(event_id.as_bytes().as_slice())
        .bind(EVENT_TYPE)
        .bind(PRIORITY_RANK)
        .bind(now) // availability_at_utc
        .bind(None::<i64>) // expires_at_utc
        .bind(None::<&str>) // deduplication_key
        .bind("available")
        .bind(0_i64) // delivery_attempts
        .bind(MAX_ATTEMPTS)
        .bind(None::<i64>) // visibility_lease_until_utc
        .bind(None::<&[u8]>) // lease_token_hash
        .bind(None::<&str>) // lease_owner_session_id
        .bind(None::<i64>) // next_retry_at_utc
        .bind("none"); // dead_letter_state
    for _correlation_id in 0..8 {
        query = query.bind(None::<&str>);
    }
    query
        .bind(Some(PAYLOAD_JSON))
        .bind(None::<&str>) // payload_ref_type
        .bind(None::<&str>) // payload_ref_id
        .bind(now) // created_at_utc
        .bind(None::<i64>) // acked_at_utc
        .bind(now) // updated_at_utc
        .bind(None::<i64>) // terminal_at_utc
        .bind(None::<&str>) // last_error
}

/// `?, ?, ?` for an IN list of `n` values.
fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

fn random_bytes<const N: usize>() -> Result<[u8; N], BenchError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)
        .map_err(|err| format!("the operating system's random generator failed: {err}"))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use inbox_core::Priority;
    use inbox_store::StoreConfig;

    use super::*;

    #[test]
    fn copied_defaults_match_the_store() {
        let config = StoreConfig::default();
        assert_eq!(MAX_ATTEMPTS, i64::from(config.max_attempts_default));
        assert_eq!(LEASE_MS, config.lease_ms_default as i64);
        assert_eq!(CONTENTION_RETRIES_MAX, config.contention_retries_max);
        assert_eq!(PRIORITY_RANK, i64::from(Priority::Normal.rank()));
        assert_eq!(EVENT_COLUMNS.split(',').count(), 34);
        assert_eq!(EVENT_ROW_PLACEHOLDERS.matches('?').count(), 34);
    }
}
