//! Real-time hints over real connections: SSE and WebSocket streams, the notifier that carries
//! a commit on one node to subscribers on another, and the metrics behind them (stream
//! credentials and subscribe are in `stream_credentials.rs`). Every wait is on a condition with a
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
use tokio_tungstenite::tungstenite;

use crate::harness::{TestServer, assert_problem, both_backends, metric, read};
use crate::stream_clients::{HINT_DEADLINE, Sse, ws_call, ws_connect, ws_next};

both_backends!(
    no_hint_before_commit_and_none_for_a_rollback,
    a_hint_carries_the_approximate_count_of_unacknowledged_events,
    a_hint_reaches_a_subscriber_on_a_second_node,
    a_long_poll_on_one_node_is_released_by_a_commit_on_another,
    reconnecting_behind_the_head_gets_an_immediate_hint,
    websocket_carries_hints_and_claim_ack_round_trips,
    a_client_that_stops_reading_does_not_slow_others,
    killing_an_sse_connection_loses_nothing,
    streams_beat_and_end_promptly_on_shutdown,
    metrics_count_heads_long_polls_streams_and_fetches,
);

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
    // Node B re-reads the database only once a minute, so a release before that is the
    // notifier's, however slow a loaded database makes it.
    let b = a.start_beside(|config| config.inbox.long_poll_recheck = Duration::from_secs(60)).await;
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
    let after_commit = returned_at.saturating_duration_since(published_at);
    assert!(after_commit < Duration::from_secs(15), "released {after_commit:?} after the commit");
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
