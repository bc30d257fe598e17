//! `POST /v1/events`: a publisher sends one event to many agents of its tenant, atomically and
//! idempotently by `deduplication_key`.

use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use inbox_api::{PublishRequest, PublishResponse};
use inbox_core::{DeduplicationKey, EventBody, EventType, PayloadRef, Recipient, RecipientId, RecipientKey};
use inbox_store::{Publish, PublishReceipt};

use crate::AppState;
use crate::auth::Caller;
use crate::convert;
use crate::error::ApiError;
use crate::http::extract::ApiJson;

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
    caller.require("events.publish")?;
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
        correlation: convert::correlation(request.correlation),
        body,
        max_attempts: request.max_attempts,
    };
    let receipt = publish_and_hint(&state, publish).await?;
    let status =
        if receipt.deliveries.iter().all(|d| d.deduplicated) { StatusCode::OK } else { StatusCode::CREATED };
    Ok((
        status,
        Json(PublishResponse { deliveries: receipt.deliveries.iter().map(convert::delivery).collect() }),
    ))
}

/// Publishes through this node's batcher, records the commit latency, and wakes this node's
/// waiters after the commit.
pub(crate) async fn publish_and_hint(state: &AppState, publish: Publish) -> Result<PublishReceipt, ApiError> {
    let started = Instant::now();
    let tenant_id = publish.tenant_id.clone();
    let receipt = state.publisher.publish(publish).await?;
    state.metrics.observe("agent_inbox_publish_commit_seconds", vec![], started.elapsed());
    record_published(state, &tenant_id, &receipt);
    Ok(receipt)
}

/// Counts a committed publish and hints its recipients' waiters on this node.
pub(crate) fn record_published(state: &AppState, tenant_id: &inbox_core::TenantId, receipt: &PublishReceipt) {
    let tenant = state.metrics.tenant_label(tenant_id.as_str());
    let fresh = receipt.deliveries.iter().filter(|d| !d.deduplicated).count() as u64;
    state.metrics.count("agent_inbox_events_published_total", vec![("tenant", tenant.clone())], fresh);
    state.metrics.count(
        "agent_inbox_events_deduplicated_total",
        vec![("tenant", tenant)],
        receipt.deliveries.len() as u64 - fresh,
    );
    for d in receipt.deliveries.iter().filter(|d| !d.deduplicated) {
        let inbox = RecipientKey { tenant_id: tenant_id.clone(), recipient: d.recipient.clone() };
        state.hints.advanced(&inbox, d.inbox_seq);
    }
}
