//! One local client, from its first line to its hanging up: the peer's user checked, each
//! request line read under a deadline and a length bound, bad lines answered with an error
//! that says what a request looks like, and `wait` and `watch` answered from the followed
//! inbox's view. Nothing a client sends can stop the daemon: every failure ends this client
//! only.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use inbox_client::local_daemon::InboxView;
use inbox_client::local_daemon::protocol::{
    self, Answer, ErrorCode, LineError, PROTOCOL_VERSION, Request, RequestError, Status,
};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::watch;
use tokio::time::Instant;

use super::identities::{Followed, Identities};

/// How long a client may take to send its request after connecting (or after an answer).
pub const REQUEST_WAIT: Duration = Duration::from_secs(10);

/// Bad lines a client may send before it is hung up on.
const BAD_LINES_MAX: u32 = 3;

/// How long one answer line may take to leave: a client that stops reading is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// The budget for a wait's first answer: the view made live and a positive count confirmed.
/// Below the clients' [`inbox_client::local_daemon::ANSWER_TIMEOUT`], so they hear "stale"
/// rather than nothing.
const SETTLE_BUDGET: Duration = Duration::from_millis(1500);

/// How long a view may stay stale (a stream reconnecting) before waiters and watchers are told
/// to ask the service themselves.
const STALE_GRACE: Duration = Duration::from_secs(2);

/// What the daemon shares with every client.
#[derive(Debug)]
pub struct Shared {
    pub identities: Identities,
    pub uid: u32,
    pub socket: String,
    pub listener: &'static str,
    pub clients: watch::Sender<usize>,
    pub waits_answered: AtomicU64,
}

impl Shared {
    fn status(&self) -> Status {
        Status {
            pid: std::process::id(),
            socket: self.socket.clone(),
            listener: self.listener.to_owned(),
            clients: *self.clients.borrow(),
            waits_answered: self.waits_answered.load(Ordering::Acquire),
            identities: self.identities.statuses(),
        }
    }
}

/// Serves one client until it hangs up, misbehaves, or its `watch` ends.
pub async fn serve(stream: UnixStream, shared: Arc<Shared>) {
    let refused = super::peer::check(&stream, shared.uid);
    let (read, write) = stream.into_split();
    let mut client = Client { read: BufReader::new(read), write, shared };
    if let Err(message) = refused {
        tracing::warn!(reason = %message, "refused a local client of another user");
        let _ = client.send(&error(ErrorCode::PeerRefused, message)).await;
        linger(client.read.get_mut(), &mut client.write).await;
        return;
    }
    let mut bad_lines = 0;
    loop {
        let line = match tokio::time::timeout(REQUEST_WAIT, protocol::read_line(&mut client.read)).await {
            Err(_) => {
                let message = format!(
                    "no request within {} s of connecting; send one JSON line such as {{\"v\":{PROTOCOL_VERSION},\"op\":\"status\"}}",
                    REQUEST_WAIT.as_secs()
                );
                let _ = client.send(&error(ErrorCode::IdleTimeout, message)).await;
                return;
            }
            Ok(Err(LineError::TooLong)) => {
                let message = format!(
                    "a request line is at most {} bytes; this one was longer, and the connection is closed",
                    protocol::LINE_BYTES_MAX
                );
                let _ = client.send(&error(ErrorCode::LineTooLong, message)).await;
                return;
            }
            Ok(Err(LineError::Io(_)) | Ok(None)) => return,
            Ok(Ok(Some(line))) => line,
        };
        let request = match protocol::parse_request(&line) {
            Ok(request) => request,
            Err(err) => {
                bad_lines += 1;
                if client.send(&err.into_answer()).await.is_err() || bad_lines >= BAD_LINES_MAX {
                    return;
                }
                continue;
            }
        };
        let go_on = match request {
            Request::Status {} => {
                let status = client.shared.status();
                client.send(&Answer::Status(status)).await.is_ok()
            }
            Request::Wait { identity, timeout_ms } => match client.shared.identities.find(&identity) {
                Ok(followed) => client.wait(&followed, Duration::from_millis(timeout_ms)).await,
                Err(err) => client.send(&err.into_answer()).await.is_ok(),
            },
            Request::Watch { identity } => {
                match client.shared.identities.find(&identity) {
                    Ok(followed) => client.watch(&followed).await,
                    Err(err) => drop(client.send(&err.into_answer()).await),
                }
                false
            }
        };
        if !go_on {
            return;
        }
    }
}

