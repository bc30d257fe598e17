-- agent-inbox schema for MySQL 8.0+ and MariaDB 10.6+.
-- Times are UTC milliseconds since the Unix epoch (BIGINT), bound by the store from one
-- clock corrected to the database server's. Identifiers are ASCII and compared byte for byte.

CREATE TABLE IF NOT EXISTS agent_inbox (
    tenant_id                  VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    recipient_kind             VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    recipient_id               VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    inbox_seq                  BIGINT       NOT NULL,
    event_id                   BINARY(16)   NOT NULL,
    event_type                 VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    priority                   TINYINT      NOT NULL,
    availability_at_utc        BIGINT       NOT NULL,
    expires_at_utc             BIGINT       NULL,
    deduplication_key          VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin NULL,
    ack_state                  VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    delivery_attempts          INT          NOT NULL,
    max_attempts               INT          NOT NULL,
    visibility_lease_until_utc BIGINT       NULL,
    lease_token_hash           BINARY(32)   NULL,
    lease_owner_session_id     VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    next_retry_at_utc          BIGINT       NULL,
    dead_letter_state          VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    company_id                 VARCHAR(128) NULL,
    workspace_id               VARCHAR(128) NULL,
    project_id                 VARCHAR(128) NULL,
    meeting_room_id            VARCHAR(128) NULL,
    message_id                 VARCHAR(128) NULL,
    routing_decision_id        VARCHAR(128) NULL,
    memory_update_id           VARCHAR(128) NULL,
    assignment_id              VARCHAR(128) NULL,
    payload_json               MEDIUMTEXT   NULL,
    payload_ref_type           VARCHAR(64)  NULL,
    payload_ref_id             VARCHAR(128) NULL,
    created_at_utc             BIGINT       NOT NULL,
    acked_at_utc               BIGINT       NULL,
    updated_at_utc             BIGINT       NOT NULL,
    terminal_at_utc            BIGINT       NULL,
    last_error                 VARCHAR(200) NULL,
    -- Poll after cursor is a range scan of this key.
    PRIMARY KEY (tenant_id, recipient_kind, recipient_id, inbox_seq),
    UNIQUE KEY uq_agent_inbox_event (event_id),
    UNIQUE KEY uq_agent_inbox_dedup (tenant_id, recipient_kind, recipient_id, deduplication_key),
    -- Claim: equality on inbox and state, then already in claim order (priority, seq); the
    -- visibility times are checked on the rows read, which stops after LIMIT claimable rows.
    KEY ix_agent_inbox_claim (tenant_id, recipient_kind, recipient_id, ack_state, priority, inbox_seq),
    KEY ix_agent_inbox_lease (ack_state, visibility_lease_until_utc),
    KEY ix_agent_inbox_expiry (ack_state, expires_at_utc),
    KEY ix_agent_inbox_terminal (terminal_at_utc)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS agent_inbox_archive (
    tenant_id                  VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    recipient_kind             VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    recipient_id               VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    inbox_seq                  BIGINT       NOT NULL,
    event_id                   BINARY(16)   NOT NULL,
    event_type                 VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    priority                   TINYINT      NOT NULL,
    availability_at_utc        BIGINT       NOT NULL,
    expires_at_utc             BIGINT       NULL,
    deduplication_key          VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin NULL,
    ack_state                  VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    delivery_attempts          INT          NOT NULL,
    max_attempts               INT          NOT NULL,
    visibility_lease_until_utc BIGINT       NULL,
    lease_token_hash           BINARY(32)   NULL,
    lease_owner_session_id     VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    next_retry_at_utc          BIGINT       NULL,
    dead_letter_state          VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    company_id                 VARCHAR(128) NULL,
    workspace_id               VARCHAR(128) NULL,
    project_id                 VARCHAR(128) NULL,
    meeting_room_id            VARCHAR(128) NULL,
    message_id                 VARCHAR(128) NULL,
    routing_decision_id        VARCHAR(128) NULL,
    memory_update_id           VARCHAR(128) NULL,
    assignment_id              VARCHAR(128) NULL,
    payload_json               MEDIUMTEXT   NULL,
    payload_ref_type           VARCHAR(64)  NULL,
    payload_ref_id             VARCHAR(128) NULL,
    created_at_utc             BIGINT       NOT NULL,
    acked_at_utc               BIGINT       NULL,
    updated_at_utc             BIGINT       NOT NULL,
    terminal_at_utc            BIGINT       NULL,
    last_error                 VARCHAR(200) NULL,
    archived_at_utc            BIGINT       NOT NULL,
    PRIMARY KEY (tenant_id, recipient_kind, recipient_id, inbox_seq),
    KEY ix_agent_inbox_archive_event (event_id),
    KEY ix_agent_inbox_archive_time (archived_at_utc)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per recipient: the sequence allocator (its row lock orders commits) and the
-- retention boundary.
CREATE TABLE IF NOT EXISTS inbox_head (
    tenant_id            VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    recipient_kind       VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    recipient_id         VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    head_seq             BIGINT       NOT NULL,
    oldest_available_seq BIGINT       NOT NULL,
    updated_at_utc       BIGINT       NOT NULL,
    PRIMARY KEY (tenant_id, recipient_kind, recipient_id)
) ENGINE = InnoDB;

-- One row per publish, written in the publishing transaction; notifiers tail it after commit.
-- recipient_heads is a JSON array of [recipient_kind, recipient_id, head_seq].
CREATE TABLE IF NOT EXISTS outbox_signal (
    outbox_id           BIGINT       NOT NULL AUTO_INCREMENT,
    tenant_id           VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    signal_type         VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    recipient_heads     MEDIUMTEXT   NOT NULL,
    n_recipients        INT          NOT NULL,
    status              VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    attempt_count       INT          NOT NULL,
    next_attempt_at_utc BIGINT       NULL,
    last_error_code     VARCHAR(64)  NULL,
    created_at_utc      BIGINT       NOT NULL,
    PRIMARY KEY (outbox_id),
    KEY ix_outbox_signal_created (created_at_utc)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS agent_session (
    session_id            VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    tenant_id             VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    agent_id              VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    device_id             VARCHAR(128) NULL,
    transport             VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    connected_at_utc      BIGINT       NOT NULL,
    last_heartbeat_at_utc BIGINT       NOT NULL,
    last_seen_seq         BIGINT       NOT NULL,
    auth_subject          VARCHAR(128) NOT NULL,
    status                VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    PRIMARY KEY (session_id),
    KEY ix_agent_session_agent (tenant_id, agent_id),
    KEY ix_agent_session_heartbeat (status, last_heartbeat_at_utc)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS callback_registration (
    registration_id       VARCHAR(64)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    tenant_id             VARCHAR(64)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    recipient_id          VARCHAR(128)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    callback_url          VARCHAR(2048) NOT NULL,
    verification_state    VARCHAR(32)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    auth_mode             VARCHAR(32)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    key_id                VARCHAR(64)   NOT NULL,
    secret_hash           VARBINARY(64) NULL,
    public_key            TEXT          NULL,
    replay_window_seconds INT           NOT NULL,
    max_rate_per_minute   INT           NOT NULL,
    created_at_utc        BIGINT        NOT NULL,
    rotates_after_utc     BIGINT        NULL,
    PRIMARY KEY (registration_id),
    KEY ix_callback_registration_recipient (tenant_id, recipient_id)
) ENGINE = InnoDB;
