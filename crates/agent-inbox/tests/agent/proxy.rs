//! A small TCP proxy in front of the service, for faults a real network has: it can close
//! every connection after a fixed time (as a proxy with a request timeout does), cut all open
//! connections at once, refuse event streams outright, and lose the answers to chosen
//! requests (the service acts on them; the client sees the connection break).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug)]
struct Rules {
    /// Close each connection this long after it was accepted.
    close_after_ms: AtomicU64,
    /// Close connections whose first request is `GET /v1/streams/sse`.
    refuse_streams: AtomicBool,
    /// Bumped to cut every open connection.
    cuts: watch::Sender<u64>,
    connections: AtomicU64,
    /// Requests whose request line starts with this lose their answer, while `answers_to_lose`
    /// is above zero.
    lose_answers_to: std::sync::Mutex<Vec<u8>>,
    answers_to_lose: AtomicU64,
}

pub struct Proxy {
    pub base: String,
    rules: Arc<Rules>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let rules = Arc::new(Rules {
            close_after_ms: AtomicU64::new(0),
            refuse_streams: AtomicBool::new(false),
            cuts: watch::channel(0).0,
            connections: AtomicU64::new(0),
            lose_answers_to: std::sync::Mutex::new(Vec::new()),
            answers_to_lose: AtomicU64::new(0),
        });
        let upstream: SocketAddr = format!("127.0.0.1:{upstream_port}").parse().unwrap();
        let task = tokio::spawn({
            let rules = rules.clone();
            async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else { return };
                    rules.connections.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(relay(client, upstream, rules.clone()));
                }
            }
        });
        Proxy { base: format!("http://{addr}"), rules, task }
    }

    /// Closes every connection `after` its start (`None`: never).
    pub fn close_after(&self, after: Option<Duration>) {
        self.rules.close_after_ms.store(after.map_or(0, |d| d.as_millis() as u64), Ordering::Relaxed);
    }

    pub fn refuse_streams(&self, refuse: bool) {
        self.rules.refuse_streams.store(refuse, Ordering::Relaxed);
    }

    /// Cuts every open connection now.
    pub fn cut_all(&self) {
        self.rules.cuts.send_modify(|n| *n += 1);
    }

    pub fn connections(&self) -> u64 {
        self.rules.connections.load(Ordering::Relaxed)
    }

    /// The next `n` requests starting with `request_line` (such as `POST /v1/inbox/acknowledge`)
    /// reach the service, but their connection is closed instead of answered. Set before the
    /// client connects: only connections opened afterwards are watched.
    pub fn lose_answers(&self, request_line: &str, n: u64) {
        *self.rules.lose_answers_to.lock().unwrap() = request_line.as_bytes().to_vec();
        self.rules.answers_to_lose.store(n, Ordering::Relaxed);
    }

    /// How many answers are still to be lost.
    pub fn answers_to_lose(&self) -> u64 {
        self.rules.answers_to_lose.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut_all();
    }
}

async fn relay(mut client: TcpStream, upstream: SocketAddr, rules: Arc<Rules>) {
    let mut cuts = rules.cuts.subscribe();
    cuts.mark_unchanged();
    let close_after = match rules.close_after_ms.load(Ordering::Relaxed) {
        0 => Duration::from_secs(24 * 3600),
        ms => Duration::from_millis(ms),
    };
    let deadline = tokio::time::Instant::now() + close_after;
    let mut first = vec![0u8; 4096];
    let n = tokio::select! {
        read = client.read(&mut first) => match read { Ok(n) if n > 0 => n, _ => return },
        _ = tokio::time::sleep_until(deadline) => return,
        _ = cuts.changed() => return,
    };
    if rules.refuse_streams.load(Ordering::Relaxed) && first[..n].starts_with(b"GET /v1/streams/sse") {
        return;
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else { return };
    if rules.answers_to_lose.load(Ordering::Relaxed) > 0 {
        tokio::select! {
            _ = relay_losing_answers(client, server, &first[..n], &rules) => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = cuts.changed() => {}
        }
        return;
    }
    if server.write_all(&first[..n]).await.is_err() {
        return;
    }
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = tokio::time::sleep_until(deadline) => {}
        _ = cuts.changed() => {}
    }
}

/// Relays like `copy_bidirectional`, but when a request the rules name passes towards the
/// service, the answer coming back is dropped with the connection. HTTP/1.1 answers arrive in
/// request order, so the first bytes back after such a request are its answer.
async fn relay_losing_answers(client: TcpStream, server: TcpStream, first: &[u8], rules: &Rules) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let losing = AtomicBool::new(false);
    let upstream = async {
        let mut chunk = first.to_vec();
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            let marker = rules.lose_answers_to.lock().unwrap().clone();
            let named = !marker.is_empty() && chunk.windows(marker.len()).any(|w| w == marker.as_slice());
            if named
                && rules
                    .answers_to_lose
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                    .is_ok()
            {
                losing.store(true, Ordering::Release);
            }
            if server_write.write_all(&chunk).await.is_err() {
                return;
            }
            match client_read.read(&mut buffer).await {
                Ok(n) if n > 0 => chunk = buffer[..n].to_vec(),
                _ => return,
            }
        }
    };
    let downstream = async {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            match server_read.read(&mut buffer).await {
                Ok(n) if n > 0 => {
                    if losing.load(Ordering::Acquire) {
                        return;
                    }
                    if client_write.write_all(&buffer[..n]).await.is_err() {
                        return;
                    }
                }
                _ => return,
            }
        }
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
    }
}
