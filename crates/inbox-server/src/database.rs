//! Reaching the node's database, everything `serve` does before it serves: connecting with the
//! configured limits, proving the engine, migrating, loading the secrets key, checking the
//! claim plan. Operator commands (`token issue`, `keys`, ...) use the same steps.

use inbox_store::{ConnectOptions, SqlStore, StoreConfig, StoreError};

use crate::config::{self, Config};
use crate::metrics::Metrics;
use crate::node::Reached;
use crate::secrets_key;
use crate::tokens::TokenService;

/// Connects to the database the configuration names, with the configured store limits.
pub async fn connect_store(config: &Config) -> Result<SqlStore, ServerError> {
    connect(config).await.map_err(|e| ServerError(redact(config, e.into_reason())))
}

async fn connect(config: &Config) -> Result<SqlStore, Retry> {
    if let Some(path) = config.database.url.strip_prefix("sqlite://") {
        if let Some(parent) = std::path::Path::new(path).parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| {
                Retry::Never(format!("cannot create the database directory {}: {e}", parent.display()))
            })?;
        }
    }
    let statement_timeout = config.database.statement_timeout;
    let options = ConnectOptions {
        connections_max: config.database.connections_max,
        acquire_timeout: config.database.acquire_timeout,
        statement_timeout: Some(statement_timeout),
        lock_wait_timeout_seconds: (statement_timeout.as_secs() as u32).saturating_sub(1).max(1),
        ..ConnectOptions::new(&config.database.url)
    };
    let connected = SqlStore::connect(&options, store_config(config)).await;
    if config.database.url.starts_with("sqlite:") {
        // A local file does not come back by itself: a path that cannot be opened is a setting
        // to fix, not an outage to wait out.
        return connected.map_err(|e| Retry::Never(e.to_string()));
    }
    connected.map_err(retry)
}

/// `text` with the database password, if any, replaced by `***`.
pub(crate) fn redact(config: &Config, text: String) -> String {
    match config::database_password(&config.database.url) {
        Some(password) => text.replace(password, "***"),
        None => text,
    }
}

pub(crate) fn store_config(config: &Config) -> StoreConfig {
    StoreConfig {
        lease_ms_default: config.inbox.lease_default.as_millis() as u64,
        lease_ms_max: config.inbox.lease_max.as_millis() as u64,
        max_attempts_default: config.inbox.max_attempts,
        payload_bytes_limit: config.inbox.payload_bytes_limit,
        retention_ms: config.inbox.retention.as_millis() as u64,
        archive_retention_ms: config.inbox.archive_retention.as_millis() as u64,
        record_history: config.inbox.history,
        ..StoreConfig::default()
    }
}

/// Finds the secrets key file (making the SQLite default's for a database that never sealed
/// anything) and prepares `store` with it: the keys must open what the database holds; secrets
/// not yet sealed under the sealing key are sealed now. For operator commands; `serve` does the
/// same at start.
pub async fn prepare_secrets(
    store: &SqlStore,
    config: &Config,
) -> Result<secrets_key::LoadedKeys, ServerError> {
    let located = secrets_key::locate(config).map_err(ServerError)?;
    use_secrets(store, &located).await.map_err(|e| ServerError(e.into_reason()))
}

/// The keys of `located` (see [`secrets_key::resolve`]), checked against the database; seals
/// what is not yet sealed under the sealing key.
async fn use_secrets(
    store: &SqlStore,
    located: &secrets_key::Located,
) -> Result<secrets_key::LoadedKeys, Retry> {
    let recorded = store.secrets().recorded_sealing_key().await.map_err(retry)?;
    let loaded = secrets_key::resolve(located, recorded.as_deref()).map_err(Retry::Never)?;
    let report = store.secrets().prepare(loaded.keys.clone()).await.map_err(|err| match err {
        StoreError::Sealing(why) => Retry::Never(match &loaded.file {
            Some(file) => format!("secrets key file {}: {why}", file.display()),
            None => why,
        }),
        other => retry(other),
    })?;
    tracing::info!(
        file = %loaded.file.as_deref().map_or_else(|| "(in memory)".into(), |f| f.display().to_string()),
        keys = %loaded.keys.ids().join(","),
        sealing_key = %report.sealing_key_id,
        resealed = report.resealed,
        "secrets key loaded"
    );
    Ok(loaded)
}

/// Reaches the node's database: connects, checks the engine, migrates, loads the secrets key,
/// checks the claim plan and loads the signing keys.
pub(crate) async fn reach(
    config: &Config,
    metrics: &Metrics,
    located: &secrets_key::Located,
) -> Result<Reached, Retry> {
    let store = connect(config).await?;
    check_engine(&store).await?;
    store.migrate().await.map_err(retry)?;
    let secrets = use_secrets(&store, located).await?;
    for key_id in secrets.keys.ids() {
        metrics.secrets_key_loaded().set([key_id.to_owned()], 1.0);
    }
    check_claim_plan(&store).await?;
    let tokens = match TokenService::new(store.clone(), config).await {
        Ok(tokens) => tokens,
        // Was it the database, gone again, or the configuration (an unreadable JWKS file)?
        Err(reason) if store.ping().await.is_err() => return Err(Retry::Later(reason)),
        Err(reason) => return Err(Retry::Never(reason)),
    };
    Ok(Reached { store, tokens, secrets })
}

/// Proves the engine keeps the promises claims rest on, before anything is migrated or served;
/// an engine that breaks one stops the start with a sentence naming it and the property.
async fn check_engine(store: &SqlStore) -> Result<(), Retry> {
    let report = store.check_engine().await.map_err(retry)?;
    tracing::info!(
        engine = %report.engine,
        "database engine checked: FOR UPDATE SKIP LOCKED skips locked rows and READ COMMITTED holds"
    );
    if report.engine.galera {
        tracing::info!(
            "Galera: reads wait for causality (wsrep_sync_wait), certification conflicts are retried in the store"
        );
    }
    if !report.locks_checked {
        tracing::warn!(engine = %report.engine, "the engine check found no two connections on one server (a proxy spreading connections over members?); row locking was not checked");
    }
    Ok(())
}

/// Asks the planner how it will run the claim statement, once the schema is migrated: a
/// schema that lost the claim index stops the start, a plan that passes it by is logged as a
/// warning (see `SqlStore::check_claim_plan` for why only a warning).
async fn check_claim_plan(store: &SqlStore) -> Result<(), Retry> {
    match store.check_claim_plan().await.map_err(retry)? {
        inbox_store::ClaimPlanCheck::Warning(_, sentence) => tracing::warn!("{sentence}"),
        inbox_store::ClaimPlanCheck::UsesClaimIndex(plan) => {
            tracing::info!(access = %plan.access_type, "the claim statement is planned through the claim index")
        }
        inbox_store::ClaimPlanCheck::NotApplicable => {}
    }
    Ok(())
}

/// An unreachable database is waited for; anything else stops the start.
fn retry(err: StoreError) -> Retry {
    match err {
        StoreError::Unavailable(_) | StoreError::Contention { .. } => Retry::Later(err.to_string()),
        other => Retry::Never(other.to_string()),
    }
}

/// Whether a failed start is worth another attempt.
#[derive(Debug)]
pub(crate) enum Retry {
    /// The database is unreachable or still starting.
    Later(String),
    /// Bad configuration, a failed migration, ...: retrying changes nothing.
    Never(String),
}

impl Retry {
    pub(crate) fn into_reason(self) -> String {
        match self {
            Retry::Later(reason) | Retry::Never(reason) => reason,
        }
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ServerError(pub(crate) String);
