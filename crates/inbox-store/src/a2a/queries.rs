//! Every SQL statement of the `a2a` subsystem, by name, with its binds in order. The text is the
//! same on both backends but for the row locks (`lock`: the dialect's `FOR UPDATE` clause,
//! empty on SQLite, whose `BEGIN IMMEDIATE` already holds the one write lock) and the list
//! queries, whose filters are built from what is asked.
//!
//! Besides its own four tables these read `agent_inbox` and `agent_inbox_archive` (an event's
//! state, for the reconciler) and write one column of `agent_inbox`: a canceled task's
//! unclaimed event is given an expiry of now (`EXPIRE_UNCLAIMED`), which the inbox's slow path
//! then applies, so the event ends `expired` with its history and no agent runs it.

/// The columns of a task, in the order `rows::task` reads them.
macro_rules! task_columns {
    () => {
        "tenant_id, task_id, agent_id, sender_id, context_id, event_id, state, status_seq, \
         status_message_json, status_note, status_at_utc, artifacts_json, history_json, last_seq, \
         reported_event_id, created_at_utc"
    };
}

/// A task by id (tenant, task id).
pub(super) fn task(lock: &str) -> String {
    format!(concat!("SELECT ", task_columns!(), " FROM a2a_task WHERE tenant_id = ? AND task_id = ?{}"), lock)
}

/// The task an event carries a message of (tenant, event id).
pub(super) fn task_of_event(lock: &str) -> String {
    format!(
        concat!("SELECT ", task_columns!(), " FROM a2a_task WHERE tenant_id = ? AND event_id = ?{}"),
        lock
    )
}

/// The submitted tasks of `n` events (tenant, then each event id), locked: a claim moves them.
pub(super) fn submitted_tasks_of_events(n: usize, lock: &str) -> String {
    format!(
        concat!(
            "SELECT ",
            task_columns!(),
            " FROM a2a_task WHERE tenant_id = ? AND state = 'submitted' AND event_id IN ({}){}"
        ),
        crate::dialect::placeholders(n),
        lock
    )
}

/// A new task (the columns of `task_columns!`, in order).
pub(super) const INSERT_TASK: &str = concat!(
    "INSERT INTO a2a_task (",
    task_columns!(),
    ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
);

/// Writes back what a change did to a task (event id, state, status seq, status message,
/// status note, status at, artifacts, history, last seq, reported event id; tenant, task id).
pub(super) const SAVE_TASK: &str = "UPDATE a2a_task SET event_id = ?, state = ?, status_seq = ?, \
    status_message_json = ?, status_note = ?, status_at_utc = ?, artifacts_json = ?, history_json = ?, \
    last_seq = ?, reported_event_id = ? WHERE tenant_id = ? AND task_id = ?";

/// One entry of a task's update log (tenant, task id, seq, kind, state, message, note,
/// artifact, created at).
pub(super) const INSERT_UPDATE: &str = "INSERT INTO a2a_task_update (tenant_id, task_id, seq, kind, state, \
    message_json, note, artifact_json, created_at_utc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// A task's updates after a seq, in order (tenant, task id, after seq, limit).
pub(super) const UPDATES_AFTER: &str = "SELECT seq, kind, state, message_json, note, artifact_json, \
    created_at_utc FROM a2a_task_update WHERE tenant_id = ? AND task_id = ? AND seq > ? ORDER BY seq LIMIT ?";

/// The task and event a message made, if it was sent before (tenant, agent, message key).
pub(super) fn message(lock: &str) -> String {
    format!(
        "SELECT task_id, event_id FROM a2a_message WHERE tenant_id = ? AND agent_id = ? AND message_key = ?{lock}"
    )
}

/// Remembers a message (tenant, agent, message key, task id, event id, created at).
pub(super) const INSERT_MESSAGE: &str = "INSERT INTO a2a_message (tenant_id, agent_id, message_key, task_id, \
    event_id, created_at_utc) VALUES (?, ?, ?, ?, ?, ?)";

/// What `list_tasks` filters on, beside the tenant and agent.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ListFilters {
    pub sender: bool,
    pub context: bool,
    pub state: bool,
    pub changed_after: bool,
    pub cursor: bool,
}

