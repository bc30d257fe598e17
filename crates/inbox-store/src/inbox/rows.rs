//! Reading one inbox's rows by key, under the caller's transaction and lock: its head, and its
//! events by id. Every path that names an inbox (reads, leases, the floor, admin, browse) starts
//! from these.

use inbox_core::{EventId, InboxSeq, RecipientKey};

use super::queries;
use crate::db::{Arg, DbConnection};
use crate::inbox::record::{event_from_row, event_with_history_from_row, seq};
use crate::{EventRecord, InboxHead, StoreError};

/// The binds that name an inbox, in the order every statement's `inbox!()` clause takes them.
pub(crate) fn inbox_args(inbox: &RecipientKey) -> Vec<Arg<'_>> {
    vec![
        Arg::Str(inbox.tenant_id.as_str()),
        Arg::Str(inbox.recipient.kind.as_str()),
        Arg::Str(inbox.recipient.id.as_str()),
    ]
}

/// Reads a head row, optionally locking it (`lock` is a dialect's FOR UPDATE clause).
pub(crate) async fn read_head(
    conn: &mut DbConnection<'_>,
    inbox: &RecipientKey,
    lock: &str,
) -> Result<InboxHead, StoreError> {
    match conn.fetch_optional(&queries::head(lock), &inbox_args(inbox)).await? {
        None => Ok(InboxHead::EMPTY),
        Some(row) => Ok(InboxHead {
            head_seq: seq(row.i64("head_seq")?)?,
            oldest_available_seq: seq(row.i64("oldest_available_seq")?)?.max(InboxSeq(1)),
        }),
    }
}

/// Like [`load_events`], with each event's `history_json`: for the slow path, which rewrites it.
pub(crate) async fn load_events_with_history(
    conn: &mut DbConnection<'_>,
    inbox: &RecipientKey,
    event_ids: &[EventId],
    lock: &str,
) -> Result<Vec<(EventRecord, Option<String>)>, StoreError> {
    let mut args = inbox_args(inbox);
    args.extend(event_ids.iter().map(|id| Arg::Bytes(id.as_bytes())));
    let sql = queries::events_by_id(conn.dialect(), event_ids.len(), lock, true);
    conn.fetch_all(&sql, &args).await?.iter().map(event_with_history_from_row).collect()
}

/// Loads the named events of one inbox (missing ones are simply absent).
pub(crate) async fn load_events(
    conn: &mut DbConnection<'_>,
    inbox: &RecipientKey,
    event_ids: &[EventId],
    lock: &str,
) -> Result<Vec<EventRecord>, StoreError> {
    let mut args = inbox_args(inbox);
    args.extend(event_ids.iter().map(|id| Arg::Bytes(id.as_bytes())));
    let sql = queries::events_by_id(conn.dialect(), event_ids.len(), lock, false);
    conn.fetch_all(&sql, &args).await?.iter().map(event_from_row).collect()
}
