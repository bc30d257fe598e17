-- agent-inbox schema for SQLite 3.37+ (the embedded default); the same tables as on MySQL.
-- Times are UTC milliseconds since the Unix epoch (INTEGER), bound by the store from one
-- clock corrected to the database server's. Identifiers are ASCII and compared byte for byte.

CREATE TABLE IF NOT EXISTS agent_inbox (
    tenant_id                  TEXT NOT NULL,
    recipient_kind             TEXT NOT NULL,
    recipient_id               TEXT NOT NULL,
    inbox_seq                  INTEGER NOT NULL,
    event_id                   BLOB NOT NULL,
    event_type                 TEXT NOT NULL,
    priority                   INTEGER NOT NULL,
    availability_at_utc        INTEGER NOT NULL,
    expires_at_utc             INTEGER NULL,
    deduplication_key          TEXT NULL,
    ack_state                  TEXT NOT NULL,
    delivery_attempts          INTEGER NOT NULL,
    max_attempts               INTEGER NOT NULL,
    visibility_lease_until_utc INTEGER NULL,
    lease_token_hash           BLOB NULL,
    lease_owner_session_id     TEXT NULL,
    next_retry_at_utc          INTEGER NULL,
    dead_letter_state          TEXT NOT NULL,
    company_id                 TEXT NULL,
    workspace_id               TEXT NULL,
    project_id                 TEXT NULL,
    meeting_room_id            TEXT NULL,
    message_id                 TEXT NULL,
    routing_decision_id        TEXT NULL,
    memory_update_id           TEXT NULL,
    assignment_id              TEXT NULL,
    payload_json               TEXT NULL,
    payload_ref_type           TEXT NULL,
    payload_ref_id             TEXT NULL,
    created_at_utc             INTEGER NOT NULL,
    acked_at_utc               INTEGER NULL,
    updated_at_utc             INTEGER NOT NULL,
    terminal_at_utc            INTEGER NULL,
    last_error                 TEXT NULL,
    -- Poll after cursor is a range scan of this key.
    PRIMARY KEY (tenant_id, recipient_kind, recipient_id, inbox_seq)
    -- Claim: equality on inbox and state, then already in claim order (priority, seq); the
    -- visibility times are checked on the rows read, which stops after LIMIT claimable rows.
) STRICT, WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS agent_inbox_archive (
    tenant_id                  TEXT NOT NULL,
    recipient_kind             TEXT NOT NULL,
    recipient_id               TEXT NOT NULL,
    inbox_seq                  INTEGER NOT NULL,
    event_id                   BLOB NOT NULL,
    event_type                 TEXT NOT NULL,
    priority                   INTEGER NOT NULL,
    availability_at_utc        INTEGER NOT NULL,
    expires_at_utc             INTEGER NULL,
    deduplication_key          TEXT NULL,
    ack_state                  TEXT NOT NULL,
    delivery_attempts          INTEGER NOT NULL,
    max_attempts               INTEGER NOT NULL,
    visibility_lease_until_utc INTEGER NULL,
    lease_token_hash           BLOB NULL,
    lease_owner_session_id     TEXT NULL,
    next_retry_at_utc          INTEGER NULL,
    dead_letter_state          TEXT NOT NULL,
    company_id                 TEXT NULL,
    workspace_id               TEXT NULL,
    project_id                 TEXT NULL,
    meeting_room_id            TEXT NULL,
    message_id                 TEXT NULL,
    routing_decision_id        TEXT NULL,
    memory_update_id           TEXT NULL,
    assignment_id              TEXT NULL,
    payload_json               TEXT NULL,
    payload_ref_type           TEXT NULL,
    payload_ref_id             TEXT NULL,
    created_at_utc             INTEGER NOT NULL,
    acked_at_utc               INTEGER NULL,
    updated_at_utc             INTEGER NOT NULL,
    terminal_at_utc            INTEGER NULL,
    last_error                 TEXT NULL,
    archived_at_utc            INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, recipient_kind, recipient_id, inbox_seq)
) STRICT, WITHOUT ROWID;

