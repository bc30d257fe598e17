-- Fair delivery (issue 31): fair claims and per-tenant quotas.
--
-- Fair claims (inbox/fairness.rs): within one priority, a claim of an inbox whose
-- tenant turned fair claims on interleaves the sources (fairness keys) of its events instead
-- of serving them in sequence order, so one source's burst cannot hold another's events back.
--
-- It is start-time fair queueing with one unit per event. Each publish with a fairness key
-- gives the event a rank: one past the larger of its key's last rank and the inbox's served
-- rank (the highest rank claimed so far). A key with a backlog takes ranks far ahead; a quiet
-- key's next event lands just past what is being served, so it goes first; two busy keys
-- alternate. A fair claim reads ix_agent_inbox_fair in (priority, fair_rank, inbox_seq)
-- order: as many rows as it claims, however many keys the inbox holds.
--
-- fair_rank is NULL for events published without a key (fair claims off, the SQL procedure):
-- NULL sorts first, so they are served in sequence order before ranked ones.
ALTER TABLE agent_inbox
    ADD COLUMN fair_rank BIGINT NULL,
    ADD KEY ix_agent_inbox_fair (tenant_id, recipient_kind, recipient_id, ack_state, priority, fair_rank, inbox_seq);

-- The tenant's quotas (0: none): events not yet acknowledged or parked, and the inline
-- payload bytes they hold. Publishing past one is refused (429, 507); nothing stored changes.
ALTER TABLE tenant_policy
    ADD COLUMN fair_claims BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN pending_events_max BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN stored_bytes_max BIGINT NOT NULL DEFAULT 0;

-- Each key's last rank in an inbox. Written by publishes, which hold the inbox's head lock, so
-- a key's ranks follow its publishes. A row whose last_rank is at or below the inbox's served
-- rank ranks exactly as no row does: fair claims delete such rows now and then.
CREATE TABLE IF NOT EXISTS inbox_fair_key (
    tenant_id      VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    recipient_kind VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    recipient_id   VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    fairness_key   VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    last_rank      BIGINT       NOT NULL,
    PRIMARY KEY (tenant_id, recipient_kind, recipient_id, fairness_key)
) ENGINE = InnoDB;

-- The highest rank a claim of the inbox has taken: the fair queue's clock. Raised after each
-- fair claim commits (best effort: a clock behind only lets a new key's events in a little
-- earlier); read without a lock by publishes.
CREATE TABLE IF NOT EXISTS inbox_fair_clock (
    tenant_id      VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    recipient_kind VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    recipient_id   VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    served_rank    BIGINT       NOT NULL,
    updated_at_utc BIGINT       NOT NULL,
    PRIMARY KEY (tenant_id, recipient_kind, recipient_id)
) ENGINE = InnoDB;
