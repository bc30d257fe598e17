//! `inbox-bench streams-clients`: the client processes of `inbox-bench streams` (`streams.rs`).
//! Each opens thousands of SSE or WebSocket streams to the node from loopback source addresses
//! of its own and reports when every stream has read a head, so the node's process measures
//! only the node.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpSocket, TcpStream};

use crate::BenchError;
use crate::streams::{CONNECT_BATCH, Mode, Transport, unix_micros};

/// The child process of `streams`: reads `TRANSPORT MODE SOURCE` and one access token per line
/// from stdin (until an empty line), opens one stream per token to `addr` from source
/// addresses of its own, prints `ready OPENED FAILED`, then (in `watch` mode) reads every hint
/// and prints `hint HEAD UNIX_MICROS` when all its streams have read HEAD, until stdin closes.
pub async fn clients(addr: String) -> ExitCode {
    match run_clients(addr).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("inbox-bench streams-clients: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run_clients(addr: String) -> Result<(), BenchError> {
    let addr: SocketAddr = addr.parse()?;
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let header = stdin.next_line().await?.ok_or("no header line")?;
    let mut words = header.split_whitespace();
    let transport = words.next().and_then(Transport::parse).ok_or("the header names no transport")?;
    let mode = match words.next() {
        Some("idle") => Mode::Idle,
        Some("watch") => Mode::Watch,
        _ => return Err("the header names no mode".into()),
    };
    let source: u8 = words.next().and_then(|n| n.parse().ok()).ok_or("the header names no source")?;
    let mut tokens = Vec::new();
    while let Some(line) = stdin.next_line().await? {
        if line.is_empty() {
            break;
        }
        tokens.push(line);
    }
    let total = tokens.len();
    let heads = Arc::new(HeadLog::new(total));
    let mut streams = Vec::with_capacity(total);
    let mut failed = 0usize;
    let mut first_error = None;
    let mut index = 0usize;
    for batch in tokens.chunks(CONNECT_BATCH) {
        let mut opening = Vec::new();
        for token in batch {
            let from = source_address(source, index);
            index += 1;
            opening.push(tokio::spawn(open_stream(addr, from, transport, token.clone())));
        }
        for task in opening {
            match task.await? {
                Ok(stream) => streams.push(stream),
                Err(err) => {
                    failed += 1;
                    first_error.get_or_insert(err.to_string());
                }
            }
        }
    }
    if let Some(err) = first_error {
        eprintln!("inbox-bench streams-clients: {failed} streams failed to open; the first: {err}");
    }
    heads.expect(streams.len());
    println!("ready {} {failed}", streams.len());
    let mut readers = Vec::new();
    if mode == Mode::Watch {
        for (stream, leftover) in streams.drain(..) {
            readers.push(tokio::spawn(watch(stream, leftover, transport, heads.clone())));
        }
    }
    while let Ok(Some(_)) = stdin.next_line().await {}
    for reader in readers {
        reader.abort();
    }
    drop(streams);
    Ok(())
}

/// Source address number `index` of client process `source`: 127.S.x.y, a few streams each.
fn source_address(source: u8, index: usize) -> Ipv4Addr {
    let spread = index / 4;
    Ipv4Addr::new(127, source.wrapping_add(10), (spread / 250) as u8, (spread % 250) as u8 + 1)
}

/// Opens one stream and waits for the server to accept it; returns it with the bytes read past
/// the response head.
async fn open_stream(
    addr: SocketAddr,
    from: Ipv4Addr,
    transport: Transport,
    token: String,
) -> Result<(TcpStream, Vec<u8>), BenchError> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::V4(SocketAddrV4::new(from, 0)))?;
    let mut stream = socket.connect(addr).await?;
    let request = match transport {
        Transport::Sse => format!(
            "GET /v1/streams/sse HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\nauthorization: Bearer {token}\r\n\r\n"
        ),
        Transport::WebSocket => format!(
            "GET /v1/streams/ws HTTP/1.1\r\nhost: {addr}\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
             sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\
             authorization: Bearer {token}\r\n\r\n"
        ),
    };
    stream.write_all(request.as_bytes()).await?;
    let mut seen = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = find(&seen, b"\r\n\r\n") {
            let accepted = match transport {
                Transport::Sse => seen.starts_with(b"HTTP/1.1 200"),
                Transport::WebSocket => seen.starts_with(b"HTTP/1.1 101"),
            };
            if !accepted {
                let status = String::from_utf8_lossy(&seen);
                return Err(format!("refused: {}", status.lines().next().unwrap_or("")).into());
            }
            // SSE: wait for the opening frame, so the stream is open on the node.
            if transport == Transport::WebSocket || find(&seen[end..], b"retry:").is_some() {
                return Ok((stream, seen.split_off(end + 4)));
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(60), stream.read(&mut chunk)).await??;
        if n == 0 {
            return Err(format!("closed before it opened: {}", String::from_utf8_lossy(&seen)).into());
        }
        seen.extend_from_slice(&chunk[..n]);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// Per head, how many of this process's streams have read it, and when the last one did.
struct HeadLog {
    streams: Mutex<usize>,
    seen: Mutex<Vec<(usize, u64)>>,
}

impl HeadLog {
    fn new(capacity: usize) -> HeadLog {
        HeadLog { streams: Mutex::new(capacity), seen: Mutex::new(Vec::new()) }
    }

    fn expect(&self, streams: usize) {
        *self.streams.lock().expect("head log") = streams;
    }

    /// A stream read `head` after `last`: it learned of every head in between.
    fn read(&self, last: u64, head: u64, at: u64) {
        let streams = *self.streams.lock().expect("head log");
        let mut seen = self.seen.lock().expect("head log");
        for k in (last + 1)..=head {
            let k = k as usize;
            if seen.len() <= k {
                seen.resize(k + 1, (0, 0));
            }
            let entry = &mut seen[k];
            entry.0 += 1;
            entry.1 = entry.1.max(at);
            if entry.0 == streams {
                println!("hint {k} {}", entry.1);
            }
        }
    }
}

/// Reads one stream's hints until it ends, logging each new head. Fan-out inboxes are new
/// (head 0), so a stream starts at 0.
async fn watch(mut stream: TcpStream, mut pending: Vec<u8>, transport: Transport, heads: Arc<HeadLog>) {
    let mut last = 0u64;
    let mut chunk = [0u8; 2048];
    loop {
        let at = unix_micros();
        let mut newest = None;
        match transport {
            Transport::Sse => {
                while let Some(end) = find(&pending, b"\n\n") {
                    let frame: Vec<u8> = pending.drain(..end + 2).collect();
                    let text = String::from_utf8_lossy(&frame);
                    if let Some(head) =
                        text.lines().find_map(|l| l.strip_prefix("id: ")).and_then(|h| h.parse().ok())
                    {
                        newest = Some(head);
                    }
                }
            }
            Transport::WebSocket => {
                while let Some((payload, used)) = ws_frame(&pending) {
                    let text = String::from_utf8_lossy(payload);
                    if text.contains("\"inbox.updated\"") {
                        newest = json_number(&text, "\"head_seq\":");
                    }
                    pending.drain(..used);
                }
            }
        }
        if let Some(head) = newest.filter(|head| *head > last) {
            heads.read(last, head, at);
            last = head;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The payload and length of the first whole server-to-client (unmasked) frame in `bytes`.
fn ws_frame(bytes: &[u8]) -> Option<(&[u8], usize)> {
    let second = *bytes.get(1)?;
    let (len, start) = match second & 0x7f {
        126 => (u16::from_be_bytes([*bytes.get(2)?, *bytes.get(3)?]) as usize, 4),
        127 => (u64::from_be_bytes(bytes.get(2..10)?.try_into().ok()?) as usize, 10),
        n => (n as usize, 2),
    };
    let payload = bytes.get(start..start + len)?;
    Some((payload, start + len))
}

fn json_number(text: &str, key: &str) -> Option<u64> {
    let rest = &text[text.find(key)? + key.len()..];
    let digits: String =
        rest.chars().skip_while(|c| c.is_whitespace()).take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}
