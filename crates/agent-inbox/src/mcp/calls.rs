//! What each tool does against the inbox API. A tool's refusals (bad arguments, the service's
//! problems, a refused batch item) come back as `Err(CallToolResult)` tool errors; the MCP
//! wiring in `server` turns both arms into the answer.

use std::time::Duration;

use inbox_api::{
    AckEntry, AcknowledgeRequest, Acks, ClaimRequest, Correlation, FollowUps, HeartbeatEntry,
    HeartbeatRequest, Leases, PollRequest, PublishRequest, ReleaseRequest,
};
use inbox_client::schedule::Backoff;
use inbox_client::{Api, claimable_now, wait_for_work};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use inbox_core::InboxSeq;

use super::arguments::{
    AckArgs, ClaimArgs, ClaimWhat, FollowUpArgs, HeartbeatArgs, Invalid, PollArgs, PublishArgs, ReleaseArgs,
    WaitArgs, deduplication_key, event_id, event_type, fairness_key, lease_token, priority, recipients,
};
use super::outcome::{from_error, from_item, invalid_argument, success};
use super::retry::{Repeat, retrying};

pub type Answer = Result<CallToolResult, CallToolResult>;

impl From<Invalid> for CallToolResult {
    fn from(invalid: Invalid) -> CallToolResult {
        invalid_argument(&invalid.0)
    }
}

/// How often `inbox_wait` retries a long poll that failed on the network.
pub const WAIT_BACKOFF: Backoff = Backoff { base: Duration::from_millis(500), max: Duration::from_secs(5) };

pub async fn wait(api: &Api, args: WaitArgs) -> Answer {
    let timeout = Duration::from_secs(args.timeout_seconds()?);
    let found = wait_for_work(api, timeout, WAIT_BACKOFF).await.map_err(|err| from_error(&err))?;
    wait_answer(api, found).await
}

/// What `inbox_wait` answers once it knows whether work is waiting (`found`, with how many
/// claimable events): that, and the inbox head as of now.
pub async fn wait_answer(api: &Api, found: Option<usize>) -> Answer {
    let head = retrying(Repeat::Safe, || api.head()).await.map_err(|err| from_error(&err))?;
    let claimable = found.unwrap_or(0);
    Ok(success(&json!({
        "work_waiting": found.is_some(),
        "claimable": claimable,
        // One poll page counts at most 100 events: true means "100 or more".
        "claimable_count_capped": claimable >= 100,
        "head_seq": head.head_seq,
    })))
}

/// One look for a task of `inbox_wait` no server process watched (made by an earlier one):
/// the wait's answer when work can be claimed, or with no work once the task has `ended`;
/// `None` while it should keep waiting (or the service could not be asked this time).
pub async fn wait_now(api: &Api, ended: bool) -> Option<CallToolResult> {
    match claimable_now(api).await {
        Ok((claimable, head_seq)) if claimable > 0 || ended => Some(success(&json!({
            "work_waiting": claimable > 0,
            "claimable": claimable,
            "claimable_count_capped": claimable >= 100,
            "head_seq": head_seq,
        }))),
        Ok(_) => None,
        Err(err) if ended => Some(from_error(&err)),
        Err(err) => {
            tracing::warn!(error = %err, "cannot look for work for a waiting task; the next look tries again");
            None
        }
    }
}

pub async fn poll(api: &Api, args: PollArgs) -> Answer {
    let after_seq = InboxSeq::new(args.after_seq.unwrap_or(0))
        .map_err(|e| Invalid(format!("after_seq {}", e.problem)))?;
    let request = PollRequest { after_seq, limit: Some(args.limit()?), ..PollRequest::default() };
    let page = retrying(Repeat::Safe, || api.poll(&request)).await.map_err(|err| from_error(&err))?;
    Ok(success(&page))
}

pub async fn claim(api: &Api, args: ClaimArgs) -> Answer {
    let mut request = ClaimRequest { lease_seconds: args.lease_seconds()?, ..ClaimRequest::default() };
    match args.what()? {
        ClaimWhat::Next(limit) => request.limit = Some(limit),
        ClaimWhat::Named(ids) => request.event_ids = Some(ids),
    }
    let answer =
        retrying(Repeat::OnlyIfRefused, || api.claim(&request)).await.map_err(|err| from_error(&err))?;
    if let (true, Some(rejected)) = (answer.claims.is_empty(), answer.rejected.first()) {
        return Err(from_item(&rejected.event_id.to_string(), &rejected.error));
    }
    let mut body = serde_json::to_value(&answer).unwrap_or(Value::Null);
    if answer.claims.is_empty() {
        body["note"] = "nothing is claimable now; call inbox_wait to wait for work".into();
    }
    Ok(success(&body))
}

