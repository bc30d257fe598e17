//! Agent sessions: one row per device or process that subscribed, with its transport and the
//! last sequence it reported. Sessions that stop heartbeating are marked gone.

use inbox_core::{InboxSeq, RecipientId, SessionId, TenantId, UnixMillis};

use crate::db::Arg;
use crate::record::seq_arg;
use crate::{SqlStore, StoreError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    pub session_id: SessionId,
    pub tenant_id: TenantId,
    pub agent_id: RecipientId,
    pub device_id: Option<String>,
    pub transport: String,
    pub last_seen_seq: InboxSeq,
    pub auth_subject: String,
}

impl SqlStore {
    /// Records a new session as connected now.
    pub async fn open_session(&self, session: &SessionRecord) -> Result<UnixMillis, StoreError> {
        if session.device_id.as_ref().is_some_and(|d| d.is_empty() || d.len() > 128 || d.chars().any(char::is_control)) {
            return Err(StoreError::invalid("device_id", "must be 1 to 128 bytes without control characters"));
        }
        let now = self.now();
        let mut pooled = self.pools().writer().await?;
        pooled
            .conn()
            .execute(
                "INSERT INTO agent_session (session_id, tenant_id, agent_id, device_id, transport, connected_at_utc, \
                 last_heartbeat_at_utc, last_seen_seq, auth_subject, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'active')",
                &[
                    Arg::Str(session.session_id.as_str()),
                    Arg::Str(session.tenant_id.as_str()),
                    Arg::Str(session.agent_id.as_str()),
                    Arg::OptStr(session.device_id.as_deref()),
                    Arg::Str(&session.transport),
                    Arg::I64(now.get()),
                    Arg::I64(now.get()),
                    seq_arg(session.last_seen_seq),
                    Arg::Str(&session.auth_subject),
                ],
            )
            .await?;
        Ok(now)
    }

    /// Marks sessions silent since before `cutoff` as gone; returns how many.
    pub async fn mark_silent_sessions_gone(&self, cutoff: UnixMillis) -> Result<u64, StoreError> {
        let mut pooled = self.pools().writer().await?;
        let done = pooled
            .conn()
            .execute(
                "UPDATE agent_session SET status = 'gone' WHERE status = 'active' AND last_heartbeat_at_utc < ?",
                &[Arg::I64(cutoff.get())],
            )
            .await?;
        Ok(done.rows_affected)
    }
}
