//! A server on port 0 over a fresh database (started in process through `inbox-testkit`, the
//! one way tests start servers), an HTTP client, and tokens for any caller.

use std::sync::Arc;

use inbox_conformance::{Backend, Harness};
use inbox_core::{RecipientId, TenantId};
use inbox_server::{CallerKind, Config, Overrides, TokenService};
use inbox_testkit::InProcess;
use reqwest::{Method, StatusCode};
use serde_json::Value;

pub struct TestServer {
    pub base: String,
    pub tokens: Arc<TokenService>,
    pub client: reqwest::Client,
    running: Option<InProcess>,
    /// Keeps the database alive; dropped (and the database with it) after the last server on
    /// it stops.
    pub db: Arc<Harness>,
}

impl TestServer {
    pub async fn start(backend: Backend) -> TestServer {
        Self::start_with(backend, |_| {}).await
    }

    pub async fn start_with(backend: Backend, tune: impl FnOnce(&mut Config)) -> TestServer {
        Self::start_overridden(backend, Overrides::default(), tune).await
    }

    /// A server with what is set in code rather than configuration (a scripted resolver).
    pub async fn start_overridden(
        backend: Backend,
        overrides: Overrides,
        tune: impl FnOnce(&mut Config),
    ) -> TestServer {
        Self::start_on(Arc::new(Harness::new(backend).await), overrides, tune).await
    }

    /// A server on `db`, an existing harness's database, with its key file.
    pub async fn start_on_harness(db: Arc<Harness>) -> TestServer {
        Self::start_on(db, Overrides::default(), |_| {}).await
    }

    /// A handle on a node that runs elsewhere (another test server's address), for calls;
    /// stopping it does nothing.
    pub fn at(
        base: &str,
        client: reqwest::Client,
        tokens: Arc<TokenService>,
        db: Arc<Harness>,
    ) -> TestServer {
        TestServer { base: base.to_owned(), tokens, client, running: None, db }
    }

    /// A second node: another server on this server's database, which stays until both stop.
    pub async fn start_beside(&self, tune: impl FnOnce(&mut Config)) -> TestServer {
        Self::start_on(self.db.clone(), Overrides::default(), tune).await
    }

    async fn start_on(db: Arc<Harness>, overrides: Overrides, tune: impl FnOnce(&mut Config)) -> TestServer {
        let mut config = Config::default();
        config.database.url = db.url.clone();
        config.secrets.key_file = Some(db.secrets_key_file.clone());
        config.inbox.scavenge_interval = std::time::Duration::from_millis(200);
        tune(&mut config);
        let server_config = config.clone();
        let running = InProcess::start(|listener, shutdown| {
            inbox_server::run_with(
                server_config,
                overrides,
                listener,
                shutdown,
                tokio::sync::oneshot::channel().0,
            )
        })
        .await;
        let addr = running.addr;
        let tokens = Arc::new(TokenService::new(db.store.clone(), &config).await.expect("token service"));
        // A TLS server is called over https with a client that trusts its test certificate,
        // and that offers HTTP/2 by ALPN.
        let (base, client) = match &config.tls.cert {
            Some(cert) => {
                let pem = std::fs::read(cert).expect("the test certificate");
                let client = reqwest::Client::builder()
                    .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("a PEM certificate"))
                    .build()
                    .unwrap();
                (format!("https://{addr}"), client)
            }
            None => (format!("http://{addr}"), reqwest::Client::new()),
        };
        let server = TestServer { base, tokens, client, running: Some(running), db };
        server.wait_ready().await;
        server
    }

    async fn wait_ready(&self) {
        for _ in 0..200 {
            if let Ok(r) = self.client.get(format!("{}/readyz", self.base)).send().await {
                if r.status().is_success() {
                    return;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        panic!("the server did not become ready");
    }

    /// Stops the server gracefully and waits for it.
    pub async fn stop(mut self) {
        if let Some(running) = self.running.take() {
            running.stop().await.expect("the server stopped cleanly");
        }
    }

    pub async fn token(&self, tenant: &str, subject: &str, kind: CallerKind, scope: &str) -> String {
        self.tokens
            .issue(
                &TenantId::new(tenant).unwrap(),
                &RecipientId::new(subject).unwrap(),
                kind,
                scope,
                None,
                false,
            )
            .await
            .expect("issue a token")
            .access_token
    }

    pub async fn agent(&self, tenant: &str, agent: &str) -> String {
        self.token(tenant, agent, CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES).await
    }

    pub async fn publisher(&self, tenant: &str) -> String {
        self.token(tenant, "publisher_app", CallerKind::Publisher, "events.publish rooms.write").await
    }

    /// Sends a request and returns the status and the JSON body (Null when empty).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let response =
            self.request(method, path, token, body).send().await.expect("the request reaches the server");
        read(response).await
    }

    pub fn request(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> reqwest::RequestBuilder {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        request
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(token), Some(body)).await
    }

    /// Publishes one event to `recipients` and returns the response body.
    pub async fn publish(&self, publisher: &str, recipients: &[&str], payload: Value) -> Value {
        let (status, body) = self
            .post("/v1/events", publisher, serde_json::json!({ "recipients": recipients, "event_type": "task.assigned", "payload": payload }))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body
    }
}

/// One series of the server's `/metrics` (`name{labels}`), 0 when it is absent.
pub async fn metric(server: &TestServer, series: &str) -> f64 {
    let text =
        server.client.get(format!("{}/metrics", server.base)).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .map_or(0.0, |value| value.parse().unwrap())
}

pub async fn read(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().await.expect("a body");
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, body)
}

/// Asserts a problem document with the given status and code, and returns it.
pub fn assert_problem(result: &(StatusCode, Value), status: StatusCode, code: &str) {
    let (got, body) = result;
    assert_eq!(*got, status, "expected {status} {code}, got {got}: {body}");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["status"], status.as_u16(), "{body}");
    assert_eq!(body["type"], format!("urn:agent-inbox:problem:{code}"));
    assert!(body["detail"].as_str().is_some_and(|d| d.len() > 10), "a sentence a person can act on: {body}");
}

/// Runs an async test body against both backends, each with a fresh server.
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name(inbox_conformance::Backend::Sqlite).await;
                }
            )*
        }
        mod mysql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name(inbox_conformance::Backend::MySql).await;
                }
            )*
        }
    };
}
pub(crate) use both_backends;
