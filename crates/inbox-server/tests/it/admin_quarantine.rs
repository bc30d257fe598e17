//! Quarantine over real HTTP: an agent sets a claimed event aside by acknowledging it
//! `quarantined` (seed 001's route and seed 000's alias); an operator quarantines available
//! and claimed events and releases them; repeats are accepted unchanged; quarantined events are
//! never claimed; operators of another tenant see nothing; bad input gets precise problems.

use inbox_conformance::Backend;
use inbox_server::CallerKind;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{TestServer, assert_problem, both_backends};

both_backends!(
    an_agent_quarantines_by_acknowledging,
    an_operator_quarantines_available_and_claimed_events_and_releases_them,
    another_tenants_operator_finds_nothing,
    agent_tokens_are_refused_on_every_admin_route,
    bad_quarantine_input_gets_precise_problems,
);

pub const AGENT: &str = "agent_alpha";

pub async fn admin(server: &TestServer, tenant: &str) -> String {
    server.token(tenant, "ops", CallerKind::Admin, "admin").await
}

pub async fn get(server: &TestServer, path: &str, token: &str) -> Value {
    let (status, body) = server.call(Method::GET, path, Some(token), None).await;
    assert_eq!(status, StatusCode::OK, "GET {path}: {body}");
    body
}

/// Publishes one event to `AGENT` and returns its id.
pub async fn publish_one(server: &TestServer, publisher: &str, n: u64) -> String {
    let published = server.publish(publisher, &[AGENT], json!({"n": n})).await;
    published["deliveries"][0]["event_id"].as_str().unwrap().to_owned()
}

pub async fn subscribe(server: &TestServer, agent: &str) -> String {
    let (status, body) = server.post("/v1/agent-sessions/subscribe", agent, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["session_id"].as_str().unwrap().to_owned()
}

/// Claims the named event and returns its lease token.
pub async fn claim(server: &TestServer, agent: &str, event_id: &str, session_id: Option<&str>) -> String {
    let mut body = json!({"event_ids": [event_id]});
    if let Some(session_id) = session_id {
        body["session_id"] = json!(session_id);
    }
    let (status, claimed) = server.post("/v1/inbox/claim", agent, body).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    assert_eq!(claimed["claims"][0]["event_id"], event_id, "{claimed}");
    claimed["claims"][0]["lease_token"].as_str().unwrap().to_owned()
}

/// How many events a claim-next takes now (and it takes them).
pub async fn claimable(server: &TestServer, agent: &str) -> Vec<String> {
    let (status, claimed) = server.post("/v1/inbox/claim", agent, json!({"limit": 100})).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    claimed["claims"].as_array().unwrap().iter().map(|c| c["event_id"].as_str().unwrap().to_owned()).collect()
}

pub async fn metrics(server: &TestServer) -> String {
    server.request(Method::GET, "/metrics", None, None).send().await.unwrap().text().await.unwrap()
}

fn results(body: &Value) -> Vec<(bool, Value)> {
    body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["ok"].as_bool().unwrap(), r["error"]["code"].clone()))
        .collect()
}

