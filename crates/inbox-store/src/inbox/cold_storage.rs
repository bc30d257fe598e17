//! Cold storage: archived events leave the database. An export reads `agent_inbox_archive`
//! rows archived before a time, in primary-key pages, each as one JSON object of its columns
//! (ready for a JSON Lines file); after the file is durable the exporter deletes exactly the
//! keys it wrote ([`Inbox::delete_archived`]), so no row goes that was not written out; each
//! event's history goes with it, as its `history_json` column. The scavenger prunes what is older than `archive_retention` in bounded batches
//! ([`Inbox::prune_archive`]), exported or not: the setting is the promise of how long the
//! database keeps them.

use inbox_core::UnixMillis;
use serde_json::{Map, Value};

use super::{Inbox, queries};
use crate::StoreError;
use crate::db::{Arg, DbRow};
use crate::store::with_retries;

/// Largest page an export reads or a delete names at once.
pub const ARCHIVE_BATCH_MAX: u32 = 1_000;

/// The primary key of an archived row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ArchiveKey {
    pub tenant_id: String,
    pub recipient_kind: String,
    pub recipient_id: String,
    pub inbox_seq: i64,
}

/// One archived event with all its metadata: column name to value, binary columns as
/// lower-case hex (restore them with `UNHEX`).
#[derive(Debug, Clone, PartialEq)]
pub struct ArchivedRow {
    pub key: ArchiveKey,
    pub columns: Map<String, Value>,
}

#[derive(Clone, Copy)]
enum Kind {
    Text,
    Int,
    Hex,
}

/// Every column of `agent_inbox_archive`, in schema order (`queries::ARCHIVE_COLUMNS`), with
/// how an export writes it.
const COLUMNS: &[(&str, Kind)] = &[
    ("tenant_id", Kind::Text),
    ("recipient_kind", Kind::Text),
    ("recipient_id", Kind::Text),
    ("inbox_seq", Kind::Int),
    ("event_id", Kind::Hex),
    ("event_type", Kind::Text),
    ("priority", Kind::Int),
    ("availability_at_utc", Kind::Int),
    ("expires_at_utc", Kind::Int),
    ("deduplication_key", Kind::Text),
    ("ack_state", Kind::Text),
    ("delivery_attempts", Kind::Int),
    ("max_attempts", Kind::Int),
    ("visibility_lease_until_utc", Kind::Int),
    ("lease_token_hash", Kind::Hex),
    ("lease_owner_session_id", Kind::Text),
    ("next_retry_at_utc", Kind::Int),
    ("dead_letter_state", Kind::Text),
    ("company_id", Kind::Text),
    ("workspace_id", Kind::Text),
    ("project_id", Kind::Text),
    ("meeting_room_id", Kind::Text),
    ("message_id", Kind::Text),
    ("routing_decision_id", Kind::Text),
    ("memory_update_id", Kind::Text),
    ("assignment_id", Kind::Text),
    ("payload_json", Kind::Text),
    ("payload_ref_type", Kind::Text),
    ("payload_ref_id", Kind::Text),
    ("created_at_utc", Kind::Int),
    ("acked_at_utc", Kind::Int),
    ("updated_at_utc", Kind::Int),
    ("terminal_at_utc", Kind::Int),
    ("last_error", Kind::Text),
    // One JSON object per line (see `inbox/history.rs`), as stored.
    ("history_json", Kind::Text),
    ("archived_at_utc", Kind::Int),
];

