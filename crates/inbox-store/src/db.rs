//! The thin layer between store logic and sqlx: one connection, row and transaction type
//! that is either MySQL/MariaDB or SQLite, so every store operation is written once and the
//! backends differ only in the SQL text of [`crate::dialect`].
//!
//! It also owns how a MySQL connection's failure is detected, since sqlx 0.8 sets no socket
//! option but `TCP_NODELAY` (no keepalive, no `TCP_USER_TIMEOUT`) and offers no hook to set one:
//! every round trip is bounded by the statement timeout ([`within`]), taking a connection by the
//! pool's acquire timeout (connecting, and the ping of one idle a second or more, included), and
//! a connection whose round trip did not finish (given up on, or cut short by a caller that
//! went away) is closed instead of returned to the pool ([`MySqlLease`]).

use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::{MySql, MySqlConnectOptions, MySqlConnection, MySqlPool, MySqlPoolOptions, MySqlRow};
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{
    Sqlite, SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{Connection as _, Executor as _, Row as _, TransactionManager as _};

use crate::Field;
use crate::engine::{Engine, Product};
use crate::{Dialect, StoreError};

/// A value bound to a `?` placeholder.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    I64(i64),
    OptI64(Option<i64>),
    Str(&'a str),
    OptStr(Option<&'a str>),
    Bytes(&'a [u8]),
    OptBytes(Option<&'a [u8]>),
}

/// A borrowed connection of either backend: a pooled one, or a host application's own
/// connection inside its open transaction (see [`crate::Inbox::publish_in`]).
#[derive(Debug)]
pub struct DbConnection<'a> {
    backend: Backend<'a>,
    /// How long one statement may take before the database counts as unreachable (MySQL
    /// only: a paused or partitioned server never answers, and TCP keeps the socket open).
    statement_timeout: Option<Duration>,
    /// A store connection's mark that a round trip is under way or was left unfinished, so
    /// that its [`MySqlLease`] closes it; `None` on a host's own connection.
    unsettled: Option<&'a mut bool>,
}

#[derive(Debug)]
enum Backend<'a> {
    MySql(&'a mut MySqlConnection),
    Sqlite(&'a mut SqliteConnection),
}

impl<'a> From<&'a mut MySqlConnection> for DbConnection<'a> {
    fn from(conn: &'a mut MySqlConnection) -> Self {
        DbConnection { backend: Backend::MySql(conn), statement_timeout: None, unsettled: None }
    }
}

impl<'a> From<&'a mut SqliteConnection> for DbConnection<'a> {
    fn from(conn: &'a mut SqliteConnection) -> Self {
        DbConnection { backend: Backend::Sqlite(conn), statement_timeout: None, unsettled: None }
    }
}

/// A reborrow, so a host can pass the store's own connection (see [`crate::host`]) to
/// [`crate::Inbox::publish_in`] and keep using it; the statement time limit comes along.
impl<'a, 'b: 'a> From<&'a mut DbConnection<'b>> for DbConnection<'a> {
    fn from(conn: &'a mut DbConnection<'b>) -> Self {
        let backend = match &mut conn.backend {
            Backend::MySql(inner) => Backend::MySql(inner),
            Backend::Sqlite(inner) => Backend::Sqlite(inner),
        };
        DbConnection {
            backend,
            statement_timeout: conn.statement_timeout,
            unsettled: conn.unsettled.as_deref_mut(),
        }
    }
}

/// Runs one database round trip, giving up after `limit`. A statement given up on is never
/// reported as done: its transaction is dropped, so the server rolls it back (or, for a
/// COMMIT, the caller hears "unavailable" and retries an idempotent operation). On a store
/// connection, `unsettled` is set for the round trip and cleared only when the server answered
/// (a result or an error of its own): a connection given up on, cut short or broken is then
/// closed when its lease ends, and refuses further statements at once.
async fn within<T>(
    limit: Option<Duration>,
    unsettled: &mut Option<&mut bool>,
    round_trip: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, sqlx::Error> {
    if let Some(unsettled) = unsettled.as_deref_mut() {
        if *unsettled {
            return Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "an earlier statement on this connection got no answer",
            )));
        }
        *unsettled = true;
    }
    let result = match limit {
        None => round_trip.await,
        Some(limit) => match tokio::time::timeout(limit, round_trip).await {
            Ok(result) => result,
            Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the database did not answer within {} ms", limit.as_millis()),
            ))),
        },
    };
    if let Some(unsettled) = unsettled.as_deref_mut() {
        *unsettled = !matches!(&result, Ok(_) | Err(sqlx::Error::Database(_)));
    }
    result
}

