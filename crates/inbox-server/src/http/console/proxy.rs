//! `/console/api/{rest}`: the console's data calls, answered by the admin API itself. The
//! request is handed to the admin routes as `/v1/admin/{rest}` with the console token as its
//! bearer token, so the admin API's own scope, kind and tenant checks, validation, rate
//! limits and problem documents apply unchanged: the console can do nothing the admin API
//! would refuse, and there is no second copy of any admin handler.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use tower::Service;

use super::session::{CSRF_HEADER, ConsoleSession};
use crate::error::ApiError;
use crate::node::AppState;
use crate::proxies::ClientAddr;

/// Where the console's calls are mounted, and where they go.
const CONSOLE_API: &str = "/console/api";
const ADMIN_API: &str = "/v1/admin";

/// Any method on `/console/api/{rest}` (the session and the live stream have routes of their
/// own). The [`ConsoleSession`] extractor has checked the cookie and, for changes, the CSRF
/// token.
pub async fn forward(
    State(state): State<AppState>,
    session: ConsoleSession,
    request: Request,
) -> Result<Response, ApiError> {
    let bearer = HeaderValue::from_str(&format!("Bearer {}", session.token))
        .map_err(|e| ApiError::internal(format!("console token as a header: {e}")))?;
    let (parts, body) = request.into_parts();
    // A fresh request rather than this one: the console route's own path parameters would
    // otherwise be seen by the admin handlers as theirs.
    let mut admin_request = Request::new(body);
    *admin_request.method_mut() = parts.method;
    *admin_request.uri_mut() = admin_uri(&parts.uri)?;
    *admin_request.version_mut() = parts.version;
    *admin_request.headers_mut() = parts.headers;
    if let Some(client) = parts.extensions.get::<ClientAddr>() {
        admin_request.extensions_mut().insert(*client);
    }
    let headers = admin_request.headers_mut();
    // The admin API authenticates by the header alone; what the browser sent for the console
    // (its cookie, the CSRF token, any Authorization of its own) goes no further.
    headers.remove(header::COOKIE);
    headers.remove(CSRF_HEADER);
    headers.insert(header::AUTHORIZATION, bearer);
    let response = admin_router(state).call(admin_request).await.unwrap_or_else(|never| match never {});
    let mut response = response.into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// The admin routes alone, answering unknown paths and methods with problem documents: only
/// `/v1/admin/...` is reachable this way, whatever `rest` holds (`..` included).
fn admin_router(state: AppState) -> Router {
    crate::http::routes::admin_routers()
        .fallback(crate::http::middleware::not_found)
        .method_not_allowed_fallback(crate::http::middleware::method_not_allowed)
        .with_state(state)
}

/// `/console/api/x?q` as `/v1/admin/x?q`, from the raw (still percent-encoded) path.
fn admin_uri(uri: &Uri) -> Result<Uri, ApiError> {
    let rest = uri.path().strip_prefix(CONSOLE_API).unwrap_or_default();
    let target = match uri.query() {
        Some(query) => format!("{ADMIN_API}{rest}?{query}"),
        None => format!("{ADMIN_API}{rest}"),
    };
    target.parse().map_err(|e| ApiError::internal(format!("console path {target:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_paths_map_onto_admin_paths_as_sent() {
        let uri: Uri = "/console/api/inboxes/agent%20a/events?state=claimed&limit=5".parse().unwrap();
        assert_eq!(admin_uri(&uri).unwrap(), "/v1/admin/inboxes/agent%20a/events?state=claimed&limit=5");
        let uri: Uri = "/console/api/parked".parse().unwrap();
        assert_eq!(admin_uri(&uri).unwrap(), "/v1/admin/parked");
    }
}
