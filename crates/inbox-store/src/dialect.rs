//! What the two backends' SQL has in common: the [`Sql`] pair a subsystem's `queries.rs`
//! names a statement with where the text differs, the row-locking clauses, and IN-list
//! builders. Each subsystem's statements live in its own `queries.rs`.
//!
//! The SQL runs on MySQL 8.0+, MariaDB 10.6+ and SQLite 3.35+: no `RETURNING`, no
//! backend-only functions. Times are bound as parameters (milliseconds since the epoch)
//! rather than read with `NOW()`, so one corrected clock decides every lease.

/// A named statement whose text differs between the backends; [`Sql::text`] picks one. Public
/// (through `host`) so a host application names its statements the way the store does.
#[derive(Debug, Clone, Copy)]
pub struct Sql {
    pub mysql: &'static str,
    pub sqlite: &'static str,
}

impl Sql {
    pub fn text(self, dialect: Dialect) -> &'static str {
        match dialect {
            Dialect::MySql => self.mysql,
            Dialect::Sqlite => self.sqlite,
        }
    }
}

/// Which SQL flavour a store speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    MySql,
    Sqlite,
}

impl Dialect {
    pub fn name(self) -> &'static str {
        match self {
            Dialect::MySql => "mysql",
            Dialect::Sqlite => "sqlite",
        }
    }

    /// Appended to a SELECT whose rows the transaction will change: lock them, waiting.
    pub fn for_update(self) -> &'static str {
        match self {
            Dialect::MySql => " FOR UPDATE",
            // BEGIN IMMEDIATE already holds the only write lock.
            Dialect::Sqlite => "",
        }
    }

    /// Like [`Self::for_update`], but rows another transaction holds are skipped, so many
    /// claimers on one inbox each take different rows instead of queueing.
    pub(crate) fn for_update_skip_locked(self) -> &'static str {
        match self {
            Dialect::MySql => " FOR UPDATE SKIP LOCKED",
            Dialect::Sqlite => "",
        }
    }
}

/// Appends `item` `n` times, comma separated.
pub fn push_repeated(sql: &mut String, n: usize, item: &str) {
    for i in 0..n {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(item);
    }
}

/// `?, ?, ?` for an IN list of `n` values.
pub fn placeholders(n: usize) -> String {
    let mut sql = String::with_capacity(n * 3);
    push_repeated(&mut sql, n, "?");
    sql
}
