//! A node that comes up before its database: it listens at once, answers `/healthz` and says on
//! `/readyz` what it is waiting for, while it connects and migrates in the background with
//! jittered backoff. The full API takes over the moment that succeeds.
//!
//! Readiness states: `waiting` (no database yet: every API route answers
//! `503 database_unavailable`), then `ready` (the full API; during a later outage requests get
//! the same 503 after the bounded database wait, and `/readyz` answers 503 until it is back).

use std::convert::Infallible;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::future::BoxFuture;
use inbox_api::ProblemCode;

use crate::database::Retry;
use crate::error::ApiError;
use crate::metrics::Metrics;

/// First and longest wait between two attempts to reach the database.
const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// Quiet time between two warnings while the database stays away.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// What a node still waiting for its database tells `/readyz`.
#[derive(Debug)]
pub(crate) struct Waiting {
    database: String,
    progress: Mutex<Progress>,
}

#[derive(Debug, Default)]
struct Progress {
    attempts: u64,
    last_error: Option<String>,
}

impl Waiting {
    /// `database` is the URL with any password already redacted.
    pub(crate) fn new(database: String) -> Self {
        Waiting { database, progress: Mutex::default() }
    }

    fn failed(&self, error: String) -> u64 {
        let mut progress = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        progress.attempts += 1;
        progress.last_error = Some(error);
        progress.attempts
    }

    fn detail(&self) -> String {
        let progress = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        match &progress.last_error {
            None => format!("connecting to the database at {}; retry shortly", self.database),
            Some(error) => format!(
                "waiting for the database at {}: {} attempt(s) so far, the last failed with \"{error}\"; it is retried every second",
                self.database, progress.attempts
            ),
        }
    }
}

/// Retries `attempt` until it succeeds, fails for a reason retrying cannot mend, or
/// `wait_max` passes. Each failure is logged at most once per [`WARN_EVERY`].
pub(crate) async fn until_reachable<T, F, Fut>(
    waiting: &Waiting,
    wait_max: Option<Duration>,
    redact: impl Fn(String) -> String,
    mut attempt: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Retry>>,
{
    let started = Instant::now();
    let mut delay = RETRY_FIRST;
    let mut warned: Option<Instant> = None;
    loop {
        match attempt().await {
            Ok(value) => {
                if warned.is_some() {
                    tracing::info!(
                        waited_s = started.elapsed().as_secs(),
                        "the database is reachable; serving"
                    );
                }
                return Ok(value);
            }
            Err(Retry::Never(reason)) => return Err(redact(reason)),
            Err(Retry::Later(reason)) => {
                let reason = redact(reason);
                let attempts = waiting.failed(reason.clone());
                if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                    tracing::warn!(attempts, error = %reason, database = %waiting.database, "the database is not reachable yet; /readyz answers 503 and the API 503 database_unavailable until it is");
                    warned = Some(Instant::now());
                }
                if let Some(limit) = wait_max.filter(|limit| started.elapsed() >= *limit) {
                    return Err(format!(
                        "the database at {} was not reachable within database_wait_max ({}): {reason}",
                        waiting.database,
                        humantime::format_duration(limit)
                    ));
                }
            }
        }
        tokio::time::sleep(jittered(delay)).await;
        delay = (delay * 2).min(RETRY_MAX);
    }
}

/// ±20 %, so nodes restarted together do not knock in step.
fn jittered(delay: Duration) -> Duration {
    let [byte] = inbox_store::random_bytes::<1>();
    delay.mul_f64(0.8 + 0.4 * f64::from(byte) / 255.0)
}

#[derive(Debug, Clone)]
struct WaitingState {
    waiting: Arc<Waiting>,
    metrics: Arc<Metrics>,
}

/// Routes served while the database is not yet reached.
pub(crate) fn waiting_router(waiting: Arc<Waiting>, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { axum::Json(serde_json::json!({ "status": "ok" })) }))
        .route("/readyz", get(readyz))
        .route(
            "/metrics",
            get(|State(state): State<WaitingState>| async move {
                crate::http::routes::health::metrics_text(&state.metrics)
            }),
        )
        .fallback(unavailable)
        .with_state(WaitingState { waiting, metrics })
}

async fn readyz(State(state): State<WaitingState>) -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, ProblemCode::NotReady, state.waiting.detail())
        .retry_after(1)
}

async fn unavailable(State(state): State<WaitingState>) -> Response {
    state.metrics.database_unavailable_total().add([], 1);
    let waiting = &state.waiting;
    let mut err = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ProblemCode::DatabaseUnavailable,
        "the service is starting and cannot reach its database yet; retry shortly (GET /readyz says what it waits for)",
    )
    .retry_after(1);
    err.internal = Some(waiting.detail());
    let mut response = err.into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The service behind the listener: the waiting routes until the full API is set, then it.
#[derive(Clone)]
pub(crate) struct Dispatch {
    pub ready: Arc<OnceLock<Router>>,
    pub waiting: Router,
}

impl tower::Service<Request> for Dispatch {
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let mut router = self.ready.get().unwrap_or(&self.waiting).clone();
        Box::pin(async move { router.call(request).await })
    }
}
