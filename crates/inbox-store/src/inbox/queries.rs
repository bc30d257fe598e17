//! Every SQL statement of the `inbox` subsystem, by name: publish, read, leases, the slow
//! path, scavenge, operator work and cold storage.
//!
//! A constant where the text is fixed (an [`Sql`] pair where the backends differ); a function
//! only where the text depends on a count (IN lists, multi-row inserts), on a lock clause the
//! caller chooses, or on whether the history is recorded. The binds of each are listed in
//! order; "inbox" stands for tenant, recipient kind and recipient id.
//!
//! Over 600 lines, but one table: every statement that reads or writes `agent_inbox`,
//! `inbox_head` and the archive, so a schema change is checked against one file.

use std::fmt::Write as _;

use inbox_core::Recipient;

use crate::db::Arg;
use crate::dialect::{Dialect, Sql, placeholders, push_repeated};

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
pub(super) const EVENT_COLUMNS: &str = event_columns!();

/// [`EVENT_COLUMNS`] and `history_json`.
const EVENT_COLUMNS_WITH_HISTORY: &str = event_columns_with_history!();

/// Number of columns in [`EVENT_COLUMNS`], which is also the number of values one inserted
/// inbox row binds.
pub(super) const EVENT_COLUMN_COUNT: usize = 34;

/// MySQL's index hint for statements that find rows by `event_id`. Under claim load InnoDB
/// sometimes walks the claim index instead, scanning and locking every claimed row of the
/// inbox, which turned concurrent acks into deadlocks in the benchmark.
fn by_event_id(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::MySql => " FORCE INDEX (uq_agent_inbox_event)",
        Dialect::Sqlite => "",
    }
}

/// A predicate matching exactly these recipients (sorted), grouped by kind so each group is
/// one index range: `((recipient_kind = ? AND recipient_id IN (?, ?)) OR ...)`. Pushes the
/// binds it names onto `args`.
pub(super) fn recipients_predicate<'a>(recipients: &'a [Recipient], args: &mut Vec<Arg<'a>>) -> String {
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

// ---- publish ----

/// MySQL only: advances (or creates) one head, recording the new value with
/// `LAST_INSERT_ID(expr)` so the statement's answer carries it and no SELECT is needed
/// (inbox, now).
pub(super) const ADVANCE_HEAD_REPORTING_SEQ: &str = "INSERT INTO inbox_head \
    (tenant_id, recipient_kind, recipient_id, head_seq, oldest_available_seq, updated_at_utc) \
    VALUES (?, ?, ?, 1, 1, ?) ON DUPLICATE KEY UPDATE head_seq = LAST_INSERT_ID(head_seq + 1)";

