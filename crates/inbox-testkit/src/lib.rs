//! Dev-only: the one way tests and benchmarks start an agent-inbox server, and stop it again.
//!
//! Two shapes, because tests need both: [`InProcess`] runs a server function that takes an
//! injected listener and a shutdown future (`inbox_server::run`) on port 0 inside the test's
//! runtime, and stops it gracefully; [`Serve`] starts the built binary's `serve` as a child
//! process on a loopback port (port 0 with the address read from its log, or a port chosen
//! beforehand so a node can be restarted in place or its log kept in a file; or, under a wrapper
//! such as `ip netns exec`, on an address of a network namespace), and a
//! [`ServeChild`] kills only that child when asked or dropped. Nothing here knows the service
//! itself, so the crate depends on neither the server nor the store and creates no cycle.

mod child;
mod in_process;

use std::time::{Duration, Instant};

pub use child::{LISTENING_PREFIX, Serve, ServeChild};
pub use in_process::{InProcess, Shutdown};

/// A loopback port nobody listens on right now (bound once and released, so a child can take
/// it; another process could take it first, which a test then notices as a failed start).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind a loopback port")
        .port()
}

/// Waits until `GET {base}/readyz` answers 2xx, checking every 25 ms; panics after `within`.
pub async fn wait_ready(client: &reqwest::Client, base: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        if client.get(format!("{base}/readyz")).send().await.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        assert!(Instant::now() < deadline, "the server at {base} did not become ready within {within:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
