//! `/console/api/live`: Server-Sent Events telling the console that something changed in its
//! tenant's inboxes, so the page refetches what it shows instead of polling. Driven by the
//! server's own hints ([`crate::hints::Hints::watch_tenant`]): every publish committed on any
//! node (through the notifier) and every claim, acknowledgement, release and operator action
//! on this node. A burst of changes becomes one `changed` event at most every
//! [`CHANGED_GAP`], and a comment every [`KEEP_ALIVE`] keeps proxies from closing an idle
//! stream.
//!
//! The stream ends when the console token expires (the browser's reconnect then gets 401 and
//! the page asks for a sign-in) or when the server shuts down.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderValue;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use tokio::sync::watch;
use tokio::time::Instant;

use super::session::ConsoleSession;
use crate::error::ApiError;
use crate::limits::WaiterGuard;
use crate::node::AppState;

/// The least time between two `changed` events: the page refetches on each, so a busy tenant
/// costs it about three reads a second at most, not one per commit.
pub const CHANGED_GAP: Duration = Duration::from_millis(300);
/// How often an idle stream sends a comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `GET /console/api/live`
pub async fn live(State(state): State<AppState>, session: ConsoleSession) -> Result<Response, ApiError> {
    let caller = &session.caller;
    // A console stream counts against its tenant's stream cap, under a name no agent has.
    let slot = state.limits.hold_waiter(caller.tenant_id.as_str(), &format!("console:{}", caller.subject))?;
    let changes = state.hints.watch_tenant(&caller.tenant_id);
    let ends_at = super::session::expires_at(&session.token).map(|at| {
        let left = at.duration_since(std::time::SystemTime::now()).unwrap_or_default();
        Instant::now() + left
    });
    let live = Live { state: state.clone(), changes, ends_at, last_sent: None, _slot: slot };
    let mut response = Sse::new(live.events())
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive"))
        .into_response();
    // Ask buffering proxies (nginx) to pass events through as they are written.
    response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// One open console stream.
#[derive(Debug)]
struct Live {
    state: AppState,
    changes: watch::Receiver<u64>,
    /// When the console token expires; the stream ends then.
    ends_at: Option<Instant>,
    last_sent: Option<Instant>,
    _slot: WaiterGuard,
}

impl Live {
    /// `ready` first (so the page knows it is live and refetches once), then `changed` after
    /// changes, until the token expires, the server stops or the client goes away.
    fn events(self) -> impl Stream<Item = Result<Event, Infallible>> {
        let opening = Event::default().event("ready").data("{}");
        futures_util::stream::unfold((self, Some(opening)), |(mut live, opening)| async move {
            if let Some(event) = opening {
                return Some((Ok(event), (live, None)));
            }
            live.next_change().await?;
            Some((Ok(Event::default().event("changed").data("{}")), (live, None)))
        })
    }

    /// Waits for the next change to announce, at least [`CHANGED_GAP`] after the last; `None`
    /// when the stream should end.
    async fn next_change(&mut self) -> Option<()> {
        let ends_at = self.ends_at;
        let expired = async move {
            match ends_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(expired);
        tokio::select! {
            changed = self.changes.changed() => changed.ok()?,
            _ = &mut expired => return None,
            _ = self.state.shutdown.cancelled() => return None,
        }
        if let Some(last) = self.last_sent {
            // Changes during the gap are taken into this one event.
            tokio::select! {
                _ = tokio::time::sleep_until(last + CHANGED_GAP) => {}
                _ = &mut expired => return None,
                _ = self.state.shutdown.cancelled() => return None,
            }
        }
        self.changes.mark_unchanged();
        self.last_sent = Some(Instant::now());
        Some(())
    }
}