/// Inserts head rows for `n` recipients that lack one and locks every one of them, in the
/// order given (inbox, now per head). With `increment`, existing heads also advance by one.
pub(super) fn upsert_heads(dialect: Dialect, n: usize, increment: bool) -> String {
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
pub(super) fn rows_of_key(dialect: Dialect, recipients: &str) -> String {
    format!(
        "SELECT recipient_kind, recipient_id, event_id, inbox_seq FROM agent_inbox \
         WHERE tenant_id = ? AND deduplication_key = ? AND {recipients}{}",
        dialect.for_update()
    )
}

/// The rows any of `n` deduplication keys already put in these recipients' inboxes, locked
/// (tenant, `n` keys, the predicate's binds).
pub(super) fn rows_of_keys(dialect: Dialect, n: usize, recipients: &str) -> String {
    format!(
        "SELECT recipient_kind, recipient_id, event_id, inbox_seq, deduplication_key FROM agent_inbox \
         WHERE tenant_id = ? AND deduplication_key IN ({}) AND {recipients}{}",
        placeholders(n),
        dialect.for_update()
    )
}

/// Advances these recipients' locked heads by one (now, tenant, the predicate's binds).
pub(super) fn advance_heads(recipients: &str) -> String {
    format!(
        "UPDATE inbox_head SET head_seq = head_seq + 1, updated_at_utc = ? WHERE tenant_id = ? AND {recipients}"
    )
}

/// These recipients' heads (tenant, the predicate's binds).
pub(super) fn heads_of(recipients: &str) -> String {
    format!(
        "SELECT recipient_kind, recipient_id, head_seq FROM inbox_head WHERE tenant_id = ? AND {recipients}"
    )
}

/// How [`write_heads`] changes a head that exists: to the value given.
pub(super) const HEAD_SET_TO: Sql = Sql {
    mysql: " ON DUPLICATE KEY UPDATE head_seq = VALUES(head_seq), updated_at_utc = VALUES(updated_at_utc)",
    sqlite: " ON CONFLICT (tenant_id, recipient_kind, recipient_id) \
             DO UPDATE SET head_seq = excluded.head_seq, updated_at_utc = excluded.updated_at_utc",
};

/// How [`write_heads`] changes a head that exists: up by the value given.
pub(super) const HEAD_ADDED_TO: Sql = Sql {
    mysql: " ON DUPLICATE KEY UPDATE head_seq = head_seq + VALUES(head_seq), updated_at_utc = VALUES(updated_at_utc)",
    sqlite: " ON CONFLICT (tenant_id, recipient_kind, recipient_id) \
             DO UPDATE SET head_seq = head_seq + excluded.head_seq, updated_at_utc = excluded.updated_at_utc",
};

/// Writes `n` heads, a new one starting at the value given (inbox, value, now per head);
/// `on_existing` is [`HEAD_SET_TO`] or [`HEAD_ADDED_TO`].
pub(super) fn write_heads(dialect: Dialect, n: usize, on_existing: Sql) -> String {
    let mut sql = String::from(
        "INSERT INTO inbox_head (tenant_id, recipient_kind, recipient_id, head_seq, oldest_available_seq, updated_at_utc) VALUES ",
    );
    push_repeated(&mut sql, n, "(?, ?, ?, ?, 1, ?)");
    sql.push_str(on_existing.text(dialect));
    sql
}

/// `n` new inbox rows ([`EVENT_COLUMN_COUNT`] values each, in [`EVENT_COLUMNS`] order, then
/// the row's `fair_rank`, which only publishing writes and no read needs).
pub(super) fn insert_events(n: usize) -> String {
    let mut sql = format!("INSERT INTO agent_inbox ({EVENT_COLUMNS}, fair_rank) VALUES ");
    let row = format!("({})", placeholders(EVENT_COLUMN_COUNT + 1));
    push_repeated(&mut sql, n, &row);
    sql
}

/// The `inbox.updated` signal every node's notifier reads (tenant, heads as JSON, number of
/// recipients, now).
pub(super) const INSERT_UPDATED_SIGNAL: &str = "INSERT INTO outbox_signal (tenant_id, signal_type, \
    recipient_heads, n_recipients, status, attempt_count, created_at_utc) \
    VALUES (?, 'inbox.updated', ?, ?, 'pending', 0, ?)";

/// The `inbox.nudged` signal: events behind the head of one inbox went back to it (tenant,
/// `INBOX_NUDGED_SIGNAL`, the inbox and its highest reopened seq as JSON, now). Streams
/// announce it though no head moved, so agents claim events their cursor has passed.
pub(super) const INSERT_NUDGED_SIGNAL: &str = "INSERT INTO outbox_signal (tenant_id, signal_type, \
    recipient_heads, n_recipients, status, attempt_count, created_at_utc) \
    VALUES (?, ?, ?, 1, 'pending', 0, ?)";

/// Makes the agent's active callbacks send its current head once more, a callback's nudge:
/// they are due again until the head is delivered (tenant, kind, agent, tenant, agent).
pub(super) const REDELIVER_CURRENT_HEAD: &str = "UPDATE callback_registration SET delivered_head_seq = \
    (SELECT h.head_seq - 1 FROM inbox_head h WHERE h.tenant_id = ? AND h.recipient_kind = ? AND h.recipient_id = ?) \
    WHERE tenant_id = ? AND recipient_id = ? AND verification_state = 'active'";

// ---- read ----

/// Events of one inbox after a seq, in seq order: a poll (inbox, after seq, limit).
pub(super) const EVENTS_AFTER: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM agent_inbox WHERE ",
    inbox!(),
    " AND inbox_seq > ? ORDER BY inbox_seq LIMIT ?"
);

/// SQLite: claimable events after a cursor (inbox, after seq, now, now, now, limit). Found by
/// their state, not by walking the inbox from the cursor: `wait` asks from 0, since a requeued
/// event sits behind any runner's cursor. SQLite's planner walks the primary key through every
/// finished row unless told (30 ms against 1 ms at 200,000 rows).
pub(super) const CLAIMABLE_EVENTS_AFTER_SQLITE: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM agent_inbox INDEXED BY ix_agent_inbox_claim WHERE ",
    inbox!(),
    " AND inbox_seq > ? AND ",
    claimable!(),
    " ORDER BY inbox_seq LIMIT ?"
);

/// MySQL: claimable events after a cursor, in the claim buckets from the claim floor on, as a
/// claim reads them (`claim_floor.rs`): `bucket_filter` is `claim_bucket IN (...)` or
/// `claim_bucket >= ?` (inbox, the buckets, after seq, now, now, now, limit). The cursor is
/// compared as `inbox_seq + 0`: a range on `inbox_seq` would turn each exact (priority,
/// bucket) pair into an open range, which InnoDB does not stop at its end past dead entries.
pub(super) fn claimable_events_after_in_buckets(ranks: &str, bucket_filter: &str) -> String {
    format!(
        concat!(
            "SELECT ",
            event_columns!(),
            " FROM agent_inbox WHERE ",
            inbox!(),
            " AND priority IN ({}) AND {} AND inbox_seq + 0 > ? AND ",
            claimable!(),
            " ORDER BY inbox_seq LIMIT ?"
        ),
        ranks, bucket_filter
    )
}

/// The inbox's events not yet acknowledged or parked, counted up to a cap (inbox, cap).
pub(super) const COUNT_UNACKED: &str = concat!(
    "SELECT COUNT(*) AS n FROM (SELECT 1 FROM agent_inbox WHERE ",
    inbox!(),
    " AND ack_state IN ('available', 'claimed') LIMIT ?) AS open_events"
);

/// A tenant's events not yet acknowledged or parked, and the inline payload bytes they hold
/// (tenant): what its quotas count. Walks the tenant's rows by primary key.
pub(super) const TENANT_USAGE: Sql = Sql {
    mysql: "SELECT COUNT(*) AS n, CAST(COALESCE(SUM(LENGTH(payload_json)), 0) AS SIGNED) AS bytes FROM agent_inbox \
            WHERE tenant_id = ? AND ack_state IN ('available', 'claimed')",
    sqlite: "SELECT COUNT(*) AS n, COALESCE(SUM(LENGTH(CAST(payload_json AS BLOB))), 0) AS bytes FROM agent_inbox \
             WHERE tenant_id = ? AND ack_state IN ('available', 'claimed')",
};

