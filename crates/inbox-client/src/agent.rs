//! The agent runner and the handler contract. On every hint, timer or reconnection it scans the
//! inbox after its persisted cursor, claims what it can run, and runs the handler once per
//! event while heartbeating the event's lease; then it acknowledges (`Ok`), releases for a
//! retry (a retryable error) or acknowledges as `failed` (a permanent error, which the service
//! dead-letters). A handler's result is recorded locally *before* it is acknowledged, so an
//! event delivered again after a crash or a lost acknowledgement is acknowledged from the
//! record instead of being run twice. Acknowledgements and releases that fail on the network
//! are repeated: both are idempotent for the same lease token.
//!
//! The runner sends its session id with every claim. When the tenant allows one active session
//! per agent and a newer process with the same identity subscribes, the service refuses this
//! session's claims (or ends its stream) with `session_superseded`: the runner then stops
//! claiming, lets running handlers finish within the shutdown grace period (their leases stay
//! valid, so they are acknowledged as usual), releases what is still running after it, and
//! returns [`ClientError::SessionSuperseded`].

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inbox_api::time::now_ms;
use inbox_api::{
    AckEntry, AcknowledgeRequest, Claim, ClaimRequest, EventEnvelope, HeartbeatEntry, HeartbeatRequest,
    PollRequest, ProblemCode, ReleaseRequest, ResyncResponse, SubscribeRequest,
};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::api::Api;
use crate::cursor::Scan;
use crate::error::ClientError;
use crate::local_state::{LocalState, Processed};
use crate::schedule::{
    Backoff, ClockJump, ClockSample, CycleFound, PollSchedule, clock_jump, heartbeat_delay,
    heartbeat_retry_delay, next_cycle_after,
};
use crate::secret_store::Secret;
use crate::transport::{Signals, Transport, TransportConfig, TransportKind, TransportStatus, jitter};

/// One claimed event, as the handler gets it.
#[derive(Debug, Clone)]
pub struct Event {
    /// Seed 001's envelope, with the inline payload when there is one.
    pub envelope: EventEnvelope,
    /// When the lease ends unless heartbeats extend it (the runner does that).
    pub lease_until_utc: String,
}

impl Event {
    pub fn event_id(&self) -> &str {
        &self.envelope.event_id
    }

    pub fn event_type(&self) -> &str {
        &self.envelope.event_type
    }

    pub fn inbox_seq(&self) -> u64 {
        self.envelope.inbox_seq
    }

    pub fn payload(&self) -> Option<&Value> {
        self.envelope.payload.as_ref()
    }

    /// The envelope as JSON: what `listen --exec` writes to a command's stdin.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.envelope).expect("an envelope serializes")
    }
}

/// Why a handler did not finish an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandlerError {
    /// Try again later: the event is released and claimable again after `after`.
    Retry { after: Duration, reason: String },
    /// Never going to work: the event is acknowledged as `failed` and dead-lettered.
    Permanent { reason: String },
}

impl HandlerError {
    pub fn retry(after: Duration, reason: impl Into<String>) -> HandlerError {
        HandlerError::Retry { after, reason: reason.into() }
    }

    pub fn permanent(reason: impl Into<String>) -> HandlerError {
        HandlerError::Permanent { reason: reason.into() }
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandlerError::Retry { after, reason } => write!(f, "retry after {after:?}: {reason}"),
            HandlerError::Permanent { reason } => write!(f, "failed: {reason}"),
        }
    }
}

/// Runs one event. Any `Fn(Event) -> impl Future<Output = Result<(), HandlerError>>` is one.
/// Side effects should be idempotent where they can be: a lease can be lost (a network
/// partition longer than the lease), and then another process may run the event too.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, event: Event) -> impl Future<Output = Result<(), HandlerError>> + Send;
}

