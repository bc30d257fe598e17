//! Extractors: they authenticate and validate, so handlers only ever see a known caller and a
//! well-formed request. Each refusal is a precise problem: malformed JSON, an unknown field, a
//! wrong type (with the field's path), a body over the limit, a missing or bad token, a
//! spent stream ticket.

use std::net::IpAddr;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use futures_util::StreamExt;
use inbox_api::ProblemCode;
use inbox_core::{RecipientId, SessionId};
use inbox_store::StreamCredential;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::caller::{Caller, CallerKind};
use crate::error::ApiError;
use crate::node::AppState;
use crate::ops::streams::credentials::{COOKIE_PREFIX, TICKET_PREFIX};
use crate::proxies::ClientAddr;
use crate::tokens::AuthFailure;

/// A JSON body, parsed strictly.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let json =
            request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| {
                v.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
            });
        if !json {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ProblemCode::UnsupportedMediaType,
                "send the body as JSON with 'Content-Type: application/json'",
            ));
        }
        let bytes = read_body(request.into_body(), state.body_bytes_limit()).await?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// How much of a body over the limit is read and dropped before the 413 goes out, and for how
/// long at most: a client still sending it then reads the answer instead of a broken pipe.
/// Past either bound the connection is simply closed.
const OVER_LIMIT_DRAIN_BYTES_MAX: usize = 1 << 20;
const OVER_LIMIT_DRAIN_TIME_MAX: Duration = Duration::from_secs(2);

/// Query parameters, parsed strictly: a refused query string is a problem naming the
/// parameter ([`query_problem`]), before the handler runs.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned> FromRequestParts<AppState> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &AppState) -> Result<Self, ApiError> {
        let axum::extract::Query(value) =
            axum::extract::Query::<T>::try_from_uri(&parts.uri).map_err(|e| query_problem(&e))?;
        Ok(ApiQuery(value))
    }
}

/// A JSON body that may be left out: an empty (or all-whitespace) body is `T::default()`. Any
/// content type is taken, so a bare `POST` with no body works; the body is read with axum's
/// own limit and refusal, as a plain `Bytes` body is.
#[derive(Debug)]
pub struct JsonOrEmpty<T>(pub T);

impl<T: DeserializeOwned + Default> FromRequest<AppState> for JsonOrEmpty<T> {
    type Rejection = axum::response::Response;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        use axum::response::IntoResponse as _;
        let body = Bytes::from_request(request, state).await.map_err(|e| e.into_response())?;
        parse_json_or_empty(&body).map(JsonOrEmpty).map_err(|e| e.into_response())
    }
}

/// [`parse_json`], with an empty (or all-whitespace) body read as `T::default()`.
pub fn parse_json_or_empty<T: DeserializeOwned + Default>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) { Ok(T::default()) } else { parse_json(bytes) }
}

/// Reads a request body of at most `limit` bytes: over it, a 413 `payload_too_large`.
pub(crate) async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let mut chunks = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|_| {
            ApiError::bad_request(
                ProblemCode::MalformedJson,
                "the request body ended before it was complete; send it again",
            )
        })?;
        if bytes.len() + chunk.len() > limit {
            let mut drained = 0;
            let drain = async {
                while let Some(Ok(chunk)) = chunks.next().await {
                    drained += chunk.len();
                    if drained > OVER_LIMIT_DRAIN_BYTES_MAX {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(OVER_LIMIT_DRAIN_TIME_MAX, drain).await;
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ProblemCode::PayloadTooLarge,
                format!("the request body is over {limit} bytes; send a smaller payload or a payload_ref"),
            )
            .with("limit_bytes", limit));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(bytes))
}

/// Parses JSON with errors that name the offending field. A body must be a JSON object (serde
/// would otherwise take a struct from an array). Whole-number floats such as `5.0` are
/// accepted where an integer is expected, as JSON Schema's `integer` (the OpenAPI document)
/// says they are; a payload keeps its numbers exactly as sent.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(ApiError::bad_request(
            ProblemCode::InvalidField,
            "the request body must be a JSON object, not an array",
        )
        .with("field", "body"));
    }
    parse_strict(bytes).or_else(|err| {
        let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(bytes) else { return Err(err) };
        if !whole_numbers_as_integers(&mut value) {
            return Err(err);
        }
        T::deserialize(value).map_err(|_| err)
    })
}

