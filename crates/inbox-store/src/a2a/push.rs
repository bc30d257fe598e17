//! A task's push-notification configs (A2A's webhooks) and their delivery state. A config gets
//! the task's updates after the one that was newest when it was made, in order: it is due while
//! its `delivered_seq` is behind the task's newest entry (every change of the task makes its
//! idle configs due), held by one node while that node sends (`claim_push`), and let go with
//! the outcome (`finish_push`). The token and the `Authorization` credentials are sealed
//! (`secrets`); the server's callback sender does the sending, under its SSRF rules.

use inbox_core::{TenantId, UnixMillis};
use serde::{Deserialize, Serialize};

use super::queries;
use super::rows::load_task;
use super::{A2a, TaskId, fit_note};
use crate::db::{Arg, DbConnection, DbRow};
use crate::secrets::{Place, seal_for_storing};
use crate::store::with_retries;
use crate::{SqlStore, StoreError};

/// Configs one task may have.
pub const PUSH_CONFIGS_PER_TASK_MAX: usize = 10;

/// `next_attempt_at` of a config with nothing to send: until its task's next update.
const IDLE_AT: i64 = i64::MAX;

/// A config to create (or to replace, when its id is taken).
#[derive(Clone)]
pub struct NewPushConfig {
    pub tenant_id: TenantId,
    pub task_id: TaskId,
    /// 1 to 64 characters of the id alphabet (letters, digits, `_ - . :`), checked by the
    /// server, which makes one when the client gives none.
    pub config_id: String,
    /// An `https` URL the server's callback rules accepted.
    pub url: String,
    /// Sent as `X-A2A-Notification-Token`, and the notification's signing key.
    pub token: String,
    pub auth_scheme: Option<String>,
    pub credentials: Option<String>,
}

impl std::fmt::Debug for NewPushConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewPushConfig")
            .field("task_id", &self.task_id)
            .field("config_id", &self.config_id)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// A stored config, its secrets opened.
#[derive(Clone, PartialEq, Eq)]
pub struct PushConfig {
    pub tenant_id: TenantId,
    pub task_id: TaskId,
    pub config_id: String,
    pub url: String,
    pub token: String,
    pub auth_scheme: Option<String>,
    pub credentials: Option<String>,
    /// The last update delivered.
    pub delivered_seq: u64,
    pub next_attempt_at: UnixMillis,
    /// Failed attempts at the update after `delivered_seq`.
    pub failed_attempts: u32,
    pub consecutive_failures: u32,
    pub last_error: Option<String>,
    pub created_at: UnixMillis,
}

impl std::fmt::Debug for PushConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushConfig")
            .field("task_id", &self.task_id)
            .field("config_id", &self.config_id)
            .field("url", &self.url)
            .field("delivered_seq", &self.delivered_seq)
            .field("failed_attempts", &self.failed_attempts)
            .finish_non_exhaustive()
    }
}

/// A config with updates waiting.
#[derive(Debug, Clone)]
pub struct DuePush {
    pub config: PushConfig,
    /// The task's newest update.
    pub last_seq: u64,
}

/// How a delivery went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushResult {
    /// Every update up to `seq` was delivered.
    Delivered { seq: u64 },
    /// Every update up to `seq` was delivered and the next one failed, its `attempts`-th
    /// failure; tried again at `next_attempt_at`, or given up on (`give_up`: the next attempt
    /// starts after it).
    Failed { seq: u64, error: String, next_attempt_at: UnixMillis, attempts: u32, give_up: bool },
}

/// The sealed part of a config.
#[derive(Serialize, Deserialize)]
struct Secret {
    token: String,
    credentials: Option<String>,
}

fn place(tenant_id: &str, task_id: &str, config_id: &str) -> Place {
    Place::a2a_push_secret(tenant_id, task_id, config_id)
}

fn config(store: &SqlStore, row: &DbRow) -> Result<PushConfig, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("a2a push config: {what}"));
    let tenant = row.string("tenant_id")?;
    let task = row.string("task_id")?;
    let config_id = row.string("config_id")?;
    let opened = store.sealer().open(
        &place(&tenant, &task, &config_id),
        row.opt_string("secret_sealed_by")?.as_deref(),
        &row.bytes("secret")?,
    )?;
    let secret: Secret = serde_json::from_slice(&opened).map_err(|_| corrupt("secret"))?;
    Ok(PushConfig {
        tenant_id: TenantId::new(tenant).map_err(|_| corrupt("tenant id"))?,
        task_id: TaskId::parse(&task).ok_or_else(|| corrupt("task id"))?,
        config_id,
        url: row.string("url")?,
        token: secret.token,
        auth_scheme: row.opt_string("auth_scheme")?,
        credentials: secret.credentials,
        delivered_seq: u64::try_from(row.i64("delivered_seq")?).unwrap_or(0),
        next_attempt_at: UnixMillis(row.i64("next_attempt_at_utc")?),
        failed_attempts: u32::try_from(row.i64("failed_attempts")?).unwrap_or(0),
        consecutive_failures: u32::try_from(row.i64("consecutive_failures")?).unwrap_or(0),
        last_error: row.opt_string("last_error")?,
        created_at: UnixMillis(row.i64("created_at_utc")?),
    })
}

