//! The signatures subsystem's node-side share: this node's cache of agent keys (for verifying
//! signed requests; a retirement elsewhere reaches it within [`KEY_CACHE_TTL`]) and how a
//! signature's nonce is stored (hashed with its tenant and key). Verifying a request is the
//! HTTP layer's (`http/signed.rs`); the use cases are the agents' keys ([`agent_keys`]) and
//! the tenant's policy ([`tenant_policy`]).

pub mod agent_keys;
pub mod tenant_policy;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use inbox_core::{RecipientId, TenantId, UnixMillis};
use inbox_store::{AgentKey, KeyId, SqlStore};
use inbox_trust::Algorithm;
use inbox_trust::message_signatures::VerifyingKey;
use sha2::{Digest, Sha256};

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
pub struct KeyCache {
    keys: Mutex<HashMap<(TenantId, KeyId), KeyEntry>>,
}

impl KeyCache {
    /// A key by id, from the cache or the database.
    pub async fn agent_key(
        &self,
        store: &SqlStore,
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
        let stored = store.signatures().agent_key(tenant_id, key_id).await?;
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
