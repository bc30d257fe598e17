//! What an application gives the runner and gets back: the handler and resync contracts, the
//! events handlers see, the outcomes and progress the runner reports, its settings and the
//! counts of a run. No behaviour beyond the contracts' defaults: the runner is in `agent`.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use inbox_api::{EventEnvelope, ResyncResponse};
use inbox_core::{EventId, QuarantineClass, RecipientId, SessionId};
use serde_json::Value;

use crate::error::ClientError;
use crate::local_state::Processed;
use crate::schedule::{Backoff, ClockJump, PollSchedule};
use crate::transport::{TransportConfig, TransportStatus};

/// One claimed event, as the handler gets it.
#[derive(Debug, Clone)]
pub struct Event {
    /// Seed 001's envelope, with the inline payload when there is one.
    pub envelope: EventEnvelope,
    /// When the lease ends unless heartbeats extend it (the runner does that).
    pub lease_until_utc: String,
}

impl Event {
    pub fn event_id(&self) -> EventId {
        self.envelope.event_id
    }

    pub fn event_type(&self) -> &str {
        self.envelope.event_type.as_str()
    }

    pub fn inbox_seq(&self) -> u64 {
        self.envelope.inbox_seq
    }

    pub fn payload(&self) -> Option<&Value> {
        self.envelope.payload.as_ref()
    }

    /// For an `a2a.message` event, the A2A task it carries a message of: its `task_id`,
    /// `context_id`, `sender_id` and the client's `message` (A2A JSON).
    pub fn a2a_task(&self) -> Option<&Value> {
        (self.event_type() == inbox_api::a2a::A2A_MESSAGE_EVENT_TYPE).then(|| self.payload()).flatten()
    }

    /// The envelope as JSON: what `listen --exec` writes to a command's stdin.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.envelope).expect("an envelope serializes")
    }
}

/// Why a handler did not finish an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandlerError {
    /// Try again later: the event is released and claimable again after `after`, rounded up
    /// to whole seconds (the service counts in seconds; never sooner than asked). The runner
    /// runs it again then, whether or not a stream is connected.
    Retry { after: Duration, reason: String },
    /// Never going to work: the event is acknowledged as `failed` and dead-lettered, with
    /// `reason` (one line, at most [`REASON_BYTES_MAX`](inbox_core::limits::REASON_BYTES_MAX) bytes)
    /// kept for the operator.
    Permanent { reason: String },
    /// Not to be touched by a program: the event is acknowledged as `quarantined`, set aside
    /// for a person with `reason` and `class`, and never retried (an LLM agent that suspects a
    /// prompt injection in the payload, a payload that fails its own checks). An operator may
    /// release it back to the inbox; then it runs again, so it is not kept in the local record
    /// of processed events. `reason` is cut to
    /// [`REASON_BYTES_MAX`](inbox_core::limits::REASON_BYTES_MAX) bytes, control characters
    /// become spaces.
    Quarantine { reason: String, class: QuarantineClass },
}

impl HandlerError {
    pub fn retry(after: Duration, reason: impl Into<String>) -> HandlerError {
        HandlerError::Retry { after, reason: reason.into() }
    }

    pub fn permanent(reason: impl Into<String>) -> HandlerError {
        HandlerError::Permanent { reason: reason.into() }
    }

    /// Quarantines the event with class `other`.
    pub fn quarantine(reason: impl Into<String>) -> HandlerError {
        HandlerError::quarantine_as(QuarantineClass::Other, reason)
    }

    /// Quarantines the event with a class operators and metrics can tell apart, such as
    /// [`QuarantineClass::PromptInjection`].
    pub fn quarantine_as(class: QuarantineClass, reason: impl Into<String>) -> HandlerError {
        HandlerError::Quarantine { reason: reason.into(), class }
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandlerError::Retry { after, reason } => write!(f, "retry after {after:?}: {reason}"),
            HandlerError::Permanent { reason } => write!(f, "failed: {reason}"),
            HandlerError::Quarantine { reason, class } => {
                write!(f, "quarantined ({}): {reason}", class.as_str())
            }
        }
    }
}

