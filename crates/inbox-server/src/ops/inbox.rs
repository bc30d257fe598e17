//! The inbox's use cases: publish, poll after the cursor (and long poll), head, resync, claim,
//! acknowledge, release and heartbeat. The HTTP routes (`http/routes/inbox.rs`), seed 000's
//! aliases (`http/routes/agents.rs`) and the WebSocket (`http/routes/ws.rs`) all call these, so
//! scopes, the session policy, validation and metrics are the same whichever way a call came.
//!
//! They take the wire requests of `inbox-api` (and the values a route reads from its path,
//! query or headers) and answer its wire responses, because all three transports answer with
//! the same bodies; the routes only map the answer to a status and headers.

use std::time::{Duration, Instant};

use inbox_api::time::format_utc;
use inbox_api::{
    AckOneRequest, AckOutcome, AcknowledgeRequest, AcknowledgeResponse, AgentInboxPage, Claim, ClaimRequest,
    ClaimResponse, HeadResponse, HeartbeatOutcome, HeartbeatRequest, HeartbeatResponse, PollRequest,
    PollResponse, PublishRequest, PublishResponse, RejectedEvent, ReleaseOneRequest, ReleaseRequest,
    ReleaseResponse, ResyncResponse, Scope,
};
use inbox_core::limits::{BatchLimit, ReleaseReason};
use inbox_core::{
    AckResult, AckState, EventId, InboxSeq, QuarantineClass, RecipientId, RecipientKey, RefusalReason,
    SessionId,
};
use inbox_store::{
    AckItem, AckReceipt, Acknowledge, ClaimByIds, ClaimNext, ClaimOrder, ClaimedEvent, Heartbeat,
    HeartbeatItem, ItemOutcome, PollPage, PollQuery, Refusal, Release, StoreError,
};

use crate::caller::Caller;
use crate::convert::{self, envelope};
use crate::error::{ApiError, Places, item_error, store_refusal_at};
use crate::node::AppState;
use crate::ops::publishing::{fairness_key, record_published, subject_key};
use crate::ops::sessions::require_active_session;
use crate::ops::streams::Connected;
use crate::ops::{a2a, handoff};
use crate::quotas;

/// Default page size of a poll.
pub const POLL_LIMIT_DEFAULT: BatchLimit = BatchLimit::of(100);
/// Default batch of a claim-next.
pub const CLAIM_LIMIT_DEFAULT: BatchLimit = BatchLimit::of(10);

/// Events after the cursor, in sequence order; with `wait_seconds`, a long poll.
pub async fn poll(state: &AppState, caller: &Caller, request: PollRequest) -> Result<PollResponse, ApiError> {
    caller.require(Scope::InboxPoll)?;
    caller.check_tenant(request.tenant_id.as_ref())?;
    caller.check_agent(request.recipient_id.as_ref().map(RecipientId::as_str))?;
    let query = PollQuery {
        inbox: caller.inbox(),
        after_seq: request.after_seq,
        limit: request.limit.unwrap_or(POLL_LIMIT_DEFAULT).get(),
        claimable_only: request.include_claimable_only,
    };
    let wait = match request.wait_seconds.map(|s| s.get()) {
        None | Some(0) => None,
        Some(seconds) => {
            let max = state.config.inbox.long_poll_wait_max;
            if u64::from(seconds) > max.as_secs() {
                return Err(ApiError::invalid_field(
                    "wait_seconds",
                    format!("is {seconds}; the longest wait this server allows is {} s", max.as_secs()),
                ));
            }
            Some(Duration::from_secs(u64::from(seconds)))
        }
    };
    let (page, nudged) = poll_page(state, caller, &query, wait).await?;
    count_fetch(state, caller, "poll");
    let now = state.store.now();
    Ok(PollResponse {
        head_seq: page.head_seq.get(),
        events: page.events.iter().map(|e| envelope(e, now)).collect(),
        next_cursor: page.next_cursor.get(),
        more_available: page.more_available,
        nudged,
    })
}

