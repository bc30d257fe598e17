//! Reading committed `outbox_signal` rows, so every node's notifier learns of every commit
//! from the database itself, and deleting old ones.
//!
//! A row is written by the publishing transaction, so it is visible here only once that
//! transaction has committed: the notifier can never hint at work that might still roll back.
//! `outbox_id` is AUTO_INCREMENT, and ids are handed out at insert time, not at commit, so a
//! reader may see id 101 before id 100 commits. The store only answers "which rows exist";
//! the reader (the server's notifier) keeps track of the ids it skipped and asks for them again
//! with [`Signals::by_ids`].

mod queries;

use inbox_core::{InboxSeq, Recipient, RecipientId, RecipientKind, TenantId, UnixMillis};

use crate::Field;
use crate::db::{Arg, DbRow};
use crate::inbox::INBOX_NUDGED_SIGNAL;
use crate::sessions::SESSION_SUPERSEDED_SIGNAL;
use crate::{SqlStore, StoreError};

/// Rows one read returns at most.
pub const SIGNALS_READ_MAX: u32 = 1_000;

/// One committed publish: which inboxes advanced, and to which head. Or, with
/// [`SignalKind::SessionSuperseded`], one subscribe that superseded an agent's sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signal {
    pub outbox_id: i64,
    pub tenant_id: TenantId,
    pub kind: SignalKind,
    /// Each recipient of the publish with its new head: "the head is at least this".
    pub heads: Vec<(Recipient, InboxSeq)>,
    /// When the publishing transaction wrote the row (the store's clock).
    pub created_at: UnixMillis,
}

/// What a signal reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalKind {
    /// Committed work: each head is "at least this".
    InboxUpdated,
    /// A subscribe superseded the sessions of the agents named (single-active-session policy);
    /// their heads did not move.
    SessionSuperseded,
    /// Events behind the head of the inbox named went back to it (an operator's requeue or
    /// release from quarantine): no head moved, but its agent should claim.
    InboxNudged,
}

/// The signals subsystem of one [`SqlStore`]: the outbox every node's notifier reads.
/// A borrowed view, free to make: `store.signals()`.
#[derive(Debug, Clone, Copy)]
pub struct Signals<'s> {
    pub(crate) store: &'s SqlStore,
}

impl SqlStore {
    /// The committed outbox signals, see [`Signals`].
    pub fn signals(&self) -> Signals<'_> {
        Signals { store: self }
    }
}

