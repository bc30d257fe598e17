//! The agent-inbox HTTP service. [`run`] takes its configuration, a bound listener and a
//! shutdown future, so tests bind port 0 and stop it cleanly.
//!
//! Three layers: `http/` (extractors authenticate, validate and spend signed requests' nonces;
//! a handler makes one call, then converts to the wire types of `inbox-api`) over `ops/` (the
//! use cases, one module per subsystem, shared by HTTP, the WebSocket and seed 000's aliases)
//! over the store. `background.rs` runs the periodic work through `periodic.rs`.

mod ack_batcher;
pub mod auth;
mod background;
pub mod config;
mod convert;
mod error;
mod group_commit;
mod head_cache;
mod heartbeats;
mod hints;
mod http;
mod limits;
pub mod logging;
mod metrics;
mod nonce_writer;
mod ops;
mod periodic;
mod proxies;
mod publish_batcher;
mod quotas;
pub mod secrets_key;
mod session_changes;
mod startup;
mod tenant_policies;
pub mod tls;
mod trust;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::Router;
use inbox_store::{ConnectOptions, SqlStore, StoreConfig, StoreError};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::startup::Retry;

pub use auth::{CallerKind, IssuedTokens, TokenService};
pub use config::Config;
pub use error::ApiError;
pub use http::openapi;
pub use ops::callbacks::{Resolver, ResolverOverride, SystemResolver};

/// What an embedding application or a test sets in code rather than in configuration.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// How callback host names are resolved; the system resolver by default.
    pub callback_resolver: ResolverOverride,
}

/// Everything a handler can reach: one shared [`NodeParts`], so the several clones each
/// request makes (every extractor and middleware takes its own) cost one reference count.
#[derive(Debug, Clone)]
pub struct AppState(Arc<NodeParts>);

impl std::ops::Deref for AppState {
    type Target = NodeParts;

    fn deref(&self) -> &NodeParts {
        &self.0
    }
}

/// The parts of a running node that requests and background tasks share.
#[derive(Debug)]
pub struct NodeParts {
    pub store: SqlStore,
    pub config: Arc<Config>,
    pub tokens: Arc<TokenService>,
    limits: Arc<limits::Limits>,
    proxies: Arc<proxies::TrustedProxies>,
    metrics: Arc<metrics::Metrics>,
    hints: Arc<hints::Hints>,
    head_cache: Arc<head_cache::HeadCache>,
    heartbeats: Arc<heartbeats::Heartbeats>,
    tenant_policies: Arc<tenant_policies::TenantPolicies>,
    quotas: Arc<quotas::Quotas>,
    session_changes: Arc<session_changes::SessionChanges>,
    trust: Arc<trust::Trust>,
    secrets_key: Arc<secrets_key::Watch>,
    nonces: nonce_writer::NonceWriter,
    publisher: publish_batcher::PublishBatcher,
    acknowledger: ack_batcher::AckBatcher,
    shutdown: Shutdown,
}

impl AppState {
    /// The largest request body accepted: the payload limit plus room for the envelope.
    fn body_bytes_limit(&self) -> usize {
        self.config.inbox.payload_bytes_limit + 64 * 1024
    }
}

/// Signals background tasks and waiting requests that the server is stopping.
#[derive(Debug, Clone)]
pub(crate) struct Shutdown(watch::Sender<bool>);

impl Shutdown {
    fn new() -> Self {
        Shutdown(watch::channel(false).0)
    }

    fn cancel(&self) {
        self.0.send_replace(true);
    }

