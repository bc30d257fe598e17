//! Operators' use cases over events, within the admin token's own tenant: parked events
//! (list, requeue, purge), quarantine and its release, an inbox's events by state, one event
//! with its history, and each inbox's backlog.
//!
//! Every function starts with [`Caller::require_operator`], so the console (which calls the same routes
//! with its cookie's token) and the CLI are held to exactly the same rules. Another tenant's
//! inbox is simply not there: the tenant always comes from the token.

use inbox_api::time::format_utc;
use inbox_api::{
    AdminEventDetail, AdminEventsResponse, HistoryEntryView, InboxStatsResponse, InboxStatsView, ItemResult,
    ItemResults, ParkedEventsRequest, ParkedEventsResponse, ProblemCode, QuarantineRequest,
};
use inbox_core::{AckState, EventId, InboxSeq, Recipient, RecipientId, RecipientKey, UnixMillis};
use inbox_store::{
    Actor, EventRecord, EventState, EventsQuery, HistoryEntry, ItemOutcome, ParkedQuery,
    QuarantineRequest as Quarantine,
};

use crate::caller::Caller;
use crate::convert::{self, admin_event};
use crate::error::{ApiError, item_error};
use crate::node::AppState;

/// Default page of the listings.
pub const LIST_LIMIT_DEFAULT: u32 = 100;

/// The operator behind a change, as the event's history names them.
fn operator(caller: &Caller) -> Result<Actor, ApiError> {
    Ok(Actor::operator(caller.subject.as_str())?)
}

/// An inbox of the caller's tenant, named by the agent id in a body or path.
fn inbox_of(caller: &Caller, field: &str, recipient_id: &str) -> Result<RecipientKey, ApiError> {
    let recipient = RecipientId::new(recipient_id).map_err(|e| ApiError::invalid_field(field, e.problem))?;
    Ok(RecipientKey { tenant_id: caller.tenant_id.clone(), recipient: Recipient::agent(recipient) })
}

/// Which parked events to list.
#[derive(Debug, Clone, Default)]
pub struct ParkedFilter {
    pub recipient_id: Option<String>,
    pub state: Option<String>,
    pub limit: Option<u32>,
}

/// Dead-lettered and quarantined events of the tenant, oldest first, with their reasons.
pub async fn list_parked(
    state: &AppState,
    caller: &Caller,
    filter: ParkedFilter,
) -> Result<ParkedEventsResponse, ApiError> {
    caller.require_operator()?;
    let recipient = filter
        .recipient_id
        .map(|id| RecipientId::new(id).map(Recipient::agent))
        .transpose()
        .map_err(|e| ApiError::invalid_field("recipient_id", e.problem))?;
    let parked_state = match filter.state.as_deref() {
        None => None,
        Some("dead_letter") => Some(AckState::DeadLetter),
        Some("quarantined") => Some(AckState::Quarantined),
        Some(other) => {
            return Err(ApiError::invalid_field(
                "state",
                format!("is {other:?}; use dead_letter or quarantined"),
            ));
        }
    };
    let query = ParkedQuery {
        tenant_id: caller.tenant_id.clone(),
        recipient,
        state: parked_state,
        limit: filter.limit.unwrap_or(LIST_LIMIT_DEFAULT),
    };
    let events = state.store.inbox().list_parked(&query).await?;
    let now = state.store.now();
    Ok(ParkedEventsResponse { events: events.iter().map(|e| admin_event(e, now)).collect() })
}

/// The inbox a batch request names; refused when it names an event twice.
fn batch_inbox(caller: &Caller, recipient_id: &RecipientId) -> Result<RecipientKey, ApiError> {
    Ok(RecipientKey {
        tenant_id: caller.tenant_id.clone(),
        recipient: Recipient::agent(recipient_id.clone()),
    })
}

fn results<T>(outcomes: &[ItemOutcome<T>], ids: &[EventId]) -> ItemResults {
    ItemResults {
        results: outcomes
            .iter()
            .zip(ids)
            .map(|(outcome, id)| ItemResult {
                event_id: *id,
                ok: outcome.is_ok(),
                error: outcome.as_ref().err().map(item_error),
            })
            .collect(),
    }
}

