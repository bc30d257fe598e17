//! The tokens subsystem's use cases over HTTP: a refresh token traded for new tokens, and the
//! public keys of EdDSA access tokens. Checking and issuing tokens is
//! [`crate::tokens::TokenService`]'s; here a refused refresh counts as a failed authentication
//! (the metric, and the client address's throttle).

use axum::http::StatusCode;
use inbox_api::{PublicKeySet, RefreshRequest, TokenResponse};

use crate::error::ApiError;
use crate::node::AppState;
use crate::proxies::ClientAddr;

/// Rotates a refresh token: it works exactly once, and the answer carries its successor.
pub async fn refresh(
    state: &AppState,
    client: ClientAddr,
    request: RefreshRequest,
) -> Result<TokenResponse, ApiError> {
    let issued = state.tokens.refresh(&request.refresh_token).await.map_err(|err| {
        state.metrics.auth_failures_total().add([err.code.to_string()], 1);
        if err.status == StatusCode::UNAUTHORIZED {
            state.limits.refuse_auth(Some(client.0), err)
        } else {
            err
        }
    })?;
    Ok(TokenResponse {
        access_token: issued.access_token,
        token_type: "Bearer".to_owned(),
        expires_in: issued.expires_in,
        scope: issued.scope,
        refresh_token: issued.refresh_token,
        refresh_expires_in: Some(state.tokens.refresh_ttl().as_secs()),
    })
}

/// The public keys that verify access tokens (none with HS256), for services that check
/// tokens without a secret.
pub async fn public_keys(state: &AppState) -> Result<PublicKeySet, ApiError> {
    Ok(state.tokens.public_keys().await?)
}
