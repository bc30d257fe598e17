//! Waiting for work without running anything (`agent-inbox wait`, the MCP server's `wait`):
//! long polls for a claimable event anywhere in the inbox, through network failures and cursor
//! resets.

use std::time::Duration;

use inbox_api::{PollRequest, ProblemCode};
use serde_json::Value;
use tokio::time::Instant;

use crate::api::Api;
use crate::error::ClientError;
use crate::schedule::Backoff;
use crate::transport::jitter;

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
        let request = PollRequest {
            after_seq,
            limit: Some(100),
            wait_seconds: Some(wait_seconds),
            include_claimable_only: true,
            ..PollRequest::default()
        };
        match tokio::time::timeout_at(deadline, api.poll(&request)).await {
            Err(_) => return Ok(None),
            Ok(Ok(page)) => {
                attempt = 0;
                if !page.events.is_empty() {
                    return Ok(Some(page.events.len()));
                }
                if page.more_available {
                    after_seq = page.next_cursor;
                    continue;
                }
            }
            Ok(Err(err)) if err.code() == Some(&ProblemCode::CursorResetRequired) => {
                let oldest = match &err {
                    ClientError::Refused { problem } => {
                        problem.extensions.get("oldest_available_seq").and_then(Value::as_u64).unwrap_or(1)
                    }
                    _ => 1,
                };
                after_seq = oldest.saturating_sub(1);
                continue;
            }
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
