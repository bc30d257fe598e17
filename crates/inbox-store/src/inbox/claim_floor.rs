//! The claim floor of an inbox (`inbox_claim_floor`, migration 0012): where a claim starts
//! reading, so it does not read what is known to be settled (issue 27).
//!
//! Why: on MySQL/MariaDB, while any transaction holds an old read view (a backup's
//! `--single-transaction`, an analytics query), InnoDB cannot purge, and every claim and
//! acknowledgement leaves a delete-marked entry in the claim index. A claim reading its range
//! from the low end reads every one of them, and InnoDB checks where a range ends only on
//! live entries, so even an empty range runs on through the dead entries after it. The claim
//! therefore names exact `(priority, claim_bucket)` pairs (buckets of [`BUCKET_SEQS`] seqs)
//! from the floor's bucket to the head's: an exact match stops at the first entry whose key
//! differs, dead or not, so a claim reads at most the dead entries of the buckets it names.
//!
//! The invariant: every available event of the inbox below `floor_seq` is waiting (not
//! claimable before `wake_at_utc`, and at or above `wake_seq`), except one that a transaction
//! made available again, which lowers the floor to its seq in that same transaction
//! ([`reopen`]). A claim starts at the floor, or at `wake_seq` once `wake_at_utc` has come.
//! Claims read the row without a lock. [`advance`] moves the floor after a claim that found
//! nothing in the floor's bucket, in a transaction of its own holding the row's lock (skipped
//! if another holds it): it walks the
//! primary key from the floor past events that are not available (claimed, acknowledged,
//! parked, expired) and available ones that are waiting, and stops at the first claimable one.
//! On Galera, where row locks are local to a member, a lowering and an advance both write the
//! row, so one of two concurrent ones fails certification and is retried (a lowering) or
//! dropped (an advance).
//!
//! No row means no floor (0): a database migrated with events in it starts there, and the
//! first advances walk up to the live events, [`ADVANCE_ROWS_MAX`] rows at a time.

use inbox_core::{AckState, InboxSeq, Priority, RecipientKey, UnixMillis};

use super::queries;
use crate::StoreError;
use crate::db::{Arg, DbConnection};
use crate::dialect::Dialect;
use crate::inbox::rows::inbox_args;

/// Seqs per claim bucket: `claim_bucket = inbox_seq DIV 128` in migration 0012. A claim may
/// read the dead entries of one bucket before the first claimable event.
pub(crate) const BUCKET_SEQS: u64 = 128;

/// The most buckets a claim names (times the four priorities, 128 exact ranges, within
/// MariaDB's `eq_range_index_dive_limit` of 200). An inbox whose floor is further behind its
/// head (a backlog deeper than 32 × 128 = 4,096 events) is claimed with one range per
/// priority from the floor's bucket on, which can read dead entries past an empty range.
pub(crate) const WINDOW_BUCKETS_MAX: u64 = 32;

/// Rows one advance walks at most; the next claim's advance goes on from there.
pub(crate) const ADVANCE_ROWS_MAX: i64 = 1_024;

/// Where a claim of one inbox reads, as the floor and the head said when it began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClaimWindow {
    /// The lowest seq that may be claimable: the floor, or where waiting events begin once
    /// they are due.
    pub start: u64,
    /// The inbox's head: no event above it exists yet.
    pub head: u64,
}

impl ClaimWindow {
    pub fn first_bucket(self) -> u64 {
        self.start / BUCKET_SEQS
    }

    pub fn last_bucket(self) -> u64 {
        self.head.max(self.start) / BUCKET_SEQS
    }

    /// The buckets to name exactly, or `None` when there are more than [`WINDOW_BUCKETS_MAX`].
    pub fn buckets(self) -> Option<std::ops::RangeInclusive<u64>> {
        let (first, last) = (self.first_bucket(), self.last_bucket());
        (last - first < WINDOW_BUCKETS_MAX).then_some(first..=last)
    }

