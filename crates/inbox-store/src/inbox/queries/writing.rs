//! Statements that write events: publishing (heads, rows, signals), the fast paths' history
//! built in SQL, and the slow path's write-back.

use std::fmt::Write as _;

use super::shared::*;
use crate::dialect::{Dialect, Sql, placeholders, push_repeated};

// ---- publish ----

/// MySQL only: advances (or creates) one head, recording the new value with
/// `LAST_INSERT_ID(expr)` so the statement's answer carries it and no SELECT is needed
/// (inbox, now).
pub(in crate::inbox) const ADVANCE_HEAD_REPORTING_SEQ: &str = "INSERT INTO inbox_head \
    (tenant_id, recipient_kind, recipient_id, head_seq, oldest_available_seq, updated_at_utc) \
    VALUES (?, ?, ?, 1, 1, ?) ON DUPLICATE KEY UPDATE head_seq = LAST_INSERT_ID(head_seq + 1)";

/// Inserts head rows for `n` recipients that lack one and locks every one of them, in the
/// order given (inbox, now per head). With `increment`, existing heads also advance by one.
pub(in crate::inbox) fn upsert_heads(dialect: Dialect, n: usize, increment: bool) -> String {
    let first = if increment { 1 } else { 0 };
    let mut sql = String::from(
        "INSERT INTO inbox_head (tenant_id, recipient_kind, recipient_id, head_seq, oldest_available_seq, updated_at_utc) VALUES ",
    );
    push_repeated(&mut sql, n, &format!("(?, ?, ?, {first}, 1, ?)"));
    let advance = if increment { "head_seq + 1" } else { "head_seq" };
    match dialect {
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

/// The rows one deduplication key already put in these recipients' inboxes, locked: a
/// locking read sees the latest committed rows even inside a host transaction at REPEATABLE
/// READ (tenant, key, the predicate's binds).
pub(in crate::inbox) fn rows_of_key(dialect: Dialect, recipients: &str) -> String {
    format!(
        "SELECT recipient_kind, recipient_id, event_id, inbox_seq FROM agent_inbox \
         WHERE tenant_id = ? AND deduplication_key = ? AND {recipients}{}",
        dialect.for_update()
    )
}

/// The rows any of `n` deduplication keys already put in these recipients' inboxes, locked
/// (tenant, `n` keys, the predicate's binds).
pub(in crate::inbox) fn rows_of_keys(dialect: Dialect, n: usize, recipients: &str) -> String {
    format!(
        "SELECT recipient_kind, recipient_id, event_id, inbox_seq, deduplication_key FROM agent_inbox \
         WHERE tenant_id = ? AND deduplication_key IN ({}) AND {recipients}{}",
        placeholders(n),
        dialect.for_update()
    )
}

/// Advances these recipients' locked heads by one (now, tenant, the predicate's binds).
pub(in crate::inbox) fn advance_heads(recipients: &str) -> String {
    format!(
        "UPDATE inbox_head SET head_seq = head_seq + 1, updated_at_utc = ? WHERE tenant_id = ? AND {recipients}"
    )
}

/// These recipients' heads (tenant, the predicate's binds).
pub(in crate::inbox) fn heads_of(recipients: &str) -> String {
    format!(
        "SELECT recipient_kind, recipient_id, head_seq FROM inbox_head WHERE tenant_id = ? AND {recipients}"
    )
}

/// How [`write_heads`] changes a head that exists: to the value given.
pub(in crate::inbox) const HEAD_SET_TO: Sql = Sql {
    mysql: " ON DUPLICATE KEY UPDATE head_seq = VALUES(head_seq), updated_at_utc = VALUES(updated_at_utc)",
    sqlite: " ON CONFLICT (tenant_id, recipient_kind, recipient_id) \
             DO UPDATE SET head_seq = excluded.head_seq, updated_at_utc = excluded.updated_at_utc",
};

/// How [`write_heads`] changes a head that exists: up by the value given.
pub(in crate::inbox) const HEAD_ADDED_TO: Sql = Sql {
    mysql: " ON DUPLICATE KEY UPDATE head_seq = head_seq + VALUES(head_seq), updated_at_utc = VALUES(updated_at_utc)",
    sqlite: " ON CONFLICT (tenant_id, recipient_kind, recipient_id) \
             DO UPDATE SET head_seq = head_seq + excluded.head_seq, updated_at_utc = excluded.updated_at_utc",
};

/// Writes `n` heads, a new one starting at the value given (inbox, value, now per head);
/// `on_existing` is [`HEAD_SET_TO`] or [`HEAD_ADDED_TO`].
pub(in crate::inbox) fn write_heads(dialect: Dialect, n: usize, on_existing: Sql) -> String {
    let mut sql = String::from(
        "INSERT INTO inbox_head (tenant_id, recipient_kind, recipient_id, head_seq, oldest_available_seq, updated_at_utc) VALUES ",
    );
    push_repeated(&mut sql, n, "(?, ?, ?, ?, 1, ?)");
    sql.push_str(on_existing.text(dialect));
    sql
}

/// `n` new inbox rows ([`EVENT_COLUMN_COUNT`] values each, in [`EVENT_COLUMNS`] order, then
/// the row's `fair_rank`, which only publishing writes and no read needs).
pub(in crate::inbox) fn insert_events(n: usize) -> String {
    let mut sql = format!("INSERT INTO agent_inbox ({EVENT_COLUMNS}, fair_rank) VALUES ");
    let row = format!("({})", placeholders(EVENT_COLUMN_COUNT + 1));
    push_repeated(&mut sql, n, &row);
    sql
}

/// The `inbox.updated` signal every node's notifier reads (tenant, heads as JSON, number of
/// recipients, now).
pub(in crate::inbox) const INSERT_UPDATED_SIGNAL: &str = "INSERT INTO outbox_signal (tenant_id, signal_type, \
    recipient_heads, n_recipients, status, attempt_count, created_at_utc) \
    VALUES (?, 'inbox.updated', ?, ?, 'pending', 0, ?)";

/// The `inbox.nudged` signal: events behind the head of one inbox went back to it (tenant,
/// `INBOX_NUDGED_SIGNAL`, the inbox and its highest reopened seq as JSON, now). Streams
/// announce it though no head moved, so agents claim events their cursor has passed.
pub(in crate::inbox) const INSERT_NUDGED_SIGNAL: &str = "INSERT INTO outbox_signal (tenant_id, signal_type, \
    recipient_heads, n_recipients, status, attempt_count, created_at_utc) \
    VALUES (?, ?, ?, 1, 'pending', 0, ?)";

/// Makes the agent's active callbacks send its current head once more, a callback's nudge:
/// they are due again until the head is delivered (tenant, kind, agent, tenant, agent).
pub(in crate::inbox) const REDELIVER_CURRENT_HEAD: &str = "UPDATE callback_registration SET delivered_head_seq = \
    (SELECT h.head_seq - 1 FROM inbox_head h WHERE h.tenant_id = ? AND h.recipient_kind = ? AND h.recipient_id = ?) \
    WHERE tenant_id = ? AND recipient_id = ? AND verification_state = 'active'";

// ---- history built in SQL ----

/// `history_json` with `parts` (SQL expressions, such as `?` and `delivery_attempts`)
/// appended, in one expression: how a fast path records history without reading the row.
pub(in crate::inbox) fn history_appended(dialect: Dialect, parts: &[&str]) -> String {
    match dialect {
        Dialect::MySql => format!("CONCAT(COALESCE(history_json, ''), {})", parts.join(", ")),
        Dialect::Sqlite => format!("COALESCE(history_json, '') || {}", parts.join(" || ")),
    }
}

/// The lease owner's `,"session_id":"..."` for a history entry built in SQL, or nothing when
/// the row names none. Session ids are word characters, so they need no escaping.
pub(in crate::inbox) const LEASE_OWNER_SESSION: Sql = Sql {
    mysql: "CASE WHEN lease_owner_session_id IS NULL THEN '' \
            ELSE CONCAT(',\"session_id\":\"', lease_owner_session_id, '\"') END",
    sqlite: "CASE WHEN lease_owner_session_id IS NULL THEN '' \
             ELSE ',\"session_id\":\"' || lease_owner_session_id || '\"' END",
};

/// A fast path's `history_json = ..., ` assignment: the entry's text before the attempt, the
/// row's attempt count, the lease owner's session when `with_lease_owner`, and the text after
/// (binds: before, after).
pub(in crate::inbox) fn history_set(dialect: Dialect, with_lease_owner: bool) -> String {
    let owner = LEASE_OWNER_SESSION.text(dialect);
    let parts: &[&str] = if with_lease_owner {
        &["?", "delivery_attempts", owner, "?"]
    } else {
        &["?", "delivery_attempts", "?"]
    };
    format!("history_json = {}, ", history_appended(dialect, parts))
}

// ---- the slow path ----

/// Writes back everything a transition may change, keyed by the row's primary key.
pub(in crate::inbox) const SAVE_LIFECYCLE: &str = "UPDATE agent_inbox SET ack_state = ?, delivery_attempts = ?, \
    max_attempts = ?, availability_at_utc = ?, next_retry_at_utc = ?, visibility_lease_until_utc = ?, \
    lease_token_hash = ?, lease_owner_session_id = ?, dead_letter_state = ?, payload_json = ?, \
    acked_at_utc = ?, terminal_at_utc = ?, last_error = ?, updated_at_utc = ? \
    WHERE tenant_id = ? AND recipient_kind = ? AND recipient_id = ? AND inbox_seq = ?";

/// [`SAVE_LIFECYCLE`] that also replaces `history_json` (bound first).
pub(in crate::inbox) const SAVE_LIFECYCLE_AND_HISTORY: &str = "UPDATE agent_inbox SET history_json = ?, ack_state = ?, \
    delivery_attempts = ?, max_attempts = ?, availability_at_utc = ?, next_retry_at_utc = ?, \
    visibility_lease_until_utc = ?, lease_token_hash = ?, lease_owner_session_id = ?, dead_letter_state = ?, \
    payload_json = ?, acked_at_utc = ?, terminal_at_utc = ?, last_error = ?, updated_at_utc = ? \
    WHERE tenant_id = ? AND recipient_kind = ? AND recipient_id = ? AND inbox_seq = ?";
