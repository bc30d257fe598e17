//! An agent's acknowledgement that reports its A2A task's outcome: the acknowledgement and the
//! task's new status, artifacts and history commit in one transaction, and only while the
//! acknowledging lease holds, as a hand-off does (`inbox/handoff.rs`): the slow path's lease
//! check runs inside this transaction, and a lease past its end refuses both. A stale lease
//! (another worker took the event since) changes nothing.
//!
//! Repeated after it committed (its answer was lost), the report finds its task reported by
//! this event and answers as before; named for an event acknowledged without a report, it is
//! refused (`event_terminal`), since the lease ended then. A task canceled while the agent
//! worked keeps `canceled`: the acknowledgement is taken, the report is not.

use inbox_core::{
    AckResult, AckState, EventId, LeaseToken, QuarantineClass, RecipientKey, RefusalReason, SessionId,
    Transition,
};
use serde_json::Value;

use super::queries;
use super::rows::{self, Change, Overfull};
use super::{A2a, Task, TaskState};
use crate::db::Arg;
use crate::inbox::apply::Change as EventChange;
use crate::inbox::history::Attribution;
use crate::inbox::rows::load_events;
use crate::store::with_retries;
use crate::{AckReceipt, Actor, ItemRefusal, Refusal, StoreError};

/// An acknowledgement of an `a2a.message` event with its task's outcome.
#[derive(Debug, Clone)]
pub struct Report {
    pub inbox: RecipientKey,
    pub session_id: Option<SessionId>,
    pub event_id: EventId,
    pub lease_token: LeaseToken,
    pub result: AckResult,
    /// A failure's or quarantine's reason, as the plain acknowledgement keeps it.
    pub reason: Option<String>,
    pub class: Option<QuarantineClass>,
    pub outcome: TaskOutcome,
}

/// What the task becomes.
#[derive(Debug, Clone)]
pub struct TaskOutcome {
    /// Completed, input or auth required (with a completed result), failed, or rejected.
    pub state: TaskState,
    /// The agent's message (A2A JSON), its status message.
    pub message: Option<Value>,
    /// The store's words when the agent gave no message (a failure's reason).
    pub note: Option<String>,
    /// Artifacts (A2A JSON), added in order.
    pub artifacts: Vec<Value>,
}

/// What a report committed.
#[derive(Debug, Clone)]
pub struct ReportReceipt {
    pub ack: AckReceipt,
    /// The task after the report (unchanged when it was canceled, or a repeat).
    pub task: Option<Task>,
}

/// Why a report was not taken; nothing of it committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportRefusal {
    /// The acknowledgement was refused (a stale or foreign lease, a lease past its end, an
    /// event acknowledged without this report).
    Event(ItemRefusal),
    /// The task would hold more than it may.
    Overfull(Overfull),
}

impl A2a<'_> {
    /// Acknowledges an event and moves its task as `report` says, in one transaction, only
    /// while the lease holds.
    pub async fn report(self, report: &Report) -> Result<Result<ReportReceipt, ReportRefusal>, StoreError> {
        with_retries!(self.store, self.report_once(report))
    }

    async fn report_once(self, report: &Report) -> Result<Result<ReportReceipt, ReportRefusal>, StoreError> {
        let now = self.store.now();
        let lock = self.store.dialect().for_update();
        let refuse = |reason| ReportRefusal::Event(ItemRefusal { event_id: report.event_id, reason });
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        let locked = load_events(&mut conn, &report.inbox, &[report.event_id], lock).await?;
        let Some(before) = locked.first() else { return Ok(Err(refuse(Refusal::NotFound))) };
        let repeat = matches!(before.state(), AckState::Acked | AckState::DeadLetter | AckState::Quarantined);
        let lapsed = before.state() == AckState::Claimed
            && before.lifecycle.lease.is_some_and(|lease| lease.until <= now);
        if lapsed {
            return Ok(Err(refuse(Refusal::Refused(RefusalReason::LeaseExpired))));
        }
        let by =
            Attribution { actor: &Actor::Agent, session_id: report.session_id.as_ref(), class: report.class };
        let change = EventChange {
            event_id: report.event_id,
            transition: Transition::Acknowledge {
                token_hash: report.lease_token.hash(),
                now,
                result: report.result,
            },
            note: report.reason.as_deref(),
            by,
        };
        let outcome =
            self.store.inbox().apply_changes_in(&mut conn, &report.inbox, &[change], now).await?.pop();
        let record = match outcome {
            Some(Ok(record)) => record,
            // Dropping the transaction rolls it back: nothing of a refused report commits.
            Some(Err(refusal)) => return Ok(Err(ReportRefusal::Event(refusal))),
            None => return Ok(Err(refuse(Refusal::NotFound))),
        };
        let ack = AckReceipt { event_id: record.event_id, state: record.state() };
        let row = conn
            .fetch_optional(
                &queries::task_of_event(lock),
                &[Arg::Str(report.inbox.tenant_id.as_str()), Arg::Bytes(report.event_id.as_bytes())],
            )
            .await?;
        let Some(row) = row else {
            // Not an A2A event after all: the acknowledgement alone.
            tx.commit().await?;
            return Ok(Ok(ReportReceipt { ack, task: None }));
        };
        let (task, reported) = (rows::task(&row)?, rows::reported_event(&row)?);
        if repeat {
            if reported == Some(report.event_id) || task.state() == TaskState::Canceled {
                return Ok(Ok(ReportReceipt { ack, task: Some(task) }));
            }
            return Ok(Err(refuse(Refusal::Refused(RefusalReason::Terminal("acked")))));
        }
        if !task.state().is_open() {
            // Canceled while the agent worked: the acknowledgement is taken, the task stays.
            tx.commit().await?;
            return Ok(Ok(ReportReceipt { ack, task: Some(task) }));
        }
        let mut change = Change::of(task, Some(report.event_id));
        for artifact in &report.outcome.artifacts {
            if let Err(overfull) = change.artifact(artifact.clone(), now) {
                return Ok(Err(ReportRefusal::Overfull(overfull)));
            }
        }
        let outcome = &report.outcome;
        change.status(outcome.state, outcome.message.clone(), outcome.note.clone(), now);
        change.save(&mut conn, false, now).await?;
        tx.commit().await?;
        Ok(Ok(ReportReceipt { ack, task: Some(change.task) }))
    }
}
