//! The local wake daemon's wire format: JSON lines over a Unix domain socket, each line one
//! object carrying the protocol version `v`. Pure (no I/O besides the bounded line reader), so
//! every request and answer shape is tested here, and the daemon and its clients share one
//! definition.
//!
//! A client sends a request line; the daemon answers with one or more lines:
//!
//! | request | answers |
//! |---|---|
//! | `{"v":1,"op":"status"}` | `status` |
//! | `{"v":1,"op":"wait","identity":{...},"timeout_ms":N}` | `waiting`, then `work` or `timeout`; or `work` at once |
//! | `{"v":1,"op":"watch","identity":{...}}` | `watching`, then one `hint` per new head (or new claimable work) |
//!
//! Any request can instead be answered `{"v":1,"type":"error","code":...,"message":...}`; a
//! client treats every error as "ask the service yourself".

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _};

/// The version this build speaks. A request naming another is refused with
/// [`ErrorCode::UnsupportedVersion`], never guessed at.
pub const PROTOCOL_VERSION: u32 = 1;

/// Longest line either side accepts, newline included. Requests are a few hundred bytes; a
/// longer line is a bug or an attack, and is refused before it is buffered.
pub const LINE_BYTES_MAX: usize = 4096;

/// Who a client is asking about: the login profile by name, with what the client's copy of it
/// says, so a daemon reading another configuration directory (where `default` may be someone
/// else) refuses instead of answering for the wrong inbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    pub profile: String,
    pub server_url: String,
    pub tenant_id: String,
    pub agent_id: String,
}

/// One request line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// What the daemon serves and how it is doing. (A struct variant, so unknown fields are
    /// refused as for the others.)
    Status {},
    /// Answer once claimable work waits for `identity`, or after `timeout_ms` with none.
    Wait { identity: Identity, timeout_ms: u64 },
    /// Tell of every new head of `identity` until the client hangs up.
    Watch { identity: Identity },
}

/// Why the daemon refused; stable strings a script may match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The line is not a request of this protocol.
    BadRequest,
    /// The line was longer than [`LINE_BYTES_MAX`]; the connection is closed.
    LineTooLong,
    /// The request names a protocol version this daemon does not speak.
    UnsupportedVersion,
    /// The peer runs as another user.
    PeerRefused,
    /// The daemon serves no such profile (none in its configuration directory, or not one it
    /// was told to serve).
    UnknownProfile,
    /// The daemon's profile of that name is another identity than the client's.
    IdentityMismatch,
    /// The daemon's view of the inbox is not live (its stream is down, or not yet up): ask the
    /// service directly.
    Stale,
    /// The service refused the daemon (credentials spent or revoked, say).
    ServiceRefused,
    /// The daemon has as many clients as it takes.
    TooManyClients,
    /// No request arrived in time after connecting.
    IdleTimeout,
}

/// One answer line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Answer {
    Status(Status),
    /// The wait is registered; `work` or `timeout` follows.
    Waiting {
        head_seq: u64,
    },
    /// Claimable events wait (at most 100 counted, as a direct `wait` counts them).
    Work {
        claimable: usize,
        head_seq: u64,
    },
    Timeout {
        head_seq: u64,
    },
    /// The watch is registered; `hint` lines follow.
    Watching {
        head_seq: u64,
    },
    /// The head moved, or claimable work appeared at the same head (an operator's requeue).
    Hint {
        head_seq: u64,
        claimable: usize,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
}

/// The `status` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub pid: u32,
    pub socket: String,
    /// `inherited` (socket activation) or `bound` (the daemon made the socket itself).
    pub listener: String,
    /// Local clients connected now.
    pub clients: usize,
    /// Waits answered `work` or `timeout` since the daemon started.
    pub waits_answered: u64,
    pub identities: Vec<IdentityStatus>,
}

/// One identity the daemon follows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdentityStatus {
    pub profile: String,
    pub server_url: String,
    pub tenant_id: String,
    pub agent_id: String,
    pub head_seq: u64,
    pub claimable: usize,
    /// `sse`, `long-poll` or `poll`.
    pub transport: String,
    /// Hints are arriving and the counts were read since they started.
    pub fresh: bool,
    pub waiters: usize,
    pub watchers: usize,
    /// The last failure reading the inbox, if the last attempt failed.
    pub error: Option<String>,
}

/// A line that is not a request this daemon takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    pub code: ErrorCode,
    pub message: String,
}

