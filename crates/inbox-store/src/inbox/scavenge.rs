//! The scavenger: leases past their end go back to the inbox (with backoff) or to
//! dead-letter, events past `expires_at` expire, and terminal events older than the retention
//! window move to `agent_inbox_archive`.
//!
//! The lease and expiry sweeps read a window of their index, from a little before where the
//! last pass ended up to now, not the whole range: while an old read view holds back purge,
//! the range's low end is full of the delete-marked entries of every lease acknowledged since
//! the view opened, and a sweep reading it every second reads them all (issue 27). Each node
//! keeps its own marks ([`SweepMarks`]); every [`FULL_SWEEP_MS`] (and at start) a pass reads
//! the whole range, for a row a window could miss (one another transaction held locked past
//! the overlap).
//!
//! Safe on several nodes at once: lease and expiry work takes rows with SKIP LOCKED and
//! re-checks each through the state machine; archiving locks the recipient's head row first,
//! so two nodes never archive the same rows.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};

use inbox_core::{AckState, InboxSeq, RecipientKey, TenantId, Transition, UnixMillis};

use super::{Inbox, queries};
use crate::EventRecord;
use crate::Field;
use crate::db::{Arg, DbConnection};
use crate::entropy::unit_interval;
use crate::inbox::apply::save;
use crate::inbox::claim_floor;
use crate::inbox::history::{self, Attribution};
use crate::inbox::record::{event_with_history_from_row, recipient_from_row, seq_arg, settle};
use crate::inbox::rows::{inbox_args, read_head};
use crate::store::with_retries;
use crate::{ScavengeReport, StoreError};

impl Inbox<'_> {
    /// One pass over at most `batch_limit` rows of each kind of work. Call it periodically;
    /// it also re-measures the clock offset to the database.
    pub async fn scavenge(self, batch_limit: u32) -> Result<ScavengeReport, StoreError> {
        self.store.batch_len(Field::ScavengeBatch, batch_limit as usize)?;
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
        let marks = &self.store.sweep_marks().leases;
        let from = marks.window_start(now);
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        let sql = queries::EXPIRED_LEASES.text(self.store.dialect());
        let args = [Arg::I64(from), Arg::I64(now.get()), Arg::I64(i64::from(limit))];
        let rows = conn.fetch_all(sql, &args).await?;
        let (mut returned, mut dead) = (0, 0);
        let mut last_lease_end = None;
        // The lowest seq each inbox got back, for its claim floor (inboxes in key order).
        let mut reopened: BTreeMap<RecipientKey, InboxSeq> = BTreeMap::new();
        for row in &rows {
            let (record, history) = event_with_history_from_row(row)?;
            last_lease_end = record.lifecycle.lease.as_ref().map(|lease| lease.until.get());
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
                AckState::Available => {
                    returned += 1;
                    let lowest = reopened.entry(record.inbox.clone()).or_insert(record.inbox_seq);
                    *lowest = (*lowest).min(record.inbox_seq);
                }
                _ => {}
            }
        }
        for (inbox, seq) in &reopened {
            claim_floor::reopen(&mut conn, inbox, *seq, now).await?;
        }
        tx.commit().await?;
        marks.swept(now, from, rows.len() < limit as usize, last_lease_end);
        Ok((returned, dead))
    }

    async fn expire_events(self, limit: u32) -> Result<u64, StoreError> {
        let now = self.store.now();
        let marks = &self.store.sweep_marks().expiry;
        let from = marks.window_start(now);
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        let (sql, mut args) = match expiry_buckets(self.store.dialect(), from, now) {
            Some(buckets) => (
                queries::expired_available_in_buckets(buckets.len()),
                buckets.into_iter().map(Arg::I64).collect::<Vec<_>>(),
            ),
            None => (queries::EXPIRED_AVAILABLE.text(self.store.dialect()).to_owned(), Vec::new()),
        };
        args.extend([Arg::I64(from), Arg::I64(now.get()), Arg::I64(i64::from(limit))]);
        let rows = conn.fetch_all(&sql, &args).await?;
        let mut expired = 0;
        let mut last_expiry = None;
        for row in &rows {
            let (record, history) = event_with_history_from_row(row)?;
            last_expiry = record.lifecycle.expires_at.map(UnixMillis::get);
            if self.scavenge_one(&mut conn, record, history, Transition::Expire { now }, now).await?.is_some()
            {
                expired += 1;
            }
        }
        tx.commit().await?;
        marks.swept(now, from, rows.len() < limit as usize, last_expiry);
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

/// How far a sweep's window reaches back before where the last pass ended: rows another
/// transaction held locked then (SKIP LOCKED passed them), a lease written by a claim that
/// committed a moment after, a clock a little behind.
pub(crate) const SWEEP_OVERLAP_MS: i64 = 5_000;
/// How often a sweep reads its whole range.
pub(crate) const FULL_SWEEP_MS: i64 = 10 * 60_000;

/// Milliseconds per expiry bucket: `expiry_bucket = expires_at_utc DIV 60000` (migration 0012).
pub(crate) const EXPIRY_BUCKET_MS: i64 = 60_000;
/// The most minutes an expiry sweep names exactly; a longer window (after downtime) reads the
/// range.
const EXPIRY_BUCKETS_MAX: i64 = 30;

/// The expiry buckets (minutes) of the window after `from` up to `now`, on MySQL and for a
/// window (not a full sweep) of at most [`EXPIRY_BUCKETS_MAX`] minutes.
fn expiry_buckets(dialect: crate::Dialect, from: i64, now: UnixMillis) -> Option<Vec<i64>> {
    if dialect != crate::Dialect::MySql || from == i64::MIN {
        return None;
    }
    let (first, last) = (from.div_euclid(EXPIRY_BUCKET_MS), now.get().div_euclid(EXPIRY_BUCKET_MS));
    (last - first < EXPIRY_BUCKETS_MAX).then(|| (first..=last).collect())
}

/// Where this node's lease and expiry sweeps ended.
#[derive(Debug)]
pub(crate) struct SweepMarks {
    pub leases: SweepMark,
    pub expiry: SweepMark,
}

impl SweepMarks {
    pub fn new() -> Self {
        Self { leases: SweepMark::new(), expiry: SweepMark::new() }
    }
}

/// One sweep's marks: the time up to which it read, and when it last read everything.
#[derive(Debug)]
pub(crate) struct SweepMark {
    through: AtomicI64,
    full_at: AtomicI64,
}

impl SweepMark {
    fn new() -> Self {
        Self { through: AtomicI64::new(i64::MIN), full_at: AtomicI64::new(i64::MIN) }
    }

    /// The exclusive lower bound of this pass's window: everything, when a full pass is due.
    fn window_start(&self, now: UnixMillis) -> i64 {
        let full_at = self.full_at.load(Ordering::Relaxed);
        let through = self.through.load(Ordering::Relaxed);
        if full_at == i64::MIN || now.get().saturating_sub(full_at) >= FULL_SWEEP_MS || through == i64::MIN {
            i64::MIN
        } else {
            through.saturating_sub(SWEEP_OVERLAP_MS)
        }
    }

    /// Records a committed pass that read from `from`: up to now when it read all it found
    /// (`complete`), else up to the last time it handled (rows come in time order).
    fn swept(&self, now: UnixMillis, from: i64, complete: bool, last: Option<i64>) {
        let through = if complete { now.get() } else { last.unwrap_or(from) };
        self.through.store(through, Ordering::Relaxed);
        if from == i64::MIN && complete {
            self.full_at.store(now.get(), Ordering::Relaxed);
        }
    }
}
