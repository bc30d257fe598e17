//! The signatures subsystem's node-side share: this node's cache of agent keys (for verifying
//! signed requests; a retirement elsewhere reaches it within [`KEY_CACHE_TTL`]) and how a
//! signature's nonce is stored (hashed with its tenant and key). Verifying a request is the
//! HTTP layer's (`http/signed.rs`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use inbox_core::{RecipientId, TenantId, UnixMillis};
use inbox_store::{AgentKey, KeyId, NewAgentKey, StoreError, TenantPolicy, TenantPolicyChange};
use inbox_trust::Algorithm;
use inbox_trust::message_signatures::VerifyingKey;
use sha2::{Digest, Sha256};

use crate::AppState;
use crate::error::ApiError;

/// How long a looked-up key is trusted before it is read again.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(10);
/// How long an unknown key id is remembered as unknown (a registration elsewhere shows up
/// after this).
const UNKNOWN_KEY_TTL: Duration = Duration::from_secs(1);
/// Entries per cache; past it the cache starts over.
const CACHE_ENTRIES_MAX: usize = 10_000;

/// What the nonce table stores: SHA-256 over the tenant, the key id and the nonce, each
/// length-prefixed so no two triples collide.
pub fn nonce_hash(tenant_id: &TenantId, key_id: &str, nonce: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in [tenant_id.as_str(), key_id, nonce] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.finalize().into()
}

/// A key ready to verify with.
#[derive(Debug, Clone)]
pub struct CachedKey {
    pub agent_id: RecipientId,
    pub verifying: VerifyingKey,
    pub retired_at: Option<UnixMillis>,
}

impl CachedKey {
    fn from_stored(key: &AgentKey) -> Option<CachedKey> {
        let verifying = match key.algorithm {
            Algorithm::Ed25519 => {
                let bytes: [u8; 32] = key.key_material.as_slice().try_into().ok()?;
                VerifyingKey::ed25519_from_bytes(&bytes).ok()?
            }
            Algorithm::HmacSha256 => VerifyingKey::hmac_sha256(&key.key_material).ok()?,
        };
        Some(CachedKey { agent_id: key.agent_id.clone(), verifying, retired_at: key.retired_at })
    }
}

type KeyEntry = (Instant, Option<CachedKey>);

/// This node's cache of agent keys.
#[derive(Debug, Default)]
pub struct SignatureCaches {
    keys: Mutex<HashMap<(TenantId, KeyId), KeyEntry>>,
}

impl SignatureCaches {
    /// A key by id, from the cache or the database.
    pub async fn agent_key(
        &self,
        state: &AppState,
        tenant_id: &TenantId,
        key_id: &KeyId,
    ) -> Result<Option<CachedKey>, inbox_store::StoreError> {
        let cache_key = (tenant_id.clone(), key_id.clone());
        if let Some((fetched, entry)) = self.keys.lock().expect("key cache").get(&cache_key) {
            let ttl = if entry.is_some() { KEY_CACHE_TTL } else { UNKNOWN_KEY_TTL };
            if fetched.elapsed() < ttl {
                return Ok(entry.clone());
            }
        }
        let stored = state.store.signatures().agent_key(tenant_id, key_id).await?;
        let entry = stored.as_ref().and_then(CachedKey::from_stored);
        let mut keys = self.keys.lock().expect("key cache");
        if keys.len() >= CACHE_ENTRIES_MAX {
            keys.clear();
        }
        keys.insert(cache_key, (Instant::now(), entry.clone()));
        Ok(entry)
    }

    /// Drops a key from this node's cache (after it was registered or retired here).
    pub fn forget_key(&self, tenant_id: &TenantId, key_id: &KeyId) {
        self.keys.lock().expect("key cache").remove(&(tenant_id.clone(), key_id.clone()));
    }
}

/// Changes a tenant's policy (signatures required, single active session); this node sees
/// the change at once, other nodes when their cache entry ages out.
pub async fn change_tenant_policy(
    state: &AppState,
    tenant_id: &TenantId,
    change: TenantPolicyChange,
) -> Result<TenantPolicy, ApiError> {
    let policy = state.store.signatures().change_tenant_policy(tenant_id, change).await?;
    state.tenant_policies.remember(tenant_id, policy);
    Ok(policy)
}

/// Registers an agent's key and drops any cached "no such key" answer for its id, so this
/// node verifies with it at once (other nodes' negative entries expire on their own).
pub async fn register_agent_key(state: &AppState, key: &NewAgentKey) -> Result<AgentKey, StoreError> {
    let stored = state.store.signatures().insert_agent_key(key).await?;
    state.trust.caches.forget_key(&key.tenant_id, &key.key_id);
    Ok(stored)
}

/// Retires a key `after_ms` from now. `owner` is the agent whose key it must be; `None` (an
/// operator) retires any key of the tenant. Answers whether such a live key existed.
pub async fn retire_agent_key(
    state: &AppState,
    tenant_id: &TenantId,
    owner: Option<&RecipientId>,
    key_id: &KeyId,
    after_ms: u64,
) -> Result<bool, StoreError> {
    let owner = match owner {
        Some(agent) => agent.clone(),
        None => match state.store.signatures().agent_key(tenant_id, key_id).await? {
            Some(key) => key.agent_id,
            None => return Ok(false),
        },
    };
    let retired = state.store.signatures().retire_agent_key(tenant_id, &owner, key_id, after_ms).await?;
    state.trust.caches.forget_key(tenant_id, key_id);
    Ok(retired)
}
