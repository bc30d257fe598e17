//! `POST /v1/events`: a publisher sends one event to many agents of its tenant, atomically and
//! idempotently by `deduplication_key` (`ops::inbox::publish`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use inbox_api::{PublishRequest, PublishResponse};

use crate::caller::Caller;
use crate::error::ApiError;
use crate::http::extract::ApiJson;
use crate::node::AppState;
use crate::ops::inbox;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/events", post(publish))
}

/// Publishes one event to every named agent: all inbox rows commit together, or none does.
#[utoipa::path(post, path = "/v1/events", tag = "publishing", request_body = PublishRequest,
    responses((status = 201, description = "published (at least one new event)", body = PublishResponse), (status = 200, description = "every recipient already had an event with this deduplication_key: the existing events, unchanged", body = PublishResponse), (status = 413, description = "payload_too_large", body = inbox_api::Problem), (status = 429, description = "tenant_pending_limit or rate_limited: the tenant's pending-events quota (or a rate limit); retry after Retry-After seconds", body = inbox_api::Problem), (status = 507, description = "tenant_storage_limit: the tenant's stored-bytes quota; retry after Retry-After seconds", body = inbox_api::Problem)))]
pub async fn publish(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<PublishRequest>,
) -> Result<(StatusCode, Json<PublishResponse>), ApiError> {
    let published = inbox::publish(&state, &caller, request).await?;
    let status = if published.deliveries.iter().all(|d| d.deduplicated) {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(published)))
}
