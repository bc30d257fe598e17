//! The conventions every call to the service shares: how long a request may take, and how an
//! answer is read (JSON on success, an RFC 9457 problem document, or one made up from the
//! status, on failure). Below both `api` and `credentials`, which each make requests.

use std::time::Duration;

use inbox_api::Problem;
use serde::de::DeserializeOwned;

use crate::error::ClientError;

/// How long an ordinary request may take before it counts as lost.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest problem body read from an error answer.
const PROBLEM_BYTES_MAX: usize = 16 * 1024;

pub(crate) async fn decode<T: DeserializeOwned>(response: reqwest::Response) -> Result<T, ClientError> {
    if !response.status().is_success() {
        return Err(problem(response).await);
    }
    let bytes = response.bytes().await.map_err(|err| ClientError::from_request(&err))?;
    // An empty answer (204) reads as JSON null: only a type that expects nothing accepts it.
    let bytes: &[u8] = if bytes.is_empty() { b"null" } else { &bytes };
    serde_json::from_slice(bytes).map_err(|err| ClientError::Protocol(format!("{err}")))
}

/// The problem document of an error answer, or one made up from the status when the body is
/// not one (a proxy's HTML page, an empty body).
pub(crate) async fn problem(response: reqwest::Response) -> ClientError {
    let status = response.status();
    let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let bytes = response.bytes().await.unwrap_or_default();
    let bytes = &bytes[..bytes.len().min(PROBLEM_BYTES_MAX)];
    let mut problem = serde_json::from_slice::<Problem>(bytes).unwrap_or_else(|_| {
        Problem::new(
            status.as_u16(),
            format!("http_{}", status.as_u16()),
            status.canonical_reason().unwrap_or("error"),
            format!("the service (or a proxy in front of it) answered {status} without a problem document"),
        )
    });
    if let Some(retry_after) = retry_after {
        problem.extensions.entry("retry_after".to_owned()).or_insert(retry_after.into());
    }
    ClientError::Refused { problem: Box::new(problem) }
}
