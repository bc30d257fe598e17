//! Extractors: they authenticate and validate, so handlers only ever see a known caller and a
//! well-formed request. Each refusal is a precise problem: malformed JSON, an unknown field, a
//! wrong type (with the field's path), a body over the limit, a missing or bad token.

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;

use crate::AppState;
use crate::auth::{AuthFailure, Caller};
use crate::error::ApiError;

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
                "unsupported_media_type",
                "send the body as JSON with 'Content-Type: application/json'",
            ));
        }
        let limit = state.body_bytes_limit();
        let bytes = axum::body::to_bytes(request.into_body(), limit).await.map_err(|_| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!("the request body is over {limit} bytes; send a smaller payload or a payload_ref"),
            )
            .with("limit_bytes", limit)
        })?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// Parses JSON with errors that name the offending field.
pub fn parse_json<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        let at = format!("line {} column {}", inner.line(), inner.column());
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::bad_request(
                "malformed_json",
                format!("the request body is not valid JSON ({inner})"),
            );
        }
        let message = inner.to_string();
        let message = message.split(" at line ").next().unwrap_or(&message).to_owned();
        if message.starts_with("unknown field") {
            return ApiError::bad_request(
                "unknown_field",
                format!("{message} ({at}); remove it or check its spelling"),
            );
        }
        let field = if path == "." { "body".to_owned() } else { path };
        ApiError::bad_request("invalid_field", format!("{field}: {message}")).with("field", field)
    })?;
    deserializer.end().map_err(|e| {
        ApiError::bad_request(
            "malformed_json",
            format!("the request body has data after the JSON value ({e})"),
        )
    })?;
    Ok(value)
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let addr = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
        if let Some(addr) = addr {
            state.limits.auth_throttled(addr).inspect_err(|_| {
                state.metrics.count(
                    "agent_inbox_rate_limited_total",
                    vec![("code", "auth_throttled".into())],
                    1,
                )
            })?;
        }
        let token = bearer(parts);
        let verified = match token {
            None => Err(AuthFailure::Missing),
            Some(token) => state.tokens.verify(token).await,
        };
        let caller = match verified {
            Ok(caller) => caller,
            Err(failure) => {
                if let Some(addr) = addr {
                    state.limits.record_auth_failure(addr);
                }
                let err = ApiError::from(failure);
                state.metrics.count(
                    "agent_inbox_auth_failures_total",
                    vec![("code", err.code.to_owned())],
                    1,
                );
                return Err(err);
            }
        };
        state.limits.admit(caller.tenant_id.as_str(), caller.subject.as_str()).inspect_err(|err| {
            state.metrics.count("agent_inbox_rate_limited_total", vec![("code", err.code.to_owned())], 1)
        })?;
        Ok(caller)
    }
}

fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|t| !t.is_empty())
}
