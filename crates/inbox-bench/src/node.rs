//! A service node for the benchmarks, on port 0: in this process (`start`), or in a child
//! process of this binary (`spawn`), so a load generator does not share the server's runtime.

use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use inbox_server::Config;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::BenchError;

/// A service node on port 0.
pub struct Node {
    pub base: String,
    pub client: reqwest::Client,
    running: Running,
}

enum Running {
    InProcess {
        stop: oneshot::Sender<()>,
        task: JoinHandle<()>,
    },
    /// The child stops when its stdin closes.
    Child {
        child: Box<Child>,
        stdin: ChildStdin,
    },
}

impl Node {
    /// A configuration on `database_url` whose rate limits and waiter caps never bind: the
    /// benchmarks measure the service's cost, not its limits.
    pub fn config(database_url: &str) -> Config {
        let mut config = Config::default();
        config.database.url = database_url.to_owned();
        config.limits.tenant_requests_per_second = 1_000_000;
        config.limits.tenant_requests_burst = 1_000_000;
        config.limits.agent_requests_per_second = 1_000_000;
        config.limits.agent_requests_burst = 1_000_000;
        config.limits.waiters_per_agent = 64;
        config
    }

    /// Runs a node with `config` inside this process.
    pub async fn start(config: Config) -> Result<Node, BenchError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            if let Err(err) = inbox_server::run(config, listener, async { drop(stopped.await) }).await {
                eprintln!("inbox-bench: a node stopped with an error: {err}");
            }
        });
        Node::ready(base, Running::InProcess { stop, task }).await
    }

    /// Runs a node with `Node::config(database_url)` in a child process (`inbox-bench node`).
    pub async fn spawn(database_url: &str) -> Result<Node, BenchError> {
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .args(["node", database_url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin for the node process")?;
        let stdout = child.stdout.take().ok_or("no stdout for the node process")?;
        let line =
            BufReader::new(stdout).lines().next_line().await?.ok_or("the node process exited early")?;
        let addr =
            line.strip_prefix("listening ").ok_or_else(|| format!("the node process said {line:?}"))?;
        Node::ready(format!("http://{addr}"), Running::Child { child: Box::new(child), stdin }).await
    }

    async fn ready(base: String, running: Running) -> Result<Node, BenchError> {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = client.get(format!("{base}/readyz")).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                return Ok(Node { base, client, running });
            }
            if Instant::now() > deadline {
                return Err("a node did not become ready within 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The child process's id (`None` for a node in this process).
    pub fn pid(&self) -> Option<u32> {
        match &self.running {
            Running::InProcess { .. } => None,
            Running::Child { child, .. } => child.id(),
        }
    }

    /// `host:port` of the node, as a `Host` header carries it.
    pub fn authority(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    pub async fn stop(self) {
        match self.running {
            Running::InProcess { stop, task } => {
                let _ = stop.send(());
                let _ = task.await;
            }
            Running::Child { mut child, stdin } => {
                drop(stdin);
                let _ = child.wait().await;
            }
        }
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

/// The child process of `Node::spawn`: serves `Node::config(database_url)` on port 0, prints
/// `listening <addr>`, and shuts down gracefully when stdin closes.
pub async fn serve_child(database_url: String) -> ExitCode {
    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("inbox-bench node: cannot listen: {err}");
            return ExitCode::FAILURE;
        }
    };
    match listener.local_addr() {
        Ok(addr) => println!("listening {addr}"),
        Err(err) => {
            eprintln!("inbox-bench node: {err}");
            return ExitCode::FAILURE;
        }
    }
    let stdin_closed = async {
        let mut sink = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    };
    match inbox_server::run(Node::config(&database_url), listener, stdin_closed).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("inbox-bench node: {err}");
            ExitCode::FAILURE
        }
    }
}

/// A publisher's access token (`events.publish`) for `tenant_id`, signed with the node's keys.
pub async fn publisher_token(
    tokens: &inbox_server::TokenService,
    tenant_id: &inbox_core::TenantId,
) -> Result<String, BenchError> {
    let issued = tokens
        .issue(
            tenant_id,
            &inbox_core::RecipientId::new("bench-app")?,
            inbox_server::CallerKind::Publisher,
            "events.publish",
            None,
            false,
        )
        .await
        .map_err(|e| format!("{}: {}", e.code, e.detail))?;
    Ok(issued.access_token)
}