/// Events a change really moved: an accepted repeat leaves its row, and `updated_at`,
/// untouched, so it is not counted twice.
fn changed_since(outcomes: &[ItemOutcome<EventRecord>], before: UnixMillis) -> u64 {
    outcomes.iter().flatten().filter(|record| record.updated_at >= before).count() as u64
}

/// Sends parked events back to the inbox with a fresh budget of attempts.
pub async fn requeue(
    state: &AppState,
    caller: &Caller,
    request: &ParkedEventsRequest,
) -> Result<ItemResults, ApiError> {
    caller.require_operator()?;
    let ids = &request.event_ids;
    let inbox = batch_inbox(caller, &request.recipient_id)?;
    let before = state.store.now();
    let outcomes = state.store.inbox().requeue(&inbox, ids, &operator(caller)?).await?;
    state.metrics.requeued_total().add([], changed_since(&outcomes, before));
    // The streams of every node, this one included, hear of it from the `inbox.nudged` signal
    // the store committed with the change: one nudge per change, within a notifier pass.
    state.hints.touched(&caller.tenant_id);
    Ok(results(&outcomes, ids))
}

/// Deletes parked events for good.
pub async fn purge(
    state: &AppState,
    caller: &Caller,
    request: &ParkedEventsRequest,
) -> Result<ItemResults, ApiError> {
    caller.require_operator()?;
    let ids = &request.event_ids;
    let inbox = batch_inbox(caller, &request.recipient_id)?;
    let outcomes = state.store.inbox().purge(&inbox, ids).await?;
    state.hints.touched(&caller.tenant_id);
    Ok(results(&outcomes, ids))
}

/// Sets available or claimed events aside for a person; repeats are accepted unchanged.
pub async fn quarantine(
    state: &AppState,
    caller: &Caller,
    request: &QuarantineRequest,
) -> Result<ItemResults, ApiError> {
    caller.require_operator()?;
    let ids = &request.event_ids;
    let inbox = batch_inbox(caller, &request.recipient_id)?;
    let reason = request.reason.as_str().to_owned();
    let class = request.class;
    let quarantine = Quarantine { reason, class, actor: operator(caller)? };
    let before = state.store.now();
    let outcomes = state.store.inbox().quarantine(&inbox, ids, &quarantine).await?;
    state.hints.touched(&caller.tenant_id);
    let labels = ["operator".to_owned(), class.unwrap_or_default().as_str().to_owned()];
    state.metrics.quarantined_total().add(labels, changed_since(&outcomes, before));
    Ok(results(&outcomes, ids))
}

/// Lets quarantined events be delivered again; an already released one is accepted unchanged.
pub async fn release_quarantined(
    state: &AppState,
    caller: &Caller,
    request: &ParkedEventsRequest,
) -> Result<ItemResults, ApiError> {
    caller.require_operator()?;
    let ids = &request.event_ids;
    let inbox = batch_inbox(caller, &request.recipient_id)?;
    let before = state.store.now();
    let outcomes = state.store.inbox().release_quarantined(&inbox, ids, &operator(caller)?).await?;
    state.metrics.quarantine_releases_total().add([], changed_since(&outcomes, before));
    // Agents are nudged as after a requeue.
    state.hints.touched(&caller.tenant_id);
    Ok(results(&outcomes, ids))
}

/// Which events of an inbox to list.
#[derive(Debug, Clone, Default)]
pub struct EventsFilter {
    pub state: Option<String>,
    pub order: Option<inbox_api::EventsOrder>,
    pub after_seq: Option<u64>,
    pub before_seq: Option<u64>,
    pub limit: Option<u32>,
}

