//! What the inbox's own machinery does to an A2A task's event, turned into the task's state
//! once it committed: a claim makes it `working` (at once, from the claim's use case, and by
//! the reconciler for claims it did not see); a plain acknowledgement (an agent that reported
//! nothing) completes it; a dead letter (a failed result, attempts used up) fails it; a
//! quarantine rejects it; an expiry fails it. Each change locks the event, then the task (the
//! order an acknowledgement locks them in), and is decided from what it reads under those
//! locks, so a reconciler on every node and a report at the same moment agree.

use inbox_core::{AckState, DeadLetterReason, EventId, Recipient, RecipientKey, TenantId, UnixMillis};

use super::queries;
use super::rows::{Change, load_task};
use super::{A2a, Task, TaskId, TaskState, fit_note};
use crate::db::Arg;
use crate::inbox::rows::load_events;
use crate::store::with_retries;
use crate::{EventRecord, StoreError};

/// What one reconciler pass moved.
#[derive(Debug, Clone, Default)]
pub struct ReconcileReport {
    /// The tasks it changed, as they are now.
    pub moved: Vec<Task>,
}

impl A2a<'_> {
    /// Marks the submitted tasks of claimed events `working`; returns the tasks it moved.
    pub async fn mark_working(
        self,
        tenant_id: &TenantId,
        event_ids: &[EventId],
    ) -> Result<Vec<Task>, StoreError> {
        if event_ids.is_empty() {
            return Ok(Vec::new());
        }
        with_retries!(self.store, async {
            let now = self.store.now();
            let mut tx = self.store.pools().begin().await?;
            let mut conn = tx.conn();
            let mut args = vec![Arg::Str(tenant_id.as_str())];
            args.extend(event_ids.iter().map(|id| Arg::Bytes(id.as_bytes())));
            let sql = queries::submitted_tasks_of_events(event_ids.len(), self.store.dialect().for_update());
            let rows = conn.fetch_all(&sql, &args).await?;
            let mut moved = Vec::with_capacity(rows.len());
            for row in &rows {
                let mut change = Change::of(super::rows::task(row)?, super::rows::reported_event(row)?);
                change.status(TaskState::Working, None, None, now);
                change.save(&mut conn, false, now).await?;
                moved.push(change.task);
            }
            tx.commit().await?;
            Ok::<_, StoreError>(moved)
        })
    }

    /// One pass: up to `limit` open tasks whose event moved on, each moved to what its event's
    /// state says, oldest status first.
    pub async fn reconcile(self, limit: u32) -> Result<ReconcileReport, StoreError> {
        let candidates = {
            let mut pooled = self.store.pools().reader().await?;
            pooled.conn().fetch_all(queries::OPEN_CANDIDATES, &[Arg::I64(i64::from(limit.max(1)))]).await?
        };
        let mut report = ReconcileReport::default();
        for row in candidates {
            let tenant_id = TenantId::new(row.string("tenant_id")?)
                .map_err(|_| StoreError::Corrupt("a2a: a task's tenant id".into()))?;
            let Some(task_id) = TaskId::parse(&row.string("task_id")?) else { continue };
            if let Some(task) = with_retries!(self.store, self.reconcile_one(&tenant_id, &task_id))? {
                report.moved.push(task);
            }
        }
        Ok(report)
    }

    async fn reconcile_one(self, tenant_id: &TenantId, task_id: &TaskId) -> Result<Option<Task>, StoreError> {
        let now = self.store.now();
        let lock = self.store.dialect().for_update();
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        let Some((seen, _)) = load_task(&mut conn, tenant_id, task_id, "").await? else { return Ok(None) };
        let inbox =
            RecipientKey { tenant_id: tenant_id.clone(), recipient: Recipient::agent(seen.agent_id.clone()) };
        let event = load_events(&mut conn, &inbox, &[seen.event_id], lock).await?.pop();
        let Some((task, reported)) = load_task(&mut conn, tenant_id, task_id, lock).await? else {
            return Ok(None);
        };
        if task.event_id != seen.event_id || !task.state().is_open() {
            return Ok(None);
        }
        let fate = match &event {
            Some(event) => fate_of(event),
            None => {
                let archived = conn
                    .fetch_optional(queries::ARCHIVED_STATE, &[Arg::Bytes(task.event_id.as_bytes())])
                    .await?;
                match archived {
                    Some(row) if row.string("ack_state")? == AckState::Acked.as_str() => {
                        Some((TaskState::Completed, None))
                    }
                    Some(row) => Some((
                        TaskState::Failed,
                        Some(format!(
                            "the agent did not finish it ({}): {}",
                            row.string("ack_state")?,
                            row.opt_string("last_error")?.unwrap_or_default()
                        )),
                    )),
                    None => Some((
                        TaskState::Failed,
                        Some("its inbox event was removed by an operator".to_owned()),
                    )),
                }
            }
        };
        let Some((state, note)) = fate else { return Ok(None) };
        if state == task.state() {
            return Ok(None);
        }
        let mut change = Change::of(task, reported);
        change.status(state, None, note.map(|note| fit_note(&note)), now);
        change.save(&mut conn, false, now).await?;
        tx.commit().await?;
        Ok(Some(change.task))
    }
}

