//! One claimed event's life inside the runner: what the runner's tasks share, deduplication
//! against the local record, the handler run under lease heartbeats, and the acknowledgement or
//! release that follows, repeated through network failures (both are idempotent for the
//! same lease token).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inbox_api::{
    AckEntry, AcknowledgeRequest, Acks, Claim, FollowUps, HeartbeatEntry, HeartbeatRequest, Leases,
    ReleaseRequest,
};
use inbox_core::limits::{LeaseSeconds, REASON_BYTES_MAX, Reason, ReleaseReason, RetryAfterSeconds};
use inbox_core::{AckResult, EventId, LeaseToken, QuarantineClass, SessionId};
use tokio::time::Instant;

use crate::api::Api;
use crate::contract::{AgentConfig, Event, Handler, HandlerError, Outcome, Progress};
use crate::error::ClientError;
use crate::jitter::jitter;
use crate::local_state::{LocalState, Processed};
use crate::schedule::{heartbeat_delay, heartbeat_retry_delay};

/// What the runner and its tasks share.
pub(crate) struct Shared {
    pub(crate) api: Api,
    pub(crate) state: LocalState,
    pub(crate) config: AgentConfig,
    pub(crate) inbox: String,
    pub(crate) session_id: Option<SessionId>,
    pub(crate) lease: Duration,
    /// Events being worked on, with their lease tokens (for a release on shutdown).
    pub(crate) held: Mutex<HashMap<EventId, LeaseToken>>,
}

impl Shared {
    /// The error of a session a newer one superseded.
    pub(crate) fn superseded(&self) -> ClientError {
        ClientError::SessionSuperseded {
            session_id: self.session_id.as_ref().map(ToString::to_string).unwrap_or_default(),
        }
    }

    pub(crate) fn observe(&self, progress: Progress<'_>) {
        if let Some(observer) = &self.config.observer {
            observer.progress(&progress);
        }
    }

    pub(crate) fn held_ids(&self) -> HashSet<EventId> {
        self.held.lock().expect("held lock").keys().copied().collect()
    }
}

/// Removes an event from the held set when its task ends, however it ends.
pub(crate) struct HeldGuard {
    pub(crate) shared: Arc<Shared>,
    pub(crate) event_id: EventId,
}

impl Drop for HeldGuard {
    fn drop(&mut self) {
        if let Ok(mut held) = self.shared.held.lock() {
            held.remove(&self.event_id);
        }
    }
}

/// One event: deduplicate, or run the handler under heartbeats; then acknowledge or release.
///
/// Only a completed event is deduplicated. A failed one that comes back runs again: either an
/// operator requeued the dead letter, which is asking for exactly that, or its failure was
/// never acknowledged, and running a failing handler twice is what at-least-once allows.
pub(crate) async fn work<H: Handler>(shared: &Shared, handler: &H, claim: &Claim) -> Outcome {
    match shared.state.processed(&shared.inbox, &claim.event_id.to_string()).await {
        Ok(Some(result @ Processed::Completed)) => {
            return match acknowledge(shared, claim, Verdict::Processed(result)).await {
                Ok(()) => Outcome::Deduplicated { result },
                Err(err) => Outcome::Unconfirmed { error: err.to_string() },
            };
        }
        Ok(Some(Processed::Failed)) => {
            tracing::debug!(event_id = %claim.event_id, "failed here before; running it again");
        }
        Ok(None) => {}
        Err(err) => {
            // Without the record we cannot tell whether this ran before; give it back.
            tracing::error!(error = %err, "local state unreadable; releasing the event");
            return match release(shared, claim, Duration::from_secs(5), "local_state_unavailable").await {
                Ok(()) => Outcome::Released { after: Duration::from_secs(5), reason: err.to_string() },
                Err(err) => Outcome::Unconfirmed { error: err.to_string() },
            };
        }
    }
    let event =
        Event { envelope: claim.event.clone(), lease_until_utc: claim.visibility_lease_until_utc.clone() };
    let result = with_heartbeats(shared, claim, handler.handle(event)).await;
    let (processed, reason, follow_ups, a2a) = match result {
        Ok(done) => (Processed::Completed, String::new(), done.follow_ups, done.a2a),
        Err(HandlerError::Permanent { reason }) => (Processed::Failed, reason, Vec::new(), None),
        Err(HandlerError::Retry { after, reason }) => {
            return match release(shared, claim, after, &reason).await {
                Ok(()) => Outcome::Released { after, reason },
                Err(err) => Outcome::Unconfirmed { error: err.to_string() },
            };
        }
        // Not recorded locally: an operator who releases it wants it run again.
        Err(HandlerError::Quarantine { reason, class }) => {
            let reason = quarantine_reason(&reason);
            let verdict = Verdict::Quarantined { reason: reason.clone(), class };
            return match acknowledge(shared, claim, verdict).await {
                Ok(()) => Outcome::Quarantined { reason, class },
                Err(err) => Outcome::Unconfirmed { error: err.to_string() },
            };
        }
    };
    // A hand-off (or an A2A report) is recorded only once it committed: until then nothing was
    // handed on, and a redelivered event must run again to make its follow-ups or its result (a
    // plain ack of it would lose them).
    if !follow_ups.is_empty() || a2a.is_some() {
        let verdict = Verdict::HandOff { follow_ups, a2a: a2a.map(Box::new) };
        return match acknowledge(shared, claim, verdict).await {
            Ok(()) => {
                record(shared, claim, processed).await;
                Outcome::Acked
            }
            Err(err) => Outcome::Unconfirmed { error: err.to_string() },
        };
    }
    record(shared, claim, processed).await;
    let verdict = match processed {
        Processed::Completed => Verdict::Processed(processed),
        Processed::Failed => Verdict::Failed { reason: fit_reason(&reason) },
    };
    match acknowledge(shared, claim, verdict).await {
        Ok(()) if processed == Processed::Completed => Outcome::Acked,
        Ok(()) => Outcome::Failed { reason },
        Err(err) => Outcome::Unconfirmed { error: err.to_string() },
    }
}

