//! Repeats a call the service turned away for now: 503 (overloaded, draining) and 429 (rate
//! limited) always, since the service did nothing; a lost connection only for calls that are
//! safe to repeat. Waits honour `Retry-After`, within a budget that keeps a tool call short.

use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use inbox_client::ClientError;
use inbox_client::schedule::Backoff;

/// Longest time one tool call spends waiting to retry.
const BUDGET: Duration = Duration::from_secs(20);
const BACKOFF: Backoff = Backoff { base: Duration::from_millis(500), max: Duration::from_secs(8) };

/// Whether a request may be sent again after its answer was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// Repeating it changes nothing (poll, head, acknowledge, release, heartbeat).
    Safe,
    /// A lost answer may hide an effect (claim, publish without a key): only retried when the
    /// service said it did nothing.
    OnlyIfRefused,
}

pub async fn retrying<T, F, Fut>(repeat: Repeat, mut call: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let deadline = Instant::now() + BUDGET;
    let mut attempt = 0;
    loop {
        let err = match call().await {
            Ok(value) => return Ok(value),
            Err(err) => err,
        };
        let retryable = matches!(err.status(), Some(429 | 503))
            || (repeat == Repeat::Safe && matches!(err, ClientError::Unreachable(_)));
        if !retryable {
            return Err(err);
        }
        attempt += 1;
        let delay = BACKOFF.delay(attempt, jitter()).max(retry_after(&err).unwrap_or_default());
        if Instant::now() + delay > deadline {
            return Err(err);
        }
        tracing::info!(error = %err, delay_ms = delay.as_millis() as u64, "retrying");
        tokio::time::sleep(delay).await;
    }
}

/// The `Retry-After` seconds the service sent with a refusal (the SDK keeps the header in the
/// problem's `retry_after`).
pub fn retry_after(err: &ClientError) -> Option<Duration> {
    let ClientError::Refused { problem } = err else { return None };
    let value = problem.extensions.get("retry_after")?;
    let seconds = match value {
        serde_json::Value::String(text) => text.trim().parse::<u64>().ok()?,
        other => other.as_u64()?,
    };
    Some(Duration::from_secs(seconds.min(3600)))
}

/// Spreads retries of several clients apart; needs no quality, only variety.
fn jitter() -> f64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(500_000_000);
    f64::from(nanos) / 1e9
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use inbox_api::Problem;

    use super::*;

    fn refused(status: u16, retry_after: Option<&str>) -> ClientError {
        let mut problem = Problem::new(status, "busy", "Busy", "try later");
        if let Some(value) = retry_after {
            problem = problem.with("retry_after", value);
        }
        ClientError::Refused { problem: Box::new(problem) }
    }

    #[test]
    fn retry_after_is_read_from_the_problem() {
        assert_eq!(retry_after(&refused(503, Some("2"))), Some(Duration::from_secs(2)));
        assert_eq!(retry_after(&refused(503, Some("Wed, 21 Oct 2015 07:28:00 GMT"))), None);
        assert_eq!(retry_after(&refused(503, None)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn overload_is_retried_and_other_refusals_are_not() {
        let calls = AtomicU32::new(0);
        let result = retrying(Repeat::OnlyIfRefused, || async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 => Err(refused(503, Some("1"))),
                1 => Err(refused(429, None)),
                _ => Ok(7),
            }
        })
        .await;
        assert_eq!(result.unwrap(), 7);
        assert_eq!(calls.load(Ordering::SeqCst), 3);

        let calls = AtomicU32::new(0);
        let result: Result<(), _> = retrying(Repeat::OnlyIfRefused, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(ClientError::Unreachable("connection failed".into()))
        })
        .await;
        assert!(result.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1, "a claim whose answer was lost is not repeated");

        let result: Result<(), _> = retrying(Repeat::Safe, || async { Err(refused(409, None)) }).await;
        assert_eq!(result.unwrap_err().code().map(inbox_api::ProblemCode::as_str), Some("busy"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_beyond_the_budget_gives_up_at_once() {
        let calls = AtomicU32::new(0);
        let result: Result<(), _> = retrying(Repeat::Safe, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(refused(503, Some("600")))
        })
        .await;
        assert!(result.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