/// The state an open task's event puts it in (and why), or `None` while it is still waiting.
fn fate_of(event: &EventRecord) -> Option<(TaskState, Option<String>)> {
    let why = || event.last_error.clone().unwrap_or_default();
    match event.state() {
        AckState::Claimed => Some((TaskState::Working, None)),
        AckState::Available if event.lifecycle.delivery_attempts > 0 => Some((TaskState::Working, None)),
        AckState::Available => None,
        AckState::Acked => Some((TaskState::Completed, None)),
        AckState::DeadLetter => Some((
            TaskState::Failed,
            Some(match event.lifecycle.dead_letter_reason {
                DeadLetterReason::MaxAttemptsExceeded => {
                    format!(
                        "the agent did not finish it in {} attempts: {}",
                        event.lifecycle.delivery_attempts,
                        why()
                    )
                }
                _ => format!("the agent failed it: {}", why()),
            }),
        )),
        AckState::Quarantined => {
            Some((TaskState::Rejected, Some(format!("set aside for a person: {}", why()))))
        }
        AckState::Expired => Some((TaskState::Failed, Some("it expired before an agent took it".to_owned()))),
    }
}

impl A2a<'_> {
    /// Deletes up to `limit` tasks that finished before `before`, each with its update log,
    /// messages (so their ids may be sent again) and push configs; returns how many.
    pub async fn prune(self, before: UnixMillis, limit: u32) -> Result<u64, StoreError> {
        let finished = {
            let mut pooled = self.store.pools().reader().await?;
            pooled
                .conn()
                .fetch_all(
                    queries::FINISHED_BEFORE,
                    &[Arg::I64(before.get()), Arg::I64(i64::from(limit.max(1)))],
                )
                .await?
        };
        let mut pruned = 0;
        for row in finished {
            let (tenant, task) = (row.string("tenant_id")?, row.string("task_id")?);
            let deleted = with_retries!(self.store, async {
                let mut tx = self.store.pools().begin().await?;
                let mut conn = tx.conn();
                let done = conn
                    .execute(
                        queries::PRUNE_TASK,
                        &[Arg::Str(&tenant), Arg::Str(&task), Arg::I64(before.get())],
                    )
                    .await?;
                if done.rows_affected == 1 {
                    for sql in [queries::PRUNE_UPDATES, queries::PRUNE_MESSAGES, queries::PRUNE_PUSH_CONFIGS]
                    {
                        conn.execute(sql, &[Arg::Str(&tenant), Arg::Str(&task)]).await?;
                    }
                }
                tx.commit().await?;
                Ok::<_, StoreError>(done.rows_affected)
            })?;
            pruned += deleted;
        }
        Ok(pruned)
    }
}
