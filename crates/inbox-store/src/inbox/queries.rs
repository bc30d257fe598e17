//! Named statements of the operators' reads of the `inbox` subsystem (`browse.rs`). The
//! older operations still build theirs in place.

use crate::dialect::event_columns_with_history as detail_columns;

/// One live event with its history (tenant, kind, recipient, event id).
pub(super) const LIVE_EVENT_DETAIL: &str = concat!(
    "SELECT ",
    detail_columns!(),
    " FROM agent_inbox WHERE tenant_id = ? AND recipient_kind = ? AND recipient_id = ? AND event_id = ?"
);

/// One archived event with its history (tenant, kind, recipient, event id).
pub(super) const ARCHIVED_EVENT_DETAIL: &str = concat!(
    "SELECT ",
    detail_columns!(),
    " FROM agent_inbox_archive WHERE event_id = ? AND tenant_id = ? AND recipient_kind = ? AND recipient_id = ?"
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

/// The filter of an events listing for one display state; `None` for a stored state, which
/// is matched by `ack_state = ?`. Both bind `now` once.
pub(super) const AVAILABLE_NOW: &str =
    " AND ack_state = 'available' AND (next_retry_at_utc IS NULL OR next_retry_at_utc <= ?)";
pub(super) const RETRY_SCHEDULED: &str = " AND ack_state = 'available' AND next_retry_at_utc > ?";
