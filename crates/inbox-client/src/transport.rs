//! How the agent hears that work may exist: a Server-Sent Events stream, falling back to long
//! polls when streams fail or are cut short (by a proxy, a load balancer), falling back to the
//! runner's adaptive polling when long polls fail too, and trying the better transport again
//! later. A hint carries no data: it only wakes the runner, which polls after its cursor.
//!
//! Every (re)connection wakes the runner as well, since hints may have been missed while the
//! transport was down. Waits between attempts use jittered backoff.
//!
//! A stream that ends with `session.superseded`, or is refused with `session_superseded` (the
//! tenant's single-active-session policy, a newer process took over), stops the transport and
//! tells the runner, which stops too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use inbox_api::{PollRequest, ProblemCode, StreamSignal};
use inbox_core::InboxSeq;
use inbox_core::limits::{BatchLimit, WaitSeconds};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::api::Api;
use crate::error::ClientError;
use crate::jitter::jitter;
use crate::local_daemon::DaemonHints;
use crate::schedule::{Backoff, LongPollWait, TransportPolicy};
use crate::sse::SseParser;

/// A way of hearing about new work, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportKind {
    /// The local wake daemon's hints (`TransportConfig::local_daemon`): no connection of our own.
    Daemon,
    Sse,
    LongPoll,
    Poll,
}

impl TransportKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Daemon => "daemon",
            TransportKind::Sse => "sse",
            TransportKind::LongPoll => "long-poll",
            TransportKind::Poll => "poll",
        }
    }

    pub fn parse(text: &str) -> Option<TransportKind> {
        match text {
            "daemon" => Some(TransportKind::Daemon),
            "sse" => Some(TransportKind::Sse),
            "long-poll" | "longpoll" => Some(TransportKind::LongPoll),
            "poll" => Some(TransportKind::Poll),
            _ => None,
        }
    }
}

/// What the transport is doing now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportStatus {
    pub kind: TransportKind,
    /// Hints are arriving (a stream is open, or the last long poll answered). When false the
    /// runner polls on its adaptive schedule.
    pub connected: bool,
}

/// Settings of the hint transports.
#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// Transports to use, best first. `Poll` needs no connection and is always the last resort.
    pub allowed: Vec<TransportKind>,
    pub policy: TransportPolicy,
    pub reconnect: Backoff,
    /// Longest long-poll wait asked for (the service caps it; 25 s suits most proxies).
    pub long_poll_wait_seconds: u32,
    /// A stream silent this long is presumed dead (a half-open connection after a network
    /// change). `None`: three of the service's heartbeat intervals, plus five seconds.
    pub stream_idle_timeout: Option<Duration>,
    /// Hear hints from the local wake daemon first, when it answers; the transports in
    /// `allowed` are the fallbacks, and a stream of our own is left for the daemon again once
    /// it answers (checked every `policy.upgrade_after`).
    pub local_daemon: Option<DaemonHints>,
}

impl Default for TransportConfig {
    fn default() -> Self {
        Self {
            allowed: vec![TransportKind::Sse, TransportKind::LongPoll, TransportKind::Poll],
            policy: TransportPolicy::default(),
            reconnect: Backoff::default(),
            long_poll_wait_seconds: 25,
            stream_idle_timeout: None,
            local_daemon: None,
        }
    }
}

/// The signals between the transport task and the runner.
#[derive(Debug, Clone)]
pub(crate) struct Signals {
    /// Wakes the runner; permits coalesce, so a burst of hints costs one cycle.
    pub hint: Arc<Notify>,
    /// The highest head the agent knows of: long polls wait after it, streams resume from it.
    pub known_head: Arc<AtomicU64>,
    /// Asks the transport to drop its connection and reconnect now (after a clock jump).
    pub reconnect: Arc<Notify>,
    /// Set by the runner while the service does not answer at all: the transport then waits
    /// for `reachable` instead of probing on its own schedule.
    pub service_down: Arc<AtomicBool>,
    pub reachable: Arc<Notify>,
    /// Set by the transport when the service says a newer session of this agent took over.
    pub superseded: Arc<Notify>,
}

impl Signals {
    pub fn new(head: u64) -> Signals {
        Signals {
            hint: Arc::new(Notify::new()),
            known_head: Arc::new(AtomicU64::new(head)),
            reconnect: Arc::new(Notify::new()),
            service_down: Arc::new(AtomicBool::new(false)),
            reachable: Arc::new(Notify::new()),
            superseded: Arc::new(Notify::new()),
        }
    }
}

