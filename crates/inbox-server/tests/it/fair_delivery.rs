//! Fair delivery over HTTP. Fair claims: the tenant policy turns them on, a publish's
//! `fairness_key` (by default its publisher) decides its source, and claims interleave
//! sources; without the policy claims keep sequence order and keys cost nothing. Quotas:
//! publishes past a tenant's limits are refused with their problems, and nothing is lost.

use inbox_server::CallerKind;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{TestServer, assert_problem, both_backends};
use inbox_conformance::Backend;

both_backends!(fair_claims_follow_the_tenant_policy, quotas_refuse_publishes_and_lose_nothing);

const AGENT: &str = "agent_alpha";

async fn publish(server: &TestServer, token: &str, n: u32, key: Option<&str>) {
    let mut body = json!({"recipients": [AGENT], "event_type": "task.assigned", "payload": {"n": n}});
    if let Some(key) = key {
        body["fairness_key"] = json!(key);
    }
    let (status, answer) = server.post("/v1/events", token, body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
}

/// The payloads' `n` of a claim of `limit`.
async fn claim(server: &TestServer, agent: &str, limit: u32) -> Vec<u64> {
    let (status, claimed) = server.post("/v1/inbox/claim", agent, json!({"limit": limit})).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    claimed["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["event"]["payload"]["n"].as_u64().unwrap())
        .collect()
}

async fn set_fair_claims(server: &TestServer, on: bool) -> Value {
    let admin = server.token("t1", "ops", CallerKind::Admin, "admin").await;
    let (status, policy) = server.post("/v1/admin/tenant-policy", &admin, json!({"fair_claims": on})).await;
    assert_eq!(status, StatusCode::OK, "{policy}");
    policy
}

async fn fair_claims_follow_the_tenant_policy(backend: Backend) {
    let server = TestServer::start(backend).await;
    let bulk = server.publisher("t1").await;
    let person = server.token("t1", "carol", CallerKind::Publisher, "events.publish").await;
    let agent = server.agent("t1", AGENT).await;

    // Off (the default): keys are accepted and change nothing.
    for n in 0..4 {
        publish(&server, &bulk, n, Some("import")).await;
    }
    publish(&server, &person, 100, None).await;
    assert_eq!(claim(&server, &agent, 5).await, [0, 1, 2, 3, 100]);

    let policy = set_fair_claims(&server, true).await;
    assert_eq!(policy["fair_claims"], true, "{policy}");
    // A bulk import under one key, then two events from a person: by default their key is
    // the publishing subject, so they are claimed within the first claim, not after the import.
    for n in 0..20 {
        publish(&server, &bulk, n, Some("import")).await;
    }
    publish(&server, &person, 100, None).await;
    publish(&server, &person, 101, None).await;
    assert_eq!(claim(&server, &agent, 4).await, [0, 100, 1, 101]);
    assert_eq!(claim(&server, &agent, 3).await, [2, 3, 4]);

    let refused = server
        .post(
            "/v1/events",
            &bulk,
            json!({"recipients": [AGENT], "event_type": "task.assigned", "fairness_key": "two words"}),
        )
        .await;
    assert_problem(&refused, StatusCode::BAD_REQUEST, "invalid_field");
    assert!(refused.1["detail"].as_str().unwrap().contains("fairness_key"), "{}", refused.1);

    // Off again: the rest in sequence order.
    set_fair_claims(&server, false).await;
    assert_eq!(claim(&server, &agent, 100).await, (5..20).collect::<Vec<_>>());
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
        publish(&server, &publisher, n, None).await;
    }
    let body = json!({"recipients": [AGENT], "event_type": "task.assigned", "payload": {"n": 3}});
    let refused =
        server.call(reqwest::Method::POST, "/v1/events", Some(&publisher), Some(body.clone())).await;
    assert_problem(&refused, StatusCode::TOO_MANY_REQUESTS, "tenant_pending_limit");
    assert!(refused.1["detail"].as_str().unwrap().contains("pending_events_max"), "{}", refused.1);
    let raw = server
        .request(reqwest::Method::POST, "/v1/events", Some(&publisher), Some(body.clone()))
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
    let (status, claimed) = server.post("/v1/inbox/claim", &agent, json!({"limit": 10})).await;
    assert_eq!(status, StatusCode::OK);
    let claims = claimed["claims"].as_array().unwrap();
    assert_eq!(claims.len(), 3, "{claimed}");
    let acks: Vec<Value> = claims
        .iter()
        .map(|c| json!({"event_id": c["event"]["event_id"], "lease_token": c["lease_token"], "result": "completed"}))
        .collect();
    let (status, acked) = server.post("/v1/inbox/acknowledge", &agent, json!({"acks": acks})).await;
    assert_eq!(status, StatusCode::OK, "{acked}");
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await; // the node reads the count again
    publish(&server, &publisher, 4, None).await;

    // Inline payload bytes: a payload that would pass 100 bytes is refused with 507.
    let big =
        json!({"recipients": [AGENT], "event_type": "task.assigned", "payload": {"text": "x".repeat(120)}});
    let refused = server.call(reqwest::Method::POST, "/v1/events", Some(&publisher), Some(big)).await;
    assert_problem(&refused, StatusCode::INSUFFICIENT_STORAGE, "tenant_storage_limit");
    assert_eq!(
        crate::harness::metric(
            &server,
            r#"agent_inbox_quota_refusals_total{tenant="t1",limit="stored_bytes"}"#
        )
        .await,
        1.0
    );
    let (status, refusals) =
        server.call(reqwest::Method::GET, "/v1/admin/quota-refusals", Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK, "{refusals}");
    assert_eq!(
        (refusals["pending_events_refused"].as_u64(), refusals["stored_bytes_refused"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(refusals["recent"][0]["limit"], "stored_bytes", "newest first: {refusals}");
    let (status, _) =
        server.call(reqwest::Method::GET, "/v1/admin/quota-refusals", Some(&publisher), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "an operator's view");
}
