//! Real-time hints over real connections: SSE and WebSocket streams, the notifier that carries
//! a commit on one node to subscribers on another, stream tickets and cookies, subscribe and
//! session heartbeats, and the metrics behind them. Every wait is on a condition with a
//! deadline; the only fixed windows are those that assert that nothing arrives.

use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use inbox_conformance::Backend;
use inbox_core::{EventBody, EventType, Recipient, RecipientId, TenantId};
use inbox_server::CallerKind;
use inbox_store::{Dialect, Publish};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest as _};

use crate::harness::{TestServer, assert_problem, both_backends, read};

both_backends!(
    no_hint_before_commit_and_none_for_a_rollback,
    a_hint_carries_the_approximate_count_of_unacknowledged_events,
    a_hint_reaches_a_subscriber_on_a_second_node,
    a_long_poll_on_one_node_is_released_by_a_commit_on_another,
    reconnecting_behind_the_head_gets_an_immediate_hint,
    websocket_carries_hints_and_claim_ack_round_trips,
    a_client_that_stops_reading_does_not_slow_others,
    killing_an_sse_connection_loses_nothing,
    stream_tickets_work_once_on_any_node,
    the_stream_cookie_authenticates_streams_of_this_origin,
    subscribe_recommends_a_transport_and_sessions_stay_alive,
    streams_beat_and_end_promptly_on_shutdown,
    metrics_count_heads_long_polls_streams_and_fetches,
);

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

    async fn assert_quiet(&mut self, why: &str) {
        if let Some(hint) = self.next_hint(QUIET).await {
            panic!("{why}: got {hint}");
        }
    }
}

fn publish_of(recipients: &[&str]) -> Publish {
    Publish::new(
        TenantId::new("t1").unwrap(),
        recipients.iter().map(|r| Recipient::agent(RecipientId::new(*r).unwrap())).collect(),
        EventType::new("task.assigned").unwrap(),
        EventBody::json("{}").unwrap(),
    )
}

/// Publishes through the library inside a host transaction on a raw connection, runs `during`
/// while that transaction is open, then commits or rolls back.
async fn publish_held_open(server: &TestServer, commit: bool, during: impl Future<Output = ()>) {
    use sqlx::Connection as _;
    let publish = publish_of(&["agent_alpha"]);
    let store = &server.db.store;
    match store.dialect() {
        Dialect::MySql => {
            let mut conn = sqlx::MySqlConnection::connect(&server.db.url).await.unwrap();
            let mut tx = conn.begin().await.unwrap();
            store.inbox().publish_in(&mut *tx, &publish).await.unwrap();
            during.await;
            if commit { tx.commit().await.unwrap() } else { tx.rollback().await.unwrap() }
        }
        Dialect::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(&server.db.url).await.unwrap();
            let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.unwrap();
            store.inbox().publish_in(&mut *tx, &publish).await.unwrap();
            during.await;
            if commit { tx.commit().await.unwrap() } else { tx.rollback().await.unwrap() }
        }
    }
}

async fn metric(server: &TestServer, series: &str) -> f64 {
    let text =
        server.client.get(format!("{}/metrics", server.base)).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .map_or(0.0, |value| value.parse().unwrap())
}