/// Runs the transports until the task is aborted, or the session is superseded.
pub(crate) struct Transport {
    pub api: Api,
    pub config: TransportConfig,
    /// The session's SSE path (with its session id), when the service offers streams.
    pub sse_path: Option<String>,
    pub heartbeat_interval: Duration,
    pub signals: Signals,
    pub status: watch::Sender<TransportStatus>,
}

/// How one stream ended.
enum StreamEnd {
    /// It ended or broke after being open this long.
    Closed { lived: Duration },
    /// The runner asked for a reconnect.
    Reconnect,
    /// The service said this session was superseded: nothing more to hear.
    Superseded,
}

impl Transport {
    pub async fn run(mut self) {
        let ladder = self.ladder();
        let mut rung = 0;
        let mut failures = 0u32;
        let mut fallback_since: Option<Instant> = None;
        let mut long_poll = LongPollWait::new(self.config.long_poll_wait_seconds);
        loop {
            if rung > 0 && fallback_since.is_some_and(|t| self.config.policy.should_upgrade(t.elapsed())) {
                tracing::debug!(
                    from = ladder[rung].as_str(),
                    to = ladder[0].as_str(),
                    "trying the better transport again"
                );
                rung = 0;
                failures = 0;
                fallback_since = None;
            }
            let kind = ladder[rung];
            let failed = match kind {
                TransportKind::Daemon => {
                    let status = self.status.clone();
                    let connected = move || {
                        status.send_replace(TransportStatus { kind: TransportKind::Daemon, connected: true });
                    };
                    let heard = match &self.config.local_daemon {
                        Some(daemon) => daemon.hear(&self.signals, connected).await,
                        None => Ok(()),
                    };
                    if let Err(err) = heard {
                        // Gone, stale or refusing: our own transports at once, no retries.
                        tracing::debug!(error = %err, "the local daemon gives no hints; using our own transport");
                        rung += 1;
                        failures = 0;
                        fallback_since = Some(Instant::now());
                        self.set_status(ladder[rung], false);
                        self.signals.hint.notify_one();
                    }
                    continue;
                }
                TransportKind::Sse => match self.stream(fallback_since.filter(|_| rung > 0)).await {
                    Ok(StreamEnd::Reconnect) => {
                        failures = 0;
                        continue;
                    }
                    Ok(StreamEnd::Superseded) => {
                        self.set_status(kind, false);
                        self.signals.superseded.notify_one();
                        return;
                    }
                    Ok(StreamEnd::Closed { lived }) => {
                        self.set_status(kind, false);
                        let cut = self.config.policy.stream_failed(lived);
                        tracing::debug!(lived_ms = lived.as_millis() as u64, cut, "event stream ended");
                        cut.then(|| {
                            ClientError::Unreachable(format!(
                                "the event stream was cut after {} ms",
                                lived.as_millis()
                            ))
                        })
                    }
                    Err(err) => {
                        self.set_status(kind, false);
                        Some(err)
                    }
                },
                TransportKind::LongPoll => {
                    let upgrade_at =
                        fallback_since.filter(|_| rung > 0).map(|t| t + self.config.policy.upgrade_after);
                    self.long_poll(&mut long_poll, upgrade_at).await.err()
                }
                TransportKind::Poll => {
                    self.set_status(kind, false);
                    self.idle_until_upgrade(fallback_since).await;
                    continue;
                }
            };
            match failed {
                None => {
                    failures = 0;
                    // A stream that ended normally is reopened after a short random pause, so
                    // a fleet reconnecting to a restarted node spreads out.
                    if kind == TransportKind::Sse {
                        self.pause(Duration::from_millis(250).mul_f64(jitter())).await;
                    }
                }
                Some(err) if self.signals.service_down.load(Ordering::Acquire) => {
                    // The service itself is down, not this transport: falling back would not
                    // help. Stand by until the runner reaches the service again.
                    tracing::debug!(transport = kind.as_str(), error = %err, "the service is unreachable; waiting");
                    failures = 0;
                    tokio::select! {
                        _ = self.signals.reachable.notified() => {}
                        _ = self.signals.reconnect.notified() => {}
                    }
                }
                Some(err) if err.retry_after().is_some() => {
                    // The service is up but asked for a pause (its database is away, or a
                    // limit): another transport would be told the same, so wait and retry this one.
                    let delay = err.honoured(self.config.reconnect.delay(1, jitter()));
                    tracing::debug!(transport = kind.as_str(), error = %err, retry_in_ms = delay.as_millis() as u64, "the service asked for a pause");
                    self.signals.hint.notify_one();
                    self.pause(delay).await;
                }
                Some(err) => {
                    failures += 1;
                    self.signals.hint.notify_one();
                    if self.config.policy.should_fall_back(failures) && rung + 1 < ladder.len() {
                        tracing::info!(from = kind.as_str(), to = ladder[rung + 1].as_str(), error = %err, "falling back");
                        rung += 1;
                        failures = 0;
                        fallback_since = Some(Instant::now());
                        self.set_status(ladder[rung], false);
                    } else {
                        let delay = self.config.reconnect.delay(failures, jitter());
                        tracing::debug!(transport = kind.as_str(), error = %err, retry_in_ms = delay.as_millis() as u64, "transport failed");
                        self.pause(delay).await;
                    }
                }
            }
        }
    }

