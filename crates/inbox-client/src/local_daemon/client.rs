//! Asking the local wake daemon: connect to its socket, send one request line, read its
//! answers, each step under a deadline so a hung or half-dead daemon costs a moment, not the
//! wait. Every failure is a [`DaemonError`], which callers treat as "ask the service yourself".

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncWriteExt as _, BufReader};

use super::protocol::{self, Answer, ErrorCode, Identity, Request, Status};
use crate::profile::Home;

/// How long connecting, and the daemon's first answer, may take. The daemon answers at once
/// (it never asks the service before its first line), so this is generous.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// After a wait's own timeout, how long its last answer may still take.
const FINAL_ANSWER_GRACE: Duration = Duration::from_secs(2);

/// The daemon at a socket path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalDaemon {
    path: PathBuf,
}

/// Why the daemon could not answer.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Nothing listens at the socket (no daemon, a dead one, or a removed socket).
    #[error("no local daemon answers at {path}: {source}")]
    Absent { path: PathBuf, source: io::Error },
    /// The daemon answered with an error.
    #[error("the local daemon refused: {message} ({code})", code = code_name(*.code))]
    Refused { code: ErrorCode, message: String },
    /// The daemon broke the protocol, went silent or hung up.
    #[error("the local daemon broke off: {0}")]
    Broken(String),
}

/// A wait's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonWait {
    Work { claimable: usize, head_seq: u64 },
    Timeout,
}

/// One new head (or new claimable work at the same head).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hint {
    pub head_seq: u64,
    pub claimable: usize,
}

impl LocalDaemon {
    pub fn at(path: impl Into<PathBuf>) -> LocalDaemon {
        LocalDaemon { path: path.into() }
    }

