//! Who may call is decided before any field is judged: a request that is both unauthorized
//! and malformed is answered 403, never the field's 400. Each case sends the same bad request
//! twice: from a caller that may make the call (400 naming the field, so the request is indeed
//! malformed) and from one that may not (403). A value whose type holds its rule (an id, a
//! bounded number or list, a reason) is refused as the body is read, before any use case, as
//! every malformed body is; the cases here are what only a use case can judge (rules across
//! fields, this server's settings, path and query values).

use inbox_server::CallerKind;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{TestServer, assert_problem, both_backends};
use inbox_conformance::Backend;

both_backends!(who_may_call_comes_before_the_fields);

async fn who_may_call_comes_before_the_fields(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    server.publish(&publisher, &["agent_alpha"], json!({})).await;
    let agent = server.agent("t1", "agent_alpha").await;
    let (status, claimed) = server.post("/v1/inbox/claim", &agent, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    let claim = &claimed["claims"][0];
    let (event_id, lease_token) = (claim["event_id"].clone(), claim["lease_token"].clone());
    let claim_only = server.token("t1", "agent_alpha", CallerKind::Agent, "inbox.claim").await;
    let no_handoff = server.token("t1", "agent_alpha", CallerKind::Agent, "inbox.ack").await;
    let admin = server.token("t1", "ops", CallerKind::Admin, "admin").await;

    let bad_requests: [(&str, Method, String, Value, &str, &str); 6] = [
        (
            "a reason with result completed",
            Method::POST,
            "/v1/inbox/acknowledge".to_owned(),
            json!({"acks": [{"event_id": event_id, "lease_token": lease_token, "reason": "done"}]}),
            "acks[0].reason",
            "inbox.ack",
        ),
        (
            "follow-ups with result failed",
            Method::POST,
            "/v1/inbox/acknowledge".to_owned(),
            json!({"acks": [{"event_id": event_id, "lease_token": lease_token, "result": "failed",
                "reason": "no", "follow_ups": [{"recipients": ["agent_beta"], "event_type": "t"}]}]}),
            "acks[0].follow_ups",
            "events.handoff",
        ),
        (
            "a long poll longer than this server waits",
            Method::POST,
            "/v1/inbox/poll-after-cursor".to_owned(),
            json!({"after_seq": 0, "wait_seconds": 3_600}),
            "wait_seconds",
            "inbox.poll",
        ),
        (
            "seed 000's acknowledgement of a malformed event id",
            Method::POST,
            "/api/v1/agents/agent_alpha/inbox/not-an-event/ack".to_owned(),
            json!({"lease_token": lease_token}),
            "event_id",
            "inbox.ack",
        ),
        (
            "seed 000's release of a malformed event id",
            Method::POST,
            "/api/v1/agents/agent_alpha/inbox/not-an-event/release".to_owned(),
            json!({"lease_token": lease_token}),
            "event_id",
            "inbox.release",
        ),
        (
            "a stream ticket longer than this server mints",
            Method::POST,
            "/v1/streams/tickets".to_owned(),
            json!({"ttl_seconds": 3_600}),
            "ttl_seconds",
            "stream.subscribe",
        ),
    ];
    for (what, method, path, body, field, scope) in bad_requests {
        let malformed = server.call(method.clone(), &path, Some(&agent), Some(body.clone())).await;
        assert_problem(&malformed, StatusCode::BAD_REQUEST, "invalid_field");
        assert_eq!(malformed.1["field"], field, "{what}: {}", malformed.1);
        let narrow = if scope == "events.handoff" { &no_handoff } else { &claim_only };
        let refused = server.call(method, &path, Some(narrow), Some(body)).await;
        assert_problem(&refused, StatusCode::FORBIDDEN, "scope_missing");
        assert_eq!(refused.1["scope"], scope, "{what}: {}", refused.1);
    }

    // Retiring a key: an operator may retire any key, an agent its own; a publisher neither,
    // whatever it asks.
    let retire = "/v1/agent-keys/ak_unknown?after_seconds=604801";
    let malformed = server.call(Method::DELETE, retire, Some(&admin), None).await;
    assert_problem(&malformed, StatusCode::BAD_REQUEST, "invalid_field");
    assert_eq!(malformed.1["field"], "after_seconds", "{}", malformed.1);
    let refused = server.call(Method::DELETE, retire, Some(&publisher), None).await;
    assert_problem(&refused, StatusCode::FORBIDDEN, "kind_not_allowed");

    // An operator's call: a malformed agent id from a token that is not an operator's.
    let events = "/v1/admin/inboxes/not%20an%20agent/events";
    let malformed = server.call(Method::GET, events, Some(&admin), None).await;
    assert_problem(&malformed, StatusCode::BAD_REQUEST, "invalid_field");
    let refused = server.call(Method::GET, events, Some(&agent), None).await;
    assert_problem(&refused, StatusCode::FORBIDDEN, "scope_missing");
    server.stop().await;
}
