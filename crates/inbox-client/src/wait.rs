//! Waiting for work without running anything (`agent-inbox wait`): long polls for a claimable
//! event after the persisted cursor, through network failures and cursor resets.

use std::time::Duration;

use inbox_api::{PollRequest, ProblemCode};
use serde_json::Value;
use tokio::time::Instant;

use crate::api::Api;
use crate::error::ClientError;
use crate::local_state::LocalState;
use crate::schedule::Backoff;
use crate::transport::jitter;

/// Blocks until a claimable event exists after the persisted cursor (or after 0 without a
/// state file), or `timeout` passes. Returns how many claimable events the answer showed.
/// Long polls when it can; repeats through network failures with backoff.
pub async fn wait_for_work(
    api: &Api,
    state: Option<&LocalState>,
    timeout: Duration,
    backoff: Backoff,
) -> Result<Option<usize>, ClientError> {
    let deadline = Instant::now() + timeout;
    // Claimable events never sit at or below the cursor (it only passes finished ones), so
    // starting there only saves reading; 0 is always correct.
    let mut after_seq = match (state, api.head().await) {
        (Some(state), Ok(head)) => state.cursor(&format!("{}/{}", head.tenant_id, head.recipient_id)).await?,
        (_, Err(err)) if !err.is_transient() => return Err(err),
        _ => 0,
    };
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
