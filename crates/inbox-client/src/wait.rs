//! Waiting for work without running anything (`agent-inbox wait`, the MCP server's `wait`, the
//! local wake daemon): long polls (or, for the daemon, plain polls) for a claimable event
//! anywhere in the inbox, through network failures and cursor resets.

use std::time::Duration;

use inbox_api::{PollRequest, ProblemCode};
use inbox_core::InboxSeq;
use serde_json::Value;
use tokio::time::Instant;

use crate::api::Api;
use crate::error::ClientError;
use crate::schedule::Backoff;
use crate::transport::jitter;

/// Claimable events counted per look, as `wait` reports them ("100+").
pub(crate) const CLAIMABLE_COUNTED_MAX: u32 = 100;

/// Blocks until a claimable event exists in the inbox, or `timeout` passes. Returns how many
/// claimable events the answer showed. Long polls when it can; repeats through network
/// failures with backoff.
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
    let deadline = Instant::now() + timeout;
    let mut after_seq = 0;
    let mut attempt = 0;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        // Whole seconds, rounded up: the last part of a second is one short long poll, never
        // a burst of immediate polls.
        let wait_seconds = (remaining.as_millis().div_ceil(1000) as u32).clamp(1, 25);
        match tokio::time::timeout_at(deadline, look(api, after_seq, Some(wait_seconds))).await {
            Err(_) => return Ok(None),
            Ok(Ok(Look::Found { count, .. })) => return Ok(Some(count)),
            Ok(Ok(Look::Next { after_seq: next })) => {
                attempt = 0;
                after_seq = next;
                continue;
            }
            Ok(Ok(Look::Nothing { .. })) => attempt = 0,
            Ok(Err(err)) if err.is_transient() => {
                attempt += 1;
                let delay = err.honoured(backoff.delay(attempt, jitter())).min(remaining);
                tokio::time::sleep(delay).await;
            }
            Ok(Err(err)) => return Err(err),
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
    }
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
        limit: Some(CLAIMABLE_COUNTED_MAX),
        wait_seconds,
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
