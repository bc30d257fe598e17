//! Versioned schema migrations, applied by `serve` at start and by the `migrate` command,
//! never by hand. Each backend has its own numbered SQL files; a table records what ran.

use crate::db::{Arg, DbConnection};
use crate::{Dialect, SqlStore, StoreError, queries};

struct Migration {
    version: i64,
    name: &'static str,
    sql: &'static str,
}

/// Files whose first line carries this marker hold one statement (a stored routine whose body
/// contains semicolons); other files are split at semicolons that end a line.
const SINGLE_STATEMENT: &str = "-- agent-inbox: single statement";

const MYSQL: &[Migration] = &[
    Migration { version: 1, name: "core tables", sql: include_str!("migrations/mysql/0001_core.sql") },
    // MySQL 8.0 has no CREATE OR REPLACE PROCEDURE and a routine's file holds one statement, so
    // a routine is dropped in one migration and created in the next.
    Migration {
        version: 2,
        name: "drop publish procedure",
        sql: include_str!("migrations/mysql/0002_drop_publish_procedure.sql"),
    },
    Migration {
        version: 3,
        name: "publish procedure",
        sql: include_str!("migrations/mysql/0003_publish_procedure.sql"),
    },
    Migration { version: 4, name: "auth tables", sql: include_str!("migrations/mysql/0004_auth.sql") },
    Migration { version: 5, name: "meeting rooms", sql: include_str!("migrations/mysql/0005_rooms.sql") },
    Migration {
        version: 6,
        name: "stream tickets",
        sql: include_str!("migrations/mysql/0006_stream_tickets.sql"),
    },
    Migration { version: 7, name: "trust", sql: include_str!("migrations/mysql/0007_trust.sql") },
    Migration {
        version: 8,
        name: "single active session",
        sql: include_str!("migrations/mysql/0008_single_active_session.sql"),
    },
    Migration { version: 9, name: "event history", sql: include_str!("migrations/mysql/0009_history.sql") },
    Migration {
        version: 10,
        name: "signed-out tokens",
        sql: include_str!("migrations/mysql/0010_signed_out_tokens.sql"),
    },
    Migration {
        version: 11,
        name: "sealed secrets",
        sql: include_str!("migrations/mysql/0011_sealed_secrets.sql"),
    },
    Migration {
        version: 12,
        name: "claim floor",
        sql: include_str!("migrations/mysql/0012_claim_floor.sql"),
    },
    Migration {
        version: 13,
        name: "fair delivery",
        sql: include_str!("migrations/mysql/0013_fair_delivery.sql"),
    },
    Migration {
        version: 14,
        name: "callback disabling",
        sql: include_str!("migrations/mysql/0014_callback_disabling.sql"),
    },
    Migration { version: 15, name: "a2a tasks", sql: include_str!("migrations/mysql/0015_a2a.sql") },
    Migration {
        version: 16,
        name: "a2a pruning",
        sql: include_str!("migrations/mysql/0016_a2a_pruning.sql"),
    },
];

const SQLITE: &[Migration] = &[
    Migration { version: 1, name: "core tables", sql: include_str!("migrations/sqlite/0001_core.sql") },
    Migration { version: 4, name: "auth tables", sql: include_str!("migrations/sqlite/0004_auth.sql") },
    Migration { version: 5, name: "meeting rooms", sql: include_str!("migrations/sqlite/0005_rooms.sql") },
    Migration {
        version: 6,
        name: "stream tickets",
        sql: include_str!("migrations/sqlite/0006_stream_tickets.sql"),
    },
    Migration { version: 7, name: "trust", sql: include_str!("migrations/sqlite/0007_trust.sql") },
    Migration {
        version: 8,
        name: "single active session",
        sql: include_str!("migrations/sqlite/0008_single_active_session.sql"),
    },
    Migration { version: 9, name: "event history", sql: include_str!("migrations/sqlite/0009_history.sql") },
    Migration {
        version: 10,
        name: "signed-out tokens",
        sql: include_str!("migrations/sqlite/0010_signed_out_tokens.sql"),
    },
    Migration {
        version: 11,
        name: "sealed secrets",
        sql: include_str!("migrations/sqlite/0011_sealed_secrets.sql"),
    },
    Migration {
        version: 12,
        name: "claim floor",
        sql: include_str!("migrations/sqlite/0012_claim_floor.sql"),
    },
    Migration {
        version: 13,
        name: "fair delivery",
        sql: include_str!("migrations/sqlite/0013_fair_delivery.sql"),
    },
    Migration {
        version: 14,
        name: "callback disabling",
        sql: include_str!("migrations/sqlite/0014_callback_disabling.sql"),
    },
    Migration { version: 15, name: "a2a tasks", sql: include_str!("migrations/sqlite/0015_a2a.sql") },
    Migration {
        version: 16,
        name: "a2a pruning",
        sql: include_str!("migrations/sqlite/0016_a2a_pruning.sql"),
    },
];

/// How long a migration lock row is honoured: far longer than migrating takes.
const GALERA_LOCK_MS: i64 = 300_000;

/// Releases of the Galera lock row that lost certification, tried again 50 ms apart.
const RELEASE_ATTEMPTS_MAX: u32 = 100;

/// A certification conflict on the lock row means another node took it first.
fn ignore_contention(err: StoreError) -> Result<(), StoreError> {
    match err {
        StoreError::Contention { .. } => Ok(()),
        other => Err(other),
    }
}

