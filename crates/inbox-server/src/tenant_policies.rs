//! This node's cache of tenants' policies (signatures required, single active session): the
//! `tenant_policy` row is read at most once per [`TENANT_POLICY_CACHE_TTL`] per tenant, which
//! is how long a change made on another node takes to reach this one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use inbox_core::TenantId;
use inbox_store::{SqlStore, StoreError, TenantPolicy};

/// How long a node trusts a tenant's policy it read.
pub const TENANT_POLICY_CACHE_TTL: Duration = Duration::from_secs(5);
/// Tenants cached at most; past it the cache starts over.
const CACHE_ENTRIES_MAX: usize = 10_000;

#[derive(Debug, Default)]
pub struct TenantPolicies {
    tenants: Mutex<HashMap<TenantId, (Instant, TenantPolicy)>>,
}

impl TenantPolicies {
    /// The tenant's policy, from the cache when it is fresh.
    pub async fn get(&self, store: &SqlStore, tenant_id: &TenantId) -> Result<TenantPolicy, StoreError> {
        if let Some((fetched, policy)) = self.tenants.lock().expect("tenant policy cache").get(tenant_id) {
            if fetched.elapsed() < TENANT_POLICY_CACHE_TTL {
                return Ok(*policy);
            }
        }
        let policy = store.signatures().tenant_policy(tenant_id).await?;
        self.remember(tenant_id, policy);
        Ok(policy)
    }

    /// Records a policy just read or set on this node.
    pub fn remember(&self, tenant_id: &TenantId, policy: TenantPolicy) {
        let mut tenants = self.tenants.lock().expect("tenant policy cache");
        if tenants.len() >= CACHE_ENTRIES_MAX {
            tenants.clear();
        }
        tenants.insert(tenant_id.clone(), (Instant::now(), policy));
    }
}
