//! The tenant's policy, for operators: whether agents must sign their claim, acknowledge,
//! release and heartbeat calls, and whether each agent may have only one active session (seed
//! 001's single-active-session, `ops/sessions.rs`). Other nodes see a change within
//! [`crate::tenant_policies::TENANT_POLICY_CACHE_TTL`].

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use inbox_api::{ProblemCode, Scope, TenantPolicyRequest, TenantPolicyResponse};
use inbox_store::{TenantPolicy, TenantPolicyChange};

use crate::AppState;
use crate::auth::{Caller, CallerKind};
use crate::error::ApiError;
use crate::http::extract::ApiJson;
use crate::ops::signatures;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/admin/tenant-policy", get(get_policy).post(set_policy))
}

fn require_admin(caller: &Caller) -> Result<(), ApiError> {
    caller.require(Scope::Admin)?;
    if caller.kind != CallerKind::Admin {
        return Err(ApiError::forbidden(
            ProblemCode::KindNotAllowed,
            "operator endpoints need an admin token (kind admin)",
        ));
    }
    Ok(())
}

#[utoipa::path(get, path = "/v1/admin/tenant-policy", tag = "admin", responses((status = 200, body = TenantPolicyResponse)))]
pub async fn get_policy(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<TenantPolicyResponse>, ApiError> {
    require_admin(&caller)?;
    let policy = state.store.signatures().tenant_policy(&caller.tenant_id).await?;
    Ok(Json(response(&caller, policy)))
}

/// Changes the policy of the admin token's tenant; settings left out keep their value.
#[utoipa::path(post, path = "/v1/admin/tenant-policy", tag = "admin", request_body = TenantPolicyRequest,
    responses((status = 200, body = TenantPolicyResponse)))]
pub async fn set_policy(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<TenantPolicyRequest>,
) -> Result<Json<TenantPolicyResponse>, ApiError> {
    require_admin(&caller)?;
    let change = TenantPolicyChange {
        signatures_required: request.signatures_required,
        single_active_session: request.single_active_session,
    };
    let policy = signatures::change_tenant_policy(&state, &caller.tenant_id, change).await?;
    Ok(Json(response(&caller, policy)))
}

fn response(caller: &Caller, policy: TenantPolicy) -> TenantPolicyResponse {
    TenantPolicyResponse {
        tenant_id: caller.tenant_id.to_string(),
        signatures_required: policy.signatures_required,
        single_active_session: policy.single_active_session,
    }
}