async fn wait_for_metric(server: &TestServer, series: &str, value: f64) {
    let deadline = Instant::now() + HINT_DEADLINE;
    while metric(server, series).await != value {
        assert!(Instant::now() < deadline, "{series} never became {value}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---- the tests ----

async fn no_hint_before_commit_and_none_for_a_rollback(backend: Backend) {
    let server = TestServer::start(backend).await;
    let agent = server.agent("t1", "agent_alpha").await;
    let mut stream = Sse::open(&server, "/v1/streams/sse", Some(&agent), &[]).await;
    let opening = stream.next(HINT_DEADLINE).await.expect("the opening frame");
    assert_eq!(
        (opening.retry.as_deref(), opening.event.as_str()),
        (Some("3000"), ""),
        "retry advice, no hint"
    );

    publish_held_open(&server, false, stream.assert_quiet("a hint while the publish was open")).await;
    stream.assert_quiet("a hint for a rolled-back publish").await;
    publish_held_open(&server, true, stream.assert_quiet("a hint while the publish was open")).await;
    let signal = stream.wait_for_head(1).await;
    assert_eq!(signal["signal_type"], "inbox.updated");
    assert_eq!(
        (signal["tenant_id"].as_str(), signal["recipient_id"].as_str()),
        (Some("t1"), Some("agent_alpha"))
    );
    assert_eq!(signal["head_seq"], 1, "the rolled-back publish took no sequence");
    assert!(signal["sent_at_utc"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert_eq!(signal["delivery_id"].as_str().map(str::len), Some(36), "a UUID: {signal}");
    server.stop().await;
}

async fn a_hint_carries_the_approximate_count_of_unacknowledged_events(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    let mut stream = Sse::open(&server, "/v1/streams/sse", Some(&agent), &[]).await;
    for n in 1..=3 {
        server.publish(&publisher, &["agent_alpha"], json!({"n": n})).await;
    }
    let unacked = |signal: &Value| signal["approximate_unacked"].as_u64();
    assert_eq!(unacked(&stream.wait_for_head(3).await), Some(3), "three available events");

    let (status, claimed) = server.post("/v1/inbox/claim", &agent, json!({"limit": 2})).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    let first = &claimed["claims"][0];
    let ack = json!({"acks": [{"event_id": first["event_id"], "lease_token": first["lease_token"]}]});
    let (status, acked) = server.post("/v1/inbox/acknowledge", &agent, ack).await;
    assert_eq!(status, StatusCode::OK, "{acked}");
    server.publish(&publisher, &["agent_alpha"], json!({"n": 4})).await;
    assert_eq!(
        unacked(&stream.wait_for_head(4).await),
        Some(3),
        "one acknowledged leaves one claimed, one available and the new one"
    );
    server.stop().await;
}

async fn a_hint_reaches_a_subscriber_on_a_second_node(backend: Backend) {
    let a = TestServer::start(backend).await;
    let b = a.start_beside(|_| {}).await;
    let publisher = a.publisher("t1").await;
    let agent = b.agent("t1", "agent_alpha").await;
    let mut on_b = Sse::open(&b, "/v1/streams/sse", Some(&agent), &[]).await;
    for n in 1..=3u64 {
        let published = Instant::now();
        a.publish(&publisher, &["agent_alpha", "agent_beta"], json!({"n": n})).await;
        let signal = on_b.wait_for_head(n).await;
        assert_eq!(signal["head_seq"], n);
        assert!(published.elapsed() < HINT_DEADLINE);
    }
    assert!(metric(&b, "agent_inbox_signals_read_total").await >= 3.0, "node B learned from the database");
    b.stop().await;
    a.stop().await;
}

async fn a_long_poll_on_one_node_is_released_by_a_commit_on_another(backend: Backend) {
    let a = TestServer::start(backend).await;
    let b = a.start_beside(|_| {}).await;
    let publisher = a.publisher("t1").await;
    let agent = b.agent("t1", "agent_alpha").await;
    let ((polled, returned_at), published_at) = tokio::join!(
        async {
            let polled = b
                .post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 0, "wait_seconds": 20}))
                .await;
            (polled, Instant::now())
        },
        async {
            // Publish only once the long poll is parked on node B.
            wait_for_metric(&b, "agent_inbox_connected_streams{transport=\"long-poll\"}", 1.0).await;
            a.publish(&publisher, &["agent_alpha"], json!({"from": "node a"})).await;
            Instant::now()
        }
    );
    assert_eq!(polled.0, StatusCode::OK, "{}", polled.1);
    assert_eq!(polled.1["events"][0]["payload"]["from"], "node a");
    // The long poll parked just before the publish and re-reads the database only every 5 s:
    // a release right after the commit is the notifier's.
    let after_commit = returned_at.saturating_duration_since(published_at);
    assert!(after_commit < Duration::from_secs(2), "released {after_commit:?} after the commit");
    b.stop().await;
    a.stop().await;
}

async fn reconnecting_behind_the_head_gets_an_immediate_hint(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    for _ in 0..3 {
        server.publish(&publisher, &["agent_alpha"], json!({})).await;
    }
    let mut behind = Sse::open(&server, "/v1/streams/sse", Some(&agent), &[("last-event-id", "1")]).await;
    let opening = behind.next(HINT_DEADLINE).await.unwrap();
    assert_eq!(
        (opening.event.as_str(), opening.id.as_deref()),
        ("inbox.updated", Some("3")),
        "in the first frame"
    );
    assert!(opening.retry.is_some());
    let mut by_query = Sse::open(&server, "/v1/streams/sse?last_event_id=2", Some(&agent), &[]).await;
    assert_eq!(by_query.next_hint(HINT_DEADLINE).await.unwrap()["head_seq"], 3);
    let mut current = Sse::open(&server, "/v1/streams/sse", Some(&agent), &[("last-event-id", "3")]).await;
    current.assert_quiet("a client at the head gets no hint").await;
    server.publish(&publisher, &["agent_alpha"], json!({})).await;
    assert_eq!(current.wait_for_head(4).await["head_seq"], 4);
    assert_eq!(metric(&server, "agent_inbox_stream_reconnects_total{transport=\"sse\"}").await, 3.0);

    let seed_000 =
        Sse::open(&server, "/api/v1/agents/agent_alpha/subscribe", Some(&agent), &[("last-event-id", "0")]);
    // Seed 000's names on seed 000's route: `inbox_updated` with `cursor_hint`.
    let mut seed_000 = seed_000.await;
    let event = loop {
        let event = seed_000.next(HINT_DEADLINE).await.expect("a hint on seed 000's route");
        if event.event != "heartbeat" && !event.data.is_empty() {
            break event;
        }
    };
    assert_eq!(event.event, "inbox_updated");
    let data: Value = serde_json::from_str(&event.data).unwrap();
    assert_eq!((data["cursor_hint"].as_u64(), data["head_seq"].as_u64()), (Some(4), Some(4)), "{data}");
    assert_eq!(event.id.as_deref(), Some("4"));
    let get = |path: &str, headers: Vec<(&'static str, &'static str)>| {
        let mut request = server.request(Method::GET, path, Some(&agent), None);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        async move { read(request.send().await.unwrap()).await }
    };
    assert_problem(
        &get("/v1/streams/sse", vec![("last-event-id", "three")]).await,
        StatusCode::BAD_REQUEST,
        "invalid_field",
    );
    assert_problem(&get("/v1/streams/sse?cursor=1", vec![]).await, StatusCode::BAD_REQUEST, "invalid_query");
    assert_problem(
        &get("/api/v1/agents/agent_beta/subscribe", vec![]).await,
        StatusCode::FORBIDDEN,
        "tenant_mismatch",
    );
    server.stop().await;
}

pub(crate) type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn ws_connect(server: &TestServer, token: &str) -> Socket {
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

async fn websocket_carries_hints_and_claim_ack_round_trips(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    let mut socket = ws_connect(&server, &agent).await;
    server.publish(&publisher, &["agent_alpha"], json!({"job": 1})).await;
    let hint = ws_next(&mut socket).await;
    assert_eq!((hint["signal_type"].as_str(), hint["head_seq"].as_u64()), (Some("inbox.updated"), Some(1)));

    let claimed =
        ws_call(&mut socket, json!({"op": "claim", "id": "c1", "body": {"lease_seconds": 60}})).await;
    assert_eq!((claimed["id"].as_str(), claimed["status"].as_u64()), (Some("c1"), Some(200)), "{claimed}");
    let claim = &claimed["body"]["claims"][0];
    assert_eq!(claim["event"]["payload"]["job"], 1);
    let (event_id, token) = (claim["event_id"].clone(), claim["lease_token"].clone());

    let beat = json!({"op": "heartbeat", "id": "h1", "body": {"leases": [{"event_id": event_id, "lease_token": token, "extend_by_seconds": 30}]}});
    let beat = ws_call(&mut socket, beat).await;
    assert!(beat["body"]["leases"][0]["visibility_lease_until_utc"].is_string(), "{beat}");
    let stranger = format!("lease_{}", "0".repeat(32));
    let wrong = json!({"op": "release", "id": "r1", "body": {"event_id": event_id, "lease_token": stranger}});
    let wrong = ws_call(&mut socket, wrong).await;
    assert_eq!((wrong["id"].as_str(), wrong["status"].as_u64()), (Some("r1"), Some(409)), "{wrong}");
    assert_eq!(wrong["body"]["code"], "lease_mismatch", "the same problem as HTTP: {wrong}");
    let acked = json!({"op": "acknowledge", "id": "a1", "body": {"acks": [{"event_id": event_id, "lease_token": token}]}});
    let acked = ws_call(&mut socket, acked).await;
    assert_eq!(
        (acked["status"].as_u64(), acked["body"]["results"][0]["ack_state"].as_str()),
        (Some(200), Some("acked"))
    );

    let unknown = ws_call(&mut socket, json!({"op": "frobnicate", "id": "x"})).await;
    assert_eq!(
        (unknown["status"].as_u64(), unknown["body"]["code"].as_str()),
        (Some(400), Some("unknown_op"))
    );
    let typo = ws_call(&mut socket, json!({"op": "claim", "id": "t", "body": {"limmit": 1}})).await;
    assert_eq!(typo["body"]["code"], "unknown_field", "{typo}");
    socket.send(tungstenite::Message::Text("{not json".into())).await.unwrap();
    let malformed = ws_next(&mut socket).await;
    assert_eq!(
        (malformed["status"].as_u64(), malformed["body"]["code"].as_str()),
        (Some(400), Some("malformed_json"))
    );
    let (_, http) = server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 0})).await;
    assert_eq!(http["events"][0]["ack_state"], "acked", "the WebSocket ack is the same ack");

    // Scopes are checked per op: a token that may subscribe but not claim.
    let watcher = server.token("t1", "agent_alpha", CallerKind::Agent, "stream.subscribe").await;
    let mut limited = ws_connect(&server, &watcher).await;
    let refused = ws_call(&mut limited, json!({"op": "claim", "id": "c"})).await;
    assert_eq!(
        (refused["status"].as_u64(), refused["body"]["code"].as_str()),
        (Some(403), Some("scope_missing"))
    );
    let not_ws = server.call(Method::GET, "/v1/streams/ws", Some(&agent), None).await;
    assert_problem(&not_ws, StatusCode::BAD_REQUEST, "websocket_upgrade_required");
    drop((socket, limited));
    server.stop().await;
}

