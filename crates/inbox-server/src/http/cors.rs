//! CORS for browser apps served from another origin: only the origins in `cors_origins` may
//! read answers, send credentials and have their preflights approved. With the list empty (the
//! default) no CORS header is ever sent, so browsers keep every answer from other origins.
//!
//! The same origins may also read each answer's timings (`Timing-Allow-Origin`): without it a
//! browser hides `nextHopProtocol` and the timings of cross-origin requests, so an app cannot
//! tell whether it talks HTTP/1.1 (six connections per origin) or HTTP/2.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::Response;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::config::Config;
use crate::node::AppState;

/// The CORS layer for the configured origins, or `None` when there are none.
pub(crate) fn layer(config: &Config) -> Option<CorsLayer> {
    if config.http.cors_origins.is_empty() {
        return None;
    }
    let origins: Vec<HeaderValue> =
        config.http.cors_origins.iter().filter_map(|origin| HeaderValue::from_str(origin).ok()).collect();
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_credentials(true)
            .allow_methods([Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                header::IF_NONE_MATCH,
                HeaderName::from_static("last-event-id"),
                HeaderName::from_static("content-digest"),
                HeaderName::from_static("signature"),
                HeaderName::from_static("signature-input"),
                HeaderName::from_static("x-request-id"),
            ])
            .expose_headers([
                header::ETAG,
                header::RETRY_AFTER,
                header::LOCATION,
                HeaderName::from_static("x-request-id"),
            ])
            .max_age(Duration::from_secs(600)),
    )
}

/// Whether `origin` (an `Origin` header) is one of the configured browser-app origins.
pub(crate) fn allowed(config: &Config, origin: &str) -> bool {
    config.http.cors_origins.iter().any(|listed| listed == origin)
}

/// Names a listed request origin in `Timing-Allow-Origin`, never `*` and never an unlisted
/// origin, so only the configured browser apps see the timings of their requests.
pub(crate) async fn timing_allow_origin(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let origin = request
        .headers()
        .get(header::ORIGIN)
        .filter(|origin| origin.to_str().is_ok_and(|origin| allowed(&state.config, origin)))
        .cloned();
    let mut response = next.run(request).await;
    if let Some(origin) = origin {
        response.headers_mut().insert(TIMING_ALLOW_ORIGIN, origin);
    }
    response
}

const TIMING_ALLOW_ORIGIN: HeaderName = HeaderName::from_static("timing-allow-origin");
