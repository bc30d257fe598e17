//! `POST /v1/auth/refresh`: trade a refresh token for a new access token and a new refresh
//! token. Each refresh token works once; presenting a spent one revokes its whole family.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RefreshRequest {
    pub refresh_token: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenResponse {
    pub access_token: String,
    /// Always `Bearer`.
    pub token_type: String,
    pub expires_in: u64,
    pub scope: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_expires_in: Option<u64>,
}

/// The service's public token-signing keys as an RFC 7517 JWK set (`/.well-known/jwks.json`):
/// the Ed25519 keys of EdDSA access tokens, for services that verify tokens without a secret.
/// Empty while the service signs with HS256 only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PublicKeySet {
    pub keys: Vec<PublicKey>,
}

/// One Ed25519 public key (RFC 8037): `kty` `OKP`, `crv` `Ed25519`, `alg` `EdDSA`, `use` `sig`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PublicKey {
    pub kty: String,
    pub crv: String,
    pub alg: String,
    #[serde(rename = "use")]
    #[cfg_attr(feature = "openapi", schema(rename = "use"))]
    pub key_use: String,
    /// The `kid` header of the tokens this key signs.
    pub kid: String,
    /// The public key, base64url without padding.
    pub x: String,
}
