//! Background work of every node, each a [`crate::periodic::Job`] run by [`crate::periodic::every`]: the
//! scavenger (leases, expiry, retention), the sweep of silent sessions, the clean-up of old
//! signals and stream credentials, the notifier (`ops/signals.rs`), the callback dispatcher
//! (`ops/callbacks.rs`), the reload of token signing keys (so `agent-inbox keys rotate` needs
//! no restart) and of a changed secrets key file, the clean-up of expired nonces and old delivery log entries, the backlog
//! snapshot behind the per-tenant gauges and InnoDB's purge lag, the database check behind
//! `agent_inbox_database_up`, and the A2A reconciler and push-notification worker (`ops/a2a/`). Each stops when the server shuts down; failures are logged and
//! the job carries on.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::node::AppState;
use crate::ops::a2a::push::PushDispatcher;
use crate::ops::a2a::reconcile::Reconciler;
use crate::ops::callbacks::Dispatcher;
use crate::ops::signals::Notifier;
use crate::periodic::{Failure, Job, Outcome, Start, every};

/// How often backlog gauges are refreshed.
const STATS_INTERVAL: Duration = Duration::from_secs(15);
/// Deepest inboxes per tenant exported as their own series.
const DEEPEST_INBOXES: usize = 20;

/// Batches of old signals one scavenger pass deletes at most, so a backlog after downtime is
/// worked off over a few passes instead of one long statement.
const SIGNAL_DELETE_BATCHES: u32 = 10;

/// How long the delivery log is kept.
pub const CALLBACK_LOG_RETENTION: Duration = Duration::from_secs(7 * 86_400);
/// How often expired nonces and old log entries are deleted.
const CLEAN_UP_INTERVAL: Duration = Duration::from_secs(10);
/// Batches one clean-up deletes at most per table.
const CLEAN_UP_BATCHES: u32 = 10;

/// How often the database is asked whether it answers, for `agent_inbox_database_up`.
const DATABASE_CHECK_INTERVAL: Duration = Duration::from_secs(1);

pub fn spawn(state: AppState) -> Vec<JoinHandle<()>> {
    let config = state.config.clone();
    let s = || state.clone();
    vec![
        tokio::spawn(every(s(), config.callbacks.poll_interval, Start::Now, Dispatcher)),
        tokio::spawn(every(
            s(),
            config.tokens.signing_keys_reload_interval,
            Start::AfterInterval,
            ReloadSigningKeys,
        )),
        tokio::spawn(every(s(), CLEAN_UP_INTERVAL, Start::Now, CleanUp)),
        tokio::spawn(every(s(), crate::secrets_key::CHECK_INTERVAL, Start::AfterInterval, ReloadSecretsKey)),
        tokio::spawn(every(s(), config.inbox.scavenge_interval, Start::Now, Scavenger)),
        tokio::spawn(every(s(), STATS_INTERVAL, Start::Now, Stats)),
        tokio::spawn(every(s(), DATABASE_CHECK_INTERVAL, Start::Now, DatabaseHealth { was_up: true })),
        tokio::spawn(every(s(), config.signals.notify_interval, Start::Now, Notifier::default())),
        tokio::spawn(every(s(), crate::ops::a2a::reconcile::INTERVAL, Start::Now, Reconciler::default())),
        tokio::spawn(every(s(), config.callbacks.poll_interval, Start::Now, PushDispatcher)),
    ]
}

/// Leases, expiry, retention; then silent sessions; then old signals and stream credentials.
struct Scavenger;

impl Job for Scavenger {
    const NAME: &'static str = "scavenger";

