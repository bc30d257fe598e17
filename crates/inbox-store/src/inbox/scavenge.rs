//! The scavenger: leases past their end go back to the inbox (with backoff) or to
//! dead-letter, events past `expires_at` expire, and terminal events older than the retention
//! window move to `agent_inbox_archive`.
//!
//! Safe on several nodes at once: lease and expiry work takes rows with SKIP LOCKED and
//! re-checks each through the state machine; archiving locks the recipient's head row first,
//! so two nodes never archive the same rows.

use inbox_core::{AckState, InboxSeq, RecipientKey, TenantId, Transition};

use super::{Inbox, queries};
use crate::EventRecord;
use crate::db::{Arg, DbConnection};
use crate::entropy::unit_interval;
use crate::inbox::apply::save;
use crate::inbox::history::{self, Attribution};
use crate::inbox::read::{inbox_args, read_head};
use crate::inbox::record::{event_with_history_from_row, recipient_from_row, seq_arg, settle};
use crate::store::with_retries;
use crate::{ScavengeReport, StoreError};

impl Inbox<'_> {
    /// One pass over at most `batch_limit` rows of each kind of work. Call it periodically;
    /// it also re-measures the clock offset to the database.
    pub async fn scavenge(self, batch_limit: u32) -> Result<ScavengeReport, StoreError> {
        self.store.batch_len("batch_limit", batch_limit as usize)?;
        self.store.sync_clock().await?;
        let (leases_returned, dead_lettered) =
            with_retries!(self.store, self.return_expired_leases(batch_limit))?;
        let expired = with_retries!(self.store, self.expire_events(batch_limit))?;
        let archived = self.archive_retained(batch_limit).await?;
        let archive_cutoff = self.store.now().minus_ms(self.store.config().archive_retention_ms);
        let pruned = self.prune_archive(archive_cutoff, batch_limit).await?;
        Ok(ScavengeReport { leases_returned, dead_lettered, expired, archived, pruned })
    }

    async fn return_expired_leases(self, limit: u32) -> Result<(u64, u64), StoreError> {
        let now = self.store.now();
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        let sql = queries::EXPIRED_LEASES.text(self.store.dialect());
        let rows = conn.fetch_all(sql, &[Arg::I64(now.get()), Arg::I64(i64::from(limit))]).await?;
        let (mut returned, mut dead) = (0, 0);
        for row in &rows {
            let (record, history) = event_with_history_from_row(row)?;
            let backoff_ms =
                self.store.config().backoff.delay_ms(record.lifecycle.delivery_attempts, unit_interval());
            let Some(record) = self
                .scavenge_one(&mut conn, record, history, Transition::LeaseExpired { now, backoff_ms }, now)
                .await?
            else {
                continue;
            };
            match record.state() {
                AckState::DeadLetter => dead += 1,
                AckState::Available => returned += 1,
                _ => {}
            }
        }
        tx.commit().await?;
        Ok((returned, dead))
    }

    async fn expire_events(self, limit: u32) -> Result<u64, StoreError> {
        let now = self.store.now();
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        let sql = queries::EXPIRED_AVAILABLE.text(self.store.dialect());
        let rows = conn.fetch_all(sql, &[Arg::I64(now.get()), Arg::I64(i64::from(limit))]).await?;
        let mut expired = 0;
        for row in &rows {
            let (record, history) = event_with_history_from_row(row)?;
            if self.scavenge_one(&mut conn, record, history, Transition::Expire { now }, now).await?.is_some()
            {
                expired += 1;
            }
        }
        tx.commit().await?;
        Ok(expired)
    }

    /// Applies the scavenger's transition to one locked row and writes it back with its
    /// history; `None` when the state machine refuses (the row changed since it was read).
    async fn scavenge_one(
        self,
        conn: &mut DbConnection<'_>,
        mut record: EventRecord,
        history: Option<String>,
        transition: Transition,
        now: inbox_core::UnixMillis,
    ) -> Result<Option<EventRecord>, StoreError> {
        let Ok(applied) = record.lifecycle.apply(transition) else {
            return Ok(None);
        };
        let before = record.clone();
        settle(&mut record, applied.next, now);
        if self.store.config().record_history {
            let entries = history::entries_for(&transition, &before, &record, Attribution::scavenger(), None);
            let text = history::capped(history.as_deref(), &history::lines(&entries));
            save(conn, &record, Some(&text)).await?;
        } else {
            save(conn, &record, None).await?;
        }
        Ok(Some(record))
    }

    /// Moves terminal events older than the retention window to the archive, per recipient
    /// and only as a prefix of its sequence, then advances `oldest_available_seq` so a cursor
    /// pointing into the archived range is told to resync instead of skipping silently.
    async fn archive_retained(self, limit: u32) -> Result<u64, StoreError> {
        let cutoff = self.store.now().minus_ms(self.store.config().retention_ms);
        let inboxes = {
            let mut pooled = self.store.pools().reader().await?;
            let rows = pooled
                .conn()
                .fetch_all(
                    queries::INBOXES_WITH_RETAINED,
                    &[Arg::I64(cutoff.get()), Arg::I64(i64::from(limit))],
                )
                .await?;
            rows.iter()
                .map(|row| {
                    Ok(RecipientKey {
                        tenant_id: TenantId::new(row.string("tenant_id")?)
                            .map_err(|e| StoreError::Corrupt(e.to_string()))?,
                        recipient: recipient_from_row(row)?,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?
        };
        let mut archived = 0;
        for inbox in &inboxes {
            archived += with_retries!(self.store, self.archive_inbox(inbox, cutoff, limit))?;
        }
        Ok(archived)
    }

    async fn archive_inbox(
        self,
        inbox: &RecipientKey,
        cutoff: inbox_core::UnixMillis,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let now = self.store.now();
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        let head = read_head(&mut conn, inbox, self.store.dialect().for_update()).await?;
        let mut args = inbox_args(inbox);
        args.push(Arg::I64(cutoff.get()));
        let boundary = conn
            .fetch_optional(queries::RETAINED_BOUNDARY, &args)
            .await?
            .map(|row| row.opt_i64("boundary"))
            .transpose()?
            .flatten();
        let boundary = match boundary {
            Some(seq) => crate::inbox::record::seq(seq)?,
            None => head.head_seq.next(),
        };
        let upper = boundary.min(InboxSeq(head.oldest_available_seq.get() + u64::from(limit)));
        if upper <= head.oldest_available_seq {
            return Ok(0);
        }
        let mut args = vec![Arg::I64(now.get())];
        args.extend(inbox_args(inbox));
        args.push(seq_arg(upper));
        conn.execute(queries::ARCHIVE_PREFIX, &args).await?;
        let mut args = inbox_args(inbox);
        args.push(seq_arg(upper));
        let moved = conn.execute(queries::DELETE_PREFIX, &args).await?;
        let mut args = vec![seq_arg(upper), Arg::I64(now.get())];
        args.extend(inbox_args(inbox));
        conn.execute(queries::ADVANCE_OLDEST_AVAILABLE, &args).await?;
        tx.commit().await?;
        Ok(moved.rows_affected)
    }
}
