//! The two things under test, connected alike: the store, and a raw sqlx pool for the baseline
//! configured the way the store configures its own (size, acquire timeout, session settings),
//! so any difference in the table comes from the store's code, not from its connections.

use std::str::FromStr;
use std::time::Duration;

use inbox_core::TenantId;
use inbox_store::{ConnectOptions, SqlStore, StoreConfig};
use sqlx::Executor as _;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};

use crate::BenchError;

/// Connections in each pool: as many as the most concurrent row has workers, so no worker
/// ever waits for a connection and the pool is not what is being measured.
pub const CONNECTIONS_MAX: u32 = 16;
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Which implementation a measurement ran through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Store,
    Raw,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Store => "store",
            Side::Raw => "raw",
        }
    }
}

/// The store and the baseline's pool, both on the benchmark's database.
#[derive(Debug, Clone)]
pub struct Subjects {
    pub store: SqlStore,
    pub raw: MySqlPool,
}

impl Subjects {
    /// Connects both and migrates the schema through the store.
    pub async fn connect(url: &str) -> Result<Subjects, BenchError> {
        let mut options = ConnectOptions::new(url);
        options.connections_max = CONNECTIONS_MAX;
        options.acquire_timeout = ACQUIRE_TIMEOUT;
        let store = SqlStore::connect(&options, StoreConfig::default()).await?;
        store.migrate().await?;
        crate::secrets::prepare(&store, url).await?;

        let connect = MySqlConnectOptions::from_str(url)?;
        // No idle timeout or lifetime: either starts sqlx 0.8's maintenance task, whose sweep can
        // spin for ever (see inbox_store::db's `no_maintenance_task`).
        let raw = MySqlPoolOptions::new()
            .idle_timeout(None)
            .max_lifetime(None)
            .max_connections(CONNECTIONS_MAX)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .after_connect(|conn, _meta| {
                Box::pin(async move {
                    // The same session the store's pool sets up (inbox_store::db).
                    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED").await?;
                    conn.execute("SET SESSION innodb_lock_wait_timeout = 10, SESSION time_zone = '+00:00'")
                        .await?;
                    Ok(())
                })
            })
            .connect_with(connect)
            .await?;
        Ok(Subjects { store, raw })
    }

    /// Closes both pools, so no connection outlives the run and holds up `DROP DATABASE`.
    pub async fn close(&self) {
        self.store.close().await;
        self.raw.close().await;
    }
}

/// A tenant of its own for every workload, row and side: the runs never touch each other's
/// head rows, index ranges or backlog.
pub fn tenant(workload: &str, concurrency: usize, side: Side) -> TenantId {
    TenantId::new(format!("bench-{workload}-c{concurrency}-{}", side.as_str()))
        .expect("benchmark tenant ids use only letters, digits and '-'")
}
