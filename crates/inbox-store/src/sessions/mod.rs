//! Agent sessions: one row per device or process that subscribed, with its transport and the
//! last sequence it reported. Streams and the session heartbeat touch it; sessions that stop
//! heartbeating are marked gone.
//!
//! Every subscribe also names itself the agent's newest session (`agent_active_session`), so
//! seed 001's single-active-session policy can be decided from the database on any node. With
//! the policy on, a subscribe marks the agent's earlier sessions `superseded` in the same
//! transaction and writes a `session.superseded` signal that every node's notifier reads, so
//! open streams of those sessions end promptly wherever they are. What a superseded session may
//! still do is the server's decision (`session_policy.rs`); the store only records who is newest.

mod queries;
mod tickets;

pub use tickets::{StreamCredential, StreamGrant};

use inbox_core::{InboxSeq, Recipient, RecipientId, SessionId, TenantId, UnixMillis};

use crate::Field;
use crate::db::{Arg, DbConnection};
use crate::inbox::record::seq_arg;
use crate::store::with_retries;
use crate::{SqlStore, StoreError};

/// The `signal_type` of the `outbox_signal` row a superseding subscribe writes; its
/// `recipient_heads` names the agent (with head 0: it reports no new work).
pub const SESSION_SUPERSEDED_SIGNAL: &str = "session.superseded";

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

pub use inbox_core::limits::SESSIONS_LIST_MAX;

/// A session as operators see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionView {
    pub session_id: SessionId,
    pub agent_id: RecipientId,
    pub device_id: Option<String>,
    /// The transport it last reported (`sse`, `long-poll`, `websocket`, ...).
    pub transport: String,
    pub connected_at: UnixMillis,
    pub last_heartbeat_at: UnixMillis,
    pub last_seen_seq: InboxSeq,
    /// The token subject that opened it.
    pub auth_subject: String,
    /// `active`, `gone` (silent past the sweep) or `superseded`.
    pub status: String,
    pub superseded_by: Option<SessionId>,
    pub superseded_at: Option<UnixMillis>,
}

/// What a subscribe did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenedSession {
    pub connected_at: UnixMillis,
    /// Earlier sessions of the agent this one superseded (always 0 without the policy).
    pub superseded: u64,
}

/// Where a session stands among its agent's sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionStanding {
    /// No such session belongs to this agent.
    Unknown,
    /// The agent's newest session (or one opened before the store tracked the newest).
    Newest,
    /// A later subscribe of the same agent opened `newest`. Under the policy this session is
    /// also marked `superseded`; without it, it only matters once the policy is turned on.
    Older { newest: SessionId },
}

/// A sign of life from a session, see [`Sessions::touch`].
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

/// The sessions subsystem of one [`SqlStore`]: agent sessions, stream tickets and cookie credentials.
/// A borrowed view, free to make: `store.sessions()`.
#[derive(Debug, Clone, Copy)]
pub struct Sessions<'s> {
    pub(crate) store: &'s SqlStore,
}

impl SqlStore {
    /// Subscribed sessions, stream tickets and cookies, see [`Sessions`].
    pub fn sessions(&self) -> Sessions<'_> {
        Sessions { store: self }
    }
}

pub use inbox_core::limits::DEVICE_ID_BYTES_MAX;

