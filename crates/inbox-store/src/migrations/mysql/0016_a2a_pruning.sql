-- Pruning finished A2A tasks. A task that finished longer ago than archived events are kept
-- (archive_retention) is deleted with its updates, its push configs and its messages' ids (so
-- a messageId may be sent again); the messages are found by their task.
CREATE INDEX IF NOT EXISTS ix_a2a_message_task ON a2a_message (tenant_id, task_id);
