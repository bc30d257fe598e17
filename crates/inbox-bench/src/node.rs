//! A service node the benchmarks run in their own process on port 0, started and stopped
//! the way `inbox_server::run` expects.

use std::time::{Duration, Instant};

use inbox_server::Config;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::BenchError;

/// A service node running in this process on port 0.
pub struct Node {
    pub base: String,
    pub client: reqwest::Client,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Node {
    /// A configuration on `database_url` whose rate limits never bind: the benchmarks measure
    /// the service's cost, not its limits.
    pub fn config(database_url: &str) -> Config {
        Config {
            database_url: database_url.to_owned(),
            tenant_requests_per_second: 1_000_000,
            tenant_requests_burst: 1_000_000,
            agent_requests_per_second: 1_000_000,
            agent_requests_burst: 1_000_000,
            ..Config::default()
        }
    }

    pub async fn start(config: Config) -> Result<Node, BenchError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            if let Err(err) = inbox_server::run(config, listener, async { drop(stopped.await) }).await {
                eprintln!("inbox-bench: a node stopped with an error: {err}");
            }
        });
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = client.get(format!("{base}/readyz")).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                return Ok(Node { base, client, stop, task });
            }
            if Instant::now() > deadline {
                return Err("a node did not become ready within 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `host:port` of the node, as a `Host` header carries it.
    pub fn authority(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }

    pub async fn metric(&self, series: &str) -> Result<f64, BenchError> {
        let text = self.client.get(format!("{}/metrics", self.base)).send().await?.text().await?;
        Ok(text
            .lines()
            .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
            .and_then(|value| value.parse().ok())
            .unwrap_or(0.0))
    }
}
