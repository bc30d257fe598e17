//! The local wake daemon as a runner's best transport (`TransportConfig::local_daemon`): the
//! runner (`listen`, an SDK `Agent`) watches the daemon's hints instead of holding a stream of
//! its own, and goes back to its own transports the moment the daemon is gone, stale or
//! refuses. Hints only wake the runner, which reads the inbox itself, as with any transport.

use std::sync::atomic::Ordering;

use super::client::{DaemonError, LocalDaemon};
use super::protocol::Identity;
use crate::transport::Signals;

/// The daemon a runner hears from first, and the identity it asks about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonHints {
    pub daemon: LocalDaemon,
    pub identity: Identity,
}

impl DaemonHints {
    /// Whether the daemon would give hints now (a `status` round trip, no service call): it
    /// answers, and follows this identity with a live view, or does not follow it yet (it
    /// starts following a profile when first asked).
    pub(crate) async fn answers(&self) -> bool {
        let Ok(status) = self.daemon.status().await else { return false };
        let asked = &self.identity;
        match status.identities.iter().find(|i| i.profile == asked.profile) {
            None => true,
            Some(followed) => {
                followed.fresh
                    && followed.agent_id == asked.agent_id
                    && followed.tenant_id == asked.tenant_id
                    && followed.server_url.trim_end_matches('/') == asked.server_url
            }
        }
    }

    /// Hears hints until the daemon stops giving them (`Err`), or the runner asks for a
    /// reconnection (`Ok`). `connected` is called once the watch is up.
    pub(crate) async fn hear(&self, signals: &Signals, connected: impl FnOnce()) -> Result<(), DaemonError> {
        let (mut watch, head) = self.daemon.watch(&self.identity).await?;
        connected();
        signals.known_head.fetch_max(head, Ordering::AcqRel);
        // Whatever happened while no transport was up: look now.
        signals.hint.notify_one();
        loop {
            tokio::select! {
                hint = watch.next() => {
                    let hint = hint?;
                    signals.known_head.fetch_max(hint.head_seq, Ordering::AcqRel);
                    signals.hint.notify_one();
                }
                _ = signals.reconnect.notified() => return Ok(()),
            }
        }
    }
}