async fn a_client_that_stops_reading_does_not_slow_others(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let stalled_agent = server.agent("t1", "agent_alpha").await;
    let reader_agent = server.agent("t1", "agent_beta").await;
    // A client with a tiny receive window that sends its request and never reads.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(2048).unwrap();
    let mut stalled =
        socket.connect(server.base.trim_start_matches("http://").parse().unwrap()).await.unwrap();
    let request = format!(
        "GET /v1/streams/sse HTTP/1.1\r\nhost: test\r\naccept: text/event-stream\r\nauthorization: Bearer {stalled_agent}\r\n\r\n"
    );
    stalled.write_all(request.as_bytes()).await.unwrap();
    wait_for_metric(&server, "agent_inbox_connected_streams{transport=\"sse\"}", 1.0).await;
    let mut reader = Sse::open(&server, "/v1/streams/sse", Some(&reader_agent), &[]).await;

    const PUBLISHES: u64 = 150;
    let started = Instant::now();
    for n in 1..=PUBLISHES {
        server.publish(&publisher, &["agent_alpha", "agent_beta"], json!({"n": n})).await;
        if n % 50 == 0 {
            // The reading client keeps up while the other one is stalled.
            assert_eq!(reader.wait_for_head(n).await["head_seq"], n);
        }
    }
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(60), "{PUBLISHES} publishes took {elapsed:?}");

    // When the stalled client finally reads, hints were coalesced: the latest head is there.
    let mut seen = Vec::new();
    let deadline = Instant::now() + HINT_DEADLINE;
    let wanted = format!("\"head_seq\":{PUBLISHES}");
    while !String::from_utf8_lossy(&seen).contains(&wanted) {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout_at(deadline.into(), stalled.read(&mut chunk))
            .await
            .expect("the latest head")
            .unwrap();
        assert!(n > 0, "the stream stayed open");
        seen.extend_from_slice(&chunk[..n]);
    }
    let hints = String::from_utf8_lossy(&seen).matches("event: inbox.updated").count();
    assert!(hints as u64 <= PUBLISHES, "never more hints than commits ({hints})");
    drop(stalled);
    server.stop().await;
}