/// Creates (or replaces) a config in the caller's transaction, delivering the task's updates
/// after `last_seq`; `Err(limit)` when the task has its most configs already.
pub(super) async fn create_in(
    store: &SqlStore,
    conn: &mut DbConnection<'_>,
    new: &NewPushConfig,
    last_seq: u64,
    now: UnixMillis,
) -> Result<Result<PushConfig, usize>, StoreError> {
    let (tenant, task, id) = (new.tenant_id.as_str(), new.task_id.as_str(), new.config_id.as_str());
    let secret = Secret { token: new.token.clone(), credentials: new.credentials.clone() };
    let plaintext = zeroize::Zeroizing::new(serde_json::to_vec(&secret).unwrap_or_default());
    let (sealed, sealed_by) = seal_for_storing(store, conn, &place(tenant, task, id), &plaintext).await?;
    let lock = store.dialect().for_update();
    let existing = conn
        .fetch_optional(&queries::push_config(lock), &[Arg::Str(tenant), Arg::Str(task), Arg::Str(id)])
        .await?;
    if existing.is_some() {
        conn.execute(
            queries::REPLACE_PUSH_CONFIG,
            &[
                Arg::Str(&new.url),
                Arg::OptStr(new.auth_scheme.as_deref()),
                Arg::Bytes(&sealed),
                Arg::Str(&sealed_by),
                Arg::I64(now.get()),
                Arg::Str(tenant),
                Arg::Str(task),
                Arg::Str(id),
            ],
        )
        .await?;
    } else {
        let count =
            conn.fetch_optional(queries::COUNT_PUSH_CONFIGS, &[Arg::Str(tenant), Arg::Str(task)]).await?;
        let count = match count {
            Some(row) => usize::try_from(row.i64("n")?).unwrap_or(usize::MAX),
            None => 0,
        };
        if count >= PUSH_CONFIGS_PER_TASK_MAX {
            return Ok(Err(PUSH_CONFIGS_PER_TASK_MAX));
        }
        conn.execute(
            queries::INSERT_PUSH_CONFIG,
            &[
                Arg::Str(tenant),
                Arg::Str(task),
                Arg::Str(id),
                Arg::Str(&new.url),
                Arg::OptStr(new.auth_scheme.as_deref()),
                Arg::Bytes(&sealed),
                Arg::Str(&sealed_by),
                Arg::I64(i64::try_from(last_seq).unwrap_or(i64::MAX)),
                Arg::I64(IDLE_AT),
                Arg::I64(now.get()),
                Arg::I64(now.get()),
            ],
        )
        .await?;
    }
    let row = conn
        .fetch_optional(&queries::push_config(""), &[Arg::Str(tenant), Arg::Str(task), Arg::Str(id)])
        .await?
        .ok_or_else(|| StoreError::Corrupt("a2a push config vanished while written".into()))?;
    Ok(Ok(config(store, &row)?))
}