    async fn tick(&mut self, state: &AppState) -> Outcome {
        let scavenged = match state.store.inbox().scavenge(state.config.inbox.scavenge_batch).await {
            Ok(report) => {
                let metrics = &state.metrics;
                metrics.lease_expirations_total().add([], report.leases_returned + report.dead_lettered);
                metrics.dead_lettered_total().add([], report.dead_lettered);
                metrics.expired_total().add([], report.expired);
                metrics.archived_total().add([], report.archived);
                if report != inbox_store::ScavengeReport::default() {
                    tracing::debug!(?report, "scavenger pass");
                }
                Ok(())
            }
            Err(err) => Err(Failure::new("scavenger pass", err)),
        };
        let silent_for = state.config.sessions.heartbeat_interval * 3;
        let cutoff = state.store.now().minus_ms(silent_for.as_millis() as u64);
        let swept = state
            .store
            .sessions()
            .mark_silent_gone(cutoff)
            .await
            .map(|_| ())
            .map_err(|err| Failure::new("session sweep", err));
        let cleaned = clean_up_signals(state).await;
        scavenged.and(swept).and(cleaned)
    }
}

/// Deletes `outbox_signal` rows past their retention (every notifier has long read them) and
/// expired stream credentials and sign-outs.
async fn clean_up_signals(state: &AppState) -> Outcome {
    let now = state.store.now();
    let cutoff = now.minus_ms(state.config.signals.retention.as_millis() as u64);
    let mut outcome = Ok(());
    for _ in 0..SIGNAL_DELETE_BATCHES {
        match state.store.signals().delete_before(cutoff, inbox_store::SIGNALS_READ_MAX).await {
            Ok(deleted) => {
                state.metrics.signals_deleted_total().add([], deleted);
                if deleted < u64::from(inbox_store::SIGNALS_READ_MAX) {
                    break;
                }
            }
            Err(err) => {
                outcome = Err(Failure::new("deleting old signals", err));
                break;
            }
        }
    }
    let credentials = state
        .store
        .sessions()
        .delete_expired_stream_credentials(now)
        .await
        .map(|_| ())
        .map_err(|err| Failure::new("deleting expired stream credentials", err));
    let sign_outs = state
        .store
        .tokens()
        .delete_expired_sign_outs(now)
        .await
        .map(|_| ())
        .map_err(|err| Failure::new("deleting the sign-outs of expired tokens", err));
    outcome.and(credentials).and(sign_outs)
}

/// Re-reads the token signing keys, so a rotation elsewhere takes effect here.
struct ReloadSigningKeys;

impl Job for ReloadSigningKeys {
    const NAME: &'static str = "signing key reload";

    async fn tick(&mut self, state: &AppState) -> Outcome {
        state
            .tokens
            .reload_keys()
            .await
            .map_err(|err| Failure::new("reloading token signing keys (keeping the loaded ones)", err))
    }
}

/// Re-reads the secrets key file when it changed: a new key is learned before a rewrap names
/// it, an old one dropped after. A file that lacks a key still in use is refused (the loaded
/// keys stay), and tried again on the next tick.
struct ReloadSecretsKey;

impl Job for ReloadSecretsKey {
    const NAME: &'static str = "secrets key reload";

    async fn tick(&mut self, state: &AppState) -> Outcome {
        let Some(path) = state.secrets_key.file() else { return Ok(()) };
        let stamp = crate::secrets_key::FileStamp::of(path)
            .map_err(|err| Failure::new("reading the secrets key file (keeping the loaded keys)", err))?;
        if !state.secrets_key.changed(stamp) {
            return Ok(());
        }
        let refused = |err: String| {
            state.metrics.secrets_key_reloads_total().add(["refused".to_owned()], 1);
            Failure::new("loading the changed secrets key file (keeping the loaded keys)", err)
        };
        let keys = crate::secrets_key::read(path).map_err(refused)?;
        state
            .store
            .secrets()
            .check(&keys)
            .await
            .map_err(|err| refused(format!("{}: {err}", path.display())))?;
        state.store.secrets().use_keys(keys.clone());
        for key_id in state.secrets_key.loaded(stamp, &keys) {
            state.metrics.secrets_key_loaded().set([key_id], 0.0);
        }
        for key_id in keys.ids() {
            state.metrics.secrets_key_loaded().set([key_id.to_owned()], 1.0);
        }
        state.metrics.secrets_key_reloads_total().add(["loaded".to_owned()], 1);
        tracing::info!(file = %path.display(), keys = %keys.ids().join(","), "secrets key file reloaded");
        Ok(())
    }
}