/// A result row of either backend, read by column name.
pub enum DbRow {
    MySql(MySqlRow),
    Sqlite(SqliteRow),
}

impl std::fmt::Debug for DbRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbRow").finish_non_exhaustive()
    }
}

/// What a statement changed.
#[derive(Debug, Clone, Copy)]
pub struct Executed {
    pub rows_affected: u64,
    pub last_insert_id: i64,
}

macro_rules! bind_all {
    ($query:expr, $args:expr) => {{
        let mut query = $query;
        for arg in $args {
            query = match *arg {
                Arg::I64(v) => query.bind(v),
                Arg::OptI64(v) => query.bind(v),
                Arg::Str(v) => query.bind(v),
                Arg::OptStr(v) => query.bind(v),
                Arg::Bytes(v) => query.bind(v),
                Arg::OptBytes(v) => query.bind(v),
            };
        }
        query
    }};
}

impl DbConnection<'_> {
    pub fn dialect(&self) -> Dialect {
        match self.backend {
            Backend::MySql(_) => Dialect::MySql,
            Backend::Sqlite(_) => Dialect::Sqlite,
        }
    }

    pub async fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Executed, StoreError> {
        let limit = self.statement_timeout;
        Ok(match &mut self.backend {
            Backend::MySql(conn) => {
                let done = within(
                    limit,
                    &mut self.unsettled,
                    bind_all!(sqlx::query::<MySql>(sql), args).execute(&mut **conn),
                )
                .await?;
                Executed { rows_affected: done.rows_affected(), last_insert_id: done.last_insert_id() as i64 }
            }
            Backend::Sqlite(conn) => {
                let done = bind_all!(sqlx::query::<Sqlite>(sql), args).execute(&mut **conn).await?;
                Executed { rows_affected: done.rows_affected(), last_insert_id: done.last_insert_rowid() }
            }
        })
    }

    pub async fn fetch_all(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<DbRow>, StoreError> {
        let limit = self.statement_timeout;
        Ok(match &mut self.backend {
            Backend::MySql(conn) => within(
                limit,
                &mut self.unsettled,
                bind_all!(sqlx::query::<MySql>(sql), args).fetch_all(&mut **conn),
            )
            .await?
            .into_iter()
            .map(DbRow::MySql)
            .collect(),
            Backend::Sqlite(conn) => bind_all!(sqlx::query::<Sqlite>(sql), args)
                .fetch_all(&mut **conn)
                .await?
                .into_iter()
                .map(DbRow::Sqlite)
                .collect(),
        })
    }

    pub async fn fetch_optional(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Option<DbRow>, StoreError> {
        let limit = self.statement_timeout;
        Ok(match &mut self.backend {
            Backend::MySql(conn) => within(
                limit,
                &mut self.unsettled,
                bind_all!(sqlx::query::<MySql>(sql), args).fetch_optional(&mut **conn),
            )
            .await?
            .map(DbRow::MySql),
            Backend::Sqlite(conn) => bind_all!(sqlx::query::<Sqlite>(sql), args)
                .fetch_optional(&mut **conn)
                .await?
                .map(DbRow::Sqlite),
        })
    }

    /// Runs text-protocol SQL (DDL, routines) that cannot be prepared.
    pub(crate) async fn execute_raw(&mut self, sql: &str) -> Result<(), StoreError> {
        // Migrations and routines: no statement timeout, a schema change may take its time.
        match &mut self.backend {
            Backend::MySql(conn) => conn.execute(sqlx::raw_sql(sql)).await.map(drop)?,
            Backend::Sqlite(conn) => conn.execute(sqlx::raw_sql(sql)).await.map(drop)?,
        }
        Ok(())
    }
}

macro_rules! get_column {
    ($row:expr, $col:expr, $ty:ty) => {
        match $row {
            DbRow::MySql(row) => row.try_get::<$ty, _>($col),
            DbRow::Sqlite(row) => row.try_get::<$ty, _>($col),
        }
        .map_err(|err| StoreError::Corrupt(format!("column {}: {err}", $col)))
    };
}

impl DbRow {
    pub fn i64(&self, col: &str) -> Result<i64, StoreError> {
        get_column!(self, col, i64)
    }

    pub fn opt_i64(&self, col: &str) -> Result<Option<i64>, StoreError> {
        get_column!(self, col, Option<i64>)
    }

    pub fn string(&self, col: &str) -> Result<String, StoreError> {
        self.opt_string(col)?.ok_or_else(|| StoreError::Corrupt(format!("column {col} is NULL")))
    }

    /// MySQL reports columns with a binary collation (`ascii_bin`, `utf8mb4_bin`, chosen so
    /// ids compare byte for byte) as VARBINARY, so text is read as bytes and checked as UTF-8.
    pub fn opt_string(&self, col: &str) -> Result<Option<String>, StoreError> {
        match self {
            DbRow::MySql(_) => get_column!(self, col, Option<Vec<u8>>)?
                .map(|bytes| {
                    String::from_utf8(bytes)
                        .map_err(|_| StoreError::Corrupt(format!("column {col} is not UTF-8")))
                })
                .transpose(),
            DbRow::Sqlite(_) => get_column!(self, col, Option<String>),
        }
    }

    pub fn bytes(&self, col: &str) -> Result<Vec<u8>, StoreError> {
        get_column!(self, col, Vec<u8>)
    }

    pub fn opt_bytes(&self, col: &str) -> Result<Option<Vec<u8>>, StoreError> {
        get_column!(self, col, Option<Vec<u8>>)
    }
}

/// An open transaction on a store-owned connection.
#[derive(Debug)]
pub(crate) enum Tx {
    MySql(MySqlTx),
    Sqlite(sqlx::Transaction<'static, Sqlite>),
}

impl Tx {
    pub(crate) fn conn(&mut self) -> DbConnection<'_> {
        match self {
            Tx::MySql(tx) => tx.lease.conn(tx.limit),
            Tx::Sqlite(tx) => DbConnection::from(&mut **tx),
        }
    }

    pub(crate) async fn commit(self) -> Result<(), StoreError> {
        match self {
            Tx::MySql(mut tx) => {
                let (conn, unsettled) = tx.lease.parts();
                within(tx.limit, &mut Some(unsettled), MySqlTransactionManager::commit(conn)).await?;
                tx.open = false;
            }
            Tx::Sqlite(tx) => tx.commit().await?,
        }
        Ok(())
    }

    /// Ends the transaction without its changes, at once (not when the connection is next
    /// used): before the caller opens another, which on SQLite needs the one writer.
    pub(crate) async fn rollback(self) -> Result<(), StoreError> {
        match self {
            Tx::MySql(mut tx) => {
                let (conn, unsettled) = tx.lease.parts();
                within(tx.limit, &mut Some(unsettled), MySqlTransactionManager::rollback(conn)).await?;
                tx.open = false;
            }
            Tx::Sqlite(tx) => tx.rollback().await?,
        }
        Ok(())
    }
}

type MySqlTransactionManager = <MySql as sqlx::Database>::TransactionManager;

/// A MySQL transaction on a [`MySqlLease`]: begun, committed and rolled back through sqlx's
/// transaction manager, as `sqlx::Transaction` does, which cannot be used here because it owns
/// its pool connection and would return one whose round trip went unanswered.
#[derive(Debug)]
pub(crate) struct MySqlTx {
    lease: MySqlLease,
    limit: Option<Duration>,
    /// Begun and not yet committed or rolled back.
    open: bool,
}

impl Drop for MySqlTx {
    fn drop(&mut self) {
        // As `sqlx::Transaction` does: the ROLLBACK is queued, and sent when the pool checks the
        // returned connection. A connection left unsettled is closed instead, which rolls back.
        if self.open && !self.lease.unsettled {
            let (conn, _) = self.lease.parts();
            MySqlTransactionManager::start_rollback(conn);
        }
    }
}

/// A connection checked out of a store pool, outside any explicit transaction.
#[derive(Debug)]
pub(crate) enum Pooled {
    MySql(MySqlLease, Option<Duration>),
    Sqlite(PoolConnection<Sqlite>),
}

impl Pooled {
    pub(crate) fn conn(&mut self) -> DbConnection<'_> {
        match self {
            Pooled::MySql(lease, limit) => lease.conn(*limit),
            Pooled::Sqlite(conn) => DbConnection::from(&mut **conn),
        }
    }
}

