//! `POST /v1/events`: a publisher sends one event to many agents of its tenant, atomically and
//! idempotently by `deduplication_key`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use inbox_api::{PublishRequest, PublishResponse, Scope};
use inbox_core::{DeduplicationKey, EventBody, EventType, PayloadRef, Recipient, RecipientId};
use inbox_store::Publish;

use crate::AppState;
use crate::auth::Caller;
use crate::convert;
use crate::error::ApiError;
use crate::http::extract::ApiJson;
use crate::ops::inbox;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/events", post(publish))
}

/// Publishes one event to every named agent: all inbox rows commit together, or none does.
#[utoipa::path(post, path = "/v1/events", tag = "publishing", request_body = PublishRequest,
    responses((status = 201, description = "published (at least one new event)", body = PublishResponse), (status = 200, description = "every recipient already had an event with this deduplication_key: the existing events, unchanged", body = PublishResponse), (status = 413, description = "payload_too_large", body = inbox_api::Problem)))]
pub async fn publish(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<PublishRequest>,
) -> Result<(StatusCode, Json<PublishResponse>), ApiError> {
    caller.require(Scope::EventsPublish)?;
    caller.check_tenant(request.tenant_id.as_deref())?;
    let recipients = request
        .recipients
        .iter()
        .enumerate()
        .map(|(i, id)| {
            RecipientId::new(id.as_str())
                .map(Recipient::agent)
                .map_err(|e| ApiError::invalid_field(&format!("recipients[{i}]"), e.problem))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let body = match (request.payload, request.payload_ref) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid_field("payload", "and payload_ref cannot both be set; send one"));
        }
        (Some(payload), None) => EventBody::Json(payload.to_string()),
        (None, Some(r)) => EventBody::Reference(PayloadRef { kind: r.kind, id: r.id }),
        (None, None) => EventBody::Empty,
    };
    let publish = Publish {
        tenant_id: caller.tenant_id.clone(),
        recipients,
        event_type: EventType::new(request.event_type)
            .map_err(|e| ApiError::invalid_field("event_type", e.problem))?,
        priority: convert::priority(request.priority.as_deref())?,
        available_at: convert::time("available_at_utc", request.available_at_utc.as_deref())?,
        expires_at: convert::time("expires_at_utc", request.expires_at_utc.as_deref())?,
        deduplication_key: request
            .deduplication_key
            .map(DeduplicationKey::new)
            .transpose()
            .map_err(|e| ApiError::invalid_field("deduplication_key", e.problem))?,
        correlation: request.correlation,
        body,
        max_attempts: request.max_attempts,
    };
    let receipt = inbox::publish(&state, publish).await?;
    let status =
        if receipt.deliveries.iter().all(|d| d.deduplicated) { StatusCode::OK } else { StatusCode::CREATED };
    Ok((
        status,
        Json(PublishResponse { deliveries: receipt.deliveries.iter().map(convert::delivery).collect() }),
    ))
}
