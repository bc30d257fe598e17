//! The tenant's policy, for operators: whether agents must sign their claim, acknowledge,
//! release and heartbeat calls, and whether each agent may have only one active session (seed
//! 001's single-active-session, `ops/sessions.rs`), and whether claims are fair across the
//! sources of an inbox's events (`ops/inbox.rs`, the store's `inbox/fairness.rs`). This node sees a change at once, other
//! nodes within [`crate::tenant_policies::TENANT_POLICY_CACHE_TTL`].

use inbox_api::{TenantPolicyRequest, TenantPolicyResponse};
use inbox_store::{TenantPolicy, TenantPolicyChange};

use crate::caller::Caller;
use crate::error::ApiError;
use crate::node::AppState;

/// The policy of the admin token's tenant, read from the database (not this node's cache).
pub async fn read(state: &AppState, caller: &Caller) -> Result<TenantPolicyResponse, ApiError> {
    caller.require_operator()?;
    let policy = state.store.signatures().tenant_policy(&caller.tenant_id).await?;
    Ok(response(caller, policy))
}

/// Changes the policy of the admin token's tenant; settings left out keep their value.
pub async fn change(
    state: &AppState,
    caller: &Caller,
    request: TenantPolicyRequest,
) -> Result<TenantPolicyResponse, ApiError> {
    caller.require_operator()?;
    let change = TenantPolicyChange {
        signatures_required: request.signatures_required,
        single_active_session: request.single_active_session,
        fair_claims: request.fair_claims,
        pending_events_max: request.pending_events_max.map(|n| n.get()),
        stored_bytes_max: request.stored_bytes_max.map(|n| n.get()),
    };
    let policy = state.store.signatures().change_tenant_policy(&caller.tenant_id, change).await?;
    state.tenant_policies.remember(&caller.tenant_id, policy);
    Ok(response(caller, policy))
}

fn response(caller: &Caller, policy: TenantPolicy) -> TenantPolicyResponse {
    TenantPolicyResponse {
        tenant_id: caller.tenant_id.clone(),
        signatures_required: policy.signatures_required,
        single_active_session: policy.single_active_session,
        fair_claims: policy.fair_claims,
        pending_events_max: policy.pending_events_max,
        stored_bytes_max: policy.stored_bytes_max,
    }
}
