//! The tenant's policy, for operators: whether agents must sign their claim, acknowledge,
//! release and heartbeat calls, and whether each agent may have only one active session (seed
//! 001's single-active-session). The rules live in `ops/signatures/tenant_policy.rs`.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use inbox_api::{TenantPolicyRequest, TenantPolicyResponse};

use crate::caller::Caller;
use crate::error::ApiError;
use crate::http::extract::ApiJson;
use crate::node::AppState;
use crate::ops::signatures::tenant_policy;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/admin/tenant-policy", get(get_policy).post(set_policy))
}

#[utoipa::path(get, path = "/v1/admin/tenant-policy", tag = "admin", responses((status = 200, body = TenantPolicyResponse)))]
pub async fn get_policy(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<TenantPolicyResponse>, ApiError> {
    tenant_policy::read(&state, &caller).await.map(Json)
}

/// Changes the policy of the admin token's tenant; settings left out keep their value.
#[utoipa::path(post, path = "/v1/admin/tenant-policy", tag = "admin", request_body = TenantPolicyRequest,
    responses((status = 200, body = TenantPolicyResponse)))]
pub async fn set_policy(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<TenantPolicyRequest>,
) -> Result<Json<TenantPolicyResponse>, ApiError> {
    tenant_policy::change(&state, &caller, request).await.map(Json)
}
