//! What the inbox's statements share: the column lists, the inbox and claimable clauses (as
//! macros, so statements can be `concat!`ed at compile time), the recipients predicate and
//! MySQL's index hint for lookups by event id.

use std::fmt::Write as _;

use inbox_core::Recipient;

use crate::db::Arg;
use crate::dialect::{Dialect, placeholders};

/// Columns of `agent_inbox` read into an `EventRecord`, in schema order.
macro_rules! event_columns {
    () => {
        "tenant_id, recipient_kind, recipient_id, inbox_seq, event_id, event_type, priority, \
         availability_at_utc, expires_at_utc, deduplication_key, ack_state, delivery_attempts, max_attempts, \
         visibility_lease_until_utc, lease_token_hash, lease_owner_session_id, next_retry_at_utc, \
         dead_letter_state, company_id, workspace_id, project_id, meeting_room_id, message_id, \
         routing_decision_id, memory_update_id, assignment_id, payload_json, payload_ref_type, payload_ref_id, \
         created_at_utc, acked_at_utc, updated_at_utc, terminal_at_utc, last_error"
    };
}

/// [`event_columns`] and the event's history: what the slow path reads under lock, what
/// retention copies to the archive, and what an operator's detail view shows. Kept apart so
/// claims and polls never read the history.
macro_rules! event_columns_with_history {
    () => {
        concat!(event_columns!(), ", history_json")
    };
}

/// One inbox (tenant, kind, recipient).
macro_rules! inbox {
    () => {
        "tenant_id = ? AND recipient_kind = ? AND recipient_id = ?"
    };
}

/// An event claimable at a time bound three times (now, now, now).
macro_rules! claimable {
    () => {
        "ack_state = 'available' AND availability_at_utc <= ? \
         AND (next_retry_at_utc IS NULL OR next_retry_at_utc <= ?) \
         AND (expires_at_utc IS NULL OR expires_at_utc > ?) AND delivery_attempts < max_attempts"
    };
}

/// A statement whose MySQL text ends in a locking clause that SQLite, whose `BEGIN IMMEDIATE`
/// already holds the only write lock, goes without.
macro_rules! locked {
    ($clause:literal, $($text:expr),+ $(,)?) => {
        Sql { mysql: concat!($($text),+, $clause), sqlite: concat!($($text),+) }
    };
}

/// Columns of `agent_inbox`, in the order an inserted row binds them.
pub(in crate::inbox) const EVENT_COLUMNS: &str = event_columns!();

/// [`EVENT_COLUMNS`] and `history_json`.
pub(in crate::inbox) const EVENT_COLUMNS_WITH_HISTORY: &str = event_columns_with_history!();

/// Number of columns in [`EVENT_COLUMNS`], which is also the number of values one inserted
/// inbox row binds.
pub(in crate::inbox) const EVENT_COLUMN_COUNT: usize = 34;

/// MySQL's index hint for statements that find rows by `event_id`. Under claim load InnoDB
/// sometimes walks the claim index instead, scanning and locking every claimed row of the
/// inbox, which turned concurrent acks into deadlocks in the benchmark.
pub(in crate::inbox) fn by_event_id(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::MySql => " FORCE INDEX (uq_agent_inbox_event)",
        Dialect::Sqlite => "",
    }
}

/// A predicate matching exactly these recipients (sorted), grouped by kind so each group is
/// one index range: `((recipient_kind = ? AND recipient_id IN (?, ?)) OR ...)`. Pushes the
/// binds it names onto `args`.
pub(in crate::inbox) fn recipients_predicate<'a>(
    recipients: &'a [Recipient],
    args: &mut Vec<Arg<'a>>,
) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inserted_row_binds_one_value_per_column() {
        assert_eq!(EVENT_COLUMNS.split(',').count(), EVENT_COLUMN_COUNT);
    }
}