/// Runs `work` while extending the lease at half its length. A lease that is lost cannot be
/// won back; the handler is left to finish, and its result is recorded for deduplication.
pub(crate) async fn with_heartbeats<T>(shared: &Shared, claim: &Claim, work: impl Future<Output = T>) -> T {
    let mut work = pin!(work);
    let lease = shared.lease;
    let mut next = Instant::now() + heartbeat_delay(lease);
    let mut alive = true;
    loop {
        tokio::select! {
            done = &mut work => return done,
            _ = tokio::time::sleep_until(next), if alive => {
                let request = HeartbeatRequest {
                    tenant_id: None,
                    recipient_id: None,
                    session_id: shared.session_id.clone(),
                    leases: Leases::new(vec![HeartbeatEntry {
                        event_id: claim.event_id,
                        lease_token: claim.lease_token.clone(),
                        extend_by_seconds: LeaseSeconds::saturating(lease.as_secs()),
                    }])
                    .expect("one lease is a heartbeat"),
                };
                match shared.api.heartbeat(&request).await {
                    Ok(answer) => match answer.leases.first().and_then(|l| l.error.as_ref()) {
                        None => next = Instant::now() + heartbeat_delay(lease),
                        Some(error) => {
                            tracing::warn!(event_id = %claim.event_id, code = %error.code, "lease lost while the handler runs");
                            shared.observe(Progress::LeaseLost { event_id: &claim.event_id });
                            alive = false;
                        }
                    },
                    Err(err) if err.is_transient() => next = Instant::now() + heartbeat_retry_delay(lease),
                    Err(err) => {
                        tracing::warn!(event_id = %claim.event_id, error = %err, "heartbeat refused");
                        alive = false;
                    }
                }
            }
        }
    }
}

async fn record(shared: &Shared, claim: &Claim, processed: Processed) {
    if let Err(err) = shared
        .state
        .record_processed(&shared.inbox, &claim.event_id.to_string(), claim.event.inbox_seq, processed)
        .await
    {
        tracing::warn!(event_id = %claim.event_id, error = %err, "could not record the event as processed");
    }
}

/// What an acknowledgement says about the event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    /// As the local record has it (a redelivery of an event processed before).
    Processed(Processed),
    /// Dead-lettered, with the handler's reason for the operator (none when empty).
    Failed {
        reason: String,
    },
    Quarantined {
        reason: String,
        class: QuarantineClass,
    },
    /// Completed, handing these publishes on (or reporting this A2A outcome) in the
    /// acknowledgement's transaction.
    HandOff {
        follow_ups: Vec<inbox_api::PublishRequest>,
        a2a: Option<Box<inbox_api::a2a::A2aReport>>,
    },
}