impl ListFilters {
    /// `WHERE ...` for the filters (tenant, agent, then sender, context, state, changed after,
    /// and the cursor's status time twice and task id, each only when asked).
    fn clause(self) -> String {
        let mut clause = String::from(" WHERE tenant_id = ? AND agent_id = ?");
        if self.sender {
            clause.push_str(" AND sender_id = ?");
        }
        if self.context {
            clause.push_str(" AND context_id = ?");
        }
        if self.state {
            clause.push_str(" AND state = ?");
        }
        if self.changed_after {
            clause.push_str(" AND status_at_utc > ?");
        }
        if self.cursor {
            clause.push_str(" AND (status_at_utc < ? OR (status_at_utc = ? AND task_id < ?))");
        }
        clause
    }
}

/// A page of tasks, newest status first (the filters' binds, then the limit).
pub(super) fn list_tasks(filters: ListFilters) -> String {
    format!(
        concat!(
            "SELECT ",
            task_columns!(),
            " FROM a2a_task{} ORDER BY status_at_utc DESC, task_id DESC LIMIT ?"
        ),
        filters.clause()
    )
}

/// How many tasks the filters match, the cursor aside (the filters' binds).
pub(super) fn count_tasks(filters: ListFilters) -> String {
    format!("SELECT COUNT(*) AS n FROM a2a_task{}", ListFilters { cursor: false, ..filters }.clause())
}

/// Gives an unclaimed event an expiry of now, for the slow path to expire (expires at, event id).
pub(super) const EXPIRE_UNCLAIMED: &str =
    "UPDATE agent_inbox SET expires_at_utc = ? WHERE event_id = ? AND ack_state = 'available'";

/// Open tasks whose event moved on: claimed (or claimed before) while the task is submitted,
/// in any state but available and claimed, or gone from the live table (limit).
pub(super) const OPEN_CANDIDATES: &str = "SELECT t.tenant_id AS tenant_id, t.task_id AS task_id \
    FROM a2a_task t LEFT JOIN agent_inbox e ON e.event_id = t.event_id \
    WHERE t.state IN ('submitted', 'working') AND (e.event_id IS NULL \
    OR e.ack_state NOT IN ('available', 'claimed') \
    OR (t.state = 'submitted' AND (e.ack_state = 'claimed' OR e.delivery_attempts > 0))) \
    ORDER BY t.status_at_utc LIMIT ?";

/// An archived event's state (event id).
pub(super) const ARCHIVED_STATE: &str =
    "SELECT ack_state, last_error FROM agent_inbox_archive WHERE event_id = ?";

// ---- push-notification configs ----

/// The columns of a push config, in the order `rows::push_config` reads them.
macro_rules! push_columns {
    () => {
        "tenant_id, task_id, config_id, url, auth_scheme, secret, secret_sealed_by, delivered_seq, \
         next_attempt_at_utc, failed_attempts, consecutive_failures, last_error, created_at_utc"
    };
}

/// One config (tenant, task id, config id).
pub(super) fn push_config(lock: &str) -> String {
    format!(
        concat!(
            "SELECT ",
            push_columns!(),
            " FROM a2a_push_config WHERE tenant_id = ? AND task_id = ? AND config_id = ?{}"
        ),
        lock
    )
}

/// A task's configs after a config id, by id (tenant, task id, after id, limit).
pub(super) const PUSH_CONFIGS: &str = concat!(
    "SELECT ",
    push_columns!(),
    " FROM a2a_push_config WHERE tenant_id = ? AND task_id = ? AND config_id > ? ORDER BY config_id LIMIT ?"
);

/// How many configs a task has (tenant, task id).
pub(super) const COUNT_PUSH_CONFIGS: &str =
    "SELECT COUNT(*) AS n FROM a2a_push_config WHERE tenant_id = ? AND task_id = ?";

/// A new config (tenant, task id, config id, url, scheme, secret, sealed by, delivered seq,
/// next attempt at, created at, updated at).
pub(super) const INSERT_PUSH_CONFIG: &str = "INSERT INTO a2a_push_config (tenant_id, task_id, config_id, url, \
    auth_scheme, secret, secret_sealed_by, delivered_seq, next_attempt_at_utc, failed_attempts, \
    consecutive_failures, lease_until_utc, last_error, created_at_utc, updated_at_utc) \
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, NULL, NULL, ?, ?)";

/// A config named again: its webhook and secret replaced (url, scheme, secret, sealed by,
/// updated at; tenant, task id, config id).
pub(super) const REPLACE_PUSH_CONFIG: &str = "UPDATE a2a_push_config SET url = ?, auth_scheme = ?, secret = ?, \
    secret_sealed_by = ?, updated_at_utc = ? WHERE tenant_id = ? AND task_id = ? AND config_id = ?";