struct Client {
    read: BufReader<OwnedReadHalf>,
    write: OwnedWriteHalf,
    shared: Arc<Shared>,
}

impl Client {
    async fn send(&mut self, answer: &Answer) -> std::io::Result<()> {
        let line = protocol::answer_line(answer);
        match tokio::time::timeout(WRITE_TIMEOUT, self.write.write_all(line.as_bytes())).await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the client stopped reading")),
        }
    }

    /// Completes when the client hangs up, or sends while it should be listening (one
    /// request at a time), which ends it too.
    async fn gone(&mut self) {
        let _ = self.read.fill_buf().await;
    }

    /// Answers a wait; returns whether the client may send another request.
    async fn wait(&mut self, followed: &Followed, timeout: Duration) -> bool {
        let _waiting = followed.waiters.enter();
        let deadline = Instant::now().checked_add(timeout).unwrap_or_else(far_future);
        let mut view = followed.follower.view();
        let Ok(settled) = tokio::time::timeout(SETTLE_BUDGET, settle(followed, &mut view)).await else {
            // Not live in time, or a count it could not confirm: never an unconfirmed answer.
            let current = view.borrow().clone();
            let refusal =
                unusable(&current).unwrap_or_else(|| stale("the daemon could not read the inbox in time"));
            return self.send(&refusal).await.is_ok();
        };
        if let Some(refusal) = unusable(&settled) {
            return self.send(&refusal).await.is_ok();
        }
        if settled.claimable > 0 {
            return self
                .answered(Answer::Work { claimable: settled.claimable, head_seq: settled.head_seq })
                .await;
        }
        if self.send(&Answer::Waiting { head_seq: settled.head_seq }).await.is_err() {
            return false;
        }
        let mut stale_since = None;
        loop {
            let current = view.borrow_and_update().clone();
            if current.refused {
                return self.send(&unusable(&current).expect("refused")).await.is_ok();
            }
            if current.fresh {
                stale_since = None;
                if current.claimable > 0 {
                    let work = Answer::Work { claimable: current.claimable, head_seq: current.head_seq };
                    return self.answered(work).await;
                }
            } else {
                stale_since.get_or_insert_with(Instant::now);
            }
            let stale_deadline = stale_since.map(|since| since + STALE_GRACE).unwrap_or_else(far_future);
            tokio::select! {
                changed = view.changed() => if changed.is_err() {
                    return self.send(&stale("the daemon stopped following this inbox")).await.is_ok();
                },
                _ = tokio::time::sleep_until(deadline) => {
                    return self.answered(Answer::Timeout { head_seq: current.head_seq }).await;
                }
                _ = tokio::time::sleep_until(stale_deadline) => {
                    return self.send(&unusable(&current).unwrap_or_else(|| stale("the daemon lost its stream"))).await.is_ok();
                }
                _ = self.gone() => return false,
            }
        }
    }

    async fn answered(&mut self, answer: Answer) -> bool {
        self.shared.waits_answered.fetch_add(1, Ordering::AcqRel);
        self.send(&answer).await.is_ok()
    }

    /// Tells of each new head (or new claimable work at the same head) until the client
    /// hangs up or the view stays stale.
    async fn watch(&mut self, followed: &Followed) {
        let _watching = followed.watchers.enter();
        let mut view = followed.follower.view();
        let first = view.borrow_and_update().clone();
        if self.send(&Answer::Watching { head_seq: first.head_seq }).await.is_err() {
            return;
        }
        let mut last = (first.head_seq, first.claimable);
        let mut stale_since = (!first.fresh).then(Instant::now);
        loop {
            let stale_deadline = stale_since.map(|since| since + STALE_GRACE).unwrap_or_else(far_future);
            tokio::select! {
                changed = view.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep_until(stale_deadline) => {
                    let current = view.borrow().clone();
                    let _ = self.send(&unusable(&current).unwrap_or_else(|| stale("the daemon lost its stream"))).await;
                    return;
                }
                _ = self.gone() => return,
            }
            let current = view.borrow_and_update().clone();
            if current.refused {
                let _ = self.send(&unusable(&current).expect("refused")).await;
                return;
            }
            if current.fresh {
                stale_since = None;
            } else {
                stale_since.get_or_insert_with(Instant::now);
            }
            let news =
                current.head_seq > last.0 || (current.head_seq == last.0 && current.claimable > last.1);
            if news
                && self
                    .send(&Answer::Hint { head_seq: current.head_seq, claimable: current.claimable })
                    .await
                    .is_err()
            {
                return;
            }
            last = (last.0.max(current.head_seq), current.claimable);
        }
    }
}