async fn killing_an_sse_connection_loses_nothing(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    let mut stream = Sse::open(&server, "/v1/streams/sse", Some(&agent), &[]).await;
    for n in 1..=5 {
        server.publish(&publisher, &["agent_alpha"], json!({"n": n})).await;
    }
    let seen = stream.wait_for_head(5).await["head_seq"].as_u64().unwrap();
    // The connection dies with hints still unread, and more work commits after.
    for n in 6..=8 {
        server.publish(&publisher, &["agent_alpha"], json!({"n": n})).await;
    }
    drop(stream);
    for n in 9..=10 {
        server.publish(&publisher, &["agent_alpha"], json!({"n": n})).await;
    }
    wait_for_metric(&server, "agent_inbox_connected_streams{transport=\"sse\"}", 0.0).await;
    // Recovery is the cursor, not the stream.
    let (_, page) =
        server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 0, "limit": 100})).await;
    let seqs: Vec<u64> =
        page["events"].as_array().unwrap().iter().map(|e| e["inbox_seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=10).collect::<Vec<_>>(), "every event, in order");
    let mut payloads: Vec<u64> =
        page["events"].as_array().unwrap().iter().map(|e| e["payload"]["n"].as_u64().unwrap()).collect();
    payloads.sort_unstable();
    assert_eq!(payloads, (1..=10).collect::<Vec<_>>());
    let last_seen = seen.to_string();
    let mut resumed =
        Sse::open(&server, "/v1/streams/sse", Some(&agent), &[("last-event-id", &last_seen)]).await;
    assert_eq!(
        resumed.next_hint(HINT_DEADLINE).await.unwrap()["head_seq"],
        10,
        "told at once how far behind"
    );
    server.stop().await;
}

async fn stream_tickets_work_once_on_any_node(backend: Backend) {
    let a = TestServer::start_with(backend, |c| c.limits.waiters_per_agent = 2).await;
    let b = a.start_beside(|c| c.limits.waiters_per_agent = 2).await;
    let publisher = a.publisher("t1").await;
    let agent = a.agent("t1", "agent_alpha").await;
    let (status, minted) = a.post("/v1/streams/tickets", &agent, json!({"ttl_seconds": 30})).await;
    assert_eq!(status, StatusCode::CREATED, "{minted}");
    let ticket = minted["ticket"].as_str().unwrap().to_owned();
    assert!(ticket.starts_with("st_") && ticket.len() == 67);
    assert_eq!(minted["expires_in"], 30);
    assert_eq!(minted["sse_url"], format!("/v1/streams/sse?ticket={ticket}"));
    assert!(minted["websocket_url"].as_str().unwrap().starts_with("ws://"), "{minted}");

    // Minted on A, redeemed on B, without any Authorization header.
    let mut stream = Sse::open(&b, minted["sse_url"].as_str().unwrap(), None, &[]).await;
    a.publish(&publisher, &["agent_alpha"], json!({})).await;
    assert_eq!(stream.wait_for_head(1).await["head_seq"], 1);
    let again =
        read(b.request(Method::GET, minted["sse_url"].as_str().unwrap(), None, None).send().await.unwrap())
            .await;
    assert_problem(&again, StatusCode::UNAUTHORIZED, "invalid_ticket");
    let forged = a.call(Method::GET, "/v1/streams/sse?ticket=st_nope", None, None).await;
    assert_problem(&forged, StatusCode::UNAUTHORIZED, "invalid_ticket");
    assert_problem(
        &a.call(Method::GET, "/v1/streams/sse", None, None).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );

    // The WebSocket takes a ticket too.
    let (_, for_ws) = a.post("/v1/streams/tickets", &agent, json!({})).await;
    assert_eq!(for_ws["expires_in"], 60);
    let (mut socket, _) =
        tokio_tungstenite::connect_async(for_ws["websocket_url"].as_str().unwrap()).await.unwrap();
    let first = tokio::time::timeout(HINT_DEADLINE, socket.next()).await.unwrap().unwrap().unwrap();
    assert!(first.to_text().unwrap().contains("\"head_seq\":1"), "the head at connect: {first}");

    // Node A's two slots for this agent: the WebSocket and one more stream. A third is refused.
    let second = Sse::open(&a, "/v1/streams/sse", Some(&agent), &[]).await;
    let full = a.call(Method::GET, "/v1/streams/sse", Some(&agent), None).await;
    assert_problem(&full, StatusCode::TOO_MANY_REQUESTS, "too_many_waiters");
    drop((socket, second));

    let no_scope = a.token("t1", "agent_alpha", CallerKind::Agent, "inbox.poll").await;
    assert_problem(
        &a.post("/v1/streams/tickets", &no_scope, json!({})).await,
        StatusCode::FORBIDDEN,
        "scope_missing",
    );
    assert_problem(
        &a.call(Method::GET, "/v1/streams/sse", Some(&no_scope), None).await,
        StatusCode::FORBIDDEN,
        "scope_missing",
    );
    assert_problem(
        &a.post("/v1/streams/tickets", &agent, json!({"ttl_seconds": 61})).await,
        StatusCode::BAD_REQUEST,
        "invalid_field",
    );
    assert_problem(
        &a.post("/v1/streams/tickets", &agent, json!({"session_id": "sess_unknown"})).await,
        StatusCode::NOT_FOUND,
        "session_not_found",
    );
    drop(stream);
    b.stop().await;
    a.stop().await;
}

async fn the_stream_cookie_authenticates_streams_of_this_origin(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    let response =
        server.request(Method::POST, "/v1/streams/cookie", Some(&agent), None).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let set_cookie = response.headers()["set-cookie"].to_str().unwrap().to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=900"] {
        assert!(set_cookie.contains(attribute), "{set_cookie}");
    }
    let (_, body) = read(response).await;
    assert!(body.get("ticket").is_none(), "the credential is only in the cookie: {body}");
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    server.publish(&publisher, &["agent_alpha"], json!({})).await;
    for _ in 0..2 {
        let mut stream = Sse::open(&server, "/v1/streams/sse", None, &[("cookie", &cookie)]).await;
        assert_eq!(stream.next_hint(HINT_DEADLINE).await.unwrap()["head_seq"], 1, "reusable, for reconnects");
    }
    let ws_url = server.base.replace("http://", "ws://") + "/v1/streams/ws";
    let mut request = ws_url.as_str().into_client_request().unwrap();
    request.headers_mut().insert("cookie", cookie.parse().unwrap());
    request.headers_mut().insert("origin", "https://evil.example".parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Err(tungstenite::Error::Http(response)) => assert_eq!(response.status(), StatusCode::FORBIDDEN),
        other => panic!("a cross-origin cookie WebSocket was accepted: {other:?}"),
    }
    let mut request = ws_url.as_str().into_client_request().unwrap();
    request.headers_mut().insert("cookie", cookie.parse().unwrap());
    let origin = server.base.clone();
    request.headers_mut().insert("origin", origin.parse().unwrap());
    assert!(tokio_tungstenite::connect_async(request).await.is_ok(), "same origin is fine");
    let bad = server.call(Method::GET, "/v1/streams/sse", None, None).await;
    assert_problem(&bad, StatusCode::UNAUTHORIZED, "unauthorized");
    let stale = read(
        server
            .request(Method::GET, "/v1/streams/sse", None, None)
            .header("cookie", "agent_inbox_stream=sc_00")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_problem(&stale, StatusCode::UNAUTHORIZED, "invalid_stream_cookie");
    server.stop().await;
}

async fn subscribe_recommends_a_transport_and_sessions_stay_alive(backend: Backend) {
    let server = TestServer::start(backend).await;
    let agent = server.agent("t1", "agent_alpha").await;
    let subscribe = |transports: Value, token: String| {
        let server = &server;
        async move {
            server
                .post("/v1/agent-sessions/subscribe", &token, json!({"device_id": "desktop_01", "supported_transports": transports, "last_seen_seq": 0}))
                .await
        }
    };
    let (status, all) = subscribe(json!(["sse", "websocket", "long-poll", "poll"]), agent.clone()).await;
    assert_eq!(status, StatusCode::OK, "{all}");
    let session = all["session_id"].as_str().unwrap().to_owned();
    assert_eq!(all["recommended_transport"], "sse");
    assert_eq!(all["sse_url"], format!("/v1/streams/sse?session_id={session}"));
    let ws = all["websocket_url"].as_str().unwrap();
    assert!(
        ws.starts_with("ws://127.0.0.1:") && ws.ends_with(&format!("/v1/streams/ws?session_id={session}")),
        "{ws}"
    );
    assert_eq!(all["heartbeat_interval_seconds"], 30);
    assert_eq!(
        subscribe(json!(["websocket", "poll"]), agent.clone()).await.1["recommended_transport"],
        "websocket"
    );
    assert_eq!(
        subscribe(json!(["long-poll", "poll"]), agent.clone()).await.1["recommended_transport"],
        "long-poll"
    );
    let polling_only = server.token("t1", "agent_alpha", CallerKind::Agent, "inbox.poll").await;
    let (_, no_streams) = subscribe(json!(["sse", "long-poll"]), polling_only).await;
    assert_eq!(no_streams["recommended_transport"], "long-poll", "no stream.subscribe, no SSE");
    assert!(no_streams["sse_url"].is_null());

    // The stream follows the session URL, and keeps the session alive.
    let mut stream = Sse::open(&server, all["sse_url"].as_str().unwrap(), Some(&agent), &[]).await;
    stream.next(HINT_DEADLINE).await.unwrap();
    let transport = server
        .db
        .scalar("SELECT COUNT(*) AS n FROM agent_session WHERE session_id = ? AND transport = 'sse' AND status = 'active'", &[&session])
        .await;
    assert_eq!(transport, 1);
    let (status, beat) = server
        .post(&format!("/v1/agent-sessions/{session}/heartbeat"), &agent, json!({"last_seen_seq": 0}))
        .await;
    assert_eq!(status, StatusCode::OK, "{beat}");
    assert_eq!(
        (beat["status"].as_str(), beat["heartbeat_interval_seconds"].as_u64()),
        (Some("active"), Some(30))
    );
    let empty =
        server.request(Method::POST, &format!("/v1/agent-sessions/{session}/heartbeat"), Some(&agent), None);
    assert_eq!(empty.send().await.unwrap().status(), StatusCode::OK, "the body is optional");
    let other = server.agent("t1", "agent_beta").await;
    let stranger = server.post(&format!("/v1/agent-sessions/{session}/heartbeat"), &other, json!({})).await;
    assert_problem(&stranger, StatusCode::NOT_FOUND, "session_not_found");
    let theirs =
        server.call(Method::GET, &format!("/v1/streams/sse?session_id={session}"), Some(&other), None).await;
    assert_problem(&theirs, StatusCode::NOT_FOUND, "session_not_found");
    let bad = server.post("/v1/agent-sessions/bad%20id/heartbeat", &agent, json!({})).await;
    assert_problem(&bad, StatusCode::BAD_REQUEST, "invalid_field");
    drop(stream);
    server.stop().await;
}

async fn streams_beat_and_end_promptly_on_shutdown(backend: Backend) {
    let server =
        TestServer::start_with(backend, |c| c.sessions.heartbeat_interval = Duration::from_secs(1)).await;
    let agent = server.agent("t1", "agent_alpha").await;
    let mut stream = Sse::open(&server, "/v1/streams/sse", Some(&agent), &[]).await;
    stream.next(HINT_DEADLINE).await.expect("the opening frame");
    let beat = stream.next(HINT_DEADLINE).await.expect("a heartbeat within the interval");
    assert_eq!((beat.event.as_str(), beat.data.as_str(), beat.id), ("heartbeat", "{}", None));

    let mut socket = ws_connect(&server, &agent).await;
    assert_eq!(ws_next(&mut socket).await["signal_type"], "heartbeat");

    let stopped = Instant::now();
    let sse_ended = async {
        // Heartbeats may still arrive; the stream must then end.
        while stream.next(HINT_DEADLINE).await.is_some() {
            assert!(stopped.elapsed() < HINT_DEADLINE, "the SSE stream did not end");
        }
    };
    let (_, (), closed) = tokio::join!(server.stop(), sse_ended, async {
        loop {
            match tokio::time::timeout(HINT_DEADLINE, socket.next()).await.expect("closed in time") {
                Some(Ok(tungstenite::Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                Some(Ok(_)) => continue,
                _ => return None,
            }
        }
    });
    assert_eq!(closed, Some(1001), "the WebSocket said going away");
    assert!(stopped.elapsed() < Duration::from_secs(3), "shutdown took {:?}", stopped.elapsed());
}

async fn metrics_count_heads_long_polls_streams_and_fetches(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    server.publish(&publisher, &["agent_alpha"], json!({})).await;
    let head = server.request(Method::GET, "/v1/inbox/head", Some(&agent), None).send().await.unwrap();
    let etag = head.headers()["etag"].to_str().unwrap().to_owned();
    let conditional =
        server.request(Method::GET, "/v1/inbox/head", Some(&agent), None).header("if-none-match", etag);
    assert_eq!(conditional.send().await.unwrap().status(), StatusCode::NOT_MODIFIED);
    let (_, empty) =
        server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 1, "wait_seconds": 1})).await;
    assert_eq!(empty["events"].as_array().unwrap().len(), 0);
    server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 0, "wait_seconds": 1})).await;
    let mut stream = Sse::open(&server, "/v1/streams/sse", Some(&agent), &[]).await;
    stream.wait_for_head(1).await;
    server.post("/v1/inbox/claim", &agent, json!({})).await;

    let expected = [
        ("agent_inbox_head_requests_total{result=\"modified\"}", 1.0),
        ("agent_inbox_head_requests_total{result=\"not_modified\"}", 1.0),
        ("agent_inbox_long_polls_total{outcome=\"timeout\"}", 1.0),
        ("agent_inbox_long_polls_total{outcome=\"events\"}", 1.0),
        ("agent_inbox_stream_connects_total{transport=\"sse\"}", 1.0),
        ("agent_inbox_connected_streams{transport=\"sse\"}", 1.0),
        ("agent_inbox_connected_streams{transport=\"long-poll\"}", 0.0),
        ("agent_inbox_hints_sent_total{tenant=\"t1\",transport=\"sse\"}", 1.0),
        ("agent_inbox_fetches_total{tenant=\"t1\",kind=\"poll\"}", 2.0),
        ("agent_inbox_fetches_total{tenant=\"t1\",kind=\"claim\"}", 1.0),
    ];
    for (series, value) in expected {
        assert_eq!(metric(&server, series).await, value, "{series}");
    }
    // Signals read by this node's notifier carry their publish-to-signal latency.
    wait_for_metric(&server, "agent_inbox_signals_read_total", 1.0).await;
    assert_eq!(metric(&server, "agent_inbox_publish_to_signal_seconds_count").await, 1.0);
    drop(stream);
    server.stop().await;
}
