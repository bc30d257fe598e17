//! The keys agents sign their critical calls with: an ed25519 public key or an hmac-sha256
//! shared secret per key id, owned by one agent of one tenant. Retiring a key keeps its row
//! (so an id is never reused for different material) and stops it from verifying.

use inbox_trust::Algorithm;
use std::fmt;

use inbox_core::{IdError, RecipientId, TenantId, UnixMillis};

use super::{Signatures, queries};
use crate::Field;
use crate::db::{Arg, DbRow};
use crate::secrets::{Place, SecretBytes, seal_for_storing};
use crate::signatures::tenant_policy::lock_tenant;
use crate::store::with_retries;
use crate::{SqlStore, StoreError};

/// Live keys one agent may hold at once: enough for a rotation overlap on a few devices.
pub const AGENT_KEYS_PER_AGENT_MAX: u64 = 10;

/// Keys one tenant-wide listing returns at most.
pub const AGENT_KEYS_LIST_MAX: u32 = 1_000;

/// Longest key material accepted (a 32-byte public key or secret; 64 leaves room; sealed, it
/// takes 40 bytes more).
pub const KEY_MATERIAL_BYTES_MAX: usize = 64;

/// Defined by the core's id macro; re-exported where the store always had it.
pub use inbox_core::KeyId;

/// A stored agent key. `Debug` hides the material, which may be a shared secret.
#[derive(Clone, PartialEq, Eq)]
pub struct AgentKey {
    pub tenant_id: TenantId,
    pub key_id: KeyId,
    pub agent_id: RecipientId,
    /// Stored as its RFC 9421 registry name (`ed25519`, `hmac-sha256`).
    pub algorithm: Algorithm,
    /// An ed25519 public key, or an hmac-sha256 shared secret (stored sealed).
    pub key_material: SecretBytes,
    pub created_at: UnixMillis,
    pub retired_at: Option<UnixMillis>,
}

impl AgentKey {
    /// Whether the key still verifies at `now`.
    pub fn is_live(&self, now: UnixMillis) -> bool {
        self.retired_at.is_none_or(|retired| retired > now)
    }
}

impl fmt::Debug for AgentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentKey")
            .field("tenant_id", &self.tenant_id)
            .field("key_id", &self.key_id)
            .field("agent_id", &self.agent_id)
            .field("algorithm", &self.algorithm)
            .field("retired_at", &self.retired_at)
            .finish_non_exhaustive()
    }
}

/// A key to register.
#[derive(Clone)]
pub struct NewAgentKey {
    pub tenant_id: TenantId,
    pub key_id: KeyId,
    pub agent_id: RecipientId,
    pub algorithm: Algorithm,
    pub key_material: SecretBytes,
    /// Whether the request that registers this key was signed with one of the agent's live
    /// keys (the caller verified the signature). An agent's first key needs no signature;
    /// once it has a live key, another is registered only when this is true.
    pub signed: bool,
}

impl fmt::Debug for NewAgentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewAgentKey").field("key_id", &self.key_id).finish_non_exhaustive()
    }
}

