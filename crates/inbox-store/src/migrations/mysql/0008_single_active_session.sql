-- Seed 001's optional single-active-session policy: a tenant may let only the newest session
-- of each agent take new work.

-- Off by default: processes sharing one identity share work through claims.
ALTER TABLE tenant_policy
    ADD COLUMN single_active_session BIGINT NOT NULL DEFAULT 0;

-- The agent's newest session, moved by every subscribe (policy on or off), so turning the
-- policy on takes effect at once; one row per agent, locked by a subscribe so two concurrent
-- subscribes cannot both end up active.
CREATE TABLE IF NOT EXISTS agent_active_session (
    tenant_id      VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    agent_id       VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    session_id     VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    opened_at_utc  BIGINT       NOT NULL,
    PRIMARY KEY (tenant_id, agent_id)
) ENGINE = InnoDB;

-- Under the policy, a superseded session keeps its row with status 'superseded', who took
-- over and when; touches no longer revive it.
ALTER TABLE agent_session
    ADD COLUMN superseded_by_session_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    ADD COLUMN superseded_at_utc        BIGINT      NULL;
