//! `POST /v1/auth/refresh`: rotating refresh tokens. No access token is needed: the refresh
//! token is the credential, and each one works exactly once.

use axum::extract::State;
use axum::routing::post;
use axum::{Extension, Json, Router};
use inbox_api::{RefreshRequest, TokenResponse};

use crate::AppState;
use crate::error::ApiError;
use crate::http::extract::ApiJson;
use crate::proxies::ClientAddr;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/auth/refresh", post(refresh))
}

#[utoipa::path(post, path = "/v1/auth/refresh", tag = "auth", request_body = RefreshRequest,
    responses((status = 200, body = TokenResponse), (status = 401, description = "invalid_refresh_token or refresh_token_reused", body = inbox_api::Problem)))]
pub async fn refresh(
    State(state): State<AppState>,
    Extension(client): Extension<ClientAddr>,
    ApiJson(request): ApiJson<RefreshRequest>,
) -> Result<Json<TokenResponse>, ApiError> {
    let issued = state.tokens.refresh(&request.refresh_token).await.map_err(|err| {
        state.metrics.auth_failures_total().add([err.code.to_string()], 1);
        if err.status == axum::http::StatusCode::UNAUTHORIZED {
            state.limits.refuse_auth(Some(client.0), err)
        } else {
            err
        }
    })?;
    Ok(Json(TokenResponse {
        access_token: issued.access_token,
        token_type: "Bearer".to_owned(),
        expires_in: issued.expires_in,
        scope: issued.scope,
        refresh_token: issued.refresh_token,
        refresh_expires_in: Some(state.tokens.refresh_ttl().as_secs()),
    }))
}
