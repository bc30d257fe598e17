//! The agent-inbox HTTP service. [`run`] takes its configuration, a bound listener and a
//! shutdown future, so tests bind port 0 and stop it cleanly.
//!
//! Handlers are thin: extractors authenticate and validate, the handler makes one call into
//! the store, then converts to the wire types of `inbox-api`.

pub mod auth;
pub mod config;
mod convert;
mod cors;
mod error;
mod extract;
mod hints;
mod limits;
mod metrics;
mod middleware;
mod nonce_writer;
mod notifier;
pub mod openapi;
mod routes;
mod session_changes;
mod session_policy;
mod signatures;
mod streams;
mod tasks;
mod tenant_policies;
pub mod tls;
mod trust;
mod webhooks;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use inbox_store::{ConnectOptions, SqlStore, StoreConfig};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use auth::{CallerKind, IssuedTokens, TokenService};
pub use config::Config;
pub use error::ApiError;
pub use webhooks::{Resolver, ResolverOverride, SystemResolver};

/// Everything a handler can reach. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    pub store: SqlStore,
    pub config: Arc<Config>,
    pub tokens: Arc<TokenService>,
    limits: Arc<limits::Limits>,
    metrics: Arc<metrics::Metrics>,
    hints: Arc<hints::Hints>,
    tenant_policies: Arc<tenant_policies::TenantPolicies>,
    session_changes: Arc<session_changes::SessionChanges>,
    trust: Arc<trust::Trust>,
    nonces: nonce_writer::NonceWriter,
    shutdown: Shutdown,
}

impl AppState {
    /// The largest request body accepted: the payload limit plus room for the envelope.
    fn body_bytes_limit(&self) -> usize {
        self.config.payload_bytes_limit + 64 * 1024
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
    if let Some(path) = config.database_url.strip_prefix("sqlite://") {
        if let Some(parent) = std::path::Path::new(path).parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| {
                ServerError(format!("cannot create the database directory {}: {e}", parent.display()))
            })?;
        }
    }
    let options = ConnectOptions {
        connections_max: config.database_connections_max,
        ..ConnectOptions::new(&config.database_url)
    };
    let store =
        SqlStore::connect(&options, store_config(config)).await.map_err(|e| ServerError(e.to_string()))?;
    Ok(store)
}

fn store_config(config: &Config) -> StoreConfig {
    StoreConfig {
        lease_ms_default: config.lease_default.as_millis() as u64,
        lease_ms_max: config.lease_max.as_millis() as u64,
        max_attempts_default: config.max_attempts,
        payload_bytes_limit: config.payload_bytes_limit,
        retention_ms: config.retention.as_millis() as u64,
        ..StoreConfig::default()
    }
}

/// Builds the application state: connects, migrates and loads signing keys.
pub async fn prepare(config: Config) -> Result<AppState, ServerError> {
    let store = connect_store(&config).await?;
    store.migrate().await.map_err(|e| ServerError(e.to_string()))?;
    let tokens = TokenService::new(store.clone(), &config).await.map_err(ServerError)?;
    let trust = Arc::new(trust::Trust::new(&config));
    let metrics = Arc::new(metrics::Metrics::default());
    let nonces = nonce_writer::NonceWriter::start(store.clone(), metrics.clone());
    Ok(AppState {
        store,
        limits: Arc::new(limits::Limits::new(&config)),
        config: Arc::new(config),
        tokens: Arc::new(tokens),
        metrics,
        hints: Arc::default(),
        tenant_policies: Arc::default(),
        session_changes: Arc::default(),
        trust,
        nonces,
        shutdown: Shutdown::new(),
    })
}

/// Every route of the service.
pub fn router(state: AppState) -> Router {
    let router = Router::new()
        .merge(routes::inbox::router())
        .merge(routes::agents::router())
        .merge(routes::events::router())
        .merge(routes::rooms::router())
        .merge(routes::sessions::router())
        .merge(routes::streams::router())
        .merge(routes::ws::router())
        .merge(routes::agent_keys::router())
        .merge(routes::callbacks::router())
        .merge(routes::tenant_policy::router())
        .merge(routes::admin::router())
        .merge(routes::auth::router())
        .merge(routes::health::router())
        .fallback(middleware::not_found)
        .method_not_allowed_fallback(middleware::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state.clone(), middleware::observe))
        .layer(axum::middleware::from_fn_with_state(state.clone(), middleware::normalize));
    // Outside `observe`, so an approved preflight is answered here and a refused cross-origin
    // request is still logged and measured like any other.
    let router = match cors::layer(&state.config) {
        Some(cors) => router.layer(cors),
        None => router,
    };
    router.with_state(state)
}

/// How long a stopping server waits for open connections to finish.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves until `shutdown` completes, then stops accepting, lets in-flight requests finish,
/// ends long polls, stops background work and closes the database pools.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let tls = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => {
            let files = tls::TlsFiles { cert: cert.clone(), key: key.clone() };
            let first = tls::load(&files).map_err(ServerError)?;
            Some((files, first))
        }
        _ => None,
    };
    let state = prepare(config).await?;
    let addr = listener.local_addr().map_err(|e| ServerError(e.to_string()))?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(%addr, scheme, database = state.store.dialect().name(), "agent-inbox listening");
    let background = tasks::spawn(state.clone());
    let stopping = state.shutdown.clone();
    let app = router(state.clone()).into_make_service_with_connect_info::<SocketAddr>();
    let graceful = async move {
        shutdown.await;
        tracing::info!("shutting down: no new connections; finishing requests in flight");
        stopping.cancel();
    };
    let serving = match tls {
        Some((files, first)) => {
            let listener = tls::TlsListener::start(
                listener,
                files,
                first,
                state.metrics.clone(),
                state.shutdown.clone(),
            )
            .map_err(|e| ServerError(format!("cannot start TLS: {e}")))?;
            // `tap_io` gives the listener's peer address to `ConnectInfo`, as for plain TCP.
            let listener = axum::serve::ListenerExt::tap_io(listener, |_| {});
            axum::serve(listener, app).with_graceful_shutdown(graceful).into_future()
        }
        None => axum::serve(listener, app).with_graceful_shutdown(graceful).into_future(),
    };
    // Streams and long polls end at once on shutdown, but a stream whose client stopped reading
    // is not polled again and cannot notice; do not wait for such connections forever.
    let draining = state.shutdown.clone();
    let served = tokio::select! {
        served = serving => served,
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