/// Events after a cursor not yet acknowledged or parked (inbox, after seq, limit).
pub(super) const OPEN_EVENTS_AFTER: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM agent_inbox WHERE ",
    inbox!(),
    " AND inbox_seq > ? AND ack_state IN ('available', 'claimed') ORDER BY inbox_seq LIMIT ?"
);

/// The inbox's head row, with `lock` (a dialect's locking clause, or nothing) (inbox).
pub(super) fn head(lock: &str) -> String {
    format!(concat!("SELECT head_seq, oldest_available_seq FROM inbox_head WHERE ", inbox!(), "{}"), lock)
}

/// `n` events of an inbox by id, with `lock` (inbox, `n` event ids); `with_history` adds each
/// one's history, for the slow path, which rewrites it.
pub(super) fn events_by_id(dialect: Dialect, n: usize, lock: &str, with_history: bool) -> String {
    let columns = if with_history { EVENT_COLUMNS_WITH_HISTORY } else { EVENT_COLUMNS };
    format!(
        concat!("SELECT {} FROM agent_inbox{} WHERE ", inbox!(), " AND event_id IN ({}){}"),
        columns,
        by_event_id(dialect),
        placeholders(n),
        lock
    )
}

// ---- leases ----

/// SQLite's claim: claimable events from a seq on, most urgent first, then oldest (inbox,
/// from seq, now, now, now, limit).
pub(super) const CLAIM_NEXT_FROM_SQLITE: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM agent_inbox WHERE ",
    inbox!(),
    " AND inbox_seq >= ? AND ",
    claimable!(),
    " ORDER BY priority, inbox_seq LIMIT ?"
);

/// MySQL's claim: claimable events in `n` claim buckets named exactly, with every priority
/// in `ranks`, most urgent first, then oldest (bucket order is seq order), skipping rows
/// another claimer holds (inbox, `n` buckets, now, now, now, limit). See `claim_floor.rs`.
pub(super) fn claim_next_in_buckets(ranks: &str, n: usize) -> String {
    format!(
        concat!(
            "SELECT ",
            event_columns!(),
            " FROM agent_inbox WHERE ",
            inbox!(),
            " AND priority IN ({}) AND claim_bucket IN ({}) AND ",
            claimable!(),
            " ORDER BY priority, claim_bucket, inbox_seq LIMIT ? FOR UPDATE SKIP LOCKED"
        ),
        ranks,
        placeholders(n)
    )
}

/// A fair claim (`fairness.rs`): claimable events and their fair ranks, most urgent first, then
/// by fair rank, then oldest, through the fair index from its start (inbox, now, now, now,
/// limit). Events without
/// a rank (NULL) sort first. MySQL skips rows another claimer holds.
pub(super) fn claim_next_fair(dialect: Dialect, ranks: &str) -> String {
    let (hint, lock) = match dialect {
        Dialect::MySql => (" FORCE INDEX (ix_agent_inbox_fair)", " FOR UPDATE SKIP LOCKED"),
        Dialect::Sqlite => (" INDEXED BY ix_agent_inbox_fair", ""),
    };
    format!(
        concat!(
            "SELECT ",
            event_columns!(),
            ", fair_rank FROM agent_inbox{} WHERE ",
            inbox!(),
            " AND priority IN ({}) AND ",
            claimable!(),
            " ORDER BY priority, fair_rank, inbox_seq LIMIT ?{}"
        ),
        hint, ranks, lock
    )
}

/// MySQL's claim of an inbox too deep for [`claim_next_in_buckets`]: every bucket from one on
/// (inbox, first bucket, now, now, now, limit).
pub(super) fn claim_next_from_bucket(ranks: &str) -> String {
    format!(
        concat!(
            "SELECT ",
            event_columns!(),
            " FROM agent_inbox WHERE ",
            inbox!(),
            " AND priority IN ({}) AND claim_bucket >= ? AND ",
            claimable!(),
            " ORDER BY priority, claim_bucket, inbox_seq LIMIT ? FOR UPDATE SKIP LOCKED"
        ),
        ranks
    )
}

// ---- the claim floor (claim_floor.rs) ----

/// The seq of one event of an inbox (inbox, event id).
pub(super) const SEQ_OF_EVENT: &str =
    concat!("SELECT inbox_seq FROM agent_inbox WHERE ", inbox!(), " AND event_id = ?");

/// The inbox's head and claim floor, unlocked (inbox).
pub(super) const CLAIM_FLOOR_AND_HEAD: &str = "SELECT h.head_seq, h.oldest_available_seq, \
    f.floor_seq, f.wake_seq, f.wake_at_utc FROM inbox_head h LEFT JOIN inbox_claim_floor f \
    ON f.tenant_id = h.tenant_id AND f.recipient_kind = h.recipient_kind AND f.recipient_id = h.recipient_id \
    WHERE h.tenant_id = ? AND h.recipient_kind = ? AND h.recipient_id = ?";

/// The inbox's claim floor row, with `lock` (inbox).
pub(super) fn claim_floor(lock: &str) -> String {
    format!(
        concat!("SELECT floor_seq, wake_seq, wake_at_utc FROM inbox_claim_floor WHERE ", inbox!(), "{}"),
        lock
    )
}