    /// The transports to use, in order: the local daemon first when one is configured, then
    /// streams only when the service offers them.
    fn ladder(&self) -> Vec<TransportKind> {
        let daemon = self.config.local_daemon.is_some().then_some(TransportKind::Daemon);
        let mut ladder: Vec<TransportKind> = daemon
            .into_iter()
            .chain(self.config.allowed.iter().copied().filter(|k| *k != TransportKind::Daemon))
            .filter(|k| *k != TransportKind::Sse || self.sse_path.is_some())
            .collect();
        ladder.dedup();
        if ladder.is_empty() {
            ladder.push(TransportKind::Poll);
        }
        ladder
    }

    fn set_status(&self, kind: TransportKind, connected: bool) {
        self.status.send_if_modified(|status| {
            let next = TransportStatus { kind, connected };
            let changed = *status != next;
            *status = next;
            changed
        });
    }

    /// Sleeps, unless the runner asks for a reconnect first.
    async fn pause(&self, delay: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = self.signals.reconnect.notified() => {}
        }
    }

    async fn idle_until_upgrade(&self, since: Option<Instant>) {
        let upgrade_at = since.unwrap_or_else(Instant::now) + self.config.policy.upgrade_after;
        tokio::select! {
            _ = tokio::time::sleep_until(upgrade_at) => {}
            _ = self.signals.reconnect.notified() => {}
        }
    }

    /// One SSE stream, from opening to its end. Fallen back to from the local daemon
    /// (`fallback_since`), it ends once the daemon answers again, checked every
    /// `upgrade_after`.
    async fn stream(&mut self, fallback_since: Option<Instant>) -> Result<StreamEnd, ClientError> {
        let path = self.sse_path.clone().unwrap_or_else(|| "/v1/streams/sse".to_owned());
        let resume = self.signals.known_head.load(Ordering::Acquire);
        let opened = tokio::select! {
            opened = self.api.open_sse(&path, resume) => opened,
            _ = self.signals.reconnect.notified() => return Ok(StreamEnd::Reconnect),
        };
        let mut response = match opened {
            Ok(response) => response,
            Err(err) if err.code() == Some(&ProblemCode::SessionSuperseded) => {
                return Ok(StreamEnd::Superseded);
            }
            Err(err) if err.code() == Some(&ProblemCode::SessionNotFound) => {
                // The session was swept; a stream without one works the same.
                self.sse_path = Some("/v1/streams/sse".to_owned());
                return Err(err);
            }
            Err(err) => return Err(err),
        };
        let started = Instant::now();
        self.set_status(TransportKind::Sse, true);
        // Hints sent while no stream was open are lost: catch up now.
        self.signals.hint.notify_one();
        let idle_limit =
            self.config.stream_idle_timeout.unwrap_or(self.heartbeat_interval * 3 + Duration::from_secs(5));
        let mut parser = SseParser::new();
        let mut daemon_back = std::pin::pin!(daemon_back(
            self.config.local_daemon.as_ref(),
            fallback_since,
            self.config.policy.upgrade_after
        ));
        loop {
            let chunk = tokio::select! {
                chunk = tokio::time::timeout(idle_limit, response.chunk()) => chunk,
                _ = self.signals.reconnect.notified() => return Ok(StreamEnd::Reconnect),
                _ = &mut daemon_back => return Ok(StreamEnd::Reconnect),
            };
            let bytes = match chunk {
                Ok(Ok(Some(bytes))) => bytes,
                Ok(Ok(None)) | Ok(Err(_)) => return Ok(StreamEnd::Closed { lived: started.elapsed() }),
                Err(_silent) => {
                    tracing::debug!(silent_ms = idle_limit.as_millis() as u64, "event stream went silent");
                    return Ok(StreamEnd::Closed { lived: started.elapsed() });
                }
            };
            let events = parser.feed(&bytes).map_err(|err| ClientError::Protocol(err.to_string()))?;
            for event in events {
                if event.event == "session.superseded" {
                    tracing::info!("the service says a newer session of this agent took over");
                    return Ok(StreamEnd::Superseded);
                }
                if event.event != "inbox.updated" {
                    continue;
                }
                let head = serde_json::from_str::<StreamSignal>(&event.data)
                    .map(|s| s.head_seq)
                    .ok()
                    .or_else(|| event.id.as_deref().and_then(|id| id.parse().ok()));
                if let Some(head) = head {
                    tracing::trace!(head_seq = head, "hint");
                }
                self.signals.hint.notify_one();
            }
        }
    }

    /// One long poll after the known head. A failure is returned for the fallback count; a
    /// cut shortens later waits. Until a poll has answered, the first one does not wait, so
    /// the runner learns quickly that hints flow again. Gives up early at `upgrade_at`.
    async fn long_poll(
        &self,
        wait: &mut LongPollWait,
        upgrade_at: Option<Instant>,
    ) -> Result<(), ClientError> {
        let after_seq = self.signals.known_head.load(Ordering::Acquire);
        let connected =
            *self.status.borrow() == TransportStatus { kind: TransportKind::LongPoll, connected: true };
        let request = PollRequest {
            after_seq: InboxSeq(after_seq),
            limit: Some(BatchLimit::of(1)),
            wait_seconds: connected.then_some(WaitSeconds::saturating(wait.wait_seconds)),
            ..PollRequest::default()
        };
        let started = Instant::now();
        let far = Instant::now() + Duration::from_secs(24 * 3600);
        let answer = tokio::select! {
            answer = self.api.poll(&request) => answer,
            _ = self.signals.reconnect.notified() => return Ok(()),
            _ = tokio::time::sleep_until(upgrade_at.unwrap_or(far)) => return Ok(()),
        };
        match answer {
            Ok(page) => {
                if connected {
                    wait.on_answer();
                }
                self.set_status(TransportKind::LongPoll, true);
                let previous = self.signals.known_head.fetch_max(page.head_seq, Ordering::AcqRel);
                // A nudge: events behind the cursor went back to the inbox, and the runner
                // claims on every hint.
                if page.head_seq > previous || !page.events.is_empty() || page.nudged {
                    self.signals.hint.notify_one();
                }
                Ok(())
            }
            Err(err) if err.code() == Some(&ProblemCode::CursorResetRequired) => {
                // The runner resyncs; wait a moment so this loop does not spin meanwhile.
                self.signals.hint.notify_one();
                self.pause(Duration::from_secs(1)).await;
                Ok(())
            }
            Err(err) if err.code() == Some(&ProblemCode::InvalidField) => {
                wait.on_refused();
                Err(err)
            }
            Err(err) => {
                self.set_status(TransportKind::LongPoll, false);
                let elapsed = started.elapsed();
                if matches!(err, ClientError::Unreachable(_))
                    && elapsed >= Duration::from_millis(500)
                    && elapsed < Duration::from_secs(u64::from(wait.wait_seconds))
                {
                    tracing::debug!(
                        elapsed_ms = elapsed.as_millis() as u64,
                        "long poll cut before its wait ended"
                    );
                    wait.on_cut(elapsed);
                }
                Err(err)
            }
        }
    }
}

/// Completes once the local daemon answers again, asked every `every` from `since + every`;
/// never without a daemon to go back to.
async fn daemon_back(daemon: Option<&DaemonHints>, since: Option<Instant>, every: Duration) {
    let (Some(daemon), Some(since)) = (daemon, since) else { return std::future::pending().await };
    tokio::time::sleep_until(since + every).await;
    while !daemon.answers().await {
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_names_round_trip() {
        for kind in [TransportKind::Daemon, TransportKind::Sse, TransportKind::LongPoll, TransportKind::Poll]
        {
            assert_eq!(TransportKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(TransportKind::parse("pigeon"), None);
    }
}
