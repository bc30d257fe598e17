//! Remembered signature nonces: a verified signature's nonce is stored until the signature
//! could no longer verify, in the database so that a replay sent to any node is refused.
//! The primary key decides: the second insert of the same nonce fails, atomically, however
//! many nodes race.

use inbox_core::UnixMillis;

use crate::db::Arg;
use crate::dialect::placeholders;
use crate::{SqlStore, StoreError};

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
        let mut conn = pooled.conn();
        let insert = "INSERT INTO signature_nonce (nonce_hash, expires_at_utc) VALUES (?, ?)";
        let args = [Arg::Bytes(nonce_hash), Arg::I64(until.get())];
        for _ in 0..2 {
            match conn.execute(insert, &args).await {
                Ok(_) => return Ok(NonceUse::Fresh),
                Err(StoreError::Database(sqlx::Error::Database(db))) if db.is_unique_violation() => {}
                Err(err) => return Err(err),
            }
            let stale = conn
                .execute(
                    "DELETE FROM signature_nonce WHERE nonce_hash = ? AND expires_at_utc < ?",
                    &[Arg::Bytes(nonce_hash), Arg::I64(now.get())],
                )
                .await?;
            if stale.rows_affected == 0 {
                return Ok(NonceUse::Replayed);
            }
        }
        Ok(NonceUse::Replayed)
    }

    /// [`Self::remember_nonce`] for many nonces in one statement (one commit), in order. The
    /// server gathers the nonces of concurrent requests into one call, so signed requests pay
    /// a share of one commit each instead of a commit each. The same hash twice in `entries`
    /// is fresh once, then a replay.
    pub async fn remember_nonces(
        &self,
        entries: &[([u8; 32], UnixMillis)],
    ) -> Result<Vec<NonceUse>, StoreError> {
        let mut outcomes = vec![NonceUse::Replayed; entries.len()];
        let mut firsts: Vec<usize> = Vec::with_capacity(entries.len());
        for (i, (hash, _)) in entries.iter().enumerate() {
            if !firsts.iter().any(|&j| entries[j].0 == *hash) {
                firsts.push(i);
            }
        }
        if firsts.is_empty() {
            return Ok(outcomes);
        }
        let mut sql = String::from("INSERT INTO signature_nonce (nonce_hash, expires_at_utc) VALUES ");
        crate::dialect::push_repeated(&mut sql, firsts.len(), "(?, ?)");
        let mut args = Vec::with_capacity(firsts.len() * 2);
        for &i in &firsts {
            args.push(Arg::Bytes(&entries[i].0));
            args.push(Arg::I64(entries[i].1.get()));
        }
        let inserted = {
            let mut pooled = self.pools().writer().await?;
            pooled.conn().execute(&sql, &args).await
        };
        match inserted {
            Ok(_) => {
                for &i in &firsts {
                    outcomes[i] = NonceUse::Fresh;
                }
            }
            // One of them was seen before (or a stale row is in the way): decide one by one.
            Err(StoreError::Database(sqlx::Error::Database(db))) if db.is_unique_violation() => {
                for &i in &firsts {
                    outcomes[i] = self.remember_nonce(&entries[i].0, entries[i].1).await?;
                }
            }
            Err(err) => return Err(err),
        }
        Ok(outcomes)
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
