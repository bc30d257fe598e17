//! Operators' view of one inbox's events: the events by state, and one event with its
//! envelope, payload and history (live or archived). The rules live in `ops/admin.rs`.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use inbox_api::{AdminEventDetail, AdminEventsResponse, EventsOrder};
use serde::Deserialize;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::http::extract::ApiQuery;
use crate::node::AppState;
use crate::ops::admin::{self, EventsFilter};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/admin/inboxes/{recipient_id}/events", get(events))
        .route("/v1/admin/inboxes/{recipient_id}/events/{event_id}", get(event))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsParams {
    /// `available`, `retry_scheduled`, `claimed`, `acked`, `dead_letter`, `quarantined` or
    /// `expired`; every state when absent.
    #[param(value_type = Option<inbox_core::EventState>)]
    state: Option<String>,
    /// `oldest_first` (the default) or `newest_first`.
    order: Option<EventsOrder>,
    /// Only events with a larger `inbox_seq`: oldest first, page on with the last one's.
    #[param(value_type = Option<inbox_core::InboxSeq>)]
    after_seq: Option<u64>,
    /// Only events with a smaller `inbox_seq`: newest first, page on with the last one's.
    #[param(value_type = Option<inbox_core::InboxSeq>)]
    before_seq: Option<u64>,
    #[param(value_type = Option<inbox_core::limits::BatchLimit>)]
    limit: Option<u32>,
}

/// The inbox's events (of one state when asked), in `inbox_seq` order, oldest or newest first,
/// with their reasons, lease sessions and terminal times. Archived events are not listed; read
/// them one by one.
#[utoipa::path(get, path = "/v1/admin/inboxes/{recipient_id}/events", tag = "admin",
    params(("recipient_id" = inbox_core::RecipientId, Path), EventsParams),
    responses((status = 200, body = AdminEventsResponse)))]
pub async fn events(
    State(state): State<AppState>,
    caller: Caller,
    Path(recipient_id): Path<String>,
    ApiQuery(p): ApiQuery<EventsParams>,
) -> Result<Json<AdminEventsResponse>, ApiError> {
    let filter = EventsFilter {
        state: p.state,
        order: p.order,
        after_seq: p.after_seq,
        before_seq: p.before_seq,
        limit: p.limit,
    };
    admin::events(&state, &caller, &recipient_id, filter).await.map(Json)
}

/// One event with its history, oldest transition first, from the live table or the archive.
#[utoipa::path(get, path = "/v1/admin/inboxes/{recipient_id}/events/{event_id}", tag = "admin",
    params(("recipient_id" = inbox_core::RecipientId, Path), ("event_id" = inbox_core::EventId, Path)),
    responses((status = 200, body = AdminEventDetail),
        (status = 404, description = "not_found: no such event in this inbox, live or archived", body = inbox_api::Problem)))]
pub async fn event(
    State(state): State<AppState>,
    caller: Caller,
    Path((recipient_id, event_id)): Path<(String, String)>,
) -> Result<Json<AdminEventDetail>, ApiError> {
    admin::event_detail(&state, &caller, &recipient_id, &event_id).await.map(Json)
}
