//! Remembered signature nonces: a verified signature's nonce is stored until the signature
//! could no longer verify, in the database so that a replay sent to any node is refused.
//! The primary key decides: the second insert of the same nonce fails, atomically, however
//! many nodes race.
//!
//! A signed claim records its nonce inside its own transaction ([`SignatureNonce`]): one
//! commit for both, and a replay claims nothing because the duplicate key fails the whole
//! transaction. Other signed calls remember their nonce on its own, before they change
//! anything ([`SqlStore::remember_nonce`]).

use inbox_core::UnixMillis;

use crate::db::{Arg, DbConnection};
use crate::dialect::placeholders;
use crate::{SqlStore, StoreError};

/// A verified signature's nonce, to be recorded with the operation it signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignatureNonce {
    /// What the caller derives from tenant, key id and nonce (the table's primary key).
    pub hash: [u8; 32],
    /// When the signature stops verifying: until then the nonce is refused a second time.
    pub until: UnixMillis,
}

/// Rows one clean-up statement deletes at most.
pub const NONCES_DELETE_MAX: u32 = 1_000;

/// Records `nonce` on `conn` (inside the caller's transaction), or fails with
/// [`StoreError::NonceReplayed`] when it is already remembered. A row whose window has passed
/// is deleted and does not count. Inside a transaction, a failed insert undoes only itself.
pub(crate) async fn record_nonce(
    conn: &mut DbConnection<'_>,
    nonce: &SignatureNonce,
    now: UnixMillis,
) -> Result<(), StoreError> {
    let insert = "INSERT INTO signature_nonce (nonce_hash, expires_at_utc) VALUES (?, ?)";
    let args = [Arg::Bytes(&nonce.hash), Arg::I64(nonce.until.get())];
    for _ in 0..2 {
        match conn.execute(insert, &args).await {
            Ok(_) => return Ok(()),
            Err(StoreError::Database(sqlx::Error::Database(db))) if db.is_unique_violation() => {}
            Err(err) => return Err(err),
        }
        let stale = conn
            .execute(
                "DELETE FROM signature_nonce WHERE nonce_hash = ? AND expires_at_utc < ?",
                &[Arg::Bytes(&nonce.hash), Arg::I64(now.get())],
            )
            .await?;
        if stale.rows_affected == 0 {
            return Err(StoreError::NonceReplayed);
        }
    }
    Err(StoreError::NonceReplayed)
}

/// Whether a nonce was new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceUse {
    /// First use: remembered until the given time.
    Fresh,
    /// Seen before, and still inside its window: a replay.
    Replayed,
}

impl SqlStore {
    /// Remembers `nonce_hash` (the caller hashes tenant, key id and nonce together) until
    /// `until`, or reports that it is already remembered. A row left behind by a signature
    /// whose window has passed does not count: the scavenger may not have deleted it yet.
    pub async fn remember_nonce(
        &self,
        nonce_hash: &[u8; 32],
        until: UnixMillis,
    ) -> Result<NonceUse, StoreError> {
        let now = self.now();
        let mut pooled = self.pools().writer().await?;
        let nonce = SignatureNonce { hash: *nonce_hash, until };
        match record_nonce(&mut pooled.conn(), &nonce, now).await {
            Ok(()) => Ok(NonceUse::Fresh),
            Err(StoreError::NonceReplayed) => Ok(NonceUse::Replayed),
            Err(err) => Err(err),
        }
    }

    /// Deletes up to `limit` nonces whose window ended before `cutoff`; returns how many.
    pub async fn delete_expired_nonces(&self, cutoff: UnixMillis, limit: u32) -> Result<u64, StoreError> {
        let limit = limit.clamp(1, NONCES_DELETE_MAX);
        let mut pooled = self.pools().writer().await?;
        let mut conn = pooled.conn();
        // MySQL refuses LIMIT inside an IN subquery, so the keys are read first.
        let hashes: Vec<Vec<u8>> = conn
            .fetch_all(
                "SELECT nonce_hash FROM signature_nonce WHERE expires_at_utc < ? LIMIT ?",
                &[Arg::I64(cutoff.get()), Arg::I64(i64::from(limit))],
            )
            .await?
            .iter()
            .map(|row| row.bytes("nonce_hash"))
            .collect::<Result<_, _>>()?;
        if hashes.is_empty() {
            return Ok(0);
        }
        let mut args: Vec<Arg> = hashes.iter().map(|hash| Arg::Bytes(hash)).collect();
        args.push(Arg::I64(cutoff.get()));
        let done = conn
            .execute(
                &format!(
                    "DELETE FROM signature_nonce WHERE nonce_hash IN ({}) AND expires_at_utc < ?",
                    placeholders(hashes.len())
                ),
                &args,
            )
            .await?;
        Ok(done.rows_affected)
    }
}