/// Waits until the view is live and, when it shows work, until a read made after this
/// request confirms it (the work may have been claimed since, which no hint tells).
async fn settle(followed: &Followed, view: &mut watch::Receiver<InboxView>) -> InboxView {
    let current = wait_for(view, |v| v.fresh || v.refused).await;
    if current.refused || current.claimable == 0 {
        return current;
    }
    let ticket = followed.follower.check_now();
    wait_for(view, |v| v.covers >= ticket).await
}

async fn wait_for(view: &mut watch::Receiver<InboxView>, done: impl Fn(&InboxView) -> bool) -> InboxView {
    loop {
        let current = view.borrow_and_update().clone();
        if done(&current) || view.changed().await.is_err() {
            return current;
        }
    }
}

/// The refusal for a view that cannot answer: refused by the service, or not live.
fn unusable(view: &InboxView) -> Option<Answer> {
    if view.refused {
        let why = view.error.as_deref().unwrap_or("refused");
        return Some(error(ErrorCode::ServiceRefused, format!("the service refused the daemon: {why}")));
    }
    (!view.fresh).then(|| {
        stale(&match (&view.error, view.connected) {
            (Some(err), _) => format!("the daemon cannot read the inbox now ({err})"),
            (None, false) => format!("the daemon's {} connection is not up", view.transport.as_str()),
            (None, true) => "the daemon has not read the inbox since it reconnected".to_owned(),
        })
    })
}

fn stale(why: &str) -> Answer {
    error(ErrorCode::Stale, format!("{why}; ask the service directly"))
}

fn error(code: ErrorCode, message: String) -> Answer {
    RequestError { code, message }.into_answer()
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 86_400)
}

/// Tells a client over the limit so, and hangs up.
pub async fn refuse_busy(stream: UnixStream, clients_max: usize) {
    let (mut read, mut write) = stream.into_split();
    let line = protocol::answer_line(&error(
        ErrorCode::TooManyClients,
        format!("the daemon serves {clients_max} local clients at once; ask the service directly"),
    ));
    if let Ok(Ok(())) = tokio::time::timeout(WRITE_TIMEOUT, write.write_all(line.as_bytes())).await {
        linger(&mut read, &mut write).await;
    }
}

/// How long a client refused at once may take to send its request, which is read and dropped.
const LINGER: Duration = Duration::from_millis(500);

/// After a refusal made before the client's request was read (another user, too many
/// clients): shuts this side for writing, so the client reads the refusal and then the end,
/// and reads what the client sends (at most a line's worth, for at most [`LINGER`]) before
/// hanging up. Hung up on at once, a client that sends its request a moment after connecting
/// would run into a closed socket (EPIPE) before it reads the answer waiting for it, and a
/// client that cannot read after a failed write (Node's sockets, asyncio's streams) would never
/// learn why.
async fn linger(read: &mut OwnedReadHalf, write: &mut OwnedWriteHalf) {
    use tokio::io::AsyncReadExt as _;
    let _ = write.shutdown().await;
    let mut buffer = [0u8; 1024];
    let mut left = protocol::LINE_BYTES_MAX;
    let _ = tokio::time::timeout(LINGER, async {
        while left > 0 {
            match read.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}