/// A MySQL connection checked out of the pool, closed rather than returned when dropped if a
/// round trip on it did not finish: given up on after the statement timeout, cut short by a
/// caller that went away, or broken. Across a partition such a socket is half-open (the packets
/// are dropped, no RST comes), and sqlx returns a connection to the pool only after a ping with
/// no time limit: the ping would hold one of the pool's connections until TCP gave up on the
/// socket (`net.ipv4.tcp_retries2`, some 15 minutes), or until a retransmission got through
/// after the heal, up to two minutes later. Closed, its place in the pool is free at once and
/// the next acquire opens a new connection.
#[derive(Debug)]
pub(crate) struct MySqlLease {
    conn: Option<PoolConnection<MySql>>,
    unsettled: bool,
}

impl MySqlLease {
    fn new(conn: PoolConnection<MySql>) -> MySqlLease {
        MySqlLease { conn: Some(conn), unsettled: false }
    }

    fn parts(&mut self) -> (&mut MySqlConnection, &mut bool) {
        let conn = self.conn.as_mut().expect("a lease holds its connection until it is dropped");
        (conn, &mut self.unsettled)
    }

    fn conn(&mut self, statement_timeout: Option<Duration>) -> DbConnection<'_> {
        let (conn, unsettled) = self.parts();
        DbConnection { backend: Backend::MySql(conn), statement_timeout, unsettled: Some(unsettled) }
    }
}

