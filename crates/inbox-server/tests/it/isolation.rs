//! Tenant and agent isolation: a matrix of tokens against every endpoint. The tenant and agent
//! always come from the token; naming another is refused; another tenant's or agent's events
//! are invisible.

use inbox_server::CallerKind;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{TestServer, assert_problem, both_backends};
use inbox_conformance::Backend;

both_backends!(token_matrix_against_every_endpoint, events_of_others_are_invisible);

/// (method, path, body) of every authenticated endpoint, with the scope it needs.
fn endpoints(event_id: &str) -> Vec<(Method, String, Option<Value>, &'static str)> {
    vec![
        (Method::POST, "/v1/inbox/poll-after-cursor".into(), Some(json!({"after_seq": 0})), "inbox.poll"),
        (Method::GET, "/v1/inbox/head".into(), None, "inbox.poll"),
        (Method::GET, "/v1/inbox/resync".into(), None, "inbox.poll"),
        (Method::POST, "/v1/inbox/claim".into(), Some(json!({})), "inbox.claim"),
        (
            Method::POST,
            "/v1/inbox/acknowledge".into(),
            Some(
                json!({"acks": [{"event_id": event_id, "lease_token": format!("lease_{}", "0".repeat(32))}]}),
            ),
            "inbox.ack",
        ),
        (
            Method::POST,
            "/v1/inbox/release".into(),
            Some(json!({"event_id": event_id, "lease_token": format!("lease_{}", "0".repeat(32))})),
            "inbox.release",
        ),
        (
            Method::POST,
            "/v1/inbox/heartbeat".into(),
            Some(
                json!({"leases": [{"event_id": event_id, "lease_token": format!("lease_{}", "0".repeat(32)), "extend_by_seconds": 60}]}),
            ),
            "inbox.heartbeat",
        ),
        (Method::POST, "/v1/agent-sessions/subscribe".into(), Some(json!({})), "inbox.poll"),
        (Method::GET, "/api/v1/agents/agent_alpha/inbox".into(), None, "inbox.poll"),
        (Method::POST, "/api/v1/agents/agent_alpha/inbox/claim".into(), Some(json!({})), "inbox.claim"),
        (
            Method::POST,
            format!("/api/v1/agents/agent_alpha/inbox/{event_id}/ack"),
            Some(json!({"lease_token": format!("lease_{}", "0".repeat(32))})),
            "inbox.ack",
        ),
        (
            Method::POST,
            format!("/api/v1/agents/agent_alpha/inbox/{event_id}/release"),
            Some(json!({"lease_token": format!("lease_{}", "0".repeat(32))})),
            "inbox.release",
        ),
        (
            Method::POST,
            "/v1/events".into(),
            Some(json!({"recipients": ["agent_alpha"], "event_type": "t"})),
            "events.publish",
        ),
        (Method::GET, "/v1/admin/parked".into(), None, "admin"),
        (Method::GET, "/v1/admin/inboxes".into(), None, "admin"),
        (
            Method::POST,
            "/v1/admin/parked/requeue".into(),
            Some(json!({"recipient_id": "agent_alpha", "event_ids": [event_id]})),
            "admin",
        ),
        (
            Method::POST,
            "/v1/admin/parked/purge".into(),
            Some(json!({"recipient_id": "agent_alpha", "event_ids": [event_id]})),
            "admin",
        ),
        (
            Method::POST,
            "/v1/admin/quarantine".into(),
            Some(json!({"recipient_id": "agent_alpha", "event_ids": [event_id], "reason": "r"})),
            "admin",
        ),
        (
            Method::POST,
            "/v1/admin/quarantine/release".into(),
            Some(json!({"recipient_id": "agent_alpha", "event_ids": [event_id]})),
            "admin",
        ),
        (Method::GET, "/v1/admin/inboxes/agent_alpha/events".into(), None, "admin"),
        (Method::GET, format!("/v1/admin/inboxes/agent_alpha/events/{event_id}"), None, "admin"),
        (Method::GET, "/v1/admin/sessions".into(), None, "admin"),
        (Method::GET, "/v1/admin/callbacks".into(), None, "admin"),
        (Method::GET, "/v1/admin/agent-keys".into(), None, "admin"),
        (Method::GET, "/v1/admin/activity".into(), None, "admin"),
    ]
}

