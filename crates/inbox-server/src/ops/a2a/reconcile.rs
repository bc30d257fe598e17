//! The reconciler: every node, every [`INTERVAL`], moves the open A2A tasks whose inbox event
//! moved on (claimed, acknowledged without a report, dead-lettered, quarantined, expired; see
//! `inbox_store::A2a::reconcile`), at most [`PASS_MAX`] a pass, and wakes this node's streams
//! when it moved any. Every [`PRUNE_EVERY`] passes it deletes tasks that finished longer ago
//! than archived events are kept (`archive_retention`), at most [`PASS_MAX`] at a time.

use std::time::Duration;

use crate::node::AppState;
use crate::periodic::{Failure, Job, Outcome};

/// How often a node looks for open tasks whose event moved on.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// Tasks one pass moves (or prunes) at most.
const PASS_MAX: u32 = 200;
/// Passes between two prunings.
const PRUNE_EVERY: u32 = 60;

#[derive(Debug, Default)]
pub struct Reconciler {
    passes: u32,
}

impl Job for Reconciler {
    const NAME: &'static str = "a2a reconciler";

    async fn tick(&mut self, state: &AppState) -> Outcome {
        let report = state
            .store
            .a2a()
            .reconcile(PASS_MAX)
            .await
            .map_err(|err| Failure::new("a2a reconcile pass", err))?;
        if !report.moved.is_empty() {
            tracing::debug!(moved = report.moved.len(), "a2a tasks moved by their events");
            state.a2a.changed();
        }
        self.passes = self.passes.wrapping_add(1);
        if self.passes % PRUNE_EVERY == 1 {
            let kept_ms = state.store.config().archive_retention_ms;
            let before = state.store.now().minus_ms(kept_ms);
            let pruned = state
                .store
                .a2a()
                .prune(before, PASS_MAX)
                .await
                .map_err(|err| Failure::new("pruning finished a2a tasks", err))?;
            if pruned > 0 {
                tracing::debug!(pruned, "finished a2a tasks pruned after the archive's retention");
            }
        }
        Ok(())
    }
}
