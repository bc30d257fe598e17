//! Operator work: dead-lettered and quarantined events (list, requeue, purge, quarantine and
//! release by hand) and the per-inbox backlog numbers behind `/metrics` and the admin API.

use inbox_core::{EventId, RecipientKey, TenantId, Transition};

use super::{Inbox, queries};
use crate::Field;
use crate::db::Arg;
use crate::inbox::apply::Change;
use crate::inbox::history::{Actor, Attribution};
use crate::inbox::leases::check_reason;
use crate::inbox::record::{event_from_row, recipient_from_row, seq, seq_arg};
use crate::inbox::rows::{inbox_args, load_events};
use crate::store::with_retries;
use crate::{
    EventRecord, InboxStats, ItemOutcome, ItemRefusal, ParkedQuery, QuarantineRequest, Refusal, StoreError,
};

impl Inbox<'_> {
    /// Parked events of a tenant, oldest first.
    pub async fn list_parked(self, query: &ParkedQuery) -> Result<Vec<EventRecord>, StoreError> {
        self.store.batch_len(Field::Limit, query.limit as usize)?;
        let mut args = vec![Arg::Str(query.tenant_id.as_str())];
        if let Some(recipient) = &query.recipient {
            args.extend([Arg::Str(recipient.kind.as_str()), Arg::Str(recipient.id.as_str())]);
        }
        match query.state {
            None => {}
            Some(state) if state.is_parked() => {
                args.push(Arg::Str(state.as_str()));
            }
            Some(state) => {
                return Err(StoreError::invalid(
                    Field::ParkedState,
                    format!("is {}; list dead_letter or quarantined events", state.as_str()),
                ));
            }
        }
        args.push(Arg::I64(i64::from(query.limit)));
        let sql = queries::parked(query.recipient.is_some(), query.state.is_some());
        let mut pooled = self.store.pools().reader().await?;
        pooled.conn().fetch_all(&sql, &args).await?.iter().map(event_from_row).collect()
    }

    /// Sends parked events back to the inbox with a fresh budget of delivery attempts; the
    /// history names `actor`.
    pub async fn requeue(
        self,
        inbox: &RecipientKey,
        event_ids: &[EventId],
        actor: &Actor,
    ) -> Result<Vec<ItemOutcome<EventRecord>>, StoreError> {
        let max_attempts = self.store.config().max_attempts_default;
        self.operator_changes(inbox, event_ids, actor, None, None, |now| Transition::Requeue {
            now,
            max_attempts,
        })
        .await
    }

    /// Sets events aside for a person, so no agent processes them: available and claimed ones
    /// (a claimed one's lease ends; its holder's later ack or heartbeat is refused).
    /// Quarantining a quarantined event again answers it unchanged; a finished one is refused.
    pub async fn quarantine(
        self,
        inbox: &RecipientKey,
        event_ids: &[EventId],
        request: &QuarantineRequest,
    ) -> Result<Vec<ItemOutcome<EventRecord>>, StoreError> {
        check_reason(&request.reason)?;
        let class = Some(request.class.unwrap_or_default());
        self.operator_changes(inbox, event_ids, &request.actor, Some(&request.reason), class, |now| {
            Transition::Quarantine { now }
        })
        .await
    }

    /// Lets quarantined events be delivered again, with a fresh budget of delivery attempts.
    /// An event already released (available) is answered unchanged; others are refused
    /// (`NotQuarantined`).
    pub async fn release_quarantined(
        self,
        inbox: &RecipientKey,
        event_ids: &[EventId],
        actor: &Actor,
    ) -> Result<Vec<ItemOutcome<EventRecord>>, StoreError> {
        let max_attempts = self.store.config().max_attempts_default;
        self.operator_changes(inbox, event_ids, actor, None, None, |now| Transition::ReleaseQuarantine {
            now,
            max_attempts,
        })
        .await
    }

    /// One operator transition applied to each named event through the slow path.
    async fn operator_changes(
        self,
        inbox: &RecipientKey,
        event_ids: &[EventId],
        actor: &Actor,
        note: Option<&str>,
        class: Option<inbox_core::QuarantineClass>,
        transition: impl Fn(inbox_core::UnixMillis) -> Transition,
    ) -> Result<Vec<ItemOutcome<EventRecord>>, StoreError> {
        self.store.batch_len(Field::EventIds, event_ids.len())?;
        crate::inbox::leases::distinct(Field::EventIds, event_ids.iter())?;
        with_retries!(self.store, async {
            let now = self.store.now();
            let changes: Vec<Change> = event_ids
                .iter()
                .map(|id| Change {
                    event_id: *id,
                    transition: transition(now),
                    note,
                    by: Attribution::operator(actor, class),
                })
                .collect();
            self.apply_changes(inbox, &changes, now).await
        })
    }

    /// Deletes parked events for good. Other events are refused, untouched.
    pub async fn purge(
        self,
        inbox: &RecipientKey,
        event_ids: &[EventId],
    ) -> Result<Vec<ItemOutcome<EventId>>, StoreError> {
        self.store.batch_len(Field::EventIds, event_ids.len())?;
        with_retries!(self.store, self.purge_once(inbox, event_ids))
    }

    async fn purge_once(
        self,
        inbox: &RecipientKey,
        event_ids: &[EventId],
    ) -> Result<Vec<ItemOutcome<EventId>>, StoreError> {
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        let records = load_events(&mut conn, inbox, event_ids, self.store.dialect().for_update()).await?;
        let mut outcomes = Vec::with_capacity(event_ids.len());
        for event_id in event_ids {
            let outcome = match records.iter().find(|r| r.event_id == *event_id) {
                None => Err(ItemRefusal { event_id: *event_id, reason: Refusal::NotFound }),
                Some(record) if !record.state().is_parked() => Err(ItemRefusal {
                    event_id: *event_id,
                    reason: Refusal::Refused(inbox_core::RefusalReason::NotParked(record.state().as_str())),
                }),
                Some(record) => {
                    let mut args = inbox_args(inbox);
                    args.push(seq_arg(record.inbox_seq));
                    conn.execute(queries::DELETE_EVENT, &args).await?;
                    Ok(*event_id)
                }
            };
            outcomes.push(outcome);
        }
        tx.commit().await?;
        Ok(outcomes)
    }

    /// Backlog per inbox of a tenant: unacknowledged depth, claimed, retry-scheduled, parked,
    /// oldest unacked, and the agent's online sessions and last sign of life.
    pub async fn inbox_stats(self, tenant_id: &TenantId, limit: u32) -> Result<Vec<InboxStats>, StoreError> {
        self.store.batch_len(Field::Limit, limit as usize)?;
        let now = self.store.now();
        let mut pooled = self.store.pools().reader().await?;
        let mut conn = pooled.conn();
        let rows = conn
            .fetch_all(
                queries::INBOX_STATS,
                &[Arg::I64(now.get()), Arg::Str(tenant_id.as_str()), Arg::I64(i64::from(limit))],
            )
            .await?;
        let count = |v: i64| u64::try_from(v).unwrap_or(0);
        let mut stats = rows
            .iter()
            .map(|row| {
                Ok(InboxStats {
                    recipient: recipient_from_row(row)?,
                    depth: count(row.i64("depth")?),
                    claimed: count(row.i64("claimed")?),
                    retry_scheduled: count(row.i64("retry_scheduled")?),
                    parked: count(row.i64("parked")?),
                    oldest_unacked_at: row.opt_i64("oldest_unacked_at")?.map(inbox_core::UnixMillis),
                    head_seq: seq(row.i64("head_seq")?)?,
                    online_sessions: 0,
                    last_seen_at: None,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        // Sessions belong to agents: one grouped read for the agents on this page.
        let agents: Vec<&str> = stats
            .iter()
            .filter(|s| s.recipient.kind == inbox_core::RecipientKind::agent())
            .map(|s| s.recipient.id.as_str())
            .collect();
        if agents.is_empty() {
            return Ok(stats);
        }
        let mut args = vec![Arg::Str(tenant_id.as_str())];
        args.extend(agents.iter().map(|id| Arg::Str(id)));
        let mut sessions = std::collections::HashMap::new();
        for row in conn.fetch_all(&queries::agent_presence(agents.len()), &args).await? {
            sessions.insert(row.string("agent_id")?, (count(row.i64("online")?), row.opt_i64("last_seen")?));
        }
        for stat in &mut stats {
            if stat.recipient.kind != inbox_core::RecipientKind::agent() {
                continue;
            }
            if let Some((online, last_seen)) = sessions.get(stat.recipient.id.as_str()) {
                stat.online_sessions = *online;
                stat.last_seen_at = last_seen.map(inbox_core::UnixMillis);
            }
        }
        Ok(stats)
    }

    /// Backlog of every inbox that has unacknowledged or parked events (at most
    /// [`BACKLOGS_MAX`] inboxes, deepest first), for the per-tenant gauges.
    pub async fn backlogs(self) -> Result<Vec<Backlog>, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let rows = pooled.conn().fetch_all(queries::BACKLOGS, &[Arg::I64(BACKLOGS_MAX)]).await?;
        rows.iter()
            .map(|row| {
                Ok(Backlog {
                    tenant_id: TenantId::new(row.string("tenant_id")?)
                        .map_err(|e| StoreError::Corrupt(e.to_string()))?,
                    recipient: recipient_from_row(row)?,
                    depth: u64::try_from(row.i64("depth")?).unwrap_or(0),
                    parked: u64::try_from(row.i64("parked")?).unwrap_or(0),
                    oldest_unacked_at: row.opt_i64("oldest_unacked_at")?.map(inbox_core::UnixMillis),
                })
            })
            .collect()
    }
}

/// Inboxes one backlog snapshot reports at most.
pub const BACKLOGS_MAX: i64 = 10_000;

/// One inbox's unfinished work, across tenants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backlog {
    pub tenant_id: TenantId,
    pub recipient: inbox_core::Recipient,
    pub depth: u64,
    pub parked: u64,
    pub oldest_unacked_at: Option<inbox_core::UnixMillis>,
}