impl Inbox<'_> {
    /// Up to `limit` rows archived before `before`, in key order, after `after` (exclusive).
    pub async fn archived_page(
        self,
        before: UnixMillis,
        after: Option<&ArchiveKey>,
        limit: u32,
    ) -> Result<Vec<ArchivedRow>, StoreError> {
        let limit = limit.clamp(1, ARCHIVE_BATCH_MAX);
        let mut args = vec![Arg::I64(before.get())];
        let sql = if after.is_some() { queries::ARCHIVED_PAGE_AFTER } else { queries::ARCHIVED_PAGE };
        if let Some(key) = after {
            args.extend([
                Arg::Str(&key.tenant_id),
                Arg::Str(&key.tenant_id),
                Arg::Str(&key.recipient_kind),
                Arg::Str(&key.recipient_kind),
                Arg::Str(&key.recipient_id),
                Arg::Str(&key.recipient_id),
                Arg::I64(key.inbox_seq),
            ]);
        }
        args.push(Arg::I64(i64::from(limit)));
        let rows = self.store.pools().reader().await?.conn().fetch_all(sql, &args).await?;
        rows.iter().map(archived_row).collect()
    }

    /// Deletes exactly the archived rows named (and only if archived before `before`); returns
    /// how many went.
    pub async fn delete_archived(self, before: UnixMillis, keys: &[ArchiveKey]) -> Result<u64, StoreError> {
        let mut deleted = 0;
        for chunk in keys.chunks(ARCHIVE_BATCH_MAX as usize / 4) {
            deleted += with_retries!(self.store, self.delete_keys(before, chunk))?;
        }
        Ok(deleted)
    }

    /// Deletes at most `limit` rows archived before `before` (the scavenger's pruning).
    pub async fn prune_archive(self, before: UnixMillis, limit: u32) -> Result<u64, StoreError> {
        let keys: Vec<ArchiveKey> = {
            let args = [Arg::I64(before.get()), Arg::I64(i64::from(limit.clamp(1, ARCHIVE_BATCH_MAX)))];
            let rows =
                self.store.pools().reader().await?.conn().fetch_all(queries::ARCHIVED_KEYS, &args).await?;
            rows.iter().map(key_of).collect::<Result<_, _>>()?
        };
        self.delete_archived(before, &keys).await
    }

    async fn delete_keys(self, before: UnixMillis, keys: &[ArchiveKey]) -> Result<u64, StoreError> {
        if keys.is_empty() {
            return Ok(0);
        }
        let mut args = vec![Arg::I64(before.get())];
        for key in keys {
            args.extend([
                Arg::Str(&key.tenant_id),
                Arg::Str(&key.recipient_kind),
                Arg::Str(&key.recipient_id),
                Arg::I64(key.inbox_seq),
            ]);
        }
        Ok(self
            .store
            .pools()
            .writer()
            .await?
            .conn()
            .execute(&queries::delete_archived(keys.len()), &args)
            .await?
            .rows_affected)
    }
}

fn key_of(row: &DbRow) -> Result<ArchiveKey, StoreError> {
    Ok(ArchiveKey {
        tenant_id: row.string("tenant_id")?,
        recipient_kind: row.string("recipient_kind")?,
        recipient_id: row.string("recipient_id")?,
        inbox_seq: row.i64("inbox_seq")?,
    })
}

fn archived_row(row: &DbRow) -> Result<ArchivedRow, StoreError> {
    let mut columns = Map::new();
    for (name, kind) in COLUMNS {
        let value = match kind {
            Kind::Text => row.opt_string(name)?.map_or(Value::Null, Value::String),
            Kind::Int => row.opt_i64(name)?.map_or(Value::Null, Value::from),
            Kind::Hex => row.opt_bytes(name)?.map_or(Value::Null, |bytes| {
                Value::String(bytes.iter().map(|b| format!("{b:02x}")).collect())
            }),
        };
        columns.insert((*name).to_owned(), value);
    }
    Ok(ArchivedRow { key: key_of(row)?, columns })
}

/// The key an exported line names, for deleting exactly what a file holds.
pub fn archive_key_of_line(line: &Map<String, Value>) -> Option<ArchiveKey> {
    Some(ArchiveKey {
        tenant_id: line.get("tenant_id")?.as_str()?.to_owned(),
        recipient_kind: line.get("recipient_kind")?.as_str()?.to_owned(),
        recipient_id: line.get("recipient_id")?.as_str()?.to_owned(),
        inbox_seq: line.get("inbox_seq")?.as_i64()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_export_types_every_archived_column_in_order() {
        let names: Vec<&str> = COLUMNS.iter().map(|(name, _)| *name).collect();
        assert_eq!(names.join(", "), queries::ARCHIVE_COLUMNS);
    }
}