impl Sessions<'_> {
    /// Records a new session as connected now and makes it the agent's newest. When the tenant's
    /// policy is single-active-session, the agent's earlier sessions are marked superseded (by
    /// this one) in the same transaction; concurrent subscribes of one agent serialize on its
    /// `agent_active_session` row, so exactly one of them ends up newest.
    pub async fn open(self, session: &SessionRecord) -> Result<OpenedSession, StoreError> {
        if session
            .device_id
            .as_ref()
            .is_some_and(|d| d.is_empty() || d.len() > DEVICE_ID_BYTES_MAX || d.chars().any(char::is_control))
        {
            return Err(StoreError::invalid(
                Field::DeviceId,
                format!("must be 1 to {DEVICE_ID_BYTES_MAX} bytes without control characters"),
            ));
        }
        with_retries!(self.store, self.open_session_once(session))
    }

    async fn open_session_once(self, session: &SessionRecord) -> Result<OpenedSession, StoreError> {
        let now = self.store.now();
        let (tenant_id, agent_id) = (session.tenant_id.as_str(), session.agent_id.as_str());
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        // The agent's row first: it is the lock that orders this agent's subscribes.
        let claim_newest = queries::CLAIM_NEWEST_SESSION.text(conn.dialect());
        let newest_args = [
            Arg::Str(tenant_id),
            Arg::Str(agent_id),
            Arg::Str(session.session_id.as_str()),
            Arg::I64(now.get()),
        ];
        conn.execute(claim_newest, &newest_args).await?;
        conn.execute(
            queries::MOVE_NEWEST_SESSION,
            &[
                Arg::Str(session.session_id.as_str()),
                Arg::I64(now.get()),
                Arg::Str(tenant_id),
                Arg::Str(agent_id),
            ],
        )
        .await?;
        conn.execute(
            queries::INSERT_SESSION,
            &[
                Arg::Str(session.session_id.as_str()),
                Arg::Str(tenant_id),
                Arg::Str(agent_id),
                Arg::OptStr(session.device_id.as_deref()),
                Arg::Str(&session.transport),
                Arg::I64(now.get()),
                Arg::I64(now.get()),
                seq_arg(session.last_seen_seq),
                Arg::Str(&session.auth_subject),
            ],
        )
        .await?;
        let superseded = if single_active_session(&mut conn, &session.tenant_id).await? {
            supersede_others(&mut conn, session, now).await?
        } else {
            0
        };
        tx.commit().await?;
        Ok(OpenedSession { connected_at: now, superseded })
    }

    /// Where `session_id` stands among the agent's sessions: one primary-key read of each table.
    pub async fn standing(
        self,
        tenant_id: &TenantId,
        agent_id: &RecipientId,
        session_id: &SessionId,
    ) -> Result<SessionStanding, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let row = pooled
            .conn()
            .fetch_optional(
                queries::SESSION_STANDING,
                &[Arg::Str(session_id.as_str()), Arg::Str(tenant_id.as_str()), Arg::Str(agent_id.as_str())],
            )
            .await?;
        let Some(row) = row else { return Ok(SessionStanding::Unknown) };
        Ok(match row.opt_string("newest_session_id")? {
            Some(newest) if newest != session_id.as_str() => SessionStanding::Older {
                newest: SessionId::new(newest)
                    .map_err(|e| StoreError::Corrupt(format!("agent_active_session: {e}")))?,
            },
            // No row: every session of the agent predates migration 0008.
            _ => SessionStanding::Newest,
        })
    }

    /// Records that a session is alive now (a stream connected or beat, or the agent called
    /// the session heartbeat), optionally with its transport and the last sequence it saw. A
    /// session swept as gone comes back to `active`; a superseded one stays superseded. `false`
    /// when no such session belongs to this agent.
    pub async fn touch(self, touch: &SessionTouch<'_>) -> Result<bool, StoreError> {
        if let Some(transport) = touch.transport {
            if transport.is_empty()
                || transport.len() > 16
                || !transport.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
            {
                return Err(StoreError::invalid(
                    Field::SessionTransport,
                    "must be 1 to 16 lower-case letters or '-'",
                ));
            }
        }
        let now = self.store.now();
        let mut pooled = self.store.pools().writer().await?;
        let done = pooled
            .conn()
            .execute(
                queries::TOUCH_SESSION,
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
                queries::SESSION_EXISTS,
                &[
                    Arg::Str(touch.session_id.as_str()),
                    Arg::Str(touch.tenant_id.as_str()),
                    Arg::Str(touch.agent_id.as_str()),
                ],
            )
            .await?;
        Ok(found.is_some())
    }

    /// A tenant's sessions (or one agent's), most recently heard from first, at most `limit`.
    pub async fn list(
        self,
        tenant_id: &TenantId,
        agent_id: Option<&RecipientId>,
        limit: u32,
    ) -> Result<Vec<SessionView>, StoreError> {
        let max = SESSIONS_LIST_MAX;
        if limit == 0 || limit > max {
            return Err(StoreError::invalid(
                Field::Limit,
                format!("is {limit}; ask for between 1 and {max}"),
            ));
        }
        let mut pooled = self.store.pools().reader().await?;
        let limit = Arg::I64(i64::from(limit));
        let rows = match agent_id {
            None => {
                pooled
                    .conn()
                    .fetch_all(queries::TENANT_SESSIONS, &[Arg::Str(tenant_id.as_str()), limit])
                    .await?
            }
            Some(agent) => {
                let args = [Arg::Str(tenant_id.as_str()), Arg::Str(agent.as_str()), limit];
                pooled.conn().fetch_all(queries::AGENT_SESSIONS, &args).await?
            }
        };
        rows.iter().map(session_view_from_row).collect()
    }

    /// Marks sessions silent since before `cutoff` as gone; returns how many.
    pub async fn mark_silent_gone(self, cutoff: UnixMillis) -> Result<u64, StoreError> {
        let mut pooled = self.store.pools().writer().await?;
        let done = pooled.conn().execute(queries::MARK_SILENT_GONE, &[Arg::I64(cutoff.get())]).await?;
        Ok(done.rows_affected)
    }
}

