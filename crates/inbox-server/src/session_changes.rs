//! Wake-ups for this node's open streams when a subscribe superseded their agent's sessions
//! (the single-active-session policy): a watch channel per agent whose value only counts
//! reports. Reports come from the notifier, which reads every node's `session.superseded`
//! signals from `outbox_signal`, and from a subscribe on this node right after its commit.
//!
//! A report carries no session id on purpose: a woken stream asks the database whether its
//! own session is still the newest, so reports may arrive twice or out of order.

use std::collections::HashMap;
use std::sync::Mutex;

use inbox_core::{RecipientId, TenantId};
use tokio::sync::watch;

/// Channels kept before the first sweep of channels nobody listens to.
const SWEEP_FLOOR: usize = 1_024;

type AgentKey = (TenantId, RecipientId);

#[derive(Debug, Default)]
pub struct SessionChanges {
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    agents: HashMap<AgentKey, watch::Sender<u64>>,
    /// Size at which the next sweep runs: twice the live channels after the last one.
    sweep_at: usize,
}

impl SessionChanges {
    /// A receiver that changes whenever a subscribe superseded sessions of this agent.
    /// Subscribe before checking the session, so no report between the two is missed.
    pub fn watch(&self, tenant_id: &TenantId, agent_id: &RecipientId) -> watch::Receiver<u64> {
        let mut table = self.table.lock().expect("session changes lock");
        if table.agents.len() >= table.sweep_at.max(SWEEP_FLOOR) {
            table.agents.retain(|_, sender| sender.receiver_count() > 0);
            table.sweep_at = table.agents.len() * 2;
        }
        let key = (tenant_id.clone(), agent_id.clone());
        table.agents.entry(key).or_insert_with(|| watch::channel(0).0).subscribe()
    }

    /// Reports that a subscribe superseded sessions of this agent; returns whether a stream on
    /// this node was listening.
    pub fn superseded(&self, tenant_id: &TenantId, agent_id: &RecipientId) -> bool {
        let table = self.table.lock().expect("session changes lock");
        let Some(sender) = table.agents.get(&(tenant_id.clone(), agent_id.clone())) else { return false };
        sender.send_modify(|reports| *reports = reports.wrapping_add(1));
        sender.receiver_count() > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(agent: &str) -> (TenantId, RecipientId) {
        (TenantId::new("t1").unwrap(), RecipientId::new(agent).unwrap())
    }

    #[test]
    fn a_report_wakes_that_agents_streams_only() {
        let changes = SessionChanges::default();
        let (t1, alpha) = ids("alpha");
        let (_, beta) = ids("beta");
        let alphas = changes.watch(&t1, &alpha);
        let betas = changes.watch(&t1, &beta);
        assert!(changes.superseded(&t1, &alpha));
        assert!(changes.superseded(&t1, &alpha), "reports repeat harmlessly");
        assert!(alphas.has_changed().unwrap());
        assert!(!betas.has_changed().unwrap(), "beta's streams sleep on");
        assert!(!changes.superseded(&t1, &ids("gamma").1), "nobody listens for gamma");
    }

    #[test]
    fn channels_without_listeners_are_swept() {
        let changes = SessionChanges::default();
        let (t1, kept) = ids("kept");
        let keep = changes.watch(&t1, &kept);
        for n in 0..SWEEP_FLOOR * 3 {
            drop(changes.watch(&t1, &ids(&format!("gone{n}")).1));
        }
        let table = changes.table.lock().unwrap();
        assert!(table.agents.len() <= SWEEP_FLOOR + 1, "{} channels", table.agents.len());
        assert!(table.agents.contains_key(&(t1, kept)));
        drop(keep);
    }
}
