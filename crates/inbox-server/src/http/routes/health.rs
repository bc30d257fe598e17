//! Probes and documents: `/healthz` (the process is up), `/readyz` (the database answers),
//! `/metrics` (Prometheus text) and `/openapi.json`.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};

use crate::error::ApiError;
use crate::node::AppState;
use crate::ops::health;

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
    health::ready(&state).await?;
    Ok(Json(serde_json::json!({ "status": "ready" })))
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    health::refresh_scrape_gauges(&state);
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