/// What a handler that finished hands on: follow-up publishes (each the body of
/// `POST /v1/events`) committed with the acknowledgement, in its transaction and only while the
/// lease holds, so the next agent of a chain gets each exactly once (a hand-off). A handler
/// that returns `Ok(())` hands on nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Done {
    pub follow_ups: Vec<inbox_api::PublishRequest>,
    /// For an `a2a.message` event (a message an A2A client sent this agent): its task's outcome
    /// (the agent's message, artifacts, or a request for more input), committed with the
    /// acknowledgement and only while the lease holds. Without it the task still completes,
    /// without a result.
    pub a2a: Option<inbox_api::a2a::A2aReport>,
}

impl Done {
    /// Finished, handing these publishes on with the acknowledgement.
    pub fn hand_off(follow_ups: Vec<inbox_api::PublishRequest>) -> Done {
        Done { follow_ups, a2a: None }
    }

    /// Finished an A2A task's message with this outcome ([`Event::a2a_task`] reads the task).
    pub fn a2a(report: inbox_api::a2a::A2aReport) -> Done {
        Done { follow_ups: Vec::new(), a2a: Some(report) }
    }
}

impl From<()> for Done {
    fn from((): ()) -> Done {
        Done::default()
    }
}

/// Runs one event. Any `Fn(Event) -> impl Future<Output = Result<(), HandlerError>>` is one;
/// wrap a closure that returns [`Done`] in [`HandingOff`] to hand work on.
/// Side effects should be idempotent where they can be: a lease can be lost (a network
/// partition longer than the lease), and then another process may run the event too.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, event: Event) -> impl Future<Output = Result<Done, HandlerError>> + Send;
}

impl<F, Fut> Handler for F
where
    F: Fn(Event) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send,
{
    fn handle(&self, event: Event) -> impl Future<Output = Result<Done, HandlerError>> + Send {
        let running = self(event);
        async move { running.await.map(Done::from) }
    }
}

/// A handler whose closure returns [`Done`]: `Ok(Done::hand_off(follow_ups))` acknowledges
/// the event and publishes the follow-ups in one transaction, only while the lease holds.
pub struct HandingOff<F>(pub F);

impl<F> std::fmt::Debug for HandingOff<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HandingOff(..)")
    }
}

impl<F, Fut> Handler for HandingOff<F>
where
    F: Fn(Event) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Done, HandlerError>> + Send,
{
    fn handle(&self, event: Event) -> impl Future<Output = Result<Done, HandlerError>> + Send {
        (self.0)(event)
    }
}

/// Rebuilds the agent's view after `cursor_reset_required`: the agent was away longer than the
/// service keeps history. It gets the head and every open event up to `resume_after_seq`, in one
/// snapshot however many pages the service sent them in (`GET /v1/inbox/resync`; the snapshot's
/// `more_available` is false); the runner then continues after `resume_after_seq`. A retryable
/// error tries again on the next wake; a permanent one stops the agent rather than skip data
/// silently.
pub trait Resync: Send + Sync + 'static {
    fn resync(&self, snapshot: ResyncResponse) -> impl Future<Output = Result<(), HandlerError>> + Send;
}

impl<F, Fut> Resync for F
where
    F: Fn(ResyncResponse) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send,
{
    fn resync(&self, snapshot: ResyncResponse) -> impl Future<Output = Result<(), HandlerError>> + Send {
        self(snapshot)
    }
}

/// A [`Resync`] for agents whose work needs no history: it logs and carries on. Open events
/// are still claimed and handled as usual.
#[derive(Debug, Clone, Copy, Default)]
pub struct ContinueAfterReset;

impl Resync for ContinueAfterReset {
    async fn resync(&self, snapshot: ResyncResponse) -> Result<(), HandlerError> {
        tracing::warn!(
            head_seq = snapshot.head_seq,
            resume_after_seq = snapshot.resume_after_seq,
            open_events = snapshot.open_events.len(),
            "cursor reset: events older than the retention window are gone; continuing"
        );
        Ok(())
    }
}

