//! Fair claims over HTTP: the tenant policy turns them on, a publish's `fairness_key` (by
//! default its publisher) decides its source, and claims interleave sources; without the
//! policy claims keep sequence order and keys cost nothing. (Quotas: `quotas.rs`.)

use inbox_server::CallerKind;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{TestServer, assert_problem, both_backends};
use inbox_conformance::Backend;

both_backends!(fair_claims_follow_the_tenant_policy);

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
