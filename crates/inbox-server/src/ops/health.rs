//! The node's probes: whether it is ready (its database answers), and the gauges read when
//! the metrics are scraped. Liveness and the documents need no use case.

use axum::http::StatusCode;
use inbox_api::ProblemCode;

use crate::error::ApiError;
use crate::node::AppState;

/// Ready when the database answers a ping (`agent_inbox_database_up` follows); otherwise 503
/// `not_ready`, to be tried again shortly.
pub async fn ready(state: &AppState) -> Result<(), ApiError> {
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
    })
}

/// Brings the gauges read at scrape time up to date.
pub fn refresh_scrape_gauges(state: &AppState) {
    state.metrics.secrets_decryptions().set([], state.store.secrets().decryptions() as f64);
    state.metrics.log_lines_dropped_total().add([], crate::logging::take_dropped());
}