/// Seed 000's page of events after `after_cursor` (no long poll), of the agent in the path
/// (`agent_id`), which must be the caller.
pub async fn page(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
    after_cursor: u64,
    limit: Option<u32>,
) -> Result<AgentInboxPage, ApiError> {
    caller.require(Scope::InboxPoll)?;
    caller.check_agent(Some(agent_id))?;
    let query = PollQuery {
        inbox: caller.inbox(),
        after_seq: InboxSeq::new(after_cursor)
            .map_err(|e| ApiError::invalid_field("after_cursor", e.problem))?,
        limit: limit.unwrap_or(POLL_LIMIT_DEFAULT.get()),
        claimable_only: false,
    };
    let (page, _) = poll_page(state, caller, &query, None).await?;
    count_fetch(state, caller, "poll");
    let now = state.store.now();
    Ok(AgentInboxPage {
        events: page.events.iter().map(|e| envelope(e, now).into()).collect(),
        next_cursor: page.next_cursor.get(),
        has_more: page.more_available,
        head_seq: page.head_seq.get(),
    })
}

/// One poll, or a long poll that returns as soon as an event past the cursor commits, or
/// (answering `true` beside the page) when the inbox is nudged: events behind the cursor went
/// back to it, which the caller only finds by claiming.
async fn poll_page(
    state: &AppState,
    caller: &Caller,
    query: &PollQuery,
    wait: Option<Duration>,
) -> Result<(PollPage, bool), ApiError> {
    let tenant = state.metrics.tenant_label(caller.tenant_id.as_str());
    let counted = |result: Result<PollPage, StoreError>| {
        if let Err(StoreError::CursorResetRequired { .. }) = &result {
            state.metrics.cursor_resets_total().add([tenant.clone()], 1);
        }
        result.map_err(ApiError::from)
    };
    let Some(wait) = wait else {
        return counted(state.store.inbox().poll_after_cursor(query).await).map(|page| (page, false));
    };
    let _slot = state.limits.hold_waiter(caller.tenant_id.as_str(), caller.subject.as_str())?;
    let _connected = Connected::new(state, "long-poll");
    let deadline = Instant::now() + wait;
    let mut hints = state.hints.watch(&query.inbox);
    let nudges_before = hints.borrow().nudges;
    let mut nudged = false;
    let outcome = |outcome: &'static str| {
        state.metrics.long_polls_total().add([outcome.to_owned()], 1);
    };
    loop {
        hints.mark_unchanged();
        let page = counted(state.store.inbox().poll_after_cursor(query).await)?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        if !page.events.is_empty() {
            outcome("events");
            return Ok((page, nudged));
        }
        if nudged {
            outcome("nudged");
            return Ok((page, true));
        }
        if remaining.is_zero() {
            outcome("timeout");
            return Ok((page, false));
        }
        tokio::select! {
            _ = hints.changed() => nudged = hints.borrow().nudges != nudges_before,
            _ = tokio::time::sleep(remaining.min(state.config.inbox.long_poll_recheck)) => {}
            _ = state.shutdown.cancelled() => {
                outcome("shutdown");
                return Ok((page, false));
            }
        }
    }
}

/// Counts a poll or claim request: what a hint is meant to lead to (the hint-to-fetch ratio).
fn count_fetch(state: &AppState, caller: &Caller, kind: &'static str) {
    let tenant = state.metrics.tenant_label(caller.tenant_id.as_str());
    state.metrics.fetches_total().add([tenant, kind.to_owned()], 1);
}

/// The caller's head, read conditionally: [`head`]'s answer.
#[derive(Debug)]
pub struct Head {
    /// The head's entity tag: the inbox and its head sequence, quoted.
    pub etag: String,
    /// The head, or `None` when `If-None-Match` named `etag` (or `*`): not modified.
    pub body: Option<HeadResponse>,
}

