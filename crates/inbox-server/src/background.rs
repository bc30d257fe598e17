//! Background work of every node: the scavenger (leases, expiry, retention), the sweep of
//! silent sessions, the clean-up of old signals and stream credentials, the notifier
//! (`notifier.rs`), the backlog snapshot behind the per-tenant gauges, and the database check
//! behind `agent_inbox_database_up`. Each loop stops
//! when the server shuts down; errors are logged and the loop carries on.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::AppState;

/// How often backlog gauges are refreshed.
const STATS_INTERVAL: Duration = Duration::from_secs(15);
/// Deepest inboxes per tenant exported as their own series.
const DEEPEST_INBOXES: usize = 20;

/// Batches of old signals one scavenger pass deletes at most, so a backlog after downtime is
/// worked off over a few passes instead of one long statement.
const SIGNAL_DELETE_BATCHES: u32 = 10;

pub fn spawn(state: AppState) -> Vec<JoinHandle<()>> {
    let mut tasks = crate::trust::spawn(&state);
    tasks.extend([
        tokio::spawn(scavenger(state.clone())),
        tokio::spawn(stats(state.clone())),
        tokio::spawn(database_health(state.clone())),
        crate::ops::signals::spawn(state),
    ]);
    tasks
}

async fn scavenger(state: AppState) {
    let mut tick = tokio::time::interval(state.config.scavenge_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = state.shutdown.cancelled() => return,
        }
        match state.store.scavenge(state.config.scavenge_batch).await {
            Ok(report) => {
                let metrics = &state.metrics;
                metrics.count(
                    "agent_inbox_lease_expirations_total",
                    vec![],
                    report.leases_returned + report.dead_lettered,
                );
                metrics.count("agent_inbox_dead_lettered_total", vec![], report.dead_lettered);
                metrics.count("agent_inbox_expired_total", vec![], report.expired);
                metrics.count("agent_inbox_archived_total", vec![], report.archived);
                if report != inbox_store::ScavengeReport::default() {
                    tracing::debug!(?report, "scavenger pass");
                }
            }
            Err(err) => tracing::warn!(error = %err, "scavenger pass failed; retrying next tick"),
        }
        let silent_for = state.config.heartbeat_interval * 3;
        let cutoff = state.store.now().minus_ms(silent_for.as_millis() as u64);
        if let Err(err) = state.store.mark_silent_sessions_gone(cutoff).await {
            tracing::warn!(error = %err, "session sweep failed");
        }
        clean_up_signals(&state).await;
    }
}

/// Deletes `outbox_signal` rows past their retention (every notifier has long read them) and
/// expired stream credentials.
async fn clean_up_signals(state: &AppState) {
    let now = state.store.now();
    let cutoff = now.minus_ms(state.config.signal_retention.as_millis() as u64);
    for _ in 0..SIGNAL_DELETE_BATCHES {
        match state.store.delete_signals_before(cutoff, inbox_store::SIGNALS_READ_MAX).await {
            Ok(deleted) => {
                state.metrics.count("agent_inbox_signals_deleted_total", vec![], deleted);
                if deleted < u64::from(inbox_store::SIGNALS_READ_MAX) {
                    break;
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "deleting old signals failed");
                break;
            }
        }
    }
    if let Err(err) = state.store.delete_expired_stream_credentials(now).await {
        tracing::warn!(error = %err, "deleting expired stream credentials failed");
    }
}

/// How often the database is asked whether it answers, for `agent_inbox_database_up`.
const DATABASE_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Keeps `agent_inbox_database_up` current and logs when the database goes away and comes
/// back, once each; requests meanwhile get `503 database_unavailable` after the bounded wait.
async fn database_health(state: AppState) {
    let mut tick = tokio::time::interval(DATABASE_CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut was_up = true;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = state.shutdown.cancelled() => return,
        }
        let checked = tokio::select! {
            checked = state.store.ping() => checked,
            _ = state.shutdown.cancelled() => return,
        };
        let up = checked.is_ok();
        state.metrics.set_gauge("agent_inbox_database_up", vec![], if up { 1.0 } else { 0.0 });
        match (was_up, checked) {
            (true, Err(err)) => {
                tracing::warn!(error = %err, "the database does not answer; requests get 503 database_unavailable until it is back")
            }
            (false, Ok(())) => tracing::info!("the database answers again"),
            _ => {}
        }
        was_up = up;
    }
}

async fn stats(state: AppState) {
    let mut tick = tokio::time::interval(STATS_INTERVAL);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = state.shutdown.cancelled() => return,
        }
        let backlogs = match state.store.backlogs().await {
            Ok(backlogs) => backlogs,
            Err(err) => {
                tracing::warn!(error = %err, "backlog snapshot failed");
                continue;
            }
        };
        let now = state.store.now();
        let mut per_tenant: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
        let mut deepest: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
        for b in &backlogs {
            let tenant = state.metrics.tenant_label(b.tenant_id.as_str());
            let entry = per_tenant.entry(tenant.clone()).or_default();
            entry.0 += b.depth;
            entry.1 += b.parked;
            entry.2 = entry.2.max(b.oldest_unacked_at.map_or(0, |t| now.ms_since(t) / 1_000));
            deepest.entry(tenant).or_default().push((b.depth, b.recipient.id.to_string()));
        }
        let series = |pick: fn(&(u64, u64, u64)) -> u64| {
            per_tenant.iter().map(|(t, v)| (vec![("tenant", t.clone())], pick(v) as f64)).collect::<Vec<_>>()
        };
        state.metrics.set_gauge_family("agent_inbox_backlog", series(|v| v.0));
        state.metrics.set_gauge_family("agent_inbox_parked", series(|v| v.1));
        state.metrics.set_gauge_family("agent_inbox_oldest_unacked_age_seconds", series(|v| v.2));
        let mut depth_series = Vec::new();
        for (tenant, mut inboxes) in deepest {
            inboxes.sort_by(|a, b| b.cmp(a));
            for (depth, agent) in inboxes.into_iter().take(DEEPEST_INBOXES).filter(|(d, _)| *d > 0) {
                depth_series.push((vec![("tenant", tenant.clone()), ("agent", agent)], depth as f64));
            }
        }
        state.metrics.set_gauge_family("agent_inbox_inbox_depth", depth_series);
    }
}
