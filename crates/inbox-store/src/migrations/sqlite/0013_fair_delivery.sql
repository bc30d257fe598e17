-- Fair delivery: fair claims and per-tenant quotas (see the MySQL file for the rules behind
-- each column).
ALTER TABLE agent_inbox ADD COLUMN fair_rank INTEGER NULL;
CREATE INDEX IF NOT EXISTS ix_agent_inbox_fair
    ON agent_inbox (tenant_id, recipient_kind, recipient_id, ack_state, priority, fair_rank, inbox_seq);

ALTER TABLE tenant_policy ADD COLUMN fair_claims INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tenant_policy ADD COLUMN pending_events_max INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tenant_policy ADD COLUMN stored_bytes_max INTEGER NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS inbox_fair_key (
    tenant_id      TEXT    NOT NULL,
    recipient_kind TEXT    NOT NULL,
    recipient_id   TEXT    NOT NULL,
    fairness_key   TEXT    NOT NULL,
    last_rank      INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, recipient_kind, recipient_id, fairness_key)
);

CREATE TABLE IF NOT EXISTS inbox_fair_clock (
    tenant_id      TEXT    NOT NULL,
    recipient_kind TEXT    NOT NULL,
    recipient_id   TEXT    NOT NULL,
    served_rank    INTEGER NOT NULL,
    updated_at_utc INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, recipient_kind, recipient_id)
);
