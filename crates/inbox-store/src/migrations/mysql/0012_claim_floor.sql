-- Claims that do not walk what purge has not removed yet (issue 27; inbox/claim_floor.rs).
--
-- While any transaction holds an old read view, InnoDB keeps the delete-marked index entries
-- every claim and acknowledgement leaves behind. A claim's range scan reads them all, and
-- InnoDB checks the end of a range only on live entries, so an empty range runs on through
-- the dead entries that follow it. Two changes bound what a claim reads:
--
-- claim_bucket numbers runs of 128 seqs and the claim index ends in (priority, claim_bucket,
-- inbox_seq): a claim names exact (priority, bucket) pairs from the inbox's floor to its
-- head, and InnoDB stops an exact match at the first entry whose key differs, dead or not.
-- The column is virtual (computed, never stored in the row), so publishing, the SQL
-- procedure and the archive copy are unchanged. The index keeps its name.
--
-- expiry_bucket does the same for the scavenger's expiry sweep: minutes of expires_at_utc,
-- so a sweep names the minutes of its window exactly instead of running on from the end of
-- the available range into the dead entries of every claimed event without an expiry.
ALTER TABLE agent_inbox
    ADD COLUMN claim_bucket BIGINT AS (inbox_seq DIV 128) VIRTUAL,
    ADD COLUMN expiry_bucket BIGINT AS (expires_at_utc DIV 60000) VIRTUAL,
    DROP KEY ix_agent_inbox_claim,
    ADD KEY ix_agent_inbox_claim (tenant_id, recipient_kind, recipient_id, ack_state, priority, claim_bucket, inbox_seq),
    DROP KEY ix_agent_inbox_expiry,
    ADD KEY ix_agent_inbox_expiry (ack_state, expiry_bucket, expires_at_utc);

-- The claim floor of an inbox: every available event below floor_seq is waiting (not
-- claimable before wake_at_utc, at or above wake_seq), but for an event a transaction made
-- available again, which lowers the floor in that transaction. Claims read it without a
-- lock; the claim path moves it forward after a claim, holding its row lock.
-- reopened counts the lowerings, so every lowering writes the row (on Galera the write is
-- what makes a concurrent advance fail certification). No row: no floor (seq 0).
CREATE TABLE IF NOT EXISTS inbox_claim_floor (
    tenant_id      VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    recipient_kind VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    recipient_id   VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    floor_seq      BIGINT       NOT NULL,
    wake_seq       BIGINT       NULL,
    wake_at_utc    BIGINT       NULL,
    reopened       BIGINT       NOT NULL,
    updated_at_utc BIGINT       NOT NULL,
    PRIMARY KEY (tenant_id, recipient_kind, recipient_id)
) ENGINE = InnoDB;