/// Rewrites whole-number floats outside payloads (`payload`, a room message's `body`) as
/// integers; whether anything changed.
fn whole_numbers_as_integers(value: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15 => {
                *value = if f < 0.0 { Value::from(f as i64) } else { Value::from(f as u64) };
                true
            }
            _ => false,
        },
        Value::Array(items) => {
            items.iter_mut().fold(false, |changed, v| whole_numbers_as_integers(v) | changed)
        }
        Value::Object(members) => members
            .iter_mut()
            .filter(|(key, _)| !matches!(key.as_str(), "payload" | "body"))
            .fold(false, |changed, (_, v)| whole_numbers_as_integers(v) | changed),
        _ => false,
    }
}

fn parse_strict<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        let at = format!("line {} column {}", inner.line(), inner.column());
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::bad_request(
                ProblemCode::MalformedJson,
                format!("the request body is not valid JSON ({inner})"),
            );
        }
        let message = inner.to_string();
        let message = message.split(" at line ").next().unwrap_or(&message).to_owned();
        if message.starts_with("unknown field") {
            return ApiError::bad_request(
                ProblemCode::UnknownField,
                format!("{message} ({at}); remove it or check its spelling"),
            );
        }
        let field = if path == "." { "body".to_owned() } else { path };
        ApiError::bad_request(ProblemCode::InvalidField, format!("{field}: {message}")).with("field", field)
    })?;
    deserializer.end().map_err(|e| {
        ApiError::bad_request(
            ProblemCode::MalformedJson,
            format!("the request body has data after the JSON value ({e})"),
        )
    })?;
    Ok(value)
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = authenticate(parts, state).await?;
        admit(state, &caller)?;
        // For the body extractors that check signatures against the caller's keys.
        parts.extensions.insert(caller.clone());
        Ok(caller)
    }
}

/// Admits one request (or WebSocket message) of an authenticated caller under the rate
/// limits, counting a refusal: the one admission every extractor and the WebSocket's messages
/// pass through.
pub(crate) fn admit(state: &AppState, caller: &Caller) -> Result<(), ApiError> {
    state
        .limits
        .admit(caller.tenant_id.as_str(), caller.subject.as_str())
        .inspect_err(|err| state.metrics.rate_limited_total().add([err.code.to_string()], 1))
}

/// The caller of a bearer token; a refused token is counted and throttled per client address.
async fn authenticate(parts: &Parts, state: &AppState) -> Result<Caller, ApiError> {
    let verified = match bearer(parts) {
        None => Err(AuthFailure::Missing),
        Some(token) => state.tokens.verify(token).await,
    };
    verified.map_err(|failure| {
        let the_callers = failure.is_the_callers();
        let err = ApiError::from(failure);
        state.metrics.auth_failures_total().add([err.code.to_string()], 1);
        if the_callers { refuse_auth(state, ClientAddr::of(&parts.extensions), err) } else { err }
    })
}

/// The caller of a stream endpoint (SSE, WebSocket) and its stream parameters. Browsers cannot
/// put an `Authorization` header on an `EventSource` and must not put a long-lived bearer token
/// in a URL, so besides the header a stream accepts a single-use `?ticket=`
/// (`POST /v1/streams/tickets`) or the HttpOnly stream cookie (`POST /v1/streams/cookie`).
/// Either carries the scopes of the token that minted it. The query is checked before a
/// ticket is spent, so a malformed URL does not burn it.
#[derive(Debug)]
pub struct StreamCaller {
    pub caller: Caller,
    /// The session the stream serves: the query's, or the one its ticket or cookie names.
    pub session_id: Option<SessionId>,
    /// Where the client resumes: `Last-Event-ID`, else `?last_event_id=`.
    pub last_event_id: Option<u64>,
    pub via: StreamAuth,
}

/// How a stream authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamAuth {
    Bearer,
    Ticket,
    Cookie,
}

/// Name of the stream cookie.
pub const STREAM_COOKIE: &str = "agent_inbox_stream";

/// Query parameters of the stream endpoints.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// The agent session this stream serves (from subscribe); touched while the stream is open.
    #[param(value_type = Option<inbox_core::SessionId>)]
    session_id: Option<String>,
    /// Resume point for clients that cannot send a `Last-Event-ID` header.
    last_event_id: Option<String>,
    /// A single-use stream ticket, instead of an `Authorization` header.
    ticket: Option<String>,
}

