//! The one error type of the API. Every failure leaves as RFC 9457 `application/problem+json`
//! with a stable `code` and a sentence a person can act on. Server-side faults are logged once,
//! here, with their details; the client sees a short statement and the request id.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use inbox_api::{ItemError, PROBLEM_CONTENT_TYPE, Problem, ProblemCode};
use inbox_core::RefusalReason;
use inbox_store::{Field, ItemRefusal, Refusal, StoreError};
use serde_json::{Map, Value};

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: ProblemCode,
    pub detail: String,
    pub extensions: Map<String, Value>,
    /// Seconds, for `Retry-After` on 429 and 503.
    pub retry_after_seconds: Option<u64>,
    /// What went wrong inside, for the log only.
    pub internal: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: ProblemCode, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
            extensions: Map::new(),
            retry_after_seconds: None,
            internal: None,
        }
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extensions.insert(key.to_owned(), value.into());
        self
    }

    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after_seconds = Some(seconds.max(1));
        self
    }

    pub fn bad_request(code: ProblemCode, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, detail)
    }

    pub fn invalid_field(field: &str, problem: impl std::fmt::Display) -> Self {
        Self::bad_request(ProblemCode::InvalidField, format!("{field} {problem}")).with("field", field)
    }

    pub fn unauthorized(code: ProblemCode, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, code, detail)
    }

    pub fn forbidden(code: ProblemCode, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, code, detail)
    }

    pub fn internal(what: impl Into<String>) -> Self {
        let mut err = Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ProblemCode::InternalError,
            "the server failed to handle this request; it has been logged, retry later",
        );
        err.internal = Some(what.into());
        err
    }
}

/// A short human title per status.
fn title(status: StatusCode) -> &'static str {
    status.canonical_reason().unwrap_or("Error")
}

impl ApiError {
    /// The problem document, for answers that are not HTTP responses (WebSocket messages).
    /// Server-side faults are logged here, once. An unreachable database is not a fault of the
    /// request: the database check logs one line when it goes and one when it is back
    /// (`background.rs`) and `agent_inbox_database_unavailable_total` counts the refusals, so
    /// its refusals and failed readiness probes are logged at debug level, or an outage would
    /// write a line per request.
    pub fn into_problem(self) -> Problem {
        if let Some(internal) = &self.internal {
            if matches!(self.code, ProblemCode::DatabaseUnavailable | ProblemCode::NotReady) {
                tracing::debug!(code = self.code.as_str(), status = self.status.as_u16(), error = %internal, "request refused");
            } else {
                tracing::error!(code = self.code.as_str(), status = self.status.as_u16(), error = %internal, "request failed");
            }
        }
        let mut problem = Problem::new(self.status.as_u16(), self.code, title(self.status), self.detail);
        problem.extensions = self.extensions;
        problem
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, retry_after_seconds, code) = (self.status, self.retry_after_seconds, self.code.clone());
        let problem = self.into_problem();
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_CONTENT_TYPE));
        if let Some(seconds) = retry_after_seconds {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response.extensions_mut().insert(code);
        response
    }
}

/// The status and stable code of a refused event operation.
pub fn refusal_code(refusal: &Refusal) -> (StatusCode, ProblemCode) {
    match refusal {
        Refusal::NotFound => (StatusCode::NOT_FOUND, ProblemCode::EventNotFound),
        Refusal::Refused(reason) => (
            StatusCode::CONFLICT,
            match reason {
                RefusalReason::LeaseMismatch => ProblemCode::LeaseMismatch,
                RefusalReason::LeaseExpired => ProblemCode::LeaseExpired,
                RefusalReason::AlreadyAcked => ProblemCode::AlreadyAcked,
                RefusalReason::Terminal(_) => ProblemCode::EventTerminal,
                RefusalReason::NotParked(_) => ProblemCode::NotParked,
                RefusalReason::NotQuarantined(_) => ProblemCode::NotQuarantined,
                RefusalReason::LeaseStillLive => ProblemCode::LeaseStillLive,
                RefusalReason::NotClaimable(_)
                | RefusalReason::NotYetAvailable(_)
                | RefusalReason::RetryScheduled(_)
                | RefusalReason::PastExpiry
                | RefusalReason::AttemptsExhausted(_) => ProblemCode::NotClaimable,
            },
        ),
    }
}

