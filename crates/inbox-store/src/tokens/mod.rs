//! What identity needs from the database: the keys the service signs access tokens with,
//! shared by every node, and rotating refresh tokens with reuse detection.

mod queries;
mod sign_outs;

use inbox_core::{TenantId, UnixMillis};

use crate::Field;
use crate::db::{Arg, DbConnection, DbRow};
use crate::entropy::random_bytes;
use crate::secrets::{Place, SecretBytes, seal_for_storing};
use crate::store::with_retries;
use crate::{SqlStore, StoreError};

/// How the service signs its access tokens; a key has one, for its whole life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenAlgorithm {
    /// HMAC-SHA256 with a shared 256-bit secret: only the service can verify.
    #[default]
    Hs256,
    /// Ed25519 signatures: anyone can verify with the public key (`/.well-known/jwks.json`).
    EdDsa,
}

impl TokenAlgorithm {
    /// The JWS `alg` name, also what the `algorithm` column holds.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenAlgorithm::Hs256 => "HS256",
            TokenAlgorithm::EdDsa => "EdDSA",
        }
    }

    pub fn parse(text: &str) -> Option<TokenAlgorithm> {
        match text {
            "HS256" => Some(TokenAlgorithm::Hs256),
            "EdDSA" => Some(TokenAlgorithm::EdDsa),
            _ => None,
        }
    }
}

/// A key the service signs its own tokens with: an HS256 secret or an Ed25519 private key
/// (its 32-byte seed), sealed in the database and wiped from memory when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey {
    pub key_id: String,
    pub algorithm: TokenAlgorithm,
    pub secret: SecretBytes,
    /// An Ed25519 key's public key (32 bytes), published at `/.well-known/jwks.json`.
    pub public_key: Option<Vec<u8>>,
    pub created_at: UnixMillis,
    pub retires_at: Option<UnixMillis>,
    /// Before this time the key only verifies; an older key keeps signing until then, so
    /// every node has loaded the new key before the first token signed with it arrives.
    pub activates_at: Option<UnixMillis>,
}

impl SigningKey {
    /// Whether the key still verifies tokens at `now`.
    pub fn is_live(&self, now: UnixMillis) -> bool {
        self.retires_at.is_none_or(|retires| retires > now)
    }

    /// Whether new tokens may be signed with it at `now`.
    pub fn signs_at(&self, now: UnixMillis) -> bool {
        self.is_live(now) && self.activates_at.is_none_or(|activates| activates <= now)
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("key_id", &self.key_id)
            .field("algorithm", &self.algorithm)
            .field("created_at", &self.created_at)
            .field("retires_at", &self.retires_at)
            .field("activates_at", &self.activates_at)
            .finish()
    }
}

/// Who a refresh token was issued to, and what it may ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefreshGrant {
    pub family_id: String,
    pub tenant_id: TenantId,
    pub subject: String,
    pub kind: String,
    pub scope: String,
}

/// Why a refresh token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RefreshRefusal {
    #[error("the refresh token is unknown, expired or revoked")]
    Invalid,
    #[error("the refresh token was already used; its whole family is now revoked")]
    Reused,
}

const PURPOSE_ACCESS: &str = "access_token";

/// The shortest rotation overlap. A node that read the keys at `t` knows every retirement
/// taking effect before `t` plus this much (a later rotation retires keys no sooner), so it
/// may verify with what it read until then, and must read again after.
pub const SIGNING_KEY_OVERLAP_MS_MIN: u64 = 1_000;

/// The tokens subsystem of one [`SqlStore`]: the access-token signing keys and refresh tokens.
/// A borrowed view, free to make: `store.tokens()`.
#[derive(Debug, Clone, Copy)]
pub struct Tokens<'s> {
    pub(crate) store: &'s SqlStore,
}

impl SqlStore {
    /// Signing keys and refresh tokens, see [`Tokens`].
    pub fn tokens(&self) -> Tokens<'_> {
        Tokens { store: self }
    }
}