impl Drop for MySqlLease {
    fn drop(&mut self) {
        if self.unsettled
            && let Some(conn) = self.conn.take()
        {
            // Out of the pool (which may open another in its place), and closed as it drops:
            // no byte is sent or awaited on a socket nobody may be answering.
            drop(conn.detach());
        }
    }
}

/// The store's connection pools. SQLite allows one writer at a time, so writes go through a
/// single-connection pool (no `SQLITE_BUSY` between our own tasks) and reads through a
/// separate pool that WAL lets run beside the writer.
#[derive(Debug, Clone)]
pub(crate) enum Pools {
    MySql { pool: MySqlPool, statement_timeout: Option<Duration>, engine: Engine },
    Sqlite { writer: SqlitePool, reader: SqlitePool, engine: Engine },
}

/// How the store reaches its database.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// `mysql://user:password@host:port/database` (also `mariadb://`), or `sqlite://path`.
    pub url: String,
    /// Connections in the MySQL pool (or SQLite reader pool).
    pub connections_max: u32,
    /// How long a caller waits for a free connection before the store answers "unavailable".
    pub acquire_timeout: Duration,
    /// How long one MySQL statement may go unanswered before the store answers
    /// "unavailable" (`None`: wait as long as the server takes).
    pub statement_timeout: Option<Duration>,
    /// MySQL's `innodb_lock_wait_timeout`: a statement waiting longer for a row lock fails and
    /// its transaction is retried. Keep it below `statement_timeout`.
    pub lock_wait_timeout_seconds: u32,
}

