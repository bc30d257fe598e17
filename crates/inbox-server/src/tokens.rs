//! Identity: short-lived JWT access tokens the service signs itself (keys kept in the
//! database, created on first start, shared by every node), tokens of an external identity
//! provider verified against a JWKS file, rotating refresh tokens, and the scopes a caller has.
//!
//! The tenant and agent of every request come from here, never from the request body; what
//! that caller may do is decided in `caller.rs`.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use inbox_api::{ProblemCode, Scope};
use inbox_core::{RecipientId, TenantId, UnixMillis};
use inbox_store::{
    RefreshGrant, RefreshRefusal, SIGNING_KEY_OVERLAP_MS_MIN, SigningKey, SqlStore, StoreError,
    TokenAlgorithm,
};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::ApiError;

use crate::caller::{Caller, CallerKind};

/// The scopes an agent token gets when none are named.
pub const AGENT_SCOPES: &str = Scope::AGENT_DEFAULT;

/// The scopes a publisher token gets when none are named.
pub const PUBLISHER_SCOPES: &str = Scope::PUBLISHER_DEFAULT;

/// The scopes an admin token gets when none are named.
pub const ADMIN_SCOPES: &str = Scope::ADMIN_DEFAULT;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct AccessClaims {
    iss: String,
    sub: String,
    /// Tenant id.
    tid: String,
    #[serde(default = "default_kind")]
    kind: String,
    #[serde(default)]
    scope: String,
    iat: i64,
    exp: i64,
    #[serde(default)]
    jti: String,
    /// A sign-in id, on tokens that a sign-out can end before they expire (the console's):
    /// verifying one asks the database whether it was signed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sid: Option<String>,
}

fn default_kind() -> String {
    "agent".to_owned()
}

/// A freshly issued pair.
#[derive(Debug, Clone)]
pub struct IssuedTokens {
    pub access_token: String,
    pub expires_in: u64,
    pub scope: String,
    pub refresh_token: Option<String>,
}

/// Why a token was refused; each maps to a 401 with its own code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    Missing,
    Malformed(String),
    Expired,
    Invalid(String),
    /// The signing keys (or, for a sign-in's token, its sign-out) could not be read, so the
    /// token could be neither trusted nor refused; not the caller's fault (503).
    KeysUnavailable(String),
    /// The token's sign-in was signed out.
    SignedOut,
}

impl AuthFailure {
    /// Whether the failure says something about the token (and counts against its sender).
    pub fn is_the_callers(&self) -> bool {
        !matches!(self, AuthFailure::KeysUnavailable(_))
    }
}

impl From<AuthFailure> for ApiError {
    fn from(failure: AuthFailure) -> Self {
        match failure {
            AuthFailure::Missing => ApiError::unauthorized(
                ProblemCode::Unauthorized,
                "send an access token as 'Authorization: Bearer <token>' (agent-inbox token issue prints one)",
            ),
            AuthFailure::Malformed(why) => ApiError::unauthorized(
                ProblemCode::InvalidToken,
                format!("the access token is malformed: {why}"),
            ),
            AuthFailure::Expired => ApiError::unauthorized(
                ProblemCode::TokenExpired,
                "the access token has expired; get a new one with POST /v1/auth/refresh",
            ),
            AuthFailure::Invalid(why) => ApiError::unauthorized(
                ProblemCode::InvalidToken,
                format!("the access token is not valid: {why}"),
            ),
            AuthFailure::SignedOut => ApiError::unauthorized(
                ProblemCode::InvalidToken,
                "the access token belongs to a console sign-in that was signed out; sign in again",
            ),
            AuthFailure::KeysUnavailable(why) => {
                let mut err = ApiError::new(
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    ProblemCode::DatabaseUnavailable,
                    "the database that holds the token signing keys and sign-outs cannot be read right now; retry in a moment",
                )
                .retry_after(2);
                err.internal = Some(why);
                err
            }
        }
    }
}

/// How long past `exp` (and before `nbf`/`iat`) a token is still accepted: clocks drift.
const LEEWAY_S: u64 = 30;
/// How long a sign-out is kept after its token's expiry: longer than [`LEEWAY_S`].
const SIGN_OUT_KEPT_PAST_EXPIRY_S: i64 = 4 * LEEWAY_S as i64;

