//! The read side: poll after a cursor, head lookup, single events. Nothing here writes or
//! locks, so readers never slow down publishers or claimers.

use inbox_core::{EventId, InboxSeq, RecipientKey, TenantId};

use super::{Inbox, claim_floor, queries};
use crate::Dialect;
use crate::Field;
use crate::db::Arg;
use crate::inbox::record::{event_from_row, seq_arg};
use crate::inbox::rows::{inbox_args, load_events, read_head};
use crate::{EventRecord, InboxHead, PollPage, PollQuery, StoreError, TenantUsage};

/// Where [`Inbox::unacked_estimate`] stops counting.
pub const UNACKED_ESTIMATE_MAX: u64 = 10_000;

impl Inbox<'_> {
    /// Events after `after_seq` in sequence order, with the head and whether more remain.
    /// Refuses a cursor that points before retained data with
    /// [`StoreError::CursorResetRequired`], so a client never silently skips archived events.
    pub async fn poll_after_cursor(self, query: &PollQuery) -> Result<PollPage, StoreError> {
        self.store.batch_len(Field::Limit, query.limit as usize)?;
        let now = self.store.now();
        let mut pooled = self.store.pools().reader().await?;
        let mut conn = pooled.conn();
        let head = read_head(&mut conn, &query.inbox, "").await?;
        if query.after_seq.next() < head.oldest_available_seq {
            return Err(StoreError::CursorResetRequired {
                after_seq: query.after_seq,
                oldest_available_seq: head.oldest_available_seq,
                head_seq: head.head_seq,
            });
        }
        let mut args = inbox_args(&query.inbox);
        let sql = match (query.claimable_only, self.store.dialect()) {
            (true, Dialect::MySql) => {
                // Like a claim, through the buckets from the claim floor on (claim_floor.rs).
                let window = claim_floor::claim_window(&mut conn, &query.inbox, now).await?;
                let from_cursor = (query.after_seq.get() + 1) / claim_floor::BUCKET_SEQS;
                let (sql, first) = claim_floor::claimable_after_sql(window, from_cursor);
                match first {
                    claim_floor::BucketArgs::Exactly(buckets) => {
                        args.extend(buckets.into_iter().map(|b| Arg::I64(bucket_i64(b))))
                    }
                    claim_floor::BucketArgs::From(bucket) => args.push(Arg::I64(bucket_i64(bucket))),
                }
                args.push(seq_arg(query.after_seq));
                args.extend([Arg::I64(now.get()), Arg::I64(now.get()), Arg::I64(now.get())]);
                sql
            }
            (true, Dialect::Sqlite) => {
                args.push(seq_arg(query.after_seq));
                args.extend([Arg::I64(now.get()), Arg::I64(now.get()), Arg::I64(now.get())]);
                queries::CLAIMABLE_EVENTS_AFTER_SQLITE.to_owned()
            }
            (false, _) => {
                args.push(seq_arg(query.after_seq));
                queries::EVENTS_AFTER.to_owned()
            }
        };
        args.push(Arg::I64(i64::from(query.limit) + 1));
        let mut events =
            conn.fetch_all(&sql, &args).await?.iter().map(event_from_row).collect::<Result<Vec<_>, _>>()?;
        let more_available = events.len() > query.limit as usize;
        events.truncate(query.limit as usize);
        let next_cursor = events.last().map_or(query.after_seq, |e| e.inbox_seq);
        // Rows may have committed after the head was read; the head is never behind them. A
        // cursor past the head (a client ahead of a restored database) keeps its cursor but
        // learns the real head, so it can tell.
        let head_seq = events.last().map_or(head.head_seq, |e| head.head_seq.max(e.inbox_seq));
        Ok(PollPage { head_seq, events, next_cursor, more_available })
    }

    /// The recipient's newest sequence number and oldest retained one.
    pub async fn head(self, inbox: &RecipientKey) -> Result<InboxHead, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        read_head(&mut pooled.conn(), inbox, "").await
    }

    /// How many of the inbox's events are not yet acknowledged or parked (available, scheduled
    /// or claimed), counted up to [`UNACKED_ESTIMATE_MAX`]: seed 001's `approximate_unacked`,
    /// which a hint carries. The count walks the claim index and stops at the cap, so a deep
    /// backlog costs no more than that.
    pub async fn unacked_estimate(self, inbox: &RecipientKey) -> Result<u64, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let mut args = inbox_args(inbox);
        args.push(Arg::I64(UNACKED_ESTIMATE_MAX as i64));
        let n = pooled
            .conn()
            .fetch_optional(queries::COUNT_UNACKED, &args)
            .await?
            .map(|row| row.i64("n"))
            .transpose()?;
        Ok(n.unwrap_or(0).max(0) as u64)
    }

    /// What the tenant's quotas count: its events not yet acknowledged or parked, and the
    /// inline payload bytes they hold.
    pub async fn tenant_usage(self, tenant_id: &TenantId) -> Result<TenantUsage, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let dialect = self.store.dialect();
        let row = pooled
            .conn()
            .fetch_optional(queries::TENANT_USAGE.text(dialect), &[Arg::Str(tenant_id.as_str())])
            .await?;
        let (events, bytes) = match row {
            Some(row) => (row.i64("n")?, row.i64("bytes")?),
            None => (0, 0),
        };
        Ok(TenantUsage {
            pending_events: u64::try_from(events).unwrap_or(0),
            stored_bytes: u64::try_from(bytes).unwrap_or(0),
        })
    }

    /// Events after `after_seq` not yet acknowledged or parked (available, scheduled or
    /// claimed), oldest first, at most `limit`, and whether more remain: what an agent must
    /// still handle after it rebuilt its state from scratch. Page on with the last one's seq.
    pub async fn open_events(
        self,
        inbox: &RecipientKey,
        after_seq: InboxSeq,
        limit: u32,
    ) -> Result<(Vec<EventRecord>, bool), StoreError> {
        self.store.batch_len(Field::Limit, limit as usize)?;
        let mut args = inbox_args(inbox);
        args.push(seq_arg(after_seq));
        args.push(Arg::I64(i64::from(limit) + 1));
        let mut pooled = self.store.pools().reader().await?;
        let mut events = pooled
            .conn()
            .fetch_all(queries::OPEN_EVENTS_AFTER, &args)
            .await?
            .iter()
            .map(event_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let more = events.len() > limit as usize;
        events.truncate(limit as usize);
        Ok((events, more))
    }

    /// One event of an inbox, in whatever state it is in.
    pub async fn event(
        self,
        inbox: &RecipientKey,
        event_id: EventId,
    ) -> Result<Option<EventRecord>, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let events = load_events(&mut pooled.conn(), inbox, &[event_id], "").await?;
        Ok(events.into_iter().next())
    }
}

fn bucket_i64(bucket: u64) -> i64 {
    i64::try_from(bucket).unwrap_or(i64::MAX)
}