/// The caller's head, unless `if_none_match` (the header's value) names its current tag. A
/// check that will answer `304` is answered from this node's [`HeadCache`] when it can.
///
/// [`HeadCache`]: crate::head_cache::HeadCache
pub async fn head(state: &AppState, caller: &Caller, if_none_match: Option<&str>) -> Result<Head, ApiError> {
    caller.require(Scope::InboxPoll)?;
    let inbox = caller.inbox();
    if let Some(if_none_match) = if_none_match
        && let Some(head_seq) = state.head_cache.current(&inbox)
    {
        let etag = head_etag(&inbox, head_seq);
        if names_tag(if_none_match, &etag) {
            state.metrics.head_requests_total().add(["not_modified".to_owned()], 1);
            state.metrics.head_checks_from_memory_total().add([], 1);
            return Ok(Head { etag, body: None });
        }
    }
    let epoch = state.head_cache.epoch();
    let head = state.store.inbox().head(&inbox).await?;
    state.head_cache.read(&inbox, head.head_seq.get(), epoch);
    let etag = head_etag(&inbox, head.head_seq.get());
    let matches = if_none_match.is_some_and(|v| names_tag(v, &etag));
    let result = if matches { "not_modified" } else { "modified" };
    state.metrics.head_requests_total().add([result.to_owned()], 1);
    let body = (!matches).then(|| HeadResponse {
        tenant_id: inbox.tenant_id.clone(),
        recipient_kind: inbox.recipient.kind.clone(),
        recipient_id: inbox.recipient.id.clone(),
        head_seq: head.head_seq.get(),
        oldest_available_seq: head.oldest_available_seq.get(),
    });
    Ok(Head { etag, body })
}

/// The entity tag of an inbox at `head_seq`, quoted.
fn head_etag(inbox: &RecipientKey, head_seq: u64) -> String {
    format!("\"{}:{}:{}\"", inbox.tenant_id, inbox.recipient.id, head_seq)
}

/// Whether an `If-None-Match` value names `etag` (or is `*`).
fn names_tag(if_none_match: &str, etag: &str) -> bool {
    if_none_match.split(',').any(|tag| tag.trim() == etag || tag.trim() == "*")
}

/// After `cursor_reset_required`: the head, the oldest retained sequence and a page of the
/// events still open after `after_seq`.
pub async fn resync(
    state: &AppState,
    caller: &Caller,
    after_seq: u64,
    limit: Option<u32>,
) -> Result<ResyncResponse, ApiError> {
    caller.require(Scope::InboxPoll)?;
    let after_seq = InboxSeq::new(after_seq).map_err(|e| ApiError::invalid_field("after_seq", e.problem))?;
    let inbox: RecipientKey = caller.inbox();
    let head = state.store.inbox().head(&inbox).await?;
    let limit = limit.unwrap_or(state.store.config().batch_events_max);
    let (open, more_available) = state.store.inbox().open_events(&inbox, after_seq, limit).await?;
    let now = state.store.now();
    Ok(ResyncResponse {
        head_seq: head.head_seq.get(),
        oldest_available_seq: head.oldest_available_seq.get(),
        resume_after_seq: head.head_seq.get(),
        open_events: open.iter().map(|e| envelope(e, now)).collect(),
        more_available,
    })
}

/// Seed 000's claim, for the agent in the path (`agent_id`), which must be the caller.
pub async fn claim_for_agent(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
    request: ClaimRequest,
) -> Result<ClaimResponse, ApiError> {
    caller.require(Scope::InboxClaim)?;
    caller.check_agent(Some(agent_id))?;
    claim(state, caller, request).await
}

/// Claims the named events, or the next `limit` claimable ones.
pub async fn claim(
    state: &AppState,
    caller: &Caller,
    request: ClaimRequest,
) -> Result<ClaimResponse, ApiError> {
    caller.require(Scope::InboxClaim)?;
    caller.check_tenant(request.tenant_id.as_ref())?;
    caller.check_agent(request.recipient_id.as_ref().map(RecipientId::as_str))?;
    let session_id = request.session_id;
    require_active_session(state, caller, session_id.as_ref()).await?;
    let lease_ms = request.lease_seconds.map(|s| s.get() * 1_000);
    let inbox = caller.inbox();
    let tenant = state.metrics.tenant_label(caller.tenant_id.as_str());
    let (claimed, rejected) = match request.event_ids {
        None => {
            let limit = request.limit.unwrap_or(CLAIM_LIMIT_DEFAULT).get();
            let order = if state.tenant_policies.get(&state.store, &caller.tenant_id).await?.fair_claims {
                ClaimOrder::Fair
            } else {
                ClaimOrder::Sequence
            };
            let claim = ClaimNext { inbox, session_id, limit, lease_ms, order };
            let claimed = state.store.inbox().claim_next(&claim).await?;
            (claimed, Vec::new())
        }
        Some(event_ids) => {
            if request.limit.is_some() {
                return Err(ApiError::invalid_field(
                    "limit",
                    "applies only when event_ids is absent; send one or the other",
                ));
            }
            let claim = ClaimByIds { inbox, session_id, event_ids: event_ids.into_vec(), lease_ms };
            let outcomes = state.store.inbox().claim_by_ids(&claim).await?;
            let mut claimed = Vec::new();
            let mut rejected = Vec::new();
            for outcome in outcomes {
                match outcome {
                    Ok(c) => claimed.push(c),
                    Err(refusal) => {
                        if matches!(
                            refusal.reason,
                            Refusal::Refused(RefusalReason::NotClaimable("claimed" | "acked"))
                        ) {
                            state.metrics.duplicate_claims_total().add([tenant.clone()], 1);
                        }
                        rejected
                            .push(RejectedEvent { event_id: refusal.event_id, error: item_error(&refusal) });
                    }
                }
            }
            (claimed, rejected)
        }
    };
    count_fetch(state, caller, "claim");
    if !claimed.is_empty() {
        state.hints.touched(&caller.tenant_id);
        a2a::report::claimed(state, &caller.tenant_id, &claimed);
    }
    let now = state.store.now();
    state.metrics.claims_total().add([tenant], claimed.len() as u64);
    for c in claimed.iter().filter(|c| c.event.lifecycle.delivery_attempts == 1) {
        let waited = now.ms_since(c.event.lifecycle.available_at);
        state.metrics.delivery_latency_seconds().observe([], Duration::from_millis(waited));
    }
    Ok(ClaimResponse { claims: claimed.iter().map(|c| claim_view(c, now)).collect(), rejected })
}

