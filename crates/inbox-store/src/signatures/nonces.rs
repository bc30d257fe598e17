//! Remembered signature nonces: a verified signature's nonce is stored until the signature
//! could no longer verify, in the database so that a replay sent to any node is refused.
//! The primary key decides: the second insert of the same nonce fails, atomically, however
//! many nodes race.
//!
//! A signed call's nonce is remembered before the call changes anything. A busy node records
//! the nonces of many concurrent calls in one statement ([`Signatures::remember_nonces`]), so
//! replay protection costs a fraction of a statement per call, not one of its own.

use std::collections::HashSet;

use inbox_core::UnixMillis;

use super::{Signatures, queries};
use crate::StoreError;
use crate::db::Arg;

/// A verified signature's nonce, to be recorded before the operation it signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignatureNonce {
    /// What the caller derives from tenant, key id and nonce (the table's primary key).
    pub hash: [u8; 32],
    /// When the signature stops verifying: until then the nonce is refused a second time.
    pub until: UnixMillis,
}

/// Nonces one statement of [`Signatures::remember_nonces`] inserts at most.
const NONCES_PER_STATEMENT: usize = 128;

/// Rows one clean-up statement deletes at most.
pub const NONCES_DELETE_MAX: u32 = 1_000;

/// Whether a nonce was new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceUse {
    /// First use: remembered until the given time.
    Fresh,
    /// Seen before, and still inside its window: a replay.
    Replayed,
}

impl Signatures<'_> {
    /// Remembers `nonce_hash` (the caller hashes tenant, key id and nonce together) until
    /// `until`, or reports that it is already remembered. A row left behind by a signature
    /// whose window has passed does not count: the scavenger may not have deleted it yet.
    pub async fn remember_nonce(
        self,
        nonce_hash: &[u8; 32],
        until: UnixMillis,
    ) -> Result<NonceUse, StoreError> {
        let now = self.store.now();
        let mut pooled = self.store.pools().writer().await?;
        let mut conn = pooled.conn();
        let args = [Arg::Bytes(nonce_hash), Arg::I64(until.get())];
        for _ in 0..2 {
            match conn.execute(queries::INSERT_NONCE, &args).await {
                Ok(_) => return Ok(NonceUse::Fresh),
                Err(StoreError::Database(sqlx::Error::Database(db))) if db.is_unique_violation() => {}
                Err(err) => return Err(err),
            }
            let stale = conn
                .execute(queries::DELETE_STALE_NONCE, &[Arg::Bytes(nonce_hash), Arg::I64(now.get())])
                .await?;
            if stale.rows_affected == 0 {
                break;
            }
        }
        Ok(NonceUse::Replayed)
    }

    /// Remembers many nonces at once, with an answer for each, in request order. The usual
    /// batch, where every nonce is new, is one statement; a batch with a replay, a row left
    /// from a passed window, or any error is retried one nonce at a time, so each nonce gets
    /// its own answer. Of a nonce listed twice, the second is a replay.
    pub async fn remember_nonces(self, nonces: &[SignatureNonce]) -> Vec<Result<NonceUse, StoreError>> {
        let mut answers: Vec<Result<NonceUse, StoreError>> =
            nonces.iter().map(|_| Ok(NonceUse::Replayed)).collect();
        let mut seen = HashSet::with_capacity(nonces.len());
        let first_uses: Vec<usize> = (0..nonces.len()).filter(|&i| seen.insert(nonces[i].hash)).collect();
        for chunk in first_uses.chunks(NONCES_PER_STATEMENT) {
            let batch: Vec<&SignatureNonce> = chunk.iter().map(|&i| &nonces[i]).collect();
            if self.insert_new_nonces(&batch).await.is_ok() {
                for &i in chunk {
                    answers[i] = Ok(NonceUse::Fresh);
                }
                continue;
            }
            // The failed statement inserted nothing: decide nonce by nonce.
            for &i in chunk {
                answers[i] = self.remember_nonce(&nonces[i].hash, nonces[i].until).await;
            }
        }
        answers
    }

    /// One multi-row insert: all of `batch`, or (on any duplicate) none of it.
    async fn insert_new_nonces(self, batch: &[&SignatureNonce]) -> Result<(), StoreError> {
        let sql = queries::insert_nonces(batch.len());
        let args: Vec<Arg> =
            batch.iter().flat_map(|nonce| [Arg::Bytes(&nonce.hash), Arg::I64(nonce.until.get())]).collect();
        let mut pooled = self.store.pools().writer().await?;
        pooled.conn().execute(&sql, &args).await?;
        Ok(())
    }

    /// Deletes up to `limit` nonces whose window ended before `cutoff`; returns how many.
    pub async fn delete_expired_nonces(self, cutoff: UnixMillis, limit: u32) -> Result<u64, StoreError> {
        let limit = limit.clamp(1, NONCES_DELETE_MAX);
        let mut pooled = self.store.pools().writer().await?;
        let mut conn = pooled.conn();
        // MySQL refuses LIMIT inside an IN subquery, so the keys are read first.
        let hashes: Vec<Vec<u8>> = conn
            .fetch_all(queries::EXPIRED_NONCES, &[Arg::I64(cutoff.get()), Arg::I64(i64::from(limit))])
            .await?
            .iter()
            .map(|row| row.bytes("nonce_hash"))
            .collect::<Result<_, _>>()?;
        if hashes.is_empty() {
            return Ok(0);
        }
        let mut args: Vec<Arg> = hashes.iter().map(|hash| Arg::Bytes(hash)).collect();
        args.push(Arg::I64(cutoff.get()));
        let done = conn.execute(&queries::delete_expired_nonces(hashes.len()), &args).await?;
        Ok(done.rows_affected)
    }
}