impl ConnectOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            connections_max: 16,
            acquire_timeout: Duration::from_secs(10),
            statement_timeout: None,
            lock_wait_timeout_seconds: 10,
        }
    }
}

/// How long a pooled MySQL connection may sit unused before it is pinged before its next use.
const IDLE_BEFORE_PING: Duration = Duration::from_secs(1);

/// A MySQL connection this old is closed when next acquired and replaced by a new one, so a
/// node's connections follow a server restart, a failover or a proxy's rebalancing in time
/// (sqlx's default lifetime, which [`no_maintenance_task`] takes off the pool).
const CONNECTION_AGE_MAX: Duration = Duration::from_secs(30 * 60);

/// Takes sqlx's idle timeout and maximum lifetime off a pool, so that it spawns no
/// maintenance task. In sqlx 0.8 that task sizes each sweep by the pool's idle count, read
/// once (`for _ in 0..pool.num_idle()`), and does not await in the loop when the idle queue is
/// empty; the count is raised only after a returned connection has been made available
/// (`PoolInner::release`), so a connection returned on one thread and taken on another in
/// between wraps it to 2^64 - 1 for a moment. A sweep that starts then loops for ever inside
/// one poll: its worker never gets back to the runtime, and dropping the runtime, as every
/// short command does at exit, waits for it for ever (issue 40). With neither setting (and
/// no `min_connections`) the task is never spawned; MySQL connections are retired by age as
/// they are acquired instead ([`CONNECTION_AGE_MAX`]) and, idle, stay open until the node
/// stops or the server's `wait_timeout`; SQLite's, to a local file, need no retiring.
fn no_maintenance_task<DB: sqlx::Database>(
    options: sqlx::pool::PoolOptions<DB>,
) -> sqlx::pool::PoolOptions<DB> {
    options.idle_timeout(None).max_lifetime(None).min_connections(0)
}

