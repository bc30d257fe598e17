//! Statements of the inbox's upkeep: the scavenger's sweeps, operators' changes to parked
//! events, and cold storage.

use crate::dialect::{Sql, placeholders};

// ---- scavenge ----

/// Claimed events whose lease ended within a window, soonest ended first, skipping rows
/// others hold (after, now, limit). The window's start keeps the sweep off the dead entries
/// of long-acknowledged leases (scavenge.rs).
pub(in crate::inbox) const EXPIRED_LEASES: Sql = locked!(
    " FOR UPDATE SKIP LOCKED",
    "SELECT ",
    event_columns_with_history!(),
    " FROM agent_inbox WHERE ack_state = 'claimed' AND visibility_lease_until_utc > ? \
     AND visibility_lease_until_utc <= ? ORDER BY visibility_lease_until_utc LIMIT ?"
);

/// Available events whose expiry passed within a window, soonest first, skipping rows others
/// hold (after, now, limit): SQLite, and MySQL's sweep of the whole range.
pub(in crate::inbox) const EXPIRED_AVAILABLE: Sql = locked!(
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
pub(in crate::inbox) fn expired_available_in_buckets(n: usize) -> String {
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
pub(in crate::inbox) const INBOXES_WITH_RETAINED: &str = "SELECT DISTINCT tenant_id, recipient_kind, recipient_id \
    FROM agent_inbox WHERE terminal_at_utc < ? LIMIT ?";

/// The inbox's first event not yet due for the archive: not terminal, or terminal since the
/// cutoff (inbox, cutoff).
pub(in crate::inbox) const RETAINED_BOUNDARY: &str = concat!(
    "SELECT MIN(inbox_seq) AS boundary FROM agent_inbox WHERE ",
    inbox!(),
    " AND (terminal_at_utc IS NULL OR terminal_at_utc >= ?)"
);

/// Copies the inbox's events before a seq to the archive (archived at, inbox, seq).
pub(in crate::inbox) const ARCHIVE_PREFIX: &str = concat!(
    "INSERT INTO agent_inbox_archive (",
    event_columns_with_history!(),
    ", archived_at_utc) SELECT ",
    event_columns_with_history!(),
    ", ? FROM agent_inbox WHERE ",
    inbox!(),
    " AND inbox_seq < ?"
);

/// Deletes the inbox's events before a seq, once archived (inbox, seq).
pub(in crate::inbox) const DELETE_PREFIX: &str =
    concat!("DELETE FROM agent_inbox WHERE ", inbox!(), " AND inbox_seq < ?");

/// Moves the inbox's oldest retained seq (seq, now, inbox).
pub(in crate::inbox) const ADVANCE_OLDEST_AVAILABLE: &str =
    concat!("UPDATE inbox_head SET oldest_available_seq = ?, updated_at_utc = ? WHERE ", inbox!());

// ---- operator work ----

/// A tenant's parked events, oldest parked first (tenant, [kind, recipient,] [state,] limit).
pub(in crate::inbox) fn parked(of_recipient: bool, in_state: bool) -> String {
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
pub(in crate::inbox) const DELETE_EVENT: &str =
    concat!("DELETE FROM agent_inbox WHERE ", inbox!(), " AND inbox_seq = ?");

/// Backlog per inbox of a tenant, by recipient (now, tenant, limit).
pub(in crate::inbox) const INBOX_STATS: &str = "SELECT h.recipient_kind, h.recipient_id, h.head_seq, \
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
pub(in crate::inbox) fn agent_presence(n: usize) -> String {
    format!(
        "SELECT agent_id, CAST(SUM(CASE WHEN status = 'active' THEN 1 ELSE 0 END) AS SIGNED) AS online, \
         MAX(last_heartbeat_at_utc) AS last_seen FROM agent_session WHERE tenant_id = ? AND agent_id IN ({}) \
         GROUP BY agent_id",
        placeholders(n)
    )
}

/// Every inbox with unacknowledged or parked events, deepest first (limit).
pub(in crate::inbox) const BACKLOGS: &str = "SELECT tenant_id, recipient_kind, recipient_id, \
    CAST(SUM(CASE WHEN ack_state IN ('available', 'claimed') THEN 1 ELSE 0 END) AS SIGNED) AS depth, \
    CAST(SUM(CASE WHEN ack_state IN ('dead_letter', 'quarantined') THEN 1 ELSE 0 END) AS SIGNED) AS parked, \
    MIN(CASE WHEN ack_state IN ('available', 'claimed') THEN created_at_utc END) AS oldest_unacked_at \
    FROM agent_inbox WHERE ack_state IN ('available', 'claimed', 'dead_letter', 'quarantined') \
    GROUP BY tenant_id, recipient_kind, recipient_id ORDER BY depth DESC LIMIT ?";

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
pub(in crate::inbox) const ARCHIVE_COLUMNS: &str = archive_columns!();

/// Rows archived before a time, in key order (before, limit).
pub(in crate::inbox) const ARCHIVED_PAGE: &str = concat!(
    "SELECT ",
    archive_columns!(),
    " FROM agent_inbox_archive WHERE archived_at_utc < ? \
     ORDER BY tenant_id, recipient_kind, recipient_id, inbox_seq LIMIT ?"
);

/// Rows archived before a time, in key order, after a key (before, tenant ×2, kind ×2,
/// recipient ×2, seq, limit).
pub(in crate::inbox) const ARCHIVED_PAGE_AFTER: &str = concat!(
    "SELECT ",
    archive_columns!(),
    " FROM agent_inbox_archive WHERE archived_at_utc < ? \
     AND (tenant_id > ? OR (tenant_id = ? AND (recipient_kind > ? OR (recipient_kind = ? \
     AND (recipient_id > ? OR (recipient_id = ? AND inbox_seq > ?)))))) \
     ORDER BY tenant_id, recipient_kind, recipient_id, inbox_seq LIMIT ?"
);

/// Keys of rows archived before a time, in key order (before, limit).
pub(in crate::inbox) const ARCHIVED_KEYS: &str = "SELECT tenant_id, recipient_kind, recipient_id, inbox_seq \
    FROM agent_inbox_archive WHERE archived_at_utc < ? \
    ORDER BY tenant_id, recipient_kind, recipient_id, inbox_seq LIMIT ?";

/// Deletes exactly `n` archived rows, if archived before a time (before, then tenant, kind,
/// recipient and seq per row).
pub(in crate::inbox) fn delete_archived(n: usize) -> String {
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
