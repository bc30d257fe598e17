//! Which database engine the store runs on, and proof at start that it keeps the two promises
//! claims rest on. Some MySQL-compatible engines accept `FOR UPDATE SKIP LOCKED` and silently
//! neither lock nor skip, which would hand one event to two holders; an engine that ignores
//! `READ COMMITTED` would hide commits from claimers. Both are checked with two connections
//! against a scratch table, so an engine that fails is refused by name before anything is served.
//!
//! Detection also decides the Galera session rules: on a Galera member (`wsrep_on`) every
//! store connection reads with `wsrep_sync_wait`, so a poll, claim, acknowledge or heartbeat
//! that follows a commit made on another member sees it (read-your-writes across members).

use std::fmt;

use sqlx::mysql::MySqlConnection;
use sqlx::{Executor as _, Row as _};

use crate::db::{Arg, DbConnection, Pooled};
use crate::{SqlStore, StoreError};

/// The `wsrep_sync_wait` bits every store connection to a Galera member uses: 1 (SELECT, SHOW,
/// BEGIN), 2 (UPDATE, DELETE) and 4 (INSERT, REPLACE: a publish starts with an upsert of the
/// inbox heads, which must read the newest head). A read overtaken after its wait by a commit
/// elsewhere still fails certification and is retried like any deadlock victim.
pub(crate) const GALERA_SYNC_WAIT: u32 = 7;

/// The engine behind a store, as detected when it connected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Engine {
    pub product: Product,
    /// `VERSION()` as the server reports it (for SQLite, `sqlite_version()`).
    pub version: String,
    /// A MariaDB Galera member (`wsrep_on = ON`): reads wait for causality.
    pub galera: bool,
    /// A MySQL Group Replication member.
    pub group_replication: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Product {
    MariaDb,
    MySql,
    Sqlite,
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let product = match self.product {
            Product::MariaDb => "MariaDB",
            Product::MySql => "MySQL",
            Product::Sqlite => "SQLite",
        };
        write!(f, "{product} {}", self.version)?;
        if self.galera {
            write!(f, " (Galera cluster member)")?;
        }
        if self.group_replication {
            write!(f, " (Group Replication member)")?;
        }
        Ok(())
    }
}

/// What [`SqlStore::check_engine`] found: the engine and the properties it proved.
#[derive(Debug, Clone)]
pub struct EngineReport {
    pub engine: Engine,
    /// Whether the two probe connections reached one server; through a proxy that spreads
    /// connections over Galera members they may not, and row locks are local to a member.
    pub locks_checked: bool,
}

/// Detects the engine on a fresh MySQL-protocol connection.
pub(crate) async fn detect_mysql(conn: &mut MySqlConnection) -> Result<Engine, sqlx::Error> {
    let version: String = conn.fetch_one("SELECT VERSION() AS v").await?.try_get_unchecked("v")?;
    let product =
        if version.to_ascii_lowercase().contains("mariadb") { Product::MariaDb } else { Product::MySql };
    let galera = variable(conn, "wsrep_on").await?.is_some_and(|v| v.eq_ignore_ascii_case("on"));
    let group_replication = match product {
        Product::MySql => conn
            .fetch_optional(
                "SELECT MEMBER_STATE FROM performance_schema.replication_group_members \
                 WHERE MEMBER_ID = @@server_uuid",
            )
            .await
            .ok()
            .flatten()
            .is_some(),
        _ => false,
    };
    Ok(Engine { product, version, galera, group_replication })
}

async fn variable(conn: &mut MySqlConnection, name: &str) -> Result<Option<String>, sqlx::Error> {
    let row = conn.fetch_optional(format!("SHOW VARIABLES LIKE '{name}'").as_str()).await?;
    row.map(|row| {
        let value: Vec<u8> = row.try_get_unchecked(1)?;
        Ok(String::from_utf8_lossy(&value).into_owned())
    })
    .transpose()
}

/// How many extra pooled connections to try for one on the same server as the first.
const SAME_SERVER_TRIES: usize = 8;

const PROBE_TABLE: &str = "CREATE TABLE IF NOT EXISTS agent_inbox_engine_probe (\
    probe_id BIGINT NOT NULL PRIMARY KEY, probe_value BIGINT NOT NULL) ENGINE=InnoDB";

impl SqlStore {
    /// The engine detected when the store connected.
    pub fn engine(&self) -> &Engine {
        self.pools().engine()
    }

