//! A front for Server-Sent Events over plain HTTP/1.1, the way most agents stay connected for
//! hours. hyper keeps two 8 KiB buffers per HTTP/1.1 connection for its whole life (the one the
//! request head was read into and the one the response head was written from); on a connection
//! that carries one long response of tiny frames they are most of what an idle stream costs.
//!
//! So the plain-TCP listener looks at the request line of each new connection without taking
//! it off the socket (`peek`). A `GET` of an SSE route over HTTP/1.1 is read and answered here,
//! through the same router (authentication, limits, logs and problems are the same), its frames
//! written as chunks straight from the stream, and the connection closed when the stream ends.
//! Every other connection — other routes, HTTP/2, a keep-alive client whose stream is not its
//! first request, HTTPS (the TLS listener) — goes to hyper untouched. A stream here costs its
//! socket, its task and its subscription: see the benchmark `inbox-bench streams`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderName, HeaderValue, Method, Request, StatusCode, Uri, Version, header};
use futures_util::StreamExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tower::Service as _;

use crate::http::stall::accept;
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// The longest request line looked at, and the longest request head read.
const REQUEST_LINE_BYTES_MAX: usize = 2 * 1024;
const HEAD_BYTES_MAX: usize = 16 * 1024;
/// How long a new connection may take to send its request line (then hyper takes it, with its
/// own header timeout) and its head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections accepted but not yet taken by hyper.
const HANDOFF_MAX: usize = 1_024;
/// The largest non-stream answer (a refusal) written here.
const ANSWER_BYTES_MAX: usize = 64 * 1024;

/// A plain-TCP listener that serves SSE requests itself and hands every other connection to
/// hyper (through [`axum::serve::Listener`]).
#[derive(Debug)]
pub struct SseFront {
    handoff: mpsc::Receiver<(TcpStream, SocketAddr)>,
    local_addr: SocketAddr,
}

impl SseFront {
    /// Accepts on `tcp` until `shutdown`; SSE requests go to `router`, answered here; a write
    /// that stays blocked for `stall_limit` ends the stream (as `http/stall.rs` does for
    /// hyper's connections), and `stall_limit` is every socket's TCP user timeout.
    pub fn start(
        tcp: TcpListener,
        router: Router,
        stall_limit: Duration,
        metrics: Arc<Metrics>,
        shutdown: Shutdown,
    ) -> std::io::Result<Self> {
        let local_addr = tcp.local_addr()?;
        let (sender, handoff) = mpsc::channel(HANDOFF_MAX);
        let front = Front { router, stall_limit, metrics };
        tokio::spawn(accept_loop(tcp, front, sender, shutdown));
        Ok(SseFront { handoff, local_addr })
    }
}

