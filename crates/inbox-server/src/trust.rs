//! The trust layer's share of the application state, and its background work: the webhook
//! delivery worker, the periodic reload of token signing keys (so `agent-inbox keys rotate`
//! needs no restart), and the clean-up of expired nonces and old delivery log entries.

use std::time::Duration;

use tokio::task::JoinHandle;

use crate::AppState;
use crate::config::Config;
use crate::http::signed::SignatureCaches;
use crate::ops::callbacks::Webhooks;

/// How long the delivery log is kept.
pub const CALLBACK_LOG_RETENTION: Duration = Duration::from_secs(7 * 86_400);
/// How often expired nonces and old log entries are deleted.
const CLEAN_UP_INTERVAL: Duration = Duration::from_secs(10);
/// Batches one clean-up deletes at most per table.
const CLEAN_UP_BATCHES: u32 = 10;

#[derive(Debug)]
pub struct Trust {
    pub caches: SignatureCaches,
    pub webhooks: Webhooks,
}

impl Trust {
    pub fn new(config: &Config) -> Self {
        Trust { caches: SignatureCaches::default(), webhooks: Webhooks::new(config) }
    }
}

pub fn spawn(state: &AppState) -> Vec<JoinHandle<()>> {
    vec![
        tokio::spawn(crate::ops::callbacks::run(state.clone())),
        tokio::spawn(reload_signing_keys(state.clone())),
        tokio::spawn(clean_up(state.clone())),
    ]
}

async fn reload_signing_keys(state: AppState) {
    let mut tick = tokio::time::interval(state.config.signing_keys_reload_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = state.shutdown.cancelled() => return,
        }
        if let Err(err) = state.tokens.reload_keys().await {
            tracing::warn!(error = %err, "reloading token signing keys failed; keeping the loaded ones");
        }
    }
}

async fn clean_up(state: AppState) {
    let mut tick = tokio::time::interval(CLEAN_UP_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = state.shutdown.cancelled() => return,
        }
        let now = state.store.now();
        for _ in 0..CLEAN_UP_BATCHES {
            match state.store.delete_expired_nonces(now, inbox_store::NONCES_DELETE_MAX).await {
                Ok(deleted) if deleted < u64::from(inbox_store::NONCES_DELETE_MAX) => break,
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(error = %err, "deleting expired signature nonces failed");
                    break;
                }
            }
        }
        let cutoff = now.minus_ms(CALLBACK_LOG_RETENTION.as_millis() as u64);
        for _ in 0..CLEAN_UP_BATCHES {
            match state.store.delete_callback_attempts_before(cutoff, 1_000).await {
                Ok(deleted) if deleted < 1_000 => break,
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(error = %err, "deleting old webhook delivery log entries failed");
                    break;
                }
            }
        }
    }
}
