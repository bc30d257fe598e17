//! `/console`: the operators' web console, served by the binary itself. One page with its
//! files embedded ([`assets`]), a sign-in that trades an admin token for an HttpOnly,
//! SameSite=Strict cookie ([`session`]), the console's data calls answered by the admin API
//! itself ([`proxy`]), and a live stream of "something changed" from the server's own hints
//! ([`live`]). Every answer carries a strict Content-Security-Policy.

mod assets;
mod live;
mod proxy;
mod session;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{any, get, post};

use crate::node::AppState;

/// The console's routes, to merge into the service's router.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console", get(assets::page))
        .route("/console/", get(assets::page))
        .route("/console/assets/{file}", get(assets::asset))
        .route(
            "/console/sign-in",
            post(session::sign_in).layer(DefaultBodyLimit::max(session::SIGN_IN_BYTES_MAX)),
        )
        .route("/console/sign-out", post(session::sign_out))
        .route("/console/api/session", get(session::describe))
        .route("/console/api/live", get(live::live))
        .route("/console/api/{*rest}", any(proxy::forward))
        .layer(axum::middleware::map_response(assets::security_headers))
}