    /// Whether the floor lags behind the head's bucket.
    pub fn lags(self) -> bool {
        self.first_bucket() < self.last_bucket()
    }

    /// Whether an advance after a claim whose lowest claimed seq was `lowest_claimed` is worth
    /// its transaction: only when it can move the floor to a later bucket, which is what
    /// shortens the next claim. A claim that found work in the floor's own bucket would only
    /// move the floor within it (and on a busy inbox that would be one more transaction per
    /// claim); one that found nothing there, or nothing at all, says the bucket is settled.
    pub fn worth_advancing(self, lowest_claimed: Option<u64>) -> bool {
        self.lags() && lowest_claimed.is_none_or(|seq| seq / BUCKET_SEQS > self.first_bucket())
    }
}

/// Reads the inbox's floor and head without locking (binds nothing else).
pub(crate) async fn claim_window(
    conn: &mut DbConnection<'_>,
    inbox: &RecipientKey,
    now: UnixMillis,
) -> Result<ClaimWindow, StoreError> {
    let Some(row) = conn.fetch_optional(queries::CLAIM_FLOOR_AND_HEAD, &inbox_args(inbox)).await? else {
        return Ok(ClaimWindow { start: 0, head: 0 });
    };
    let head = non_negative(row.i64("head_seq")?);
    let oldest = non_negative(row.i64("oldest_available_seq")?);
    let floor = non_negative(row.opt_i64("floor_seq")?.unwrap_or(0));
    let wake_due = row.opt_i64("wake_at_utc")?.is_some_and(|at| at <= now.get());
    let start = match row.opt_i64("wake_seq")? {
        Some(wake_seq) if wake_due => floor.min(non_negative(wake_seq)),
        _ => floor,
    };
    Ok(ClaimWindow { start: start.max(oldest), head })
}

/// Lowers the floor to `seq` in the caller's transaction: the event there is available again
/// (released, its lease expired, requeued, released from quarantine). Always writes the row,
/// creating it at no floor if missing, so a concurrent advance on another Galera member
/// conflicts with it.
pub(crate) async fn reopen(
    conn: &mut DbConnection<'_>,
    inbox: &RecipientKey,
    seq: InboxSeq,
    now: UnixMillis,
) -> Result<(), StoreError> {
    let seq = i64::try_from(seq.get()).unwrap_or(i64::MAX);
    let mut args = inbox_args(inbox);
    args.extend([Arg::I64(now.get()), Arg::I64(seq), Arg::I64(now.get())]);
    conn.execute(queries::REOPEN_FLOOR.text(conn.dialect()), &args).await?;
    Ok(())
}

/// What one advance did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Advanced {
    /// Another transaction holds the floor row: it is moving or lowering it.
    Busy,
    /// The floor is where the walk ended (unchanged or moved).
    To(u64),
}

