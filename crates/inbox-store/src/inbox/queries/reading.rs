//! Statements that read events: polls, heads, events by id, counts, and operators' browsing.

use super::shared::*;
use crate::dialect::{Dialect, Sql, placeholders};

// ---- read ----

/// Events of one inbox after a seq, in seq order: a poll (inbox, after seq, limit).
pub(in crate::inbox) const EVENTS_AFTER: &str = concat!(
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
pub(in crate::inbox) const CLAIMABLE_EVENTS_AFTER_SQLITE: &str = concat!(
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
pub(in crate::inbox) fn claimable_events_after_in_buckets(ranks: &str, bucket_filter: &str) -> String {
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
pub(in crate::inbox) const COUNT_UNACKED: &str = concat!(
    "SELECT COUNT(*) AS n FROM (SELECT 1 FROM agent_inbox WHERE ",
    inbox!(),
    " AND ack_state IN ('available', 'claimed') LIMIT ?) AS open_events"
);

/// A tenant's events not yet acknowledged or parked, and the inline payload bytes they hold
/// (tenant): what its quotas count. Walks the tenant's rows by primary key.
pub(in crate::inbox) const TENANT_USAGE: Sql = Sql {
    mysql: "SELECT COUNT(*) AS n, CAST(COALESCE(SUM(LENGTH(payload_json)), 0) AS SIGNED) AS bytes FROM agent_inbox \
            WHERE tenant_id = ? AND ack_state IN ('available', 'claimed')",
    sqlite: "SELECT COUNT(*) AS n, COALESCE(SUM(LENGTH(CAST(payload_json AS BLOB))), 0) AS bytes FROM agent_inbox \
             WHERE tenant_id = ? AND ack_state IN ('available', 'claimed')",
};

/// Events after a cursor not yet acknowledged or parked (inbox, after seq, limit).
pub(in crate::inbox) const OPEN_EVENTS_AFTER: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM agent_inbox WHERE ",
    inbox!(),
    " AND inbox_seq > ? AND ack_state IN ('available', 'claimed') ORDER BY inbox_seq LIMIT ?"
);

/// The inbox's head row, with `lock` (a dialect's locking clause, or nothing) (inbox).
pub(in crate::inbox) fn head(lock: &str) -> String {
    format!(concat!("SELECT head_seq, oldest_available_seq FROM inbox_head WHERE ", inbox!(), "{}"), lock)
}

/// `n` events of an inbox by id, with `lock` (inbox, `n` event ids); `with_history` adds each
/// one's history, for the slow path, which rewrites it.
pub(in crate::inbox) fn events_by_id(dialect: Dialect, n: usize, lock: &str, with_history: bool) -> String {
    let columns = if with_history { EVENT_COLUMNS_WITH_HISTORY } else { EVENT_COLUMNS };
    format!(
        concat!("SELECT {} FROM agent_inbox{} WHERE ", inbox!(), " AND event_id IN ({}){}"),
        columns,
        by_event_id(dialect),
        placeholders(n),
        lock
    )
}

// ---- operators' reads (browse.rs) ----

/// One page of an operator's listing, in both orders (binds for both: inbox, after seq,
/// before seq, the filter's, limit): the events between two seqs, oldest or newest first.
#[derive(Debug, Clone, Copy)]
pub(in crate::inbox) struct EventsPage {
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
pub(in crate::inbox) const EVENTS_PAGE: EventsPage = events_page!("");

/// Events claimable by time, ignoring expiry and attempts, as the display state `available`
/// means (binds now).
pub(in crate::inbox) const EVENTS_PAGE_AVAILABLE_NOW: EventsPage =
    events_page!(" AND ack_state = 'available' AND (next_retry_at_utc IS NULL OR next_retry_at_utc <= ?)");

/// Events waiting for a scheduled retry (binds now).
pub(in crate::inbox) const EVENTS_PAGE_RETRY_SCHEDULED: EventsPage =
    events_page!(" AND ack_state = 'available' AND next_retry_at_utc > ?");

/// Events in one stored state (binds the state).
pub(in crate::inbox) const EVENTS_PAGE_IN_STATE: EventsPage = events_page!(" AND ack_state = ?");

/// One live event with its history (tenant, kind, recipient, event id).
pub(in crate::inbox) const LIVE_EVENT_DETAIL: &str = concat!(
    "SELECT ",
    event_columns_with_history!(),
    " FROM agent_inbox WHERE ",
    inbox!(),
    " AND event_id = ?"
);

/// One archived event with its history (event id, tenant, kind, recipient).
pub(in crate::inbox) const ARCHIVED_EVENT_DETAIL: &str = concat!(
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
pub(in crate::inbox) const ACTIVITY_PER_MINUTE: &str = "SELECT minute_start, \
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