/// Issues and verifies tokens.
pub struct TokenService {
    store: SqlStore,
    /// The algorithm of keys this service makes (the first one, when there is none).
    algorithm: TokenAlgorithm,
    issuer: String,
    access_ttl: Duration,
    refresh_ttl: Duration,
    own_keys: RwLock<KeySnapshot>,
    /// One re-read of a stale snapshot at a time; the others wait for it.
    /// One reload at a time; holds the last failed one, which callers that waited share.
    refreshing: tokio::sync::Mutex<Option<(Instant, String)>>,
    last_reload: RwLock<Instant>,
    external: Option<External>,
}

/// The signing keys as read from the database at one time, each ready to sign and verify.
struct KeySnapshot {
    keys: Vec<Arc<PreparedKey>>,
    /// Store time until which the snapshot knows every retirement that can have taken effect:
    /// a rotation after the read retires keys at least [`SIGNING_KEY_OVERLAP_MS_MIN`] later.
    /// Past it, the keys are read again before one verifies or signs anything.
    trusted_until: UnixMillis,
}

/// A signing key with the library's key objects made once, when the key was first loaded, so
/// verifying a token copies no secret and opens nothing.
struct PreparedKey {
    stored: SigningKey,
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
}

impl PreparedKey {
    fn new(stored: SigningKey, issuer: &str) -> Result<PreparedKey, String> {
        let (encoding, decoding, algorithm) = match stored.algorithm {
            TokenAlgorithm::Hs256 => (
                EncodingKey::from_secret(&stored.secret),
                DecodingKey::from_secret(&stored.secret),
                Algorithm::HS256,
            ),
            TokenAlgorithm::EdDsa => {
                let public = stored
                    .public_key
                    .as_deref()
                    .filter(|p| p.len() == 32)
                    .ok_or_else(|| format!("EdDSA signing key {} has no public key", stored.key_id))?;
                let mut der = zeroize::Zeroizing::new(PKCS8_ED25519_PREFIX.to_vec());
                der.extend_from_slice(&stored.secret);
                (EncodingKey::from_ed_der(&der), DecodingKey::from_ed_der(public), Algorithm::EdDSA)
            }
        };
        // The key decides the algorithm, never the token's header: a token naming another
        // algorithm for this key id is refused.
        let mut validation = Validation::new(algorithm);
        validation.set_issuer(&[issuer]);
        validation.leeway = LEEWAY_S;
        validation.validate_aud = false;
        validation.set_required_spec_claims(&["exp", "iss", "sub"]);
        Ok(PreparedKey { stored, encoding, decoding, validation })
    }
}

/// RFC 8410's PKCS #8 v1 header of an Ed25519 private key: what precedes its 32-byte seed.
const PKCS8_ED25519_PREFIX: [u8; 16] =
    [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];

struct External {
    keys: JwkSet,
    issuer: Option<String>,
    audience: Option<String>,
}

impl std::fmt::Debug for TokenService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenService").field("issuer", &self.issuer).finish_non_exhaustive()
    }
}

/// How long an unknown key id waits before the key list is read from the database again.
const KEY_RELOAD_MIN_INTERVAL: Duration = Duration::from_secs(5);
/// How long a failed key reload answers for the requests that queued behind it.
const RELOAD_FAILURE_SHARED: Duration = Duration::from_secs(1);

