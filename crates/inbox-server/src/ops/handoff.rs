//! Hand-offs: an acknowledgement that carries follow-up publishes (`acks[i].follow_ups`).
//! Here is where a hand-off is decided: who may hand off (the `events.handoff` scope, or
//! `events.publish`, which already allows any publish), to whom (agents of the token's own
//! tenant, never another's), and with which result (`completed` only). The store commits the
//! acknowledgement and the follow-ups in one transaction only while the lease holds
//! (`inbox_store::Inbox::hand_off`); after the commit this node's waiters are hinted, as for
//! any publish. Under the tenant's quotas every follow-up delivery counts, less the event the
//! hand-off acknowledges (`admit`).

use std::time::Instant;

use inbox_api::{AckEntry, AckOutcome, PublishResponse, Scope};
use inbox_core::{AckResult, SessionId};
use inbox_store::{AckItem, HandOff};

use crate::caller::Caller;
use crate::convert;
use crate::error::{ApiError, Places, item_error, store_refusal_at};
use crate::node::AppState;
use crate::ops::publishing::{fairness_key, record_published, subject_key};
use crate::quotas::{Change, Reservation, inline_bytes};

/// The scopes that may hand off, one of them enough (`Caller::require_any`): a hand-off
/// publishes, so `events.publish` may, but `events.handoff` is enough, since it publishes only
/// what a live lease acknowledges.
pub(in crate::ops) const HANDOFF_SCOPES: [Scope; 2] = [Scope::EventsHandoff, Scope::EventsPublish];

/// An acknowledgement entry with follow-ups as a hand-off of the caller's inbox.
pub(in crate::ops) fn hand_off_of(
    at: &str,
    caller: &Caller,
    session_id: Option<SessionId>,
    item: AckItem,
    entry: &AckEntry,
) -> Result<HandOff, ApiError> {
    if item.result != AckResult::Completed {
        return Err(ApiError::invalid_field(
            &format!("{at}follow_ups"),
            "go only with result completed: a hand-off passes on finished work",
        ));
    }
    let follow_ups = entry
        .follow_ups
        .iter()
        .enumerate()
        .map(|(i, request)| {
            let field = format!("{at}follow_ups[{i}].");
            if request.deduplication_key.is_some() {
                return Err(ApiError::invalid_field(
                    &format!("{field}deduplication_key"),
                    "is given by the hand-off (handoff:{event_id}:{index}); leave it out",
                ));
            }
            convert::publish(&field, &caller.tenant_id, request.clone())
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(HandOff {
        inbox: caller.inbox(),
        session_id,
        event_id: item.event_id,
        lease_token: item.lease_token,
        follow_ups,
    })
}

/// Readies a request's hand-offs to commit: their follow-ups' fairness keys under the
/// tenant's policy, and one admission of all their deliveries by the tenant's quotas (each
/// hand-off credited the event it acknowledges), before anything of the request commits. A
/// request past a quota is refused whole, its events left claimed under their leases.
pub(in crate::ops) async fn admit(
    state: &AppState,
    caller: &Caller,
    hand_offs: &mut [(usize, HandOff)],
) -> Result<Reservation, ApiError> {
    let policy = state.tenant_policies.get(&state.store, &caller.tenant_id).await?;
    let mut change = Change::default();
    for (_, hand_off) in hand_offs.iter_mut() {
        change = change.and(Change { events: 0, events_done: 1, bytes: 0 });
        for follow_up in &mut hand_off.follow_ups {
            follow_up.fairness_key =
                fairness_key(&policy, follow_up.fairness_key.take(), || subject_key(caller));
            change =
                change.and(Change::deliveries(follow_up.recipients.len(), inline_bytes(&follow_up.body)));
        }
    }
    state.quotas.admit(&state.store, &state.metrics, &policy, &caller.tenant_id, change).await
}

/// Commits one hand-off (the request's `acks[place]`) and answers its acknowledgement's
/// outcome with the follow-ups' deliveries; what it added to the tenant's pending work is
/// added to `committed`.
pub(in crate::ops) async fn hand_off(
    state: &AppState,
    caller: &Caller,
    place: usize,
    hand_off: HandOff,
    committed: &mut Change,
) -> Result<AckOutcome, ApiError> {
    let started = Instant::now();
    let outcome = state
        .store
        .inbox()
        .hand_off(&hand_off)
        .await
        .map_err(|e| store_refusal_at(e, &format!("acks[{place}]."), Places::InOrder))?;
    state.metrics.ack_latency_seconds().observe([], started.elapsed());
    state.hints.touched(&caller.tenant_id);
    Ok(match outcome {
        Ok(receipt) => {
            let tenant = state.metrics.tenant_label(caller.tenant_id.as_str());
            state.metrics.acks_total().add([tenant, receipt.ack.state.as_str().to_owned()], 1);
            let mut added = Change::default();
            for (published, follow_up) in receipt.follow_ups.iter().zip(&hand_off.follow_ups) {
                record_published(state, &caller.tenant_id, published);
                added = added.and(Change::committed(published, inline_bytes(&follow_up.body)));
            }
            // A repeat commits nothing new: its event was acknowledged the first time.
            if added.events > 0 {
                *committed = committed.and(added).and(Change { events: 0, events_done: 1, bytes: 0 });
            }
            AckOutcome {
                event_id: receipt.ack.event_id,
                ack_state: Some(receipt.ack.state.as_str().to_owned()),
                error: None,
                follow_ups: receipt
                    .follow_ups
                    .iter()
                    .map(|r| PublishResponse {
                        deliveries: r.deliveries.iter().map(convert::delivery).collect(),
                    })
                    .collect(),
            }
        }
        Err(refusal) => AckOutcome {
            event_id: refusal.event_id,
            ack_state: None,
            error: Some(item_error(&refusal)),
            follow_ups: Vec::new(),
        },
    })
}