fn refusal_detail(refusal: &Refusal) -> String {
    match refusal {
        Refusal::NotFound => "no event with this id is in your inbox; check the event_id".to_owned(),
        Refusal::Refused(RefusalReason::LeaseMismatch) => {
            "the lease_token does not hold this event; use the token its claim returned, or claim it again"
                .to_owned()
        }
        Refusal::Refused(RefusalReason::LeaseExpired) => {
            "your lease on this event ended (it expired or was released); claim the event again to work on it"
                .to_owned()
        }
        Refusal::Refused(reason) => reason.to_string(),
    }
}

/// The per-item error of a batch response.
pub fn item_error(refusal: &ItemRefusal) -> ItemError {
    ItemError { code: refusal_code(&refusal.reason).1.to_owned(), detail: refusal_detail(&refusal.reason) }
}

impl From<ItemRefusal> for ApiError {
    fn from(refusal: ItemRefusal) -> Self {
        let (status, code) = refusal_code(&refusal.reason);
        ApiError::new(status, code, refusal_detail(&refusal.reason))
            .with("event_id", refusal.event_id.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            invalid @ StoreError::Invalid { .. } => store_refusal_at(invalid, "", Places::InOrder),
            StoreError::PayloadTooLarge { bytes, limit } => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ProblemCode::PayloadTooLarge,
                format!("the payload is {bytes} bytes; the limit is {limit} bytes; store large data elsewhere and send a payload_ref"),
            )
            .with("limit_bytes", limit),
            StoreError::CursorResetRequired { after_seq, oldest_available_seq, head_seq } => ApiError::new(
                StatusCode::GONE,
                ProblemCode::CursorResetRequired,
                format!(
                    "cursor {after_seq} points before retained events; rebuild your state from GET /v1/inbox/resync, then poll after its resume_after_seq (the head, {head_seq} now)"
                ),
            )
            .with("oldest_available_seq", oldest_available_seq.get())
            .with("head_seq", head_seq.get())
            .with("resync_url", "/v1/inbox/resync"),
            StoreError::NotFound { what, id } => ApiError::new(
                StatusCode::NOT_FOUND,
                not_found_code(what),
                format!("no {what} {id:?} exists in your tenant; check the id, or create the {what} first"),
            )
            .with(&format!("{what}_id"), id),
            StoreError::AlreadyExists { what, id } => ApiError::new(
                StatusCode::CONFLICT,
                exists_code(what),
                format!("a {what} {id:?} already exists in your tenant; choose another id or use the existing one"),
            )
            .with(&format!("{what}_id"), id),
            StoreError::LimitReached { what, limit } => ApiError::new(
                StatusCode::CONFLICT,
                limit_code(what),
                format!("the limit of {limit} ({what}) is reached; delete or retire one first"),
            )
            .with("limit", limit),
            StoreError::Event(refusal) => refusal.into(),
            StoreError::Contention { attempts } => {
                let mut e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, ProblemCode::DatabaseBusy, "the database is busy; retry in a moment")
                    .retry_after(1);
                e.internal = Some(format!("contention through {attempts} attempts"));
                e
            }
            StoreError::Unavailable(source) => {
                let mut e = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ProblemCode::DatabaseUnavailable,
                    "the database is unreachable; retry in a moment",
                )
                .retry_after(2);
                e.internal = Some(source.to_string());
                e
            }
            other => ApiError::internal(other.to_string()),
        }
    }
}