fn claim_view(c: &ClaimedEvent, now: inbox_core::UnixMillis) -> Claim {
    Claim {
        event_id: c.event.event_id,
        lease_token: c.lease_token.clone(),
        visibility_lease_until_utc: format_utc(c.lease_until.get()),
        ack_state: c.event.state().as_str().to_owned(),
        event: envelope(&c.event, now),
    }
}

/// Acknowledges events; repeats with the same token succeed. `result: quarantined` sets an
/// event aside for a person (with a reason, and a class for the metrics).
pub async fn acknowledge(
    state: &AppState,
    caller: &Caller,
    request: AcknowledgeRequest,
) -> Result<AcknowledgeResponse, ApiError> {
    caller.require(Scope::InboxAck)?;
    if request.acks.iter().any(|a| !a.follow_ups.is_empty()) {
        caller.require_any(&handoff::HANDOFF_SCOPES)?;
    }
    caller.check_tenant(request.tenant_id.as_ref())?;
    caller.check_agent(request.recipient_id.as_ref().map(RecipientId::as_str))?;
    let session_id = request.session_id;
    // Entries with follow-ups are hand-offs, each its own transaction; the rest are
    // acknowledged together. Answers keep the request's order.
    let mut plain = Vec::new();
    let mut hand_offs = Vec::new();
    // Entries with an A2A report commit each with its task, in a transaction of its own too.
    let mut reports = Vec::new();
    for (i, a) in request.acks.iter().enumerate() {
        let at = format!("acks[{i}].");
        let item =
            convert::ack_item(&at, a.event_id, a.lease_token.clone(), a.result, a.reason.as_ref(), a.class)?;
        if let Some(report) = &a.a2a {
            let report =
                a2a::report::report_of(state, &at, caller, session_id.clone(), item, a, report).await?;
            reports.push((i, at, report));
        } else if a.follow_ups.is_empty() {
            plain.push((i, item));
        } else {
            hand_offs.push((i, handoff::hand_off_of(&at, caller, session_id.clone(), item, a)?));
        }
    }
    if !hand_offs.is_empty() || !reports.is_empty() {
        let mut seen = std::collections::HashSet::new();
        if let Some(twice) = request.acks.iter().find(|a| !seen.insert(a.event_id)) {
            return Err(ApiError::invalid_field("acks", format!("names event {} twice", twice.event_id)));
        }
    }
    let reservation = match hand_offs.is_empty() {
        true => None,
        false => Some(handoff::admit(state, caller, &mut hand_offs).await?),
    };
    let mut results: Vec<Option<AckOutcome>> = vec![None; request.acks.len()];
    if !plain.is_empty() || (hand_offs.is_empty() && reports.is_empty()) {
        let (places, items): (Vec<usize>, Vec<AckItem>) = plain.into_iter().unzip();
        let outcomes = match acknowledge_items(state, caller, session_id, items, Places::Of(&places)).await {
            Ok(outcomes) => outcomes,
            Err(err) => {
                if let Some(reservation) = reservation {
                    reservation.cancel();
                }
                return Err(err);
            }
        };
        for (place, outcome) in places.into_iter().zip(outcomes) {
            results[place] = Some(ack_outcome(outcome));
        }
    }
    let mut committed = quotas::Change::default();
    for (place, hand_off) in hand_offs {
        match handoff::hand_off(state, caller, place, hand_off, &mut committed).await {
            Ok(outcome) => results[place] = Some(outcome),
            Err(err) => {
                if let Some(reservation) = reservation {
                    reservation.settle(committed);
                }
                return Err(err);
            }
        }
    }
    if let Some(reservation) = reservation {
        reservation.settle(committed);
    }
    for (place, at, report) in reports {
        results[place] = Some(a2a::report::acknowledge(state, caller, &at, report).await?);
    }
    Ok(AcknowledgeResponse {
        results: results.into_iter().map(|r| r.expect("one answer per entry")).collect(),
    })
}