/// How an event ended for this agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Handled and acknowledged as completed.
    Acked,
    /// The handler failed permanently; acknowledged as failed (dead-lettered).
    Failed { reason: String },
    /// The handler asked for a retry; released.
    Released { after: Duration, reason: String },
    /// The handler set the event aside for a person; acknowledged as quarantined.
    Quarantined { reason: String, class: QuarantineClass },
    /// Processed before (by this agent's local record): acknowledged without running again.
    Deduplicated { result: Processed },
    /// The handler ran, but its acknowledgement or release did not go through (the lease was
    /// lost, or the service stayed unreachable). A redelivery is deduplicated.
    Unconfirmed { error: String },
}

/// What the runner reports as it goes; the CLI draws its status line from these.
#[derive(Debug)]
pub enum Progress<'a> {
    Subscribed {
        session_id: &'a SessionId,
        recipient_id: &'a RecipientId,
        cursor: u64,
        head_seq: u64,
    },
    Transport(TransportStatus),
    /// A scan or claim failed; the next attempt is after `retry_in`.
    Disconnected {
        error: &'a ClientError,
        retry_in: Duration,
    },
    Scanned {
        cursor: u64,
        head_seq: u64,
    },
    Started {
        event: &'a EventEnvelope,
    },
    Finished {
        event: &'a EventEnvelope,
        outcome: &'a Outcome,
        elapsed: Duration,
    },
    LeaseLost {
        event_id: &'a EventId,
    },
    Resynced {
        snapshot: &'a ResyncResponse,
    },
    ClockJumped(ClockJump),
}

/// Receives [`Progress`]. Called inline: keep it quick.
pub trait Observer: Send + Sync + 'static {
    fn progress(&self, progress: &Progress<'_>);
}

/// The agent's settings. `Default` follows the design: SSE, then long poll, then polling from
/// 1 s growing to 5 min; one event at a time; the service's default lease.
#[derive(Clone)]
pub struct AgentConfig {
    pub device_id: Option<String>,
    /// Events handled at once.
    pub concurrency: usize,
    /// Lease asked for per claim; `None` is the service's default.
    pub lease: Option<Duration>,
    pub transport: TransportConfig,
    /// Polling while no stream or long poll is connected, and retrying while the service is
    /// unreachable (the transports then wait for the runner instead of probing on their own).
    pub poll: PollSchedule,
    /// Between attempts to reach the service while it does not answer at all (see
    /// [`Backoff::OUTAGE`], the default).
    pub outage: Backoff,
    /// Between attempts to deliver an acknowledgement or release.
    pub ack_retry: Backoff,
    pub ack_attempts_max: u32,
    /// Events per poll page, and pages per scan.
    pub page_size: u32,
    pub scan_pages_max: u32,
    /// How often the clocks are compared, and the drift that counts as a jump.
    pub clock_check: Duration,
    pub clock_tolerance: Duration,
    /// On shutdown, how long running handlers get to finish before their events are released.
    pub shutdown_grace: Duration,
    pub observer: Option<Arc<dyn Observer>>,
}

impl fmt::Debug for AgentConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentConfig")
            .field("device_id", &self.device_id)
            .field("concurrency", &self.concurrency)
            .field("lease", &self.lease)
            .field("transport", &self.transport)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            device_id: None,
            concurrency: 1,
            lease: None,
            transport: TransportConfig::default(),
            poll: PollSchedule::default(),
            outage: Backoff::OUTAGE,
            ack_retry: Backoff { base: Duration::from_millis(200), max: Duration::from_secs(30) },
            ack_attempts_max: 30,
            page_size: 100,
            scan_pages_max: 10,
            clock_check: Duration::from_secs(1),
            clock_tolerance: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(30),
            observer: None,
        }
    }
}

/// Counts of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunSummary {
    pub acked: u64,
    pub failed: u64,
    pub released: u64,
    pub quarantined: u64,
    pub deduplicated: u64,
    pub unconfirmed: u64,
    pub resyncs: u64,
}