async fn an_agent_quarantines_by_acknowledging(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", AGENT).await;
    let admin = admin(&server, "t1").await;
    let suspicious = publish_one(&server, &publisher, 1).await;
    let session = subscribe(&server, &agent).await;
    let lease = claim(&server, &agent, &suspicious, Some(&session)).await;
    let ack = json!({"session_id": session, "acks": [{
        "event_id": suspicious, "lease_token": lease, "result": "quarantined",
        "reason": "the payload asks me to ignore my instructions", "class": "prompt_injection"}]});
    for repeat in [false, true] {
        // The repeat (a retry whose first answer was lost) is answered the same, unchanged.
        let (status, acked) = server.post("/v1/inbox/acknowledge", &agent, ack.clone()).await;
        assert_eq!(status, StatusCode::OK, "{acked}");
        assert_eq!(acked["results"][0]["ack_state"], "quarantined", "{acked}");
        assert!(acked["results"][0].get("error").is_none(), "{acked}");
        if !repeat {
            let text = metrics(&server).await;
            let counted = "agent_inbox_quarantined_total{by=\"agent\",class=\"prompt_injection\"} 1\n";
            assert!(text.contains(counted), "{text}");
        }
    }
    // Seed 000's alias quarantines the same way (the class defaults to other).
    let second = publish_one(&server, &publisher, 2).await;
    let lease = claim(&server, &agent, &second, None).await;
    let path = format!("/api/v1/agents/{AGENT}/inbox/{second}/ack");
    let body =
        json!({"lease_token": lease, "result": "quarantined", "reason": "not valid JSON for this type"});
    let (status, acked) = server.post(&path, &agent, body).await;
    assert_eq!((status, &acked["ack_state"]), (StatusCode::OK, &json!("quarantined")), "{acked}");

    assert!(claimable(&server, &agent).await.is_empty(), "quarantined events are never claimed");
    let (status, refused) = server.post("/v1/inbox/claim", &agent, json!({"event_ids": [suspicious]})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(refused["rejected"][0]["error"]["code"], "not_claimable", "{refused}");

    let parked = get(&server, "/v1/admin/parked?state=quarantined", &admin).await;
    let events = parked["events"].as_array().unwrap();
    assert_eq!(events.len(), 2, "{parked}");
    let first = events.iter().find(|e| e["event_id"] == suspicious.as_str()).unwrap();
    assert_eq!(first["ack_state"], "quarantined");
    assert_eq!(first["dead_letter_state"], "anomaly");
    assert_eq!(first["reason"], "the payload asks me to ignore my instructions");
    assert_eq!(first["session_id"], session.as_str(), "the session that quarantined it");
    assert!(first["terminal_at_utc"].as_str().is_some_and(|t| t.ends_with('Z')), "{first}");
    assert_eq!(first["recipient_id"], AGENT);
    let inboxes = get(&server, "/v1/admin/inboxes", &admin).await;
    assert_eq!((&inboxes["inboxes"][0]["parked"], &inboxes["inboxes"][0]["depth"]), (&json!(2), &json!(0)));

    let text = metrics(&server).await;
    assert!(text.contains("agent_inbox_quarantined_total{by=\"agent\",class=\"other\"} 1\n"), "{text}");
    server.stop().await;
}

async fn an_operator_quarantines_available_and_claimed_events_and_releases_them(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", AGENT).await;
    let admin = admin(&server, "t1").await;
    let waiting = publish_one(&server, &publisher, 1).await;
    let held = publish_one(&server, &publisher, 2).await;
    let done = publish_one(&server, &publisher, 3).await;
    let lease = claim(&server, &agent, &held, None).await;
    let done_lease = claim(&server, &agent, &done, None).await;
    let (_, acked) = server
        .post(
            "/v1/inbox/acknowledge",
            &agent,
            json!({"acks": [{"event_id": done, "lease_token": done_lease}]}),
        )
        .await;
    assert_eq!(acked["results"][0]["ack_state"], "acked");

    let quarantine = json!({"recipient_id": AGENT, "event_ids": [waiting, held, done],
        "reason": "tenant policy forbids this sender", "class": "policy"});
    let (status, first) = server.post("/v1/admin/quarantine", &admin, quarantine.clone()).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(
        results(&first),
        [(true, Value::Null), (true, Value::Null), (false, json!("event_terminal"))],
        "available and claimed events are quarantined, an acknowledged one is refused: {first}"
    );
    let (_, repeat) = server.post("/v1/admin/quarantine", &admin, quarantine).await;
    assert_eq!(
        results(&repeat)[..2],
        [(true, Value::Null), (true, Value::Null)],
        "repeats are accepted: {repeat}"
    );

    // The holder's lease ended with the quarantine: its acknowledge and heartbeat are refused.
    let (_, late) = server
        .post("/v1/inbox/acknowledge", &agent, json!({"acks": [{"event_id": held, "lease_token": lease}]}))
        .await;
    assert_eq!(late["results"][0]["error"]["code"], "lease_expired", "{late}");
    let (_, beat) = server
        .post(
            "/v1/inbox/heartbeat",
            &agent,
            json!({"leases": [{"event_id": held, "lease_token": lease, "extend_by_seconds": 60}]}),
        )
        .await;
    assert!(beat["leases"][0]["error"]["code"].is_string(), "{beat}");
    assert!(claimable(&server, &agent).await.is_empty(), "quarantined events are never claimed");

    let parked =
        get(&server, &format!("/v1/admin/parked?recipient_id={AGENT}&state=quarantined"), &admin).await;
    let reasons: Vec<&Value> = parked["events"].as_array().unwrap().iter().map(|e| &e["reason"]).collect();
    assert_eq!(reasons, [&json!("tenant policy forbids this sender"); 2], "{parked}");

    let release = json!({"recipient_id": AGENT, "event_ids": [waiting, held]});
    for _ in 0..2 {
        // The second release finds both available: accepted, unchanged.
        let (status, released) = server.post("/v1/admin/quarantine/release", &admin, release.clone()).await;
        assert_eq!(status, StatusCode::OK, "{released}");
        assert_eq!(results(&released), [(true, Value::Null), (true, Value::Null)], "{released}");
    }
    let mut again = claimable(&server, &agent).await;
    again.sort();
    let mut expected = vec![waiting.clone(), held.clone()];
    expected.sort();
    assert_eq!(again, expected, "released events are claimable at once");
    // Only a quarantined (or already released, available) event can be released.
    let (_, not_quarantined) = server
        .post(
            "/v1/admin/quarantine/release",
            &admin,
            json!({"recipient_id": AGENT, "event_ids": [waiting, done]}),
        )
        .await;
    assert_eq!(
        results(&not_quarantined),
        [(false, json!("not_quarantined")), (false, json!("not_quarantined"))],
        "claimed and acknowledged events are not quarantined: {not_quarantined}"
    );

    let text = metrics(&server).await;
    assert!(text.contains("agent_inbox_quarantined_total{by=\"operator\",class=\"policy\"} 2\n"), "{text}");
    assert!(text.contains("agent_inbox_quarantine_releases_total 2\n"), "{text}");
    server.stop().await;
}

async fn another_tenants_operator_finds_nothing(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", AGENT).await;
    let event = publish_one(&server, &publisher, 1).await;
    let other = admin(&server, "t2").await;
    let batch = json!({"recipient_id": AGENT, "event_ids": [event]});
    let mut quarantine = batch.clone();
    quarantine["reason"] = json!("not yours");
    for (path, body) in [
        ("/v1/admin/quarantine", quarantine),
        ("/v1/admin/quarantine/release", batch.clone()),
        ("/v1/admin/parked/requeue", batch.clone()),
        ("/v1/admin/parked/purge", batch),
    ] {
        let (status, answer) = server.post(path, &other, body).await;
        assert_eq!(status, StatusCode::OK, "{path}: {answer}");
        assert_eq!(results(&answer), [(false, json!("event_not_found"))], "{path}: {answer}");
    }
    let detail = server
        .call(Method::GET, &format!("/v1/admin/inboxes/{AGENT}/events/{event}"), Some(&other), None)
        .await;
    assert_problem(&detail, StatusCode::NOT_FOUND, "not_found");
    let events = get(&server, &format!("/v1/admin/inboxes/{AGENT}/events"), &other).await;
    assert_eq!(events["events"], json!([]));
    assert_eq!(get(&server, "/v1/admin/inboxes", &other).await["inboxes"], json!([]));
    assert_eq!(get(&server, "/v1/admin/sessions", &other).await["sessions"], json!([]));
    // The event is untouched for its own tenant.
    assert_eq!(claimable(&server, &agent).await, [event]);
    server.stop().await;
}

/// Every admin route with a valid body, so a refusal can only be about the caller.
pub fn admin_routes(event_id: &str) -> Vec<(Method, String, Option<Value>)> {
    let batch = json!({"recipient_id": AGENT, "event_ids": [event_id]});
    let mut quarantine = batch.clone();
    quarantine["reason"] = json!("a reason");
    vec![
        (Method::GET, "/v1/admin/parked".into(), None),
        (Method::POST, "/v1/admin/parked/requeue".into(), Some(batch.clone())),
        (Method::POST, "/v1/admin/parked/purge".into(), Some(batch.clone())),
        (Method::POST, "/v1/admin/quarantine".into(), Some(quarantine)),
        (Method::POST, "/v1/admin/quarantine/release".into(), Some(batch)),
        (Method::GET, "/v1/admin/inboxes".into(), None),
        (Method::GET, format!("/v1/admin/inboxes/{AGENT}/events"), None),
        (Method::GET, format!("/v1/admin/inboxes/{AGENT}/events/{event_id}"), None),
        (Method::GET, "/v1/admin/sessions".into(), None),
        (Method::GET, "/v1/admin/callbacks".into(), None),
        (Method::GET, "/v1/admin/agent-keys".into(), None),
        (Method::GET, "/v1/admin/activity".into(), None),
    ]
}

async fn agent_tokens_are_refused_on_every_admin_route(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let event = publish_one(&server, &publisher, 1).await;
    let agent = server.agent("t1", AGENT).await;
    // An agent token that somehow carries the admin scope is still not an operator's.
    let agent_with_admin_scope = server.token("t1", AGENT, CallerKind::Agent, "admin").await;
    let admin_without_scope = server.token("t1", "ops", CallerKind::Admin, "inbox.poll").await;
    for (method, path, body) in admin_routes(&event) {
        let refused = server.call(method.clone(), &path, Some(&agent), body.clone()).await;
        assert_problem(&refused, StatusCode::FORBIDDEN, "scope_missing");
        let refused = server.call(method.clone(), &path, Some(&agent_with_admin_scope), body.clone()).await;
        assert_problem(&refused, StatusCode::FORBIDDEN, "kind_not_allowed");
        let refused = server.call(method.clone(), &path, Some(&admin_without_scope), body.clone()).await;
        assert_problem(&refused, StatusCode::FORBIDDEN, "scope_missing");
        let refused = server.call(method.clone(), &path, None, body).await;
        assert_problem(&refused, StatusCode::UNAUTHORIZED, "unauthorized");
    }
    // Nothing any of them sent changed the event.
    assert_eq!(claimable(&server, &agent).await, [event]);
    server.stop().await;
}

/// `(status, body)` must be a 400 `code` naming `field`.
fn assert_field(result: &(StatusCode, Value), code: &str, field: &str) {
    assert_problem(result, StatusCode::BAD_REQUEST, code);
    assert_eq!(result.1["field"], field, "{}", result.1);
}

async fn bad_quarantine_input_gets_precise_problems(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", AGENT).await;
    let admin = admin(&server, "t1").await;
    let event = publish_one(&server, &publisher, 1).await;
    let lease = claim(&server, &agent, &event, None).await;

    let ack = |extra: Value| {
        let mut entry = json!({"event_id": event, "lease_token": lease});
        entry.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        json!({"acks": [entry]})
    };
    let long = "x".repeat(201);
    for (extra, field) in [
        (json!({"result": "quarantined"}), "acks[0].reason"),
        (json!({"result": "quarantined", "reason": ""}), "acks[0].reason"),
        (json!({"result": "quarantined", "reason": long}), "acks[0].reason"),
        (json!({"result": "quarantined", "reason": "two\nlines"}), "acks[0].reason"),
        (json!({"result": "quarantined", "reason": "r", "class": "spam"}), "acks[0].class"),
        (json!({"result": "completed", "reason": "r"}), "acks[0].reason"),
        (json!({"reason": "r"}), "acks[0].reason"),
        (json!({"result": "failed", "reason": "r", "class": "policy"}), "acks[0].class"),
        (json!({"result": "set_aside"}), "acks[0].result"),
    ] {
        let refused = server.post("/v1/inbox/acknowledge", &agent, ack(extra.clone())).await;
        assert_field(&refused, "invalid_field", field);
        assert!(refused.1["detail"].as_str().unwrap().starts_with(field), "{extra}: {}", refused.1);
    }
    let alias = format!("/api/v1/agents/{AGENT}/inbox/{event}/ack");
    let refused = server.post(&alias, &agent, json!({"lease_token": lease, "result": "quarantined"})).await;
    assert_field(&refused, "invalid_field", "reason");

    let batch = |extra: Value| {
        let mut body = json!({"recipient_id": AGENT, "event_ids": [event]});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    for (body, code, field) in [
        (batch(json!({"reason": ""})), "invalid_field", "reason"),
        (batch(json!({"reason": "a".repeat(201)})), "invalid_field", "reason"),
        (batch(json!({"reason": "tab\there"})), "invalid_field", "reason"),
        (batch(json!({"reason": "r", "class": "spam"})), "invalid_field", "class"),
        (
            json!({"recipient_id": AGENT, "event_ids": ["not-a-uuid"], "reason": "r"}),
            "invalid_field",
            "event_ids[0]",
        ),
        (
            json!({"recipient_id": "bad id", "event_ids": [event], "reason": "r"}),
            "invalid_field",
            "recipient_id",
        ),
        (json!({"recipient_id": AGENT, "event_ids": [], "reason": "r"}), "invalid_field", "event_ids"),
        (
            json!({"recipient_id": AGENT, "event_ids": [event, event], "reason": "r"}),
            "invalid_field",
            "event_ids[1]",
        ),
    ] {
        assert_field(&server.post("/v1/admin/quarantine", &admin, body).await, code, field);
    }
    let missing = server.post("/v1/admin/quarantine", &admin, batch(json!({}))).await;
    assert_problem(&missing, StatusCode::BAD_REQUEST, "invalid_field");
    assert!(missing.1["detail"].as_str().unwrap().contains("reason"), "{}", missing.1);
    let twice = json!({"recipient_id": AGENT, "event_ids": [event, event]});
    for path in ["/v1/admin/quarantine/release", "/v1/admin/parked/requeue", "/v1/admin/parked/purge"] {
        assert_field(&server.post(path, &admin, twice.clone()).await, "invalid_field", "event_ids[1]");
    }
    let unknown = server.post("/v1/admin/quarantine/release", &admin, batch(json!({"reason": "r"}))).await;
    assert_problem(&unknown, StatusCode::BAD_REQUEST, "unknown_field");

    let query = |path: String| {
        let server = &server;
        let admin = admin.clone();
        async move { server.call(Method::GET, &path, Some(&admin), None).await }
    };
    let events = format!("/v1/admin/inboxes/{AGENT}/events");
    assert_field(&query(format!("{events}?state=parked")).await, "invalid_field", "state");
    assert_field(&query(format!("{events}?limit=0")).await, "invalid_field", "limit");
    assert_field(&query(format!("{events}?after_seq=x")).await, "invalid_query", "after_seq");
    assert_field(&query(format!("{events}?order=latest")).await, "invalid_query", "order");
    assert_field(&query(format!("{events}?status=acked")).await, "invalid_query", "status");
    assert_field(&query(format!("{events}/not-a-uuid")).await, "invalid_field", "event_id");
    assert_field(&query("/v1/admin/inboxes/bad%20id/events".into()).await, "invalid_field", "recipient_id");
    assert_field(&query("/v1/admin/parked?state=acked".into()).await, "invalid_field", "state");
    assert_field(&query("/v1/admin/activity?minutes=0".into()).await, "invalid_field", "minutes");
    assert_field(&query("/v1/admin/activity?minutes=1441".into()).await, "invalid_field", "minutes");
    assert_field(
        &query("/v1/admin/sessions?recipient_id=bad%20id".into()).await,
        "invalid_field",
        "recipient_id",
    );

    // Nothing refused changed the event: the lease still acknowledges it.
    let (_, acked) = server.post("/v1/inbox/acknowledge", &agent, ack(json!({}))).await;
    assert_eq!(acked["results"][0]["ack_state"], "acked", "{acked}");
    server.stop().await;
}
