//! The SDK's errors, named in the agent's terms, and which of them are worth retrying.

use std::path::PathBuf;

use inbox_api::{Problem, ProblemCode};

use crate::schedule;

/// Everything that can go wrong talking to the service or keeping local state. Messages never
/// contain a token: request errors are reduced to their kind and URL path.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The service could not be reached, or the connection broke before an answer.
    #[error("cannot reach the service ({0}); it is retried with backoff")]
    Unreachable(String),
    /// The service answered with a problem document.
    #[error("the service refused the request: {} {} ({})", .problem.status, .problem.code, .problem.detail)]
    Refused { problem: Box<Problem> },
    /// The service answered with something that is not the expected JSON.
    #[error("unexpected answer from the service: {0}")]
    Protocol(String),
    /// No usable credentials: not logged in, or the refresh token was spent or revoked.
    #[error("{0}")]
    Credentials(String),
    /// The OS secret store or the credential file failed.
    #[error("secret store: {0}")]
    SecretStore(String),
    /// The local state file (cursor and processed events) failed.
    #[error("local state {path}: {source}")]
    LocalState { path: PathBuf, source: sqlx::Error },
    /// A configuration or argument that cannot work.
    #[error("{0}")]
    Config(String),
    /// The resync callback failed permanently after a cursor reset; the agent stops rather
    /// than skip data.
    #[error("the resync callback failed: {0}")]
    Resync(String),
    /// The resync callback asked to be called again later.
    #[error("the resync callback asked to retry: {0}")]
    ResyncDeferred(String),
    /// The tenant allows one active session per agent (seed 001's single-active-session policy)
    /// and a newer session of this agent, another process or device with the same identity,
    /// took over. The agent stopped claiming; handlers already running were let finish (and
    /// acknowledged) within the shutdown grace period, the rest released.
    #[error(
        "session {session_id} was superseded: another process or device started as this agent, and the \
         tenant allows one active session per agent; leave this one stopped, or start it again to take the \
         work back"
    )]
    SessionSuperseded { session_id: String },
}

impl ClientError {
    /// The problem's stable code, when the service refused.
    pub fn code(&self) -> Option<&ProblemCode> {
        match self {
            ClientError::Refused { problem } => Some(&problem.code),
            _ => None,
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Refused { problem } => Some(problem.status),
            _ => None,
        }
    }

    /// Whether repeating the same request later may succeed: network failures, server errors,
    /// rate limits and overload. Refusals about the request itself are final.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Unreachable(_) => true,
            ClientError::Refused { problem } => {
                problem.status >= 500 || problem.status == 429 || problem.status == 408
            }
            ClientError::Protocol(_) | ClientError::ResyncDeferred(_) => true,
            _ => false,
        }
    }

    /// How long the service asked to be left alone (`Retry-After` on a 503 or 429), at most
    /// five minutes; a retry never comes sooner than this.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        let ClientError::Refused { problem } = self else { return None };
        let value = problem.extensions.get("retry_after")?;
        let seconds = match value {
            serde_json::Value::String(text) => schedule::parse_retry_after(text, inbox_api::time::now_ms())?,
            serde_json::Value::Number(n) => n.as_u64()?,
            _ => return None,
        };
        Some(std::time::Duration::from_secs(seconds).min(schedule::RETRY_AFTER_HONOURED_MAX))
    }

    /// `delay`, or longer if the service asked for a longer pause.
    pub(crate) fn honoured(&self, delay: std::time::Duration) -> std::time::Duration {
        schedule::honour_retry_after(delay, self.retry_after())
    }

    /// The lease this request used no longer holds the event (expired, released, taken).
    pub fn is_lease_lost(&self) -> bool {
        matches!(
            self.code(),
            Some(
                ProblemCode::LeaseMismatch
                    | ProblemCode::LeaseExpired
                    | ProblemCode::EventTerminal
                    | ProblemCode::AlreadyAcked
            )
        )
    }

    pub(crate) fn from_request(err: &reqwest::Error) -> ClientError {
        // reqwest's Display includes the URL, which carries no secret (tokens travel in
        // headers); still, keep only the path, not any query string.
        let kind = if err.is_timeout() {
            "timed out"
        } else if err.is_connect() {
            "connection failed"
        } else if err.is_body() || err.is_decode() {
            "the connection broke during the answer"
        } else {
            "request failed"
        };
        let path = err.url().map(|u| u.path().to_owned()).unwrap_or_default();
        ClientError::Unreachable(format!("{kind}: {path}"))
    }
}