impl A2a<'_> {
    /// Creates a config for an existing task (or replaces the one with its id); `Ok(Err(limit))`
    /// past the limit of configs per task, `Ok(Ok(None))` when the task is gone.
    pub async fn create_push(
        self,
        new: &NewPushConfig,
    ) -> Result<Result<Option<PushConfig>, usize>, StoreError> {
        with_retries!(self.store, async {
            let now = self.store.now();
            let mut tx = self.store.pools().begin().await?;
            let mut conn = tx.conn();
            let lock = self.store.dialect().for_update();
            let Some((task, _)) = load_task(&mut conn, &new.tenant_id, &new.task_id, lock).await? else {
                return Ok(Ok(None));
            };
            let created = create_in(self.store, &mut conn, new, task.last_seq, now).await?;
            if created.is_ok() {
                tx.commit().await?;
            }
            Ok::<_, StoreError>(created.map(Some))
        })
    }

    /// One config of a task.
    pub async fn push_config(
        self,
        tenant_id: &TenantId,
        task_id: &TaskId,
        config_id: &str,
    ) -> Result<Option<PushConfig>, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let row = pooled
            .conn()
            .fetch_optional(
                &queries::push_config(""),
                &[Arg::Str(tenant_id.as_str()), Arg::Str(task_id.as_str()), Arg::Str(config_id)],
            )
            .await?;
        row.map(|row| config(self.store, &row)).transpose()
    }

    /// A task's configs after `after` (a config id), by id, at most `limit`.
    pub async fn push_configs(
        self,
        tenant_id: &TenantId,
        task_id: &TaskId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<PushConfig>, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let rows = pooled
            .conn()
            .fetch_all(
                queries::PUSH_CONFIGS,
                &[
                    Arg::Str(tenant_id.as_str()),
                    Arg::Str(task_id.as_str()),
                    Arg::Str(after.unwrap_or("")),
                    Arg::I64(i64::from(limit.max(1))),
                ],
            )
            .await?;
        rows.iter().map(|row| config(self.store, row)).collect()
    }

    /// Deletes a config; whether there was one.
    pub async fn delete_push(
        self,
        tenant_id: &TenantId,
        task_id: &TaskId,
        config_id: &str,
    ) -> Result<bool, StoreError> {
        let mut pooled = self.store.pools().writer().await?;
        let done = pooled
            .conn()
            .execute(
                queries::DELETE_PUSH_CONFIG,
                &[Arg::Str(tenant_id.as_str()), Arg::Str(task_id.as_str()), Arg::Str(config_id)],
            )
            .await?;
        Ok(done.rows_affected > 0)
    }

    /// Configs due at `now` with updates waiting, at most `limit`; those found caught up are
    /// made idle until their task's next update.
    pub async fn due_pushes(self, now: UnixMillis, limit: u32) -> Result<Vec<DuePush>, StoreError> {
        let rows = {
            let mut pooled = self.store.pools().reader().await?;
            pooled
                .conn()
                .fetch_all(
                    queries::DUE_PUSHES,
                    &[Arg::I64(now.get()), Arg::I64(now.get()), Arg::I64(i64::from(limit.max(1)))],
                )
                .await?
        };
        let mut due = Vec::with_capacity(rows.len());
        for row in &rows {
            let config = config(self.store, row)?;
            let last_seq = u64::try_from(row.i64("last_seq")?).unwrap_or(0);
            if config.delivered_seq < last_seq {
                due.push(DuePush { config, last_seq });
                continue;
            }
            let mut pooled = self.store.pools().writer().await?;
            pooled
                .conn()
                .execute(
                    queries::PUSH_IDLE,
                    &[
                        Arg::I64(IDLE_AT),
                        Arg::Str(config.tenant_id.as_str()),
                        Arg::Str(config.task_id.as_str()),
                        Arg::Str(&config.config_id),
                        Arg::I64(i64::try_from(config.delivered_seq).unwrap_or(i64::MAX)),
                    ],
                )
                .await?;
        }
        Ok(due)
    }

    /// Takes a due config for this node until `lease_until`, unless another node took it or
    /// it changed since it was read.
    pub async fn claim_push(self, config: &PushConfig, lease_until: UnixMillis) -> Result<bool, StoreError> {
        let now = self.store.now();
        let mut pooled = self.store.pools().writer().await?;
        let done = pooled
            .conn()
            .execute(
                queries::CLAIM_PUSH,
                &[
                    Arg::I64(lease_until.get()),
                    Arg::Str(config.tenant_id.as_str()),
                    Arg::Str(config.task_id.as_str()),
                    Arg::Str(&config.config_id),
                    Arg::I64(config.next_attempt_at.get()),
                    Arg::I64(now.get()),
                ],
            )
            .await?;
        Ok(done.rows_affected == 1)
    }

    /// Records how a delivery went and lets the config go; `false` when its lease was lost
    /// (another node took it after it ran out), and nothing was recorded.
    pub async fn finish_push(
        self,
        config: &PushConfig,
        lease_until: UnixMillis,
        result: &PushResult,
    ) -> Result<bool, StoreError> {
        let now = self.store.now();
        let (delivered, next_attempt_at, failed, in_a_row, error) = match result {
            // Due at once: more updates may have come while it sent.
            PushResult::Delivered { seq } => (*seq, now, 0, 0, None),
            PushResult::Failed { seq, error, next_attempt_at, attempts, give_up } => {
                let in_a_row = config.consecutive_failures.saturating_add(1);
                match give_up {
                    true => (seq + 1, *next_attempt_at, 0, in_a_row, Some(fit_note(error))),
                    false => (*seq, *next_attempt_at, *attempts, in_a_row, Some(fit_note(error))),
                }
            }
        };
        let mut pooled = self.store.pools().writer().await?;
        let done = pooled
            .conn()
            .execute(
                queries::FINISH_PUSH,
                &[
                    Arg::I64(i64::try_from(delivered).unwrap_or(i64::MAX)),
                    Arg::I64(next_attempt_at.get()),
                    Arg::I64(i64::from(failed)),
                    Arg::I64(i64::from(in_a_row)),
                    Arg::OptStr(error.as_deref()),
                    Arg::I64(now.get()),
                    Arg::Str(config.tenant_id.as_str()),
                    Arg::Str(config.task_id.as_str()),
                    Arg::Str(&config.config_id),
                    Arg::I64(lease_until.get()),
                ],
            )
            .await?;
        Ok(done.rows_affected == 1)
    }
}
