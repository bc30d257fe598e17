//! The reconciler: every node, every [`INTERVAL`], moves the open A2A tasks whose inbox event
//! moved on (claimed, acknowledged without a report, dead-lettered, quarantined, expired; see
//! `inbox_store::A2a::reconcile`), at most [`PASS_MAX`] a pass, and wakes this node's streams
//! when it moved any.

use std::time::Duration;

use crate::node::AppState;
use crate::periodic::{Failure, Job, Outcome};

/// How often a node looks for open tasks whose event moved on.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// Tasks one pass moves at most.
const PASS_MAX: u32 = 200;

#[derive(Debug)]
pub struct Reconciler;

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
        Ok(())
    }
}
