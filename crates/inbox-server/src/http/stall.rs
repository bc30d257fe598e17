//! Connections whose client stops reading. A stream's frames are made only when the connection
//! can take them and hints coalesce, so a client that reads nothing costs its socket buffers
//! and a few queued frames, never more; but it would keep its stream slot, its waiter slot and
//! its socket for ever. The listener wraps every accepted connection in [`StallGuard`]: a write
//! that stays blocked for `write_stall_timeout` fails, and hyper closes the connection (the
//! client's reconnect then starts afresh). The same timeout is the socket's TCP user timeout,
//! so a peer that vanished without a word (half-open TCP) is found once the next heartbeat
//! goes unacknowledged that long.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use crate::metrics::Metrics;

/// A listener whose connections close when their writes stay blocked for `limit`.
#[derive(Debug)]
pub struct StallGuarded<L> {
    inner: L,
    limit: Duration,
    metrics: Arc<Metrics>,
}

impl<L> StallGuarded<L> {
    pub fn new(inner: L, limit: Duration, metrics: Arc<Metrics>) -> Self {
        StallGuarded { inner, limit, metrics }
    }
}

impl<L: Listener> Listener for StallGuarded<L> {
    type Io = StallGuard<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = self.inner.accept().await;
        (StallGuard { io, limit: self.limit, blocked: None, metrics: self.metrics.clone() }, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// Accepts the next connection of a listener that serves it itself (the SSE front, the TLS
/// listener): no Nagle delay (a hint is a small write on an idle connection) and `limit` as
/// its TCP user timeout. Waits out accept errors (out of file descriptors and the like)
/// instead of spinning; `None` once `shutdown` fires.
pub(crate) async fn accept(
    tcp: &tokio::net::TcpListener,
    limit: Duration,
    shutdown: &crate::shutdown::Shutdown,
) -> Option<(tokio::net::TcpStream, std::net::SocketAddr)> {
    loop {
        let (stream, peer) = tokio::select! {
            accepted = tcp.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => return None,
        };
        let _ = stream.set_nodelay(true);
        set_user_timeout(&stream, limit);
        return Some((stream, peer));
    }
}

/// Sets the TCP user timeout of an accepted socket: data unacknowledged that long ends it.
pub fn set_user_timeout(tcp: &tokio::net::TcpStream, limit: Duration) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Err(err) = socket2::SockRef::from(tcp).set_tcp_user_timeout(Some(limit)) {
        tracing::debug!(error = %err, "cannot set TCP_USER_TIMEOUT; dead peers are found by TCP's own timeouts");
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = (tcp, limit);
}

/// A connection that fails a write blocked for longer than its limit. The timer exists only
/// while a write is blocked, so an idle connection carries none.
#[derive(Debug)]
pub struct StallGuard<Io> {
    io: Io,
    limit: Duration,
    blocked: Option<Pin<Box<Sleep>>>,
    metrics: Arc<Metrics>,
}

impl<Io> StallGuard<Io> {
    /// Called when a write could not proceed: starts the clock on the first, and fails once the
    /// limit has passed (the timer wakes the connection to find out).
    fn stalled(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let limit = self.limit;
        let timer = self.blocked.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        ready!(timer.as_mut().poll(cx));
        self.metrics.connections_closed_stalled_total().add([], 1);
        Poll::Ready(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the client read nothing for {limit:?} (write_stall_timeout)"),
        ))
    }

    fn guard<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match poll {
            Poll::Ready(done) => {
                self.blocked = None;
                Poll::Ready(self.count_kernel_timeout(done))
            }
            Poll::Pending => self.stalled(cx).map(Err),
        }
    }

    /// Counts a connection the kernel ended for its TCP user timeout (`ETIMEDOUT`, seen by a
    /// read or a write): the same stalled or vanished reader, found by TCP.
    fn count_kernel_timeout<T>(&self, done: io::Result<T>) -> io::Result<T> {
        if done.as_ref().is_err_and(|e| e.kind() == io::ErrorKind::TimedOut) {
            self.metrics.connections_closed_stalled_total().add([], 1);
        }
        done
    }
}

impl<Io: AsyncRead + Unpin> AsyncRead for StallGuard<Io> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let done = ready!(Pin::new(&mut this.io).poll_read(cx, buf));
        Poll::Ready(this.count_kernel_timeout(done))
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for StallGuard<Io> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_write(cx, buf);
        this.guard(cx, poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.guard(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_flush(cx);
        this.guard(cx, poll)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    #[tokio::test]
    async fn a_write_blocked_past_the_limit_fails_and_one_that_proceeds_does_not() {
        let (near, mut far) = tokio::io::duplex(64);
        let limit = Duration::from_millis(400);
        let metrics = Arc::new(Metrics::default());
        let mut guarded = StallGuard { io: near, limit, blocked: None, metrics: metrics.clone() };
        // The far end reads in time: the writes go through however long they take in all.
        let reader = tokio::spawn(async move {
            let mut sink = vec![0u8; 256];
            for _ in 0..4 {
                tokio::time::sleep(limit / 4).await;
                far.read_exact(&mut sink[..64]).await.unwrap();
            }
            far
        });
        guarded.write_all(&[7u8; 256]).await.expect("a slow reader that reads is served");
        let _far = reader.await.unwrap();
        // Now nobody reads: the write that cannot proceed fails after the limit.
        let started = tokio::time::Instant::now();
        let err = guarded.write_all(&[7u8; 256]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= limit, "not before the limit");
        assert!(metrics.render().contains("agent_inbox_connections_closed_stalled_total 1"));
    }
}
