//! Operators' views of a tenant beyond its events: agent sessions, callback registrations with
//! their recent deliveries (and re-enabling a disabled one, the only change made here), agents'
//! signing keys, and activity per minute. Each starts with [`Caller::require_operator`]; the
//! tenant is the token's.

use axum::http::StatusCode;
use inbox_api::time::format_utc;
use inbox_api::{
    ActivityResponse, AdminAgentKeyView, AdminAgentKeysResponse, AdminCallbackView, AdminCallbacksResponse,
    AdminSessionView, AdminSessionsResponse, MinuteActivityView, ProblemCode, QuotaRefusalsResponse,
};
use inbox_core::limits::ActivityMinutes;
use inbox_core::{RecipientId, UnixMillis};
use inbox_store::{AGENT_KEYS_LIST_MAX, CallbackRegistration, MinuteActivity, RegistrationId, SessionView};

use crate::caller::Caller;
use crate::convert;
use crate::error::ApiError;
use crate::node::AppState;
use crate::ops::admin::LIST_LIMIT_DEFAULT;

/// Recent deliveries shown with each callback registration.
pub const CALLBACK_RECENT_DELIVERIES: u32 = 10;
/// Default span of the activity view, in minutes (one hour).
pub const ACTIVITY_MINUTES_DEFAULT: ActivityMinutes = ActivityMinutes::of(60);

const MINUTE_MS: i64 = 60_000;

/// The tenant's sessions (or one agent's), most recently heard from first.
pub async fn sessions(
    state: &AppState,
    caller: &Caller,
    recipient_id: Option<&str>,
    limit: Option<u32>,
) -> Result<AdminSessionsResponse, ApiError> {
    caller.require_operator()?;
    let agent = recipient_id
        .map(RecipientId::new)
        .transpose()
        .map_err(|e| ApiError::invalid_field("recipient_id", e.problem))?;
    let sessions = state
        .store
        .sessions()
        .list(&caller.tenant_id, agent.as_ref(), limit.unwrap_or(LIST_LIMIT_DEFAULT))
        .await?;
    Ok(AdminSessionsResponse { sessions: sessions.iter().map(session_view).collect() })
}

fn session_view(s: &SessionView) -> AdminSessionView {
    AdminSessionView {
        session_id: s.session_id.clone(),
        agent_id: s.agent_id.clone(),
        device_id: s.device_id.clone(),
        transport: s.transport.clone(),
        status: s.status.clone(),
        connected_at_utc: format_utc(s.connected_at.get()),
        last_heartbeat_at_utc: format_utc(s.last_heartbeat_at.get()),
        last_seen_seq: s.last_seen_seq.get(),
        auth_subject: s.auth_subject.clone(),
        superseded_by_session_id: s.superseded_by.clone(),
        superseded_at_utc: s.superseded_at.map(|t| format_utc(t.get())),
    }
}

/// Every callback registration of the tenant with its delivery state and last deliveries.
/// One query per registration for its log: the tenant's registrations are few (capped by
/// `callbacks.per_tenant_max`).
pub async fn callbacks(state: &AppState, caller: &Caller) -> Result<AdminCallbacksResponse, ApiError> {
    caller.require_operator()?;
    let registrations = state.store.callbacks().registrations(&caller.tenant_id, None).await?;
    let mut views = Vec::with_capacity(registrations.len());
    for registration in &registrations {
        views.push(callback_view(state, registration).await?);
    }
    Ok(AdminCallbacksResponse { registrations: views })
}

/// Re-enables a callback registration the delivery worker disabled: its failure counts start
/// over and its agent's current head is delivered at once. One that is not disabled is
/// answered as it is, unchanged.
pub async fn enable_callback(
    state: &AppState,
    caller: &Caller,
    registration_id: &str,
) -> Result<AdminCallbackView, ApiError> {
    caller.require_operator()?;
    let not_found = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            ProblemCode::CallbackRegistrationNotFound,
            format!(
                "no callback registration {registration_id:?} in this tenant; list them with GET /v1/admin/callbacks"
            ),
        )
    };
    let id = RegistrationId::new(registration_id).map_err(|_| not_found())?;
    let store = state.store.callbacks();
    if store.enable(&caller.tenant_id, &id).await? {
        tracing::info!(registration_id = %id, tenant_id = %caller.tenant_id, "callback re-enabled by an operator");
    }
    let registration = store.registration(&caller.tenant_id, &id).await?.ok_or_else(not_found)?;
    callback_view(state, &registration).await
}

async fn callback_view(
    state: &AppState,
    registration: &CallbackRegistration,
) -> Result<AdminCallbackView, ApiError> {
    let attempts = state
        .store
        .callbacks()
        .attempts(&registration.tenant_id, &registration.registration_id, CALLBACK_RECENT_DELIVERIES)
        .await?;
    Ok(AdminCallbackView {
        registration: convert::callback_registration(registration),
        failed_attempts: registration.failed_attempts,
        consecutive_failures: registration.consecutive_failures,
        failing_since_utc: registration.failing_since.map(|t| format_utc(t.get())),
        next_attempt_at_utc: format_utc(registration.next_attempt_at.get()),
        recent_deliveries: attempts.iter().map(convert::callback_attempt).collect(),
    })
}