    pub(crate) async fn cancelled(&self) {
        let mut receiver = self.0.subscribe();
        let _ = receiver.wait_for(|stopped| *stopped).await;
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ServerError(String);

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
fn redact(config: &Config, text: String) -> String {
    match config::database_password(&config.database.url) {
        Some(password) => text.replace(password, "***"),
        None => text,
    }
}

fn store_config(config: &Config) -> StoreConfig {
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

/// Builds the application state: connects, migrates, loads the secrets key and signing keys.
async fn prepare(
    config: Config,
    overrides: &Overrides,
    metrics: Arc<metrics::Metrics>,
    shutdown: Shutdown,
    located: Arc<secrets_key::Located>,
) -> Result<AppState, Retry> {
    let store = connect(&config).await?;
    check_engine(&store).await?;
    store.migrate().await.map_err(retry)?;
    let secrets = use_secrets(&store, &located).await?;
    for key_id in secrets.keys.ids() {
        metrics.secrets_key_loaded().set([key_id.to_owned()], 1.0);
    }
    check_claim_plan(&store).await?;
    let tokens = match TokenService::new(store.clone(), &config).await {
        Ok(tokens) => tokens,
        // Was it the database, gone again, or the configuration (an unreadable JWKS file)?
        Err(reason) if store.ping().await.is_err() => return Err(Retry::Later(reason)),
        Err(reason) => return Err(Retry::Never(reason)),
    };
    let proxies = proxies::TrustedProxies::parse(&config.http.trusted_proxies).map_err(Retry::Never)?;
    let trust = Arc::new(trust::Trust::new(&config, &overrides.callback_resolver));
    let nonces = nonce_writer::NonceWriter::start(store.clone(), metrics.clone());
    let publisher = publish_batcher::PublishBatcher::start(store.clone(), metrics.clone(), &config);
    let heartbeats = heartbeats::Heartbeats::start(config.sessions.heartbeat_interval, shutdown.clone());
    let head_cache = Arc::new(head_cache::HeadCache::new(config.signals.notify_interval));
    let acknowledger = ack_batcher::AckBatcher::start(store.clone());
    Ok(AppState(Arc::new(NodeParts {
        store,
        heartbeats,
        limits: Arc::new(limits::Limits::new(&config)),
        proxies: Arc::new(proxies),
        config: Arc::new(config),
        tokens: Arc::new(tokens),
        metrics,
        hints: Arc::default(),
        head_cache,
        tenant_policies: Arc::default(),
        quotas: Arc::default(),
        session_changes: Arc::default(),
        trust,
        secrets_key: Arc::new(secrets_key::Watch::new(secrets.file.clone(), secrets.keys.clone())),
        nonces,
        publisher,
        acknowledger,
        shutdown,
    })))
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

/// Every route of the service.
pub fn router(state: AppState) -> Router {
    let router = Router::new()
        .merge(http::routes::inbox::router())
        .merge(http::routes::agents::router())
        .merge(http::routes::events::router())
        .merge(http::routes::rooms::router())
        .merge(http::routes::sessions::router())
        .merge(http::routes::streams::router())
        .merge(http::routes::ws::router())
        .merge(http::routes::agent_keys::router())
        .merge(http::routes::callbacks::router())
        .merge(http::routes::admin_routers())
        .merge(http::routes::auth::router())
        .merge(http::routes::health::router())
        .merge(http::console::router())
        .fallback(http::middleware::not_found)
        .method_not_allowed_fallback(http::middleware::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state.clone(), http::middleware::observe))
        .layer(axum::middleware::from_fn_with_state(state.clone(), http::middleware::normalize));
    // Outside `observe`, so an approved preflight is answered here and a refused cross-origin
    // request is still logged and measured like any other.
    let router = match http::cors::layer(&state.config) {
        Some(cors) => router
            .layer(cors)
            .layer(axum::middleware::from_fn_with_state(state.clone(), http::cors::timing_allow_origin)),
        None => router,
    };
    router.with_state(state)
}

/// How long a stopping server waits for open connections to finish.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves until `shutdown` completes, then stops accepting, lets in-flight requests finish,
/// ends long polls, stops background work and closes the database pools.
///
/// It listens at once, before the database is reached: until then `/healthz` answers 200,
/// `/readyz` 503 with what it is waiting for, and every API route `503 database_unavailable`.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    run_and_tell(config, listener, shutdown, tokio::sync::oneshot::channel().0).await
}

/// [`run`], sending on `ready` once the database is reached and migrated and the API serves.
pub async fn run_and_tell(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    ready_signal: tokio::sync::oneshot::Sender<()>,
) -> Result<(), ServerError> {
    run_with(config, Overrides::default(), listener, shutdown, ready_signal).await
}

/// [`run_and_tell`] with what is set in code rather than in configuration.
pub async fn run_with(
    config: Config,
    overrides: Overrides,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    ready_signal: tokio::sync::oneshot::Sender<()>,
) -> Result<(), ServerError> {
    let tls = match (&config.tls.cert, &config.tls.key) {
        (Some(cert), Some(key)) => {
            let files = tls::TlsFiles { cert: cert.clone(), key: key.clone() };
            let first = tls::load(&files).map_err(ServerError)?;
            Some((files, first))
        }
        _ => None,
    };
    // An unreadable or malformed key file stops the start before anything listens.
    let secrets = Arc::new(secrets_key::locate(&config).map_err(ServerError)?);
    let addr = listener.local_addr().map_err(|e| ServerError(e.to_string()))?;
    let stopping = Shutdown::new();
    let metrics = Arc::new(metrics::Metrics::default());
    metrics.database_up().set([], 0.0);
    let database = config::redact_database_url(&config.database.url);
    let waiting = Arc::new(startup::Waiting::new(database.clone()));
    let ready = Arc::new(OnceLock::new());
    let dispatch = startup::Dispatch {
        ready: ready.clone(),
        waiting: startup::waiting_router(waiting.clone(), metrics.clone()),
    };
    let service = Router::new().fallback_service(dispatch);
    let app = service.clone().into_make_service_with_connect_info::<SocketAddr>();
    let graceful = {
        let stopping = stopping.clone();
        async move {
            tokio::select! {
                _ = shutdown => tracing::info!("shutting down: no new connections; finishing requests in flight"),
                _ = stopping.cancelled() => {}
            }
            stopping.cancel();
        }
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let stall_limit = config.http.write_stall_timeout;
    let serving: futures_util::future::BoxFuture<'static, std::io::Result<()>> = match tls {
        Some((files, first)) => {
            let listener = tls::TlsListener::start(
                listener,
                stall_limit,
                files,
                first,
                metrics.clone(),
                stopping.clone(),
            )
            .map_err(|e| ServerError(format!("cannot start TLS: {e}")))?;
            let listener = http::stall::StallGuarded::new(listener, stall_limit, metrics.clone());
            // `tap_io` gives the listener's peer address to `ConnectInfo`, as for plain TCP.
            let listener = axum::serve::ListenerExt::tap_io(listener, |_| {});
            Box::pin(axum::serve(listener, app).with_graceful_shutdown(graceful).into_future())
        }
        None => {
            // SSE streams over HTTP/1.1 are served by the front itself; it hands every other
            // connection on (and sets TCP_NODELAY and the user timeout on all).
            let listener = http::sse_front::SseFront::start(
                listener,
                service,
                stall_limit,
                metrics.clone(),
                stopping.clone(),
            )
            .map_err(|e| ServerError(format!("cannot listen: {e}")))?;
            let listener = http::stall::StallGuarded::new(listener, stall_limit, metrics.clone());
            let listener = axum::serve::ListenerExt::tap_io(listener, |_| {});
            Box::pin(axum::serve(listener, app).with_graceful_shutdown(graceful).into_future())
        }
    };
    let serving = tokio::spawn(serving);
    tracing::info!(%addr, scheme, %database, "agent-inbox listening; connecting to the database");

    let prepared = tokio::select! {
        prepared = startup::until_reachable(&waiting, config.database.wait_max, |text| redact(&config, text), || {
            prepare(config.clone(), &overrides, metrics.clone(), stopping.clone(), secrets.clone())
        }) => Some(prepared),
        _ = stopping.cancelled() => None,
    };
    let state = match prepared {
        Some(Ok(state)) => state,
        Some(Err(reason)) => {
            stopping.cancel();
            let _ = serving.await;
            return Err(ServerError(reason));
        }
        None => {
            let _ = serving.await;
            return Ok(());
        }
    };
    metrics.database_up().set([], 1.0);
    let _ = ready.set(router(state.clone()));
    tracing::info!(%addr, database = state.store.dialect().name(), "agent-inbox ready");
    let _ = ready_signal.send(());
    let background = background::spawn(state.clone());

    // Streams and long polls end at once on shutdown, but a stream whose client stopped reading
    // is not polled again and cannot notice; do not wait for such connections forever.
    let draining = state.shutdown.clone();
    let served = tokio::select! {
        served = serving => served.map_err(|e| std::io::Error::other(e.to_string())).and_then(|r| r),
        _ = async { draining.cancelled().await; tokio::time::sleep(DRAIN_TIMEOUT).await } => {
            tracing::warn!(seconds = DRAIN_TIMEOUT.as_secs(), "connections still open after shutdown (clients not reading); stopping anyway");
            Ok(())
        }
    };
    state.shutdown.cancel();
    for task in background {
        let _ = task.await;
    }
    state.store.close().await;
    served.map_err(|e| ServerError(format!("server error: {e}")))
}
