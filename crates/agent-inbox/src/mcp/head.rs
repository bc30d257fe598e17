//! The inbox's change feed, for the `inbox://head` resource's subscribers and a Claude Code
//! channel. While at least one subscriber wants it, a reader follows the service's hint stream
//! (SSE, `GET /v1/streams/sse`), and a looker answers every hint, and every time an open
//! event's lease, retry delay or delayed delivery runs out, with a look at the waiting work
//! (`inbox_view.rs`). A subscriber hears of every change the agent can act on: events that
//! arrived (the head moved), events sent back to the inbox (an operator's requeue or release
//! from quarantine: a nudge, the head stays), and events that became claimable with no hint
//! at all (a lease ran out and the scavenger returned the event, a retry's time came). When
//! the last subscriber leaves, both stop. A claim sends no hint, so while work waits the looker
//! looks again after 1, 2, 4, ... seconds (and at once after this server's own lease calls),
//! to learn the end of a lease someone took. A change only says "look again": a subscriber
//! reads the resource, or claims, for the facts.

use std::sync::Arc;
use std::time::Duration;

use inbox_api::{PollRequest, ProblemCode};
use inbox_client::schedule::Backoff;
use inbox_client::sse::SseParser;
use inbox_client::{Api, ClientError};
use inbox_core::InboxSeq;
use inbox_core::limits::{BatchLimit, WaitSeconds};
use tokio::sync::{Mutex, Notify, broadcast, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::inbox_view::{ScanCursor, Waiting, next_change_ms, now_ms, waiting};

pub const HEAD_URI: &str = "inbox://head";

const SSE_PATH: &str = "/v1/streams/sse";
const RECONNECT: Backoff = Backoff { base: Duration::from_secs(1), max: Duration::from_secs(30) };
/// The pause before following again after a stream or long poll ended normally.
const AGAIN: Duration = Duration::from_millis(100);
/// The longest the looker goes without a look while subscribed: a time past the pages one
/// look scans, or a change no hint announced, is found within this.
const LOOK_EVERY_MAX: Duration = Duration::from_secs(30);
/// The soonest the looker looks again for a time that has come: a lease that ran out is
/// returned by the service's scavenger within its period (1 s by default), not at once.
const LOOK_AGAIN_MIN: Duration = Duration::from_millis(250);
/// A time this long past that still left its event unclaimable is not looked for more often
/// than [`LOOK_EVERY_MAX`] (a scavenger that is not running, a state this client does not know).
const OVERDUE_MS: i64 = 10_000;
/// Hints queued between two looks; the looker takes them all at once.
const HINTS_QUEUED: usize = 64;
/// While work waits unclaimed, the looker looks after 1 s, 2 s, 4 s, ... (up to
/// [`LOOK_EVERY_MAX`]): a claim sends no hint, and the lease it took is a time to look at.
const WAITING_LOOK_FIRST: Duration = Duration::from_secs(1);

/// What kind of change made waiting work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// New events: the head moved.
    Arrived,
    /// Events came back to the inbox behind the head (an operator's requeue or release).
    Returned,
    /// More events are claimable with no new ones (a lease or a retry delay ran out, a delayed
    /// delivery's time came).
    Available,
    /// Work was waiting already when a subscriber began (only a channel says so).
    Waiting,
}

/// One change, with the waiting work as the look after it found it.
#[derive(Debug, Clone)]
pub struct Change {
    pub why: Why,
    pub waiting: Waiting,
}

/// Shared by every subscription of one MCP server. Cheap to clone.
#[derive(Debug, Clone)]
pub struct InboxWatch {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    api: Api,
    changes: broadcast::Sender<Change>,
    cursor: Arc<ScanCursor>,
    follower: Mutex<Follower>,
    /// This server's own calls that change leases ask for a look (`InboxWatch::poke`).
    pokes: Notify,
}

#[derive(Debug, Default)]
struct Follower {
    subscribers: usize,
    task: Option<JoinHandle<()>>,
}