pub async fn ack(api: &Api, args: AckArgs) -> Answer {
    let checked = args.check()?;
    let request = AcknowledgeRequest {
        tenant_id: None,
        recipient_id: None,
        session_id: None,
        acks: Acks::new(vec![AckEntry {
            event_id: event_id(&args.event_id)?,
            lease_token: lease_token(&args.lease_token)?,
            result: Some(checked.result),
            reason: checked.reason,
            class: checked.class,
            follow_ups: FollowUps::new(
                args.follow_ups.iter().flatten().map(follow_up).collect::<Result<_, _>>()?,
            )
            .map_err(|e| Invalid(format!("follow_ups {e}")))?,
            a2a: None,
        }])
        .expect("one acknowledgement is a batch"),
    };
    let answer =
        retrying(Repeat::Safe, || api.acknowledge(&request)).await.map_err(|err| from_error(&err))?;
    match answer.results.into_iter().next() {
        Some(outcome) => match &outcome.error {
            Some(error) => Err(from_item(&outcome.event_id.to_string(), error)),
            None => Ok(success(&outcome)),
        },
        None => Err(invalid_answer(&args.event_id)),
    }
}

pub async fn release(api: &Api, args: ReleaseArgs) -> Answer {
    let retry_after_seconds = args.retry_after_seconds()?;
    let request = ReleaseRequest {
        tenant_id: None,
        recipient_id: None,
        event_id: event_id(&args.event_id)?,
        lease_token: lease_token(&args.lease_token)?,
        reason: args.reason()?,
        retry_after_seconds,
    };
    let answer = retrying(Repeat::Safe, || api.release(&request)).await.map_err(|err| from_error(&err))?;
    Ok(success(&answer))
}

pub async fn heartbeat(api: &Api, args: HeartbeatArgs) -> Answer {
    let extend_by_seconds = args.extend_by_seconds()?;
    let request = HeartbeatRequest {
        tenant_id: None,
        recipient_id: None,
        session_id: None,
        leases: Leases::new(vec![HeartbeatEntry {
            event_id: event_id(&args.event_id)?,
            lease_token: lease_token(&args.lease_token)?,
            extend_by_seconds,
        }])
        .expect("one lease is a heartbeat"),
    };
    let answer = retrying(Repeat::Safe, || api.heartbeat(&request)).await.map_err(|err| from_error(&err))?;
    match answer.leases.into_iter().next() {
        Some(outcome) => match &outcome.error {
            Some(error) => Err(from_item(&outcome.event_id.to_string(), error)),
            None => Ok(success(&outcome)),
        },
        None => Err(invalid_answer(&args.event_id)),
    }
}

pub async fn publish(api: &Api, args: PublishArgs) -> Answer {
    args.check()?;
    // With a deduplication key a repeat returns the first event, so a lost answer may be retried.
    let repeat = if args.deduplication_key.is_some() { Repeat::Safe } else { Repeat::OnlyIfRefused };
    let max_attempts = args.max_attempts()?;
    let request = PublishRequest {
        tenant_id: None,
        recipients: recipients(&args.recipients)?,
        event_type: event_type(&args.event_type)?,
        priority: priority(args.priority.as_deref())?,
        available_at_utc: args.available_at_utc,
        expires_at_utc: args.expires_at_utc,
        deduplication_key: deduplication_key(args.deduplication_key.as_deref())?,
        fairness_key: fairness_key(args.fairness_key.as_deref())?,
        correlation: Correlation::default(),
        payload: args.payload,
        payload_ref: None,
        max_attempts,
    };
    let answer = retrying(repeat, || api.publish(&request)).await.map_err(|err| from_error(&err))?;
    Ok(success(&answer))
}

fn follow_up(args: &FollowUpArgs) -> Result<PublishRequest, Invalid> {
    let invalid = |Invalid(sentence)| Invalid(format!("in follow_ups: {sentence}"));
    Ok(PublishRequest {
        tenant_id: None,
        recipients: recipients(&args.recipients).map_err(invalid)?,
        event_type: event_type(&args.event_type).map_err(invalid)?,
        priority: priority(args.priority.as_deref()).map_err(invalid)?,
        available_at_utc: None,
        expires_at_utc: None,
        deduplication_key: None,
        fairness_key: None,
        correlation: Correlation::default(),
        payload: args.payload.clone(),
        payload_ref: None,
        max_attempts: None,
    })
}

fn invalid_answer(event_id: &str) -> CallToolResult {
    from_error(&inbox_client::ClientError::Protocol(format!(
        "the service answered nothing about event {event_id}"
    )))
}
