//! Trust: agents' request-signing keys, the per-tenant signature policy, and webhook
//! callback registrations (seed 001's `POST /v1/callback-registrations`) with their
//! challenge and delivery log.
//!
//! Binary values (public keys, secrets) are base64url without padding; standard base64 is
//! accepted too. A secret appears in a response only when the service generated it, once.

use inbox_core::{KeyId, RecipientId, RegistrationId, TenantId};
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

/// How callback deliveries are signed: only with the registration's shared secret.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum CallbackAuthMode {
    #[default]
    #[serde(rename = "hmac-sha256")]
    HmacSha256,
}

/// What a callback delivery carries: only the thin hint, never event data (agents fetch events
/// by polling).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DeliveryScope {
    #[default]
    SignalOnly,
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

/// The largest `pending_events_max` a tenant policy takes (a trillion events).
pub const PENDING_EVENTS_MAX_LIMIT: u64 = 1_000_000_000_000;
/// The largest `stored_bytes_max` a tenant policy takes (1 PiB).
pub const STORED_BYTES_MAX_LIMIT: u64 = 1 << 50;

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
    #[cfg_attr(feature = "openapi", schema(maximum = 1_000_000_000_000_u64))]
    pub pending_events_max: Option<u64>,
    /// The most inline payload bytes those events may hold (0: no limit). A publish past it is
    /// refused with 507 `tenant_storage_limit` and `Retry-After`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(maximum = 1_125_899_906_842_624_u64))]
    pub stored_bytes_max: Option<u64>,
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

/// `POST /v1/callback-registrations` (and seed 000's `POST /api/v1/agents/{agent_id}/callbacks`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CallbackRegistrationRequest {
    /// Must be the token's tenant when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<TenantId>,
    /// The agent whose inbox the callback hints at: the token's agent (an admin token may
    /// name any agent of its tenant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipient_id: Option<RecipientId>,
    /// `https://...` (plain http only to loopback, under the development setting).
    pub callback_url: String,
    /// Only `hmac-sha256`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_mode: Option<CallbackAuthMode>,
    /// The key id deliveries name in `MATM-Key-Id` and `keyid`; generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_id: Option<KeyId>,
    /// The shared secret (at least 32 bytes). When given, the challenge is sent at once;
    /// when absent, a secret is generated and returned, and the challenge waits for
    /// `POST /v1/callback-registrations/{id}/verify`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Only `["signal_only"]`: deliveries carry the thin hint, never event data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_scope: Option<Vec<DeliveryScope>>,
    /// At most this many deliveries per minute; heads in between coalesce. 1 to 600, default 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rate_per_minute: Option<u32>,
    /// How long the receiver should remember nonces (informational; signatures last 300 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_window_seconds: Option<u32>,
}

/// A registration as the tenant sees it. `status` is `pending_verification` or `active`; an
/// active registration may also be disabled (`disabled_at_utc`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CallbackRegistrationResponse {
    pub registration_id: RegistrationId,
    pub tenant_id: TenantId,
    pub recipient_id: RecipientId,
    pub callback_url: String,
    pub status: String,
    pub auth_mode: String,
    pub secret_id: KeyId,
    /// Only when the service generated the secret, in this response only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// During a rotation overlap: the key still signing beside the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_secret_id: Option<KeyId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_secret_retires_at_utc: Option<String>,
    pub max_rate_per_minute: u32,
    pub replay_window_seconds: u32,
    pub delivered_head_seq: u64,
    pub created_at_utc: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_at_utc: Option<String>,
    /// The challenge sent by this request, if any, and when it expired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenge_delivery_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_utc: Option<String>,
    /// Why the last challenge or delivery failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Set when deliveries failed past the server's bound: nothing is delivered until an
    /// operator re-enables the registration (`POST /v1/admin/callbacks/{id}/enable`); the
    /// agent still finds its events by polling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_at_utc: Option<String>,
    /// Why it was disabled: the failures in a row, for how long, and the last error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CallbackRegistrationsResponse {
    pub registrations: Vec<CallbackRegistrationResponse>,
}

/// `POST /v1/callback-registrations/{id}/rotate`: a new secret; the old one keeps signing
/// beside it for the overlap.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RotateCallbackSecretRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_id: Option<KeyId>,
    /// Generated (and returned once) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// How long the old secret keeps signing: 0 to 7 days, default 24 h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_seconds: Option<u64>,
}

/// One entry of a registration's delivery log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CallbackAttemptView {
    pub delivery_id: String,
    /// `challenge` or `hint`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_seq: Option<u64>,
    pub attempt: u32,
    /// `delivered`, `failed`, `abandoned`, `verified` or `verification_failed`.
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: u64,
    pub created_at_utc: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CallbackAttemptsResponse {
    pub attempts: Vec<CallbackAttemptView>,
}

/// The body of a registration challenge (a signed POST to the callback URL). Answer `200`
/// with [`CallbackChallengeAnswer`]: base64 of HMAC-SHA256(secret, `challenge`), before
/// `expires_at_utc`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CallbackChallenge {
    /// `callback.challenge`.
    pub signal_type: String,
    pub registration_id: String,
    pub delivery_id: String,
    /// Unix seconds.
    pub timestamp: i64,
    pub nonce: String,
    pub expires_at_utc: String,
    /// `agent-inbox-challenge.{delivery_id}.{timestamp}.{nonce}`.
    pub challenge: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CallbackChallengeAnswer {
    pub challenge_response: String,
}