-- One row per recipient: the sequence allocator (its row lock orders commits) and the
-- retention boundary.
CREATE TABLE IF NOT EXISTS inbox_head (
    tenant_id                  TEXT NOT NULL,
    recipient_kind             TEXT NOT NULL,
    recipient_id               TEXT NOT NULL,
    head_seq                   INTEGER NOT NULL,
    oldest_available_seq       INTEGER NOT NULL,
    updated_at_utc             INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, recipient_kind, recipient_id)
) STRICT, WITHOUT ROWID;

-- One row per publish, written in the publishing transaction; notifiers tail it after commit.
-- recipient_heads is a JSON array of [recipient_kind, recipient_id, head_seq].
CREATE TABLE IF NOT EXISTS outbox_signal (
    outbox_id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id                  TEXT NOT NULL,
    signal_type                TEXT NOT NULL,
    recipient_heads            TEXT NOT NULL,
    n_recipients               INTEGER NOT NULL,
    status                     TEXT NOT NULL,
    attempt_count              INTEGER NOT NULL,
    next_attempt_at_utc        INTEGER NULL,
    last_error_code            TEXT NULL,
    created_at_utc             INTEGER NOT NULL
) STRICT;

CREATE TABLE IF NOT EXISTS agent_session (
    session_id                 TEXT NOT NULL,
    tenant_id                  TEXT NOT NULL,
    agent_id                   TEXT NOT NULL,
    device_id                  TEXT NULL,
    transport                  TEXT NOT NULL,
    connected_at_utc           INTEGER NOT NULL,
    last_heartbeat_at_utc      INTEGER NOT NULL,
    last_seen_seq              INTEGER NOT NULL,
    auth_subject               TEXT NOT NULL,
    status                     TEXT NOT NULL,
    PRIMARY KEY (session_id)
) STRICT, WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS callback_registration (
    registration_id            TEXT NOT NULL,
    tenant_id                  TEXT NOT NULL,
    recipient_id               TEXT NOT NULL,
    callback_url               TEXT NOT NULL,
    verification_state         TEXT NOT NULL,
    auth_mode                  TEXT NOT NULL,
    key_id                     TEXT NOT NULL,
    secret_hash                BLOB NULL,
    public_key                 TEXT NULL,
    replay_window_seconds      INTEGER NOT NULL,
    max_rate_per_minute        INTEGER NOT NULL,
    created_at_utc             INTEGER NOT NULL,
    rotates_after_utc          INTEGER NULL,
    PRIMARY KEY (registration_id)
) STRICT, WITHOUT ROWID;

CREATE UNIQUE INDEX IF NOT EXISTS uq_agent_inbox_event ON agent_inbox (event_id);
CREATE UNIQUE INDEX IF NOT EXISTS uq_agent_inbox_dedup ON agent_inbox (tenant_id, recipient_kind, recipient_id, deduplication_key);
CREATE INDEX IF NOT EXISTS ix_agent_inbox_claim ON agent_inbox (tenant_id, recipient_kind, recipient_id, ack_state, priority, inbox_seq);
CREATE INDEX IF NOT EXISTS ix_agent_inbox_lease ON agent_inbox (ack_state, visibility_lease_until_utc);
CREATE INDEX IF NOT EXISTS ix_agent_inbox_expiry ON agent_inbox (ack_state, expires_at_utc);
CREATE INDEX IF NOT EXISTS ix_agent_inbox_terminal ON agent_inbox (terminal_at_utc);
CREATE INDEX IF NOT EXISTS ix_agent_inbox_archive_event ON agent_inbox_archive (event_id);
CREATE INDEX IF NOT EXISTS ix_agent_inbox_archive_time ON agent_inbox_archive (archived_at_utc);
CREATE INDEX IF NOT EXISTS ix_outbox_signal_created ON outbox_signal (created_at_utc);
CREATE INDEX IF NOT EXISTS ix_agent_session_agent ON agent_session (tenant_id, agent_id);
CREATE INDEX IF NOT EXISTS ix_agent_session_heartbeat ON agent_session (status, last_heartbeat_at_utc);
CREATE INDEX IF NOT EXISTS ix_callback_registration_recipient ON callback_registration (tenant_id, recipient_id);
