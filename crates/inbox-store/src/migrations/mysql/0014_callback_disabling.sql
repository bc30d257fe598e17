-- Disabling a callback that keeps failing (issue 31, webhook isolation).
--
-- failed_attempts counts the failures at one head and starts over when a head is given up;
-- consecutive_failures counts every failed delivery since the last success, across heads,
-- and failing_since_utc is when the first of them ended. Past the configured bound (both a
-- count and a duration) the delivery worker sets disabled_at_utc and disabled_reason: a
-- disabled registration is never due until an operator re-enables it. The agent still
-- polls: the inbox is the record.
ALTER TABLE callback_registration
    ADD COLUMN consecutive_failures BIGINT       NOT NULL DEFAULT 0,
    ADD COLUMN failing_since_utc    BIGINT       NULL,
    ADD COLUMN disabled_at_utc      BIGINT       NULL,
    ADD COLUMN disabled_reason      VARCHAR(512) NULL;
