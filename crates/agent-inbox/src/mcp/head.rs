//! The `inbox://head` resource's change feed. While at least one MCP subscriber wants it, a
//! background task follows the service's hint stream (SSE) and reports each new `head_seq`;
//! when the last subscriber leaves, the stream is closed. Hints only say "look again": a
//! subscriber reads the resource (or polls) for the facts.

use std::sync::Arc;
use std::time::Duration;

use inbox_api::SubscribeRequest;
use inbox_client::schedule::Backoff;
use inbox_client::sse::SseParser;
use inbox_client::{Api, ClientError};
use tokio::sync::{Mutex, broadcast};
use tokio::task::JoinHandle;

pub const HEAD_URI: &str = "inbox://head";

const RECONNECT: Backoff = Backoff { base: Duration::from_secs(1), max: Duration::from_secs(30) };

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
        if follower.subscribers == 0 {
            if let Some(task) = follower.task.take() {
                task.abort();
                tracing::info!("no inbox://head subscribers left; hint stream closed");
            }
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
            Ok(()) => failures = 0,
            Err(err) => {
                failures += 1;
                tracing::warn!(error = %err, "the hint stream failed; reconnecting");
            }
        }
        tokio::time::sleep(RECONNECT.delay(failures.max(1), 0.5)).await;
    }
}

/// One stream: subscribe (a session that names the stream), open it after the head we know,
/// and report every `inbox.updated` hint. Returns when the service ends the stream.
async fn follow_once(
    api: &Api,
    updates: &broadcast::Sender<u64>,
    last_seen: &mut Option<u64>,
) -> Result<(), ClientError> {
    let request = SubscribeRequest {
        device_id: Some("mcp".to_owned()),
        supported_transports: vec!["sse".to_owned()],
        last_seen_seq: *last_seen,
        ..SubscribeRequest::default()
    };
    let session = api.subscribe(&request).await?;
    let path = session
        .sse_url
        .ok_or_else(|| ClientError::Protocol("the service offered no event stream".to_owned()))?;
    let head = session.current_head_seq;
    // Work that arrived while no stream was open still counts as a change.
    if last_seen.is_some_and(|seen| head > seen) {
        let _ = updates.send(head);
    }
    *last_seen = Some(head);
    let mut response = api.open_sse(&path, head).await?;
    let mut parser = SseParser::new();
    loop {
        let chunk = response
            .chunk()
            .await
            .map_err(|err| ClientError::Unreachable(format!("the event stream broke: {err}")))?;
        let Some(chunk) = chunk else { return Ok(()) };
        let events = parser.feed(&chunk).map_err(|err| ClientError::Protocol(err.to_string()))?;
        for event in events {
            match event.event.as_str() {
                "inbox.updated" => {
                    let head = serde_json::from_str::<serde_json::Value>(&event.data)
                        .ok()
                        .and_then(|data| data.get("head_seq").and_then(serde_json::Value::as_u64))
                        .or_else(|| event.id.as_deref().and_then(|id| id.parse().ok()));
                    if let Some(head) = head {
                        *last_seen = Some(head);
                    }
                    tracing::debug!(head_seq = ?head, "hint");
                    let _ = updates.send(head.unwrap_or_default());
                }
                "session.superseded" => {
                    return Err(ClientError::Protocol(
                        "another session of this agent took over the stream (single-active-session policy)"
                            .to_owned(),
                    ));
                }
                _ => {}
            }
        }
    }
}