impl FromRequestParts<AppState> for StreamCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let query = axum::extract::Query::<StreamQuery>::try_from_uri(&parts.uri)
            .map_err(|e| crate::http::extract::query_problem(&e))?
            .0;
        let named_session = crate::convert::session_id("session_id", query.session_id.as_deref())?;
        let last_event_id =
            crate::http::stream_params::last_event_id(&parts.headers, query.last_event_id.as_deref())?;
        let (caller, granted_session, via) = if parts.headers.contains_key(header::AUTHORIZATION) {
            (authenticate(parts, state).await?, None, StreamAuth::Bearer)
        } else {
            redeem(parts, state, query.ticket).await?
        };
        admit(state, &caller)?;
        let session_id = match (named_session, granted_session) {
            (Some(named), Some(granted)) if named != granted => {
                return Err(ApiError::invalid_field(
                    "session_id",
                    "differs from the session the ticket or cookie was issued for; leave it out or mint a new one",
                ));
            }
            (named, granted) => named.or(granted),
        };
        Ok(StreamCaller { caller, session_id, last_event_id, via })
    }
}

/// A refused query string as a problem naming the parameter (`field`), as body errors do.
pub fn query_problem(rejection: &axum::extract::rejection::QueryRejection) -> ApiError {
    let text = rejection.body_text();
    // "Failed to deserialize query string: limit: invalid digit found in string"
    let detail = text.strip_prefix("Failed to deserialize query string: ").unwrap_or(&text);
    let field = detail
        .split_once(": ")
        .map(|(name, _)| name)
        .filter(|name| !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .or_else(|| detail.strip_prefix("unknown field `").and_then(|rest| rest.split('`').next()));
    let problem =
        ApiError::bad_request(ProblemCode::InvalidQuery, format!("the query string is refused: {detail}"));
    match field {
        Some(field) => problem.with("field", field.to_owned()),
        None => problem,
    }
}

/// Authenticates with a ticket or the stream cookie.
async fn redeem(
    parts: &Parts,
    state: &AppState,
    ticket: Option<String>,
) -> Result<(Caller, Option<SessionId>, StreamAuth), ApiError> {
    let addr = ClientAddr::of(&parts.extensions);
    let (credential, presented, via) = match (ticket, stream_cookie(parts)) {
        (Some(ticket), _) => (StreamCredential::Ticket, ticket, StreamAuth::Ticket),
        (None, Some(cookie)) => (StreamCredential::Cookie, cookie.to_owned(), StreamAuth::Cookie),
        (None, None) => {
            return Err(ApiError::unauthorized(
                ProblemCode::Unauthorized,
                "authenticate the stream with 'Authorization: Bearer <token>', a ?ticket= from \
                 POST /v1/streams/tickets, or the cookie set by POST /v1/streams/cookie",
            ));
        }
    };
    let prefix = if via == StreamAuth::Ticket { TICKET_PREFIX } else { COOKIE_PREFIX };
    let well_formed = presented.len() == prefix.len() + 64
        && presented.starts_with(prefix)
        && presented[prefix.len()..].bytes().all(|b| b.is_ascii_hexdigit());
    let grant = if well_formed {
        let hash: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        state.store.sessions().redeem_stream_credential(&hash, credential).await?
    } else {
        None
    };
    let Some(grant) = grant else {
        let err = match via {
            StreamAuth::Ticket => ApiError::unauthorized(
                ProblemCode::InvalidTicket,
                "the stream ticket is unknown, expired or already used; get a new one with POST /v1/streams/tickets",
            ),
            _ => ApiError::unauthorized(
                ProblemCode::InvalidStreamCookie,
                "the stream cookie is unknown or expired; get a new one with POST /v1/streams/cookie",
            ),
        };
        state.metrics.auth_failures_total().add([err.code.to_string()], 1);
        return Err(refuse_auth(state, addr, err));
    };
    let caller = Caller {
        tenant_id: grant.tenant_id,
        subject: RecipientId::new(grant.subject).map_err(|e| ApiError::internal(e.to_string()))?,
        kind: CallerKind::parse(&grant.kind).ok_or_else(|| ApiError::internal("stored caller kind"))?,
        scopes: grant.scope.split_whitespace().map(str::to_owned).collect(),
    };
    Ok((caller, grant.session_id, via))
}

/// A failed authentication's answer: the refusal, or `429 auth_throttled` once the client's
/// address has failed too often (counted as rate limited).
fn refuse_auth(state: &AppState, addr: Option<IpAddr>, refusal: ApiError) -> ApiError {
    let err = state.limits.refuse_auth(addr, refusal);
    if err.code == ProblemCode::AuthThrottled {
        state.metrics.rate_limited_total().add([err.code.to_string()], 1);
    }
    err
}

fn stream_cookie(parts: &Parts) -> Option<&str> {
    parts
        .headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == STREAM_COOKIE)
        .map(|(_, value)| value.trim())
}

fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|t| !t.is_empty())
}
