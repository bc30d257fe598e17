//! Every SQL statement of the `sessions` subsystem, by name: sessions, the newest session
//! per agent, and stream tickets and cookies.

use crate::dialect::Sql;

/// Creates the agent's newest-session row if missing, keeping (and on MySQL locking) an
/// existing one: the lock that orders an agent's subscribes (tenant, agent, session, opened at).
pub(super) const CLAIM_NEWEST_SESSION: Sql = Sql {
    mysql: "INSERT INTO agent_active_session (tenant_id, agent_id, session_id, opened_at_utc) VALUES (?, ?, ?, ?) \
            ON DUPLICATE KEY UPDATE tenant_id = tenant_id",
    sqlite: "INSERT INTO agent_active_session (tenant_id, agent_id, session_id, opened_at_utc) VALUES (?, ?, ?, ?) \
             ON CONFLICT (tenant_id, agent_id) DO NOTHING",
};

/// A hashed stream ticket or cookie with its grant.
pub(super) const INSERT_STREAM_CREDENTIAL: &str = "INSERT INTO stream_ticket (ticket_hash, purpose, tenant_id, subject, kind, scope, session_id, \
    created_at_utc, expires_at_utc, used_at_utc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)";

/// Spends an unused, unexpired ticket once (now, hash, now).
pub(super) const SPEND_TICKET: &str = "UPDATE stream_ticket SET used_at_utc = ? WHERE ticket_hash = ? AND purpose = 'ticket' \
    AND used_at_utc IS NULL AND expires_at_utc > ?";

/// What a stream credential grants.
pub(super) const CREDENTIAL_GRANT: &str = "SELECT tenant_id, subject, kind, scope, session_id FROM stream_ticket \
    WHERE ticket_hash = ? AND purpose = ? AND expires_at_utc > ?";

/// Stream credentials past their expiry (cutoff).
pub(super) const DELETE_EXPIRED_CREDENTIALS: &str = "DELETE FROM stream_ticket WHERE expires_at_utc < ?";

/// Names a session its agent's newest (session, opened at, tenant, agent).
pub(super) const MOVE_NEWEST_SESSION: &str =
    "UPDATE agent_active_session SET session_id = ?, opened_at_utc = ? WHERE tenant_id = ? AND agent_id = ?";

/// A subscribed session.
pub(super) const INSERT_SESSION: &str = "INSERT INTO agent_session (session_id, tenant_id, agent_id, device_id, transport, connected_at_utc, \
    last_heartbeat_at_utc, last_seen_seq, auth_subject, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'active')";

/// The agent's newest session, for a session of that agent.
pub(super) const SESSION_STANDING: &str = "SELECT newest.session_id AS newest_session_id FROM agent_session s \
    LEFT JOIN agent_active_session newest ON newest.tenant_id = s.tenant_id AND newest.agent_id = s.agent_id \
    WHERE s.session_id = ? AND s.tenant_id = ? AND s.agent_id = ?";

/// A sign of life from a session.
pub(super) const TOUCH_SESSION: &str = "UPDATE agent_session SET last_heartbeat_at_utc = ?, \
    status = CASE WHEN status = 'superseded' THEN status ELSE 'active' END, \
    transport = COALESCE(?, transport), \
    last_seen_seq = CASE WHEN ? IS NULL OR ? < last_seen_seq THEN last_seen_seq ELSE ? END \
    WHERE session_id = ? AND tenant_id = ? AND agent_id = ?";

/// Whether the session belongs to the agent (session, tenant, agent).
pub(super) const SESSION_EXISTS: &str =
    "SELECT 1 AS one FROM agent_session WHERE session_id = ? AND tenant_id = ? AND agent_id = ?";

/// Columns of `agent_session` read into a `SessionView`.
macro_rules! view_columns {
    () => {
        "session_id, agent_id, device_id, transport, connected_at_utc, last_heartbeat_at_utc, last_seen_seq, \
         auth_subject, status, superseded_by_session_id, superseded_at_utc"
    };
}

/// A tenant's sessions, most recently heard from first (tenant, limit).
pub(super) const TENANT_SESSIONS: &str = concat!(
    "SELECT ",
    view_columns!(),
    " FROM agent_session WHERE tenant_id = ? ORDER BY last_heartbeat_at_utc DESC, session_id LIMIT ?"
);

/// One agent's sessions, most recently heard from first (tenant, agent, limit).
pub(super) const AGENT_SESSIONS: &str = concat!(
    "SELECT ",
    view_columns!(),
    " FROM agent_session WHERE tenant_id = ? AND agent_id = ? ORDER BY last_heartbeat_at_utc DESC, session_id LIMIT ?"
);

/// Active sessions silent since the cutoff become gone (cutoff).
pub(super) const MARK_SILENT_GONE: &str =
    "UPDATE agent_session SET status = 'gone' WHERE status = 'active' AND last_heartbeat_at_utc < ?";

/// Whether the tenant's policy allows one active session per agent (tenant).
pub(super) const SINGLE_ACTIVE_SESSION: &str =
    "SELECT single_active_session FROM tenant_policy WHERE tenant_id = ?";

/// Marks the agent's other active sessions superseded.
pub(super) const SUPERSEDE_OTHERS: &str = "UPDATE agent_session SET status = 'superseded', superseded_by_session_id = ?, superseded_at_utc = ? \
    WHERE tenant_id = ? AND agent_id = ? AND session_id <> ? AND status <> 'superseded'";

/// The `session.superseded` signal every node's notifier reads.
pub(super) const INSERT_SUPERSEDED_SIGNAL: &str = "INSERT INTO outbox_signal (tenant_id, signal_type, recipient_heads, n_recipients, status, \
    attempt_count, created_at_utc) VALUES (?, ?, ?, 1, 'pending', 0, ?)";