    /// Proves with two connections that `FOR UPDATE SKIP LOCKED` skips a row the other holds
    /// locked, and that a transaction sees rows committed after it began (`READ COMMITTED`).
    /// An engine that fails gets [`StoreError::EngineRefused`] naming it and the property.
    pub async fn check_engine(&self) -> Result<EngineReport, StoreError> {
        let engine = self.engine().clone();
        if engine.product == Product::Sqlite {
            // One writer at a time: there is nothing to skip, and every read sees every commit.
            return Ok(EngineReport { engine, locks_checked: true });
        }
        let mut first = self.pools().writer().await?;
        first.conn().execute_raw(PROBE_TABLE).await?;
        let home = server_of(&mut first).await?;
        let mut held = Vec::new();
        let mut second = None;
        for _ in 0..SAME_SERVER_TRIES {
            let mut candidate = self.pools().writer().await?;
            if server_of(&mut candidate).await? == home {
                second = Some(candidate);
                break;
            }
            held.push(candidate);
        }
        drop(held);
        let Some(mut second) = second else {
            return Ok(EngineReport { engine, locks_checked: false });
        };
        let key = i64::from_le_bytes(crate::entropy::random_bytes::<8>()) & (i64::MAX >> 1);
        let result = probe(&mut first.conn(), &mut second.conn(), key).await;
        // Whatever happened, leave no open transaction and no probe rows behind.
        let _ = first.conn().execute_raw("ROLLBACK").await;
        let _ = second.conn().execute_raw("ROLLBACK").await;
        let _ = first
            .conn()
            .execute(
                "DELETE FROM agent_inbox_engine_probe WHERE probe_id IN (?, ?)",
                &[Arg::I64(key), Arg::I64(key + 1)],
            )
            .await;
        match result? {
            None => Ok(EngineReport { engine, locks_checked: true }),
            Some(property) => Err(StoreError::EngineRefused { engine: engine.to_string(), property }),
        }
    }
}

/// The server a connection reached (host name and port, unique per Galera member).
async fn server_of(pooled: &mut Pooled) -> Result<String, StoreError> {
    let row = pooled
        .conn()
        .fetch_optional("SELECT CONCAT(@@hostname, ':', @@port) AS server", &[])
        .await?
        .ok_or_else(|| StoreError::Corrupt("the server query returned no row".into()))?;
    row.string("server")
}

/// Runs the two checks; `Some(sentence)` names the property the engine broke.
async fn probe(
    a: &mut DbConnection<'_>,
    b: &mut DbConnection<'_>,
    key: i64,
) -> Result<Option<String>, StoreError> {
    a.execute(
        "INSERT INTO agent_inbox_engine_probe (probe_id, probe_value) VALUES (?, 0), (?, 0)",
        &[Arg::I64(key), Arg::I64(key + 1)],
    )
    .await?;
    let pick = "SELECT probe_id FROM agent_inbox_engine_probe WHERE probe_id IN (?, ?) \
                ORDER BY probe_id LIMIT 1 FOR UPDATE SKIP LOCKED";
    let args = [Arg::I64(key), Arg::I64(key + 1)];

    a.execute_raw("BEGIN").await?;
    let first = a.fetch_optional(pick, &args).await?.map(|r| r.i64("probe_id")).transpose()?;
    if first != Some(key) {
        return Ok(Some(format!(
            "FOR UPDATE SKIP LOCKED returned {first:?} instead of the first of two unlocked rows"
        )));
    }
    b.execute_raw("BEGIN").await?;
    let skipped = match b.fetch_optional(pick, &args).await {
        Ok(row) => row.map(|r| r.i64("probe_id")).transpose()?,
        Err(StoreError::Contention { .. }) => {
            return Ok(Some("FOR UPDATE SKIP LOCKED waited for a row another connection holds locked instead of skipping it".into()));
        }
        Err(other) => return Err(other),
    };
    if skipped != Some(key + 1) {
        return Ok(Some(format!(
            "FOR UPDATE SKIP LOCKED returned {} while another connection held it locked (it must skip to the next row)",
            match skipped {
                Some(id) if id == key => "the locked row".to_owned(),
                other => format!("{other:?}"),
            }
        )));
    }
    b.execute_raw("ROLLBACK").await?;

    // READ COMMITTED: a row committed by another connection after this transaction's first
    // read is visible to its next read.
    let read = "SELECT probe_value FROM agent_inbox_engine_probe WHERE probe_id = ?";
    let before =
        a.fetch_optional(read, &[Arg::I64(key + 1)]).await?.map(|r| r.i64("probe_value")).transpose()?;
    b.execute("UPDATE agent_inbox_engine_probe SET probe_value = 1 WHERE probe_id = ?", &[Arg::I64(key + 1)])
        .await?;
    let after =
        a.fetch_optional(read, &[Arg::I64(key + 1)]).await?.map(|r| r.i64("probe_value")).transpose()?;
    a.execute_raw("ROLLBACK").await?;
    if before != Some(0) || after != Some(1) {
        return Ok(Some(
            "a transaction did not see a row committed by another connection after it began (the session is not at READ COMMITTED)"
                .into(),
        ));
    }
    Ok(None)
}
