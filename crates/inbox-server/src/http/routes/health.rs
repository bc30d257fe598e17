//! Probes and documents: `/healthz` (the process is up), `/readyz` (the database answers),
//! `/metrics` (Prometheus text) and `/openapi.json`.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use inbox_api::ProblemCode;

use crate::AppState;
use crate::error::ApiError;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
}

async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

async fn readyz(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    let up = state.store.ping().await;
    state.metrics.database_up().set([], if up.is_ok() { 1.0 } else { 0.0 });
    up.map_err(|e| {
        let mut err = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ProblemCode::NotReady,
            "the database does not answer; requests get 503 database_unavailable until it is back, retry shortly",
        )
        .retry_after(1);
        err.internal = Some(e.to_string());
        err
    })?;
    Ok(Json(serde_json::json!({ "status": "ready" })))
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    state.metrics.secrets_decryptions().set([], state.store.secrets().decryptions() as f64);
    metrics_text(&state.metrics)
}

/// The Prometheus text of `metrics`, also served while the node waits for its database.
pub(crate) fn metrics_text(metrics: &crate::metrics::Metrics) -> impl IntoResponse + use<> {
    ([(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"))], metrics.render())
}

async fn openapi(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        crate::http::openapi::document_for(&state.config),
    )
}