impl Tokens<'_> {
    /// The access-token signing keys not yet retired, newest first. Creates the first key
    /// (of `algorithm`) when there is none, so a fresh install needs no set-up.
    pub async fn access_signing_keys(self, algorithm: TokenAlgorithm) -> Result<Vec<SigningKey>, StoreError> {
        let keys = self.load_signing_keys().await?;
        if !keys.is_empty() {
            return Ok(keys);
        }
        self.create_signing_key(algorithm).await?;
        self.load_signing_keys().await
    }

    /// Adds a new signing key of `algorithm`; it becomes the one new tokens are signed with.
    pub async fn create_signing_key(self, algorithm: TokenAlgorithm) -> Result<SigningKey, StoreError> {
        let now = self.store.now();
        let key = new_signing_key(now, algorithm, None);
        let mut pooled = self.store.pools().writer().await?;
        let mut conn = pooled.conn();
        self.insert_signing_key(&mut conn, &key).await?;
        Ok(key)
    }

    /// Stores `key` with its secret sealed.
    async fn insert_signing_key(
        self,
        conn: &mut DbConnection<'_>,
        key: &SigningKey,
    ) -> Result<(), StoreError> {
        let place = Place::signing_key(PURPOSE_ACCESS, &key.key_id, key.algorithm.as_str());
        let (sealed, sealed_by) = seal_for_storing(self.store, conn, &place, &key.secret).await?;
        conn.execute(
            queries::INSERT_SIGNING_KEY,
            &[
                Arg::Str(&key.key_id),
                Arg::Str(PURPOSE_ACCESS),
                Arg::Str(key.algorithm.as_str()),
                Arg::Bytes(&sealed),
                Arg::Str(&sealed_by),
                Arg::OptBytes(key.public_key.as_deref()),
                Arg::I64(key.created_at.get()),
                Arg::OptI64(key.activates_at.map(UnixMillis::get)),
            ],
        )
        .await?;
        Ok(())
    }

    async fn load_signing_keys(self) -> Result<Vec<SigningKey>, StoreError> {
        let now = self.store.now();
        let mut pooled = self.store.pools().reader().await?;
        let rows = pooled
            .conn()
            .fetch_all(queries::LIVE_SIGNING_KEYS, &[Arg::Str(PURPOSE_ACCESS), Arg::I64(now.get())])
            .await?;
        rows.iter().map(|row| self.signing_key_from_row(row)).collect()
    }

    fn signing_key_from_row(self, row: &DbRow) -> Result<SigningKey, StoreError> {
        let key_id = row.string("key_id")?;
        let algorithm_name = row.string("algorithm")?;
        let algorithm = TokenAlgorithm::parse(&algorithm_name).ok_or_else(|| {
            StoreError::Corrupt(format!("signing_key {key_id}: algorithm {algorithm_name:?}"))
        })?;
        let place = Place::signing_key(PURPOSE_ACCESS, &key_id, &algorithm_name);
        let sealed_by = row.opt_string("secret_sealed_by")?;
        let secret = self.store.sealer().open(&place, sealed_by.as_deref(), &row.bytes("secret")?)?;
        Ok(SigningKey {
            key_id,
            algorithm,
            secret,
            public_key: row.opt_bytes("public_key")?,
            created_at: UnixMillis(row.i64("created_at_utc")?),
            retires_at: row.opt_i64("retires_at_utc")?.map(UnixMillis),
            activates_at: row.opt_i64("activates_at_utc")?.map(UnixMillis),
        })
    }

    /// Rotates the access-token keys without a restart: adds a new key of `algorithm` that
    /// signs from `activation_ms` on, and retires every older live key `overlap_ms` from now
    /// (keys already retiring sooner keep their time). Until then old tokens verify and, before
    /// activation, old keys keep signing. Returns the new key and how many older keys got a
    /// retirement.
    pub async fn rotate_signing_keys(
        self,
        overlap_ms: u64,
        activation_ms: u64,
        algorithm: TokenAlgorithm,
    ) -> Result<(SigningKey, u64), StoreError> {
        if overlap_ms < SIGNING_KEY_OVERLAP_MS_MIN {
            return Err(StoreError::invalid(
                Field::SigningKeyOverlap,
                format!(
                    "must be at least {SIGNING_KEY_OVERLAP_MS_MIN} ms, so every node learns of the retirement first"
                ),
            ));
        }
        let now = self.store.now();
        let retire_at = now.plus_ms(overlap_ms);
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        // Keys are ordered by creation time: the new one must sort first even when a rotation
        // follows the previous one within the same millisecond.
        let newest = conn
            .fetch_optional(queries::NEWEST_SIGNING_KEY, &[Arg::Str(PURPOSE_ACCESS)])
            .await?
            .map(|row| row.opt_i64("n"))
            .transpose()?
            .flatten();
        let created_at = UnixMillis(newest.map_or(now.get(), |newest| now.get().max(newest + 1)));
        let key = new_signing_key(created_at, algorithm, Some(now.plus_ms(activation_ms.min(overlap_ms))));
        let retired = conn
            .execute(
                queries::RETIRE_SIGNING_KEYS,
                &[Arg::I64(retire_at.get()), Arg::Str(PURPOSE_ACCESS), Arg::I64(retire_at.get())],
            )
            .await?
            .rows_affected;
        self.insert_signing_key(&mut conn, &key).await?;
        tx.commit().await?;
        Ok((key, retired))
    }

    /// Stores a new refresh token (by hash) in `family_id`, valid for `ttl_ms`.
    pub async fn insert_refresh_token(
        self,
        token_hash: &[u8; 32],
        grant: &RefreshGrant,
        ttl_ms: u64,
    ) -> Result<(), StoreError> {
        let now = self.store.now();
        let mut pooled = self.store.pools().writer().await?;
        pooled
            .conn()
            .execute(queries::INSERT_REFRESH_TOKEN, &refresh_token_args(token_hash, grant, now, ttl_ms))
            .await?;
        Ok(())
    }

    /// Spends a refresh token and stores its successor in the same family, atomically.
    /// A token presented a second time revokes every token of its family.
    pub async fn rotate_refresh_token(
        self,
        presented_hash: &[u8; 32],
        successor_hash: &[u8; 32],
        ttl_ms: u64,
    ) -> Result<Result<RefreshGrant, RefreshRefusal>, StoreError> {
        with_retries!(self.store, self.rotate_once(presented_hash, successor_hash, ttl_ms))
    }

    async fn rotate_once(
        self,
        presented_hash: &[u8; 32],
        successor_hash: &[u8; 32],
        ttl_ms: u64,
    ) -> Result<Result<RefreshGrant, RefreshRefusal>, StoreError> {
        let now = self.store.now();
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        let sql = queries::LOCK_REFRESH_TOKEN.text(self.store.dialect());
        let Some(row) = conn.fetch_optional(sql, &[Arg::Bytes(presented_hash)]).await? else {
            return Ok(Err(RefreshRefusal::Invalid));
        };
        let grant = RefreshGrant {
            family_id: row.string("family_id")?,
            tenant_id: TenantId::new(row.string("tenant_id")?)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            subject: row.string("subject")?,
            kind: row.string("kind")?,
            scope: row.string("scope")?,
        };
        if row.opt_i64("revoked_at_utc")?.is_some() || row.i64("expires_at_utc")? <= now.get() {
            return Ok(Err(RefreshRefusal::Invalid));
        }
        if row.opt_i64("used_at_utc")?.is_some() {
            conn.execute(queries::REVOKE_REFRESH_FAMILY, &[Arg::I64(now.get()), Arg::Str(&grant.family_id)])
                .await?;
            tx.commit().await?;
            return Ok(Err(RefreshRefusal::Reused));
        }
        conn.execute(queries::SPEND_REFRESH_TOKEN, &[Arg::I64(now.get()), Arg::Bytes(presented_hash)])
            .await?;
        conn.execute(queries::INSERT_REFRESH_TOKEN, &refresh_token_args(successor_hash, &grant, now, ttl_ms))
            .await?;
        tx.commit().await?;
        Ok(Ok(grant))
    }
}