impl RequestError {
    fn bad(message: impl Into<String>) -> RequestError {
        RequestError { code: ErrorCode::BadRequest, message: message.into() }
    }

    pub fn into_answer(self) -> Answer {
        Answer::Error { code: self.code, message: self.message }
    }
}

/// Parses one request line (without its newline).
pub fn parse_request(line: &[u8]) -> Result<Request, RequestError> {
    let text =
        std::str::from_utf8(line).map_err(|_| RequestError::bad("a request is one line of UTF-8 JSON"))?;
    let value: serde_json::Value = serde_json::from_str(text).map_err(|err| {
        RequestError::bad(format!(
            "a request is one JSON object per line, such as {{\"v\":{PROTOCOL_VERSION},\"op\":\"status\"}} ({err})"
        ))
    })?;
    let serde_json::Value::Object(mut object) = value else {
        return Err(RequestError::bad("a request is a JSON object"));
    };
    match object.remove("v") {
        Some(serde_json::Value::Number(n)) if n.as_u64() == Some(u64::from(PROTOCOL_VERSION)) => {}
        Some(serde_json::Value::Number(n)) => {
            return Err(RequestError {
                code: ErrorCode::UnsupportedVersion,
                message: format!("this daemon speaks protocol version {PROTOCOL_VERSION}, not {n}"),
            });
        }
        _ => {
            return Err(RequestError::bad(format!(
                "a request names its protocol version: \"v\": {PROTOCOL_VERSION}"
            )));
        }
    }
    serde_json::from_value(serde_json::Value::Object(object))
        .map_err(|err| RequestError::bad(format!("not a request (\"op\" is status, wait or watch): {err}")))
}

/// One request as its line, newline included.
pub fn request_line(request: &Request) -> String {
    versioned_line(request)
}

/// One answer as its line, newline included.
pub fn answer_line(answer: &Answer) -> String {
    versioned_line(answer)
}

/// Parses one answer line. Another version, or an answer this build does not know, is an
/// error: the client then asks the service itself.
pub fn parse_answer(line: &[u8]) -> Result<Answer, String> {
    let mut object: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(line)
        .map_err(|err| format!("the daemon sent a line that is not JSON: {err}"))?;
    match object.remove("v").and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(PROTOCOL_VERSION) => {}
        other => return Err(format!("the daemon speaks protocol version {other:?}, not {PROTOCOL_VERSION}")),
    }
    serde_json::from_value(serde_json::Value::Object(object))
        .map_err(|err| format!("the daemon sent an answer this client does not know: {err}"))
}

fn versioned_line(value: &impl Serialize) -> String {
    let body = serde_json::to_string(value).expect("protocol types serialize");
    let fields = body.strip_prefix('{').expect("requests and answers are JSON objects");
    // `v` first, for a person reading the socket.
    match fields {
        "}" => format!("{{\"v\":{PROTOCOL_VERSION}}}\n"),
        fields => format!("{{\"v\":{PROTOCOL_VERSION},{fields}\n"),
    }
}

