//! The agent runner (the contract it runs is in `contract`, one claimed event's work in
//! `work`). On every hint, timer or reconnection it scans the inbox after its persisted cursor,
//! claims what it can run, and runs the handler once per event while heartbeating the event's
//! lease; then it acknowledges (`Ok`), releases for a retry (a retryable error) or acknowledges
//! as `failed` (a permanent error, which the service dead-letters). A handler's result is
//! recorded locally *before* it is acknowledged, so an event delivered again after a crash or a
//! lost acknowledgement is acknowledged from the record instead of being run twice.
//! Acknowledgements and releases that fail on the network are repeated: both are idempotent for
//! the same lease token.
//!
//! The runner sends its session id with every claim. When the tenant allows one active session
//! per agent and a newer process with the same identity subscribes, the service refuses this
//! session's claims (or ends its stream) with `session_superseded`: the runner then stops
//! claiming, lets running handlers finish within the shutdown grace period (their leases stay
//! valid, so they are acknowledged as usual), releases what is still running after it, and
//! returns [`ClientError::SessionSuperseded`].

use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inbox_api::ProblemCode;
use inbox_api::time::{now_ms, parse_utc};
use inbox_api::{Claim, ClaimRequest, PollRequest, ReleaseRequest, SubscribeRequest};
use inbox_core::limits::{BatchLimit, DeviceId, LeaseSeconds, ReleaseReason, RetryAfterSeconds};
use inbox_core::{EventId, InboxSeq, LeaseToken};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::api::Api;
use crate::contract::{AgentConfig, Handler, HandlerError, Outcome, Progress, Resync, RunSummary};
use crate::cursor::Scan;
use crate::error::ClientError;
use crate::jitter::jitter;
use crate::local_state::LocalState;
use crate::schedule::{
    ClaimableAt, ClockSample, CycleFound, clock_jump, next_cycle_after, retry_after_seconds,
};
use crate::transport::{Signals, Transport, TransportKind, TransportStatus};
use crate::work::{HeldGuard, Shared, work};

/// An agent: one identity, one local state file, one handler.
#[derive(Debug)]
pub struct Agent {
    api: Api,
    state: LocalState,
    config: AgentConfig,
}

