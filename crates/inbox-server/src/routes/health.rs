//! Probes and documents: `/healthz` (the process is up), `/readyz` (the database answers),
//! `/metrics` (Prometheus text) and `/openapi.json`.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};

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
    state.store.ping().await.map_err(|e| {
        let mut err = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "the database does not answer; retry shortly",
        );
        err.internal = Some(e.to_string());
        err
    })?;
    Ok(Json(serde_json::json!({ "status": "ready" })))
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"))], state.metrics.render())
}

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], crate::openapi::document())
}
