//! Every SQL statement the store runs, by name. The two backends share almost all of them;
//! the differences (upsert syntax and row-locking clauses) are confined to this file.
//!
//! The SQL runs on MySQL 8.0+, MariaDB 10.6+ and SQLite 3.35+: no `RETURNING`, no
//! backend-only functions. Times are bound as parameters (milliseconds since the epoch)
//! rather than read with `NOW()`, so one corrected clock decides every lease.

use std::fmt::Write as _;

use inbox_core::Recipient;

use crate::db::Arg;

/// A named statement whose text differs between the backends; [`Sql::text`] picks one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sql {
    pub mysql: &'static str,
    pub sqlite: &'static str,
}

impl Sql {
    pub(crate) fn text(self, dialect: Dialect) -> &'static str {
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

/// Columns of `agent_inbox` read into an `EventRecord`, in schema order.
pub(crate) const EVENT_COLUMNS: &str = "tenant_id, recipient_kind, recipient_id, inbox_seq, event_id, \
    event_type, priority, availability_at_utc, expires_at_utc, deduplication_key, ack_state, \
    delivery_attempts, max_attempts, visibility_lease_until_utc, lease_token_hash, \
    lease_owner_session_id, next_retry_at_utc, dead_letter_state, company_id, workspace_id, \
    project_id, meeting_room_id, message_id, routing_decision_id, memory_update_id, assignment_id, \
    payload_json, payload_ref_type, payload_ref_id, created_at_utc, acked_at_utc, updated_at_utc, \
    terminal_at_utc, last_error";

/// Number of columns in [`EVENT_COLUMNS`], which is also the number of values one inserted
/// inbox row binds.
pub(crate) const EVENT_COLUMN_COUNT: usize = 34;

/// The text of [`EVENT_COLUMNS_WITH_HISTORY`], for named statements built with `concat!`.
macro_rules! event_columns_with_history {
    () => {
        "tenant_id, recipient_kind, recipient_id, inbox_seq, event_id, event_type, priority, \
         availability_at_utc, expires_at_utc, deduplication_key, ack_state, delivery_attempts, max_attempts, \
         visibility_lease_until_utc, lease_token_hash, lease_owner_session_id, next_retry_at_utc, \
         dead_letter_state, company_id, workspace_id, project_id, meeting_room_id, message_id, \
         routing_decision_id, memory_update_id, assignment_id, payload_json, payload_ref_type, payload_ref_id, \
         created_at_utc, acked_at_utc, updated_at_utc, terminal_at_utc, last_error, history_json"
    };
}
pub(crate) use event_columns_with_history;

/// [`EVENT_COLUMNS`] and the event's history: what the slow path reads under lock, what
/// retention copies to the archive, and what an operator's detail view shows. Kept apart so
/// claims and polls never read the history.
pub(crate) const EVENT_COLUMNS_WITH_HISTORY: &str = event_columns_with_history!();

/// The predicate that makes an event claimable at a time bound three times.
pub(crate) const CLAIMABLE: &str = "ack_state = 'available' AND availability_at_utc <= ? \
    AND (next_retry_at_utc IS NULL OR next_retry_at_utc <= ?) \
    AND (expires_at_utc IS NULL OR expires_at_utc > ?) AND delivery_attempts < max_attempts";

pub(crate) const INBOX: &str = "tenant_id = ? AND recipient_kind = ? AND recipient_id = ?";

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

    /// An index hint for statements that find rows by `event_id`. Under claim load InnoDB
    /// sometimes walks the claim index instead, scanning and locking every claimed row of the
    /// inbox, which turned concurrent acks into deadlocks in the benchmark.
    pub(crate) fn by_event_id(self) -> &'static str {
        match self {
            Dialect::MySql => " FORCE INDEX (uq_agent_inbox_event)",
            Dialect::Sqlite => "",
        }
    }

    /// `history_json` with `parts` (SQL expressions, such as `?` and `delivery_attempts`)
    /// appended, in one expression: how a fast path records history without reading the row.
    pub(crate) fn history_appended(self, parts: &[&str]) -> String {
        match self {
            Dialect::MySql => format!("CONCAT(COALESCE(history_json, ''), {})", parts.join(", ")),
            Dialect::Sqlite => format!("COALESCE(history_json, '') || {}", parts.join(" || ")),
        }
    }

    /// The lease owner's `,"session_id":"..."` for a history entry built in SQL, or nothing
    /// when the row names none. Session ids are word characters, so they need no escaping.
    pub(crate) fn history_session_of_lease_owner(self) -> &'static str {
        match self {
            Dialect::MySql => {
                "CASE WHEN lease_owner_session_id IS NULL THEN '' \
                ELSE CONCAT(',\"session_id\":\"', lease_owner_session_id, '\"') END"
            }
            Dialect::Sqlite => {
                "CASE WHEN lease_owner_session_id IS NULL THEN '' \
                ELSE ',\"session_id\":\"' || lease_owner_session_id || '\"' END"
            }
        }
    }

    /// Inserts head rows for `n` recipients that lack one and locks every one of them, in the
    /// order given. With `increment`, existing heads also advance by one.
    /// MySQL only: advances (or creates) one head, recording the new value with
    /// `LAST_INSERT_ID(expr)` so the statement's answer carries it and no SELECT is needed.
    pub(crate) fn upsert_head_reporting_seq(self) -> String {
        debug_assert_eq!(self, Dialect::MySql, "LAST_INSERT_ID(expr) is MySQL's");
        "INSERT INTO inbox_head (tenant_id, recipient_kind, recipient_id, head_seq, oldest_available_seq, updated_at_utc) \
         VALUES (?, ?, ?, 1, 1, ?) ON DUPLICATE KEY UPDATE head_seq = LAST_INSERT_ID(head_seq + 1)"
            .to_owned()
    }

    pub(crate) fn upsert_heads(self, n: usize, increment: bool) -> String {
        let first = if increment { 1 } else { 0 };
        let mut sql = String::from(
            "INSERT INTO inbox_head (tenant_id, recipient_kind, recipient_id, head_seq, oldest_available_seq, updated_at_utc) VALUES ",
        );
        push_repeated(&mut sql, n, &format!("(?, ?, ?, {first}, 1, ?)"));
        let advance = if increment { "head_seq + 1" } else { "head_seq" };
        match self {
            Dialect::MySql => {
                let _ = write!(sql, " ON DUPLICATE KEY UPDATE head_seq = {advance}");
            }
            Dialect::Sqlite => {
                let _ = write!(
                    sql,
                    " ON CONFLICT (tenant_id, recipient_kind, recipient_id) DO UPDATE SET head_seq = {advance}"
                );
            }
        }
        sql
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

/// A predicate matching exactly these recipients (sorted), grouped by kind so each group is
/// one index range: `((recipient_kind = ? AND recipient_id IN (?, ?)) OR ...)`.
pub(crate) fn recipients_predicate<'a>(recipients: &'a [Recipient], args: &mut Vec<Arg<'a>>) -> String {
    let mut sql = String::from("(");
    let mut groups = recipients.chunk_by(|a, b| a.kind == b.kind).peekable();
    while let Some(group) = groups.next() {
        let _ = write!(sql, "(recipient_kind = ? AND recipient_id IN ({}))", placeholders(group.len()));
        args.push(Arg::Str(group[0].kind.as_str()));
        args.extend(group.iter().map(|r| Arg::Str(r.id.as_str())));
        if groups.peek().is_some() {
            sql.push_str(" OR ");
        }
    }
    sql.push(')');
    sql
}