/// One subscriber's view of the feed; dropping it unsubscribes.
#[derive(Debug)]
pub struct InboxSubscription {
    watch: Option<InboxWatch>,
    pub changes: broadcast::Receiver<Change>,
}

impl InboxWatch {
    pub fn new(api: Api) -> InboxWatch {
        let (changes, _) = broadcast::channel(16);
        InboxWatch {
            inner: Arc::new(Inner {
                api,
                changes,
                cursor: Arc::default(),
                follower: Mutex::new(Follower::default()),
                pokes: Notify::new(),
            }),
        }
    }

    /// A call of this server claimed, released or extended a lease (no hint says so): the
    /// next look learns its end. Nothing happens while nobody subscribes.
    pub fn poke(&self) {
        self.inner.pokes.notify_one();
    }

    /// Where every look of this server starts its scan of open events.
    pub fn cursor(&self) -> &ScanCursor {
        &self.inner.cursor
    }

    /// Starts following when this is the first subscriber. The waiting work as of now is the
    /// baseline: an event committed before the stream opens still makes a change.
    pub async fn subscribe(&self) -> InboxSubscription {
        let changes = self.inner.changes.subscribe();
        let mut follower = self.inner.follower.lock().await;
        follower.subscribers += 1;
        if follower.task.is_none() {
            let baseline = match waiting(&self.inner.api).await {
                Ok(waiting) => Some(waiting),
                Err(err) => {
                    tracing::warn!(error = %err, "cannot look at the inbox");
                    None
                }
            };
            let inner = self.inner.clone();
            follower.task = Some(tokio::spawn(follow(inner, baseline)));
            tracing::info!("following the inbox for its subscribers");
        }
        InboxSubscription { watch: Some(self.clone()), changes }
    }

    async fn unsubscribe(&self) {
        let mut follower = self.inner.follower.lock().await;
        follower.subscribers = follower.subscribers.saturating_sub(1);
        if follower.subscribers == 0
            && let Some(task) = follower.task.take()
        {
            task.abort();
            tracing::info!("no inbox subscribers left; hint stream closed");
        }
    }
}

impl Drop for InboxSubscription {
    fn drop(&mut self) {
        // Drop cannot wait for the lock; a runtime is always there while the server runs.
        if let (Some(watch), Ok(runtime)) = (self.watch.take(), tokio::runtime::Handle::try_current()) {
            runtime.spawn(async move { watch.unsubscribe().await });
        }
    }
}

/// Whether a look that found `now`, after `before` and hints of which some were nudges, is a
/// change the agent can act on. The first look after a failed baseline counts waiting work as
/// arrived.
pub fn judge(before: Option<&Waiting>, now: &Waiting, nudged: bool) -> Option<Why> {
    let Some(before) = before else {
        return (now.claimable > 0).then_some(Why::Arrived);
    };
    if now.head_seq > before.head_seq {
        Some(Why::Arrived)
    } else if nudged && now.claimable > 0 {
        Some(Why::Returned)
    } else if now.claimable > before.claimable || (now.claimable > 0 && now.attempts > before.attempts) {
        // More to take, or the same events taken and back (their attempts grew): a lease ran out.
        Some(Why::Available)
    } else {
        None
    }
}

/// How soon to look again while work waits unclaimed, after `streak` looks that found the
/// same waiting work.
fn waiting_look_in(streak: u32) -> Duration {
    WAITING_LOOK_FIRST.saturating_mul(1 << streak.min(16)).min(LOOK_EVERY_MAX)
}

/// When to look next, for a known time `at_ms` something becomes claimable (or none).
fn next_look_in(at_ms: Option<i64>, now_ms: i64) -> Duration {
    match at_ms {
        Some(at) if at >= now_ms - OVERDUE_MS => {
            Duration::from_millis(at.saturating_sub(now_ms).max(0) as u64)
                .clamp(LOOK_AGAIN_MIN, LOOK_EVERY_MAX)
        }
        _ => LOOK_EVERY_MAX,
    }
}

/// A hint from the service: look again; a nudge when it named no newer head.
#[derive(Debug, Clone, Copy)]
struct Hint {
    nudged: bool,
}

