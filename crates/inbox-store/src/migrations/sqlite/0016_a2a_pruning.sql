-- Pruning finished A2A tasks. See the MySQL file for the reasons.
CREATE INDEX IF NOT EXISTS ix_a2a_message_task ON a2a_message (tenant_id, task_id);