impl SqlStore {
    /// Applies every migration not yet recorded; returns how many ran. Several nodes may start
    /// at once: MySQL serializes them with a lock named after the database (so databases on one
    /// server migrate independently), SQLite with its write lock.
    pub async fn migrate(&self) -> Result<usize, StoreError> {
        let mut pooled = self.pools().writer().await?;
        let mut conn = pooled.conn();
        let migrations = match self.dialect() {
            Dialect::MySql => MYSQL,
            Dialect::Sqlite => SQLITE,
        };
        let lock = queries::TAKE_MIGRATION_LOCK.text(self.dialect());
        let unlock = queries::RELEASE_MIGRATION_LOCK.text(self.dialect());
        let galera = self.engine().galera;
        let holder: String = crate::entropy::random_bytes::<8>().iter().map(|b| format!("{b:02x}")).collect();
        match self.dialect() {
            Dialect::MySql if galera => self.lock_cluster_wide(&mut conn, &holder).await?,
            Dialect::MySql => {
                let locked =
                    conn.fetch_optional(lock, &[]).await?.map(|r| r.opt_i64("locked")).transpose()?.flatten();
                if locked != Some(1) {
                    return Err(StoreError::Migration(
                        "another node held the migration lock for 60 s".into(),
                    ));
                }
            }
            Dialect::Sqlite => conn.execute_raw(lock).await?,
        }
        let result = self.apply_pending(&mut conn, migrations).await;
        match (self.dialect(), &result) {
            (Dialect::Sqlite, Err(_)) => conn.execute_raw("ROLLBACK").await?,
            (Dialect::Sqlite, Ok(_)) => conn.execute_raw(unlock).await?,
            (Dialect::MySql, _) if galera => self.unlock_cluster_wide(&mut conn, &holder).await?,
            (Dialect::MySql, _) => drop(conn.fetch_optional(unlock, &[]).await?),
        }
        result
    }

    /// `GET_LOCK` is local to one Galera member, so nodes on different members would migrate
    /// at once. This lock is a row instead: certification lets one insert of it win
    /// cluster-wide. A holder that died leaves a row that expires after [`GALERA_LOCK_MS`].
    async fn lock_cluster_wide(&self, conn: &mut DbConnection<'_>, holder: &str) -> Result<(), StoreError> {
        conn.execute_raw(queries::CREATE_GALERA_LOCK_TABLE).await?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let now = self.now().get();
            conn.execute(queries::DELETE_EXPIRED_GALERA_LOCK, &[Arg::I64(now)])
                .await
                .map(drop)
                .or_else(ignore_contention)?;
            let taken = conn
                .execute(queries::TAKE_GALERA_LOCK, &[Arg::Str(holder), Arg::I64(now + GALERA_LOCK_MS)])
                .await
                .map(|done| done.rows_affected == 1)
                .or_else(|err| ignore_contention(err).map(|()| false))?;
            if taken {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(StoreError::Migration("another node held the migration lock for 60 s".into()));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Gives the lock row up. A release that loses certification to another node's attempt at
    /// the lock is tried again: left behind, the row would hold every node's start (this one's
    /// next attempt included, under a new holder) until it expires after [`GALERA_LOCK_MS`].
    async fn unlock_cluster_wide(&self, conn: &mut DbConnection<'_>, holder: &str) -> Result<(), StoreError> {
        let mut lost = 0;
        loop {
            match conn.execute(queries::RELEASE_GALERA_LOCK, &[Arg::Str(holder)]).await {
                Ok(_) => return Ok(()),
                Err(StoreError::Contention { .. }) if lost < RELEASE_ATTEMPTS_MAX => {
                    lost += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(err) => return Err(err),
            }
        }
    }

    async fn apply_pending(
        &self,
        conn: &mut DbConnection<'_>,
        migrations: &[Migration],
    ) -> Result<usize, StoreError> {
        conn.execute_raw(queries::CREATE_LEDGER).await?;
        let applied: Vec<i64> = conn
            .fetch_all(queries::APPLIED_VERSIONS, &[])
            .await?
            .iter()
            .map(|row| row.i64("version"))
            .collect::<Result<_, _>>()?;
        let mut ran = 0;
        for migration in migrations.iter().filter(|m| !applied.contains(&m.version)) {
            for statement in statements(migration.sql) {
                conn.execute_raw(statement).await.map_err(|err| {
                    StoreError::Migration(format!(
                        "{} (version {}): {err}",
                        migration.name, migration.version
                    ))
                })?;
            }
            conn.execute(
                queries::RECORD_MIGRATION,
                &[Arg::I64(migration.version), Arg::Str(migration.name), Arg::I64(self.now().get())],
            )
            .await?;
            ran += 1;
        }
        Ok(ran)
    }
}

fn statements(sql: &'static str) -> Vec<&'static str> {
    if sql.starts_with(SINGLE_STATEMENT) {
        return vec![sql];
    }
    sql.split(";\n").map(str::trim).filter(|s| !s.is_empty() && !is_comment_only(s)).collect()
}

fn is_comment_only(statement: &str) -> bool {
    statement.lines().all(|line| line.trim().is_empty() || line.trim_start().starts_with("--"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_split_into_statements_without_comment_fragments() {
        let parts = statements("-- header\nCREATE TABLE a (x INT);\n\n-- note\nCREATE TABLE b (y INT);\n");
        assert_eq!(parts.len(), 2);
        assert!(parts[0].ends_with("CREATE TABLE a (x INT)"));
        assert_eq!(
            statements("-- agent-inbox: single statement\nCREATE PROCEDURE p() BEGIN SELECT 1; END").len(),
            1
        );
    }
}
