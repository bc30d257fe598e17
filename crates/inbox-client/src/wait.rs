//! Waiting for work without running anything (`agent-inbox wait`, the MCP server's `wait`, the
//! local wake daemon): long polls (or, for the daemon, plain polls) for a claimable event
//! anywhere in the inbox, through network failures and cursor resets; and for `wait`, a
//! service that stops answering told from an inbox with no work.

use std::time::Duration;

use inbox_api::{PollRequest, ProblemCode};
use inbox_core::InboxSeq;
use inbox_core::limits::{BatchLimit, WaitSeconds};
use serde_json::Value;
use tokio::time::Instant;

use crate::api::Api;
use crate::error::ClientError;
use crate::jitter::jitter;
use crate::schedule::Backoff;

/// Claimable events counted per look, as `wait` reports them ("100+").
pub(crate) const CLAIMABLE_COUNTED_MAX: u32 = 100;

/// Blocks until a claimable event exists in the inbox, or `timeout` passes. Returns how many
/// claimable events the answer showed. Long polls when it can; repeats through network
/// failures with backoff, however long they last (see [`wait_for_work_or_unreachable`] for a
/// wait that tells an unreachable service from an idle inbox).
///
/// It asks from the start of the inbox, not from a runner's cursor: an event an operator
/// requeued or released sits behind that cursor, and the service finds claimable events by
/// their state, so starting at 0 costs no scan of finished ones. A requeue wakes the long poll
/// (the service's nudge), and the poll finds the event.
pub async fn wait_for_work(
    api: &Api,
    timeout: Duration,
    backoff: Backoff,
) -> Result<Option<usize>, ClientError> {
    Ok(match wait(api, timeout, None, backoff).await? {
        WaitOutcome::Work(count) => Some(count),
        WaitOutcome::Timeout | WaitOutcome::Unreachable(_) => None,
    })
}

/// How a wait ended.
#[derive(Debug)]
pub enum WaitOutcome {
    /// Claimable events wait: how many the answer showed (at most 100 counted).
    Work(usize),
    /// The time passed, the service answering, with no claimable event.
    Timeout,
    /// The service did not answer, so whether work waits is unknown.
    Unreachable(ServiceUnreachable),
}

/// A service that did not answer a wait: for `unreachable_after` in a row, or when the wait's
/// time ran out.
#[derive(Debug)]
pub struct ServiceUnreachable {
    /// How long it had gone without answering when the wait gave up: since the first of the
    /// failures in a row, or the start of a look that got no answer in time.
    pub unanswered_for: Duration,
    /// The last failure.
    pub last_error: ClientError,
}

/// [`wait_for_work`], telling an unreachable service from an idle inbox: once no look has been
/// answered for `unreachable_after` in a row, or when `timeout` passes while the last look
/// failed, it ends with [`WaitOutcome::Unreachable`]. An outage shorter than
/// `unreachable_after` is ridden out, the service asked again every `backoff` (and no sooner
/// than a `Retry-After`, except for one last look at the bound).
///
/// Until the service has answered (at the start, and after a failure) it is asked with a plain
/// poll, answered at once, and only then long-polled; a plain poll still unanswered at the
/// deadline or the bound gets 2 s more. So a long poll held open by a service that is back is
/// never taken for an outage, and `timeout` is kept to within a moment. "No answer" is a
/// network failure, an answer that is not the service's JSON, a 5xx, or a look not answered
/// 10 s past its time (counted from its start); a 429 is an answer.
pub async fn wait_for_work_or_unreachable(
    api: &Api,
    timeout: Duration,
    unreachable_after: Duration,
    backoff: Backoff,
) -> Result<WaitOutcome, ClientError> {
    wait(api, timeout, Some(unreachable_after), backoff).await
}

/// How long past its time a look may take to answer before it counts as unanswered: the
/// service answers a plain poll at once and ends a long poll on time, and its database waits
/// are bounded in seconds.
const LOOK_ANSWER_GRACE: Duration = Duration::from_secs(10);

