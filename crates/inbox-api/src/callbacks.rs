//! Callback registrations (seed 001's `POST /v1/callback-registrations`), their challenge
//! and delivery log.
//!
//! A secret appears in a response only when the service generated it, once.

use inbox_core::limits::{RatePerMinute, ReplayWindowSeconds, SecretOverlapSeconds};
use inbox_core::{KeyId, RecipientId, RegistrationId, TenantId};
use serde::{Deserialize, Serialize};

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
    #[cfg_attr(feature = "openapi", schema(format = "uri", pattern = "^https://"))]
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
    /// At most this many deliveries per minute; heads in between coalesce. Default 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rate_per_minute: Option<RatePerMinute>,
    /// How long the receiver should remember nonces (informational; signatures last 300 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_window_seconds: Option<ReplayWindowSeconds>,
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
    /// How long the old secret keeps signing: default 24 h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_seconds: Option<SecretOverlapSeconds>,
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