async fn token_matrix_against_every_endpoint(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let published = server.publish(&publisher, &["agent_alpha"], json!({})).await;
    let event_id = published["deliveries"][0]["event_id"].as_str().unwrap().to_owned();
    let no_scopes = server.token("t1", "agent_alpha", CallerKind::Agent, "").await;
    for (method, path, body, scope) in endpoints(&event_id) {
        let result = server.call(method.clone(), &path, None, body.clone()).await;
        assert_problem(&result, StatusCode::UNAUTHORIZED, "unauthorized");
        let result = server.call(method.clone(), &path, Some(&no_scopes), body.clone()).await;
        assert_problem(&result, StatusCode::FORBIDDEN, "scope_missing");
        assert_eq!(result.1["scope"], scope, "{method} {path}");
    }
    // Naming another tenant or agent in a body or path is refused.
    let agent = server.agent("t1", "agent_alpha").await;
    let lease = format!("lease_{}", "0".repeat(32));
    let mismatches = [
        ("/v1/inbox/poll-after-cursor", json!({"tenant_id": "t2", "after_seq": 0})),
        ("/v1/inbox/poll-after-cursor", json!({"recipient_id": "agent_beta", "after_seq": 0})),
        ("/v1/inbox/claim", json!({"tenant_id": "t2"})),
        ("/v1/inbox/claim", json!({"recipient_id": "agent_beta"})),
        (
            "/v1/inbox/acknowledge",
            json!({"tenant_id": "t2", "acks": [{"event_id": event_id, "lease_token": lease}]}),
        ),
        (
            "/v1/inbox/release",
            json!({"recipient_id": "agent_beta", "event_id": event_id, "lease_token": lease}),
        ),
        (
            "/v1/inbox/heartbeat",
            json!({"tenant_id": "t2", "leases": [{"event_id": event_id, "lease_token": lease, "extend_by_seconds": 60}]}),
        ),
        ("/v1/agent-sessions/subscribe", json!({"agent_id": "agent_beta"})),
    ];
    for (path, body) in mismatches {
        assert_problem(&server.post(path, &agent, body).await, StatusCode::FORBIDDEN, "tenant_mismatch");
    }
    let cross = server
        .post(
            "/v1/events",
            &publisher,
            json!({"tenant_id": "t2", "recipients": ["agent_alpha"], "event_type": "t"}),
        )
        .await;
    assert_problem(&cross, StatusCode::FORBIDDEN, "tenant_mismatch");
    let admin_kind = server.token("t1", "agent_alpha", CallerKind::Agent, "admin").await;
    assert_problem(
        &server.call(Method::GET, "/v1/admin/parked", Some(&admin_kind), None).await,
        StatusCode::FORBIDDEN,
        "kind_not_allowed",
    );
    server.stop().await;
}

async fn events_of_others_are_invisible(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher_t1 = server.publisher("t1").await;
    let publisher_t2 = server.publisher("t2").await;
    server.publish(&publisher_t1, &["agent_alpha"], json!({"for": "t1 alpha"})).await;
    let beta_event = server.publish(&publisher_t1, &["agent_beta"], json!({"for": "t1 beta"})).await;
    server.publish(&publisher_t2, &["agent_alpha"], json!({"for": "t2 alpha"})).await;
    let alpha_t1 = server.agent("t1", "agent_alpha").await;
    let alpha_t2 = server.agent("t2", "agent_alpha").await;

    for (token, expected) in [(&alpha_t1, "t1 alpha"), (&alpha_t2, "t2 alpha")] {
        let (_, page) = server.post("/v1/inbox/poll-after-cursor", token, json!({"after_seq": 0})).await;
        let events = page["events"].as_array().unwrap();
        assert_eq!(events.len(), 1, "{page}");
        assert_eq!(events[0]["payload"]["for"], expected);
    }
    // alpha cannot claim, ack, release or heartbeat beta's event, even knowing its id.
    let beta_id = beta_event["deliveries"][0]["event_id"].clone();
    let (_, claim) = server.post("/v1/inbox/claim", &alpha_t1, json!({"event_ids": [beta_id]})).await;
    assert_eq!(claim["rejected"][0]["error"]["code"], "event_not_found", "{claim}");
    let zero = format!("lease_{}", "0".repeat(32));
    assert_problem(
        &server.post("/v1/inbox/release", &alpha_t1, json!({"event_id": beta_id, "lease_token": zero})).await,
        StatusCode::NOT_FOUND,
        "event_not_found",
    );
    // t2's admin sees nothing of t1.
    let admin_t2 = server.token("t2", "ops", CallerKind::Admin, "admin").await;
    let (_, inboxes) = server.call(Method::GET, "/v1/admin/inboxes", Some(&admin_t2), None).await;
    assert!(
        inboxes["inboxes"].as_array().unwrap().iter().all(|i| i["recipient_id"] == "agent_alpha"),
        "{inboxes}"
    );
    assert_eq!(inboxes["inboxes"].as_array().unwrap().len(), 1);
    server.stop().await;
}
