//! Following one identity's inbox for the local wake daemon: the runner's own transports
//! (SSE, then long poll, then nothing but the daemon's rechecks), with no session of its own,
//! and after every hint one read of how many events are claimable. The daemon answers its
//! local clients from the [`InboxView`] this keeps; it never claims.
//!
//! A count of zero is trusted only while it is *fresh*: hints are arriving and the count was
//! read after they began, so any publish or requeue since would have woken a new read. Events
//! that become claimable by time alone (a lease running out, a retry delay passing) wake
//! nothing, so the count is read again every [`RECHECK_INTERVAL`] — as often as a direct
//! `wait`'s long poll comes back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::api::Api;
use crate::transport::{Signals, Transport, TransportConfig, TransportKind, TransportStatus};
use crate::wait::claimable_now;

/// How often the count is read again while nothing wakes it: a direct `wait`'s longest
/// long poll.
pub const RECHECK_INTERVAL: Duration = Duration::from_secs(25);

/// The session-less stream: following the inbox never takes a session from the agent's own
/// runner (`listen`).
const SSE_PATH: &str = "/v1/streams/sse";

/// The service's default heartbeat interval; a stream silent for three of them is redialled.
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(30);

/// What the daemon knows about one inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxView {
    pub head_seq: u64,
    /// Claimable events at the last read, at most 100.
    pub claimable: usize,
    pub transport: TransportKind,
    /// Hints are arriving (a stream is open, or long polls answer).
    pub connected: bool,
    /// Connected, and the count was read after hints began to arrive.
    pub fresh: bool,
    /// The highest check ticket ([`InboxFollower::check_now`]) the last read covers.
    pub covers: u64,
    /// The last read's failure, if it failed.
    pub error: Option<String>,
    /// The last read was refused for good (credentials spent or revoked, say).
    pub refused: bool,
}

/// One followed inbox. Dropping it stops following.
#[derive(Debug)]
pub struct InboxFollower {
    view: watch::Receiver<InboxView>,
    check: Arc<Notify>,
    tickets: Arc<AtomicU64>,
    transport: JoinHandle<()>,
    reader: JoinHandle<()>,
}

impl InboxFollower {
    /// Starts following the inbox `api` speaks for.
    pub fn start(api: Api, config: TransportConfig) -> InboxFollower {
        let signals = Signals::new(0);
        let first = *config.allowed.first().unwrap_or(&TransportKind::Poll);
        let (status_tx, status) = watch::channel(TransportStatus { kind: first, connected: false });
        let transport = tokio::spawn(
            Transport {
                api: api.clone(),
                config,
                sse_path: Some(SSE_PATH.to_owned()),
                heartbeat_interval: HEARTBEAT_INTERVAL,
                signals: signals.clone(),
                status: status_tx,
            }
            .run(),
        );
        let (view_tx, view) = watch::channel(InboxView {
            head_seq: 0,
            claimable: 0,
            transport: first,
            connected: false,
            fresh: false,
            covers: 0,
            error: None,
            refused: false,
        });
        let check = Arc::new(Notify::new());
        let tickets = Arc::new(AtomicU64::new(0));
        let reader = tokio::spawn(
            Reader { api, signals, status, view: view_tx, check: check.clone(), tickets: tickets.clone() }
                .run(),
        );
        InboxFollower { view, check, tickets, transport, reader }
    }

    /// The view, to read now or to wait for changes on.
    pub fn view(&self) -> watch::Receiver<InboxView> {
        self.view.clone()
    }

    /// Asks for a read now; returns the ticket a read covering this request will carry in
    /// [`InboxView::covers`].
    pub fn check_now(&self) -> u64 {
        let ticket = self.tickets.fetch_add(1, Ordering::AcqRel) + 1;
        self.check.notify_one();
        ticket
    }
}

impl Drop for InboxFollower {
    fn drop(&mut self) {
        self.transport.abort();
        self.reader.abort();
    }
}

/// The task that reads the count when woken.
struct Reader {
    api: Api,
    signals: Signals,
    status: watch::Receiver<TransportStatus>,
    view: watch::Sender<InboxView>,
    check: Arc<Notify>,
    tickets: Arc<AtomicU64>,
}

impl Reader {
    async fn run(mut self) {
        loop {
            let connected = self.status.borrow().connected;
            tokio::select! {
                _ = self.signals.hint.notified() => {}
                _ = self.check.notified() => {}
                changed = self.status.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let status = *self.status.borrow_and_update();
                    self.view.send_if_modified(|view| {
                        let before = view.clone();
                        view.transport = status.kind;
                        view.connected = status.connected;
                        view.fresh &= status.connected;
                        *view != before
                    });
                    if !status.connected {
                        continue;
                    }
                }
                _ = tokio::time::sleep(RECHECK_INTERVAL), if connected => {}
            }
            self.read().await;
        }
    }

    async fn read(&mut self) {
        let covers = self.tickets.load(Ordering::Acquire);
        let connected = self.status.borrow().connected;
        let read = claimable_now(&self.api).await;
        // Fresh only if hints flowed the whole time: a (re)connection during the read wakes
        // another read, which will be.
        let still = !self.status.has_changed().unwrap_or(true);
        match read {
            Ok((claimable, head_seq)) => {
                self.signals.known_head.fetch_max(head_seq, Ordering::AcqRel);
                self.view.send_modify(|view| {
                    view.head_seq = view.head_seq.max(head_seq);
                    view.claimable = claimable;
                    view.fresh = connected && still;
                    view.covers = view.covers.max(covers);
                    view.error = None;
                    view.refused = false;
                });
            }
            Err(err) => {
                tracing::debug!(error = %err, "reading the inbox for local clients failed");
                self.view.send_modify(|view| {
                    view.fresh = false;
                    view.covers = view.covers.max(covers);
                    view.refused = !err.is_transient();
                    view.error = Some(err.to_string());
                });
            }
        }
    }
}