/// The name on the wire of a field the store refused, or `None` for what no request carries
/// (the server's own values, the configuration): the one place the store's [`Field`]s meet
/// the wire's names.
pub fn wire_field(field: Field) -> Option<&'static str> {
    Some(match field {
        Field::Limit => "limit",
        Field::EventIds => "event_ids",
        Field::Acks => "acks",
        Field::Leases => "leases",
        Field::LeaseLength => "lease_seconds",
        Field::LeaseExtension => "extend_by_seconds",
        Field::RetryDelay => "retry_after_seconds",
        Field::Reason => "reason",
        Field::Recipients => "recipients",
        Field::ExpiresAt => "expires_at_utc",
        Field::MaxAttempts => "max_attempts",
        Field::PayloadRefKind => "payload_ref.kind",
        Field::PayloadRefId => "payload_ref.id",
        Field::Correlation => "correlation",
        Field::FollowUps => "follow_ups",
        Field::Tenant => "tenant_id",
        Field::DeduplicationKey => "deduplication_key",
        Field::DeviceId => "device_id",
        Field::CredentialTtl => "ttl_seconds",
        Field::CallbackSecret => "secret",
        Field::CallbackSecretId => "secret_id",
        Field::KeyMaterial => "public_key",
        Field::ParkedState => "state",
        Field::ActivityWindow => "minutes",
        Field::RoomName => "name",
        Field::RoomMembers => "members",
        Field::MessageBody => "body",
        Field::SessionTransport
        | Field::SignalIds
        | Field::ScavengeBatch
        | Field::Actor
        | Field::Connection
        | Field::SigningKeyOverlap
        | Field::DatabaseUrl => return None,
    })
}

/// The list whose `item`th entry holds `field`, when the store names an item: a heartbeat's
/// leases, an acknowledgement's entries, a hand-off's follow-ups.
fn list_of(field: Field) -> &'static str {
    match field {
        Field::LeaseExtension => "leases",
        Field::Reason => "acks",
        _ => "follow_ups",
    }
}

/// Where the items a store call took sit in the request it came from.
#[derive(Debug, Clone, Copy)]
pub enum Places<'a> {
    /// In the request's own list, in order (a heartbeat's leases, a hand-off's follow-ups).
    InOrder,
    /// Some of the request's list: the call's `i`th item is the request's `places[i]`th.
    Of(&'a [usize]),
    /// The request was one item, not a list (seed 000's single acknowledgement).
    Alone,
}

/// A store's refusal as the wire names it: its field under `at`, the path of what the call
/// carried (`acks[2].` for a hand-off's follow-ups, empty for a whole request), the item it
/// names where `places` says the request had it. A field no request carries is the server's
/// fault.
pub fn store_refusal_at(err: StoreError, at: &str, places: Places<'_>) -> ApiError {
    let StoreError::Invalid { field, item, problem } = err else { return err.into() };
    let Some(name) = wire_field(field) else {
        return ApiError::internal(format!(
            "the store refused {field:?}, which no request carries: {problem}"
        ));
    };
    let place = match (item, places) {
        (None, _) | (Some(_), Places::Alone) => None,
        (Some(i), Places::InOrder) => Some(i),
        (Some(i), Places::Of(places)) => Some(places.get(i).copied().unwrap_or(i)),
    };
    match place {
        None => ApiError::invalid_field(&format!("{at}{name}"), problem),
        Some(place) => ApiError::invalid_field(&format!("{at}{}[{place}].{name}", list_of(field)), problem),
    }
}

/// The stable code for a missing domain object; codes are static so clients can match on them.
fn not_found_code(what: &str) -> ProblemCode {
    match what {
        "room" => ProblemCode::RoomNotFound,
        "callback registration" => ProblemCode::CallbackRegistrationNotFound,
        "signing key" => ProblemCode::UnknownSigningKey,
        _ => ProblemCode::NotFound,
    }
}

fn exists_code(what: &str) -> ProblemCode {
    match what {
        "room" => ProblemCode::RoomExists,
        "key" => ProblemCode::KeyExists,
        _ => ProblemCode::AlreadyExists,
    }
}

fn limit_code(what: &str) -> ProblemCode {
    if what.starts_with("callback registration") {
        ProblemCode::CallbackLimitReached
    } else {
        ProblemCode::KeyLimitReached
    }
}