impl Signals<'_> {
    /// Committed signals with `outbox_id > after_id`, in id order, at most `limit`
    /// (capped at [`SIGNALS_READ_MAX`]).
    pub async fn after(self, after_id: i64, limit: u32) -> Result<Vec<Signal>, StoreError> {
        let limit = i64::from(limit.clamp(1, SIGNALS_READ_MAX));
        let mut pooled = self.store.pools().reader().await?;
        let rows =
            pooled.conn().fetch_all(queries::SIGNALS_AFTER, &[Arg::I64(after_id), Arg::I64(limit)]).await?;
        rows.iter().map(signal_from_row).collect()
    }

    /// The signals among `ids` that exist now (committed since they were skipped), in id
    /// order. At most [`SIGNALS_READ_MAX`] ids per call.
    pub async fn by_ids(self, ids: &[i64]) -> Result<Vec<Signal>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        if ids.len() > SIGNALS_READ_MAX as usize {
            return Err(StoreError::invalid(
                Field::SignalIds,
                format!("has {} ids; ask for at most {SIGNALS_READ_MAX} at once", ids.len()),
            ));
        }
        let args: Vec<Arg> = ids.iter().map(|id| Arg::I64(*id)).collect();
        let mut pooled = self.store.pools().reader().await?;
        let rows = pooled.conn().fetch_all(&queries::signals_by_ids(ids.len()), &args).await?;
        rows.iter().map(signal_from_row).collect()
    }

    /// Where a notifier starting now begins reading: after the newest signal written before
    /// `since`, so publishes that were in flight while it started are still read (ids between
    /// that one and the first recent one become gaps the notifier watches), and re-reading a
    /// few recent ones is harmless. After the newest signal when none is that recent.
    pub async fn start_id(self, since: UnixMillis) -> Result<i64, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let mut conn = pooled.conn();
        let first_recent = conn
            .fetch_optional(queries::FIRST_SIGNAL_SINCE, &[Arg::I64(since.get())])
            .await?
            .map(|row| row.opt_i64("n"))
            .transpose()?
            .flatten();
        let (sql, args) = match first_recent {
            Some(first) => (queries::LAST_SIGNAL_BEFORE, vec![Arg::I64(first)]),
            None => (queries::LAST_SIGNAL, vec![]),
        };
        let before =
            conn.fetch_optional(sql, &args).await?.map(|row| row.opt_i64("n")).transpose()?.flatten();
        Ok(match (before, first_recent) {
            (Some(id), _) => id,
            // Nothing older is retained: start just before the first recent signal.
            (None, Some(first)) => first - 1,
            (None, None) => 0,
        })
    }

    /// Deletes up to `limit` signals written before `cutoff`; returns how many. Every node
    /// may run this at once: deleting a row twice is harmless.
    pub async fn delete_before(self, cutoff: UnixMillis, limit: u32) -> Result<u64, StoreError> {
        let limit = limit.clamp(1, SIGNALS_READ_MAX);
        let mut pooled = self.store.pools().writer().await?;
        let mut conn = pooled.conn();
        let ids: Vec<i64> = conn
            .fetch_all(queries::SIGNALS_BEFORE, &[Arg::I64(cutoff.get()), Arg::I64(i64::from(limit))])
            .await?
            .iter()
            .map(|row| row.i64("outbox_id"))
            .collect::<Result<_, _>>()?;
        if ids.is_empty() {
            return Ok(0);
        }
        let args: Vec<Arg> = ids.iter().map(|id| Arg::I64(*id)).collect();
        let done = conn.execute(&queries::delete_signals(ids.len()), &args).await?;
        Ok(done.rows_affected)
    }
}

/// `recipient_heads` is `[["agent","alpha",42], ...]`, written by the store or by the MySQL
/// publish procedure.
fn signal_from_row(row: &DbRow) -> Result<Signal, StoreError> {
    let outbox_id = row.i64("outbox_id")?;
    let corrupt = |what: String| StoreError::Corrupt(format!("outbox_signal {outbox_id}: {what}"));
    let tenant_id = TenantId::new(row.string("tenant_id")?).map_err(|e| corrupt(e.to_string()))?;
    let text = row.string("recipient_heads")?;
    let raw: Vec<(String, String, u64)> =
        serde_json::from_str(&text).map_err(|e| corrupt(format!("recipient_heads: {e}")))?;
    let heads = raw
        .into_iter()
        .map(|(kind, id, head)| {
            Ok((
                Recipient {
                    kind: RecipientKind::new(kind).map_err(|e| corrupt(e.to_string()))?,
                    id: RecipientId::new(id).map_err(|e| corrupt(e.to_string()))?,
                },
                InboxSeq::new(head).map_err(|e| corrupt(e.to_string()))?,
            ))
        })
        .collect::<Result<_, StoreError>>()?;
    // Publishes (the store's and the MySQL procedure's) write `inbox.updated`; an unknown type
    // from a newer node is read as one, which at worst wakes a waiter for nothing.
    let kind = match row.string("signal_type")?.as_str() {
        SESSION_SUPERSEDED_SIGNAL => SignalKind::SessionSuperseded,
        INBOX_NUDGED_SIGNAL => SignalKind::InboxNudged,
        _ => SignalKind::InboxUpdated,
    };
    Ok(Signal { outbox_id, tenant_id, kind, heads, created_at: UnixMillis(row.i64("created_at_utc")?) })
}
