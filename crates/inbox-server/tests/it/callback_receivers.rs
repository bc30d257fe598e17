//! The webhook receivers the callback tests stand up: small axum servers on 127.0.0.1 that
//! record what they get and answer challenges with their secret, and the waits and signature
//! checks the tests share.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxumStatus, Uri, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use inbox_server::{CallerKind, Config, Resolver};
use inbox_trust::message_signatures::{RequestParts, VerifyingKey};
use inbox_trust::webhooks::{challenge_response, verify_webhook};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::TestServer;

pub(crate) const SECRET: [u8; 32] = [0x5a; 32];

/// A request a receiver got.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub(crate) path: String,
    pub(crate) host: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Received {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    pub(crate) fn is_challenge(&self) -> bool {
        self.json()["signal_type"] == "callback.challenge"
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub(crate) fn parts(&self) -> RequestParts {
        let mut parts = RequestParts::new("POST", "https", &self.host, &self.path);
        for (name, value) in &self.headers {
            parts = parts.with_header(name, value);
        }
        parts
    }
}

#[derive(Default)]
pub(crate) struct ReceiverState {
    pub(crate) secret: Mutex<Vec<u8>>,
    pub(crate) requests: Mutex<Vec<Received>>,
    /// Hints that get no answer within the service's timeout before one is answered.
    pub(crate) hints_to_stall: AtomicUsize,
    /// Answer with a redirect here instead.
    pub(crate) redirect_to: Mutex<Option<String>>,
    /// Never answer a hint (challenges are still answered): a receiver that hangs.
    pub(crate) hang_hints: AtomicBool,
    /// Answer every hint 500.
    pub(crate) fail_hints: AtomicBool,
}

/// A webhook receiver on 127.0.0.1 that answers challenges with its secret.
#[derive(Clone)]
pub(crate) struct Receiver {
    pub(crate) state: Arc<ReceiverState>,
    pub(crate) addr: SocketAddr,
}

impl Receiver {
    pub(crate) async fn start(secret: &[u8]) -> Receiver {
        Self::start_on("127.0.0.1", secret).await
    }

    pub(crate) async fn start_on(ip: &str, secret: &[u8]) -> Receiver {
        let state = Arc::new(ReceiverState { secret: Mutex::new(secret.to_vec()), ..Default::default() });
        let app = axum::Router::new().fallback(receive).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { state, addr }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) fn requests(&self) -> Vec<Received> {
        self.state.requests.lock().unwrap().clone()
    }

    pub(crate) fn hints(&self, path: &str) -> Vec<Received> {
        self.requests().into_iter().filter(|r| r.path == path && !r.is_challenge()).collect()
    }
}

pub(crate) async fn receive(
    State(state): State<Arc<ReceiverState>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received = Received {
        path: uri.path().to_owned(),
        host: headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or_default().to_owned()))
            .collect(),
        body: body.to_vec(),
    };
    let is_challenge = received.is_challenge();
    let value = received.json();
    state.requests.lock().unwrap().push(received);
    if let Some(location) = state.redirect_to.lock().unwrap().clone() {
        return (AxumStatus::TEMPORARY_REDIRECT, [(header::LOCATION, location)]).into_response();
    }
    if is_challenge {
        let secret = state.secret.lock().unwrap().clone();
        let answer = challenge_response(&secret, value["challenge"].as_str().unwrap());
        return axum::Json(json!({"challenge_response": answer})).into_response();
    }
    if state.hang_hints.load(Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    if state.fail_hints.load(Ordering::SeqCst) {
        return AxumStatus::INTERNAL_SERVER_ERROR.into_response();
    }
    let stall =
        state.hints_to_stall.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
    if stall {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    AxumStatus::NO_CONTENT.into_response()
}

/// Answers scripted per host: the n-th lookup gets the n-th answer (the last one repeats).
#[derive(Debug, Default)]
pub(crate) struct ScriptedResolver {
    pub(crate) answers: HashMap<String, Vec<Vec<IpAddr>>>,
    pub(crate) lookups: Mutex<HashMap<String, usize>>,
}

impl ScriptedResolver {
    pub(crate) fn with(mut self, host: &str, answers: &[&[&str]]) -> Self {
        let answers = answers.iter().map(|a| a.iter().map(|ip| ip.parse().unwrap()).collect()).collect();
        self.answers.insert(host.to_owned(), answers);
        self
    }
}

impl Resolver for ScriptedResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        _port: u16,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<Vec<IpAddr>>> + Send + 'a>> {
        Box::pin(async move {
            let mut lookups = self.lookups.lock().unwrap();
            let n = lookups.entry(host.to_owned()).or_default();
            let answers = self
                .answers
                .get(host)
                .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such host"))?;
            let answer = answers[(*n).min(answers.len() - 1)].clone();
            *n += 1;
            Ok(answer)
        })
    }
}

/// Development settings: http to loopback, short timeouts and retries, frequent passes.
pub(crate) fn development(config: &mut Config) {
    config.callbacks.allow_http_loopback = true;
    config.callbacks.timeout = Duration::from_millis(500);
    config.callbacks.retry_base = Duration::from_millis(100);
    config.callbacks.retry_max = Duration::from_millis(300);
    config.callbacks.poll_interval = Duration::from_millis(20);
}

pub(crate) async fn callback_agent(server: &TestServer, tenant: &str, agent: &str) -> String {
    let scope = "inbox.poll inbox.claim inbox.ack callback.register callback.rotate";
    server.token(tenant, agent, CallerKind::Agent, scope).await
}

pub(crate) async fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The registration's delivery log, once an entry matches `found`.
pub(crate) async fn delivery_log_until(
    server: &TestServer,
    token: &str,
    id: &str,
    found: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, log) = server
            .call(Method::GET, &format!("/v1/callback-registrations/{id}/deliveries"), Some(token), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{log}");
        if log["attempts"].as_array().unwrap().iter().any(&found) {
            return log;
        }
        assert!(Instant::now() < deadline, "timed out waiting for a delivery attempt: {log}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub(crate) fn secret_b64(secret: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(secret)
}

pub(crate) fn verify_with(received: &Received, keys: &[(&str, &[u8])]) -> Result<String, String> {
    let now = inbox_api::time::now_ms() / 1000;
    verify_webhook(&received.parts(), &received.body, now, |keyid| {
        keys.iter().find(|(id, _)| *id == keyid).map(|(_, secret)| VerifyingKey::hmac_sha256(secret).unwrap())
    })
    .map(|verified| verified.keyid)
    .map_err(|e| e.to_string())
}
