//! Seed 001's single-active-session policy over real HTTP: off by default (sessions of one
//! identity share work through claims), and when a tenant turns it on, only an agent's newest
//! session takes new work, while leases an older one holds still finish; superseded streams
//! get a last signal and close, on any node.

use std::time::Duration;

use futures_util::StreamExt as _;
use inbox_conformance::Backend;
use inbox_server::CallerKind;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest as _};

use crate::harness::{TestServer, assert_problem, both_backends};
use crate::stream_clients::{HINT_DEADLINE, Socket, Sse, ws_call, ws_next};

both_backends!(
    only_the_newest_session_takes_work_under_the_policy,
    superseded_streams_get_a_last_signal_and_close_on_any_node,
);

const AGENT: &str = "agent_alpha";

async fn subscribe(server: &TestServer, token: &str) -> String {
    let (status, body) = server.post("/v1/agent-sessions/subscribe", token, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["session_id"].as_str().unwrap().to_owned()
}

async fn set_policy(server: &TestServer, single_active_session: bool) -> Value {
    let admin = server.token("t1", "ops", CallerKind::Admin, "admin").await;
    let (status, policy) = server
        .post("/v1/admin/tenant-policy", &admin, json!({"single_active_session": single_active_session}))
        .await;
    assert_eq!(status, StatusCode::OK, "{policy}");
    policy
}

async fn claim(server: &TestServer, agent: &str, body: Value) -> (StatusCode, Value) {
    server.post("/v1/inbox/claim", agent, body).await
}

async fn only_the_newest_session_takes_work_under_the_policy(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", AGENT).await;
    for n in 0..8 {
        server.publish(&publisher, &[AGENT], json!({"n": n})).await;
    }

    // Off (the default): two sessions of one identity, and no session at all, all claim.
    let first = subscribe(&server, &agent).await;
    let second = subscribe(&server, &agent).await;
    for body in [json!({"session_id": first, "limit": 1}), json!({"limit": 1})] {
        let (status, claimed) = claim(&server, &agent, body).await;
        assert_eq!(
            (status, claimed["claims"].as_array().map(Vec::len)),
            (StatusCode::OK, Some(1)),
            "{claimed}"
        );
    }

    // On: the newest session so far (`second`) is the active one at once.
    let policy = set_policy(&server, true).await;
    assert_eq!(
        policy,
        json!({"tenant_id": "t1", "signatures_required": false, "single_active_session": true, "fair_claims": false,
            "pending_events_max": 0, "stored_bytes_max": 0})
    );
    let admin = server.token("t1", "ops", CallerKind::Admin, "admin").await;
    let (_, read_back) = server.call(Method::GET, "/v1/admin/tenant-policy", Some(&admin), None).await;
    assert_eq!(read_back["single_active_session"], true);
    let refused = claim(&server, &agent, json!({"session_id": first, "limit": 1})).await;
    assert_problem(&refused, StatusCode::CONFLICT, "session_superseded");
    assert_eq!(refused.1["session_id"], first.as_str());
    assert_problem(
        &claim(&server, &agent, json!({"limit": 1})).await,
        StatusCode::CONFLICT,
        "session_required",
    );
    let unknown = claim(&server, &agent, json!({"session_id": "sess_unknown", "limit": 1})).await;
    assert_problem(&unknown, StatusCode::NOT_FOUND, "session_not_found");
    let alias = format!("/api/v1/agents/{AGENT}/inbox/claim");
    let empty = server.request(Method::POST, &alias, Some(&agent), None).send().await.unwrap();
    assert_problem(&crate::harness::read(empty).await, StatusCode::CONFLICT, "session_required");
    let (status, held) = server.post(&alias, &agent, json!({"session_id": second, "limit": 2})).await;
    assert_eq!((status, held["claims"].as_array().unwrap().len()), (StatusCode::OK, 2), "{held}");

    // A third process subscribes: `second` is superseded, and learns it on its next call.
    let third = subscribe(&server, &agent).await;
    let refused = claim(&server, &agent, json!({"session_id": second, "limit": 1})).await;
    assert_problem(&refused, StatusCode::CONFLICT, "session_superseded");
    assert!(refused.1["detail"].as_str().unwrap().contains("newer session"), "{}", refused.1);
    let beat = server.post(&format!("/v1/agent-sessions/{second}/heartbeat"), &agent, json!({})).await;
    assert_problem(&beat, StatusCode::CONFLICT, "session_superseded");
    let stream =
        server.call(Method::GET, &format!("/v1/streams/sse?session_id={second}"), Some(&agent), None).await;
    assert_problem(&stream, StatusCode::CONFLICT, "session_superseded");
    assert_problem(
        &server.call(Method::GET, "/v1/streams/sse", Some(&agent), None).await,
        StatusCode::CONFLICT,
        "session_required",
    );
    let status = server
        .db
        .scalar(
            "SELECT COUNT(*) AS n FROM agent_session WHERE session_id = ? AND status = 'superseded' \
             AND superseded_by_session_id = ?",
            &[&second, &third],
        )
        .await;
    assert_eq!(status, 1, "the old session is kept, marked superseded by the new one");

    // What `second` holds it can still heartbeat, release and acknowledge.
    let lease = |n: usize| (held["claims"][n]["event_id"].clone(), held["claims"][n]["lease_token"].clone());
    let (kept, kept_token) = lease(0);
    let (given_back, given_back_token) = lease(1);
    let (status, extended) = server
        .post(
            "/v1/inbox/heartbeat",
            &agent,
            json!({"session_id": second, "leases": [{"event_id": kept, "lease_token": kept_token, "extend_by_seconds": 30}]}),
        )
        .await;
    assert_eq!((status, &extended["leases"][0]["error"]), (StatusCode::OK, &Value::Null), "{extended}");
    let (status, released) = server
        .post(
            "/v1/inbox/release",
            &agent,
            json!({"event_id": given_back, "lease_token": given_back_token, "retry_after_seconds": 0}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{released}");
    let (status, acked) = server
        .post(
            "/v1/inbox/acknowledge",
            &agent,
            json!({"session_id": second, "acks": [{"event_id": kept, "lease_token": kept_token}]}),
        )
        .await;
    assert_eq!((status, &acked["results"][0]["ack_state"]), (StatusCode::OK, &json!("acked")), "{acked}");

    // The newest session takes the rest, the released event included.
    let (status, rest) = claim(&server, &agent, json!({"session_id": third, "limit": 10})).await;
    assert_eq!(status, StatusCode::OK, "{rest}");
    let ids: Vec<&Value> = rest["claims"].as_array().unwrap().iter().map(|c| &c["event_id"]).collect();
    assert_eq!(ids.len(), 5, "8 published, 2 claimed before the policy, 1 acknowledged: {rest}");
    assert!(ids.contains(&&given_back));
    let (status, _) = server.post(&format!("/v1/agent-sessions/{third}/heartbeat"), &agent, json!({})).await;
    assert_eq!(status, StatusCode::OK);

    // Off again: every session claims again.
    set_policy(&server, false).await;
    server.publish(&publisher, &[AGENT], json!({"n": 8})).await;
    let (status, claimed) = claim(&server, &agent, json!({"session_id": first, "limit": 1})).await;
    assert_eq!((status, claimed["claims"].as_array().map(Vec::len)), (StatusCode::OK, Some(1)), "{claimed}");
    server.stop().await;
}

async fn ws_connect(server: &TestServer, token: &str, session: &str) -> Socket {
    let url = format!("{}/v1/streams/ws?session_id={session}", server.base.replace("http://", "ws://"));
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    tokio_tungstenite::connect_async(request).await.expect("the upgrade succeeds").0
}

/// The close code of the socket's Close frame, skipping other messages.
async fn close_code(socket: &mut Socket) -> Option<u16> {
    loop {
        match tokio::time::timeout(HINT_DEADLINE, socket.next()).await.expect("closed in time") {
            Some(Ok(tungstenite::Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
            Some(Ok(_)) => continue,
            _ => return None,
        }
    }
}

/// The old session's SSE stream on node A learns through A's notifier (heartbeats are 30 s
/// apart); its WebSocket on node B, whose notifier is as good as off, at B's next heartbeat (1 s).
/// The new session subscribes on node C.
async fn superseded_streams_get_a_last_signal_and_close_on_any_node(backend: Backend) {
    let node_a = TestServer::start(backend).await;
    let node_b = node_a
        .start_beside(|c| {
            // Beyond what a configuration file may set: it takes B's notifier out of the test.
            c.signals.notify_interval = Duration::from_secs(3_600);
            c.sessions.heartbeat_interval = Duration::from_secs(1);
        })
        .await;
    let node_c = node_a.start_beside(|_| {}).await;
    let publisher = node_a.publisher("t1").await;
    let agent = node_a.agent("t1", AGENT).await;
    set_policy(&node_a, true).await;
    let old = subscribe(&node_a, &agent).await;
    // The old process streams on two nodes: SSE on A, a WebSocket on B.
    let mut sse = Sse::open(&node_a, &format!("/v1/streams/sse?session_id={old}"), Some(&agent), &[]).await;
    sse.next(HINT_DEADLINE).await.expect("the opening frame");
    let mut socket = ws_connect(&node_b, &agent, &old).await;
    let claimed = ws_call(&mut socket, json!({"op": "claim", "id": "c1", "body": {"limit": 1}})).await;
    assert_eq!(claimed["status"], 200, "a claim without session_id is the socket's session's: {claimed}");

    let new = subscribe(&node_c, &agent).await;
    let last = loop {
        let event = sse.next(HINT_DEADLINE).await.expect("a last event before the deadline");
        if event.event != "heartbeat" {
            break event;
        }
    };
    assert_eq!(last.event, "session.superseded", "{last:?}");
    let signal: Value = serde_json::from_str(&last.data).unwrap();
    assert_eq!(
        (signal["signal_type"].as_str(), signal["recipient_id"].as_str()),
        (Some("session.superseded"), Some(AGENT))
    );
    assert!(sse.next(HINT_DEADLINE).await.is_none(), "the stream ended after its last event");
    let last = loop {
        let message = ws_next(&mut socket).await;
        if message["signal_type"] != "heartbeat" {
            break message;
        }
    };
    assert_eq!(last["signal_type"], "session.superseded", "{last}");
    assert_eq!(close_code(&mut socket).await, Some(1008), "closed as a policy violation");

    // The new session's streams carry hints as usual, and its socket claims.
    let mut fresh = ws_connect(&node_b, &agent, &new).await;
    node_b.publish(&publisher, &[AGENT], json!({})).await;
    let hint = loop {
        let message = ws_next(&mut fresh).await;
        if message["signal_type"] != "heartbeat" {
            break message;
        }
    };
    assert_eq!(hint["signal_type"], "inbox.updated");
    let claimed = ws_call(&mut fresh, json!({"op": "claim", "id": "c2", "body": {"limit": 5}})).await;
    assert_eq!(claimed["status"], 200, "{claimed}");
    assert_eq!(claimed["body"]["claims"].as_array().unwrap().len(), 1);
    let refused = ws_call(&mut fresh, json!({"op": "claim", "id": "c3", "body": {"session_id": old}})).await;
    assert_eq!(
        (refused["status"].as_u64(), refused["body"]["code"].as_str()),
        (Some(409), Some("session_superseded"))
    );
    drop(fresh);
    node_c.stop().await;
    node_b.stop().await;
    node_a.stop().await;
}