/// One inbox's events, optionally in one state, in `inbox_seq` order, oldest or newest first.
pub async fn events(
    state: &AppState,
    caller: &Caller,
    recipient_id: &str,
    filter: EventsFilter,
) -> Result<AdminEventsResponse, ApiError> {
    caller.require_operator()?;
    let inbox = inbox_of(caller, "recipient_id", recipient_id)?;
    let state_filter = filter
        .state
        .as_deref()
        .map(|text| {
            EventState::parse(text).ok_or_else(|| {
                let known: Vec<&str> = EventState::ALL.iter().map(|s| s.as_str()).collect();
                ApiError::invalid_field("state", format!("is {text:?}; use one of {}", known.join(", ")))
            })
        })
        .transpose()?;
    let seq = |field: &'static str, value: Option<u64>| {
        value.map(InboxSeq::new).transpose().map_err(|e| ApiError::invalid_field(field, e.problem))
    };
    let query = EventsQuery {
        inbox,
        state: state_filter,
        after_seq: seq("after_seq", filter.after_seq)?,
        before_seq: seq("before_seq", filter.before_seq)?,
        newest_first: filter.order == Some(inbox_api::EventsOrder::NewestFirst),
        limit: filter.limit.unwrap_or(LIST_LIMIT_DEFAULT),
    };
    let events = state.store.inbox().events(&query).await?;
    let now = state.store.now();
    Ok(AdminEventsResponse { events: events.iter().map(|e| admin_event(e, now)).collect() })
}

/// One event of an inbox with its history, live or archived; `not_found` when neither table
/// has it (another tenant's event included, so ids are not confirmed).
pub async fn event_detail(
    state: &AppState,
    caller: &Caller,
    recipient_id: &str,
    event_id: &str,
) -> Result<AdminEventDetail, ApiError> {
    caller.require_operator()?;
    let inbox = inbox_of(caller, "recipient_id", recipient_id)?;
    let id = convert::event_id("event_id", event_id)?;
    let Some(detail) = state.store.inbox().event_detail(&inbox, id).await? else {
        return Err(ApiError::new(
            axum::http::StatusCode::NOT_FOUND,
            ProblemCode::NotFound,
            format!(
                "no event {event_id} is in the inbox of {recipient_id} (live or archived); check both ids"
            ),
        )
        .with("event_id", event_id.to_owned()));
    };
    let now = state.store.now();
    Ok(AdminEventDetail {
        event: admin_event(&detail.record, now),
        archived: detail.archived,
        history: detail.history.iter().map(history_entry).collect(),
    })
}

fn history_entry(entry: &HistoryEntry) -> HistoryEntryView {
    HistoryEntryView {
        at_utc: format_utc(entry.at.get()),
        action: entry.action.as_str().to_owned(),
        state: entry.state.as_str().to_owned(),
        attempt: entry.attempt,
        session_id: entry.session_id.clone(),
        actor: entry.actor.clone(),
        reason: entry.reason.clone(),
        class: entry.class.map(|c| c.as_str().to_owned()),
    }
}

/// Each inbox's backlog: depth, claimed, retry-scheduled, parked, oldest unacked age, online
/// sessions and when the agent was last heard from.
pub async fn inboxes(
    state: &AppState,
    caller: &Caller,
    limit: Option<u32>,
) -> Result<InboxStatsResponse, ApiError> {
    caller.require_operator()?;
    let stats =
        state.store.inbox().inbox_stats(&caller.tenant_id, limit.unwrap_or(LIST_LIMIT_DEFAULT)).await?;
    let now = state.store.now();
    Ok(InboxStatsResponse {
        inboxes: stats
            .into_iter()
            .map(|s| InboxStatsView {
                recipient_kind: s.recipient.kind.clone(),
                recipient_id: s.recipient.id.clone(),
                head_seq: s.head_seq.get(),
                depth: s.depth,
                claimed: s.claimed,
                retry_scheduled: s.retry_scheduled,
                parked: s.parked,
                oldest_unacked_age_seconds: s.oldest_unacked_at.map(|t| now.ms_since(t) / 1_000),
                online_sessions: s.online_sessions,
                last_seen_at_utc: s.last_seen_at.map(|t| format_utc(t.get())),
            })
            .collect(),
    })
}
