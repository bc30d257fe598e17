//! The test clients of the stream endpoints: an SSE reader over reqwest's streaming body with a
//! small line parser, and WebSocket helpers. Every wait is on a condition with a deadline.

use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest as _};

use crate::harness::TestServer;

/// How long a hint may take to arrive: generous for a loaded CI machine, far below anything
/// that would pass without the mechanism under test.
pub(crate) const HINT_DEADLINE: Duration = Duration::from_secs(5);
/// A window in which nothing may arrive: many notifier passes (30 ms each).
const QUIET: Duration = Duration::from_millis(600);

// ---- an SSE client: reqwest's streaming body and a small line parser ----

#[derive(Debug, Default, Clone)]
pub(crate) struct SseEvent {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
    pub retry: Option<String>,
}

pub(crate) struct Sse {
    response: reqwest::Response,
    buffer: String,
}

impl Sse {
    pub(crate) async fn open(
        server: &TestServer,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Sse {
        let mut request =
            server.request(Method::GET, path, token, None).header("accept", "text/event-stream");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("the stream request reaches the server");
        assert_eq!(response.status(), StatusCode::OK, "{path}: {:?}", response.headers());
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Sse { response, buffer: String::new() }
    }

    /// The next event (or retry-only frame), or `None` when the deadline passes or the stream
    /// ends.
    pub(crate) async fn next(&mut self, within: Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                let mut event = SseEvent::default();
                for line in frame.lines() {
                    let (field, value) = line.split_once(':').unwrap_or((line, ""));
                    let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
                    match field {
                        "event" => event.event = value,
                        "id" => event.id = Some(value),
                        "data" => event.data.push_str(&value),
                        "retry" => event.retry = Some(value),
                        _ => {}
                    }
                }
                return Some(event);
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk()).await.ok()?.ok()??;
            self.buffer.push_str(std::str::from_utf8(&chunk).expect("SSE is UTF-8"));
        }
    }

    /// The next `inbox.updated` signal, skipping heartbeats and retry advice.
    pub(crate) async fn next_hint(&mut self, within: Duration) -> Option<Value> {
        let deadline = Instant::now() + within;
        loop {
            let event = self.next(deadline.saturating_duration_since(Instant::now())).await?;
            if event.event == "inbox.updated" {
                let signal: Value = serde_json::from_str(&event.data).expect("the data is JSON");
                assert_eq!(
                    event.id.as_deref(),
                    Some(signal["head_seq"].to_string().as_str()),
                    "id is the head"
                );
                return Some(signal);
            }
        }
    }

    /// Reads hints until one says the head reached `head`.
    pub(crate) async fn wait_for_head(&mut self, head: u64) -> Value {
        let deadline = Instant::now() + HINT_DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let signal = self.next_hint(left).await.unwrap_or_else(|| panic!("no hint for head {head}"));
            if signal["head_seq"].as_u64() >= Some(head) {
                return signal;
            }
        }
    }

    pub(crate) async fn assert_quiet(&mut self, why: &str) {
        if let Some(hint) = self.next_hint(QUIET).await {
            panic!("{why}: got {hint}");
        }
    }
}

pub(crate) type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub(crate) async fn ws_connect(server: &TestServer, token: &str) -> Socket {
    let ws_url = server.base.replace("http://", "ws://") + "/v1/streams/ws";
    let mut request = ws_url.as_str().into_client_request().unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    tokio_tungstenite::connect_async(request).await.expect("the upgrade succeeds").0
}

/// The next JSON text message.
pub(crate) async fn ws_next(socket: &mut Socket) -> Value {
    loop {
        let message = tokio::time::timeout(HINT_DEADLINE, socket.next()).await.expect("a message in time");
        if let tungstenite::Message::Text(text) = message.expect("the socket is open").expect("a frame") {
            return serde_json::from_str(text.as_str()).unwrap();
        }
    }
}

/// Sends one op and returns its reply, skipping signals.
pub(crate) async fn ws_call(socket: &mut Socket, message: Value) -> Value {
    socket.send(tungstenite::Message::Text(message.to_string().into())).await.unwrap();
    loop {
        let value = ws_next(socket).await;
        if value.get("signal_type").is_none() {
            return value;
        }
    }
}