/// Creates the inbox's floor row at no floor, unless it exists (inbox, now).
pub(super) const CREATE_FLOOR: Sql = Sql {
    mysql: "INSERT IGNORE INTO inbox_claim_floor (tenant_id, recipient_kind, recipient_id, floor_seq, \
            wake_seq, wake_at_utc, reopened, updated_at_utc) VALUES (?, ?, ?, 0, NULL, NULL, 0, ?)",
    sqlite: "INSERT OR IGNORE INTO inbox_claim_floor (tenant_id, recipient_kind, recipient_id, floor_seq, \
             wake_seq, wake_at_utc, reopened, updated_at_utc) VALUES (?, ?, ?, 0, NULL, NULL, 0, ?)",
};

/// Lowers the floor to a seq made available again, writing the row whatever its floor was;
/// a missing row is created at no floor (inbox, now, seq, now).
pub(super) const REOPEN_FLOOR: Sql = Sql {
    mysql: "INSERT INTO inbox_claim_floor (tenant_id, recipient_kind, recipient_id, floor_seq, \
            wake_seq, wake_at_utc, reopened, updated_at_utc) VALUES (?, ?, ?, 0, NULL, NULL, 1, ?) \
            ON DUPLICATE KEY UPDATE floor_seq = LEAST(floor_seq, ?), reopened = reopened + 1, updated_at_utc = ?",
    sqlite: "INSERT INTO inbox_claim_floor (tenant_id, recipient_kind, recipient_id, floor_seq, \
             wake_seq, wake_at_utc, reopened, updated_at_utc) VALUES (?, ?, ?, 0, NULL, NULL, 1, ?) \
             ON CONFLICT (tenant_id, recipient_kind, recipient_id) DO UPDATE \
             SET floor_seq = MIN(floor_seq, ?), reopened = reopened + 1, updated_at_utc = ?",
};

/// What an advance of the floor walks: the inbox's events from a seq on, in seq order, by the
/// primary key, whose entries no state change touches (inbox, from seq, limit).
pub(super) const FLOOR_WALK: &str = concat!(
    "SELECT inbox_seq, ack_state, availability_at_utc, next_retry_at_utc, expires_at_utc, \
     delivery_attempts, max_attempts FROM agent_inbox WHERE ",
    inbox!(),
    " AND inbox_seq >= ? ORDER BY inbox_seq LIMIT ?"
);

/// Moves the floor and the waiting events below it (floor, wake seq, wake at, now, inbox).
pub(super) const SET_FLOOR: &str = concat!(
    "UPDATE inbox_claim_floor SET floor_seq = ?, wake_seq = ?, wake_at_utc = ?, updated_at_utc = ? WHERE ",
    inbox!()
);

/// Marks `n` locked, claimable rows claimed, each under its own token hash (lease until,
/// session, now, seq and hash per row, [seq and history line per row,] inbox, `n` seqs).
/// With `history`, each row's entry is appended in the same statement.
pub(super) fn mark_claimed(dialect: Dialect, n: usize, history: bool) -> String {
    let mut cases = String::from("CASE inbox_seq");
    for _ in 0..n {
        cases.push_str(" WHEN ? THEN ?");
    }
    cases.push_str(" END");
    let history = if history {
        format!(", history_json = {}", history_appended(dialect, &[&cases]))
    } else {
        String::new()
    };
    format!(
        concat!(
            "UPDATE agent_inbox SET ack_state = 'claimed', delivery_attempts = delivery_attempts + 1, \
             next_retry_at_utc = NULL, visibility_lease_until_utc = ?, lease_owner_session_id = ?, updated_at_utc = ?, \
             lease_token_hash = {cases}{history} WHERE ",
            inbox!(),
            " AND ack_state = 'available' AND inbox_seq IN ({seqs})"
        ),
        cases = cases,
        history = history,
        seqs = placeholders(n)
    )
}

/// Acknowledges claimed events as completed, for one or more requests at once, where every
/// token matches ([history parts,] now, now, now, then for each request: its inbox, its event
/// ids, its token hashes; `requests` holds each request's number of events). A request's
/// tokens match only its own events, as when it runs alone. `history` is a [`history_set`]
/// or nothing.
pub(super) fn ack_completed(dialect: Dialect, requests: &[usize], history: &str) -> String {
    let each = requests
        .iter()
        .map(|&n| {
            let n = placeholders(n);
            format!(concat!("(", inbox!(), " AND event_id IN ({n}) AND lease_token_hash IN ({n}))"), n = n)
        })
        .collect::<Vec<_>>()
        .join(" OR ");
    format!(
        "UPDATE agent_inbox{} SET {}ack_state = 'acked', payload_json = NULL, acked_at_utc = ?, \
         terminal_at_utc = ?, updated_at_utc = ?, lease_owner_session_id = NULL \
         WHERE ack_state = 'claimed' AND ({each})",
        by_event_id(dialect),
        history,
    )
}

/// Gives back one event whose lease is held and live and that has attempts left ([history
/// parts,] lease until, next retry, reason, now, inbox, event id, token hash, now).
/// `history` is a [`history_set`] or nothing.
pub(super) fn release_held(dialect: Dialect, history: &str) -> String {
    format!(
        concat!(
            "UPDATE agent_inbox{} SET {}ack_state = 'available', visibility_lease_until_utc = ?, \
             next_retry_at_utc = ?, last_error = ?, updated_at_utc = ?, lease_owner_session_id = NULL WHERE ",
            inbox!(),
            " AND event_id = ? AND lease_token_hash = ? AND ack_state = 'claimed' \
             AND visibility_lease_until_utc > ? AND delivery_attempts < max_attempts"
        ),
        by_event_id(dialect),
        history
    )
}