/// Aborts its task when dropped, so the reader stops with the looker.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The looker: one look per batch of hints and per time that comes, reporting changes, until
/// aborted.
async fn follow(inner: Arc<Inner>, mut known: Option<Waiting>) {
    let (hints, mut queued) = mpsc::channel(HINTS_QUEUED);
    let _reader = AbortOnDrop(tokio::spawn(read_hints(inner.api.clone(), hints)));
    let mut next_look = Instant::now();
    let mut failures = 0;
    let mut streak = 0;
    loop {
        let mut nudged = false;
        tokio::select! {
            hint = queued.recv() => {
                let Some(hint) = hint else { return };
                nudged = hint.nudged;
                while let Ok(hint) = queued.try_recv() {
                    nudged |= hint.nudged;
                }
            }
            () = inner.pokes.notified() => {}
            () = tokio::time::sleep_until(next_look) => {}
        }
        let now = match waiting(&inner.api).await {
            Ok(now) => now,
            Err(err) => {
                failures += 1;
                tracing::warn!(error = %err, "cannot look at the inbox; trying again");
                next_look = Instant::now() + RECONNECT.delay(failures, 0.5);
                continue;
            }
        };
        failures = 0;
        if let Some(why) = judge(known.as_ref(), &now, nudged) {
            tracing::debug!(?why, head_seq = now.head_seq, claimable = now.claimable, "the inbox changed");
            let _ = inner.changes.send(Change { why, waiting: now.clone() });
        }
        streak = if known.as_ref() == Some(&now) { streak + 1 } else { 0 };
        let waits = now.claimable > 0;
        known = Some(now);
        let mut look_in = match next_change_ms(&inner.api, &inner.cursor).await {
            Ok(at_ms) => next_look_in(at_ms, now_ms()),
            Err(err) => {
                tracing::warn!(error = %err, "cannot scan the inbox for its next change");
                LOOK_EVERY_MAX
            }
        };
        if waits {
            look_in = look_in.min(waiting_look_in(streak));
        }
        next_look = Instant::now() + look_in;
    }
}

/// The reader: follows hints until aborted (or the looker is gone), reconnecting with
/// backoff; after every (re)connect it asks for one look, for what the gap may have hidden.
async fn read_hints(api: Api, hints: mpsc::Sender<Hint>) {
    let mut failures = 0;
    loop {
        match read_once(&api, &hints).await {
            Ok(()) => {
                failures = 0;
                tokio::time::sleep(AGAIN).await;
            }
            Err(err) => {
                failures += 1;
                tracing::warn!(error = %err, "following the inbox's hints failed; trying again");
                tokio::time::sleep(RECONNECT.delay(failures, 0.5)).await;
            }
        }
        if hints.is_closed() {
            return;
        }
    }
}

/// One stream of hints, opened after the head we know, passing on every `inbox.updated`;
/// returns when the service ends it. The stream names no session, so following the inbox
/// never takes the agent's session from its `listen` process; a tenant that allows one active
/// session per agent refuses such streams, and then one long poll stands in for the stream.
async fn read_once(api: &Api, hints: &mpsc::Sender<Hint>) -> Result<(), ClientError> {
    let head = api.head().await?.head_seq;
    let mut response = match api.open_sse(SSE_PATH, head).await {
        Ok(response) => response,
        Err(err)
            if matches!(err.code(), Some(ProblemCode::SessionRequired | ProblemCode::SessionSuperseded)) =>
        {
            return long_poll(api, hints, head).await;
        }
        Err(err) => return Err(err),
    };
    if hints.send(Hint { nudged: false }).await.is_err() {
        return Ok(());
    }
    // The service announces each head once per stream, after the one the stream opened at; a
    // hint at a head already announced is a nudge.
    let mut announced = head;
    let mut parser = SseParser::new();
    loop {
        let chunk = response
            .chunk()
            .await
            .map_err(|err| ClientError::Unreachable(format!("the event stream broke: {err}")))?;
        let Some(chunk) = chunk else { return Ok(()) };
        let events = parser.feed(&chunk).map_err(|err| ClientError::Protocol(err.to_string()))?;
        for event in events.into_iter().filter(|event| event.event == "inbox.updated") {
            let head = serde_json::from_str::<serde_json::Value>(&event.data)
                .ok()
                .and_then(|data| data.get("head_seq").and_then(serde_json::Value::as_u64))
                .or_else(|| event.id.as_deref().and_then(|id| id.parse().ok()));
            let nudged = head.is_some_and(|head| head <= announced);
            announced = announced.max(head.unwrap_or(announced));
            // A hint we cannot read still says "look again".
            if hints.send(Hint { nudged }).await.is_err() {
                return Ok(());
            }
        }
    }
}