/// Every agent key of the tenant, live and retired, without its material.
pub async fn agent_keys(state: &AppState, caller: &Caller) -> Result<AdminAgentKeysResponse, ApiError> {
    caller.require_operator()?;
    let keys = state.store.signatures().tenant_agent_keys(&caller.tenant_id, AGENT_KEYS_LIST_MAX).await?;
    Ok(AdminAgentKeysResponse {
        keys: keys
            .iter()
            .map(|k| AdminAgentKeyView {
                key_id: k.key_id.clone(),
                agent_id: k.agent_id.clone(),
                algorithm: k.algorithm.name().to_owned(),
                created_at_utc: format_utc(k.created_at.get()),
                retired_at_utc: k.retired_at.map(|t| format_utc(t.get())),
            })
            .collect(),
    })
}

/// Published and acknowledged events per minute over the last `minutes`, and the depth at the
/// end of each minute.
pub async fn activity(
    state: &AppState,
    caller: &Caller,
    minutes: Option<u32>,
) -> Result<ActivityResponse, ApiError> {
    caller.require_operator()?;
    let minutes = minutes
        .map(ActivityMinutes::new)
        .transpose()
        .map_err(|e| ApiError::invalid_field("minutes", e))?
        .unwrap_or(ACTIVITY_MINUTES_DEFAULT)
        .get();
    let now = state.store.now();
    let current_minute = now.get() - now.get() % MINUTE_MS;
    let since = UnixMillis(current_minute - (i64::from(minutes) - 1) * MINUTE_MS);
    let counted = state.store.inbox().activity(&caller.tenant_id, since).await?;
    let depth_now: u64 = state
        .store
        .inbox()
        .inbox_stats(&caller.tenant_id, state.store.config().batch_events_max)
        .await?
        .iter()
        .map(|s| s.depth)
        .sum();
    Ok(ActivityResponse { minutes: per_minute(since, minutes, &counted, depth_now) })
}

/// Every minute from `since`, oldest first, with its counts (0 when the store had none) and
/// the depth at its end: the depth now, minus what each later minute added (published less
/// acknowledged). A reconstruction, not a sample: dead-lettered, expired and purged events
/// leave the depth without an acknowledgement, so further back it reads a little high; it is
/// never below zero.
fn per_minute(
    since: UnixMillis,
    minutes: u32,
    counted: &[MinuteActivity],
    depth_now: u64,
) -> Vec<MinuteActivityView> {
    let counts: Vec<(u64, u64)> = (0..i64::from(minutes))
        .map(|i| {
            let start = since.get() + i * MINUTE_MS;
            counted.iter().find(|m| m.minute_start.get() == start).map_or((0, 0), |m| (m.published, m.acked))
        })
        .collect();
    let mut depth = i128::from(depth_now);
    let mut views: Vec<MinuteActivityView> = Vec::with_capacity(counts.len());
    for (i, (published, acked)) in counts.iter().enumerate().rev() {
        views.push(MinuteActivityView {
            minute_start_utc: format_utc(since.get() + i as i64 * MINUTE_MS),
            published: *published,
            acked: *acked,
            depth: u64::try_from(depth.max(0)).unwrap_or(0),
        });
        depth -= i128::from(*published) - i128::from(*acked);
    }
    views.reverse();
    views
}

/// This node's refusals of the tenant's publishes by its quotas (`quotas.rs`).
pub fn quota_refusals(state: &AppState, caller: &Caller) -> Result<QuotaRefusalsResponse, ApiError> {
    caller.require_operator()?;
    Ok(state.quotas.refusals(&caller.tenant_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minute(start: i64, published: u64, acked: u64) -> MinuteActivity {
        MinuteActivity { minute_start: UnixMillis(start), published, acked }
    }

    #[test]
    fn every_minute_is_listed_and_the_depth_walks_back_from_now() {
        let since = UnixMillis(600_000);
        // Minute 0: 5 published, 1 acked; minute 1: nothing; minute 2: 2 published, 4 acked.
        let counted = [minute(600_000, 5, 1), minute(720_000, 2, 4)];
        let views = per_minute(since, 3, &counted, 7);
        let rows: Vec<(u64, u64, u64)> = views.iter().map(|v| (v.published, v.acked, v.depth)).collect();
        assert_eq!(rows, [(5, 1, 9), (0, 0, 9), (2, 4, 7)]);
        assert_eq!(views[0].minute_start_utc, format_utc(600_000));
        assert_eq!(views[2].minute_start_utc, format_utc(720_000));
    }

    #[test]
    fn a_reconstructed_depth_never_goes_below_zero() {
        let views = per_minute(UnixMillis(0), 2, &[minute(60_000, 10, 0)], 3);
        assert_eq!(views.iter().map(|v| v.depth).collect::<Vec<_>>(), [0, 3]);
    }
}
