//! Which database engine the store runs on, as detected when it connects. The proof that the
//! engine keeps the two promises claims rest on is in `engine_check.rs`.
//!
//! Detection also decides the Galera session rules: on a Galera member (`wsrep_on`) every
//! store connection reads with `wsrep_sync_wait`, so a poll, claim, acknowledge or heartbeat
//! that follows a commit made on another member sees it (read-your-writes across members).

use std::fmt;

use sqlx::mysql::MySqlConnection;
use sqlx::{Executor as _, Row as _};

use crate::queries;

/// The `wsrep_sync_wait` bits every store connection to a Galera member uses: 1 (SELECT, SHOW,
/// BEGIN), 2 (UPDATE, DELETE) and 4 (INSERT, REPLACE: a publish starts with an upsert of the
/// inbox heads, which must read the newest head). A read overtaken after its wait by a commit
/// elsewhere still fails certification and is retried like any deadlock victim.
pub const GALERA_SYNC_WAIT: u32 = 7;

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

/// What [`crate::SqlStore::check_engine`] found: the engine and the properties it proved.
#[derive(Debug, Clone)]
pub struct EngineReport {
    pub engine: Engine,
    /// Whether the two probe connections reached one server; through a proxy that spreads
    /// connections over Galera members they may not, and row locks are local to a member.
    pub locks_checked: bool,
}

/// Detects the engine on a fresh MySQL-protocol connection.
pub(crate) async fn detect_mysql(conn: &mut MySqlConnection) -> Result<Engine, sqlx::Error> {
    let version: String = conn.fetch_one(queries::SERVER_VERSION).await?.try_get_unchecked("v")?;
    let product =
        if version.to_ascii_lowercase().contains("mariadb") { Product::MariaDb } else { Product::MySql };
    let galera = variable(conn, queries::WSREP_ON).await?.is_some_and(|v| v.eq_ignore_ascii_case("on"));
    let group_replication = match product {
        Product::MySql => {
            conn.fetch_optional(queries::GROUP_REPLICATION_MEMBER).await.ok().flatten().is_some()
        }
        _ => false,
    };
    Ok(Engine { product, version, galera, group_replication })
}

/// The value a `SHOW VARIABLES LIKE` statement reads, if the server has that variable.
async fn variable(conn: &mut MySqlConnection, show: &str) -> Result<Option<String>, sqlx::Error> {
    let row = conn.fetch_optional(show).await?;
    row.map(|row| {
        let value: Vec<u8> = row.try_get_unchecked(1)?;
        Ok(String::from_utf8_lossy(&value).into_owned())
    })
    .transpose()
}
