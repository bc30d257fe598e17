//! The store's own SQL statements, by name: the clock read and the readiness ping, engine
//! detection and its proof (`engine.rs`, `engine_check.rs`), and migration bookkeeping and locks
//! (`migrate.rs`). The subsystems keep theirs in their own `queries.rs`.

use crate::dialect::Sql;

// ---- clock and readiness ----

/// The database server's clock in milliseconds since the epoch, as `now_ms`.
pub(crate) const CLOCK_NOW: Sql = Sql {
    mysql: "SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) AS now_ms",
    sqlite: "SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) AS now_ms",
};

/// A trivial query whose answer proves the database answers.
pub(crate) const PING: &str = "SELECT 1 AS one";

// ---- purge lag (purge_lag.rs) ----

/// InnoDB's history list length, as `n` (MySQL 8 and MariaDB both keep this metric on by
/// default; no row when it is off).
pub(crate) const HISTORY_LIST_LENGTH: &str = "SELECT CAST(count AS SIGNED) AS n \
    FROM information_schema.innodb_metrics WHERE name = 'trx_rseg_history_len' AND count IS NOT NULL";

/// Seconds since the oldest open InnoDB transaction started, as `n` (0 when none is open);
/// reading `innodb_trx` needs the PROCESS privilege.
pub(crate) const OLDEST_TRANSACTION_AGE: &str = "SELECT CAST(COALESCE(MAX(TIMESTAMPDIFF(SECOND, trx_started, NOW())), 0) \
    AS SIGNED) AS n FROM information_schema.innodb_trx";

// ---- engine detection (MySQL protocol) ----

/// The server's version text, as `v`; MariaDB's names itself.
pub(crate) const SERVER_VERSION: &str = "SELECT VERSION() AS v";

/// Whether Galera replication is on: one row (name, value) on a Galera-capable server.
pub(crate) const WSREP_ON: &str = "SHOW VARIABLES LIKE 'wsrep_on'";

/// This server's row among the Group Replication members; none outside a group (or an error
/// where the table is missing, read the same).
pub(crate) const GROUP_REPLICATION_MEMBER: &str = "SELECT MEMBER_STATE FROM \
    performance_schema.replication_group_members WHERE MEMBER_ID = @@server_uuid";

// ---- engine check: a scratch table and two connections ----

/// The scratch table the engine check locks and reads rows of.
pub(crate) const CREATE_PROBE_TABLE: &str = "CREATE TABLE IF NOT EXISTS agent_inbox_engine_probe (\
    probe_id BIGINT NOT NULL PRIMARY KEY, probe_value BIGINT NOT NULL) ENGINE=InnoDB";

/// The server a connection reached, as `server`: host name and port, unique per Galera member.
pub(crate) const SERVER_OF_CONNECTION: &str = "SELECT CONCAT(@@hostname, ':', @@port) AS server";

/// Two probe rows with value 0 (key, key + 1).
pub(crate) const INSERT_PROBE_ROWS: &str =
    "INSERT INTO agent_inbox_engine_probe (probe_id, probe_value) VALUES (?, 0), (?, 0)";

/// The first of the two probe rows no other transaction holds, locked (key, key + 1): what a
/// claim does.
pub(crate) const PICK_PROBE_ROW: &str = "SELECT probe_id FROM agent_inbox_engine_probe WHERE probe_id IN (?, ?) \
    ORDER BY probe_id LIMIT 1 FOR UPDATE SKIP LOCKED";

/// A probe row's value (key).
pub(crate) const READ_PROBE_VALUE: &str =
    "SELECT probe_value FROM agent_inbox_engine_probe WHERE probe_id = ?";

/// Sets a probe row's value to 1 (key).
pub(crate) const SET_PROBE_VALUE: &str =
    "UPDATE agent_inbox_engine_probe SET probe_value = 1 WHERE probe_id = ?";

/// Removes the two probe rows (key, key + 1).
pub(crate) const DELETE_PROBE_ROWS: &str = "DELETE FROM agent_inbox_engine_probe WHERE probe_id IN (?, ?)";

// ---- migrations ----

/// Serializes migrations: on MySQL a lock named after the database, so databases on one server
/// migrate independently (20 + 40 characters, within the 64 a lock name may have), `locked` 1
/// once held within 60 s; on SQLite the write lock.
pub(crate) const TAKE_MIGRATION_LOCK: Sql = Sql {
    mysql: "SELECT GET_LOCK(CONCAT('agent_inbox_migrate:', SHA1(COALESCE(DATABASE(), ''))), 60) AS locked",
    sqlite: "BEGIN IMMEDIATE",
};

/// Releases [`TAKE_MIGRATION_LOCK`]; on SQLite it commits what the migrations did.
pub(crate) const RELEASE_MIGRATION_LOCK: Sql = Sql {
    mysql: "SELECT RELEASE_LOCK(CONCAT('agent_inbox_migrate:', SHA1(COALESCE(DATABASE(), '')))) AS released",
    sqlite: "COMMIT",
};

/// The ledger of applied migrations.
pub(crate) const CREATE_LEDGER: &str = "CREATE TABLE IF NOT EXISTS agent_inbox_migrations (\
    version BIGINT NOT NULL PRIMARY KEY, name VARCHAR(128) NOT NULL, applied_at_utc BIGINT NOT NULL)";

/// Every version the ledger records.
pub(crate) const APPLIED_VERSIONS: &str = "SELECT version FROM agent_inbox_migrations";

/// Records one applied migration (version, name, applied at).
pub(crate) const RECORD_MIGRATION: &str =
    "INSERT INTO agent_inbox_migrations (version, name, applied_at_utc) VALUES (?, ?, ?)";

/// The row lock that serializes migrations across Galera members.
pub(crate) const CREATE_GALERA_LOCK_TABLE: &str = "CREATE TABLE IF NOT EXISTS agent_inbox_migration_lock (\
    lock_id INT NOT NULL PRIMARY KEY, holder VARCHAR(128) NOT NULL, expires_at_utc BIGINT NOT NULL)";

/// A lock row whose holder is presumed gone (now).
pub(crate) const DELETE_EXPIRED_GALERA_LOCK: &str =
    "DELETE FROM agent_inbox_migration_lock WHERE lock_id = 1 AND expires_at_utc < ?";

/// Takes the lock row unless another holder has it: one row affected when taken (holder,
/// expires at).
pub(crate) const TAKE_GALERA_LOCK: &str =
    "INSERT IGNORE INTO agent_inbox_migration_lock (lock_id, holder, expires_at_utc) VALUES (1, ?, ?)";

/// Gives the lock row up, if this holder still has it (holder).
pub(crate) const RELEASE_GALERA_LOCK: &str =
    "DELETE FROM agent_inbox_migration_lock WHERE lock_id = 1 AND holder = ?";
