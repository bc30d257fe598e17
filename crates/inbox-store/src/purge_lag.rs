//! How far InnoDB's purge is behind, for the operator's gauges: the history list length
//! (undo records not yet purged) and the age of the oldest open transaction. An old read view
//! (a backup's `--single-transaction`, a forgotten interactive session) holds purge back, and
//! with it the delete-marked index entries claims and sweeps would otherwise read (issue 27;
//! docs/deploy.md tells what to do about it).

use crate::db::DbConnection;
use crate::{Dialect, SqlStore, StoreError, queries};

/// InnoDB's purge lag as this store's server reports it; each part is `None` where the
/// server does not expose it (SQLite; a metric switched off; no PROCESS privilege).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PurgeLag {
    /// Undo log records waiting for purge (`trx_rseg_history_len`).
    pub history_list_length: Option<u64>,
    /// Seconds since the oldest open InnoDB transaction started (0 when none is open).
    pub oldest_transaction_age_seconds: Option<u64>,
}

impl SqlStore {
    /// Reads the purge lag of the server a pooled connection reaches (on Galera, one member).
    pub async fn purge_lag(&self) -> Result<PurgeLag, StoreError> {
        if self.dialect() != Dialect::MySql {
            return Ok(PurgeLag::default());
        }
        let mut pooled = self.pools().reader().await?;
        let mut conn = pooled.conn();
        Ok(PurgeLag {
            history_list_length: number(&mut conn, queries::HISTORY_LIST_LENGTH).await,
            oldest_transaction_age_seconds: number(&mut conn, queries::OLDEST_TRANSACTION_AGE).await,
        })
    }
}

/// The `n` of a one-row query, or `None` when the server refuses or lacks it.
async fn number(conn: &mut DbConnection<'_>, sql: &str) -> Option<u64> {
    match conn.fetch_optional(sql, &[]).await {
        Ok(Some(row)) => row.opt_i64("n").ok().flatten().and_then(|n| u64::try_from(n).ok()),
        Ok(None) => None,
        Err(err) => {
            tracing::debug!(error = %err, "purge lag not readable");
            None
        }
    }
}