/// Extends `n` live leases to one time, if every token matches (until, now, inbox, now,
/// until, `n` event ids, `n` token hashes). A lease already past `until` is left alone.
pub(super) fn extend_leases(dialect: Dialect, n: usize) -> String {
    let n = placeholders(n);
    format!(
        concat!(
            "UPDATE agent_inbox{} SET visibility_lease_until_utc = ?, updated_at_utc = ? WHERE ",
            inbox!(),
            " AND ack_state = 'claimed' AND visibility_lease_until_utc > ? \
             AND visibility_lease_until_utc <= ? AND event_id IN ({n}) AND lease_token_hash IN ({n})"
        ),
        by_event_id(dialect),
        n = n
    )
}

// ---- history built in SQL ----

/// `history_json` with `parts` (SQL expressions, such as `?` and `delivery_attempts`)
/// appended, in one expression: how a fast path records history without reading the row.
fn history_appended(dialect: Dialect, parts: &[&str]) -> String {
    match dialect {
        Dialect::MySql => format!("CONCAT(COALESCE(history_json, ''), {})", parts.join(", ")),
        Dialect::Sqlite => format!("COALESCE(history_json, '') || {}", parts.join(" || ")),
    }
}

/// The lease owner's `,"session_id":"..."` for a history entry built in SQL, or nothing when
/// the row names none. Session ids are word characters, so they need no escaping.
const LEASE_OWNER_SESSION: Sql = Sql {
    mysql: "CASE WHEN lease_owner_session_id IS NULL THEN '' \
            ELSE CONCAT(',\"session_id\":\"', lease_owner_session_id, '\"') END",
    sqlite: "CASE WHEN lease_owner_session_id IS NULL THEN '' \
             ELSE ',\"session_id\":\"' || lease_owner_session_id || '\"' END",
};