impl Pools {
    pub(crate) async fn connect(options: &ConnectOptions) -> Result<Pools, StoreError> {
        let url = options.url.trim();
        if let Some(rest) = url.strip_prefix("mysql://").or_else(|| url.strip_prefix("mariadb://")) {
            let connect = MySqlConnectOptions::from_str(&format!("mysql://{rest}"))
                .map_err(|err| StoreError::invalid(Field::DatabaseUrl, err.to_string()))?;
            // One plain connection first: a pool that cannot connect reports only that it timed
            // out, while this names the cause (refused, unknown host, access denied, ...).
            // Bounded as the pool's connections are: a start against a database whose packets
            // vanish would otherwise wait out TCP's SYN retries (about two minutes) per attempt.
            let mut probe =
                within(Some(options.acquire_timeout), &mut None, MySqlConnection::connect_with(&connect))
                    .await
                    .map_err(StoreError::Unavailable)?;
            let engine =
                within(options.statement_timeout, &mut None, crate::engine::detect_mysql(&mut probe))
                    .await
                    .map_err(StoreError::Unavailable)?;
            let _ = probe.close().await;
            let lock_wait = options.lock_wait_timeout_seconds.max(1);
            // On a Galera member, reads and updates wait until the member has applied every
            // write set committed anywhere before them (see `engine.rs`).
            let sync_wait = if engine.galera {
                format!(", SESSION wsrep_sync_wait = {}", crate::engine::GALERA_SYNC_WAIT)
            } else {
                String::new()
            };
            let pool = no_maintenance_task(MySqlPoolOptions::new())
                .max_connections(options.connections_max.max(1))
                .acquire_timeout(options.acquire_timeout)
                // A ping before every use costs a round trip per operation under load; only a
                // connection that sat idle (where a restarted server or a dropped link would
                // show) is checked first.
                .test_before_acquire(false)
                .before_acquire(|conn, meta| {
                    Box::pin(async move {
                        if meta.age >= CONNECTION_AGE_MAX {
                            // Closed, and the acquire opens a new connection in its place.
                            return Ok(false);
                        }
                        if meta.idle_for >= IDLE_BEFORE_PING {
                            conn.ping().await?;
                        }
                        Ok(true)
                    })
                })
                .after_connect(move |conn, _meta| {
                    let sync_wait = sync_wait.clone();
                    Box::pin(async move {
                        // Claims use SKIP LOCKED; READ COMMITTED takes record locks only, so
                        // claimers never gap-lock the inserts of concurrent publishers.
                        conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED").await?;
                        let session = format!(
                            "SET SESSION innodb_lock_wait_timeout = {lock_wait}, SESSION time_zone = '+00:00'{sync_wait}"
                        );
                        conn.execute(session.as_str()).await?;
                        Ok(())
                    })
                })
                .connect_with(connect)
                .await
                .map_err(StoreError::Unavailable)?;
            return Ok(Pools::MySql { pool, statement_timeout: options.statement_timeout, engine });
        }
        if url.starts_with("sqlite:") {
            let connect = SqliteConnectOptions::from_str(url)
                .map_err(|err| StoreError::invalid(Field::DatabaseUrl, err.to_string()))?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                // FULL: a commit survives power loss, not only a process crash.
                .synchronous(SqliteSynchronous::Full)
                .busy_timeout(Duration::from_secs(10));
            let writer = no_maintenance_task(SqlitePoolOptions::new())
                .max_connections(1)
                .acquire_timeout(options.acquire_timeout)
                .connect_with(connect.clone())
                .await
                .map_err(StoreError::Unavailable)?;
            let reader = no_maintenance_task(SqlitePoolOptions::new())
                .max_connections(options.connections_max.clamp(1, 8))
                .acquire_timeout(options.acquire_timeout)
                .connect_with(connect.read_only(true))
                .await
                .map_err(StoreError::Unavailable)?;
            let version: String = sqlx::query_scalar("SELECT sqlite_version()")
                .fetch_one(&reader)
                .await
                .map_err(StoreError::Unavailable)?;
            let engine =
                Engine { product: Product::Sqlite, version, galera: false, group_replication: false };
            return Ok(Pools::Sqlite { writer, reader, engine });
        }
        Err(StoreError::invalid(
            Field::DatabaseUrl,
            format!("{url:?} is not a mysql://, mariadb:// or sqlite:// URL"),
        ))
    }

    pub(crate) fn dialect(&self) -> Dialect {
        match self {
            Pools::MySql { .. } => Dialect::MySql,
            Pools::Sqlite { .. } => Dialect::Sqlite,
        }
    }

    pub(crate) fn engine(&self) -> &Engine {
        match self {
            Pools::MySql { engine, .. } | Pools::Sqlite { engine, .. } => engine,
        }
    }

    /// A transaction that may write. On SQLite it takes the write lock at once
    /// (`BEGIN IMMEDIATE`), so a read-then-write transaction never fails to upgrade.
    pub(crate) async fn begin(&self) -> Result<Tx, StoreError> {
        Ok(match self {
            Pools::MySql { pool, statement_timeout, .. } => {
                let mut lease = MySqlLease::new(pool.acquire().await?);
                let (conn, unsettled) = lease.parts();
                within(*statement_timeout, &mut Some(unsettled), MySqlTransactionManager::begin(conn, None))
                    .await?;
                Tx::MySql(MySqlTx { lease, limit: *statement_timeout, open: true })
            }
            Pools::Sqlite { writer, .. } => Tx::Sqlite(begin_immediate(writer).await?),
        })
    }