/// Deletes expired signature nonces and old callback delivery log entries.
struct CleanUp;

impl Job for CleanUp {
    const NAME: &'static str = "nonce and delivery log clean-up";

    async fn tick(&mut self, state: &AppState) -> Outcome {
        let now = state.store.now();
        let mut nonces = Ok(());
        for _ in 0..CLEAN_UP_BATCHES {
            match state.store.signatures().delete_expired_nonces(now, inbox_store::NONCES_DELETE_MAX).await {
                Ok(deleted) if deleted < u64::from(inbox_store::NONCES_DELETE_MAX) => break,
                Ok(_) => {}
                Err(err) => {
                    nonces = Err(Failure::new("deleting expired signature nonces", err));
                    break;
                }
            }
        }
        let cutoff = now.minus_ms(CALLBACK_LOG_RETENTION.as_millis() as u64);
        let mut attempts = Ok(());
        for _ in 0..CLEAN_UP_BATCHES {
            match state.store.callbacks().delete_attempts_before(cutoff, 1_000).await {
                Ok(deleted) if deleted < 1_000 => break,
                Ok(_) => {}
                Err(err) => {
                    attempts = Err(Failure::new("deleting old callback delivery log entries", err));
                    break;
                }
            }
        }
        nonces.and(attempts)
    }
}

/// Keeps `agent_inbox_database_up` current and logs when the database goes away and comes
/// back, once each; requests meanwhile get `503 database_unavailable` after the bounded wait.
struct DatabaseHealth {
    was_up: bool,
}

impl Job for DatabaseHealth {
    const NAME: &'static str = "database check";

    async fn tick(&mut self, state: &AppState) -> Outcome {
        let checked = tokio::select! {
            checked = state.store.ping() => checked,
            _ = state.shutdown.cancelled() => return Ok(()),
        };
        let up = checked.is_ok();
        state.metrics.database_up().set([], if up { 1.0 } else { 0.0 });
        match (self.was_up, checked) {
            (true, Err(err)) => {
                tracing::warn!(error = %err, "the database does not answer; requests get 503 database_unavailable until it is back")
            }
            (false, Ok(())) => tracing::info!("the database answers again"),
            _ => {}
        }
        self.was_up = up;
        Ok(())
    }
}

/// The backlog snapshot behind the per-tenant gauges.
struct Stats;

impl Job for Stats {
    const NAME: &'static str = "backlog snapshot";

    async fn tick(&mut self, state: &AppState) -> Outcome {
        let backlogs =
            state.store.inbox().backlogs().await.map_err(|err| Failure::new("backlog snapshot", err))?;
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
            per_tenant.iter().map(|(t, v)| ([t.clone()], pick(v) as f64)).collect::<Vec<_>>()
        };
        state.metrics.backlog().replace(series(|v| v.0));
        state.metrics.parked().replace(series(|v| v.1));
        state.metrics.oldest_unacked_age_seconds().replace(series(|v| v.2));
        let mut depth_series = Vec::new();
        for (tenant, mut inboxes) in deepest {
            inboxes.sort_by(|a, b| b.cmp(a));
            for (depth, agent) in inboxes.into_iter().take(DEEPEST_INBOXES).filter(|(d, _)| *d > 0) {
                depth_series.push(([tenant.clone(), agent], depth as f64));
            }
        }
        state.metrics.inbox_depth().replace(depth_series);
        // InnoDB's purge lag: an old read view makes claims read dead index entries.
        let lag = state.store.purge_lag().await.map_err(|err| Failure::new("purge lag", err))?;
        let series = |value: Option<u64>| value.map(|v| vec![([], v as f64)]).unwrap_or_default();
        state.metrics.db_history_list_length().replace(series(lag.history_list_length));
        state.metrics.db_oldest_transaction_age_seconds().replace(series(lag.oldest_transaction_age_seconds));
        Ok(())
    }
}
