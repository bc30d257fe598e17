//! The agent's side: an acknowledgement that reports its A2A task's outcome (`acks[i].a2a`),
//! committed with the acknowledgement, only while its lease holds (`inbox_store::A2a::report`),
//! and a claim of `a2a.message` events, which makes their tasks `working` once it committed.
//!
//! What a report may say follows the acknowledgement's result: `completed` completes the task
//! (or, with `state`, leaves it waiting for the client's input or authorization), `failed`
//! fails it (with the agent's message, else the acknowledgement's reason), `quarantined`
//! rejects it. Ids the agent leaves out are made from the event's, so a retried report says
//! the same.

use inbox_api::a2a::{A2aReport, Role};
use inbox_api::{AckEntry, AckOutcome};
use inbox_core::{AckResult, SessionId, TenantId};
use inbox_store::{AckItem, ClaimedEvent, Report, ReportRefusal, TaskOutcome, TaskState};
use serde_json::json;

use super::convert::{self, check_artifact, check_message};
use crate::caller::Caller;
use crate::error::{ApiError, item_error};
use crate::node::AppState;

/// Most artifacts one report may add.
pub const ARTIFACTS_PER_REPORT_MAX: usize = 16;

/// An acknowledgement entry with `a2a` as a report for its event's task, checked field by field
/// (`{at}a2a.artifacts[0].parts`), against the task the event carries.
pub(in crate::ops) async fn report_of(
    state: &AppState,
    at: &str,
    caller: &Caller,
    session_id: Option<SessionId>,
    item: AckItem,
    entry: &AckEntry,
    report: &A2aReport,
) -> Result<Report, ApiError> {
    let field = format!("{at}a2a");
    if !entry.follow_ups.is_empty() {
        return Err(ApiError::invalid_field(&field, "goes without follow_ups: report the task, or hand off"));
    }
    let outcome_state = match (item.result, report.state) {
        (AckResult::Completed, state) => convert::stored_state(state.unwrap_or_default().task_state()),
        (_, Some(_)) => {
            return Err(ApiError::invalid_field(
                &format!("{field}.state"),
                "goes only with result completed: a failed or quarantined task is over",
            ));
        }
        (AckResult::Failed, None) => TaskState::Failed,
        (AckResult::Quarantined, None) => TaskState::Rejected,
    };
    if report.artifacts.len() > ARTIFACTS_PER_REPORT_MAX {
        return Err(ApiError::invalid_field(
            &format!("{field}.artifacts"),
            format!("holds {} artifacts; the limit is {ARTIFACTS_PER_REPORT_MAX}", report.artifacts.len()),
        ));
    }
    let bytes = serde_json::to_string(report).map_or(0, |text| text.len());
    let limit = state.config.inbox.payload_bytes_limit;
    if bytes > limit {
        return Err(ApiError::invalid_field(
            &field,
            format!("is {bytes} bytes; the limit is {limit} (the payload limit)"),
        ));
    }
    let task = match state.store.a2a().task_of_event(&caller.tenant_id, item.event_id).await? {
        Some(task) if task.agent_id == caller.subject => task,
        _ => {
            return Err(ApiError::invalid_field(
                &field,
                format!("names event {}, which carries no A2A task of yours; leave a2a out", item.event_id),
            ));
        }
    };
    let (task_id, context_id) = (task.task_id.as_str(), task.context_id.as_str());
    let message = match &report.message {
        None => None,
        Some(message) => {
            let mut message = message.clone();
            if message.message_id.is_empty() {
                message.message_id = format!("{}-status", item.event_id);
            }
            message.task_id = Some(task_id.to_owned());
            message.context_id = Some(context_id.to_owned());
            check_message(&format!("{field}.message"), &message, Role::Agent)
                .map_err(|(field, problem)| ApiError::invalid_field(&field, problem))?;
            Some(serde_json::to_value(&message).map_err(|e| ApiError::internal(e.to_string()))?)
        }
    };
    let mut artifacts = Vec::with_capacity(report.artifacts.len());
    for (i, artifact) in report.artifacts.iter().enumerate() {
        let mut artifact = artifact.clone();
        if artifact.artifact_id.is_empty() {
            artifact.artifact_id = format!("{}-{i}", item.event_id);
        }
        check_artifact(&format!("{field}.artifacts[{i}]"), &artifact)
            .map_err(|(field, problem)| ApiError::invalid_field(&field, problem))?;
        artifacts.push(serde_json::to_value(&artifact).map_err(|e| ApiError::internal(e.to_string()))?);
    }
    let note = match (&message, item.result) {
        (None, AckResult::Failed | AckResult::Quarantined) => item.reason.clone(),
        _ => None,
    };
    Ok(Report {
        inbox: caller.inbox(),
        session_id,
        event_id: item.event_id,
        lease_token: item.lease_token,
        result: item.result,
        reason: item.reason,
        class: item.class,
        outcome: TaskOutcome { state: outcome_state, message, note, artifacts },
    })
}