fn session_view_from_row(row: &crate::db::DbRow) -> Result<SessionView, StoreError> {
    let corrupt = |e: inbox_core::IdError| StoreError::Corrupt(format!("agent_session: {e}"));
    Ok(SessionView {
        session_id: SessionId::new(row.string("session_id")?).map_err(corrupt)?,
        agent_id: RecipientId::new(row.string("agent_id")?).map_err(corrupt)?,
        device_id: row.opt_string("device_id")?,
        transport: row.string("transport")?,
        connected_at: UnixMillis(row.i64("connected_at_utc")?),
        last_heartbeat_at: UnixMillis(row.i64("last_heartbeat_at_utc")?),
        last_seen_seq: crate::inbox::record::seq(row.i64("last_seen_seq")?)?,
        auth_subject: row.string("auth_subject")?,
        status: row.string("status")?,
        superseded_by: row
            .opt_string("superseded_by_session_id")?
            .map(SessionId::new)
            .transpose()
            .map_err(corrupt)?,
        superseded_at: row.opt_i64("superseded_at_utc")?.map(UnixMillis),
    })
}

/// Whether the tenant runs the single-active-session policy, read inside the subscribe's
/// transaction so a policy change and a subscribe never disagree.
async fn single_active_session(
    conn: &mut DbConnection<'_>,
    tenant_id: &TenantId,
) -> Result<bool, StoreError> {
    let row = conn.fetch_optional(queries::SINGLE_ACTIVE_SESSION, &[Arg::Str(tenant_id.as_str())]).await?;
    Ok(row.map(|r| r.i64("single_active_session")).transpose()?.unwrap_or(0) != 0)
}

/// Marks the agent's other sessions superseded by `session` and, when there were any, writes
/// the signal that wakes their streams on every node. Returns how many were marked.
async fn supersede_others(
    conn: &mut DbConnection<'_>,
    session: &SessionRecord,
    now: UnixMillis,
) -> Result<u64, StoreError> {
    let done = conn
        .execute(
            queries::SUPERSEDE_OTHERS,
            &[
                Arg::Str(session.session_id.as_str()),
                Arg::I64(now.get()),
                Arg::Str(session.tenant_id.as_str()),
                Arg::Str(session.agent_id.as_str()),
                Arg::Str(session.session_id.as_str()),
            ],
        )
        .await?;
    if done.rows_affected > 0 {
        let recipient = Recipient::agent(session.agent_id.clone());
        let heads = serde_json::to_string(&[(recipient.kind.as_str(), recipient.id.as_str(), 0u64)])
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        conn.execute(
            queries::INSERT_SUPERSEDED_SIGNAL,
            &[
                Arg::Str(session.tenant_id.as_str()),
                Arg::Str(SESSION_SUPERSEDED_SIGNAL),
                Arg::Str(&heads),
                Arg::I64(now.get()),
            ],
        )
        .await?;
    }
    Ok(done.rows_affected)
}
