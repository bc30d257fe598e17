//! Hand-offs over HTTP: who may hand off to whom (the `events.handoff` scope, the token's own
//! tenant), which results may, the follow-ups' field-precise refusals, and the answer's
//! deliveries in request order beside a plain acknowledgement.

use inbox_server::CallerKind;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{TestServer, assert_problem, both_backends};
use inbox_conformance::Backend;

both_backends!(hand_off_rules);

async fn claim(server: &TestServer, token: &str, limit: u32) -> Vec<Value> {
    let (status, body) = server.post("/v1/inbox/claim", token, json!({"limit": limit})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["claims"].as_array().unwrap().clone()
}

fn entry(claim: &Value, follow_ups: Value) -> Value {
    json!({"event_id": claim["event_id"], "lease_token": claim["lease_token"], "follow_ups": follow_ups})
}

fn to(recipient: &str) -> Value {
    json!([{"recipients": [recipient], "event_type": "step.next", "payload": {"n": 1}}])
}

async fn hand_off_rules(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    server.publish(&publisher, &["alpha"], json!({"n": 1})).await;
    server.publish(&publisher, &["alpha"], json!({"n": 2})).await;
    let agent = server.agent("t1", "alpha").await;
    let claims = claim(&server, &agent, 2).await;

    // A token without events.handoff (nor events.publish) may acknowledge, not hand off.
    let narrow = server.token("t1", "alpha", CallerKind::Agent, "inbox.claim inbox.ack").await;
    let refused =
        server.post("/v1/inbox/acknowledge", &narrow, json!({"acks": [entry(&claims[0], to("beta"))]})).await;
    assert_problem(&refused, StatusCode::FORBIDDEN, "scope_missing");
    assert_eq!(refused.1["scope"], "events.handoff");

    // Another tenant, a key of its own, a result other than completed: refused, field by field.
    let mut other_tenant = to("beta");
    other_tenant[0]["tenant_id"] = json!("t2");
    let refused = server
        .post("/v1/inbox/acknowledge", &agent, json!({"acks": [entry(&claims[0], other_tenant)]}))
        .await;
    assert_problem(&refused, StatusCode::FORBIDDEN, "tenant_mismatch");
    assert_eq!(refused.1["field"], "acks[0].follow_ups[0].tenant_id", "{}", refused.1);
    let mut keyed = to("beta");
    keyed[0]["deduplication_key"] = json!("mine");
    let refused =
        server.post("/v1/inbox/acknowledge", &agent, json!({"acks": [entry(&claims[0], keyed)]})).await;
    assert_problem(&refused, StatusCode::BAD_REQUEST, "invalid_field");
    assert!(
        refused.1["detail"].as_str().unwrap().contains("acks[0].follow_ups[0].deduplication_key"),
        "{}",
        refused.1
    );
    let mut failed = entry(&claims[0], to("beta"));
    failed["result"] = json!("failed");
    let refused = server.post("/v1/inbox/acknowledge", &agent, json!({"acks": [failed]})).await;
    assert_problem(&refused, StatusCode::BAD_REQUEST, "invalid_field");

    // A hand-off beside a plain acknowledgement: answers in request order, deliveries attached.
    let plain = json!({"event_id": claims[1]["event_id"], "lease_token": claims[1]["lease_token"]});
    let (status, body) = server
        .post("/v1/inbox/acknowledge", &agent, json!({"acks": [entry(&claims[0], to("beta")), plain]}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let results = body["results"].as_array().unwrap();
    assert_eq!(results[0]["event_id"], claims[0]["event_id"]);
    assert_eq!(results[0]["ack_state"], "acked");
    let delivery = &results[0]["follow_ups"][0]["deliveries"][0];
    assert_eq!(delivery["recipient_id"], "beta");
    assert_eq!(delivery["deduplicated"], false);
    assert_eq!(results[1]["ack_state"], "acked");
    assert!(results[1].get("follow_ups").is_none(), "{body}");

    // The retry answers the first publish; beta has one event, keyed by the acknowledged one.
    let (_, again) =
        server.post("/v1/inbox/acknowledge", &agent, json!({"acks": [entry(&claims[0], to("beta"))]})).await;
    assert_eq!(again["results"][0]["follow_ups"][0]["deliveries"][0]["event_id"], delivery["event_id"]);
    assert_eq!(again["results"][0]["follow_ups"][0]["deliveries"][0]["deduplicated"], true);
    let beta = server.agent("t1", "beta").await;
    let (_, page) = server.post("/v1/inbox/poll-after-cursor", &beta, json!({"after_seq": 0})).await;
    let events = page["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{page}");
    assert_eq!(
        events[0]["deduplication_key"],
        format!("handoff:{}:0", claims[0]["event_id"].as_str().unwrap())
    );
    server.stop().await;
}
