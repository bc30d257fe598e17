-- The A2A face of each agent. See the MySQL file for the reasons behind each column.

CREATE TABLE IF NOT EXISTS a2a_task (
    tenant_id           TEXT NOT NULL,
    task_id             TEXT NOT NULL,
    agent_id            TEXT NOT NULL,
    sender_id           TEXT NOT NULL,
    context_id          TEXT NOT NULL,
    event_id            BLOB NOT NULL,
    state               TEXT NOT NULL,
    status_seq          INTEGER NOT NULL,
    status_message_json TEXT NULL,
    status_note         TEXT NULL,
    status_at_utc       INTEGER NOT NULL,
    artifacts_json      TEXT NOT NULL,
    history_json        TEXT NOT NULL,
    last_seq            INTEGER NOT NULL,
    reported_event_id   BLOB NULL,
    created_at_utc      INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, task_id)
) STRICT, WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS a2a_task_update (
    tenant_id      TEXT NOT NULL,
    task_id        TEXT NOT NULL,
    seq            INTEGER NOT NULL,
    kind           TEXT NOT NULL,
    state          TEXT NOT NULL,
    message_json   TEXT NULL,
    note           TEXT NULL,
    artifact_json  TEXT NULL,
    created_at_utc INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, task_id, seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS a2a_message (
    tenant_id      TEXT NOT NULL,
    agent_id       TEXT NOT NULL,
    message_key    BLOB NOT NULL,
    task_id        TEXT NOT NULL,
    event_id       BLOB NOT NULL,
    created_at_utc INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, agent_id, message_key)
) STRICT, WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS a2a_push_config (
    tenant_id            TEXT NOT NULL,
    task_id              TEXT NOT NULL,
    config_id            TEXT NOT NULL,
    url                  TEXT NOT NULL,
    auth_scheme          TEXT NULL,
    secret               BLOB NOT NULL,
    secret_sealed_by     TEXT NULL,
    delivered_seq        INTEGER NOT NULL,
    next_attempt_at_utc  INTEGER NOT NULL,
    failed_attempts      INTEGER NOT NULL,
    consecutive_failures INTEGER NOT NULL,
    lease_until_utc      INTEGER NULL,
    last_error           TEXT NULL,
    created_at_utc       INTEGER NOT NULL,
    updated_at_utc       INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, task_id, config_id)
) STRICT, WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS ix_a2a_task_event ON a2a_task (event_id);
CREATE INDEX IF NOT EXISTS ix_a2a_task_sender ON a2a_task (tenant_id, agent_id, sender_id, status_at_utc, task_id);
CREATE INDEX IF NOT EXISTS ix_a2a_task_agent ON a2a_task (tenant_id, agent_id, status_at_utc, task_id);
CREATE INDEX IF NOT EXISTS ix_a2a_task_open ON a2a_task (state, status_at_utc);
CREATE INDEX IF NOT EXISTS ix_a2a_push_due ON a2a_push_config (next_attempt_at_utc);