/// How reading a line ended badly.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("a line longer than {LINE_BYTES_MAX} bytes")]
    TooLong,
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Reads one line, without its newline, buffering at most [`LINE_BYTES_MAX`] bytes. `None` at
/// a clean end of input; bytes after the last newline when the peer stops mid-line are
/// returned as a last line.
pub async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R) -> Result<Option<Vec<u8>>, LineError> {
    let mut line = Vec::new();
    loop {
        let buffer = reader.fill_buf().await?;
        if buffer.is_empty() {
            return Ok((!line.is_empty()).then_some(line));
        }
        let (taken, done) = match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => (at + 1, true),
            None => (buffer.len(), false),
        };
        if line.len() + taken > LINE_BYTES_MAX {
            return Err(LineError::TooLong);
        }
        line.extend_from_slice(&buffer[..taken]);
        reader.consume(taken);
        if done {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Some(line));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> Identity {
        Identity {
            profile: "default".into(),
            server_url: "http://127.0.0.1:8080".into(),
            tenant_id: "t1".into(),
            agent_id: "agent_alpha".into(),
        }
    }

    #[test]
    fn requests_round_trip_through_their_lines() {
        for request in [
            Request::Status {},
            Request::Wait { identity: identity(), timeout_ms: 60_000 },
            Request::Watch { identity: identity() },
        ] {
            let line = request_line(&request);
            assert!(line.starts_with("{\"v\":1,\"op\":") && line.ends_with("}\n"), "{line}");
            assert_eq!(line.matches('\n').count(), 1);
            assert_eq!(parse_request(line.trim_end().as_bytes()).unwrap(), request);
        }
        assert_eq!(
            parse_request(br#"{"op":"status","v":1}"#).unwrap(),
            Request::Status {},
            "any field order"
        );
    }

    #[test]
    fn answers_round_trip_through_their_lines() {
        let answers = [
            Answer::Waiting { head_seq: 3 },
            Answer::Work { claimable: 2, head_seq: 5 },
            Answer::Timeout { head_seq: 5 },
            Answer::Watching { head_seq: 0 },
            Answer::Hint { head_seq: 9, claimable: 1 },
            Answer::Error { code: ErrorCode::Stale, message: "the stream is down".into() },
        ];
        for answer in answers {
            let line = answer_line(&answer);
            assert!(line.starts_with("{\"v\":1,\"type\":"), "{line}");
            assert_eq!(parse_answer(line.trim_end().as_bytes()).unwrap(), answer);
        }
        assert_eq!(
            answer_line(&Answer::Error { code: ErrorCode::PeerRefused, message: "no".into() }),
            "{\"v\":1,\"type\":\"error\",\"code\":\"peer_refused\",\"message\":\"no\"}\n"
        );
    }

    #[test]
    fn bad_lines_get_an_error_that_says_what_a_request_looks_like() {
        let cases: [(&[u8], ErrorCode, &str); 8] = [
            (b"hello", ErrorCode::BadRequest, "one JSON object per line"),
            (b"\xff\xfe", ErrorCode::BadRequest, "UTF-8"),
            (b"[1,2]", ErrorCode::BadRequest, "a JSON object"),
            (br#"{"op":"status"}"#, ErrorCode::BadRequest, "\"v\": 1"),
            (br#"{"v":"1","op":"status"}"#, ErrorCode::BadRequest, "\"v\": 1"),
            (br#"{"v":2,"op":"status"}"#, ErrorCode::UnsupportedVersion, "version 1, not 2"),
            (br#"{"v":1,"op":"claim"}"#, ErrorCode::BadRequest, "status, wait or watch"),
            (br#"{"v":1,"op":"status","extra":true}"#, ErrorCode::BadRequest, "extra"),
        ];
        for (line, code, says) in cases {
            let err = parse_request(line).unwrap_err();
            assert_eq!(err.code, code, "{}", String::from_utf8_lossy(line));
            assert!(err.message.contains(says), "{}: {}", String::from_utf8_lossy(line), err.message);
        }
        let missing = parse_request(br#"{"v":1,"op":"wait","identity":{"profile":"p"}}"#).unwrap_err();
        assert!(missing.message.contains("missing field"), "{}", missing.message);
    }

    #[test]
    fn answers_of_another_version_or_kind_are_refused() {
        assert!(parse_answer(br#"{"v":2,"type":"timeout","head_seq":1}"#).unwrap_err().contains("version"));
        assert!(parse_answer(br#"{"v":1,"type":"teleport"}"#).unwrap_err().contains("does not know"));
        assert!(parse_answer(b"garbage").unwrap_err().contains("not JSON"));
    }

    #[tokio::test]
    async fn lines_are_read_whole_bounded_and_through_odd_chunking() {
        let input: &[u8] = b"{\"a\":1}\r\n\n{\"b\":2}\npartial";
        // A reader with a 3-byte buffer splits every line across reads.
        let mut reader = tokio::io::BufReader::with_capacity(3, input);
        assert_eq!(read_line(&mut reader).await.unwrap().unwrap(), b"{\"a\":1}");
        assert_eq!(read_line(&mut reader).await.unwrap().unwrap(), b"");
        assert_eq!(read_line(&mut reader).await.unwrap().unwrap(), b"{\"b\":2}");
        assert_eq!(read_line(&mut reader).await.unwrap().unwrap(), b"partial", "a last line without newline");
        assert!(read_line(&mut reader).await.unwrap().is_none());

        let mut fits = vec![b'x'; LINE_BYTES_MAX - 1];
        fits.push(b'\n');
        let mut reader = tokio::io::BufReader::new(fits.as_slice());
        assert_eq!(read_line(&mut reader).await.unwrap().unwrap().len(), LINE_BYTES_MAX - 1);
        let huge = vec![b'x'; 10 * LINE_BYTES_MAX];
        let mut reader = tokio::io::BufReader::new(huge.as_slice());
        assert!(matches!(read_line(&mut reader).await, Err(LineError::TooLong)));
    }
}
