//! Checks after each measured run that the work really happened in the database: a side that
//! silently did less would otherwise look fast. Not timed.

use inbox_core::TenantId;
use sqlx::Row as _;
use sqlx::mysql::MySqlPool;

use crate::BenchError;

/// Every publish left one inbox row and one outbox signal.
pub async fn published(pool: &MySqlPool, tenant: &TenantId, n_events: u64) -> Result<(), BenchError> {
    let rows = count(pool, "SELECT COUNT(*) AS n FROM agent_inbox WHERE tenant_id = ?", tenant).await?;
    let signals = count(pool, "SELECT COUNT(*) AS n FROM outbox_signal WHERE tenant_id = ?", tenant).await?;
    if rows != n_events || signals != n_events {
        return Err(format!(
            "{tenant}: {n_events} publishes left {rows} inbox rows and {signals} outbox signals"
        )
        .into());
    }
    Ok(())
}

/// Every event counted as claimed and acknowledged is `acked` in the table.
pub async fn acknowledged(pool: &MySqlPool, tenant: &TenantId, n_events: u64) -> Result<(), BenchError> {
    let acked = count(
        pool,
        "SELECT COUNT(*) AS n FROM agent_inbox WHERE tenant_id = ? AND ack_state = 'acked'",
        tenant,
    )
    .await?;
    if acked != n_events {
        return Err(
            format!("{tenant}: {n_events} events were acknowledged but {acked} rows are acked").into()
        );
    }
    Ok(())
}

async fn count(pool: &MySqlPool, sql: &str, tenant: &TenantId) -> Result<u64, BenchError> {
    let n: i64 = sqlx::query(sql).bind(tenant.as_str()).fetch_one(pool).await?.try_get("n")?;
    Ok(u64::try_from(n)?)
}