/// Moves the floor of `inbox` forward in `conn`'s open transaction; the caller commits.
pub(crate) async fn advance(
    conn: &mut DbConnection<'_>,
    inbox: &RecipientKey,
    now: UnixMillis,
) -> Result<Advanced, StoreError> {
    let dialect = conn.dialect();
    let args = inbox_args(inbox);
    let lock = dialect.for_update_skip_locked();
    let (floor, wake) = match conn.fetch_optional(&queries::claim_floor(lock), &args).await? {
        Some(row) => {
            let wake = match (row.opt_i64("wake_seq")?, row.opt_i64("wake_at_utc")?) {
                (Some(seq), Some(at)) => Some((non_negative(seq), at)),
                _ => None,
            };
            (non_negative(row.i64("floor_seq")?), wake)
        }
        None => {
            // Missing, or held by another transaction (SKIP LOCKED): only a row this
            // transaction creates is ours.
            if conn.fetch_optional(&queries::claim_floor(""), &args).await?.is_some() {
                return Ok(Advanced::Busy);
            }
            let mut insert = inbox_args(inbox);
            insert.push(Arg::I64(now.get()));
            if conn.execute(queries::CREATE_FLOOR.text(dialect), &insert).await?.rows_affected == 0 {
                return Ok(Advanced::Busy);
            }
            (0, None)
        }
    };
    let oldest = match conn.fetch_optional(&queries::head(""), &args).await? {
        Some(row) => non_negative(row.i64("oldest_available_seq")?),
        None => 0,
    };
    // Waiting events below the floor that are due: walk again from the first of them.
    let (start, mut waiting) = match wake {
        Some((wake_seq, at)) if at <= now.get() => (wake_seq.min(floor), None),
        other => (floor, other),
    };
    let start = start.max(oldest);
    let mut walk = inbox_args(inbox);
    walk.extend([Arg::I64(to_i64(start)), Arg::I64(ADVANCE_ROWS_MAX)]);
    let rows = conn.fetch_all(queries::FLOOR_WALK, &walk).await?;
    let mut next = start;
    for row in &rows {
        let seq = non_negative(row.i64("inbox_seq")?);
        if row.string("ack_state")? == AckState::Available.as_str() {
            let expired = row.opt_i64("expires_at_utc")?.is_some_and(|at| at <= now.get());
            let spent = row.i64("delivery_attempts")? >= row.i64("max_attempts")?;
            let ready_at =
                row.i64("availability_at_utc")?.max(row.opt_i64("next_retry_at_utc")?.unwrap_or(0));
            if !expired && !spent {
                if ready_at <= now.get() {
                    break;
                }
                // Waiting: passed, and remembered so claims look here again when it is due.
                waiting = Some(match waiting {
                    Some((first, at)) => (first.min(seq), at.min(ready_at)),
                    None => (seq, ready_at),
                });
            }
            // Expired or out of attempts: nothing makes it claimable but a transition,
            // which reopens it.
        }
        next = seq + 1;
    }
    if next == start && waiting == wake && start == floor {
        return Ok(Advanced::To(floor));
    }
    let mut update = vec![
        Arg::I64(to_i64(next)),
        Arg::OptI64(waiting.map(|(seq, _)| to_i64(seq))),
        Arg::OptI64(waiting.map(|(_, at)| at)),
        Arg::I64(now.get()),
    ];
    update.extend(inbox_args(inbox));
    conn.execute(queries::SET_FLOOR, &update).await?;
    Ok(Advanced::To(next))
}

/// The claim statement's text for `window` (binds: inbox, [buckets,] now, now, now, limit).
/// MySQL names the buckets exactly; SQLite, whose deleted index entries are gone at once,
/// reads its claim index from the start.
pub(crate) fn claim_next_sql(dialect: Dialect, window: ClaimWindow) -> (String, Option<Vec<u64>>) {
    match dialect {
        Dialect::Sqlite => (queries::CLAIM_NEXT_FROM_SQLITE.to_owned(), None),
        Dialect::MySql => match window.buckets() {
            Some(buckets) => {
                let buckets: Vec<u64> = buckets.collect();
                (queries::claim_next_in_buckets(&priority_ranks(), buckets.len()), Some(buckets))
            }
            None => (queries::claim_next_from_bucket(&priority_ranks()), None),
        },
    }
}

/// The buckets a statement names: exactly these, or every one from this on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BucketArgs {
    Exactly(Vec<u64>),
    From(u64),
}

/// MySQL's claimable poll after a cursor whose bucket is `from_cursor`: the buckets of the
/// claim window from the later of the window's start and the cursor's (binds: inbox, the
/// buckets, after seq, now, now, now, limit). An empty window names the head's bucket, where
/// nothing claimable waits either.
pub(crate) fn claimable_after_sql(window: ClaimWindow, from_cursor: u64) -> (String, BucketArgs) {
    let first = window.first_bucket().max(from_cursor);
    let last = window.last_bucket().max(first);
    let ranks = priority_ranks();
    if last - first < WINDOW_BUCKETS_MAX {
        let buckets: Vec<u64> = (first..=last).collect();
        let filter = format!("claim_bucket IN ({})", crate::dialect::placeholders(buckets.len()));
        (queries::claimable_events_after_in_buckets(&ranks, &filter), BucketArgs::Exactly(buckets))
    } else {
        (queries::claimable_events_after_in_buckets(&ranks, "claim_bucket >= ?"), BucketArgs::From(first))
    }
}