impl Signatures<'_> {
    /// Registers a key. Refuses an unsigned key for an agent that already has a live key
    /// ([`StoreError::SignatureRequired`]), a key id already used in the tenant
    /// ([`StoreError::AlreadyExists`]) and an agent's key past [`AGENT_KEYS_PER_AGENT_MAX`]
    /// live ones ([`StoreError::LimitReached`]). Both rules are checked under the tenant row
    /// lock in the inserting transaction, so two concurrent unsigned registrations cannot
    /// both become the agent's "first" key, and concurrent ones cannot overshoot the limit.
    pub async fn insert_agent_key(self, key: &NewAgentKey) -> Result<AgentKey, StoreError> {
        if key.key_material.is_empty() || key.key_material.len() > KEY_MATERIAL_BYTES_MAX {
            return Err(StoreError::invalid(
                Field::KeyMaterial,
                format!("must be 1 to {KEY_MATERIAL_BYTES_MAX} bytes"),
            ));
        }
        with_retries!(self.store, self.insert_key_once(key))
    }

    async fn insert_key_once(self, key: &NewAgentKey) -> Result<AgentKey, StoreError> {
        let now = self.store.now();
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        lock_tenant(&mut conn, &key.tenant_id, now).await?;
        let live = conn
            .fetch_optional(
                queries::COUNT_LIVE_KEYS,
                &[Arg::Str(key.tenant_id.as_str()), Arg::Str(key.agent_id.as_str()), Arg::I64(now.get())],
            )
            .await?
            .map(|row| row.i64("n"))
            .transpose()?
            .unwrap_or(0);
        if live > 0 && !key.signed {
            return Err(StoreError::SignatureRequired { what: "another signing key" });
        }
        if live as u64 >= AGENT_KEYS_PER_AGENT_MAX {
            return Err(StoreError::LimitReached { what: "signing key", limit: AGENT_KEYS_PER_AGENT_MAX });
        }
        // A shared secret is sealed; a public key needs no sealing.
        let (stored, sealed_by) = match key.algorithm {
            Algorithm::Ed25519 => (key.key_material.to_vec(), None),
            Algorithm::HmacSha256 => {
                let place = key_place(&key.tenant_id, &key.key_id, &key.agent_id, key.algorithm);
                let (sealed, sealed_by) =
                    seal_for_storing(self.store, &mut conn, &place, &key.key_material).await?;
                (sealed, Some(sealed_by))
            }
        };
        let inserted = conn
            .execute(
                queries::INSERT_KEY,
                &[
                    Arg::Str(key.tenant_id.as_str()),
                    Arg::Str(key.key_id.as_str()),
                    Arg::Str(key.agent_id.as_str()),
                    Arg::Str(key.algorithm.name()),
                    Arg::Bytes(&stored),
                    Arg::OptStr(sealed_by.as_deref()),
                    Arg::I64(now.get()),
                ],
            )
            .await;
        match inserted {
            Err(StoreError::Database(sqlx::Error::Database(db))) if db.is_unique_violation() => {
                return Err(StoreError::AlreadyExists { what: "key", id: key.key_id.to_string() });
            }
            other => other?,
        };
        tx.commit().await?;
        Ok(AgentKey {
            tenant_id: key.tenant_id.clone(),
            key_id: key.key_id.clone(),
            agent_id: key.agent_id.clone(),
            algorithm: key.algorithm,
            key_material: key.key_material.clone(),
            created_at: now,
            retired_at: None,
        })
    }

    /// A key by id, live or retired; `None` when the tenant has no such key.
    pub async fn agent_key(
        self,
        tenant_id: &TenantId,
        key_id: &KeyId,
    ) -> Result<Option<AgentKey>, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let row = pooled
            .conn()
            .fetch_optional(queries::KEY_BY_ID, &[Arg::Str(tenant_id.as_str()), Arg::Str(key_id.as_str())])
            .await?;
        row.as_ref().map(|row| key_from_row(self.store, row)).transpose()
    }

    /// The agent's live keys, oldest first.
    pub async fn agent_keys(
        self,
        tenant_id: &TenantId,
        agent_id: &RecipientId,
    ) -> Result<Vec<AgentKey>, StoreError> {
        let now = self.store.now();
        let mut pooled = self.store.pools().reader().await?;
        let rows = pooled
            .conn()
            .fetch_all(
                queries::LIVE_KEYS_OF_AGENT,
                &[Arg::Str(tenant_id.as_str()), Arg::Str(agent_id.as_str()), Arg::I64(now.get())],
            )
            .await?;
        rows.iter().map(|row| key_from_row(self.store, row)).collect()
    }

    /// Every key of a tenant, live and retired, by agent then age, at most `limit` (for
    /// operators; the material stays in the record, never show it).
    pub async fn tenant_agent_keys(
        self,
        tenant_id: &TenantId,
        limit: u32,
    ) -> Result<Vec<AgentKey>, StoreError> {
        if limit == 0 || limit > AGENT_KEYS_LIST_MAX {
            return Err(StoreError::invalid(
                Field::Limit,
                format!("is {limit}; ask for between 1 and {AGENT_KEYS_LIST_MAX}"),
            ));
        }
        let mut pooled = self.store.pools().reader().await?;
        let rows = pooled
            .conn()
            .fetch_all(queries::KEYS_OF_TENANT, &[Arg::Str(tenant_id.as_str()), Arg::I64(i64::from(limit))])
            .await?;
        rows.iter().map(|row| key_from_row(self.store, row)).collect()
    }

    /// Retires the agent's key `after_ms` from now (0: at once). Returns whether a live key of
    /// that agent was found; an earlier retirement already set is kept.
    pub async fn retire_agent_key(
        self,
        tenant_id: &TenantId,
        agent_id: &RecipientId,
        key_id: &KeyId,
        after_ms: u64,
    ) -> Result<bool, StoreError> {
        let now = self.store.now();
        let retire_at = now.plus_ms(after_ms);
        let mut pooled = self.store.pools().writer().await?;
        let done = pooled
            .conn()
            .execute(
                queries::RETIRE_KEY,
                &[
                    Arg::I64(retire_at.get()),
                    Arg::Str(tenant_id.as_str()),
                    Arg::Str(agent_id.as_str()),
                    Arg::Str(key_id.as_str()),
                    Arg::I64(retire_at.get()),
                ],
            )
            .await?;
        if done.rows_affected > 0 {
            return Ok(true);
        }
        // Already retiring sooner, or not there at all.
        Ok(self
            .agent_key(tenant_id, key_id)
            .await?
            .is_some_and(|key| &key.agent_id == agent_id && key.is_live(now)))
    }
}

/// Where an agent's shared secret is sealed.
fn key_place(tenant_id: &TenantId, key_id: &KeyId, agent_id: &RecipientId, algorithm: Algorithm) -> Place {
    Place::agent_key(tenant_id.as_str(), key_id.as_str(), agent_id.as_str(), algorithm.name())
}

/// A key read from its row, a shared secret opened with the store's keys.
fn key_from_row(store: &SqlStore, row: &DbRow) -> Result<AgentKey, StoreError> {
    let corrupt = |e: IdError| StoreError::Corrupt(format!("agent_signing_key: {e}"));
    let tenant_id = TenantId::new(row.string("tenant_id")?).map_err(corrupt)?;
    let key_id = KeyId::new(row.string("key_id")?).map_err(corrupt)?;
    let agent_id = RecipientId::new(row.string("agent_id")?).map_err(corrupt)?;
    let algorithm = {
        let name = row.string("algorithm")?;
        Algorithm::from_name(&name)
            .ok_or_else(|| StoreError::Corrupt(format!("agent_signing_key: unknown algorithm {name:?}")))?
    };
    let stored = row.bytes("key_material")?;
    let key_material = match algorithm {
        Algorithm::Ed25519 => SecretBytes::new(stored),
        Algorithm::HmacSha256 => {
            let sealed_by = row.opt_string("key_material_sealed_by")?;
            let place = key_place(&tenant_id, &key_id, &agent_id, algorithm);
            store.sealer().open(&place, sealed_by.as_deref(), &stored)?
        }
    };
    Ok(AgentKey {
        tenant_id,
        key_id,
        agent_id,
        algorithm,
        key_material,
        created_at: UnixMillis(row.i64("created_at_utc")?),
        retired_at: row.opt_i64("retired_at_utc")?.map(UnixMillis),
    })
}
