//! A service node for the benchmarks, on port 0: in this process (`start`), or in a child
//! process of this binary (`spawn`), so a load generator does not share the server's runtime.
//! Both are started through `inbox-testkit`, the one way tests and benchmarks start servers.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use inbox_server::Config;
use inbox_testkit::{InProcess, LISTENING_PREFIX, Serve, ServeChild};
use tokio::io::AsyncReadExt as _;

use crate::BenchError;

/// A service node on port 0.
pub struct Node {
    pub base: String,
    pub client: reqwest::Client,
    running: Running,
    /// The file the child logs to, removed when the node stops.
    log_file: Option<std::path::PathBuf>,
}

enum Running {
    InProcess(InProcess),
    /// The child stops when its stdin closes.
    Child(ServeChild),
}

impl Node {
    /// A configuration on `database_url` whose rate limits and waiter caps never bind: the
    /// benchmarks measure the service's cost, not its limits.
    pub fn config(database_url: &str) -> Config {
        let mut config = Config::default();
        config.database.url = database_url.to_owned();
        config.secrets.key_file = Some(crate::secrets::key_file(database_url));
        config.limits.tenant_requests_per_second = 1_000_000;
        config.limits.tenant_requests_burst = 1_000_000;
        config.limits.agent_requests_per_second = 1_000_000;
        config.limits.agent_requests_burst = 1_000_000;
        config.limits.waiters_per_agent = 100_000;
        config.limits.waiters_per_tenant = 1_000_000;
        config.limits.streams_max = 1_000_000;
        config
    }

    /// Runs a node with `config` inside this process.
    pub async fn start(config: Config) -> Result<Node, BenchError> {
        let running =
            InProcess::start(|listener, shutdown| inbox_server::run(config, listener, shutdown)).await;
        Node::ready(running.http_base(), Running::InProcess(running)).await
    }

    /// Runs a node with `Node::config(database_url)` in a child process (`inbox-bench node`).
    pub async fn spawn(database_url: &str) -> Result<Node, BenchError> {
        Node::spawn_with_history(database_url, true).await
    }

    /// [`Node::spawn`], recording each event's history or not (`[inbox] history`).
    pub async fn spawn_with_history(database_url: &str, history: bool) -> Result<Node, BenchError> {
        Node::spawn_with(database_url, history, &NodeSettings::default()).await
    }

    /// [`Node::spawn_with_history`] with `settings` changed from the defaults.
    pub async fn spawn_with(
        database_url: &str,
        history: bool,
        settings: &NodeSettings,
    ) -> Result<Node, BenchError> {
        let history = if history { "true" } else { "false" };
        let mut args =
            vec!["node".to_owned(), database_url.to_owned(), "--history".to_owned(), history.to_owned()];
        if let Some(retention) = settings.retention {
            args.extend(["--retention-seconds".to_owned(), retention.as_secs().to_string()]);
        }
        if let Some(retention) = settings.archive_retention {
            args.extend(["--archive-retention-seconds".to_owned(), retention.as_secs().to_string()]);
        }
        if let Some(rate) = settings.tenant_requests_per_second {
            args.extend(["--tenant-requests-per-second".to_owned(), rate.to_string()]);
        }
        let mut serve = Serve::command(std::env::current_exe()?, args.clone()).echo_stderr();
        let mut log_file = None;
        if let Some(level) = &settings.log {
            // As an operator runs it: the log goes to a file (or a journal), not to a person.
            let file =
                std::env::temp_dir().join(format!("inbox-bench-node-{}-{level}.log", std::process::id()));
            args.extend(["--log".to_owned(), level.clone()]);
            serve = Serve::command(std::env::current_exe()?, args).log_to(&file);
            log_file = Some(file);
        }
        let child = tokio::task::spawn_blocking(move || serve.spawn()).await??;
        let mut node = Node::ready(child.base.clone(), Running::Child(child)).await?;
        node.log_file = log_file;
        Ok(node)
    }