/// A fast path's `history_json = ..., ` assignment: the entry's text before the attempt, the
/// row's attempt count, the lease owner's session when `with_lease_owner`, and the text after
/// (binds: before, after).
pub(super) fn history_set(dialect: Dialect, with_lease_owner: bool) -> String {
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
pub(super) const SAVE_LIFECYCLE: &str = "UPDATE agent_inbox SET ack_state = ?, delivery_attempts = ?, \
    max_attempts = ?, availability_at_utc = ?, next_retry_at_utc = ?, visibility_lease_until_utc = ?, \
    lease_token_hash = ?, lease_owner_session_id = ?, dead_letter_state = ?, payload_json = ?, \
    acked_at_utc = ?, terminal_at_utc = ?, last_error = ?, updated_at_utc = ? \
    WHERE tenant_id = ? AND recipient_kind = ? AND recipient_id = ? AND inbox_seq = ?";

/// [`SAVE_LIFECYCLE`] that also replaces `history_json` (bound first).
pub(super) const SAVE_LIFECYCLE_AND_HISTORY: &str = "UPDATE agent_inbox SET history_json = ?, ack_state = ?, \
    delivery_attempts = ?, max_attempts = ?, availability_at_utc = ?, next_retry_at_utc = ?, \
    visibility_lease_until_utc = ?, lease_token_hash = ?, lease_owner_session_id = ?, dead_letter_state = ?, \
    payload_json = ?, acked_at_utc = ?, terminal_at_utc = ?, last_error = ?, updated_at_utc = ? \
    WHERE tenant_id = ? AND recipient_kind = ? AND recipient_id = ? AND inbox_seq = ?";

// ---- scavenge ----

/// Claimed events whose lease ended within a window, soonest ended first, skipping rows
/// others hold (after, now, limit). The window's start keeps the sweep off the dead entries
/// of long-acknowledged leases (scavenge.rs).
pub(super) const EXPIRED_LEASES: Sql = locked!(
    " FOR UPDATE SKIP LOCKED",
    "SELECT ",
    event_columns_with_history!(),
    " FROM agent_inbox WHERE ack_state = 'claimed' AND visibility_lease_until_utc > ? \
     AND visibility_lease_until_utc <= ? ORDER BY visibility_lease_until_utc LIMIT ?"
);

/// Available events whose expiry passed within a window, soonest first, skipping rows others
/// hold (after, now, limit): SQLite, and MySQL's sweep of the whole range.
pub(super) const EXPIRED_AVAILABLE: Sql = locked!(
    " FOR UPDATE SKIP LOCKED",
    "SELECT ",
    event_columns_with_history!(),
    " FROM agent_inbox WHERE ack_state = 'available' AND expires_at_utc > ? AND expires_at_utc <= ? \
     ORDER BY expires_at_utc LIMIT ?"
);

/// MySQL: [`EXPIRED_AVAILABLE`] within `n` expiry buckets (minutes) named exactly, so the
/// sweep stops at the end of each, past dead entries too (`n` buckets, after, now, limit).
/// The times are compared as `expires_at_utc + 0`: a range on the column would make the
/// bucket ranges open again.
pub(super) fn expired_available_in_buckets(n: usize) -> String {
    format!(
        concat!(
            "SELECT ",
            event_columns_with_history!(),
            " FROM agent_inbox WHERE ack_state = 'available' AND expiry_bucket IN ({}) \
             AND expires_at_utc + 0 > ? AND expires_at_utc + 0 <= ? ORDER BY expiry_bucket, expires_at_utc \
             LIMIT ? FOR UPDATE SKIP LOCKED"
        ),
        placeholders(n)
    )
}

/// Inboxes holding terminal events older than the retention cutoff (cutoff, limit).
pub(super) const INBOXES_WITH_RETAINED: &str = "SELECT DISTINCT tenant_id, recipient_kind, recipient_id \
    FROM agent_inbox WHERE terminal_at_utc < ? LIMIT ?";

/// The inbox's first event not yet due for the archive: not terminal, or terminal since the
/// cutoff (inbox, cutoff).
pub(super) const RETAINED_BOUNDARY: &str = concat!(
    "SELECT MIN(inbox_seq) AS boundary FROM agent_inbox WHERE ",
    inbox!(),
    " AND (terminal_at_utc IS NULL OR terminal_at_utc >= ?)"
);

/// Copies the inbox's events before a seq to the archive (archived at, inbox, seq).
pub(super) const ARCHIVE_PREFIX: &str = concat!(
    "INSERT INTO agent_inbox_archive (",
    event_columns_with_history!(),
    ", archived_at_utc) SELECT ",
    event_columns_with_history!(),
    ", ? FROM agent_inbox WHERE ",
    inbox!(),
    " AND inbox_seq < ?"
);

/// Deletes the inbox's events before a seq, once archived (inbox, seq).
pub(super) const DELETE_PREFIX: &str =
    concat!("DELETE FROM agent_inbox WHERE ", inbox!(), " AND inbox_seq < ?");

/// Moves the inbox's oldest retained seq (seq, now, inbox).
pub(super) const ADVANCE_OLDEST_AVAILABLE: &str =
    concat!("UPDATE inbox_head SET oldest_available_seq = ?, updated_at_utc = ? WHERE ", inbox!());

// ---- operator work ----

/// A tenant's parked events, oldest parked first (tenant, [kind, recipient,] [state,] limit).
pub(super) fn parked(of_recipient: bool, in_state: bool) -> String {
    format!(
        concat!(
            "SELECT ",
            event_columns!(),
            " FROM agent_inbox WHERE tenant_id = ? AND ack_state IN ('dead_letter', 'quarantined'){}{} \
             ORDER BY terminal_at_utc, inbox_seq LIMIT ?"
        ),
        if of_recipient { " AND recipient_kind = ? AND recipient_id = ?" } else { "" },
        if in_state { " AND ack_state = ?" } else { "" },
    )
}

/// Purges one event (inbox, seq).
pub(super) const DELETE_EVENT: &str =
    concat!("DELETE FROM agent_inbox WHERE ", inbox!(), " AND inbox_seq = ?");

/// Backlog per inbox of a tenant, by recipient (now, tenant, limit).
pub(super) const INBOX_STATS: &str = "SELECT h.recipient_kind, h.recipient_id, h.head_seq, \
    CAST(COALESCE(SUM(CASE WHEN i.ack_state IN ('available', 'claimed') THEN 1 ELSE 0 END), 0) AS SIGNED) AS depth, \
    CAST(COALESCE(SUM(CASE WHEN i.ack_state = 'claimed' THEN 1 ELSE 0 END), 0) AS SIGNED) AS claimed, \
    CAST(COALESCE(SUM(CASE WHEN i.ack_state = 'available' AND i.next_retry_at_utc > ? THEN 1 ELSE 0 END), 0) AS SIGNED) AS retry_scheduled, \
    CAST(COALESCE(SUM(CASE WHEN i.ack_state IN ('dead_letter', 'quarantined') THEN 1 ELSE 0 END), 0) AS SIGNED) AS parked, \
    MIN(CASE WHEN i.ack_state IN ('available', 'claimed') THEN i.created_at_utc END) AS oldest_unacked_at \
    FROM inbox_head h LEFT JOIN agent_inbox i ON i.tenant_id = h.tenant_id \
    AND i.recipient_kind = h.recipient_kind AND i.recipient_id = h.recipient_id \
    WHERE h.tenant_id = ? GROUP BY h.recipient_kind, h.recipient_id, h.head_seq \
    ORDER BY h.recipient_kind, h.recipient_id LIMIT ?";

/// Online sessions and last sign of life of `n` agents (tenant, `n` agents).
pub(super) fn agent_presence(n: usize) -> String {
    format!(
        "SELECT agent_id, CAST(SUM(CASE WHEN status = 'active' THEN 1 ELSE 0 END) AS SIGNED) AS online, \
         MAX(last_heartbeat_at_utc) AS last_seen FROM agent_session WHERE tenant_id = ? AND agent_id IN ({}) \
         GROUP BY agent_id",
        placeholders(n)
    )
}

/// Every inbox with unacknowledged or parked events, deepest first (limit).
pub(super) const BACKLOGS: &str = "SELECT tenant_id, recipient_kind, recipient_id, \
    CAST(SUM(CASE WHEN ack_state IN ('available', 'claimed') THEN 1 ELSE 0 END) AS SIGNED) AS depth, \
    CAST(SUM(CASE WHEN ack_state IN ('dead_letter', 'quarantined') THEN 1 ELSE 0 END) AS SIGNED) AS parked, \
    MIN(CASE WHEN ack_state IN ('available', 'claimed') THEN created_at_utc END) AS oldest_unacked_at \
    FROM agent_inbox WHERE ack_state IN ('available', 'claimed', 'dead_letter', 'quarantined') \
    GROUP BY tenant_id, recipient_kind, recipient_id ORDER BY depth DESC LIMIT ?";

// ---- operators' reads (browse.rs) ----

/// One page of an operator's listing, in both orders (binds for both: inbox, after seq,
/// before seq, the filter's, limit): the events between two seqs, oldest or newest first.
#[derive(Debug, Clone, Copy)]
pub(super) struct EventsPage {
    pub oldest_first: &'static str,
    pub newest_first: &'static str,
}

/// An [`EventsPage`] narrowed by `$filter` (SQL appended to the WHERE clause).
macro_rules! events_page {
    ($filter:literal) => {
        EventsPage {
            oldest_first: concat!(
                "SELECT ",
                event_columns!(),
                " FROM agent_inbox WHERE ",
                inbox!(),
                " AND inbox_seq > ? AND inbox_seq < ?",
                $filter,
                " ORDER BY inbox_seq LIMIT ?"
            ),
            newest_first: concat!(
                "SELECT ",
                event_columns!(),
                " FROM agent_inbox WHERE ",
                inbox!(),
                " AND inbox_seq > ? AND inbox_seq < ?",
                $filter,
                " ORDER BY inbox_seq DESC LIMIT ?"
            ),
        }
    };
}

/// Events in every state.
pub(super) const EVENTS_PAGE: EventsPage = events_page!("");

/// Events claimable by time, ignoring expiry and attempts, as the display state `available`
/// means (binds now).
pub(super) const EVENTS_PAGE_AVAILABLE_NOW: EventsPage =
    events_page!(" AND ack_state = 'available' AND (next_retry_at_utc IS NULL OR next_retry_at_utc <= ?)");

/// Events waiting for a scheduled retry (binds now).
pub(super) const EVENTS_PAGE_RETRY_SCHEDULED: EventsPage =
    events_page!(" AND ack_state = 'available' AND next_retry_at_utc > ?");

/// Events in one stored state (binds the state).
pub(super) const EVENTS_PAGE_IN_STATE: EventsPage = events_page!(" AND ack_state = ?");

/// One live event with its history (tenant, kind, recipient, event id).
pub(super) const LIVE_EVENT_DETAIL: &str = concat!(
    "SELECT ",
    event_columns_with_history!(),
    " FROM agent_inbox WHERE ",
    inbox!(),
    " AND event_id = ?"
);

/// One archived event with its history (event id, tenant, kind, recipient).
pub(super) const ARCHIVED_EVENT_DETAIL: &str = concat!(
    "SELECT ",
    event_columns_with_history!(),
    " FROM agent_inbox_archive WHERE event_id = ? AND ",
    inbox!()
);

/// Events published and acknowledged per minute of one tenant, live and archived.
///
/// Binds, in order: tenant, the smallest event id of the window, since (published, live);
/// tenant, since, since (acked, live); since, tenant, since (published, archive); since,
/// tenant, since (acked, archive). A UUIDv7 event id begins with its creation time, so the
/// unique event-id index finds the window's publishes; acknowledged events are terminal since
/// their ack, so the terminal-time index finds them; a row archived before the window was
/// neither published nor acknowledged in it, so the archive-time index bounds the archive.
pub(super) const ACTIVITY_PER_MINUTE: &str = "SELECT minute_start, \
    CAST(SUM(published) AS SIGNED) AS published, CAST(SUM(acked) AS SIGNED) AS acked FROM ( \
    SELECT created_at_utc - created_at_utc % 60000 AS minute_start, 1 AS published, 0 AS acked \
        FROM agent_inbox WHERE tenant_id = ? AND event_id >= ? AND created_at_utc >= ? \
    UNION ALL SELECT acked_at_utc - acked_at_utc % 60000, 0, 1 \
        FROM agent_inbox WHERE tenant_id = ? AND terminal_at_utc >= ? AND acked_at_utc >= ? \
    UNION ALL SELECT created_at_utc - created_at_utc % 60000, 1, 0 \
        FROM agent_inbox_archive WHERE archived_at_utc >= ? AND tenant_id = ? AND created_at_utc >= ? \
    UNION ALL SELECT acked_at_utc - acked_at_utc % 60000, 0, 1 \
        FROM agent_inbox_archive WHERE archived_at_utc >= ? AND tenant_id = ? AND acked_at_utc >= ? \
    ) AS activity GROUP BY minute_start ORDER BY minute_start";

// ---- cold storage ----

/// Every column of `agent_inbox_archive`, in schema order: the event's, its history, and when
/// it was archived. `cold_storage.rs` types each one for export.
macro_rules! archive_columns {
    () => {
        concat!(event_columns_with_history!(), ", archived_at_utc")
    };
}

/// The text of `archive_columns!`, which `cold_storage.rs` checks its export table against.
#[cfg(test)]
pub(super) const ARCHIVE_COLUMNS: &str = archive_columns!();

/// Rows archived before a time, in key order (before, limit).
pub(super) const ARCHIVED_PAGE: &str = concat!(
    "SELECT ",
    archive_columns!(),
    " FROM agent_inbox_archive WHERE archived_at_utc < ? \
     ORDER BY tenant_id, recipient_kind, recipient_id, inbox_seq LIMIT ?"
);

/// Rows archived before a time, in key order, after a key (before, tenant ×2, kind ×2,
/// recipient ×2, seq, limit).
pub(super) const ARCHIVED_PAGE_AFTER: &str = concat!(
    "SELECT ",
    archive_columns!(),
    " FROM agent_inbox_archive WHERE archived_at_utc < ? \
     AND (tenant_id > ? OR (tenant_id = ? AND (recipient_kind > ? OR (recipient_kind = ? \
     AND (recipient_id > ? OR (recipient_id = ? AND inbox_seq > ?)))))) \
     ORDER BY tenant_id, recipient_kind, recipient_id, inbox_seq LIMIT ?"
);

/// Keys of rows archived before a time, in key order (before, limit).
pub(super) const ARCHIVED_KEYS: &str = "SELECT tenant_id, recipient_kind, recipient_id, inbox_seq \
    FROM agent_inbox_archive WHERE archived_at_utc < ? \
    ORDER BY tenant_id, recipient_kind, recipient_id, inbox_seq LIMIT ?";

/// Deletes exactly `n` archived rows, if archived before a time (before, then tenant, kind,
/// recipient and seq per row).
pub(super) fn delete_archived(n: usize) -> String {
    let mut sql = String::from("DELETE FROM agent_inbox_archive WHERE archived_at_utc < ? AND (");
    let one = "(tenant_id = ? AND recipient_kind = ? AND recipient_id = ? AND inbox_seq = ?)";
    for i in 0..n {
        if i > 0 {
            sql.push_str(" OR ");
        }
        sql.push_str(one);
    }
    sql.push(')');
    sql
}

// ---- fair claims ----

/// The served rank of each inbox a publish writes to (tenant, the recipients predicate's
/// binds). Read without a lock: a clock a little behind only ranks a new key a little early.
pub(super) fn fair_clocks_of(recipients: &str) -> String {
    format!(
        "SELECT recipient_kind, recipient_id, served_rank FROM inbox_fair_clock WHERE tenant_id = ? AND {recipients}"
    )
}

/// The last rank of `n` keys in the inboxes a publish writes to (tenant, `n` keys, the
/// recipients predicate's binds). Locked on MySQL, so a host transaction at REPEATABLE READ
/// reads the latest rank, not its snapshot's.
pub(super) fn fair_keys_of(dialect: Dialect, n: usize, recipients: &str) -> String {
    let lock = match dialect {
        Dialect::MySql => " FOR UPDATE",
        Dialect::Sqlite => "",
    };
    format!(
        "SELECT recipient_kind, recipient_id, fairness_key, last_rank FROM inbox_fair_key \
         WHERE tenant_id = ? AND fairness_key IN ({}) AND {recipients}{lock}",
        placeholders(n)
    )
}

/// Sets the last rank of `n` (inbox, key) pairs (tenant, kind, recipient, key, rank per pair).
pub(super) fn write_fair_keys(dialect: Dialect, n: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO inbox_fair_key (tenant_id, recipient_kind, recipient_id, fairness_key, last_rank) VALUES ",
    );
    push_repeated(&mut sql, n, "(?, ?, ?, ?, ?)");
    sql.push_str(match dialect {
        Dialect::MySql => " ON DUPLICATE KEY UPDATE last_rank = VALUES(last_rank)",
        Dialect::Sqlite => {
            " ON CONFLICT (tenant_id, recipient_kind, recipient_id, fairness_key) DO UPDATE SET last_rank = excluded.last_rank"
        }
    });
    sql
}