impl TokenService {
    pub async fn new(store: SqlStore, config: &crate::config::Config) -> Result<TokenService, String> {
        let read_at = store.now();
        let algorithm = config.tokens.algorithm();
        let keys = store
            .tokens()
            .access_signing_keys(algorithm)
            .await
            .map_err(|e| format!("cannot load signing keys: {e}"))?;
        let keys = prepare_keys(keys, &[], &config.tokens.issuer)?;
        let own_keys = KeySnapshot { keys, trusted_until: read_at.plus_ms(SIGNING_KEY_OVERLAP_MS_MIN) };
        let external = match &config.tokens.jwks_file {
            None => None,
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read JWKS file {}: {e}", path.display()))?;
                let keys: JwkSet = serde_json::from_str(&text)
                    .map_err(|e| format!("JWKS file {} is not a JWK set: {e}", path.display()))?;
                Some(External {
                    keys,
                    issuer: config.tokens.jwks_issuer.clone(),
                    audience: config.tokens.jwks_audience.clone(),
                })
            }
        };
        Ok(TokenService {
            store,
            algorithm,
            issuer: config.tokens.issuer.clone(),
            access_ttl: config.tokens.access_token_ttl,
            refresh_ttl: config.tokens.refresh_token_ttl,
            own_keys: RwLock::new(own_keys),
            refreshing: tokio::sync::Mutex::new(None),
            // The first unknown key id reloads at once: another node starting beside this one on
            // an empty database may have made a first key of its own since this one read them.
            last_reload: RwLock::new(
                Instant::now().checked_sub(KEY_RELOAD_MIN_INTERVAL).unwrap_or_else(Instant::now),
            ),
            external,
        })
    }

    /// Signs an access token (and, with `refresh`, starts a refresh-token family).
    pub async fn issue(
        &self,
        tenant_id: &TenantId,
        subject: &RecipientId,
        kind: CallerKind,
        scope: &str,
        ttl: Option<Duration>,
        refresh: bool,
    ) -> Result<IssuedTokens, ApiError> {
        let scope = normalize_scope(scope)?;
        let ttl = ttl.unwrap_or(self.access_ttl);
        self.fresh_keys().await.map_err(|why| ApiError::from(AuthFailure::KeysUnavailable(why)))?;
        let access_token = self.sign(tenant_id, subject, kind, &scope, ttl, None)?;
        let refresh_token = if refresh {
            let (token, hash) = new_refresh_token();
            let grant = RefreshGrant {
                family_id: format!("fam_{}", hex::encode(inbox_store::random_bytes::<12>())),
                tenant_id: tenant_id.clone(),
                subject: subject.to_string(),
                kind: kind.as_str().to_owned(),
                scope: scope.clone(),
            };
            self.store
                .tokens()
                .insert_refresh_token(&hash, &grant, self.refresh_ttl.as_millis() as u64)
                .await?;
            Some(token)
        } else {
            None
        };
        Ok(IssuedTokens { access_token, expires_in: ttl.as_secs(), scope, refresh_token })
    }

    pub fn refresh_ttl(&self) -> Duration {
        self.refresh_ttl
    }

    /// Spends a refresh token for a new access token and a new refresh token.
    pub async fn refresh(&self, presented: &str) -> Result<IssuedTokens, ApiError> {
        let invalid = || {
            ApiError::unauthorized(
                ProblemCode::InvalidRefreshToken,
                "the refresh token is unknown, expired or revoked; log in again",
            )
        };
        if !presented.starts_with("rt_") || presented.len() != 67 {
            return Err(invalid());
        }
        let presented_hash: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let (token, hash) = new_refresh_token();
        let grant = match self
            .store
            .tokens()
            .rotate_refresh_token(&presented_hash, &hash, self.refresh_ttl.as_millis() as u64)
            .await?
        {
            Ok(grant) => grant,
            Err(RefreshRefusal::Invalid) => return Err(invalid()),
            Err(RefreshRefusal::Reused) => {
                tracing::warn!("refresh token reused; its family is revoked");
                return Err(ApiError::unauthorized(
                    ProblemCode::RefreshTokenReused,
                    "this refresh token was already used, so every token of its login is now revoked; log in again",
                ));
            }
        };
        let subject = RecipientId::new(grant.subject).map_err(|e| ApiError::internal(e.to_string()))?;
        let kind = CallerKind::parse(&grant.kind).ok_or_else(|| ApiError::internal("stored kind"))?;
        self.fresh_keys().await.map_err(|why| ApiError::from(AuthFailure::KeysUnavailable(why)))?;
        let access_token =
            self.sign(&grant.tenant_id, &subject, kind, &grant.scope, self.access_ttl, None)?;
        Ok(IssuedTokens {
            access_token,
            expires_in: self.access_ttl.as_secs(),
            scope: grant.scope,
            refresh_token: Some(token),
        })
    }

    /// Signs an access token for a sign-in (the console's): like [`Self::issue`] without a
    /// refresh token, and [`Self::sign_out`] ends it on every node before it expires.
    pub async fn issue_sign_in(
        &self,
        tenant_id: &TenantId,
        subject: &RecipientId,
        kind: CallerKind,
        scope: &str,
        ttl: Duration,
    ) -> Result<IssuedTokens, ApiError> {
        let scope = normalize_scope(scope)?;
        self.fresh_keys().await.map_err(|why| ApiError::from(AuthFailure::KeysUnavailable(why)))?;
        let sign_in = hex::encode(inbox_store::random_bytes::<16>());
        let access_token = self.sign(tenant_id, subject, kind, &scope, ttl, Some(sign_in))?;
        Ok(IssuedTokens { access_token, expires_in: ttl.as_secs(), scope, refresh_token: None })
    }

    /// Ends the sign-in `token` belongs to, if it is a live token of a sign-in: from now on
    /// every node refuses it ([`AuthFailure::SignedOut`]). An expired or foreign token needs
    /// no ending: nothing happens.
    pub async fn sign_out(&self, token: &str) -> Result<(), AuthFailure> {
        let claims = match self.own_claims(token).await {
            Ok(claims) => claims,
            Err(AuthFailure::KeysUnavailable(why)) => return Err(AuthFailure::KeysUnavailable(why)),
            Err(_) => return Ok(()),
        };
        let Some(sign_in) = &claims.sid else { return Ok(()) };
        // Kept past the expiry by more than the verifier's leeway, which still accepts the
        // token for a while after it.
        let until = UnixMillis(claims.exp.saturating_add(SIGN_OUT_KEPT_PAST_EXPIRY_S).saturating_mul(1_000));
        self.store
            .tokens()
            .sign_out(&Sha256::digest(sign_in.as_bytes()).into(), until)
            .await
            .map_err(|err| AuthFailure::KeysUnavailable(err.to_string()))
    }

    fn sign(
        &self,
        tenant_id: &TenantId,
        subject: &RecipientId,
        kind: CallerKind,
        scope: &str,
        ttl: Duration,
        sign_in: Option<String>,
    ) -> Result<String, ApiError> {
        // The newest key that may sign now: a freshly rotated key waits for its activation, so
        // every node has loaded it before the first token signed with it arrives.
        let store_now = self.store.now();
        let key = {
            let snapshot = self.own_keys.read().expect("key lock");
            let keys = &snapshot.keys;
            keys.iter()
                .find(|k| k.stored.signs_at(store_now))
                .or_else(|| keys.iter().find(|k| k.stored.is_live(store_now)))
                .or_else(|| keys.first())
                .cloned()
        }
        .ok_or_else(|| ApiError::internal("no signing key"))?;
        let now = inbox_api::time::now_ms() / 1000;
        let claims = AccessClaims {
            iss: self.issuer.clone(),
            sub: subject.to_string(),
            tid: tenant_id.to_string(),
            kind: kind.as_str().to_owned(),
            scope: scope.to_owned(),
            iat: now,
            exp: now + ttl.as_secs() as i64,
            jti: hex::encode(inbox_store::random_bytes::<12>()),
            sid: sign_in,
        };
        let header =
            Header { kid: Some(key.stored.key_id.clone()), ..Header::new(key.validation.algorithms[0]) };
        jsonwebtoken::encode(&header, &claims, &key.encoding)
            .map_err(|e| ApiError::internal(format!("signing a token: {e}")))
    }

    /// Verifies a bearer token and returns who it speaks for.
    pub async fn verify(&self, token: &str) -> Result<Caller, AuthFailure> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| AuthFailure::Malformed(malformed_reason(&e)))?;
        let kid = header.kid.clone().unwrap_or_default();
        if let Some(key) = self.own_key(&kid).await? {
            let claims = self.decode_own(token, &key)?;
            if let Some(sign_in) = &claims.sid {
                let hash: [u8; 32] = Sha256::digest(sign_in.as_bytes()).into();
                let signed_out = self.store.tokens().is_signed_out(&hash).await;
                match signed_out {
                    Ok(false) => {}
                    Ok(true) => return Err(AuthFailure::SignedOut),
                    Err(err) => return Err(AuthFailure::KeysUnavailable(err.to_string())),
                }
            }
            return caller_from(claims);
        }
        let Some(external) = &self.external else {
            return Err(AuthFailure::Invalid(format!("unknown signing key {kid:?}")));
        };
        let jwk = external
            .keys
            .find(&kid)
            .ok_or_else(|| AuthFailure::Invalid(format!("no key {kid:?} in the configured JWKS")))?;
        let decoding = DecodingKey::from_jwk(jwk).map_err(|e| AuthFailure::Invalid(e.to_string()))?;
        if !matches!(
            header.alg,
            Algorithm::RS256
                | Algorithm::ES256
                | Algorithm::EdDSA
                | Algorithm::PS256
                | Algorithm::ES384
                | Algorithm::RS384
                | Algorithm::RS512
        ) {
            return Err(AuthFailure::Invalid(format!(
                "external tokens must use an asymmetric algorithm, not {:?}",
                header.alg
            )));
        }
        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY_S;
        match &external.issuer {
            Some(issuer) => validation.set_issuer(&[issuer]),
            None => validation.iss = None,
        }
        match &external.audience {
            Some(audience) => validation.set_audience(&[audience]),
            None => validation.validate_aud = false,
        }
        validation.set_required_spec_claims(&["exp", "sub"]);
        let data =
            jsonwebtoken::decode::<AccessClaims>(token, &decoding, &validation).map_err(jwt_failure)?;
        caller_from(data.claims)
    }

    /// The claims of one of this service's own tokens, its signature and expiry checked.
    async fn own_claims(&self, token: &str) -> Result<AccessClaims, AuthFailure> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| AuthFailure::Malformed(malformed_reason(&e)))?;
        let kid = header.kid.unwrap_or_default();
        let Some(key) = self.own_key(&kid).await? else {
            return Err(AuthFailure::Invalid(format!("unknown signing key {kid:?}")));
        };
        self.decode_own(token, &key)
    }

    /// Checks a token's signature by one of this service's keys, its issuer and its expiry.
    fn decode_own(&self, token: &str, key: &PreparedKey) -> Result<AccessClaims, AuthFailure> {
        jsonwebtoken::decode::<AccessClaims>(token, &key.decoding, &key.validation)
            .map(|data| data.claims)
            .map_err(jwt_failure)
    }

    /// The public keys of the live EdDSA signing keys (including one not yet signing, so
    /// verifiers have it before its first token), as a JWK set for `/.well-known/jwks.json`.
    /// Empty while the service signs with HS256 only.
    pub async fn public_keys(&self) -> Result<inbox_api::PublicKeySet, AuthFailure> {
        self.fresh_keys().await.map_err(AuthFailure::KeysUnavailable)?;
        let now = self.store.now();
        let snapshot = self.own_keys.read().expect("key lock");
        let keys = snapshot
            .keys
            .iter()
            .filter(|k| k.stored.is_live(now))
            .filter_map(|k| {
                let public = k.stored.public_key.as_deref()?;
                Some(inbox_api::PublicKey {
                    kty: "OKP".to_owned(),
                    crv: "Ed25519".to_owned(),
                    alg: "EdDSA".to_owned(),
                    key_use: "sig".to_owned(),
                    kid: k.stored.key_id.clone(),
                    x: base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, public),
                })
            })
            .collect();
        Ok(inbox_api::PublicKeySet { keys })
    }

    /// A signing key by id, re-reading the database (at most every few seconds) for ids this
    /// node has not seen, so keys created by another node or a rotation are picked up.
    /// `Ok(None)`: no such key, or one retired by now.
    async fn own_key(&self, kid: &str) -> Result<Option<Arc<PreparedKey>>, AuthFailure> {
        self.fresh_keys().await.map_err(AuthFailure::KeysUnavailable)?;
        let live = |snapshot: &KeySnapshot| {
            // A key whose rotation overlap has ended verifies nothing, to the millisecond.
            let now = self.store.now();
            snapshot
                .keys
                .iter()
                .find(|k| k.stored.key_id == kid)
                .map(|k| k.stored.is_live(now).then(|| k.clone()))
        };
        if let Some(found) = live(&self.own_keys.read().expect("key lock")) {
            return Ok(found);
        }
        let due = self.last_reload.read().expect("reload lock").elapsed() >= KEY_RELOAD_MIN_INTERVAL;
        if !due || kid.is_empty() {
            return Ok(None);
        }
        *self.last_reload.write().expect("reload lock") = Instant::now();
        if self.reload_keys().await.is_err() {
            return Ok(None);
        }
        Ok(live(&self.own_keys.read().expect("key lock")).flatten())
    }

    /// Reads the keys again when the snapshot may miss a retirement that has taken effect.
    /// While the database is away, requests that queued behind a failed reload share its
    /// answer instead of each waiting out another database timeout in turn.
    async fn fresh_keys(&self) -> Result<(), String> {
        let stale = || self.store.now() >= self.own_keys.read().expect("key lock").trusted_until;
        if !stale() {
            return Ok(());
        }
        let mut last_failure = self.refreshing.lock().await;
        if !stale() {
            return Ok(());
        }
        if let Some((at, why)) = last_failure.as_ref() {
            if at.elapsed() < RELOAD_FAILURE_SHARED {
                return Err(why.clone());
            }
        }
        match self.reload_keys().await {
            Ok(()) => {
                *last_failure = None;
                Ok(())
            }
            Err(err) => {
                let why = err.to_string();
                *last_failure = Some((Instant::now(), why.clone()));
                Err(why)
            }
        }
    }

    /// Reads the signing keys from the database again (after a rotation).
    pub async fn reload_keys(&self) -> Result<(), StoreError> {
        let read_at = self.store.now();
        let keys = self.store.tokens().access_signing_keys(self.algorithm).await?;
        let previous = self.own_keys.read().expect("key lock").keys.clone();
        let keys = prepare_keys(keys, &previous, &self.issuer).map_err(StoreError::Corrupt)?;
        *self.own_keys.write().expect("key lock") =
            KeySnapshot { keys, trusted_until: read_at.plus_ms(SIGNING_KEY_OVERLAP_MS_MIN) };
        Ok(())
    }
}

