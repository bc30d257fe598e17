-- The A2A face of each agent (issue 44): tasks that A2A clients start by sending a message to
-- an agent, kept beside the inbox event that carries the message to the agent.
--
-- a2a_task is a task's current view: its state and status (the agent's message, or a note the
-- server wrote, such as why it failed), its artifacts and history as JSON arrays, and the
-- inbox event of its latest message (event_id), whose acknowledgement moves it. last_seq is
-- the newest entry of its update log; status_seq the entry that set the status;
-- reported_event_id the event whose acknowledgement reported the outcome (so a repeat of that
-- acknowledgement is known for one).
CREATE TABLE IF NOT EXISTS a2a_task (
    tenant_id           VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    task_id             VARCHAR(36)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    agent_id            VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    sender_id           VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    context_id          VARCHAR(256) NOT NULL,
    event_id            BINARY(16)   NOT NULL,
    state               VARCHAR(24)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status_seq          BIGINT       NOT NULL,
    status_message_json MEDIUMTEXT   NULL,
    status_note         VARCHAR(512) NULL,
    status_at_utc       BIGINT       NOT NULL,
    artifacts_json      MEDIUMTEXT   NOT NULL,
    history_json        MEDIUMTEXT   NOT NULL,
    last_seq            BIGINT       NOT NULL,
    reported_event_id   BINARY(16)   NULL,
    created_at_utc      BIGINT       NOT NULL,
    PRIMARY KEY (tenant_id, task_id),
    KEY ix_a2a_task_event (event_id),
    -- ListTasks: a sender's tasks of one agent, newest status first (an operator's: all).
    KEY ix_a2a_task_sender (tenant_id, agent_id, sender_id, status_at_utc, task_id),
    KEY ix_a2a_task_agent (tenant_id, agent_id, status_at_utc, task_id),
    -- The reconciler: tasks an inbox event's state may still move.
    KEY ix_a2a_task_open (state, status_at_utc)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Every change of a task, in order (seq from 1): what SubscribeToTask replays after a cursor
-- and push notifications deliver. kind is task (the first entry), status or artifact.
CREATE TABLE IF NOT EXISTS a2a_task_update (
    tenant_id      VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    task_id        VARCHAR(36)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    seq            BIGINT       NOT NULL,
    kind           VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    state          VARCHAR(24)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    message_json   MEDIUMTEXT   NULL,
    note           VARCHAR(512) NULL,
    artifact_json  MEDIUMTEXT   NULL,
    created_at_utc BIGINT       NOT NULL,
    PRIMARY KEY (tenant_id, task_id, seq)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Idempotent sends: one row per message an agent was sent, keyed by SHA-256 of the sender and
-- its messageId, naming the task and event it made.
CREATE TABLE IF NOT EXISTS a2a_message (
    tenant_id      VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    agent_id       VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    message_key    BINARY(32)   NOT NULL,
    task_id        VARCHAR(36)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    event_id       BINARY(16)   NOT NULL,
    created_at_utc BIGINT       NOT NULL,
    PRIMARY KEY (tenant_id, agent_id, message_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- A task's webhooks (push notifications). secret is sealed (the secrets subsystem): the token
-- and the Authorization credentials. delivered_seq is the last update delivered; a config is
-- due at next_attempt_at_utc while updates wait (the far future when caught up), held by one
-- node until lease_until_utc while it sends.
CREATE TABLE IF NOT EXISTS a2a_push_config (
    tenant_id            VARCHAR(64)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    task_id              VARCHAR(36)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    config_id            VARCHAR(64)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    url                  VARCHAR(2048) NOT NULL,
    auth_scheme          VARCHAR(64)   NULL,
    secret               BLOB          NOT NULL,
    secret_sealed_by     VARCHAR(64)   CHARACTER SET ascii COLLATE ascii_bin NULL,
    delivered_seq        BIGINT        NOT NULL,
    next_attempt_at_utc  BIGINT        NOT NULL,
    failed_attempts      INT           NOT NULL,
    consecutive_failures INT           NOT NULL,
    lease_until_utc      BIGINT        NULL,
    last_error           VARCHAR(512)  NULL,
    created_at_utc       BIGINT        NOT NULL,
    updated_at_utc       BIGINT        NOT NULL,
    PRIMARY KEY (tenant_id, task_id, config_id),
    KEY ix_a2a_push_due (next_attempt_at_utc)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
