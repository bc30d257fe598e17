//! The `inbox://head` resource's change feed. While at least one MCP subscriber wants it, a
//! background task follows the service's hint stream (SSE, `GET /v1/streams/sse`) and reports
//! each new `head_seq`; when the last subscriber leaves, the stream is closed. Hints only say
//! "look again": a subscriber reads the resource (or polls) for the facts.

use std::sync::Arc;
use std::time::Duration;

use inbox_api::{PollRequest, ProblemCode};
use inbox_client::schedule::Backoff;
use inbox_client::sse::SseParser;
use inbox_client::{Api, ClientError};
use inbox_core::InboxSeq;
use tokio::sync::{Mutex, broadcast};
use tokio::task::JoinHandle;

pub const HEAD_URI: &str = "inbox://head";

const SSE_PATH: &str = "/v1/streams/sse";
const RECONNECT: Backoff = Backoff { base: Duration::from_secs(1), max: Duration::from_secs(30) };
/// The pause before following again after a stream or long poll ended normally.
const AGAIN: Duration = Duration::from_millis(100);

/// Shared by every subscription of one MCP server. Cheap to clone.
#[derive(Debug, Clone)]
pub struct HeadWatch {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    api: Api,
    updates: broadcast::Sender<u64>,
    follower: Mutex<Follower>,
}

#[derive(Debug, Default)]
struct Follower {
    subscribers: usize,
    task: Option<JoinHandle<()>>,
}

/// One subscriber's view of the feed; dropping it unsubscribes.
#[derive(Debug)]
pub struct HeadSubscription {
    watch: Option<HeadWatch>,
    pub updates: broadcast::Receiver<u64>,
}

impl HeadWatch {
    pub fn new(api: Api) -> HeadWatch {
        let (updates, _) = broadcast::channel(16);
        HeadWatch { inner: Arc::new(Inner { api, updates, follower: Mutex::new(Follower::default()) }) }
    }

    /// Starts following when this is the first subscriber. The head as of now is the baseline:
    /// an event committed before the stream opens still produces an update.
    pub async fn subscribe(&self) -> HeadSubscription {
        let updates = self.inner.updates.subscribe();
        let mut follower = self.inner.follower.lock().await;
        follower.subscribers += 1;
        if follower.task.is_none() {
            let baseline = match self.inner.api.head().await {
                Ok(head) => Some(head.head_seq),
                Err(err) => {
                    tracing::warn!(error = %err, "cannot read the inbox head");
                    None
                }
            };
            let (api, sender) = (self.inner.api.clone(), self.inner.updates.clone());
            follower.task = Some(tokio::spawn(follow(api, sender, baseline)));
            tracing::info!("following the hint stream for inbox://head subscribers");
        }
        HeadSubscription { watch: Some(self.clone()), updates }
    }

    async fn unsubscribe(&self) {
        let mut follower = self.inner.follower.lock().await;
        follower.subscribers = follower.subscribers.saturating_sub(1);
        if follower.subscribers == 0
            && let Some(task) = follower.task.take()
        {
            task.abort();
            tracing::info!("no inbox://head subscribers left; hint stream closed");
        }
    }
}

impl Drop for HeadSubscription {
    fn drop(&mut self) {
        // Drop cannot wait for the lock; a runtime is always there while the server runs.
        if let (Some(watch), Ok(runtime)) = (self.watch.take(), tokio::runtime::Handle::try_current()) {
            runtime.spawn(async move { watch.unsubscribe().await });
        }
    }
}

/// Follows hints until aborted, reconnecting with backoff.
async fn follow(api: Api, updates: broadcast::Sender<u64>, baseline: Option<u64>) {
    let mut last_seen = baseline;
    let mut failures = 0;
    loop {
        match follow_once(&api, &updates, &mut last_seen).await {
            Ok(()) => {
                failures = 0;
                tokio::time::sleep(AGAIN).await;
            }
            Err(err) => {
                failures += 1;
                tracing::warn!(error = %err, "following the inbox head failed; trying again");
                tokio::time::sleep(RECONNECT.delay(failures, 0.5)).await;
            }
        }
    }
}

/// One stream of hints, opened after the head we know, reporting every `inbox.updated`;
/// returns when the service ends it. The stream names no session, so following the head never
/// takes the agent's session from its `listen` process; a tenant that allows one active
/// session per agent refuses such streams, and then one long poll stands in for the stream.
async fn follow_once(
    api: &Api,
    updates: &broadcast::Sender<u64>,
    last_seen: &mut Option<u64>,
) -> Result<(), ClientError> {
    let head = api.head().await?.head_seq;
    // Work that arrived while no stream was open still counts as a change.
    note(updates, last_seen, head);
    let mut response = match api.open_sse(SSE_PATH, head).await {
        Ok(response) => response,
        Err(err)
            if matches!(err.code(), Some(ProblemCode::SessionRequired | ProblemCode::SessionSuperseded)) =>
        {
            return long_poll(api, updates, last_seen, head).await;
        }
        Err(err) => return Err(err),
    };
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
            match head {
                Some(head) => note(updates, last_seen, head),
                // A hint we cannot read still says "look again".
                None => drop(updates.send(last_seen.unwrap_or_default())),
            }
        }
    }
}

/// Waits (up to the longest long poll) for an event after `head`.
async fn long_poll(
    api: &Api,
    updates: &broadcast::Sender<u64>,
    last_seen: &mut Option<u64>,
    head: u64,
) -> Result<(), ClientError> {
    let request = PollRequest {
        after_seq: InboxSeq(head),
        limit: Some(inbox_core::limits::BatchLimit::of(1)),
        wait_seconds: Some(inbox_core::limits::WaitSeconds::of(25)),
        ..PollRequest::default()
    };
    let page = api.poll(&request).await?;
    note(updates, last_seen, page.head_seq);
    Ok(())
}

/// Reports `head` when it is past the last one seen.
fn note(updates: &broadcast::Sender<u64>, last_seen: &mut Option<u64>, head: u64) {
    if last_seen.is_some_and(|seen| head > seen) {
        tracing::debug!(head_seq = head, "inbox head moved");
        let _ = updates.send(head);
    }
    if last_seen.is_none_or(|seen| head > seen) {
        *last_seen = Some(head);
    }
}
