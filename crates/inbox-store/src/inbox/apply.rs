//! The slow path every operation falls back to: lock the named rows, ask the core state
//! machine what each change may do, and write back what changed with its history entries.
//! It decides every rare case and explains every refusal, so the fast paths never need to.
//!
//! A change that takes a parked event back to the inbox (an operator's requeue or release from
//! quarantine) also commits an `inbox.nudged` signal, and makes the agent's callbacks send its
//! head once more: agents' cursors have passed the event, so only a hint that makes them claim
//! brings it back to them.

use std::collections::HashMap;

use inbox_core::{AckState, EventId, RecipientKey, Transition, UnixMillis};

use super::queries::{
    INSERT_NUDGED_SIGNAL, REDELIVER_CURRENT_HEAD, SAVE_LIFECYCLE, SAVE_LIFECYCLE_AND_HISTORY,
};
use super::{INBOX_NUDGED_SIGNAL, Inbox};
use crate::db::{Arg, DbConnection};
use crate::inbox::claim_floor;
use crate::inbox::history::{self, Attribution};
use crate::inbox::record::{save_lifecycle_args, settle};
use crate::inbox::rows::load_events_with_history;
use crate::{EventRecord, ItemOutcome, ItemRefusal, Refusal, StoreError};

/// One event and what should happen to it, for the slow path.
pub(crate) struct Change<'a> {
    pub event_id: EventId,
    pub transition: Transition,
    /// Kept in `last_error` (and the history) when the transition changes the event.
    pub note: Option<&'a str>,
    /// Who asked, for the history.
    pub by: Attribution<'a>,
}

impl Inbox<'_> {
    /// The slow path: locks the named events, applies each change through the state machine,
    /// and writes back the events that changed. Outcomes follow the order of `changes`.
    pub(crate) async fn apply_changes(
        self,
        inbox: &RecipientKey,
        changes: &[Change<'_>],
        now: UnixMillis,
    ) -> Result<Vec<ItemOutcome<EventRecord>>, StoreError> {
        let mut tx = self.store.pools().begin().await?;
        let outcomes = self.apply_changes_in(&mut tx.conn(), inbox, changes, now).await?;
        tx.commit().await?;
        Ok(outcomes)
    }

    /// [`Self::apply_changes`] inside the caller's transaction, which the caller commits: a
    /// hand-off (`handoff.rs`) publishes its follow-ups in the same one.
    pub(crate) async fn apply_changes_in(
        self,
        conn: &mut DbConnection<'_>,
        inbox: &RecipientKey,
        changes: &[Change<'_>],
        now: UnixMillis,
    ) -> Result<Vec<ItemOutcome<EventRecord>>, StoreError> {
        let ids: Vec<EventId> = changes.iter().map(|c| c.event_id).collect();
        let record_history = self.store.config().record_history;
        let mut records: HashMap<EventId, (EventRecord, Option<String>)> =
            load_events_with_history(conn, inbox, &ids, self.store.dialect().for_update())
                .await?
                .into_iter()
                .map(|(r, h)| (r.event_id, (r, h)))
                .collect();
        let mut outcomes = Vec::with_capacity(changes.len());
        let mut reopened = None;
        // The lowest seq this change made (or kept) available: the claim floor goes there.
        let mut lowest_available = None;
        for change in changes {
            let refuse = |reason| ItemRefusal { event_id: change.event_id, reason };
            let Some((record, history)) = records.get_mut(&change.event_id) else {
                outcomes.push(Err(refuse(Refusal::NotFound)));
                continue;
            };
            match record.lifecycle.apply(change.transition) {
                Err(reason) => outcomes.push(Err(refuse(Refusal::Refused(reason)))),
                Ok(applied) => {
                    if applied.changed {
                        let before = record.clone();
                        settle(record, applied.next, now);
                        if before.state().is_parked() && !record.state().is_terminal() {
                            reopened = reopened.max(Some(record.inbox_seq));
                        }
                        if record.state() == AckState::Available {
                            lowest_available = Some(match lowest_available {
                                Some(seq) if seq < record.inbox_seq => seq,
                                _ => record.inbox_seq,
                            });
                        }
                        if let Some(note) = change.note {
                            record.last_error = Some(note.to_owned());
                        }
                        let entries = match record_history {
                            true => history::entries_for(
                                &change.transition,
                                &before,
                                record,
                                change.by,
                                change.note,
                            ),
                            false => Vec::new(),
                        };
                        if entries.is_empty() {
                            save(conn, record, None).await?;
                        } else {
                            *history = Some(history::capped(history.as_deref(), &history::lines(&entries)));
                            save(conn, record, history.as_deref()).await?;
                        }
                    }
                    outcomes.push(Ok(record.clone()));
                }
            }
        }
        if let Some(seq) = lowest_available {
            claim_floor::reopen(conn, inbox, seq, now).await?;
        }
        if let Some(seq) = reopened {
            let heads = [(inbox.recipient.kind.as_str(), inbox.recipient.id.as_str(), seq.get())];
            let heads = serde_json::to_string(&heads).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let args = [
                Arg::Str(inbox.tenant_id.as_str()),
                Arg::Str(INBOX_NUDGED_SIGNAL),
                Arg::Str(&heads),
                Arg::I64(now.get()),
            ];
            conn.execute(INSERT_NUDGED_SIGNAL, &args).await?;
            if inbox.recipient.kind == inbox_core::RecipientKind::agent() {
                let (tenant, kind, agent) =
                    (inbox.tenant_id.as_str(), inbox.recipient.kind.as_str(), inbox.recipient.id.as_str());
                let args =
                    [Arg::Str(tenant), Arg::Str(kind), Arg::Str(agent), Arg::Str(tenant), Arg::Str(agent)];
                conn.execute(REDELIVER_CURRENT_HEAD, &args).await?;
            }
        }
        Ok(outcomes)
    }
}

/// Writes a record's lifecycle columns back to its row, and its whole history when given
/// (else the history column is left as it is).
pub(crate) async fn save(
    conn: &mut DbConnection<'_>,
    record: &EventRecord,
    history: Option<&str>,
) -> Result<(), StoreError> {
    let done = match history {
        None => conn.execute(SAVE_LIFECYCLE, &save_lifecycle_args(record)).await?,
        Some(text) => {
            let mut args = vec![Arg::Str(text)];
            args.extend(save_lifecycle_args(record));
            conn.execute(SAVE_LIFECYCLE_AND_HISTORY, &args).await?
        }
    };
    if done.rows_affected != 1 {
        return Err(StoreError::Corrupt(format!("event {} vanished while locked", record.event_id)));
    }
    Ok(())
}
