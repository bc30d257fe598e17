//! Every SQL statement of the `signals` subsystem, by name: reading committed `outbox_signal`
//! rows by id, finding where a notifier starts, and deleting old rows.

use crate::dialect::placeholders;

/// Columns of `outbox_signal` read into a `Signal`.
macro_rules! signal_columns {
    () => {
        "outbox_id, tenant_id, signal_type, recipient_heads, created_at_utc"
    };
}

/// Committed signals after an id, in id order (after id, limit).
pub(super) const SIGNALS_AFTER: &str = concat!(
    "SELECT ",
    signal_columns!(),
    " FROM outbox_signal WHERE outbox_id > ? ORDER BY outbox_id LIMIT ?"
);

/// The signals among `n` ids that exist now, in id order (id per signal).
pub(super) fn signals_by_ids(n: usize) -> String {
    format!(
        concat!(
            "SELECT ",
            signal_columns!(),
            " FROM outbox_signal WHERE outbox_id IN ({}) ORDER BY outbox_id"
        ),
        placeholders(n)
    )
}

/// The first signal written at or after a time, as `n` (since).
pub(super) const FIRST_SIGNAL_SINCE: &str =
    "SELECT MIN(outbox_id) AS n FROM outbox_signal WHERE created_at_utc >= ?";

/// The newest signal before an id, as `n` (id). The primary key answers this without scanning
/// the older rows.
pub(super) const LAST_SIGNAL_BEFORE: &str =
    "SELECT MAX(outbox_id) AS n FROM outbox_signal WHERE outbox_id < ?";

/// The newest signal, as `n`.
pub(super) const LAST_SIGNAL: &str = "SELECT MAX(outbox_id) AS n FROM outbox_signal";

/// Up to a limit of signals written before a cutoff, oldest first (cutoff, limit). MySQL
/// refuses LIMIT inside an IN subquery, so the ids are read first and deleted with
/// [`delete_signals`].
pub(super) const SIGNALS_BEFORE: &str =
    "SELECT outbox_id FROM outbox_signal WHERE created_at_utc < ? ORDER BY created_at_utc LIMIT ?";

/// Deletes `n` signals read by [`SIGNALS_BEFORE`] (id per signal).
pub(super) fn delete_signals(n: usize) -> String {
    format!("DELETE FROM outbox_signal WHERE outbox_id IN ({})", placeholders(n))
}
