//! Test scaffolding: a real `agent-inbox serve` on a fixed port (so it can be restarted in
//! place; started through `inbox-testkit`), tokens signed with its keys, `listen` processes with captured logs, temporary
//! directories, and waiting on conditions with deadlines.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inbox_conformance::{Backend, Harness};
use inbox_core::{RecipientId, TenantId};
use inbox_server::{CallerKind, Config, TokenService};
use inbox_testkit::{Serve, ServeChild, free_port};
use serde_json::{Value, json};

pub const TENANT: &str = "t1";
pub const AGENT: &str = "agent_alpha";
pub const BIN: &str = env!("CARGO_BIN_EXE_agent-inbox");

/// Polls `condition` until it holds or `within` passes (then panics with `what`).
pub async fn wait_until<F, Fut>(what: &str, within: Duration, condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    assert!(wait_for(within, condition).await, "timed out after {within:?} waiting until {what}");
}

/// Polls `condition` until it holds (true) or `within` passes (false), for a caller that says
/// more than [`wait_until`] can when it does not hold.
pub async fn wait_for<F, Fut>(within: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("agent-inbox-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The lines of a file the handler appends to (none when it does not exist yet).
    pub fn lines(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.path(name))
            .map(|t| t.lines().map(str::to_owned).filter(|l| !l.is_empty()).collect())
            .unwrap_or_default()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `agent-inbox serve` on its own database and a fixed port.
pub struct Server {
    pub db: Harness,
    pub base: String,
    pub port: u16,
    pub tokens: TokenService,
    serve: Serve,
    child: Option<ServeChild>,
    pub client: reqwest::Client,
}

impl Server {
    pub async fn start(flags: &[&str]) -> Server {
        Server::start_on(Backend::Sqlite, flags).await
    }

    pub async fn start_on(backend: Backend, flags: &[&str]) -> Server {
        let db = Harness::new(backend).await;
        let mut config = Config::default();
        config.database.url = db.url.clone();
        let tokens = TokenService::new(db.store.clone(), &config).await.expect("token service");
        let port = free_port();
        let serve = Serve::new(BIN, &db.url)
            .arg_path("--secrets-key-file", &db.secrets_key_file)
            .on_port(port)
            .args(["--lease-default", "2s"])
            .args(flags)
            .env("AGENT_INBOX_SCAVENGE_INTERVAL", "200ms")
            .env("AGENT_INBOX_HEARTBEAT_INTERVAL", "2s")
            .env("AGENT_INBOX_LOG", "warn")
            // Its warnings and errors show beside a failing test's own output.
            .echo_stderr();
        let mut server = Server {
            db,
            base: format!("http://127.0.0.1:{port}"),
            port,
            tokens,
            serve,
            child: None,
            client: reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap(),
        };
        server.spawn().await;
        server
    }

    async fn spawn(&mut self) {
        self.child = Some(self.serve.spawn().expect("start agent-inbox serve"));
        let (client, base) = (self.client.clone(), self.base.clone());
        wait_until("the server is ready", Duration::from_secs(30), || {
            let (client, base) = (client.clone(), base.clone());
            async move { client.get(format!("{base}/readyz")).send().await.is_ok_and(|r| r.status().is_success()) }
        })
        .await;
    }

    /// SIGKILL, then start again on the same port and database.
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn().await;
    }

    /// Starts the server again after [`Server::kill`], on the same port and database.
    pub async fn start_again(&mut self) {
        assert!(self.child.is_none(), "the server is still running");
        self.spawn().await;
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill();
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").pid()
    }

    pub fn signal(&self, signal: &str) {
        let pid = self.pid().to_string();
        assert!(Command::new("kill").args([signal, &pid]).status().unwrap().success());
    }

    pub async fn token(
        &self,
        subject: &str,
        kind: CallerKind,
        scope: &str,
        refresh: bool,
    ) -> (String, Option<String>) {
        let issued = self
            .tokens
            .issue(
                &TenantId::new(TENANT).unwrap(),
                &RecipientId::new(subject).unwrap(),
                kind,
                scope,
                None,
                refresh,
            )
            .await
            .expect("issue a token");
        (issued.access_token, issued.refresh_token)
    }

    pub async fn agent_token(&self, subject: &str) -> String {
        self.token(subject, CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES, false).await.0
    }

    pub async fn publisher_token(&self) -> String {
        self.token("app", CallerKind::Publisher, "events.publish", false).await.0
    }

    /// Publishes one event to `recipient`; returns its event id.
    pub async fn publish(
        &self,
        publisher: &str,
        recipient: &str,
        event_type: &str,
        payload: Value,
    ) -> String {
        let body = json!({"recipients": [recipient], "event_type": event_type, "payload": payload});
        let response = self
            .client
            .post(format!("{}/v1/events", self.base))
            .bearer_auth(publisher)
            .json(&body)
            .send()
            .await
            .expect("publish");
        assert_eq!(response.status(), 201);
        let body: Value = response.json().await.unwrap();
        body["deliveries"][0]["event_id"].as_str().unwrap().to_owned()
    }

    /// Changes the tenant's policy as an operator would, such as
    /// `{"single_active_session": true}`.
    pub async fn set_tenant_policy(&self, change: Value) {
        let (admin, _) = self.token("ops", CallerKind::Admin, "admin", false).await;
        let response = self
            .client
            .post(format!("{}/v1/admin/tenant-policy", self.base))
            .bearer_auth(admin)
            .json(&change)
            .send()
            .await
            .expect("set the tenant policy");
        assert_eq!(response.status(), 200);
    }

    /// Claims up to `limit` of the agent's events and acknowledges them, as another client
    /// of the same agent would; returns how many it finished.
    pub async fn claim_and_acknowledge(&self, agent: &str, limit: u32) -> usize {
        let claimed: Value = self
            .client
            .post(format!("{}/v1/inbox/claim", self.base))
            .bearer_auth(agent)
            .json(&json!({"limit": limit}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let acks: Vec<Value> = claimed["claims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| json!({"event_id": c["event_id"], "lease_token": c["lease_token"]}))
            .collect();
        let acked = self
            .client
            .post(format!("{}/v1/inbox/acknowledge", self.base))
            .bearer_auth(agent)
            .json(&json!({"acks": acks}))
            .send()
            .await
            .unwrap();
        assert_eq!(acked.status(), 200);
        acks.len()
    }

    /// Every event of the agent's inbox by id (state, attempts, ...).
    pub async fn events(&self, agent: &str) -> HashMap<String, Value> {
        let mut events = HashMap::new();
        let mut after = 0;
        loop {
            let page: Value = self
                .client
                .post(format!("{}/v1/inbox/poll-after-cursor", self.base))
                .bearer_auth(agent)
                .json(&json!({"after_seq": after, "limit": 500}))
                .send()
                .await
                .expect("poll")
                .json()
                .await
                .unwrap();
            for event in page["events"].as_array().expect("a page") {
                events.insert(event["event_id"].as_str().unwrap().to_owned(), event.clone());
            }
            after = page["next_cursor"].as_u64().unwrap();
            if page["more_available"] != true {
                return events;
            }
        }
    }

    /// One event as operators see it (`GET /v1/admin/inboxes/{agent}/events/{id}`): the
    /// envelope with its reason and session, and its history.
    pub async fn admin_event(&self, agent: &str, event_id: &str) -> Value {
        let (admin, _) = self.token("ops", CallerKind::Admin, "admin", false).await;
        let response = self
            .client
            .get(format!("{}/v1/admin/inboxes/{agent}/events/{event_id}", self.base))
            .bearer_auth(admin)
            .send()
            .await
            .expect("read the event as an operator");
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }

    /// Requeues parked events of `agent` as an operator would.
    pub async fn requeue(&self, agent: &str, event_ids: &[&str]) {
        let (admin, _) = self.token("ops", CallerKind::Admin, "admin", false).await;
        let response = self
            .client
            .post(format!("{}/v1/admin/parked/requeue", self.base))
            .bearer_auth(admin)
            .json(&json!({"recipient_id": agent, "event_ids": event_ids}))
            .send()
            .await
            .expect("requeue");
        assert_eq!(response.status(), 200);
        let answer: Value = response.json().await.unwrap();
        assert!(answer["results"].as_array().unwrap().iter().all(|r| r["ok"] == true), "{answer}");
    }

    /// Whether every id in `ids` is in `state` (`acked`, `dead_letter`, ...).
    pub async fn all_in_state(&self, agent: &str, ids: &[String], state: &str) -> bool {
        let events = self.events(agent).await;
        ids.iter().all(|id| events.get(id).is_some_and(|e| e["ack_state"] == state))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running `agent-inbox listen` with its log lines (JSON) collected.
pub struct Listen {
    pub child: Child,
    pub log: Arc<Mutex<Vec<String>>>,
}

/// Flags that make an agent react in test time rather than production time.
pub const QUICK: &[&str] =
    &["--poll-max", "2s", "--reconnect-max", "1s", "--retry-after", "1s", "--shutdown-grace", "2s"];

impl Listen {
    pub fn spawn(base: &str, token: &str, home: &Path, state: &Path, exec: &str, extra: &[&str]) -> Listen {
        let mut command = Command::new(BIN);
        command
            .args(["listen", "--server", base, "--state"])
            .arg(state)
            .args(["--exec", exec, "--log-json"])
            .args(QUICK)
            .args(extra)
            .env("AGENT_INBOX_TOKEN", token)
            .env("AGENT_INBOX_HOME", home)
            .env("AGENT_INBOX_LOG", "info,inbox_client=debug");
        Listen::spawn_command(command)
    }

    pub fn spawn_command(mut command: Command) -> Listen {
        let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start listen");
        let stderr = child.stderr.take().unwrap();
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Listen { child, log }
    }

    /// Whether a log line has `message` and every (field, value) pair given.
    pub fn logged(&self, message: &str, fields: &[(&str, Value)]) -> bool {
        self.log.lock().unwrap().iter().any(|line| {
            let Ok(entry) = serde_json::from_str::<Value>(line) else { return false };
            let found = &entry["fields"];
            found["message"] == message && fields.iter().all(|(k, v)| &found[*k] == v)
        })
    }

    pub fn dump(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        self.child.wait().unwrap()
    }
}

impl Drop for Listen {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A shell handler that appends the event id to `handled` in `dir`.
pub fn append_handler(dir: &TempDir) -> String {
    format!("echo \"$AGENT_INBOX_EVENT_ID\" >> '{}'", dir.path("handled").display())
}

/// Asserts each id was handled exactly once.
pub fn assert_once(handled: &[String], published: &[String]) {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for id in handled {
        *counts.entry(id.as_str()).or_default() += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "handled more than once: {twice:?}");
    let missing: Vec<_> = published.iter().filter(|id| !counts.contains_key(id.as_str())).collect();
    assert!(missing.is_empty(), "never handled: {missing:?}");
    assert_eq!(handled.len(), published.len(), "handled events that were not published");
}