    /// A connection for single autocommit writes.
    pub(crate) async fn writer(&self) -> Result<Pooled, StoreError> {
        Ok(match self {
            Pools::MySql { pool, statement_timeout, .. } => {
                Pooled::MySql(MySqlLease::new(pool.acquire().await?), *statement_timeout)
            }
            Pools::Sqlite { writer, .. } => Pooled::Sqlite(writer.acquire().await?),
        })
    }

    /// A connection for reads that never block writers.
    pub(crate) async fn reader(&self) -> Result<Pooled, StoreError> {
        Ok(match self {
            Pools::MySql { pool, statement_timeout, .. } => {
                Pooled::MySql(MySqlLease::new(pool.acquire().await?), *statement_timeout)
            }
            Pools::Sqlite { reader, .. } => Pooled::Sqlite(reader.acquire().await?),
        })
    }

    pub(crate) async fn close(&self) {
        match self {
            Pools::MySql { pool, .. } => pool.close().await,
            Pools::Sqlite { writer, reader, .. } => {
                writer.close().await;
                reader.close().await;
            }
        }
    }
}

/// `BEGIN IMMEDIATE` on SQLite's writer, in a task of its own, so that a caller dropped
/// mid-way (a server drops a request's future when its client disconnects) cannot cut it
/// short. sqlx's `begin_with` awaits once more after the `BEGIN` has taken effect and before
/// the `Transaction` that rolls back on drop exists; a caller dropped there returned the one
/// writer connection to the pool inside a transaction nothing would end, and every later
/// write failed with "begin_with at non-zero transaction depth". In its own task the begin
/// always finishes, and a transaction whose caller is gone is dropped there, so rolled back.
async fn begin_immediate(writer: &SqlitePool) -> Result<sqlx::Transaction<'static, Sqlite>, StoreError> {
    let writer = writer.clone();
    match tokio::spawn(async move { writer.begin_with("BEGIN IMMEDIATE").await }).await {
        Ok(begun) => Ok(begun?),
        Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
        // The runtime is shutting down.
        Err(_) => Err(StoreError::Unavailable(sqlx::Error::PoolClosed)),
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        match &err {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => StoreError::Unavailable(err),
            sqlx::Error::Database(db) if is_contention(db.as_ref()) => StoreError::Contention { attempts: 1 },
            sqlx::Error::Database(db) if is_member_unavailable(db.as_ref()) => StoreError::Unavailable(err),
            _ => StoreError::Database(err),
        }
    }
}

/// A duplicate key (MySQL 1062, ER_DUP_ENTRY).
pub(crate) fn is_duplicate_key(err: &StoreError) -> bool {
    matches!(err, StoreError::Database(sqlx::Error::Database(db))
        if db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>().is_some_and(|mysql| mysql.number() == 1062))
}

/// A Galera member that is not part of the primary component (cut off, or still joining)
/// refuses every statement with 1047 ("WSREP has not yet prepared node for application use"),
/// and a commit it cannot replicate with 1180 naming the primary component (the transaction is
/// rolled back): for its clients the database is unavailable until it rejoins.
fn is_member_unavailable(db: &dyn sqlx::error::DatabaseError) -> bool {
    db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>().is_some_and(|mysql| match mysql.number() {
        1047 => true,
        1180 => mysql.message().contains("Primary Component"),
        _ => false,
    })
}

/// Deadlock victims (on Galera also certification conflicts, reported as 1213, often at
/// COMMIT), lock-wait timeouts and a busy SQLite file: retrying the whole
/// transaction is the documented remedy for each.
fn is_contention(db: &dyn sqlx::error::DatabaseError) -> bool {
    if let Some(mysql) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        // 1213 ER_LOCK_DEADLOCK, 1205 ER_LOCK_WAIT_TIMEOUT
        return matches!(mysql.number(), 1213 | 1205);
    }
    // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with their extended codes.
    db.code().and_then(|code| code.parse::<i64>().ok()).is_some_and(|code| matches!(code & 0xff, 5 | 6))
}
