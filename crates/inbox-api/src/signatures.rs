//! Agents' request-signing keys (`POST /v1/agent-keys`) and the per-tenant policy
//! (`POST /v1/admin/tenant-policy`): signatures, sessions, fair claims, quotas.
//!
//! Binary values (public keys, secrets) are base64url without padding; standard base64 is
//! accepted too. A secret appears in a response only when the service generated it, once.

use inbox_core::{KeyId, RecipientId, TenantId};
use serde::{Deserialize, Serialize};

/// An agent key's RFC 9421 signature algorithm, by its registry name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum SigningAlgorithm {
    /// An ed25519 key pair: the agent keeps the private key and registers the public one.
    #[serde(rename = "ed25519")]
    Ed25519,
    /// A shared secret the service generates and returns once.
    #[serde(rename = "hmac-sha256")]
    HmacSha256,
}

impl SigningAlgorithm {
    pub const ALL: [SigningAlgorithm; 2] = [SigningAlgorithm::Ed25519, SigningAlgorithm::HmacSha256];

    pub fn as_str(self) -> &'static str {
        match self {
            SigningAlgorithm::Ed25519 => "ed25519",
            SigningAlgorithm::HmacSha256 => "hmac-sha256",
        }
    }
}

/// `POST /v1/agent-keys`: register an ed25519 public key, or ask for an hmac-sha256 secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AgentKeyRequest {
    pub algorithm: SigningAlgorithm,
    /// ed25519 only: the 32-byte public key, or its RFC 8410 SubjectPublicKeyInfo DER; a
    /// small-order (weak) key is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    /// The `keyid` signatures will name; unique in the tenant. Generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<KeyId>,
}

/// A registered key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentKeyResponse {
    pub key_id: KeyId,
    pub agent_id: RecipientId,
    #[cfg_attr(feature = "openapi", schema(value_type = SigningAlgorithm))]
    pub algorithm: String,
    pub created_at_utc: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retires_at_utc: Option<String>,
    /// ed25519: the public key as registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    /// hmac-sha256: the shared secret, in this response only; store it now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentKeysResponse {
    pub keys: Vec<AgentKeyResponse>,
    /// Whether the agent's tenant requires signed claim, acknowledge, release and heartbeat
    /// calls, so an agent can tell at login that it needs a key.
    #[serde(default)]
    pub signatures_required: bool,
}

/// `POST /v1/admin/tenant-policy`: settings left out keep their current value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TenantPolicyRequest {
    /// Claim, acknowledge, release and heartbeat must carry a valid signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signatures_required: Option<bool>,
    /// Seed 001's single-active-session policy (off by default): an agent's newest subscribe
    /// supersedes its earlier sessions, and only the newest session may claim or open a
    /// stream (others get 409 `session_superseded`). Acknowledge, release and heartbeat of
    /// leases already held keep working, so a superseded process can finish its work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub single_active_session: Option<bool>,
    /// Fair claims (off by default): within one priority, a claim interleaves the sources of
    /// an inbox's events (each publish's `fairness_key`, by default its publisher), quiet
    /// sources first, instead of taking them oldest first; no source waits without bound.
    /// Turning it on affects events published from then on; earlier ones are claimed first,
    /// oldest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_claims: Option<bool>,
    /// The most events of the tenant not yet acknowledged or parked (0: no limit). A publish
    /// past it is refused with 429 `tenant_pending_limit` and `Retry-After`; nothing stored
    /// changes. Counted per node, at most a second old.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_events_max: Option<inbox_core::limits::PendingEventsMax>,
    /// The most inline payload bytes those events may hold (0: no limit). A publish past it is
    /// refused with 507 `tenant_storage_limit` and `Retry-After`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_bytes_max: Option<inbox_core::limits::StoredBytesMax>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TenantPolicyResponse {
    pub tenant_id: TenantId,
    pub signatures_required: bool,
    pub single_active_session: bool,
    pub fair_claims: bool,
    pub pending_events_max: u64,
    pub stored_bytes_max: u64,
}
