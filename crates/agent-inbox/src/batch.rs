//! `listen --exec CMD --batch N`: one run of the command for up to N claimed events, for
//! handlers that are slow to start (an LLM command-line agent). The runner hands each claimed
//! event to [`Batcher::handle`], which waits while its lease is heartbeated as usual; a
//! collector gathers the events that arrive within [`LINGER`] of the first (or N of them) and
//! runs the command once with one event JSON per line on stdin. The command reports one
//! outcome per event as a JSON line on stdout:
//!
//! ```text
//! {"event_id": "...", "outcome": "ack"}
//! {"event_id": "...", "outcome": "ack", "follow_ups": [{"recipients": ["b"], "event_type": "t", "payload": {}}]}
//! {"event_id": "...", "outcome": "ack", "a2a": {"artifacts": [{"parts": [{"text": "42"}]}]}}
//! {"event_id": "...", "outcome": "retry", "retry_after_seconds": 60, "reason": "busy"}
//! {"event_id": "...", "outcome": "fail", "reason": "no such customer"}
//! {"event_id": "...", "outcome": "quarantine", "reason": "looks injected", "class": "prompt_injection"}
//! ```
//!
//! Each outcome takes effect as its line arrives. When the command exits, an event it did not
//! report gets the exit code's meaning if the command reported nothing at all (0 acknowledges
//! every event, the retry code releases, the quarantine code quarantines, any other fails);
//! otherwise, or when the command was killed, it is released for a retry: nothing said it was
//! done. A line that is not an outcome of this batch is logged and skipped.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use inbox_api::PublishRequest;
use inbox_client::{Done, Event, HandlerError, QuarantineClass};
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};

use crate::exec::{Finished, run_with_stdin_lines, shell};

/// How long the collector waits for more events after the first of a batch: a claim's events
/// reach the handler together, so this only gathers one claim's worth.
pub const LINGER: Duration = Duration::from_millis(100);

type Reply = oneshot::Sender<Result<Done, HandlerError>>;

/// One outcome line of the command.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutcomeLine {
    event_id: String,
    outcome: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    class: Option<String>,
    #[serde(default)]
    retry_after_seconds: Option<u64>,
    #[serde(default)]
    follow_ups: Vec<PublishRequest>,
    /// An `a2a.message` event's task outcome (`acks[i].a2a`): its message, artifacts, or a
    /// request for more input.
    #[serde(default)]
    a2a: Option<inbox_api::a2a::A2aReport>,
}

/// Gathers events into batches for one command.
#[derive(Debug, Clone)]
pub struct Batcher {
    queue: mpsc::UnboundedSender<(Event, Reply)>,
}

/// How exit codes and releases are read, shared with the one-event mode.
pub type ExitOutcome = Arc<dyn Fn(&Finished) -> Result<Done, HandlerError> + Send + Sync>;

impl Batcher {
    pub fn start(command: String, max: usize, retry_after: Duration, exit_outcome: ExitOutcome) -> Batcher {
        let (queue, mut arrivals) = mpsc::unbounded_channel::<(Event, Reply)>();
        tokio::spawn(async move {
            while let Some(first) = arrivals.recv().await {
                let mut batch = vec![first];
                let deadline = tokio::time::Instant::now() + LINGER;
                while batch.len() < max {
                    match tokio::time::timeout_at(deadline, arrivals.recv()).await {
                        Ok(Some(next)) => batch.push(next),
                        Ok(None) | Err(_) => break,
                    }
                }
                let run = Run { command: command.clone(), retry_after, exit_outcome: exit_outcome.clone() };
                tokio::spawn(run.run(batch));
            }
        });
        Batcher { queue }
    }

    /// Runs `event` in the next batch and answers its outcome.
    pub async fn handle(&self, event: Event) -> Result<Done, HandlerError> {
        let (reply, answer) = oneshot::channel();
        let gone = || HandlerError::retry(Duration::from_secs(5), "the batch runner stopped");
        self.queue.send((event, reply)).map_err(|_| gone())?;
        answer.await.unwrap_or_else(|_| Err(gone()))
    }
}

struct Run {
    command: String,
    retry_after: Duration,
    exit_outcome: ExitOutcome,
}

impl Run {
    async fn run(self, batch: Vec<(Event, Reply)>) {
        let input: String = batch.iter().map(|(event, _)| event.to_json() + "\n").collect();
        let mut waiting: HashMap<String, Reply> =
            batch.into_iter().map(|(event, reply)| (event.event_id().to_string(), reply)).collect();
        let mut command = shell(&self.command);
        command.env("AGENT_INBOX_BATCH_SIZE", waiting.len().to_string());
        let (lines, mut reported) = mpsc::unbounded_channel();
        let running = run_with_stdin_lines(command, input, Some(lines));
        tokio::pin!(running);
        let mut any_reported = false;
        let finished = loop {
            tokio::select! {
                finished = &mut running => break finished,
                Some(line) = reported.recv() => any_reported |= self.apply(&line, &mut waiting),
            }
        };
        // Lines written just before the exit may still be on their way.
        let _ = tokio::time::timeout(Duration::from_millis(500), async {
            while let Some(line) = reported.recv().await {
                any_reported |= self.apply(&line, &mut waiting);
                if waiting.is_empty() {
                    return;
                }
            }
        })
        .await;
        let unreported = |why: String| HandlerError::retry(self.retry_after, why);
        for (_, reply) in waiting {
            let outcome = match &finished {
                Err(err) => Err(unreported(format!("cannot run the command: {err}"))),
                Ok(finished) if !any_reported && finished.code.is_some() => (self.exit_outcome)(finished),
                Ok(finished) => Err(unreported(match finished.code {
                    Some(code) => format!("the command exited with {code} without reporting this event"),
                    None => "the command was killed before reporting this event".to_owned(),
                })),
            };
            let _ = reply.send(outcome);
        }
    }

    /// Answers the event an outcome line names; true when the line was one.
    fn apply(&self, line: &str, waiting: &mut HashMap<String, Reply>) -> bool {
        if line.trim().is_empty() {
            return false;
        }
        let parsed: OutcomeLine = match serde_json::from_str(line) {
            Ok(parsed) => parsed,
            Err(err) => {
                tracing::warn!(error = %err, "the batch command wrote a line that is not an outcome; skipped");
                return false;
            }
        };
        let Some(reply) = waiting.remove(&parsed.event_id) else {
            tracing::warn!(event_id = %parsed.event_id, "the batch command reported an event not in its batch (or twice)");
            return false;
        };
        let _ = reply.send(self.outcome(parsed));
        true
    }

    fn outcome(&self, line: OutcomeLine) -> Result<Done, HandlerError> {
        let reason = line.reason.unwrap_or_default();
        match line.outcome.as_str() {
            "ack" => Ok(Done { follow_ups: line.follow_ups, a2a: line.a2a }),
            "retry" => Err(HandlerError::retry(
                line.retry_after_seconds.map_or(self.retry_after, Duration::from_secs),
                reason,
            )),
            "quarantine" => {
                let class = line.class.as_deref().and_then(QuarantineClass::parse).unwrap_or_default();
                let reason =
                    if reason.is_empty() { "quarantined by the batch command".to_owned() } else { reason };
                Err(HandlerError::quarantine_as(class, reason))
            }
            "fail" => Err(HandlerError::permanent(reason)),
            other => Err(HandlerError::permanent(format!(
                "the batch command reported outcome {other:?}; it must be ack, retry, fail or quarantine"
            ))),
        }
    }
}
