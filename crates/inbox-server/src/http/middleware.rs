//! Cross-cutting request handling: HTTP/2 and TLS requests normalized, a request id on every response and log line, one log line
//! per request, per-route metrics, and problem documents for unknown routes and methods.

use std::net::SocketAddr;
use std::time::Instant;

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use inbox_api::ProblemCode;
use tracing::Instrument;

use crate::error::ApiError;
use crate::node::AppState;
use crate::proxies::ClientAddr;

pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Gives every request the shape HTTP/1.1 handlers expect: HTTP/2 carries the authority in
/// the URI instead of a `Host` header. It also decides who the client is ([`ClientAddr`]) and
/// whether it used HTTPS: on a native TLS listener it did whatever a client's
/// `X-Forwarded-Proto` claims, and forwarding headers count only from `trusted_proxies`.
pub async fn normalize(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    if !request.headers().contains_key(header::HOST)
        && let Some(host) = request.uri().authority().and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    {
        request.headers_mut().insert(header::HOST, host);
    }
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
    if let Some(peer) = peer {
        let native_tls = state.config.tls.cert.is_some();
        let client = state.proxies.apply(peer, request.headers_mut(), native_tls);
        request.extensions_mut().insert(client);
    } else if state.config.tls.cert.is_some() {
        request.headers_mut().insert("x-forwarded-proto", HeaderValue::from_static("https"));
    } else {
        request.headers_mut().remove("x-forwarded-proto");
    }
    next.run(request).await
}

pub async fn observe(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let request_id = request
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty()
                && v.len() <= 64
                && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .map_or_else(|| hex::encode(inbox_store::random_bytes::<8>()), str::to_owned);
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str()).to_owned();
    let method = request.method().clone();
    let client = ClientAddr::of(request.extensions()).map(|a| a.to_string()).unwrap_or_default();
    let span = tracing::info_span!("request", id = %request_id, %method, %route, %client);
    let mut response = next.run(request).instrument(span.clone()).await;
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    span.in_scope(|| tracing::info!(status, elapsed_ms = elapsed.as_secs_f64() * 1e3, "request done"));
    state.metrics.http_requests_total().add([route.clone(), status.to_string()], 1);
    state.metrics.http_request_duration_seconds().observe([route], elapsed);
    if response.extensions().get::<ProblemCode>() == Some(&ProblemCode::DatabaseUnavailable) {
        state.metrics.database_unavailable_total().add([], 1);
    }
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

pub async fn not_found() -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ProblemCode::RouteNotFound,
        "no such endpoint; see /openapi.json for the API",
    )
    .into_response()
}

pub async fn method_not_allowed() -> Response {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        ProblemCode::MethodNotAllowed,
        "this endpoint does not accept that method; see /openapi.json",
    )
    .into_response()
}
