//! Operators' endpoints, within the admin token's own tenant: list, requeue and purge parked
//! (dead-lettered and quarantined) events, and see each inbox's backlog.

use axum::extract::{Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use inbox_api::{
    InboxStatsResponse, InboxStatsView, ItemResult, ItemResults, ParkedEventsRequest, ParkedEventsResponse,
    ProblemCode, Scope,
};
use inbox_core::{AckState, EventId, Recipient, RecipientId, RecipientKey};
use inbox_store::{ItemOutcome, ParkedQuery};
use serde::Deserialize;

use crate::AppState;
use crate::auth::{Caller, CallerKind};
use crate::convert::{self, admin_event};
use crate::error::{ApiError, item_error};
use crate::http::extract::ApiJson;
use crate::ops::inbox;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/admin/parked", get(list_parked))
        .route("/v1/admin/parked/requeue", post(requeue))
        .route("/v1/admin/parked/purge", post(purge))
        .route("/v1/admin/inboxes", get(inboxes))
}

fn require_admin(caller: &Caller) -> Result<(), ApiError> {
    caller.require(Scope::Admin)?;
    if caller.kind != CallerKind::Admin {
        return Err(ApiError::forbidden(
            ProblemCode::KindNotAllowed,
            "operator endpoints need an admin token (kind admin)",
        ));
    }
    Ok(())
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ParkedParams {
    recipient_id: Option<String>,
    /// `dead_letter` or `quarantined`; both when absent.
    state: Option<String>,
    limit: Option<u32>,
}

#[utoipa::path(get, path = "/v1/admin/parked", tag = "admin", params(ParkedParams), responses((status = 200, body = ParkedEventsResponse)))]
pub async fn list_parked(
    State(state): State<AppState>,
    caller: Caller,
    params: Result<Query<ParkedParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ParkedEventsResponse>, ApiError> {
    require_admin(&caller)?;
    let Query(params) = params.map_err(|e| crate::http::extract::query_problem(&e))?;
    let recipient = params
        .recipient_id
        .map(|id| RecipientId::new(id).map(Recipient::agent))
        .transpose()
        .map_err(|e| ApiError::invalid_field("recipient_id", e.problem))?;
    let parked_state = match params.state.as_deref() {
        None => None,
        Some("dead_letter") => Some(AckState::DeadLetter),
        Some("quarantined") => Some(AckState::Quarantined),
        Some(other) => {
            return Err(ApiError::invalid_field(
                "state",
                format!("is {other:?}; use dead_letter or quarantined"),
            ));
        }
    };
    let query = ParkedQuery {
        tenant_id: caller.tenant_id.clone(),
        recipient,
        state: parked_state,
        limit: params.limit.unwrap_or(100),
    };
    let events = state.store.inbox().list_parked(&query).await?;
    let now = state.store.now();
    Ok(Json(ParkedEventsResponse { events: events.iter().map(|e| admin_event(e, now)).collect() }))
}

fn parse_request(
    caller: &Caller,
    request: &ParkedEventsRequest,
) -> Result<(RecipientKey, Vec<EventId>), ApiError> {
    let recipient = RecipientId::new(request.recipient_id.as_str())
        .map_err(|e| ApiError::invalid_field("recipient_id", e.problem))?;
    let ids = request
        .event_ids
        .iter()
        .enumerate()
        .map(|(i, id)| convert::event_id(&format!("event_ids[{i}]"), id))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((RecipientKey { tenant_id: caller.tenant_id.clone(), recipient: Recipient::agent(recipient) }, ids))
}

fn results<T>(outcomes: Vec<ItemOutcome<T>>, ids: &[EventId]) -> ItemResults {
    ItemResults {
        results: outcomes
            .into_iter()
            .zip(ids)
            .map(|(outcome, id)| ItemResult {
                event_id: id.to_string(),
                ok: outcome.is_ok(),
                error: outcome.err().map(|r| item_error(&r)),
            })
            .collect(),
    }
}

/// Sends parked events back to the inbox with a fresh budget of attempts.
#[utoipa::path(post, path = "/v1/admin/parked/requeue", tag = "admin", request_body = ParkedEventsRequest, responses((status = 200, body = ItemResults)))]
pub async fn requeue(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<ParkedEventsRequest>,
) -> Result<Json<ItemResults>, ApiError> {
    require_admin(&caller)?;
    let (inbox, ids) = parse_request(&caller, &request)?;
    let outcomes = inbox::requeue(&state, &inbox, &ids).await?;
    Ok(Json(results(outcomes, &ids)))
}

/// Deletes parked events for good.
#[utoipa::path(post, path = "/v1/admin/parked/purge", tag = "admin", request_body = ParkedEventsRequest, responses((status = 200, body = ItemResults)))]
pub async fn purge(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<ParkedEventsRequest>,
) -> Result<Json<ItemResults>, ApiError> {
    require_admin(&caller)?;
    let (inbox, ids) = parse_request(&caller, &request)?;
    let outcomes = state.store.inbox().purge(&inbox, &ids).await?;
    Ok(Json(results(outcomes, &ids)))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct InboxesParams {
    limit: Option<u32>,
}

/// Depth, claimed and parked counts and the oldest unacknowledged age of each inbox.
#[utoipa::path(get, path = "/v1/admin/inboxes", tag = "admin", params(InboxesParams), responses((status = 200, body = InboxStatsResponse)))]
pub async fn inboxes(
    State(state): State<AppState>,
    caller: Caller,
    params: Result<Query<InboxesParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<InboxStatsResponse>, ApiError> {
    require_admin(&caller)?;
    let Query(params) = params.map_err(|e| crate::http::extract::query_problem(&e))?;
    let stats = state.store.inbox().inbox_stats(&caller.tenant_id, params.limit.unwrap_or(100)).await?;
    let now = state.store.now();
    Ok(Json(InboxStatsResponse {
        inboxes: stats
            .into_iter()
            .map(|s| InboxStatsView {
                recipient_kind: s.recipient.kind.to_string(),
                recipient_id: s.recipient.id.to_string(),
                head_seq: s.head_seq.get(),
                depth: s.depth,
                claimed: s.claimed,
                // Filled from the store's new counts once it has them (issue 16).
                retry_scheduled: 0,
                parked: s.parked,
                oldest_unacked_age_seconds: s.oldest_unacked_at.map(|t| now.ms_since(t) / 1_000),
                online_sessions: 0,
                last_seen_at_utc: None,
            })
            .collect(),
    }))
}
