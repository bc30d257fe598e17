//! [`SqlStore`]: the durable inbox over MySQL/MariaDB or SQLite. The operations live in
//! sibling modules (`publish`, `read`, `leases`, `scavenge`, `admin`), one job each.

use std::sync::Arc;
use std::time::Duration;

use inbox_core::{Clock, UnixMillis};

use crate::Field;
use crate::clock::{DatabaseClock, system_now};
use crate::db::{ConnectOptions, Pools};
use crate::engine::Engine;
use crate::queries;
use crate::{Dialect, StoreConfig, StoreError};

/// The durable inbox. Cheap to clone: clones share pools, clock and configuration.
#[derive(Debug, Clone)]
pub struct SqlStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pools: Pools,
    config: StoreConfig,
    clock: Arc<dyn Clock>,
    /// Present when `clock` follows the database; [`SqlStore::sync_clock`] re-measures it.
    database_clock: Option<Arc<DatabaseClock>>,
    /// The keys secrets are sealed with, and what was opened (see `secrets`).
    sealer: crate::secrets::sealing::Sealer,
    /// Transactions retried after a deadlock, lock wait or (on Galera) certification conflict.
    contention_retries: std::sync::atomic::AtomicU64,
    /// Where this node's scavenger sweeps ended (`inbox/scavenge.rs`).
    sweep_marks: crate::inbox::SweepMarks,
}

/// Retries a whole transaction while the database reports deadlocks, lock-wait timeouts or
/// a busy file, so contention never escapes to callers as an error they must handle.
macro_rules! with_retries {
    ($store:expr, $operation:expr) => {{
        let mut attempt: u32 = 1;
        loop {
            match $operation.await {
                Err($crate::StoreError::Contention { .. })
                    if attempt <= $store.contention_retries_allowed() =>
                {
                    $store.count_contention_retry();
                    tokio::time::sleep($crate::store::contention_pause(attempt, $store.engine().galera))
                        .await;
                    attempt += 1;
                }
                Err($crate::StoreError::Contention { .. }) => {
                    break Err($crate::StoreError::Contention { attempts: attempt });
                }
                other => break other,
            }
        }
    }};
}
pub(crate) use with_retries;

/// A short random pause before retrying, growing with each attempt (up to 200 ms; on Galera,
/// where losers of a hot row meet again at every commit, up to 500 ms, to spread them out).
pub(crate) fn contention_pause(attempt: u32, galera: bool) -> Duration {
    let cap_ms = if galera { 500 } else { 200 };
    let ceiling_ms = 2u64.saturating_pow(attempt.min(9)).min(cap_ms);
    Duration::from_millis(1 + (ceiling_ms as f64 * crate::entropy::unit_interval()) as u64)
}

impl SqlStore {
    /// Connects, and keeps time by the database server's clock.
    pub async fn connect(options: &ConnectOptions, config: StoreConfig) -> Result<SqlStore, StoreError> {
        let database_clock = Arc::new(DatabaseClock::default());
        let store = Self::build(options, config, database_clock.clone(), Some(database_clock)).await?;
        store.sync_clock().await?;
        Ok(store)
    }

    /// Connects with a clock of the caller's choosing (tests move a `ManualClock`).
    pub async fn connect_with_clock(
        options: &ConnectOptions,
        config: StoreConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<SqlStore, StoreError> {
        Self::build(options, config, clock, None).await
    }

    async fn build(
        options: &ConnectOptions,
        config: StoreConfig,
        clock: Arc<dyn Clock>,
        database_clock: Option<Arc<DatabaseClock>>,
    ) -> Result<SqlStore, StoreError> {
        let pools = Pools::connect(options).await?;
        Ok(SqlStore {
            inner: Arc::new(Inner {
                pools,
                config,
                clock,
                database_clock,
                sealer: Default::default(),
                contention_retries: Default::default(),
                sweep_marks: crate::inbox::SweepMarks::new(),
            }),
        })
    }

    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// How many transactions this store retried as contention victims (deadlocks, lock waits,
    /// Galera certification conflicts) since it connected.
    pub fn contention_retries(&self) -> u64 {
        self.inner.contention_retries.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// On Galera, row locks do not reach across members: writers of one hot row on different
    /// members are not queued but fail certification at commit, and may lose several times in a
    /// row, so they get four times the retries (with the same growing random pauses).
    pub(crate) fn contention_retries_allowed(&self) -> u32 {
        let max = self.config().contention_retries_max;
        if self.engine().galera { max.saturating_mul(4) } else { max }
    }

    pub(crate) fn count_contention_retry(&self) {
        self.inner.contention_retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Where this node's scavenger sweeps ended.
    pub(crate) fn sweep_marks(&self) -> &crate::inbox::SweepMarks {
        &self.inner.sweep_marks
    }

    /// The engine detected when the store connected.
    pub fn engine(&self) -> &Engine {
        self.pools().engine()
    }

    pub fn dialect(&self) -> Dialect {
        self.inner.pools.dialect()
    }

    pub(crate) fn sealer(&self) -> &crate::secrets::sealing::Sealer {
        &self.inner.sealer
    }

    pub(crate) fn pools(&self) -> &Pools {
        &self.inner.pools
    }

    /// The time every lease and retry is measured against.
    pub fn now(&self) -> UnixMillis {
        self.inner.clock.now()
    }

    /// Measures the offset between this machine and the database server again and returns it
    /// in milliseconds; nodes with drifting clocks thereby agree on lease expiry.
    pub async fn sync_clock(&self) -> Result<i64, StoreError> {
        let sql = queries::CLOCK_NOW.text(self.dialect());
        let mut pooled = self.inner.pools.reader().await?;
        let sent = system_now();
        let row = pooled.conn().fetch_optional(sql, &[]).await?;
        let received = system_now();
        let db_now = row
            .ok_or_else(|| StoreError::Corrupt("the clock query returned no row".into()))?
            .i64("now_ms")?;
        match &self.inner.database_clock {
            Some(clock) => {
                clock.record(sent, UnixMillis(db_now), received);
                Ok(clock.offset_ms())
            }
            None => Ok(0),
        }
    }

    /// Whether the database answers a trivial query (for readiness probes).
    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut pooled = self.inner.pools.reader().await?;
        pooled.conn().fetch_optional(queries::PING, &[]).await?;
        Ok(())
    }

    pub async fn close(&self) {
        self.inner.pools.close().await;
    }

    /// Checks a requested lease length against the configured bounds.
    pub(crate) fn lease_ms(&self, requested: Option<u64>) -> Result<u64, StoreError> {
        let config = self.config();
        match requested {
            None => Ok(config.lease_ms_default.min(config.lease_ms_max)),
            Some(ms) if ms >= 1_000 && ms <= config.lease_ms_max => Ok(ms),
            Some(ms) => Err(StoreError::invalid(
                Field::LeaseLength,
                format!("is {} s; it must be between 1 and {} s", ms / 1_000, config.lease_ms_max / 1_000),
            )),
        }
    }

    /// Checks the number of items in a batch request.
    pub(crate) fn batch_len(&self, field: Field, n: usize) -> Result<(), StoreError> {
        let max = self.config().batch_events_max as usize;
        if n == 0 || n > max {
            // `limit` is a number; the other fields are lists.
            let what = if matches!(field, Field::Limit | Field::ScavengeBatch) {
                format!("is {n}")
            } else {
                format!("has {n} items")
            };
            return Err(StoreError::invalid(field, format!("{what}; send between 1 and {max}")));
        }
        Ok(())
    }
}