/// Acknowledges `items`, which sit in the request at `places`.
async fn acknowledge_items(
    state: &AppState,
    caller: &Caller,
    session_id: Option<SessionId>,
    items: Vec<AckItem>,
    places: Places<'_>,
) -> Result<Vec<ItemOutcome<AckReceipt>>, ApiError> {
    let started = Instant::now();
    // The class of each quarantining item, by event, for the metric once it is accepted.
    let classes: Vec<(EventId, QuarantineClass)> = items
        .iter()
        .filter(|i| i.result == AckResult::Quarantined)
        .map(|i| (i.event_id, i.class.unwrap_or_default()))
        .collect();
    let acknowledge = Acknowledge { inbox: caller.inbox(), session_id, items };
    let outcomes =
        state.acknowledger.acknowledge(acknowledge).await.map_err(|e| store_refusal_at(e, "", places))?;
    state.metrics.ack_latency_seconds().observe([], started.elapsed());
    state.hints.touched(&caller.tenant_id);
    let tenant = state.metrics.tenant_label(caller.tenant_id.as_str());
    for receipt in outcomes.iter().flatten() {
        let labels = [tenant.clone(), receipt.state.as_str().to_owned()];
        state.metrics.acks_total().add(labels, 1);
        if receipt.state == AckState::Quarantined
            && let Some((_, class)) = classes.iter().find(|(id, _)| *id == receipt.event_id)
        {
            state.metrics.quarantined_total().add(["agent".to_owned(), class.as_str().to_owned()], 1);
        }
    }
    Ok(outcomes)
}

fn ack_outcome(outcome: ItemOutcome<AckReceipt>) -> AckOutcome {
    match outcome {
        Ok(receipt) => AckOutcome {
            event_id: receipt.event_id,
            ack_state: Some(receipt.state.as_str().to_owned()),
            error: None,
            follow_ups: Vec::new(),
        },
        Err(refusal) => AckOutcome {
            event_id: refusal.event_id,
            ack_state: None,
            error: Some(item_error(&refusal)),
            follow_ups: Vec::new(),
        },
    }
}

/// Seed 000's acknowledgement of one event of the agent in the path (`agent_id`, which must be
/// the caller): its refusal is the whole answer's error.
pub async fn acknowledge_one(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
    event_id: &str,
    request: AckOneRequest,
) -> Result<AckOutcome, ApiError> {
    caller.require(Scope::InboxAck)?;
    caller.check_agent(Some(agent_id))?;
    let event_id = convert::event_id("event_id", event_id)?;
    let item = convert::ack_item(
        "",
        event_id,
        request.lease_token,
        request.result,
        request.reason.as_ref(),
        request.class,
    )?;
    let receipt = acknowledge_items(state, caller, None, vec![item], Places::Alone).await?.remove(0)?;
    Ok(ack_outcome(Ok(receipt)))
}

/// Gives a claimed event back, to be retried after `retry_after_seconds`.
pub async fn release(
    state: &AppState,
    caller: &Caller,
    request: ReleaseRequest,
) -> Result<ReleaseResponse, ApiError> {
    caller.require(Scope::InboxRelease)?;
    caller.check_tenant(request.tenant_id.as_ref())?;
    caller.check_agent(request.recipient_id.as_ref().map(RecipientId::as_str))?;
    let release = Release {
        inbox: caller.inbox(),
        event_id: request.event_id,
        lease_token: request.lease_token,
        retry_after_ms: request.retry_after_seconds.get() * 1_000,
        reason: request.reason.map(ReleaseReason::into_string),
    };
    release_event(state, caller, release).await
}

