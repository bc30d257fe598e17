//! Agent sessions: one row per device or process that subscribed, with its transport and the
//! last sequence it reported. Streams and the session heartbeat touch it; sessions that stop
//! heartbeating are marked gone.

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

/// A sign of life from a session, see [`SqlStore::touch_session`].
#[derive(Debug, Clone)]
pub struct SessionTouch<'a> {
    pub session_id: &'a SessionId,
    pub tenant_id: &'a TenantId,
    pub agent_id: &'a RecipientId,
    pub transport: Option<&'a str>,
    pub last_seen_seq: Option<InboxSeq>,
}

fn seq_i64(seq: InboxSeq) -> i64 {
    i64::try_from(seq.get()).unwrap_or(i64::MAX)
}

impl SqlStore {
    /// Records a new session as connected now.
    pub async fn open_session(&self, session: &SessionRecord) -> Result<UnixMillis, StoreError> {
        if session
            .device_id
            .as_ref()
            .is_some_and(|d| d.is_empty() || d.len() > 128 || d.chars().any(char::is_control))
        {
            return Err(StoreError::invalid(
                "device_id",
                "must be 1 to 128 bytes without control characters",
            ));
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

    /// Records that a session is alive now (a stream connected or beat, or the agent called
    /// the session heartbeat), optionally with its transport and the last sequence it saw. A
    /// session swept as gone comes back to `active`. `false` when no such session belongs to
    /// this agent.
    pub async fn touch_session(&self, touch: &SessionTouch<'_>) -> Result<bool, StoreError> {
        if let Some(transport) = touch.transport {
            if transport.is_empty()
                || transport.len() > 16
                || !transport.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
            {
                return Err(StoreError::invalid("transport", "must be 1 to 16 lower-case letters or '-'"));
            }
        }
        let now = self.now();
        let mut pooled = self.pools().writer().await?;
        let done = pooled
            .conn()
            .execute(
                "UPDATE agent_session SET last_heartbeat_at_utc = ?, status = 'active', \
                 transport = COALESCE(?, transport), \
                 last_seen_seq = CASE WHEN ? IS NULL OR ? < last_seen_seq THEN last_seen_seq ELSE ? END \
                 WHERE session_id = ? AND tenant_id = ? AND agent_id = ?",
                &[
                    Arg::I64(now.get()),
                    Arg::OptStr(touch.transport),
                    Arg::OptI64(touch.last_seen_seq.map(seq_i64)),
                    Arg::OptI64(touch.last_seen_seq.map(seq_i64)),
                    Arg::OptI64(touch.last_seen_seq.map(seq_i64)),
                    Arg::Str(touch.session_id.as_str()),
                    Arg::Str(touch.tenant_id.as_str()),
                    Arg::Str(touch.agent_id.as_str()),
                ],
            )
            .await?;
        // MySQL counts rows changed, not matched, and every touch changes the heartbeat time
        // unless two land in the same millisecond; check existence then.
        if done.rows_affected > 0 {
            return Ok(true);
        }
        let found = pooled
            .conn()
            .fetch_optional(
                "SELECT 1 AS one FROM agent_session WHERE session_id = ? AND tenant_id = ? AND agent_id = ?",
                &[
                    Arg::Str(touch.session_id.as_str()),
                    Arg::Str(touch.tenant_id.as_str()),
                    Arg::Str(touch.agent_id.as_str()),
                ],
            )
            .await?;
        Ok(found.is_some())
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
