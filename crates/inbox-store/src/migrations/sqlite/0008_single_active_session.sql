-- Seed 001's optional single-active-session policy. See the MySQL file for the reasons
-- behind each column.

ALTER TABLE tenant_policy ADD COLUMN single_active_session INTEGER NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS agent_active_session (
    tenant_id                  TEXT NOT NULL,
    agent_id                   TEXT NOT NULL,
    session_id                 TEXT NOT NULL,
    opened_at_utc              INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, agent_id)
) STRICT, WITHOUT ROWID;

ALTER TABLE agent_session ADD COLUMN superseded_by_session_id TEXT NULL;
ALTER TABLE agent_session ADD COLUMN superseded_at_utc INTEGER NULL;