    /// The daemon at the socket path this environment names ([`super::socket_path`]).
    pub fn from_env(home: &Home) -> LocalDaemon {
        LocalDaemon::at(super::socket_path(home))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the daemon serves, and how it is doing.
    pub async fn status(&self) -> Result<Status, DaemonError> {
        let mut connection = self.send(&Request::Status {}).await?;
        match connection.answer(ANSWER_TIMEOUT).await? {
            Answer::Status(status) => Ok(status),
            other => Err(unexpected(&other)),
        }
    }

    /// Waits through the daemon until claimable work exists for `identity`, or `timeout`
    /// passes.
    pub async fn wait(&self, identity: &Identity, timeout: Duration) -> Result<DaemonWait, DaemonError> {
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let mut connection = self.send(&Request::Wait { identity: identity.clone(), timeout_ms }).await?;
        let mut answer = connection.answer(ANSWER_TIMEOUT).await?;
        if let Answer::Waiting { .. } = answer {
            answer = connection.answer(timeout.saturating_add(FINAL_ANSWER_GRACE)).await?;
        }
        match answer {
            Answer::Work { claimable, head_seq } => Ok(DaemonWait::Work { claimable, head_seq }),
            Answer::Timeout { .. } => Ok(DaemonWait::Timeout),
            other => Err(unexpected(&other)),
        }
    }

    /// Starts watching `identity`'s head; returns the watch and the head as the daemon knows
    /// it now.
    pub async fn watch(&self, identity: &Identity) -> Result<(DaemonWatch, u64), DaemonError> {
        let mut connection = self.send(&Request::Watch { identity: identity.clone() }).await?;
        match connection.answer(ANSWER_TIMEOUT).await? {
            Answer::Watching { head_seq } => Ok((DaemonWatch { connection }, head_seq)),
            other => Err(unexpected(&other)),
        }
    }

    async fn send(&self, request: &Request) -> Result<Connection, DaemonError> {
        send_on(connect(&self.path).await?, request).await
    }
}

/// Sends `request` on a connected socket. A daemon that refuses at once (a peer of another
/// user, one client too many) writes its answer and hangs up without reading, so the write
/// may fail (EPIPE) with that answer already waiting: it is read, within
/// [`REFUSAL_READ_TIMEOUT`], and the refusal named, rather than a broken pipe.
async fn send_on(socket: Socket, request: &Request) -> Result<Connection, DaemonError> {
    let (read, mut write) = tokio::io::split(socket);
    let line = protocol::request_line(request);
    let failure = match tokio::time::timeout(ANSWER_TIMEOUT, write.write_all(line.as_bytes())).await {
        Ok(Ok(())) => return Ok(Connection { read: BufReader::new(read), _write: write }),
        Ok(Err(err)) => format!("cannot send the request: {err}"),
        Err(_) => "the daemon does not read its socket".to_owned(),
    };
    let mut connection = Connection { read: BufReader::new(read), _write: write };
    match connection.answer(REFUSAL_READ_TIMEOUT).await {
        Err(refused @ DaemonError::Refused { .. }) => Err(refused),
        _ => Err(DaemonError::Broken(failure)),
    }
}

/// How long a request that could not be sent waits for the answer the daemon may have sent
/// before hanging up. Such an answer is written before the hang-up the write ran into, so it
/// is already there; the bound is for a daemon that stopped reading but not writing.
const REFUSAL_READ_TIMEOUT: Duration = Duration::from_millis(200);

/// A running watch; dropping it hangs up.
#[derive(Debug)]
pub struct DaemonWatch {
    connection: Connection,
}

impl DaemonWatch {
    /// The next hint. Waits as long as it takes: the daemon says nothing while nothing
    /// happens, and its going away ends the watch with an error.
    pub async fn next(&mut self) -> Result<Hint, DaemonError> {
        match self.connection.answer(Duration::MAX).await? {
            Answer::Hint { head_seq, claimable } => Ok(Hint { head_seq, claimable }),
            other => Err(unexpected(&other)),
        }
    }
}

#[cfg(unix)]
type Socket = tokio::net::UnixStream;
/// Never made: without Unix domain sockets there is no daemon to reach (see `connect`).
#[cfg(not(unix))]
type Socket = tokio::io::DuplexStream;

#[derive(Debug)]
struct Connection {
    read: BufReader<tokio::io::ReadHalf<Socket>>,
    /// Kept open: a closed write half tells the daemon the client left.
    _write: tokio::io::WriteHalf<Socket>,
}

impl Connection {
    /// The next answer line; an `error` line becomes [`DaemonError::Refused`].
    async fn answer(&mut self, within: Duration) -> Result<Answer, DaemonError> {
        let line = match tokio::time::timeout(within, protocol::read_line(&mut self.read)).await {
            Err(_) => return Err(DaemonError::Broken(format!("no answer within {within:?}"))),
            Ok(Err(err)) => return Err(DaemonError::Broken(format!("cannot read the answer: {err}"))),
            Ok(Ok(None)) => return Err(DaemonError::Broken("the daemon hung up".to_owned())),
            Ok(Ok(Some(line))) => line,
        };
        match protocol::parse_answer(&line).map_err(DaemonError::Broken)? {
            Answer::Error { code, message } => Err(DaemonError::Refused { code, message }),
            answer => Ok(answer),
        }
    }
}

#[cfg(unix)]
async fn connect(path: &Path) -> Result<Socket, DaemonError> {
    let absent = |source| DaemonError::Absent { path: path.to_owned(), source };
    match tokio::time::timeout(ANSWER_TIMEOUT, tokio::net::UnixStream::connect(path)).await {
        Ok(Ok(socket)) => Ok(socket),
        Ok(Err(err)) => Err(absent(err)),
        Err(_) => Err(absent(io::Error::new(io::ErrorKind::TimedOut, "connecting timed out"))),
    }
}

#[cfg(not(unix))]
async fn connect(path: &Path) -> Result<Socket, DaemonError> {
    Err(DaemonError::Absent {
        path: path.to_owned(),
        source: io::Error::new(io::ErrorKind::Unsupported, "the local wake daemon needs Unix domain sockets"),
    })
}

fn unexpected(answer: &Answer) -> DaemonError {
    DaemonError::Broken(format!("an answer out of place: {}", protocol::answer_line(answer).trim_end()))
}

fn code_name(code: ErrorCode) -> String {
    serde_json::to_value(code).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

#[cfg(all(test, unix))]
mod tests {
    use tokio::io::AsyncWriteExt as _;

    use super::*;

    /// A daemon that refuses at once (another user, too many clients) writes its answer and
    /// closes without reading: the request's write then fails (EPIPE), and the refusal is
    /// still named, not lost to the broken pipe.
    #[tokio::test]
    async fn a_refusal_sent_before_the_request_is_read_is_named() {
        for code in [ErrorCode::PeerRefused, ErrorCode::TooManyClients] {
            let (client, mut daemon) = tokio::net::UnixStream::pair().unwrap();
            let refusal = Answer::Error { code, message: "not for you".into() };
            daemon.write_all(protocol::answer_line(&refusal).as_bytes()).await.unwrap();
            drop(daemon);
            let err = send_on(client, &Request::Status {}).await.unwrap_err();
            match err {
                DaemonError::Refused { code: got, message } => {
                    assert_eq!((got, message.as_str()), (code, "not for you"));
                }
                other => panic!("{code:?} lost: {other}"),
            }
        }
    }

    /// A daemon that closes without a word is still reported as breaking off, at once.
    #[tokio::test]
    async fn a_hang_up_without_an_answer_is_a_broken_pipe() {
        let (client, daemon) = tokio::net::UnixStream::pair().unwrap();
        drop(daemon);
        let started = std::time::Instant::now();
        let err = send_on(client, &Request::Status {}).await.unwrap_err();
        assert!(matches!(&err, DaemonError::Broken(why) if why.contains("cannot send the request")), "{err}");
        assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
    }
}
