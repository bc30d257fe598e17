//! Statements of leases: claims (by buckets, from a bucket, fair), acknowledgements, releases
//! and heartbeats, and the claim floor they read from.

use super::shared::*;
use super::writing::history_appended;
use crate::dialect::{Dialect, Sql, placeholders, push_repeated};

// ---- leases ----

/// SQLite's claim: claimable events from a seq on, most urgent first, then oldest (inbox,
/// from seq, now, now, now, limit).
pub(in crate::inbox) const CLAIM_NEXT_FROM_SQLITE: &str = concat!(
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
pub(in crate::inbox) fn claim_next_in_buckets(ranks: &str, n: usize) -> String {
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
pub(in crate::inbox) fn claim_next_fair(dialect: Dialect, ranks: &str) -> String {
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
pub(in crate::inbox) fn claim_next_from_bucket(ranks: &str) -> String {
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
pub(in crate::inbox) const SEQ_OF_EVENT: &str =
    concat!("SELECT inbox_seq FROM agent_inbox WHERE ", inbox!(), " AND event_id = ?");

/// The inbox's head and claim floor, unlocked (inbox).
pub(in crate::inbox) const CLAIM_FLOOR_AND_HEAD: &str = "SELECT h.head_seq, h.oldest_available_seq, \
    f.floor_seq, f.wake_seq, f.wake_at_utc FROM inbox_head h LEFT JOIN inbox_claim_floor f \
    ON f.tenant_id = h.tenant_id AND f.recipient_kind = h.recipient_kind AND f.recipient_id = h.recipient_id \
    WHERE h.tenant_id = ? AND h.recipient_kind = ? AND h.recipient_id = ?";

/// The inbox's claim floor row, with `lock` (inbox).
pub(in crate::inbox) fn claim_floor(lock: &str) -> String {
    format!(
        concat!("SELECT floor_seq, wake_seq, wake_at_utc FROM inbox_claim_floor WHERE ", inbox!(), "{}"),
        lock
    )
}

/// Creates the inbox's floor row at no floor, unless it exists (inbox, now).
pub(in crate::inbox) const CREATE_FLOOR: Sql = Sql {
    mysql: "INSERT IGNORE INTO inbox_claim_floor (tenant_id, recipient_kind, recipient_id, floor_seq, \
            wake_seq, wake_at_utc, reopened, updated_at_utc) VALUES (?, ?, ?, 0, NULL, NULL, 0, ?)",
    sqlite: "INSERT OR IGNORE INTO inbox_claim_floor (tenant_id, recipient_kind, recipient_id, floor_seq, \
             wake_seq, wake_at_utc, reopened, updated_at_utc) VALUES (?, ?, ?, 0, NULL, NULL, 0, ?)",
};

/// Lowers the floor to a seq made available again, writing the row whatever its floor was;
/// a missing row is created at no floor (inbox, now, seq, now).
pub(in crate::inbox) const REOPEN_FLOOR: Sql = Sql {
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
pub(in crate::inbox) const FLOOR_WALK: &str = concat!(
    "SELECT inbox_seq, ack_state, availability_at_utc, next_retry_at_utc, expires_at_utc, \
     delivery_attempts, max_attempts FROM agent_inbox WHERE ",
    inbox!(),
    " AND inbox_seq >= ? ORDER BY inbox_seq LIMIT ?"
);

/// Moves the floor and the waiting events below it (floor, wake seq, wake at, now, inbox).
pub(in crate::inbox) const SET_FLOOR: &str = concat!(
    "UPDATE inbox_claim_floor SET floor_seq = ?, wake_seq = ?, wake_at_utc = ?, updated_at_utc = ? WHERE ",
    inbox!()
);

/// Marks `n` locked, claimable rows claimed, each under its own token hash (lease until,
/// session, now, seq and hash per row, [seq and history line per row,] inbox, `n` seqs).
/// With `history`, each row's entry is appended in the same statement.
pub(in crate::inbox) fn mark_claimed(dialect: Dialect, n: usize, history: bool) -> String {
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
pub(in crate::inbox) fn ack_completed(dialect: Dialect, requests: &[usize], history: &str) -> String {
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
pub(in crate::inbox) fn release_held(dialect: Dialect, history: &str) -> String {
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
pub(in crate::inbox) fn extend_leases(dialect: Dialect, n: usize) -> String {
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

// ---- fair claims ----

/// The served rank of each inbox a publish writes to (tenant, the recipients predicate's
/// binds). Read without a lock: a clock a little behind only ranks a new key a little early.
pub(in crate::inbox) fn fair_clocks_of(recipients: &str) -> String {
    format!(
        "SELECT recipient_kind, recipient_id, served_rank FROM inbox_fair_clock WHERE tenant_id = ? AND {recipients}"
    )
}

/// The last rank of `n` keys in the inboxes a publish writes to (tenant, `n` keys, the
/// recipients predicate's binds). Locked on MySQL, so a host transaction at REPEATABLE READ
/// reads the latest rank, not its snapshot's.
pub(in crate::inbox) fn fair_keys_of(dialect: Dialect, n: usize, recipients: &str) -> String {
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
pub(in crate::inbox) fn write_fair_keys(dialect: Dialect, n: usize) -> String {
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
pub(in crate::inbox) const PRUNE_FAIR_KEYS: &str = "DELETE FROM inbox_fair_key \
    WHERE tenant_id = ? AND recipient_kind = ? AND recipient_id = ? AND last_rank <= ?";

/// Raises an inbox's served rank to a rank a claim took, never lowering it (inbox, rank, now).
pub(in crate::inbox) const RAISE_FAIR_CLOCK: Sql = Sql {
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
    fn only_mysql_claims_skip_locked_rows() {
        assert!(claim_next_in_buckets("0, 1", 2).ends_with(" FOR UPDATE SKIP LOCKED"));
        assert!(claim_next_in_buckets("0, 1", 2).contains("claim_bucket IN (?, ?)"));
        assert!(claim_next_from_bucket("0").ends_with(" FOR UPDATE SKIP LOCKED"));
        assert!(!CLAIM_NEXT_FROM_SQLITE.contains("FOR UPDATE"));
    }
}