impl<F, Fut> Handler for F
where
    F: Fn(Event) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send,
{
    fn handle(&self, event: Event) -> impl Future<Output = Result<(), HandlerError>> + Send {
        self(event)
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
        session_id: &'a str,
        recipient_id: &'a str,
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
        event_id: &'a str,
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
    pub deduplicated: u64,
    pub unconfirmed: u64,
    pub resyncs: u64,
}

/// An agent: one identity, one local state file, one handler.
#[derive(Debug)]
pub struct Agent {
    api: Api,
    state: LocalState,
    config: AgentConfig,
}

/// What the runner and its tasks share.
struct Shared {
    api: Api,
    state: LocalState,
    config: AgentConfig,
    inbox: String,
    session_id: Option<String>,
    lease: Duration,
    /// Events being worked on, with their lease tokens (for a release on shutdown).
    held: Mutex<HashMap<String, Secret>>,
}

impl Shared {
    /// The error of a session a newer one superseded.
    fn superseded(&self) -> ClientError {
        ClientError::SessionSuperseded { session_id: self.session_id.clone().unwrap_or_default() }
    }

    fn observe(&self, progress: Progress<'_>) {
        if let Some(observer) = &self.config.observer {
            observer.progress(&progress);
        }
    }

    fn held_ids(&self) -> HashSet<String> {
        self.held.lock().expect("held lock").keys().cloned().collect()
    }
}

/// What a finished event task hands back.
struct Done {
    outcome: Outcome,
}

impl Agent {
    pub fn new(api: Api, state: LocalState, config: AgentConfig) -> Agent {
        Agent { api, state, config }
    }

    /// Runs until `shutdown` completes (then lets running handlers finish, up to the grace
    /// period) or a fatal error: credentials refused, a permanent resync failure, local state
    /// unusable, or [`ClientError::SessionSuperseded`] when another process took over under the
    /// tenant's single-active-session policy (running handlers finish first, as on shutdown).
    /// Network trouble is never fatal: the agent waits and tries again.
    pub async fn run<H: Handler, R: Resync>(
        self,
        handler: H,
        resync: R,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<RunSummary, ClientError> {
        let mut shutdown = pin!(shutdown);
        let handler = Arc::new(handler);
        let Some((shared, subscribed)) = (tokio::select! {
            subscribed = self.subscribe() => Some(subscribed?),
            _ = &mut shutdown => None,
        }) else {
            return Ok(RunSummary::default());
        };
        let shared = Arc::new(shared);
        let signals = Signals::new(subscribed.current_head_seq);
        let first = *shared.config.transport.allowed.first().unwrap_or(&TransportKind::Poll);
        let (status_tx, mut status) = watch::channel(TransportStatus { kind: first, connected: false });
        let transport = tokio::spawn(
            Transport {
                api: shared.api.clone(),
                config: shared.config.transport.clone(),
                sse_path: subscribed.sse_url.clone(),
                heartbeat_interval: Duration::from_secs(subscribed.heartbeat_interval_seconds.max(1)),
                signals: signals.clone(),
                status: status_tx,
            }
            .run(),
        );
        let result = Runner {
            shared: shared.clone(),
            signals,
            tasks: JoinSet::new(),
            summary: RunSummary::default(),
            poll_nominal: None,
            last_scan: None,
            claim_backlog: false,
        }
        .run(handler, &resync, &mut status, shutdown)
        .await;
        transport.abort();
        result
    }

    /// Opens a session, retrying while the service is unreachable.
    async fn subscribe(self) -> Result<(Shared, inbox_api::SubscribeResponse), ClientError> {
        let request = SubscribeRequest {
            device_id: self.config.device_id.clone(),
            supported_transports: vec!["sse".into(), "long-poll".into(), "poll".into()],
            wants_claims: true,
            ..SubscribeRequest::default()
        };
        let mut nominal = None;
        let subscribed = loop {
            match self.api.subscribe(&request).await {
                Ok(subscribed) => break subscribed,
                Err(err) if err.is_transient() => {
                    let next = self.config.poll.next_nominal(nominal, false);
                    nominal = Some(next);
                    let delay = err.honoured(self.config.poll.jittered(next, jitter()));
                    if let Some(observer) = &self.config.observer {
                        observer.progress(&Progress::Disconnected { error: &err, retry_in: delay });
                    }
                    tokio::time::sleep(delay).await;
                }
                Err(err) => return Err(err),
            }
        };
        let inbox = format!("{}/{}", subscribed.recipient.tenant_id, subscribed.recipient.recipient_id);
        let cursor = self.state.cursor(&inbox).await?;
        let lease = self.config.lease.unwrap_or(Duration::from_secs(subscribed.lease_default_seconds.max(1)));
        let shared = Shared {
            api: self.api,
            state: self.state,
            config: self.config,
            inbox,
            session_id: Some(subscribed.session_id.clone()),
            lease,
            held: Mutex::new(HashMap::new()),
        };
        shared.observe(Progress::Subscribed {
            session_id: &subscribed.session_id,
            recipient_id: &subscribed.recipient.recipient_id,
            cursor,
            head_seq: subscribed.current_head_seq,
        });
        Ok((shared, subscribed))
    }
}

struct Runner {
    shared: Arc<Shared>,
    signals: Signals,
    tasks: JoinSet<Done>,
    summary: RunSummary,
    /// The adaptive poll interval's nominal value (while polling or unreachable).
    poll_nominal: Option<Duration>,
    last_scan: Option<Instant>,
    /// After a resync, open events may sit at or below the cursor, where scans do not look:
    /// claim without waiting for a scan to show something, until a claim comes back short.
    claim_backlog: bool,
}

/// What one cycle found.
struct Cycle {
    claimed: usize,
    /// The claim was full: more may be claimable right away.
    more: bool,
    next_change_ms: Option<i64>,
}

impl Runner {
    async fn run<H: Handler, R: Resync>(
        mut self,
        handler: Arc<H>,
        resync: &R,
        status: &mut watch::Receiver<TransportStatus>,
        mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Result<RunSummary, ClientError> {
        let config = self.shared.config.clone();
        let started = std::time::Instant::now();
        let sample = || ClockSample { monotonic: started.elapsed(), wall_ms: now_ms() };
        let mut last_sample = sample();
        let mut clock = tokio::time::interval(config.clock_check);
        clock.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut next_cycle = Instant::now();
        let mut forced = true;
        let mut transport_alive = true;
        loop {
            let free = config.concurrency.max(1).saturating_sub(self.tasks.len());
            if free > 0 && Instant::now() >= next_cycle {
                next_cycle = match self.cycle(&handler, resync, free, forced).await {
                    Ok(cycle) => self.after_cycle(&cycle, *status.borrow()),
                    Err(err) if !err.is_transient() => {
                        self.drain().await;
                        return Err(err);
                    }
                    Err(err) => {
                        // Unreachable: the transports stand by, and only this loop knocks,
                        // on the idle schedule (up to the ceiling), so an agent that lost the
                        // service costs it a dozen requests an hour.
                        self.signals.service_down.store(true, Ordering::Release);
                        let nominal = config.poll.next_nominal(self.poll_nominal, false);
                        self.poll_nominal = Some(nominal);
                        let delay = err.honoured(config.poll.jittered(nominal, jitter()));
                        self.shared.observe(Progress::Disconnected { error: &err, retry_in: delay });
                        Instant::now() + delay
                    }
                };
                forced = false;
                // Time spent in the cycle is not a stall: compare clocks from here.
                last_sample = sample();
                clock.reset();
            }
            tokio::select! {
                _ = &mut shutdown => break,
                _ = self.signals.superseded.notified() => {
                    tracing::warn!("a newer session of this agent took over; finishing what runs, then stopping");
                    self.drain().await;
                    return Err(self.shared.superseded());
                }
                Some(joined) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    self.count(joined);
                    next_cycle = next_cycle.min(Instant::now());
                }
                _ = self.signals.hint.notified() => {
                    next_cycle = Instant::now();
                    forced = true;
                }
                changed = status.changed(), if transport_alive => {
                    transport_alive = changed.is_ok();
                    if transport_alive {
                        let now = *status.borrow_and_update();
                        self.shared.observe(Progress::Transport(now));
                        // Connected or not, the timer's basis changed: scan now and reschedule.
                        next_cycle = Instant::now();
                        forced = true;
                    }
                }
                _ = tokio::time::sleep_until(next_cycle), if free > 0 => {
                    forced = true;
                }
                _ = clock.tick() => {
                    let now = sample();
                    if let Some(jump) = clock_jump(last_sample, now, config.clock_check, config.clock_tolerance) {
                        tracing::info!(?jump, "the clock jumped (sleep/resume?); reconnecting and resyncing");
                        self.shared.observe(Progress::ClockJumped(jump));
                        self.signals.reconnect.notify_one();
                        next_cycle = Instant::now();
                        forced = true;
                    }
                    last_sample = now;
                }
            }
        }
        self.drain().await;
        Ok(self.summary)
    }

    /// The time of the next cycle after a successful one.
    fn after_cycle(&mut self, cycle: &Cycle, status: TransportStatus) -> Instant {
        if self.signals.service_down.swap(false, Ordering::AcqRel) {
            self.signals.reachable.notify_one();
        }
        let found = CycleFound {
            claimed: cycle.claimed,
            more: cycle.more,
            until_change: cycle.next_change_ms.map(|at| Duration::from_millis((at - now_ms()).max(0) as u64)),
        };
        // An expired lease comes back on the service's next scavenger pass: allow for it.
        let slack = Duration::from_millis(250);
        let (wait, nominal) = next_cycle_after(
            &self.shared.config.poll,
            self.poll_nominal,
            found,
            status.connected,
            slack,
            jitter(),
        );
        self.poll_nominal = nominal;
        Instant::now() + wait
    }

    /// Scans after the cursor (on a forced cycle, or when the last scan is not recent), then
    /// claims up to `free` events and starts them.
    async fn cycle<H: Handler, R: Resync>(
        &mut self,
        handler: &Arc<H>,
        resync: &R,
        free: usize,
        forced: bool,
    ) -> Result<Cycle, ClientError> {
        let recent = self.last_scan.is_some_and(|t| t.elapsed() < Duration::from_millis(200));
        let scan = if forced || !recent { Some(self.scan(resync).await?) } else { None };
        let worth_claiming =
            self.claim_backlog || scan.as_ref().is_none_or(|s| s.claimable > 0 || s.truncated);
        let next_change_ms = scan.as_ref().and_then(|s| s.scan.next_change_ms);
        if !worth_claiming {
            return Ok(Cycle { claimed: 0, more: false, next_change_ms });
        }
        let limit = free.min(500) as u32;
        let claimed = self
            .shared
            .api
            .claim(&ClaimRequest {
                session_id: self.shared.session_id.clone(),
                limit: Some(limit),
                lease_seconds: self.shared.config.lease.map(|l| l.as_secs().max(1)),
                ..ClaimRequest::default()
            })
            .await
            .map_err(|err| match err.code() {
                Some(ProblemCode::SessionSuperseded) => self.shared.superseded(),
                _ => err,
            })?;
        let n_claimed = claimed.claims.len();
        if n_claimed < limit as usize {
            self.claim_backlog = false;
        }
        for claim in claimed.claims {
            self.start(handler, claim);
        }
        Ok(Cycle { claimed: n_claimed, more: n_claimed == limit as usize, next_change_ms })
    }

    /// Reads the inbox after the cursor, page by page; persists the cursor it may move to.
    async fn scan<R: Resync>(&mut self, resync: &R) -> Result<ScanReport, ClientError> {
        let shared = self.shared.clone();
        let mut cursor = shared.state.cursor(&shared.inbox).await?;
        let held = shared.held_ids();
        let mut scan = Scan::new(cursor);
        let mut pages = 0;
        let truncated = loop {
            let request = PollRequest {
                after_seq: scan.seen_through.max(cursor),
                limit: Some(shared.config.page_size.clamp(1, 500)),
                ..PollRequest::default()
            };
            let page = match shared.api.poll(&request).await {
                Ok(page) => page,
                Err(err) if err.code() == Some(&ProblemCode::CursorResetRequired) => {
                    cursor = self.resync(resync).await?;
                    scan = Scan::new(cursor);
                    continue;
                }
                Err(err) => return Err(err),
            };
            scan.add_page(&page.events, page.next_cursor, page.head_seq, now_ms(), &held);
            pages += 1;
            if !page.more_available {
                break false;
            }
            if pages >= shared.config.scan_pages_max.max(1) {
                break true;
            }
        };
        self.last_scan = Some(Instant::now());
        if scan.cursor > cursor {
            shared.state.advance_cursor(&shared.inbox, scan.cursor).await?;
        }
        self.signals.known_head.fetch_max(scan.head_seq, Ordering::AcqRel);
        shared.observe(Progress::Scanned { cursor: scan.cursor, head_seq: scan.head_seq });
        Ok(ScanReport { claimable: scan.claimable, truncated, scan })
    }

    /// After `cursor_reset_required`: hands the service's snapshot, every page of it, to the
    /// resync callback, then continues after `resume_after_seq`. Returns the new cursor.
    async fn resync<R: Resync>(&mut self, resync: &R) -> Result<u64, ClientError> {
        let page_size = self.shared.config.page_size.clamp(1, 500);
        let snapshot = crate::resync::snapshot(&self.shared.api, page_size).await?;
        self.shared.observe(Progress::Resynced { snapshot: &snapshot });
        let resume = snapshot.resume_after_seq;
        match resync.resync(snapshot).await {
            Ok(()) => {}
            Err(HandlerError::Retry { reason, .. }) => return Err(ClientError::ResyncDeferred(reason)),
            Err(HandlerError::Permanent { reason }) => return Err(ClientError::Resync(reason)),
        }
        self.shared.state.reset_cursor(&self.shared.inbox, resume).await?;
        self.summary.resyncs += 1;
        self.claim_backlog = true;
        Ok(resume)
    }

    fn start<H: Handler>(&mut self, handler: &Arc<H>, claim: Claim) {
        let shared = self.shared.clone();
        let handler = handler.clone();
        shared
            .held
            .lock()
            .expect("held lock")
            .insert(claim.event_id.clone(), Secret::new(claim.lease_token.clone()));
        self.tasks.spawn(async move {
            let _held = HeldGuard { shared: shared.clone(), event_id: claim.event_id.clone() };
            let started = Instant::now();
            shared.observe(Progress::Started { event: &claim.event });
            let outcome = work(&shared, handler.as_ref(), &claim).await;
            shared.observe(Progress::Finished {
                event: &claim.event,
                outcome: &outcome,
                elapsed: started.elapsed(),
            });
            Done { outcome }
        });
    }

    fn count(&mut self, joined: Result<Done, tokio::task::JoinError>) {
        let summary = &mut self.summary;
        match joined {
            Ok(Done { outcome: Outcome::Acked }) => summary.acked += 1,
            Ok(Done { outcome: Outcome::Failed { .. } }) => summary.failed += 1,
            Ok(Done { outcome: Outcome::Released { .. } }) => summary.released += 1,
            Ok(Done { outcome: Outcome::Deduplicated { .. } }) => summary.deduplicated += 1,
            Ok(Done { outcome: Outcome::Unconfirmed { .. } }) => summary.unconfirmed += 1,
            Err(err) => {
                // A handler panicked: its lease runs out and the event comes back.
                tracing::error!(error = %err, "an event task panicked; the event returns after its lease");
                summary.unconfirmed += 1;
            }
        }
    }

    /// Lets running handlers finish within the grace period, then stops them and releases
    /// their events so they need not wait out their leases.
    async fn drain(&mut self) {
        let deadline = Instant::now() + self.shared.config.shutdown_grace;
        while !self.tasks.is_empty() {
            match tokio::time::timeout_at(deadline, self.tasks.join_next()).await {
                Ok(Some(joined)) => self.count(joined),
                Ok(None) => break,
                Err(_) => {
                    let unfinished: Vec<(String, Secret)> = self
                        .shared
                        .held
                        .lock()
                        .expect("held lock")
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    self.tasks.abort_all();
                    while let Some(joined) = self.tasks.join_next().await {
                        if let Ok(done) = joined {
                            self.count(Ok(done));
                        }
                    }
                    for (event_id, lease_token) in unfinished {
                        self.release_on_shutdown(event_id, lease_token).await;
                    }
                }
            }
        }
    }

    async fn release_on_shutdown(&self, event_id: String, lease_token: Secret) {
        let request = ReleaseRequest {
            tenant_id: None,
            recipient_id: None,
            event_id: event_id.clone(),
            lease_token: lease_token.expose().to_owned(),
            reason: Some("agent_shutdown".into()),
            retry_after_seconds: 0,
        };
        match self.shared.api.release(&request).await {
            Ok(_) => tracing::info!(event_id, "released an unfinished event on shutdown"),
            Err(err) => {
                tracing::warn!(event_id, error = %err, "could not release on shutdown; the lease will expire")
            }
        }
    }
}

struct ScanReport {
    scan: Scan,
    claimable: usize,
    truncated: bool,
}

/// Removes an event from the held set when its task ends, however it ends.
struct HeldGuard {
    shared: Arc<Shared>,
    event_id: String,
}

impl Drop for HeldGuard {
    fn drop(&mut self) {
        if let Ok(mut held) = self.shared.held.lock() {
            held.remove(&self.event_id);
        }
    }
}

/// One event: deduplicate, or run the handler under heartbeats; then acknowledge or release.
async fn work<H: Handler>(shared: &Shared, handler: &H, claim: &Claim) -> Outcome {
    let token = Secret::new(claim.lease_token.clone());
    match shared.state.processed(&shared.inbox, &claim.event_id).await {
        Ok(Some(result)) => {
            return match acknowledge(shared, claim, &token, result).await {
                Ok(()) => Outcome::Deduplicated { result },
                Err(err) => Outcome::Unconfirmed { error: err.to_string() },
            };
        }
        Ok(None) => {}
        Err(err) => {
            // Without the record we cannot tell whether this ran before; give it back.
            tracing::error!(error = %err, "local state unreadable; releasing the event");
            return match release(shared, claim, &token, Duration::from_secs(5), "local_state_unavailable")
                .await
            {
                Ok(()) => Outcome::Released { after: Duration::from_secs(5), reason: err.to_string() },
                Err(err) => Outcome::Unconfirmed { error: err.to_string() },
            };
        }
    }
    let event =
        Event { envelope: claim.event.clone(), lease_until_utc: claim.visibility_lease_until_utc.clone() };
    let result = with_heartbeats(shared, claim, &token, handler.handle(event)).await;
    let (processed, reason) = match result {
        Ok(()) => (Processed::Completed, String::new()),
        Err(HandlerError::Permanent { reason }) => (Processed::Failed, reason),
        Err(HandlerError::Retry { after, reason }) => {
            return match release(shared, claim, &token, after, &reason).await {
                Ok(()) => Outcome::Released { after, reason },
                Err(err) => Outcome::Unconfirmed { error: err.to_string() },
            };
        }
    };
    if let Err(err) =
        shared.state.record_processed(&shared.inbox, &claim.event_id, claim.event.inbox_seq, processed).await
    {
        tracing::warn!(event_id = %claim.event_id, error = %err, "could not record the event as processed");
    }
    match acknowledge(shared, claim, &token, processed).await {
        Ok(()) if processed == Processed::Completed => Outcome::Acked,
        Ok(()) => Outcome::Failed { reason },
        Err(err) => Outcome::Unconfirmed { error: err.to_string() },
    }
}

/// Runs `work` while extending the lease at half its length. A lease that is lost cannot be
/// won back; the handler is left to finish, and its result is recorded for deduplication.
async fn with_heartbeats<T>(
    shared: &Shared,
    claim: &Claim,
    token: &Secret,
    work: impl Future<Output = T>,
) -> T {
    let mut work = pin!(work);
    let lease = shared.lease;
    let mut next = Instant::now() + heartbeat_delay(lease);
    let mut alive = true;
    loop {
        tokio::select! {
            done = &mut work => return done,
            _ = tokio::time::sleep_until(next), if alive => {
                let request = HeartbeatRequest {
                    tenant_id: None,
                    recipient_id: None,
                    session_id: shared.session_id.clone(),
                    leases: vec![HeartbeatEntry {
                        event_id: claim.event_id.clone(),
                        lease_token: token.expose().to_owned(),
                        extend_by_seconds: lease.as_secs().max(1),
                    }],
                };
                match shared.api.heartbeat(&request).await {
                    Ok(answer) => match answer.leases.first().and_then(|l| l.error.as_ref()) {
                        None => next = Instant::now() + heartbeat_delay(lease),
                        Some(error) => {
                            tracing::warn!(event_id = %claim.event_id, code = %error.code, "lease lost while the handler runs");
                            shared.observe(Progress::LeaseLost { event_id: &claim.event_id });
                            alive = false;
                        }
                    },
                    Err(err) if err.is_transient() => next = Instant::now() + heartbeat_retry_delay(lease),
                    Err(err) => {
                        tracing::warn!(event_id = %claim.event_id, error = %err, "heartbeat refused");
                        alive = false;
                    }
                }
            }
        }
    }
}

/// Acknowledges one event, repeating on network failure (the same token twice is success).
async fn acknowledge(
    shared: &Shared,
    claim: &Claim,
    token: &Secret,
    result: Processed,
) -> Result<(), ClientError> {
    let request = AcknowledgeRequest {
        tenant_id: None,
        recipient_id: None,
        session_id: shared.session_id.clone(),
        acks: vec![AckEntry {
            event_id: claim.event_id.clone(),
            lease_token: token.expose().to_owned(),
            result: Some(result.as_str().to_owned()),
        }],
    };
    let answer = retrying(shared, || shared.api.acknowledge(&request)).await?;
    match answer.results.first() {
        Some(outcome) if outcome.error.is_none() => Ok(()),
        Some(outcome) => {
            let error = outcome.error.clone().expect("checked above");
            Err(ClientError::Refused {
                problem: Box::new(inbox_api::Problem::new(
                    409,
                    &error.code,
                    "acknowledge refused",
                    error.detail,
                )),
            })
        }
        None => Err(ClientError::Protocol("the acknowledgement answer was empty".into())),
    }
}

async fn release(
    shared: &Shared,
    claim: &Claim,
    token: &Secret,
    after: Duration,
    reason: &str,
) -> Result<(), ClientError> {
    let request = ReleaseRequest {
        tenant_id: None,
        recipient_id: None,
        event_id: claim.event_id.clone(),
        lease_token: token.expose().to_owned(),
        reason: Some(reason.chars().take(200).collect()),
        retry_after_seconds: after.as_secs().min(604_800),
    };
    retrying(shared, || shared.api.release(&request)).await.map(drop)
}

/// Repeats a request while it fails transiently, with backoff, up to the attempt limit.
async fn retrying<T, F, Fut>(shared: &Shared, mut request: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let mut attempt = 0;
    loop {
        match request().await {
            Err(err) if err.is_transient() && attempt + 1 < shared.config.ack_attempts_max => {
                attempt += 1;
                tokio::time::sleep(err.honoured(shared.config.ack_retry.delay(attempt, jitter()))).await;
            }
            other => return other,
        }
    }
}

/// Blocks until a claimable event exists after the persisted cursor (or after 0 without a
/// state file), or `timeout` passes. Returns how many claimable events the answer showed.
/// Long polls when it can; repeats through network failures with backoff.
pub async fn wait_for_work(
    api: &Api,
    state: Option<&LocalState>,
    timeout: Duration,
    backoff: Backoff,
) -> Result<Option<usize>, ClientError> {
    let deadline = Instant::now() + timeout;
    // Claimable events never sit at or below the cursor (it only passes finished ones), so
    // starting there only saves reading; 0 is always correct.
    let mut after_seq = match (state, api.head().await) {
        (Some(state), Ok(head)) => state.cursor(&format!("{}/{}", head.tenant_id, head.recipient_id)).await?,
        (_, Err(err)) if !err.is_transient() => return Err(err),
        _ => 0,
    };
    let mut attempt = 0;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        // Whole seconds, rounded up: the last part of a second is one short long poll, never
        // a burst of immediate polls.
        let wait_seconds = (remaining.as_millis().div_ceil(1000) as u32).clamp(1, 25);
        let request = PollRequest {
            after_seq,
            limit: Some(100),
            wait_seconds: Some(wait_seconds),
            include_claimable_only: true,
            ..PollRequest::default()
        };
        match tokio::time::timeout_at(deadline, api.poll(&request)).await {
            Err(_) => return Ok(None),
            Ok(Ok(page)) => {
                attempt = 0;
                if !page.events.is_empty() {
                    return Ok(Some(page.events.len()));
                }
                if page.more_available {
                    after_seq = page.next_cursor;
                    continue;
                }
            }
            Ok(Err(err)) if err.code() == Some(&ProblemCode::CursorResetRequired) => {
                let oldest = match &err {
                    ClientError::Refused { problem } => {
                        problem.extensions.get("oldest_available_seq").and_then(Value::as_u64).unwrap_or(1)
                    }
                    _ => 1,
                };
                after_seq = oldest.saturating_sub(1);
                continue;
            }
            Ok(Err(err)) if err.is_transient() => {
                attempt += 1;
                let delay = err.honoured(backoff.delay(attempt, jitter())).min(remaining);
                tokio::time::sleep(delay).await;
            }
            Ok(Err(err)) => return Err(err),
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
    }
}
