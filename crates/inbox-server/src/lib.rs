//! The agent-inbox HTTP service. [`run`] takes its configuration, a bound listener and a
//! shutdown future, so tests bind port 0 and stop it cleanly.
//!
//! Three layers: `http/` (extractors authenticate, validate and spend signed requests' nonces;
//! a handler makes one call, then converts to the wire types of `inbox-api`) over `ops/` (the
//! use cases, one module per subsystem, shared by HTTP, the WebSocket and seed 000's aliases)
//! over the store. `background.rs` runs the periodic work through `periodic.rs`.
//!
//! This file only assembles: it declares the modules, and [`run_with`] listens, reaches the
//! database (`database.rs`), assembles the node's state (`node.rs`) and serves. No module
//! imports from here.

mod ack_batcher;
mod background;
pub mod caller;
pub mod config;
mod convert;
mod database;
mod error;
mod group_commit;
mod head_cache;
mod heartbeats;
mod hints;
mod http;
mod limits;
pub mod logging;
mod metrics;
mod node;
mod nonce_writer;
mod ops;
mod periodic;
mod proxies;
mod publish_batcher;
mod quotas;
pub mod secrets_key;
mod session_changes;
mod shutdown;
mod startup;
mod tenant_policies;
pub mod tls;
pub mod tokens;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::Router;
use tokio::net::TcpListener;

use crate::shutdown::Shutdown;

pub use caller::CallerKind;
pub use config::Config;
pub use database::ServerError;
pub use database::{connect_store, prepare_secrets};
pub use error::ApiError;
pub use http::openapi;
pub use node::{AppState, NodeParts, Overrides};
pub use ops::callbacks::{Resolver, ResolverOverride, SystemResolver};
pub use tokens::{IssuedTokens, TokenService};

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
        .merge(http::routes::a2a::router())
        .merge(http::routes::admin_routers())
        .merge(http::routes::tokens::router())
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

    let proxies = proxies::TrustedProxies::parse(&config.http.trusted_proxies).map_err(ServerError)?;
    let prepared = tokio::select! {
        reached = startup::until_reachable(&waiting, config.database.wait_max, |text| database::redact(&config, text), || {
            database::reach(&config, &metrics, &secrets)
        }) => Some(reached.map(|reached| {
            AppState::assemble(config.clone(), &overrides, reached, metrics.clone(), proxies, stopping.clone())
        })),
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