/// Commits one report with its acknowledgement and answers the acknowledgement's outcome.
pub(in crate::ops) async fn acknowledge(
    state: &AppState,
    caller: &Caller,
    at: &str,
    report: Report,
) -> Result<AckOutcome, ApiError> {
    let started = std::time::Instant::now();
    let outcome = state.store.a2a().report(&report).await?;
    state.metrics.ack_latency_seconds().observe([], started.elapsed());
    state.hints.touched(&caller.tenant_id);
    Ok(match outcome {
        Ok(receipt) => {
            let tenant = state.metrics.tenant_label(caller.tenant_id.as_str());
            state.metrics.acks_total().add([tenant, receipt.ack.state.as_str().to_owned()], 1);
            state.a2a.changed();
            AckOutcome {
                event_id: receipt.ack.event_id,
                ack_state: Some(receipt.ack.state.as_str().to_owned()),
                error: None,
                follow_ups: Vec::new(),
            }
        }
        Err(ReportRefusal::Event(refusal)) => AckOutcome {
            event_id: refusal.event_id,
            ack_state: None,
            error: Some(item_error(&refusal)),
            follow_ups: Vec::new(),
        },
        Err(ReportRefusal::Overfull(overfull)) => {
            let detail = match overfull {
                inbox_store::Overfull::Artifacts { limit } => {
                    format!("the task would hold more than {limit} artifacts")
                }
                inbox_store::Overfull::ArtifactBytes { bytes, limit } => {
                    format!("the task's artifacts would be {bytes} bytes; the limit is {limit}")
                }
            };
            return Err(ApiError::invalid_field(&format!("{at}a2a.artifacts"), detail)
                .with("event_id", json!(report.event_id.to_string())));
        }
    })
}

/// After a claim committed: the tasks of its `a2a.message` events are `working` (in the
/// background, so the claim's answer does not wait; the reconciler catches what this misses).
pub(in crate::ops) fn claimed(state: &AppState, tenant_id: &TenantId, claimed: &[ClaimedEvent]) {
    let event_ids: Vec<_> = claimed
        .iter()
        .filter(|c| c.event.event_type.as_str() == inbox_api::a2a::A2A_MESSAGE_EVENT_TYPE)
        .map(|c| c.event.event_id)
        .collect();
    if event_ids.is_empty() {
        return;
    }
    let (state, tenant_id) = (state.clone(), tenant_id.clone());
    tokio::spawn(async move {
        match state.store.a2a().mark_working(&tenant_id, &event_ids).await {
            Ok(moved) if !moved.is_empty() => state.a2a.changed(),
            Ok(_) => {}
            Err(err) => {
                tracing::debug!(error = %err, "marking claimed A2A tasks working failed; the reconciler will")
            }
        }
    });
}
