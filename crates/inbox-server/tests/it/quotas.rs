//! Tenant quotas over HTTP: every delivery counts (a publish by its recipients, a room post by
//! its members, a hand-off by its follow-ups less the event it acknowledges), a change past a
//! quota is refused whole before anything of it commits, concurrent publishes on one node are
//! counted exactly, and nothing committed is lost.

use std::sync::Arc;

use inbox_server::CallerKind;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{TestServer, assert_problem, both_backends};
use inbox_conformance::Backend;

both_backends!(
    quotas_refuse_publishes_and_lose_nothing,
    concurrent_publishes_are_counted_exactly,
    hand_offs_count_their_follow_ups,
    room_posts_count_their_members,
);

const AGENT: &str = "agent_alpha";

async fn publish(server: &TestServer, token: &str, n: u32) {
    let body = json!({"recipients": [AGENT], "event_type": "task.assigned", "payload": {"n": n}});
    let (status, answer) = server.post("/v1/events", token, body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
}

async fn set_policy(server: &TestServer, policy: Value) {
    let admin = server.token("t1", "ops", CallerKind::Admin, "admin").await;
    let (status, answer) = server.post("/v1/admin/tenant-policy", &admin, policy).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
}

async fn claim(server: &TestServer, agent: &str, limit: u32) -> Vec<Value> {
    let (status, claimed) = server.post("/v1/inbox/claim", agent, json!({"limit": limit})).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    claimed["claims"].as_array().unwrap().clone()
}

/// The events of `agent`'s inbox not yet acknowledged, read after cursor 0.
async fn open_events(server: &TestServer, agent: &str) -> usize {
    let token = server.agent("t1", agent).await;
    let (status, polled) =
        server.post("/v1/inbox/poll-after-cursor", &token, json!({"after_seq": 0, "limit": 500})).await;
    assert_eq!(status, StatusCode::OK, "{polled}");
    polled["events"].as_array().unwrap().iter().filter(|e| e["ack_state"] != "acked").count()
}

async fn quotas_refuse_publishes_and_lose_nothing(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", AGENT).await;
    let admin = server.token("t1", "ops", CallerKind::Admin, "admin").await;
    let (status, policy) = server
        .post("/v1/admin/tenant-policy", &admin, json!({"pending_events_max": 3, "stored_bytes_max": 100}))
        .await;
    assert_eq!(status, StatusCode::OK, "{policy}");
    assert_eq!(
        (policy["pending_events_max"].as_u64(), policy["stored_bytes_max"].as_u64()),
        (Some(3), Some(100))
    );
    let too_big =
        server.post("/v1/admin/tenant-policy", &admin, json!({"stored_bytes_max": 1u64 << 63})).await;
    assert_problem(&too_big, StatusCode::BAD_REQUEST, "invalid_field");
    assert!(too_big.1["detail"].as_str().unwrap().contains("stored_bytes_max"), "{}", too_big.1);

    for n in 0..3 {
        publish(&server, &publisher, n).await;
    }
    let body = json!({"recipients": [AGENT], "event_type": "task.assigned", "payload": {"n": 3}});
    let refused = server.call(Method::POST, "/v1/events", Some(&publisher), Some(body.clone())).await;
    assert_problem(&refused, StatusCode::TOO_MANY_REQUESTS, "tenant_pending_limit");
    assert!(refused.1["detail"].as_str().unwrap().contains("pending_events_max"), "{}", refused.1);
    let raw = server
        .request(Method::POST, "/v1/events", Some(&publisher), Some(body.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.headers()["retry-after"], "2");

    // Another tenant is not limited by t1's quota.
    let other = server.publisher("t2").await;
    let (status, _) = server
        .post("/v1/events", &other, json!({"recipients": ["agent_beta"], "event_type": "task.assigned"}))
        .await;
    assert_eq!(status, StatusCode::CREATED);

    // Nothing committed was lost; once acknowledged (and the count read again), room again.
    let claims = claim(&server, &agent, 10).await;
    assert_eq!(claims.len(), 3, "{claims:?}");
    let acks: Vec<Value> = claims
        .iter()
        .map(|c| json!({"event_id": c["event"]["event_id"], "lease_token": c["lease_token"], "result": "completed"}))
        .collect();
    let (status, acked) = server.post("/v1/inbox/acknowledge", &agent, json!({"acks": acks})).await;
    assert_eq!(status, StatusCode::OK, "{acked}");
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await; // the node reads the count again
    publish(&server, &publisher, 4).await;

    // Inline payload bytes: a payload that would pass 100 bytes is refused with 507.
    let big =
        json!({"recipients": [AGENT], "event_type": "task.assigned", "payload": {"text": "x".repeat(120)}});
    let refused = server.call(Method::POST, "/v1/events", Some(&publisher), Some(big)).await;
    assert_problem(&refused, StatusCode::INSUFFICIENT_STORAGE, "tenant_storage_limit");
    assert_eq!(
        crate::harness::metric(
            &server,
            r#"agent_inbox_quota_refusals_total{tenant="t1",limit="stored_bytes"}"#
        )
        .await,
        1.0
    );
    let (status, refusals) = server.call(Method::GET, "/v1/admin/quota-refusals", Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK, "{refusals}");
    assert_eq!(
        (refusals["pending_events_refused"].as_u64(), refusals["stored_bytes_refused"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(refusals["recent"][0]["limit"], "stored_bytes", "newest first: {refusals}");
    let (status, _) = server.call(Method::GET, "/v1/admin/quota-refusals", Some(&publisher), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "an operator's view");
}

/// 200 publishes from 32 concurrent publishers against a quota of 100: exactly 100 are
/// accepted, the rest refused with 429, and the inbox holds exactly the accepted ones.
async fn concurrent_publishes_are_counted_exactly(backend: Backend) {
    const PUBLISHERS: usize = 32;
    const PUBLISHES: usize = 200;
    const QUOTA: usize = 100;
    let server = Arc::new(TestServer::start(backend).await);
    set_policy(&server, json!({"pending_events_max": QUOTA})).await;
    let publisher = Arc::new(server.publisher("t1").await);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..PUBLISHERS {
        let (server, publisher, next) = (server.clone(), publisher.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let (mut accepted, mut refused) = (0, 0);
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < PUBLISHES {
                let body = json!({"recipients": [AGENT], "event_type": "task.assigned"});
                let answer = server.call(Method::POST, "/v1/events", Some(&publisher), Some(body)).await;
                match answer.0 {
                    StatusCode::CREATED => accepted += 1,
                    StatusCode::TOO_MANY_REQUESTS => {
                        assert_problem(&answer, StatusCode::TOO_MANY_REQUESTS, "tenant_pending_limit");
                        refused += 1;
                    }
                    other => panic!("unexpected answer {other}: {}", answer.1),
                }
            }
            (accepted, refused)
        }));
    }
    let (mut accepted, mut refused) = (0, 0);
    for task in tasks {
        let (a, r) = task.await.unwrap();
        accepted += a;
        refused += r;
    }
    assert_eq!((accepted, refused), (QUOTA, PUBLISHES - QUOTA), "exact on one node");
    assert_eq!(open_events(&server, AGENT).await, QUOTA, "every accepted publish committed");
}

fn hand_off(claim: &Value, follow_ups: usize, payload: Value) -> Value {
    let follow_ups: Vec<Value> = (0..follow_ups)
        .map(|_| json!({"recipients": ["agent_beta"], "event_type": "step.next", "payload": payload}))
        .collect();
    json!({"event_id": claim["event_id"], "lease_token": claim["lease_token"], "follow_ups": follow_ups})
}

/// A hand-off counts its follow-ups' deliveries, less the event it acknowledges: past the
/// quota the whole acknowledgement is refused before anything commits (its plain entries too)
/// and its events stay claimed, then claimable; one follow-up per event still moves a full
/// tenant's chain.
async fn hand_offs_count_their_follow_ups(backend: Backend) {
    let server = TestServer::start(backend).await;
    set_policy(&server, json!({"pending_events_max": 5})).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", AGENT).await;
    for n in 0..5 {
        publish(&server, &publisher, n).await;
    }
    let sixth = server
        .call(
            Method::POST,
            "/v1/events",
            Some(&publisher),
            Some(json!({"recipients": [AGENT], "event_type": "x"})),
        )
        .await;
    assert_problem(&sixth, StatusCode::TOO_MANY_REQUESTS, "tenant_pending_limit");

    let claims = claim(&server, &agent, 2).await;
    let plain = json!({"event_id": claims[1]["event_id"], "lease_token": claims[1]["lease_token"], "result": "completed"});
    let request = json!({"acks": [hand_off(&claims[0], 16, json!({})), plain]});
    let raw = server
        .request(Method::POST, "/v1/inbox/acknowledge", Some(&agent), Some(request))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.headers().get("retry-after").map(|v| v.to_str().unwrap()), Some("2"));
    let refused = crate::harness::read(raw).await;
    assert_problem(&refused, StatusCode::TOO_MANY_REQUESTS, "tenant_pending_limit");
    assert!(
        refused.1["detail"].as_str().unwrap().contains("adds 15"),
        "16 follow-ups less the acknowledged event: {}",
        refused.1
    );
    assert_eq!(open_events(&server, "agent_beta").await, 0, "no follow-up committed");
    // Both events are still claimed under their leases: nothing of the request committed.
    let leases: Vec<Value> = claims
        .iter()
        .map(|c| json!({"event_id": c["event_id"], "lease_token": c["lease_token"], "extend_by_seconds": 60}))
        .collect();
    let (status, beat) = server.post("/v1/inbox/heartbeat", &agent, json!({"leases": leases})).await;
    assert_eq!(status, StatusCode::OK, "{beat}");
    for lease in beat["leases"].as_array().unwrap() {
        assert!(lease["error"].is_null(), "still held: {beat}");
    }
    // Released, the refused hand-off's event is claimable again.
    let release = json!({"event_id": claims[0]["event_id"], "lease_token": claims[0]["lease_token"]});
    let (status, released) = server.post("/v1/inbox/release", &agent, release).await;
    assert_eq!(status, StatusCode::OK, "{released}");
    let again = claim(&server, &agent, 1).await;
    assert_eq!(again[0]["event_id"], claims[0]["event_id"], "{again:?}");

    // One follow-up for the event it acknowledges adds nothing: a full tenant's chain moves.
    let (status, moved) = server
        .post("/v1/inbox/acknowledge", &agent, json!({"acks": [hand_off(&again[0], 1, json!({}))]}))
        .await;
    assert_eq!(status, StatusCode::OK, "{moved}");
    assert_eq!(moved["results"][0]["ack_state"], "acked", "{moved}");
    assert_eq!(open_events(&server, AGENT).await + open_events(&server, "agent_beta").await, 5);
    // Two for one adds one: refused while the tenant is full.
    let refused = server
        .post("/v1/inbox/acknowledge", &agent, json!({"acks": [hand_off(&claims[1], 2, json!({}))]}))
        .await;
    assert_problem(&refused, StatusCode::TOO_MANY_REQUESTS, "tenant_pending_limit");

    // Stored bytes count a hand-off's follow-ups too.
    set_policy(&server, json!({"pending_events_max": 0, "stored_bytes_max": 200})).await;
    let big = json!({"text": "y".repeat(150)});
    let refused =
        server.post("/v1/inbox/acknowledge", &agent, json!({"acks": [hand_off(&claims[1], 2, big)]})).await;
    assert_problem(&refused, StatusCode::INSUFFICIENT_STORAGE, "tenant_storage_limit");
    assert_eq!(open_events(&server, "agent_beta").await, 1, "only the first hand-off's follow-up");
}

/// A room post counts one delivery per member: past the quota it is refused whole and writes
/// nothing; exactly at the quota it is accepted.
async fn room_posts_count_their_members(backend: Backend) {
    let server = TestServer::start(backend).await;
    set_policy(&server, json!({"pending_events_max": 10})).await;
    let publisher = server.publisher("t1").await;
    let members = |n: usize| (0..n).map(|i| format!("member_{i:02}")).collect::<Vec<_>>();
    for (room, n) in [("crowd", 20), ("team", 10)] {
        let (status, created) =
            server.post("/v1/rooms", &publisher, json!({"room_id": room, "members": members(n)})).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
    }
    let post = json!({"body": {"text": "hello"}});
    let refused = server.post("/v1/rooms/crowd/messages", &publisher, post.clone()).await;
    assert_problem(&refused, StatusCode::TOO_MANY_REQUESTS, "tenant_pending_limit");
    assert!(refused.1["detail"].as_str().unwrap().contains("adds 20"), "{}", refused.1);
    assert_eq!(open_events(&server, "member_00").await, 0, "the refused post wrote nothing");

    let (status, posted) = server.post("/v1/rooms/team/messages", &publisher, post.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{posted}");
    assert_eq!(posted["deliveries"].as_array().unwrap().len(), 10);
    let refused = server.post("/v1/rooms/team/messages", &publisher, post.clone()).await;
    assert_problem(&refused, StatusCode::TOO_MANY_REQUESTS, "tenant_pending_limit");

    // Stored bytes: each member's copy of the message counts.
    set_policy(&server, json!({"pending_events_max": 0, "stored_bytes_max": 1_000})).await;
    let long = json!({"body": {"text": "z".repeat(60)}});
    let refused = server.post("/v1/rooms/team/messages", &publisher, long).await;
    assert_problem(&refused, StatusCode::INSUFFICIENT_STORAGE, "tenant_storage_limit");
}