/// Each key ready to use, keeping the key objects of `previous` for keys already prepared
/// (their material never changes; their retirement may, so the stored record is the new one).
fn prepare_keys(
    keys: Vec<SigningKey>,
    previous: &[Arc<PreparedKey>],
    issuer: &str,
) -> Result<Vec<Arc<PreparedKey>>, String> {
    keys.into_iter()
        .map(|stored| {
            let known = previous
                .iter()
                .find(|p| p.stored.key_id == stored.key_id && p.stored.secret == stored.secret);
            match known {
                Some(known) if known.stored == stored => Ok(known.clone()),
                Some(known) => Ok(Arc::new(PreparedKey {
                    stored,
                    encoding: known.encoding.clone(),
                    decoding: known.decoding.clone(),
                    validation: known.validation.clone(),
                })),
                None => PreparedKey::new(stored, issuer).map(Arc::new),
            }
        })
        .collect()
}

fn jwt_failure(err: jsonwebtoken::errors::Error) -> AuthFailure {
    use jsonwebtoken::errors::ErrorKind;
    match err.kind() {
        ErrorKind::ExpiredSignature => AuthFailure::Expired,
        ErrorKind::InvalidToken | ErrorKind::Base64(_) | ErrorKind::Json(_) | ErrorKind::Utf8(_) => {
            AuthFailure::Malformed(malformed_reason(&err))
        }
        _ => AuthFailure::Invalid(err.to_string()),
    }
}