    async fn ready(base: String, running: Running) -> Result<Node, BenchError> {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = client.get(format!("{base}/readyz")).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                return Ok(Node { base, client, running, log_file: None });
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
            Running::InProcess(_) => None,
            Running::Child(child) => Some(child.pid()),
        }
    }

    /// `host:port` of the node, as a `Host` header carries it.
    pub fn authority(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    pub async fn stop(self) {
        match self.running {
            Running::InProcess(running) => {
                if let Err(err) = running.stop().await {
                    eprintln!("inbox-bench: a node stopped with an error: {err}");
                }
            }
            Running::Child(child) => {
                let _ = tokio::task::spawn_blocking(move || child.close_stdin_and_wait()).await;
            }
        }
        if let Some(file) = self.log_file {
            let _ = std::fs::remove_file(file);
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

/// Settings a benchmark's node changes from the defaults (`None`: the default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSettings {
    /// `[inbox] retention`: how long finished events stay before the archive takes them.
    pub retention: Option<Duration>,
    /// `[inbox] archive_retention`: how long archived events stay before they are pruned.
    pub archive_retention: Option<Duration>,
    /// The service's log at this level, as `agent-inbox serve` writes it (to a file here);
    /// `None`: no log at all.
    pub log: Option<String>,
    /// `[limits] tenant_requests_per_second` (its burst twice that); `None`: limits lifted, as
    /// every benchmark's node has them ([`Node::config`]).
    pub tenant_requests_per_second: Option<u32>,
}

/// The child process of `Node::spawn`: serves `Node::config(database_url)` (with `history`
/// and `settings`) on `listen`, logs its address on stderr as `agent-inbox serve` does, and
/// shuts down gracefully when stdin closes.
pub async fn serve_child(
    database_url: String,
    listen: String,
    history: bool,
    settings: NodeSettings,
) -> ExitCode {
    let listener = match tokio::net::TcpListener::bind(listen.as_str()).await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("inbox-bench node: cannot listen: {err}");
            return ExitCode::FAILURE;
        }
    };
    match listener.local_addr() {
        Ok(addr) => eprintln!("{LISTENING_PREFIX}http://{addr}"),
        Err(err) => {
            eprintln!("inbox-bench node: {err}");
            return ExitCode::FAILURE;
        }
    }
    let _log = settings.log.as_deref().map(|level| inbox_server::logging::init(false, level));
    let stdin_closed = async {
        let mut sink = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    };
    let mut config = Node::config(&database_url);
    config.inbox.history = history;
    if let Some(retention) = settings.retention {
        config.inbox.retention = retention;
    }
    if let Some(retention) = settings.archive_retention {
        config.inbox.archive_retention = retention;
    }
    if let Some(rate) = settings.tenant_requests_per_second {
        config.limits.tenant_requests_per_second = rate;
        config.limits.tenant_requests_burst = rate.saturating_mul(2);
    }
    match inbox_server::run(config, listener, stdin_closed).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("inbox-bench node: {err}");
            ExitCode::FAILURE
        }
    }
}

/// An access token for `subject` of `tenant`, of `kind` with `scope`, signed with the node's keys.
pub async fn token(
    tokens: &inbox_server::TokenService,
    tenant: &str,
    subject: &str,
    kind: inbox_server::CallerKind,
    scope: &str,
) -> Result<String, BenchError> {
    let tenant = inbox_core::TenantId::new(tenant)?;
    let subject = inbox_core::RecipientId::new(subject)?;
    let issued = tokens
        .issue(&tenant, &subject, kind, scope, None, false)
        .await
        .map_err(|e| format!("{}: {}", e.code, e.detail))?;
    Ok(issued.access_token)
}

/// A publisher's access token (`events.publish`) for `tenant_id`, signed with the node's keys.
pub async fn publisher_token(
    tokens: &inbox_server::TokenService,
    tenant_id: &inbox_core::TenantId,
) -> Result<String, BenchError> {
    token(tokens, tenant_id.as_str(), "bench-app", inbox_server::CallerKind::Publisher, "events.publish")
        .await
}