/// What a finished event task hands back.
struct Done {
    outcome: Outcome,
    /// When the event may be claimable again, if it went back to the inbox: released for a
    /// retry, or left to run out its lease (unconfirmed).
    returns_at_ms: Option<i64>,
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
            outage_attempts: 0,
            last_scan: None,
            claimable_at: ClaimableAt::default(),
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
            device_id: self
                .config
                .device_id
                .clone()
                .map(DeviceId::new)
                .transpose()
                .map_err(|e| ClientError::Config(format!("device_id {e}")))?,
            supported_transports: vec![
                inbox_api::Transport::Sse,
                inbox_api::Transport::LongPoll,
                inbox_api::Transport::Poll,
            ],
            wants_claims: true,
            ..SubscribeRequest::default()
        };
        let mut attempt = 0;
        let subscribed = loop {
            match self.api.subscribe(&request).await {
                Ok(subscribed) => break subscribed,
                Err(err) if err.is_transient() => {
                    attempt += 1;
                    let delay = err.honoured(self.config.outage.delay(attempt, jitter()));
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
    /// The adaptive poll interval's nominal value (while polling).
    poll_nominal: Option<Duration>,
    /// Failed cycles in a row while the service is unreachable, for its backoff.
    outage_attempts: u32,
    last_scan: Option<Instant>,
    /// Kept across cycles, which do not all scan: the wake that no hint will bring.
    claimable_at: ClaimableAt,
    /// After a resync, open events may sit at or below the cursor, where scans do not look:
    /// claim without waiting for a scan to show something, until a claim comes back short.
    claim_backlog: bool,
}

/// What one cycle found.
struct Cycle {
    claimed: usize,
    /// The claim was full: more may be claimable right away.
    more: bool,
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
                        // Unreachable: the transports stand by and only this loop knocks, on
                        // the outage backoff (capped at a few seconds, so a returning service
                        // is found soon after it is back).
                        self.signals.service_down.store(true, Ordering::Release);
                        self.outage_attempts = self.outage_attempts.saturating_add(1);
                        let delay = err.honoured(config.outage.delay(self.outage_attempts, jitter()));
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
                    // While requests fail, a hint does not cut the outage backoff short: a
                    // stream can keep delivering hints while scans and claims fail, and
                    // answering each at once would hammer the service that is failing them.
                    if self.outage_attempts == 0 {
                        next_cycle = Instant::now();
                    }
                    forced = true;
                    // Claim even if the scan finds nothing new: a hint may be for an event
                    // behind the cursor that went back to the inbox (an operator's requeue or
                    // release from quarantine), which only a claim can find.
                    self.claim_backlog = true;
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
        self.outage_attempts = 0;
        let found = CycleFound {
            claimed: cycle.claimed,
            more: cycle.more,
            until_change: self.claimable_at.until(now_ms()),
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
        if !worth_claiming {
            return Ok(Cycle { claimed: 0, more: false });
        }
        let limit = free.min(500) as u32;
        let claimed = self
            .shared
            .api
            .claim(&ClaimRequest {
                session_id: self.shared.session_id.clone(),
                limit: Some(BatchLimit::saturating(limit)),
                lease_seconds: self.shared.config.lease.map(|l| LeaseSeconds::saturating(l.as_secs())),
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
        Ok(Cycle { claimed: n_claimed, more: n_claimed == limit as usize })
    }

    /// Reads the inbox after the cursor, page by page; persists the cursor it may move to.
    async fn scan<R: Resync>(&mut self, resync: &R) -> Result<ScanReport, ClientError> {
        let shared = self.shared.clone();
        let started_ms = now_ms();
        let mut cursor = shared.state.cursor(&shared.inbox).await?;
        let held = shared.held_ids();
        let mut scan = Scan::new(cursor);
        let mut pages = 0;
        let truncated = loop {
            let request = PollRequest {
                after_seq: InboxSeq(scan.seen_through.max(cursor)),
                limit: Some(BatchLimit::saturating(shared.config.page_size)),
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
        self.claimable_at.scanned(started_ms, scan.next_change_ms);
        if scan.cursor > cursor {
            shared.state.advance_cursor(&shared.inbox, scan.cursor).await?;
        }
        self.signals.known_head.fetch_max(scan.head_seq, Ordering::AcqRel);
        shared.observe(Progress::Scanned { cursor: scan.cursor, head_seq: scan.head_seq });
        Ok(ScanReport { claimable: scan.claimable, truncated })
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
            // A snapshot cannot be set aside: a quarantine stops the agent like a failure.
            Err(HandlerError::Permanent { reason } | HandlerError::Quarantine { reason, .. }) => {
                return Err(ClientError::Resync(reason));
            }
        }
        self.shared.state.reset_cursor(&self.shared.inbox, resume).await?;
        self.summary.resyncs += 1;
        self.claim_backlog = true;
        Ok(resume)
    }

    fn start<H: Handler>(&mut self, handler: &Arc<H>, claim: Claim) {
        let shared = self.shared.clone();
        let handler = handler.clone();
        shared.held.lock().expect("held lock").insert(claim.event_id, claim.lease_token.clone());
        self.tasks.spawn(async move {
            let _held = HeldGuard { shared: shared.clone(), event_id: claim.event_id };
            let started = Instant::now();
            shared.observe(Progress::Started { event: &claim.event });
            let outcome = work(&shared, handler.as_ref(), &claim).await;
            let returns_at_ms = match &outcome {
                Outcome::Released { after, .. } => {
                    Some(now_ms() + 1_000 * retry_after_seconds(*after) as i64)
                }
                Outcome::Unconfirmed { .. } => parse_utc(&claim.visibility_lease_until_utc).ok(),
                _ => None,
            };
            shared.observe(Progress::Finished {
                event: &claim.event,
                outcome: &outcome,
                elapsed: started.elapsed(),
            });
            Done { outcome, returns_at_ms }
        });
    }

    fn count(&mut self, joined: Result<Done, tokio::task::JoinError>) {
        if let Ok(Done { returns_at_ms: Some(at), .. }) = &joined {
            self.claimable_at.note(*at);
        }
        let summary = &mut self.summary;
        match joined {
            Ok(Done { outcome: Outcome::Acked, .. }) => summary.acked += 1,
            Ok(Done { outcome: Outcome::Failed { .. }, .. }) => summary.failed += 1,
            Ok(Done { outcome: Outcome::Released { .. }, .. }) => summary.released += 1,
            Ok(Done { outcome: Outcome::Quarantined { .. }, .. }) => summary.quarantined += 1,
            Ok(Done { outcome: Outcome::Deduplicated { .. }, .. }) => summary.deduplicated += 1,
            Ok(Done { outcome: Outcome::Unconfirmed { .. }, .. }) => summary.unconfirmed += 1,
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
                    let unfinished: Vec<(EventId, LeaseToken)> = self
                        .shared
                        .held
                        .lock()
                        .expect("held lock")
                        .iter()
                        .map(|(k, v)| (*k, v.clone()))
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

    async fn release_on_shutdown(&self, event_id: EventId, lease_token: LeaseToken) {
        let request = ReleaseRequest {
            tenant_id: None,
            recipient_id: None,
            event_id,
            lease_token,
            reason: Some(ReleaseReason::new("agent_shutdown").expect("a reason on one line")),
            retry_after_seconds: RetryAfterSeconds::default(),
        };
        match self.shared.api.release(&request).await {
            Ok(_) => tracing::info!(%event_id, "released an unfinished event on shutdown"),
            Err(err) => {
                tracing::warn!(%event_id, error = %err, "could not release on shutdown; the lease will expire")
            }
        }
    }
}

struct ScanReport {
    claimable: usize,
    truncated: bool,
}