impl axum::serve::Listener for SseFront {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.handoff.recv().await {
            Some(accepted) => accepted,
            // The accept loop ends only at shutdown, after axum stopped accepting.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}

/// What serving a stream here needs.
#[derive(Debug, Clone)]
struct Front {
    router: Router,
    stall_limit: Duration,
    metrics: Arc<Metrics>,
}

async fn accept_loop(
    tcp: TcpListener,
    front: Front,
    handoff: mpsc::Sender<(TcpStream, SocketAddr)>,
    shutdown: Shutdown,
) {
    while let Some((stream, peer)) = accept(&tcp, front.stall_limit, &shutdown).await {
        let (front, handoff) = (front.clone(), handoff.clone());
        tokio::spawn(async move {
            // Boxed, as every short phase of a connection here: its buffers are freed when it
            // ends instead of sizing the task of a stream that may last for hours.
            match Box::pin(tokio::time::timeout(HEAD_TIMEOUT, asks_for_sse(&stream))).await {
                Ok(Ok(true)) => serve(stream, peer, front).await,
                Ok(Err(_)) => {}
                Ok(Ok(false)) | Err(_) => {
                    let _ = handoff.send((stream, peer)).await;
                }
            }
        });
    }
}

/// Whether the connection's first request line is `GET <an SSE route> HTTP/1.1`; reads nothing
/// off the socket.
async fn asks_for_sse(stream: &TcpStream) -> std::io::Result<bool> {
    let mut line = [0u8; REQUEST_LINE_BYTES_MAX];
    loop {
        let n = stream.peek(&mut line).await?;
        if n == 0 {
            return Ok(false);
        }
        if let Some(end) = line[..n].windows(2).position(|pair| pair == b"\r\n") {
            return Ok(is_sse_request_line(&line[..end]));
        }
        if n == line.len() {
            return Ok(false);
        }
        // The line came in pieces (rare): give the rest a moment instead of peeking in a loop.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `GET /v1/streams/sse[?..] HTTP/1.1` or seed 000's `GET /api/v1/agents/{id}/subscribe[?..]
/// HTTP/1.1`.
fn is_sse_request_line(line: &[u8]) -> bool {
    let Ok(line) = std::str::from_utf8(line) else { return false };
    let Some(target) = line.strip_prefix("GET ").and_then(|rest| rest.strip_suffix(" HTTP/1.1")) else {
        return false;
    };
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    path == "/v1/streams/sse"
        || path
            .strip_prefix("/api/v1/agents/")
            .and_then(|rest| rest.strip_suffix("/subscribe"))
            .is_some_and(|agent| !agent.is_empty() && !agent.contains('/'))
}

/// Answers the request: an event stream written in chunks until it ends or the client goes
/// away, or a refusal. Then the connection closes.
async fn serve(stream: TcpStream, peer: SocketAddr, front: Front) {
    let Front { router, stall_limit, metrics } = front;
    let Some((stream, body)) = Box::pin(answer(stream, peer, router, stall_limit)).await else { return };
    if pump(stream, body, stall_limit).await == Ended::Stalled {
        metrics.connections_closed_stalled_total().add([], 1);
    }
}

/// Reads the request, asks the router, and writes the head of its answer. Returns the
/// connection and the stream's body when the answer is an event stream; answers a refusal
/// whole and returns `None`.
async fn answer(
    mut stream: TcpStream,
    peer: SocketAddr,
    mut router: Router,
    stall_limit: Duration,
) -> Option<(TcpStream, Body)> {
    let mut request = match tokio::time::timeout(HEAD_TIMEOUT, read_request(&mut stream)).await {
        Ok(Ok(request)) => request,
        Ok(Err(status)) => return refuse(&mut stream, status).await,
        Err(_) => return refuse(&mut stream, StatusCode::REQUEST_TIMEOUT).await,
    };
    request.extensions_mut().insert(ConnectInfo(peer));
    let Ok(response) = router.call(request).await;
    let (parts, body) = response.into_parts();
    let streaming = parts.status == StatusCode::OK
        && parts
            .headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let mut head =
        format!("HTTP/1.1 {} {}\r\n", parts.status.as_u16(), parts.status.canonical_reason().unwrap_or(""))
            .into_bytes();
    for (name, value) in &parts.headers {
        if name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING || name == header::CONNECTION {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if !streaming {
        let answer = axum::body::to_bytes(body, ANSWER_BYTES_MAX).await.unwrap_or_default();
        head.extend_from_slice(
            format!("content-length: {}\r\nconnection: close\r\n\r\n", answer.len()).as_bytes(),
        );
        head.extend_from_slice(&answer);
        let _ = tokio::time::timeout(stall_limit, stream.write_all(&head)).await;
        return None;
    }
    head.extend_from_slice(b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n");
    match tokio::time::timeout(stall_limit, stream.write_all(&head)).await {
        Ok(Ok(())) => Some((stream, body)),
        _ => None,
    }
}

/// How a stream written here ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The stream ended (the session was superseded, the server stops) or the client left.
    Done,
    /// A write stayed blocked for the stall limit, or the kernel's user timeout fired.
    Stalled,
}

/// Writes the stream's frames as chunks until it ends, the client closes its side, or a write
/// stays blocked for `stall_limit`.
async fn pump(mut stream: TcpStream, body: Body, stall_limit: Duration) -> Ended {
    let mut frames = body.into_data_stream();
    // Read only to learn that the client left: it sends nothing after its request.
    let mut ignored = [0u8; 16];
    loop {
        tokio::select! {
            frame = frames.next() => {
                let chunk = match frame {
                    Some(Ok(frame)) if frame.is_empty() => continue,
                    Some(Ok(frame)) => {
                        let mut chunk = Vec::with_capacity(frame.len() + 12);
                        chunk.extend_from_slice(format!("{:x}\r\n", frame.len()).as_bytes());
                        chunk.extend_from_slice(&frame);
                        chunk.extend_from_slice(b"\r\n");
                        chunk
                    }
                    Some(Err(_)) | None => b"0\r\n\r\n".to_vec(),
                };
                let last = chunk.as_slice() == b"0\r\n\r\n";
                match tokio::time::timeout(stall_limit, stream.write_all(&chunk)).await {
                    Ok(Ok(())) if !last => {}
                    Ok(Ok(())) => return Ended::Done,
                    Ok(Err(e)) if e.kind() != std::io::ErrorKind::TimedOut => return Ended::Done,
                    Ok(Err(_)) | Err(_) => return Ended::Stalled,
                }
            }
            // The client sends nothing after its request; a read that ends means it left.
            read = stream.read(&mut ignored) => match read {
                Ok(0) => return Ended::Done,
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return Ended::Stalled,
                Err(_) => return Ended::Done,
                Ok(_) => {}
            },
        }
    }
}

/// Reads the request head (up to the blank line) and makes it a request for the router; a
/// body, if any, is not read (the connection closes after the answer).
async fn read_request(stream: &mut TcpStream) -> Result<Request<Body>, StatusCode> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let end = loop {
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        if head.len() > HEAD_BYTES_MAX {
            return Err(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        }
        let n = stream.read(&mut chunk).await.map_err(|_| StatusCode::BAD_REQUEST)?;
        if n == 0 {
            return Err(StatusCode::BAD_REQUEST);
        }
        head.extend_from_slice(&chunk[..n]);
    };
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut parsed = httparse::Request::new(&mut headers);
    match parsed.parse(&head[..end]) {
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => return Err(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE),
        _ => return Err(StatusCode::BAD_REQUEST),
    }
    let uri: Uri = parsed.path.unwrap_or("/").parse().map_err(|_| StatusCode::BAD_REQUEST)?;
    let mut request = Request::builder().method(Method::GET).uri(uri).version(Version::HTTP_11);
    let request_headers = request.headers_mut().ok_or(StatusCode::BAD_REQUEST)?;
    for parsed_header in parsed.headers.iter() {
        let name =
            HeaderName::from_bytes(parsed_header.name.as_bytes()).map_err(|_| StatusCode::BAD_REQUEST)?;
        let value = HeaderValue::from_bytes(parsed_header.value).map_err(|_| StatusCode::BAD_REQUEST)?;
        request_headers.append(name, value);
    }
    request.body(Body::empty()).map_err(|_| StatusCode::BAD_REQUEST)
}

/// Answers a request that could not be read with its status, and closes.
async fn refuse(stream: &mut TcpStream, status: StatusCode) -> Option<(TcpStream, Body)> {
    let answer = format!(
        "HTTP/1.1 {} {}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    let _ = tokio::time::timeout(HEAD_TIMEOUT, stream.write_all(answer.as_bytes())).await;
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_sse_route_over_http_1_1_is_taken() {
        for line in [
            "GET /v1/streams/sse HTTP/1.1",
            "GET /v1/streams/sse?session_id=s1&ticket=x HTTP/1.1",
            "GET /api/v1/agents/agent_alpha/subscribe HTTP/1.1",
            "GET /api/v1/agents/agent_alpha/subscribe?x=1 HTTP/1.1",
        ] {
            assert!(is_sse_request_line(line.as_bytes()), "{line}");
        }
        for line in [
            "GET /v1/streams/sse HTTP/1.0",
            "POST /v1/streams/sse HTTP/1.1",
            "HEAD /v1/streams/sse HTTP/1.1",
            "GET /v1/streams/ws HTTP/1.1",
            "GET /v1/streams/sse/more HTTP/1.1",
            "GET /api/v1/agents//subscribe HTTP/1.1",
            "GET /api/v1/agents/a/b/subscribe HTTP/1.1",
            "PRI * HTTP/2.0",
            "GET /console/api/live HTTP/1.1",
        ] {
            assert!(!is_sse_request_line(line.as_bytes()), "{line}");
        }
    }
}