/// Forgets an inbox's keys whose last rank is at or below its served rank (inbox, served
/// rank): such a row ranks exactly as no row does.
pub(super) const PRUNE_FAIR_KEYS: &str = "DELETE FROM inbox_fair_key \
    WHERE tenant_id = ? AND recipient_kind = ? AND recipient_id = ? AND last_rank <= ?";

/// Raises an inbox's served rank to a rank a claim took, never lowering it (inbox, rank, now).
pub(super) const RAISE_FAIR_CLOCK: Sql = Sql {
    mysql: "INSERT INTO inbox_fair_clock (tenant_id, recipient_kind, recipient_id, served_rank, updated_at_utc) \
            VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE served_rank = GREATEST(served_rank, VALUES(served_rank)), \
            updated_at_utc = VALUES(updated_at_utc)",
    sqlite: "INSERT INTO inbox_fair_clock (tenant_id, recipient_kind, recipient_id, served_rank, updated_at_utc) \
             VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant_id, recipient_kind, recipient_id) DO UPDATE SET \
             served_rank = MAX(served_rank, excluded.served_rank), updated_at_utc = excluded.updated_at_utc",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inserted_row_binds_one_value_per_column() {
        assert_eq!(EVENT_COLUMNS.split(',').count(), EVENT_COLUMN_COUNT);
    }

    #[test]
    fn only_mysql_claims_skip_locked_rows() {
        assert!(claim_next_in_buckets("0, 1", 2).ends_with(" FOR UPDATE SKIP LOCKED"));
        assert!(claim_next_in_buckets("0, 1", 2).contains("claim_bucket IN (?, ?)"));
        assert!(claim_next_from_bucket("0").ends_with(" FOR UPDATE SKIP LOCKED"));
        assert!(!CLAIM_NEXT_FROM_SQLITE.contains("FOR UPDATE"));
    }
}