/// Why a token cannot even be read, in words (the library's `InvalidToken` is an enum name).
fn malformed_reason(err: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match err.kind() {
        ErrorKind::InvalidToken => "it is not a JWT (three base64url parts separated by dots)".to_owned(),
        ErrorKind::Base64(_) => "a part is not base64url".to_owned(),
        ErrorKind::Json(_) => "its header or claims are not the JSON expected".to_owned(),
        ErrorKind::Utf8(_) => "a part is not UTF-8".to_owned(),
        _ => err.to_string(),
    }
}

fn caller_from(claims: AccessClaims) -> Result<Caller, AuthFailure> {
    let tenant_id = TenantId::new(claims.tid).map_err(|e| AuthFailure::Invalid(format!("tid claim: {e}")))?;
    let subject =
        RecipientId::new(claims.sub).map_err(|e| AuthFailure::Invalid(format!("sub claim: {e}")))?;
    let kind = CallerKind::parse(&claims.kind).ok_or_else(|| {
        AuthFailure::Invalid(format!("kind claim {:?} is not agent, publisher or admin", claims.kind))
    })?;
    let scopes = claims.scope.split_whitespace().map(str::to_owned).collect();
    Ok(Caller { tenant_id, subject, kind, scopes })
}

/// Checks every scope is known and returns them space-separated, sorted and deduplicated.
pub fn normalize_scope(scope: &str) -> Result<String, ApiError> {
    let mut scopes = BTreeSet::new();
    for scope in scope.split_whitespace() {
        let known = scope.parse::<Scope>().is_ok()
            || scope.strip_prefix(Scope::TENANT_READ_PREFIX).is_some_and(|t| TenantId::new(t).is_ok());
        if !known {
            return Err(ApiError::invalid_field(
                "scope",
                format!("names unknown scope {scope:?}; known: {}", Scope::all_joined()),
            ));
        }
        scopes.insert(scope);
    }
    Ok(scopes.into_iter().collect::<Vec<_>>().join(" "))
}

fn new_refresh_token() -> (String, [u8; 32]) {
    let token = format!("rt_{}", hex::encode(inbox_store::random_bytes::<32>()));
    let hash = Sha256::digest(token.as_bytes()).into();
    (token, hash)
}
