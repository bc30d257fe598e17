//! The parameters every stream endpoint (SSE, WebSocket, the tickets and cookie that open
//! them) reads from the request: the session, the resume point, and the URLs and scheme the
//! client reached this node by.

use std::convert::Infallible;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use inbox_core::InboxSeq;

use crate::error::ApiError;
use crate::node::AppState;
use crate::ops::sessions::WebsocketOrigin;

/// The resume point of an SSE or WebSocket client: the `Last-Event-ID` header a reconnecting
/// `EventSource` sends, else the `last_event_id` query parameter (for clients that cannot set
/// headers). Event ids are head sequences.
pub(crate) fn last_event_id(headers: &HeaderMap, query: Option<&str>) -> Result<Option<u64>, ApiError> {
    let (field, text) = match headers.get("last-event-id") {
        Some(value) => ("Last-Event-ID", value.to_str().unwrap_or("\u{fffd}")),
        None => match query {
            Some(text) => ("last_event_id", text),
            None => return Ok(None),
        },
    };
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse::<u64>().ok().and_then(|n| InboxSeq::new(n).ok()).map(|seq| Some(seq.get())).ok_or_else(|| {
        ApiError::invalid_field(
            field,
            format!("is {text:?}; send the id of the last event received (a head_seq)"),
        )
    })
}

/// `ws://host` or `wss://host` for the request's Host header (`wss` behind a proxy that says
/// `X-Forwarded-Proto: https`), or `None` when the header is missing or not a plain authority,
/// in which case the caller gives a relative URL.
pub(crate) fn websocket_origin(headers: &HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let plain = !host.is_empty()
        && host.len() <= 255
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    if !plain {
        return None;
    }
    let scheme = if forwarded_https(headers) { "wss" } else { "ws" };
    Some(format!("{scheme}://{host}"))
}

/// Whether a proxy in front says the client used HTTPS.
pub(crate) fn forwarded_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').next().is_some_and(|p| p.trim().eq_ignore_ascii_case("https")))
}

/// The answers that name a WebSocket URL take it from here: absolute when the Host header
/// allows.
impl FromRequestParts<AppState> for WebsocketOrigin {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &AppState) -> Result<Self, Infallible> {
        Ok(WebsocketOrigin(websocket_origin(&parts.headers)))
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use inbox_api::ProblemCode;

    use super::*;

    #[test]
    fn last_event_id_prefers_the_header_and_names_bad_input() {
        let mut headers = HeaderMap::new();
        assert_eq!(last_event_id(&headers, None).unwrap(), None);
        assert_eq!(last_event_id(&headers, Some("7")).unwrap(), Some(7));
        headers.insert("last-event-id", HeaderValue::from_static("12"));
        assert_eq!(last_event_id(&headers, Some("7")).unwrap(), Some(12));
        headers.insert("last-event-id", HeaderValue::from_static("twelve"));
        let err = last_event_id(&headers, None).unwrap_err();
        assert_eq!(
            (err.code, err.extensions["field"].as_str()),
            (ProblemCode::InvalidField, Some("Last-Event-ID"))
        );
        assert!(last_event_id(&HeaderMap::new(), Some("-1")).is_err());
    }

    #[test]
    fn websocket_urls_follow_the_host_header() {
        let websocket_url =
            |headers: &HeaderMap, query: &str| WebsocketOrigin(websocket_origin(headers)).url(query);
        let mut headers = HeaderMap::new();
        assert_eq!(websocket_url(&headers, "?a=1"), "/v1/streams/ws?a=1");
        headers.insert(header::HOST, HeaderValue::from_static("coord.example.net:8443"));
        assert_eq!(websocket_url(&headers, ""), "ws://coord.example.net:8443/v1/streams/ws");
        headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert_eq!(websocket_url(&headers, ""), "wss://coord.example.net:8443/v1/streams/ws");
        headers.insert(header::HOST, HeaderValue::from_static("evil/path?x"));
        assert_eq!(websocket_url(&headers, ""), "/v1/streams/ws");
    }
}