/// Deletes a config (tenant, task id, config id).
pub(super) const DELETE_PUSH_CONFIG: &str =
    "DELETE FROM a2a_push_config WHERE tenant_id = ? AND task_id = ? AND config_id = ?";

/// Makes a task's idle configs due now: the task has a new update (now; tenant, task id, now).
pub(super) const MARK_PUSH_DUE: &str = "UPDATE a2a_push_config SET next_attempt_at_utc = ? \
    WHERE tenant_id = ? AND task_id = ? AND next_attempt_at_utc > ?";

/// Configs due, not held by another node, with their task's newest seq (now, now, limit).
pub(super) const DUE_PUSHES: &str = "SELECT p.tenant_id AS tenant_id, p.task_id AS task_id, \
    p.config_id AS config_id, p.url AS url, p.auth_scheme AS auth_scheme, p.secret AS secret, \
    p.secret_sealed_by AS secret_sealed_by, p.delivered_seq AS delivered_seq, \
    p.next_attempt_at_utc AS next_attempt_at_utc, p.failed_attempts AS failed_attempts, \
    p.consecutive_failures AS consecutive_failures, p.last_error AS last_error, \
    p.created_at_utc AS created_at_utc, t.last_seq AS last_seq \
    FROM a2a_push_config p JOIN a2a_task t ON t.tenant_id = p.tenant_id AND t.task_id = p.task_id \
    WHERE p.next_attempt_at_utc <= ? AND (p.lease_until_utc IS NULL OR p.lease_until_utc <= ?) \
    ORDER BY p.next_attempt_at_utc LIMIT ?";

/// A config with nothing to send: idle until its task's next update (idle at; tenant, task id,
/// config id, delivered seq).
pub(super) const PUSH_IDLE: &str = "UPDATE a2a_push_config SET next_attempt_at_utc = ? \
    WHERE tenant_id = ? AND task_id = ? AND config_id = ? AND delivered_seq = ? AND lease_until_utc IS NULL";

/// Takes a due config for one node, unless another took or changed it since it was read (lease
/// until; tenant, task id, config id, next attempt at as read, now).
pub(super) const CLAIM_PUSH: &str = "UPDATE a2a_push_config SET lease_until_utc = ? \
    WHERE tenant_id = ? AND task_id = ? AND config_id = ? AND next_attempt_at_utc = ? \
    AND (lease_until_utc IS NULL OR lease_until_utc <= ?)";

/// Records a delivery's outcome and lets the config go, unless its lease was lost (delivered
/// seq, next attempt at, failed attempts, consecutive failures, last error, updated at; tenant,
/// task id, config id, lease until).
pub(super) const FINISH_PUSH: &str = "UPDATE a2a_push_config SET delivered_seq = ?, next_attempt_at_utc = ?, \
    failed_attempts = ?, consecutive_failures = ?, last_error = ?, lease_until_utc = NULL, updated_at_utc = ? \
    WHERE tenant_id = ? AND task_id = ? AND config_id = ? AND lease_until_utc = ?";

// ---- pruning finished tasks ----

/// Finished tasks whose status is older than a time (before, limit).
pub(super) const FINISHED_BEFORE: &str = "SELECT tenant_id, task_id FROM a2a_task \
    WHERE state IN ('completed', 'failed', 'canceled', 'rejected') AND status_at_utc < ? LIMIT ?";

/// A finished task's log, messages and push configs, each by (tenant, task id).
pub(super) const PRUNE_UPDATES: &str = "DELETE FROM a2a_task_update WHERE tenant_id = ? AND task_id = ?";
pub(super) const PRUNE_MESSAGES: &str = "DELETE FROM a2a_message WHERE tenant_id = ? AND task_id = ?";
pub(super) const PRUNE_PUSH_CONFIGS: &str = "DELETE FROM a2a_push_config WHERE tenant_id = ? AND task_id = ?";

/// The task itself, if it is still finished and old (tenant, task id, before).
pub(super) const PRUNE_TASK: &str = "DELETE FROM a2a_task WHERE tenant_id = ? AND task_id = ? \
    AND state IN ('completed', 'failed', 'canceled', 'rejected') AND status_at_utc < ?";
