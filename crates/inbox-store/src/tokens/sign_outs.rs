//! Sign-ins ended before their tokens expire. A console token carries a sign-in id; signing
//! out lists its hash until the token's expiry, and every node's verifier asks here before it
//! trusts such a token, so a copied cookie stops working on every node at once.

use inbox_core::UnixMillis;

use super::{Tokens, queries};
use crate::StoreError;
use crate::db::Arg;

impl Tokens<'_> {
    /// Lists the sign-in (by the SHA-256 of its id) as signed out until `until`, when its token
    /// expires anyway. Signing out twice is the same as once.
    pub async fn sign_out(self, sign_in_hash: &[u8; 32], until: UnixMillis) -> Result<(), StoreError> {
        let mut pooled = self.store.pools().writer().await?;
        let mut conn = pooled.conn();
        let sql = queries::INSERT_SIGNED_OUT.text(conn.dialect());
        conn.execute(sql, &[Arg::Bytes(sign_in_hash.as_slice()), Arg::I64(until.get())]).await?;
        Ok(())
    }

    /// Whether the sign-in was signed out.
    pub async fn is_signed_out(self, sign_in_hash: &[u8; 32]) -> Result<bool, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        Ok(pooled
            .conn()
            .fetch_optional(queries::IS_SIGNED_OUT, &[Arg::Bytes(sign_in_hash.as_slice())])
            .await?
            .is_some())
    }

    /// Deletes the sign-outs of tokens that expired before `cutoff`; returns how many.
    pub async fn delete_expired_sign_outs(self, cutoff: UnixMillis) -> Result<u64, StoreError> {
        let mut pooled = self.store.pools().writer().await?;
        let done =
            pooled.conn().execute(queries::DELETE_EXPIRED_SIGN_OUTS, &[Arg::I64(cutoff.get())]).await?;
        Ok(done.rows_affected)
    }
}