/// Waits (up to the longest long poll) for an event after `head` or a nudge.
async fn long_poll(api: &Api, hints: &mpsc::Sender<Hint>, head: u64) -> Result<(), ClientError> {
    let request = PollRequest {
        after_seq: InboxSeq(head),
        limit: Some(BatchLimit::of(1)),
        wait_seconds: Some(WaitSeconds::of(25)),
        ..PollRequest::default()
    };
    let page = api.poll(&request).await?;
    if !page.events.is_empty() || page.nudged || page.head_seq > head {
        let _ = hints.send(Hint { nudged: page.nudged }).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(head_seq: u64, claimable: usize) -> Waiting {
        Waiting { head_seq, claimable, attempts: claimable as u64, ..Waiting::default() }
    }

    #[test]
    fn a_change_is_what_the_agent_can_act_on() {
        let before = waiting(3, 1);
        assert_eq!(judge(Some(&before), &waiting(4, 1), false), Some(Why::Arrived), "the head moved");
        assert_eq!(
            judge(Some(&before), &waiting(4, 0), false),
            Some(Why::Arrived),
            "even if claimed at once"
        );
        assert_eq!(judge(Some(&before), &waiting(3, 2), true), Some(Why::Returned), "a requeue");
        assert_eq!(judge(Some(&before), &waiting(3, 1), true), Some(Why::Returned), "a nudge with work");
        assert_eq!(judge(Some(&before), &waiting(3, 0), true), None, "a nudge with nothing to take");
        assert_eq!(judge(Some(&before), &waiting(3, 2), false), Some(Why::Available), "a lease ran out");
        assert_eq!(judge(Some(&before), &waiting(3, 1), false), None);
        assert_eq!(judge(Some(&before), &waiting(3, 0), false), None, "a claim is no news");
        let taken_and_back = Waiting { attempts: 2, ..waiting(3, 1) };
        assert_eq!(judge(Some(&before), &taken_and_back, false), Some(Why::Available), "claimed, then back");
        assert_eq!(judge(None, &waiting(3, 1), false), Some(Why::Arrived));
        assert_eq!(judge(None, &waiting(3, 0), false), None);
    }

    #[test]
    fn waiting_work_is_looked_at_less_and_less_often() {
        assert_eq!(waiting_look_in(0), Duration::from_secs(1));
        assert_eq!(waiting_look_in(1), Duration::from_secs(2));
        assert_eq!(waiting_look_in(3), Duration::from_secs(8));
        assert_eq!(waiting_look_in(5), LOOK_EVERY_MAX);
        assert_eq!(waiting_look_in(u32::MAX), LOOK_EVERY_MAX);
    }

    #[test]
    fn looks_come_when_a_time_comes_within_bounds() {
        let now = 1_000_000;
        assert_eq!(next_look_in(None, now), LOOK_EVERY_MAX);
        assert_eq!(next_look_in(Some(now + 2_000), now), Duration::from_secs(2));
        assert_eq!(next_look_in(Some(now + 10), now), LOOK_AGAIN_MIN, "not sooner than the scavenger");
        assert_eq!(next_look_in(Some(now - 500), now), LOOK_AGAIN_MIN, "a lease just ran out");
        assert_eq!(next_look_in(Some(now + 3_600_000), now), LOOK_EVERY_MAX);
        assert_eq!(next_look_in(Some(now - OVERDUE_MS - 1), now), LOOK_EVERY_MAX, "long overdue");
    }
}
