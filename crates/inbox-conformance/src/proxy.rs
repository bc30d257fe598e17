//! Loopback TCP forwarders that tests put between a store and its database: one spreads
//! connections over several servers in turn (as a load balancer in front of Galera members
//! does, so one store's pool holds connections on different members), and one rewrites SQL
//! text on its way to the server (an engine that silently ignores a clause). They live with
//! the tests, never in a store's configuration: a production store cannot be pointed at one by
//! a setting.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// A forwarder listening on a loopback port; dropping it stops accepting.
#[derive(Debug)]
pub struct Forwarder {
    pub addr: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// A text replacement applied to every MySQL protocol packet the client sends.
#[derive(Debug, Clone, Copy)]
pub struct Rewrite {
    pub from: &'static str,
    pub to: &'static str,
}

impl Forwarder {
    /// Each new connection goes to the next of `upstreams` (`host:port`), in turn.
    pub async fn round_robin(upstreams: Vec<String>) -> Forwarder {
        Self::start(upstreams, None).await
    }

    /// Every connection goes to `upstream`, with `rewrite` applied to what the client sends.
    /// Use a URL with `ssl-mode=disabled`, so the SQL travels in clear text.
    pub async fn rewriting(upstream: String, rewrite: Rewrite) -> Forwarder {
        Self::start(vec![upstream], Some(rewrite)).await
    }

    async fn start(upstreams: Vec<String>, rewrite: Option<Rewrite>) -> Forwarder {
        assert!(!upstreams.is_empty(), "a forwarder needs an upstream");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let addr = listener.local_addr().expect("the forwarder's address");
        let next = Arc::new(AtomicUsize::new(0));
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstreams[next.fetch_add(1, Ordering::Relaxed) % upstreams.len()].clone();
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        let _ = client.set_nodelay(true);
                        let _ = server.set_nodelay(true);
                        forward(client, server, rewrite).await;
                    }
                });
            }
        });
        Forwarder { addr, accept }
    }
}

async fn forward(client: TcpStream, server: TcpStream, rewrite: Option<Rewrite>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let down = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    });
    match rewrite {
        None => {
            let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        }
        Some(rewrite) => {
            let _ = rewrite_packets(&mut client_read, &mut server_write, rewrite).await;
        }
    }
    let _ = server_write.shutdown().await;
    let _ = down.await;
}

/// Copies MySQL protocol packets (3-byte length, 1-byte sequence, payload), replacing
/// `rewrite.from` in each payload and fixing the length.
async fn rewrite_packets(
    from: &mut (impl tokio::io::AsyncRead + Unpin),
    to: &mut (impl tokio::io::AsyncWrite + Unpin),
    rewrite: Rewrite,
) -> std::io::Result<()> {
    let needle = rewrite.from.as_bytes();
    loop {
        let mut header = [0u8; 4];
        from.read_exact(&mut header).await?;
        let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
        let mut payload = vec![0u8; len];
        from.read_exact(&mut payload).await?;
        if len < 0xff_ffff {
            payload = replace_all(&payload, needle, rewrite.to.as_bytes());
            let new_len = (payload.len() as u32).to_le_bytes();
            header[..3].copy_from_slice(&new_len[..3]);
        }
        to.write_all(&header).await?;
        to.write_all(&payload).await?;
    }
}

fn replace_all(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        if haystack[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    out
}