async fn release_event(
    state: &AppState,
    caller: &Caller,
    release: Release,
) -> Result<ReleaseResponse, ApiError> {
    let receipt = state.store.inbox().release(&release).await?;
    state.hints.touched(&caller.tenant_id);
    Ok(ReleaseResponse {
        event_id: receipt.event_id,
        ack_state: receipt.state.as_str().to_owned(),
        next_retry_at_utc: receipt.next_retry_at.map(|t| format_utc(t.get())),
    })
}

/// Seed 000's release of one event of the agent in the path (`agent_id`, which must be the
/// caller).
pub async fn release_one(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
    event_id: &str,
    request: ReleaseOneRequest,
) -> Result<ReleaseResponse, ApiError> {
    caller.require(Scope::InboxRelease)?;
    caller.check_agent(Some(agent_id))?;
    let release = Release {
        inbox: caller.inbox(),
        event_id: convert::event_id("event_id", event_id)?,
        lease_token: request.lease_token,
        retry_after_ms: request.retry_after_seconds.get() * 1_000,
        reason: request.reason.map(ReleaseReason::into_string),
    };
    release_event(state, caller, release).await
}

/// Extends leases of events still being worked on.
pub async fn heartbeat(
    state: &AppState,
    caller: &Caller,
    request: HeartbeatRequest,
) -> Result<HeartbeatResponse, ApiError> {
    caller.require(Scope::InboxHeartbeat)?;
    caller.check_tenant(request.tenant_id.as_ref())?;
    caller.check_agent(request.recipient_id.as_ref().map(RecipientId::as_str))?;
    let items = request
        .leases
        .iter()
        .map(|l| HeartbeatItem {
            event_id: l.event_id,
            lease_token: l.lease_token.clone(),
            extend_ms: l.extend_by_seconds.get() * 1_000,
        })
        .collect();
    let outcomes = state.store.inbox().heartbeat(&Heartbeat { inbox: caller.inbox(), items }).await?;
    Ok(HeartbeatResponse {
        leases: outcomes
            .into_iter()
            .map(|o| match o {
                Ok(r) => HeartbeatOutcome {
                    event_id: r.event_id,
                    visibility_lease_until_utc: Some(format_utc(r.lease_until.get())),
                    error: None,
                },
                Err(refusal) => HeartbeatOutcome {
                    event_id: refusal.event_id,
                    visibility_lease_until_utc: None,
                    error: Some(item_error(&refusal)),
                },
            })
            .collect(),
    })
}

/// Publishes one event to every named agent of the caller's tenant (all inbox rows commit
/// together, or none does) through this node's batcher, records the commit latency, and wakes
/// this node's waiters after the commit. Every delivery `deduplicated`: the existing events.
pub async fn publish(
    state: &AppState,
    caller: &Caller,
    request: PublishRequest,
) -> Result<PublishResponse, ApiError> {
    caller.require(Scope::EventsPublish)?;
    let mut publish = convert::publish("", &caller.tenant_id, request)?;
    let policy = state.tenant_policies.get(&state.store, &caller.tenant_id).await?;
    publish.fairness_key = fairness_key(&policy, publish.fairness_key.take(), || subject_key(caller));
    let bytes_each = quotas::inline_bytes(&publish.body);
    let change = quotas::Change::deliveries(publish.recipients.len(), bytes_each);
    let reservation =
        state.quotas.admit(&state.store, &state.metrics, &policy, &caller.tenant_id, change).await?;
    let started = Instant::now();
    let receipt = match state.publisher.publish(publish).await {
        Ok(receipt) => receipt,
        Err(err) => {
            reservation.cancel();
            return Err(err.into());
        }
    };
    reservation.settle(quotas::Change::committed(&receipt, bytes_each));
    state.metrics.publish_commit_seconds().observe([], started.elapsed());
    record_published(state, &caller.tenant_id, &receipt);
    Ok(PublishResponse { deliveries: receipt.deliveries.iter().map(convert::delivery).collect() })
}
