//! `POST /v1/auth/refresh`: rotating refresh tokens. No access token is needed: the refresh
//! token is the credential, and each one works exactly once. `GET /.well-known/jwks.json`: the
//! public keys of EdDSA access tokens, for services that verify tokens without a secret.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use inbox_api::{PublicKeySet, RefreshRequest, TokenResponse};

use crate::error::ApiError;
use crate::http::extract::ApiJson;
use crate::node::AppState;
use crate::ops::tokens;
use crate::proxies::ClientAddr;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/auth/refresh", post(refresh)).route("/.well-known/jwks.json", get(jwks))
}

/// Verifiers may cache the set this long; a rotated-in key is published here during its
/// activation delay, before it signs anything.
const JWKS_MAX_AGE_S: u32 = 60;

#[utoipa::path(get, path = "/.well-known/jwks.json", tag = "auth", security(()),
    responses((status = 200, body = PublicKeySet), (status = 503, description = "database_unavailable", body = inbox_api::Problem)))]
pub async fn jwks(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let keys = tokens::public_keys(&state).await?;
    let cache = HeaderValue::from_str(&format!("public, max-age={JWKS_MAX_AGE_S}")).expect("a header value");
    Ok(([(header::CACHE_CONTROL, cache)], Json(keys)))
}

#[utoipa::path(post, path = "/v1/auth/refresh", tag = "auth", request_body = RefreshRequest,
    responses((status = 200, body = TokenResponse), (status = 401, description = "invalid_refresh_token or refresh_token_reused", body = inbox_api::Problem)))]
pub async fn refresh(
    State(state): State<AppState>,
    Extension(client): Extension<ClientAddr>,
    ApiJson(request): ApiJson<RefreshRequest>,
) -> Result<Json<TokenResponse>, ApiError> {
    tokens::refresh(&state, client, request).await.map(Json)
}
