//! The words the conformance cases are written in: tenants, agents and inboxes by name,
//! events, claims, acknowledgements and polls, and the assertions the cases share.

use inbox_core::{
    AckResult, EventBody, EventId, EventType, InboxSeq, LeaseToken, Recipient, RecipientId, RecipientKey,
    TenantId,
};
use inbox_store::{
    AckItem, Acknowledge, Actor, ClaimNext, ClaimOrder, ClaimedEvent, Delivery, HistoryAction, HistoryEntry,
    PollQuery, Publish, QuarantineRequest, Refusal, StoreError,
};

use crate::Harness;

pub fn tenant(name: &str) -> TenantId {
    TenantId::new(name).unwrap()
}

pub fn agent(name: &str) -> Recipient {
    Recipient::agent(RecipientId::new(name).unwrap())
}

pub fn agent_id(name: &str) -> RecipientId {
    RecipientId::new(name).unwrap()
}

pub fn inbox_of(tenant_name: &str, agent_name: &str) -> RecipientKey {
    RecipientKey { tenant_id: tenant(tenant_name), recipient: agent(agent_name) }
}

pub fn event(tenant_name: &str, recipients: &[&str], body: &str) -> Publish {
    Publish::new(
        tenant(tenant_name),
        recipients.iter().map(|r| agent(r)).collect(),
        EventType::new("meeting_room.message_posted").unwrap(),
        EventBody::json(body).unwrap(),
    )
}

pub async fn publish_to(h: &Harness, tenant_name: &str, recipient: &str, body: &str) -> Delivery {
    h.store.inbox().publish(&event(tenant_name, &[recipient], body)).await.unwrap().deliveries.remove(0)
}

pub fn claim_next(inbox: &RecipientKey, limit: u32) -> ClaimNext {
    ClaimNext {
        inbox: inbox.clone(),
        session_id: None,
        limit,
        lease_ms: Some(60_000),
        order: ClaimOrder::Sequence,
    }
}

pub fn ack_of(inbox: &RecipientKey, claimed: &ClaimedEvent) -> Acknowledge {
    ack_with(inbox, claimed.event.event_id, &claimed.lease_token, AckResult::Completed)
}

pub fn ack_with(
    inbox: &RecipientKey,
    event_id: EventId,
    token: &LeaseToken,
    result: AckResult,
) -> Acknowledge {
    Acknowledge {
        inbox: inbox.clone(),
        session_id: None,
        items: vec![AckItem::new(event_id, token.clone(), result)],
    }
}

/// The operator `ops`, as the history names them (`operator:ops`).
pub fn operator() -> Actor {
    Actor::operator("ops").unwrap()
}

/// An operator's quarantine with this reason and no class (recorded as `other`).
pub fn quarantine_by_operator(reason: &str) -> QuarantineRequest {
    QuarantineRequest { reason: reason.to_owned(), class: None, actor: operator() }
}

/// The event's recorded history, oldest first (live or archived).
pub async fn history_of(h: &Harness, inbox: &RecipientKey, event_id: EventId) -> Vec<HistoryEntry> {
    h.store.inbox().event_detail(inbox, event_id).await.unwrap().expect("the event exists").history
}

/// The actions of a history, in order.
pub fn actions(history: &[HistoryEntry]) -> Vec<HistoryAction> {
    history.iter().map(|e| e.action).collect()
}

pub fn refusal<T: std::fmt::Debug>(outcome: &Result<T, inbox_store::ItemRefusal>) -> Refusal {
    outcome.as_ref().expect_err("expected a refusal").reason
}

pub fn poll(inbox: &RecipientKey, after: u64, limit: u32) -> PollQuery {
    PollQuery { inbox: inbox.clone(), after_seq: InboxSeq(after), limit, claimable_only: false }
}

pub fn assert_invalid<T: std::fmt::Debug>(result: Result<T, StoreError>, field: inbox_store::Field) {
    match result {
        Err(StoreError::Invalid { field: f, .. }) => assert_eq!(f, field),
        other => panic!("expected an invalid {field:?}, got {other:?}"),
    }
}

pub async fn futures_join(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for task in tasks {
        if let Err(err) = task.await {
            std::panic::resume_unwind(err.into_panic());
        }
    }
}