/// Acknowledges one event, repeating on network failure (the same token twice is success).
pub(crate) async fn acknowledge(shared: &Shared, claim: &Claim, verdict: Verdict) -> Result<(), ClientError> {
    let mut follow_ups = Vec::new();
    let mut a2a = None;
    let (result, reason, class) = match verdict {
        Verdict::Processed(processed) => (processed.ack_result(), None, None),
        Verdict::HandOff { follow_ups: publishes, a2a: report } => {
            follow_ups = publishes;
            a2a = report.map(|report| *report);
            (AckResult::Completed, None, None)
        }
        Verdict::Failed { reason } => (AckResult::Failed, Some(reason).filter(|r| !r.is_empty()), None),
        Verdict::Quarantined { reason, class } => (AckResult::Quarantined, Some(reason), Some(class)),
    };
    let request = AcknowledgeRequest {
        tenant_id: None,
        recipient_id: None,
        session_id: shared.session_id.clone(),
        acks: Acks::new(vec![AckEntry {
            event_id: claim.event_id,
            lease_token: claim.lease_token.clone(),
            result: Some(result),
            // Fitted to what the service keeps, so always one.
            reason: reason.and_then(|r| Reason::new(r).ok()),
            class,
            follow_ups: FollowUps::new(follow_ups)
                .map_err(|e| refused_as_invalid("acks[0].follow_ups", e))?,
            a2a,
        }])
        .expect("one acknowledgement is a batch"),
    };
    let answer = retrying(shared, || shared.api.acknowledge(&request)).await?;
    match answer.results.first() {
        Some(outcome) if outcome.error.is_none() => Ok(()),
        Some(outcome) => {
            let error = outcome.error.clone().expect("checked above");
            Err(ClientError::Refused {
                problem: Box::new(inbox_api::Problem::new(
                    409,
                    &error.code,
                    "acknowledge refused",
                    error.detail,
                )),
            })
        }
        None => Err(ClientError::Protocol("the acknowledgement answer was empty".into())),
    }
}

pub(crate) async fn release(
    shared: &Shared,
    claim: &Claim,
    after: Duration,
    reason: &str,
) -> Result<(), ClientError> {
    let request = ReleaseRequest {
        tenant_id: None,
        recipient_id: None,
        event_id: claim.event_id,
        lease_token: claim.lease_token.clone(),
        reason: Some(ReleaseReason::new(fit_reason(reason)).expect("a fitted reason is one")),
        retry_after_seconds: RetryAfterSeconds::saturating(crate::schedule::retry_after_seconds(after)),
    };
    retrying(shared, || shared.api.release(&request)).await.map(drop)
}

/// The refusal the service would answer for a request the SDK cannot even write (a hand-off
/// of more follow-ups than it takes).
fn refused_as_invalid(field: &str, problem: impl std::fmt::Display) -> ClientError {
    let detail = format!("{field} {problem}");
    let mut problem = inbox_api::Problem::new(400, "invalid_field", "Bad Request", detail);
    problem.extensions.insert("field".to_owned(), field.into());
    ClientError::Refused { problem: Box::new(problem) }
}

/// A handler's reason as the service takes it: control characters as spaces, trimmed, at
/// most [`REASON_BYTES_MAX`] bytes cut at a character boundary.
pub(crate) fn fit_reason(reason: &str) -> String {
    let cleaned: String = reason.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let cleaned = cleaned.trim();
    let mut end = cleaned.len().min(REASON_BYTES_MAX);
    while !cleaned.is_char_boundary(end) {
        end -= 1;
    }
    cleaned[..end].trim_end().to_owned()
}

/// A quarantine needs a reason: a handler that gave none gets one.
pub(crate) fn quarantine_reason(reason: &str) -> String {
    match fit_reason(reason) {
        fitted if fitted.is_empty() => "the handler quarantined the event".to_owned(),
        fitted => fitted,
    }
}

/// Repeats a request while it fails transiently, with backoff, up to the attempt limit.
pub(crate) async fn retrying<T, F, Fut>(shared: &Shared, mut request: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let mut attempt = 0;
    loop {
        match request().await {
            Err(err) if err.is_transient() && attempt + 1 < shared.config.ack_attempts_max => {
                attempt += 1;
                tokio::time::sleep(err.honoured(shared.config.ack_retry.delay(attempt, jitter()))).await;
            }
            other => return other,
        }
    }
}