/// How long a plain poll in flight at the deadline or the bound may still take to answer.
const LIMIT_GRACE: Duration = Duration::from_secs(2);

async fn wait(
    api: &Api,
    timeout: Duration,
    unreachable_after: Option<Duration>,
    backoff: Backoff,
) -> Result<WaitOutcome, ClientError> {
    let started = Instant::now();
    let deadline = later(started, timeout);
    let mut after_seq = 0;
    let mut attempt = 0;
    // While looks go unanswered: since when (the first failure, or the start of a look that
    // got no answer in time), and the last failure.
    let mut failing: Option<(Instant, ClientError)> = None;
    let mut answered = false;
    let unreachable = |since: Instant, last_error: ClientError| {
        WaitOutcome::Unreachable(ServiceUnreachable { unanswered_for: since.elapsed(), last_error })
    };
    loop {
        let look_started = Instant::now();
        let remaining = deadline.saturating_duration_since(look_started);
        // Whole seconds, rounded up: the last part of a second is one short long poll, never
        // a burst of immediate polls.
        let long_poll_seconds = (remaining.as_millis().div_ceil(1000) as u32).clamp(1, 25);
        // Until the service has answered, and after a failure, a plain poll: answered at once,
        // so its start is when the service was last asked.
        let plain = unreachable_after.is_some() && !(answered && failing.is_none());
        let result = match unreachable_after {
            None => {
                match tokio::time::timeout_at(deadline, look(api, after_seq, Some(long_poll_seconds))).await {
                    Err(_) => return Ok(WaitOutcome::Timeout),
                    Ok(result) => result,
                }
            }
            Some(after) if !plain => {
                let overdue =
                    look_started + Duration::from_secs(u64::from(long_poll_seconds)) + LOOK_ANSWER_GRACE;
                let looking = look(api, after_seq, Some(long_poll_seconds));
                match tokio::time::timeout_at(deadline.min(overdue), looking).await {
                    Ok(result) => result,
                    Err(_) if Instant::now() >= deadline => return Ok(WaitOutcome::Timeout),
                    Err(_) => {
                        let late = no_answer_within(look_started);
                        if Instant::now() >= later(look_started, after) {
                            return Ok(unreachable(look_started, late));
                        }
                        failing = Some((look_started, late));
                        continue;
                    }
                }
            }
            Some(after) => {
                // Not answered yet, or not since a failure: a plain poll.
                let limit = match &failing {
                    Some((since, _)) => later(*since, after).min(deadline),
                    None => deadline,
                };
                let cut = (limit + LIMIT_GRACE).min(look_started + LOOK_ANSWER_GRACE);
                match tokio::time::timeout_at(cut, look(api, after_seq, None)).await {
                    Ok(result) => result,
                    Err(_) => {
                        let (since, last) =
                            failing.take().unwrap_or_else(|| (look_started, no_answer_within(look_started)));
                        if Instant::now() >= deadline || Instant::now() >= later(since, after) {
                            return Ok(unreachable(since, last));
                        }
                        failing = Some((since, last));
                        continue;
                    }
                }
            }
        };
        match result {
            Ok(Look::Found { count, .. }) => return Ok(WaitOutcome::Work(count)),
            Ok(Look::Next { after_seq: next }) => {
                (attempt, answered, failing) = (0, true, None);
                after_seq = next;
                continue;
            }
            Ok(Look::Nothing { .. }) => (attempt, answered, failing) = (0, true, None),
            Err(err) if err.is_transient() => {
                attempt += 1;
                let mut delay = err.honoured(backoff.delay(attempt, jitter())).min(remaining);
                if unanswered(&err) {
                    // A long poll held open breaks when the service goes: that is the first sign.
                    let first = if plain { look_started } else { Instant::now() };
                    let since = failing.take().map_or(first, |(since, _)| since);
                    if let Some(after) = unreachable_after {
                        let bound = later(since, after);
                        if Instant::now() >= bound {
                            return Ok(unreachable(since, err));
                        }
                        // One last look at the bound, so a service back by then is found.
                        delay = delay.min(bound.saturating_duration_since(Instant::now()));
                    }
                    failing = Some((since, err));
                } else {
                    // Rate limited: the service answered.
                    (answered, failing) = (true, None);
                }
                tokio::time::sleep(delay).await;
            }
            Err(err) => return Err(err),
        }
        if Instant::now() >= deadline {
            return Ok(match failing {
                Some((since, err)) if unreachable_after.is_some() => unreachable(since, err),
                _ => WaitOutcome::Timeout,
            });
        }
    }
}

