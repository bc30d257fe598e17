//! The one way a node runs periodic background work (the scavenger, the database check, the
//! notifier, the callback dispatcher, key reloads, clean-ups): a named [`Job`] ticked every
//! interval until shutdown, its failures logged in one shape and at most once per
//! [`WARN_EVERY`] while they last, so an outage does not flood the log.
//!
//! A tick that is late (the previous one ran long) is delayed, never bunched; a tick is not
//! interrupted by shutdown (a job that must stop mid-pass selects on it itself): shutdown is
//! noticed between ticks.

use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

use crate::node::AppState;

/// Quiet time between two warnings of one job while it keeps failing.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// What one pass of a job could not do.
#[derive(Debug)]
pub struct Failure {
    /// What failed, as a phrase: "deleting old signals".
    pub what: &'static str,
    pub error: String,
}

impl Failure {
    pub fn new(what: &'static str, error: impl std::fmt::Display) -> Failure {
        Failure { what, error: error.to_string() }
    }
}

/// The outcome of one pass: `Err` names the first step that failed (later steps still ran).
pub type Outcome = Result<(), Failure>;

/// Periodic work of a node.
pub trait Job: Send + 'static {
    /// The job's name in logs.
    const NAME: &'static str;

    /// One pass. Runs to completion before the next tick is awaited.
    fn tick(&mut self, state: &AppState) -> impl Future<Output = Outcome> + Send;
}

/// When the first pass runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At once.
    Now,
    /// One interval after the start (the job's first state was just loaded).
    AfterInterval,
}

/// Runs `job` every `interval` until the server shuts down.
pub async fn every<J: Job>(state: AppState, interval: Duration, start: Start, mut job: J) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    if start == Start::AfterInterval {
        tick.tick().await;
    }
    let mut warned: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = state.shutdown.cancelled() => return,
        }
        let Err(failure) = job.tick(&state).await else { continue };
        if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            warned = Some(Instant::now());
            tracing::warn!(job = J::NAME, error = %failure.error, "{} failed; retrying on the next tick", failure.what);
        }
    }
}