/// Every stored priority, as an SQL list: naming them makes each (priority, bucket) pair an
/// exact range.
pub(crate) fn priority_ranks() -> String {
    Priority::ALL.iter().map(|p| p.rank().to_string()).collect::<Vec<_>>().join(", ")
}

fn non_negative(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The claim statement of `inbox` for `limit` events at `now`: what [`Inbox::claim_next`]
/// runs and `claim_plan.rs` analyses. It reads the inbox's claim floor and head first
/// (`claim_floor.rs`) and names the buckets between them.
pub(crate) async fn claim_statement<'a>(
    conn: &mut DbConnection<'_>,
    inbox: &'a RecipientKey,
    limit: u32,
    now: UnixMillis,
) -> Result<ClaimStatement<'a>, StoreError> {
    let window = claim_window(conn, inbox, now).await?;
    let (sql, buckets) = claim_next_sql(conn.dialect(), window);
    let mut args = inbox_args(inbox);
    match (conn.dialect(), buckets) {
        (crate::Dialect::Sqlite, _) => args.push(Arg::I64(i64::try_from(window.start).unwrap_or(i64::MAX))),
        (crate::Dialect::MySql, Some(buckets)) => {
            args.extend(buckets.into_iter().map(|b| Arg::I64(i64::try_from(b).unwrap_or(i64::MAX))))
        }
        (crate::Dialect::MySql, None) => {
            args.push(Arg::I64(i64::try_from(window.first_bucket()).unwrap_or(i64::MAX)))
        }
    }
    args.extend([Arg::I64(now.get()), Arg::I64(now.get()), Arg::I64(now.get()), Arg::I64(i64::from(limit))]);
    Ok(ClaimStatement { sql, args, window })
}

/// A claim statement with its binds (borrowed from its inbox) and the window it names.
pub(crate) struct ClaimStatement<'a> {
    pub sql: String,
    pub args: Vec<Arg<'a>>,
    pub window: ClaimWindow,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_names_the_buckets_from_the_floor_to_the_head() {
        let window = ClaimWindow { start: 250, head: 300 };
        assert_eq!(window.buckets(), Some(1..=2));
        assert!(window.lags());
        let caught_up = ClaimWindow { start: 290, head: 300 };
        assert_eq!(caught_up.buckets(), Some(2..=2));
        assert!(!caught_up.lags());
        let deep = ClaimWindow { start: 0, head: BUCKET_SEQS * WINDOW_BUCKETS_MAX };
        assert_eq!(deep.buckets(), None, "33 buckets are claimed with a range");
        let empty = ClaimWindow { start: 0, head: 0 };
        assert_eq!(empty.buckets(), Some(0..=0));
    }

    #[test]
    fn an_advance_runs_only_when_it_can_leave_the_floors_bucket() {
        let window = ClaimWindow { start: 130, head: 600 };
        assert!(!window.worth_advancing(Some(140)), "work left in the floor's bucket");
        assert!(window.worth_advancing(Some(300)), "the floor's bucket had nothing to claim");
        assert!(window.worth_advancing(None), "nothing claimable from the floor on");
        let caught_up = ClaimWindow { start: 290, head: 300 };
        assert!(!caught_up.worth_advancing(None), "the floor is in the head's bucket");
    }

    #[test]
    fn the_bucket_sizes_are_the_migrations() {
        let migration = include_str!("../migrations/mysql/0012_claim_floor.sql");
        assert!(migration.contains(&format!("inbox_seq DIV {BUCKET_SEQS}")));
        let expiry = crate::inbox::scavenge::EXPIRY_BUCKET_MS;
        assert!(migration.contains(&format!("expires_at_utc DIV {expiry}")));
    }
}