/// A fresh key of `algorithm`, created at `created_at` (an id sorting after older keys').
fn new_signing_key(
    created_at: UnixMillis,
    algorithm: TokenAlgorithm,
    activates_at: Option<UnixMillis>,
) -> SigningKey {
    let secret = SecretBytes::new(random_bytes::<32>().to_vec());
    let public_key = match algorithm {
        TokenAlgorithm::Hs256 => None,
        TokenAlgorithm::EdDsa => {
            let seed: &[u8; 32] = secret.as_slice().try_into().expect("a 32-byte seed");
            let signing = inbox_trust::message_signatures::SigningKey::ed25519_from_seed(seed);
            signing.verifying_key().ed25519_public_bytes().map(|bytes| bytes.to_vec())
        }
    };
    SigningKey {
        key_id: format!("k{}-{}", created_at.get(), hex::encode(random_bytes::<4>())),
        algorithm,
        secret,
        public_key,
        created_at,
        retires_at: None,
        activates_at,
    }
}

/// `INSERT_REFRESH_TOKEN`'s arguments: a new token of `grant`'s family, issued now.
fn refresh_token_args<'a>(
    token_hash: &'a [u8],
    grant: &'a RefreshGrant,
    now: UnixMillis,
    ttl_ms: u64,
) -> [Arg<'a>; 8] {
    [
        Arg::Bytes(token_hash),
        Arg::Str(&grant.family_id),
        Arg::Str(grant.tenant_id.as_str()),
        Arg::Str(&grant.subject),
        Arg::Str(&grant.kind),
        Arg::Str(&grant.scope),
        Arg::I64(now.get()),
        Arg::I64(now.plus_ms(ttl_ms).get()),
    ]
}
