//! The browser credentials for streams: a single-use ticket (`POST /v1/streams/tickets`) and
//! the reusable stream cookie (`POST /v1/streams/cookie`). Browsers cannot put an
//! `Authorization` header on an `EventSource` and must not put a long-lived bearer token in a
//! URL; either credential carries the caller's identity and scopes instead. Only its hash is
//! stored; redeeming it is the stream extractor's (`http/extract.rs`).

use inbox_api::time::format_utc;
use inbox_api::{
    Scope, StreamCookieRequest, StreamCookieResponse, StreamTicketRequest, StreamTicketResponse,
};
use inbox_core::SessionId;
use inbox_store::{StreamCredential, StreamGrant};
use sha2::{Digest, Sha256};

use crate::caller::Caller;
use crate::error::ApiError;
use crate::node::AppState;
use crate::ops::sessions::{WebsocketOrigin, touch};

/// Prefixes of stream tickets and cookie values; each is followed by 64 hex digits.
pub const TICKET_PREFIX: &str = "st_";
pub const COOKIE_PREFIX: &str = "sc_";

/// Mints a single-use stream ticket for the caller, valid for at most `stream_ticket_ttl` on
/// any node.
pub async fn ticket(
    state: &AppState,
    caller: &Caller,
    origin: &WebsocketOrigin,
    request: StreamTicketRequest,
) -> Result<StreamTicketResponse, ApiError> {
    caller.require(Scope::StreamSubscribe)?;
    let max = state.config.sessions.stream_ticket_ttl.as_secs().max(1);
    let ttl = request.ttl_seconds.map(|s| s.get());
    let (ticket, expires_at, ttl) =
        mint(state, caller, request.session_id, ttl, StreamCredential::Ticket, TICKET_PREFIX, max).await?;
    Ok(StreamTicketResponse {
        sse_url: format!("/v1/streams/sse?ticket={ticket}"),
        websocket_url: origin.url(&format!("?ticket={ticket}")),
        ticket,
        expires_at_utc: format_utc(expires_at),
        expires_in: ttl,
    })
}

/// A minted stream cookie: the value and life the HTTP layer sets it with, and the answer.
#[derive(Debug)]
pub struct StreamCookie {
    pub value: String,
    pub max_age_seconds: u64,
    pub body: StreamCookieResponse,
}

/// Mints the stream cookie's value, reusable until it expires (at most an access token's
/// life), so a browser's `EventSource` can reconnect on its own.
pub async fn cookie(
    state: &AppState,
    caller: &Caller,
    origin: &WebsocketOrigin,
    request: StreamCookieRequest,
) -> Result<StreamCookie, ApiError> {
    caller.require(Scope::StreamSubscribe)?;
    let max = state.config.tokens.access_token_ttl.as_secs().max(1);
    let ttl = request.ttl_seconds.map(|s| s.get());
    let (value, expires_at, ttl) =
        mint(state, caller, request.session_id, ttl, StreamCredential::Cookie, COOKIE_PREFIX, max).await?;
    Ok(StreamCookie {
        value,
        max_age_seconds: ttl,
        body: StreamCookieResponse {
            expires_at_utc: format_utc(expires_at),
            expires_in: ttl,
            sse_url: "/v1/streams/sse".to_owned(),
            websocket_url: origin.url(""),
        },
    })
}

/// Creates a credential with the caller's identity and scopes, lasting `ttl_seconds` (by
/// default and at most the setting `ttl_seconds_max`); returns it, its expiry (epoch ms) and
/// its life in seconds. Only its hash is stored.
async fn mint(
    state: &AppState,
    caller: &Caller,
    session_id: Option<SessionId>,
    ttl_seconds: Option<u64>,
    credential: StreamCredential,
    prefix: &str,
    ttl_seconds_max: u64,
) -> Result<(String, i64, u64), ApiError> {
    let ttl = ttl_seconds.unwrap_or(ttl_seconds_max);
    if ttl > ttl_seconds_max {
        return Err(ApiError::invalid_field(
            "ttl_seconds",
            format!("is {ttl}; it must be between 1 and {ttl_seconds_max}"),
        ));
    }
    if let Some(session_id) = &session_id {
        touch(state, caller, session_id, None).await?;
    }
    let value = format!("{prefix}{}", hex::encode(inbox_store::random_bytes::<32>()));
    let hash: [u8; 32] = Sha256::digest(value.as_bytes()).into();
    let grant = StreamGrant {
        tenant_id: caller.tenant_id.clone(),
        subject: caller.subject.to_string(),
        kind: caller.kind.as_str().to_owned(),
        scope: caller.scopes.iter().map(String::as_str).collect::<Vec<_>>().join(" "),
        session_id,
    };
    let expires_at =
        state.store.sessions().insert_stream_credential(&hash, credential, &grant, ttl * 1_000).await?;
    Ok((value, expires_at.get(), ttl))
}