fn no_answer_within(look_started: Instant) -> ClientError {
    ClientError::Unreachable(format!("no answer within {} s", look_started.elapsed().as_secs()))
}

/// Whether a failure means the service did not answer (rather than answered "not now").
fn unanswered(err: &ClientError) -> bool {
    match err {
        ClientError::Unreachable(_) | ClientError::Protocol(_) => true,
        ClientError::Refused { problem } => problem.status >= 500,
        _ => false,
    }
}

/// `at + after`, or far in the future when that does not fit.
fn later(at: Instant, after: Duration) -> Instant {
    at.checked_add(after).unwrap_or_else(|| at + Duration::from_secs(100 * 365 * 86_400))
}

/// How many claimable events the inbox holds now (at most [`CLAIMABLE_COUNTED_MAX`]), and its
/// head: polls without waiting, paging past finished events and through a cursor reset.
pub async fn claimable_now(api: &Api) -> Result<(usize, u64), ClientError> {
    let mut after_seq = 0;
    for _ in 0..LOOKS_MAX {
        match look(api, after_seq, None).await? {
            Look::Found { count, head_seq } => return Ok((count, head_seq)),
            Look::Nothing { head_seq } => return Ok((0, head_seq)),
            Look::Next { after_seq: next } => after_seq = next,
        }
    }
    Err(ClientError::Protocol(format!("no end to the inbox after {LOOKS_MAX} pages of claimable events")))
}

/// Pages one [`claimable_now`] reads at most: the service answers claimable events by their
/// state, so more than one page is rare and a thousand means something is wrong.
const LOOKS_MAX: usize = 1000;

/// What one poll for claimable events after `after_seq` found.
enum Look {
    Found {
        count: usize,
        head_seq: u64,
    },
    /// None on this page, but more to read from `after_seq` (or the inbox was reset past it).
    Next {
        after_seq: u64,
    },
    Nothing {
        head_seq: u64,
    },
}

async fn look(api: &Api, after_seq: u64, wait_seconds: Option<u32>) -> Result<Look, ClientError> {
    let request = PollRequest {
        after_seq: InboxSeq(after_seq),
        limit: Some(BatchLimit::saturating(CLAIMABLE_COUNTED_MAX)),
        wait_seconds: wait_seconds.map(WaitSeconds::saturating),
        include_claimable_only: true,
        ..PollRequest::default()
    };
    match api.poll(&request).await {
        Ok(page) if !page.events.is_empty() => {
            Ok(Look::Found { count: page.events.len(), head_seq: page.head_seq })
        }
        Ok(page) if page.more_available => Ok(Look::Next { after_seq: page.next_cursor }),
        Ok(page) => Ok(Look::Nothing { head_seq: page.head_seq }),
        Err(err) if err.code() == Some(&ProblemCode::CursorResetRequired) => {
            let oldest = match &err {
                ClientError::Refused { problem } => {
                    problem.extensions.get("oldest_available_seq").and_then(Value::as_u64).unwrap_or(1)
                }
                _ => 1,
            };
            Ok(Look::Next { after_seq: oldest.saturating_sub(1) })
        }
        Err(err) => Err(err),
    }
}
