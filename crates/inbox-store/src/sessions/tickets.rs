//! Stream credentials for browsers, which cannot set an `Authorization` header on
//! `EventSource` and should not put a long-lived bearer token in a URL: a single-use ticket
//! valid for seconds, or the value of an HttpOnly cookie. Only a SHA-256 hash is stored, in
//! the database, so a credential minted on one node is redeemed on any other, exactly once.

use inbox_core::{SessionId, TenantId, UnixMillis};

use super::{Sessions, queries};
use crate::Field;
use crate::StoreError;
use crate::db::Arg;

/// What a stream credential is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamCredential {
    /// Redeemed once, atomically; a second presentation is refused.
    Ticket,
    /// Presented by the browser on every (re)connection until it expires.
    Cookie,
}

impl StreamCredential {
    fn as_str(self) -> &'static str {
        match self {
            StreamCredential::Ticket => "ticket",
            StreamCredential::Cookie => "cookie",
        }
    }
}

/// Who a stream credential speaks for: copied from the access token that minted it, so a
/// stream has exactly the scopes the token had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamGrant {
    pub tenant_id: TenantId,
    pub subject: String,
    pub kind: String,
    pub scope: String,
    /// The agent session the stream belongs to, when the minting request named one.
    pub session_id: Option<SessionId>,
}

/// Longest life of any stream credential, a guard against a caller's mistake.
const CREDENTIAL_TTL_MS_MAX: u64 = inbox_core::limits::CREDENTIAL_TTL_SECONDS_MAX * 1_000;

impl Sessions<'_> {
    /// Stores a credential by its hash, valid for `ttl_ms`; returns when it expires.
    pub async fn insert_stream_credential(
        self,
        hash: &[u8; 32],
        credential: StreamCredential,
        grant: &StreamGrant,
        ttl_ms: u64,
    ) -> Result<UnixMillis, StoreError> {
        if ttl_ms == 0 || ttl_ms > CREDENTIAL_TTL_MS_MAX {
            return Err(StoreError::invalid(
                Field::CredentialTtl,
                format!("is {ttl_ms} ms; it must be 1 ms to 24 h"),
            ));
        }
        let now = self.store.now();
        let expires_at = now.plus_ms(ttl_ms);
        let mut pooled = self.store.pools().writer().await?;
        pooled
            .conn()
            .execute(
                queries::INSERT_STREAM_CREDENTIAL,
                &[
                    Arg::Bytes(hash),
                    Arg::Str(credential.as_str()),
                    Arg::Str(grant.tenant_id.as_str()),
                    Arg::Str(&grant.subject),
                    Arg::Str(&grant.kind),
                    Arg::Str(&grant.scope),
                    Arg::OptStr(grant.session_id.as_ref().map(SessionId::as_str)),
                    Arg::I64(now.get()),
                    Arg::I64(expires_at.get()),
                ],
            )
            .await?;
        Ok(expires_at)
    }

    /// Redeems a credential. A ticket is spent by one conditional UPDATE, so of two nodes
    /// presented the same ticket at once exactly one wins; a cookie only has to be unexpired.
    /// `None` when the credential is unknown, expired or (a ticket) already spent.
    pub async fn redeem_stream_credential(
        self,
        hash: &[u8; 32],
        credential: StreamCredential,
    ) -> Result<Option<StreamGrant>, StoreError> {
        let now = self.store.now();
        let mut pooled = self.store.pools().writer().await?;
        let mut conn = pooled.conn();
        if credential == StreamCredential::Ticket {
            let spent = conn
                .execute(queries::SPEND_TICKET, &[Arg::I64(now.get()), Arg::Bytes(hash), Arg::I64(now.get())])
                .await?;
            if spent.rows_affected != 1 {
                return Ok(None);
            }
        }
        let row = conn
            .fetch_optional(
                queries::CREDENTIAL_GRANT,
                &[Arg::Bytes(hash), Arg::Str(credential.as_str()), Arg::I64(now.get())],
            )
            .await?;
        let Some(row) = row else { return Ok(None) };
        let corrupt = |e: inbox_core::IdError| StoreError::Corrupt(format!("stream_ticket: {e}"));
        Ok(Some(StreamGrant {
            tenant_id: TenantId::new(row.string("tenant_id")?).map_err(corrupt)?,
            subject: row.string("subject")?,
            kind: row.string("kind")?,
            scope: row.string("scope")?,
            session_id: row.opt_string("session_id")?.map(SessionId::new).transpose().map_err(corrupt)?,
        }))
    }

    /// Deletes credentials that expired before `cutoff`; returns how many.
    pub async fn delete_expired_stream_credentials(self, cutoff: UnixMillis) -> Result<u64, StoreError> {
        let mut pooled = self.store.pools().writer().await?;
        let done =
            pooled.conn().execute(queries::DELETE_EXPIRED_CREDENTIALS, &[Arg::I64(cutoff.get())]).await?;
        Ok(done.rows_affected)
    }
}
