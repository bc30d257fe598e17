-- Disabling a callback that keeps failing. See the MySQL file for the reasons.
ALTER TABLE callback_registration ADD COLUMN consecutive_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE callback_registration ADD COLUMN failing_since_utc INTEGER NULL;
ALTER TABLE callback_registration ADD COLUMN disabled_at_utc INTEGER NULL;
ALTER TABLE callback_registration ADD COLUMN disabled_reason TEXT NULL;
