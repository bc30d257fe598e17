//! The meeting-room domain over HTTP: a post reaches every member's inbox (and only members'),
//! membership changes reach later posts, posts deduplicate, and rooms stay inside their
//! tenant; every refusal is a problem with a stable code.

use std::time::{Duration, Instant};

use inbox_server::CallerKind;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{TestServer, assert_problem, both_backends};
use inbox_conformance::Backend;

both_backends!(
    room_posts_reach_every_member_and_nobody_else,
    room_posts_deduplicate_by_key,
    room_refusals_are_problems_with_stable_codes,
    rooms_are_invisible_to_other_tenants,
);

/// Every event of `agent`'s inbox after cursor 0.
async fn events_of(server: &TestServer, token: &str) -> Vec<Value> {
    let (status, page) = server.post("/v1/inbox/poll-after-cursor", token, json!({"after_seq": 0})).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["events"].as_array().unwrap().clone()
}

fn message_ids(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["correlation"]["message_id"].as_str().unwrap()).collect()
}

async fn room_posts_reach_every_member_and_nobody_else(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let (alpha, beta, gamma) = (
        server.agent("t1", "agent_alpha").await,
        server.agent("t1", "agent_beta").await,
        server.agent("t1", "agent_gamma").await,
    );
    let (status, room) = server
        .post(
            "/v1/rooms",
            &publisher,
            json!({"room_id": "room_7", "name": "Standup", "members": ["agent_beta", "agent_alpha"]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{room}");
    assert_eq!(room["room_id"], "room_7");
    assert_eq!(room["name"], "Standup");
    assert_eq!(room["members"], json!(["agent_alpha", "agent_beta"]));
    assert!(room["created_at_utc"].as_str().is_some_and(|t| t.ends_with('Z')));

    let (status, posted) = server
        .post(
            "/v1/rooms/room_7/messages",
            &publisher,
            json!({"body": {"text": "Standup moved to 10:00"}, "priority": "high"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{posted}");
    assert_eq!((posted["room_id"].clone(), posted["message_id"].clone()), (json!("room_7"), json!("1")));
    assert_eq!(posted["deduplicated"], false);
    let deliveries = posted["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 2);
    assert_eq!(deliveries[0]["recipient_id"], "agent_alpha");

    for (token, name) in [(&alpha, "agent_alpha"), (&beta, "agent_beta")] {
        let events = events_of(&server, token).await;
        assert_eq!(events.len(), 1, "{name}: {events:?}");
        let event = &events[0];
        assert_eq!(event["event_type"], "meeting_room.message_posted");
        assert_eq!(event["priority"], "high");
        assert_eq!(event["correlation"]["meeting_room_id"], "room_7");
        assert_eq!(event["correlation"]["message_id"], "1");
        assert_eq!(
            event["payload"],
            json!({"author": "publisher_app", "body": {"text": "Standup moved to 10:00"}}),
            "the message travels inline with its author"
        );
        assert!(event.get("payload_ref").is_none_or(Value::is_null), "{event}");
        let delivered = deliveries.iter().find(|d| d["recipient_id"] == name).unwrap();
        assert_eq!(event["event_id"], delivered["event_id"]);
    }
    assert!(events_of(&server, &gamma).await.is_empty(), "a non-member gets nothing");

    // A member agent may read its room; a non-member is told it does not exist.
    let (status, seen) = server.call(Method::GET, "/v1/rooms/room_7", Some(&alpha), None).await;
    assert_eq!(status, StatusCode::OK, "{seen}");
    assert_eq!(seen["members"], json!(["agent_alpha", "agent_beta"]));
    let hidden = server.call(Method::GET, "/v1/rooms/room_7", Some(&gamma), None).await;
    assert_problem(&hidden, StatusCode::NOT_FOUND, "room_not_found");

    // gamma joins and waits; the next post wakes its long poll at once.
    let (status, room) =
        server.post("/v1/rooms/room_7/members", &publisher, json!({"members": ["agent_gamma"]})).await;
    assert_eq!(status, StatusCode::OK, "{room}");
    assert_eq!(room["members"], json!(["agent_alpha", "agent_beta", "agent_gamma"]));
    let started = Instant::now();
    let (waited, (status, second)) = tokio::join!(
        server.post("/v1/inbox/poll-after-cursor", &gamma, json!({"after_seq": 0, "wait_seconds": 20})),
        async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            server.post("/v1/rooms/room_7/messages", &publisher, json!({"body": "second"})).await
        }
    );
    assert_eq!(status, StatusCode::CREATED, "{second}");
    assert_eq!(second["message_id"], "2");
    assert_eq!(waited.0, StatusCode::OK, "{}", waited.1);
    assert_eq!(waited.1["events"][0]["payload"]["body"], "second");
    assert!(started.elapsed() < Duration::from_secs(10), "woken by the commit, not the deadline");

    let (status, room) =
        server.call(Method::DELETE, "/v1/rooms/room_7/members/agent_alpha", Some(&publisher), None).await;
    assert_eq!(status, StatusCode::OK, "{room}");
    assert_eq!(room["members"], json!(["agent_beta", "agent_gamma"]));
    let (status, third) = server.post("/v1/rooms/room_7/messages", &publisher, json!({"body": [3]})).await;
    assert_eq!(status, StatusCode::CREATED, "{third}");
    assert_eq!(
        message_ids(&events_of(&server, &alpha).await),
        ["1", "2"],
        "removal reaches later posts only"
    );
    assert_eq!(message_ids(&events_of(&server, &beta).await), ["1", "2", "3"]);
    assert_eq!(
        message_ids(&events_of(&server, &gamma).await),
        ["2", "3"],
        "joining reaches later posts only"
    );
    server.stop().await;
}

async fn room_posts_deduplicate_by_key(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let alpha = server.agent("t1", "agent_alpha").await;
    let (status, _) = server
        .post("/v1/rooms", &publisher, json!({"room_id": "room_7", "members": ["agent_alpha", "agent_beta"]}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let post = |body: Value| server.post("/v1/rooms/room_7/messages", &publisher, body);
    let (status, first) = post(json!({"body": {"v": 1}, "deduplication_key": "msg:room_7:920155"})).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let (status, again) = post(json!({"body": {"v": 2}, "deduplication_key": "msg:room_7:920155"})).await;
    assert_eq!(status, StatusCode::OK, "a repeat answers 200: {again}");
    assert_eq!(again["deduplicated"], true);
    assert_eq!(again["message_id"], first["message_id"]);
    let ids = |v: &Value| -> Vec<Value> {
        v["deliveries"].as_array().unwrap().iter().map(|d| d["event_id"].clone()).collect()
    };
    assert_eq!(ids(&again), ids(&first), "the first post's events");
    assert!(again["deliveries"].as_array().unwrap().iter().all(|d| d["deduplicated"] == true));
    let events = events_of(&server, &alpha).await;
    assert_eq!(events.len(), 1, "no second event: {events:?}");
    assert_eq!(events[0]["payload"]["body"], json!({"v": 1}));
    let (status, other) = post(json!({"body": {"v": 3}, "deduplication_key": "msg:room_7:920156"})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(other["message_id"], "2");
    server.stop().await;
}

async fn room_refusals_are_problems_with_stable_codes(backend: Backend) {
    let server = TestServer::start_with(backend, |c| c.inbox.payload_bytes_limit = 1024).await;
    let publisher = server.publisher("t1").await;
    let alpha = server.agent("t1", "agent_alpha").await;
    let events_only = server.token("t1", "publisher_app", CallerKind::Publisher, "events.publish").await;
    let (status, _) =
        server.post("/v1/rooms", &publisher, json!({"room_id": "room_7", "members": ["agent_alpha"]})).await;
    assert_eq!(status, StatusCode::CREATED);

    // Unknown rooms, on every route.
    let unknown: [(Method, &str, Option<Value>); 4] = [
        (Method::GET, "/v1/rooms/room_404", None),
        (Method::POST, "/v1/rooms/room_404/messages", Some(json!({"body": {}}))),
        (Method::POST, "/v1/rooms/room_404/members", Some(json!({"members": ["agent_alpha"]}))),
        (Method::DELETE, "/v1/rooms/room_404/members/agent_alpha", None),
    ];
    for (method, path, body) in unknown {
        let refused = server.call(method, path, Some(&publisher), body).await;
        assert_problem(&refused, StatusCode::NOT_FOUND, "room_not_found");
        assert_eq!(refused.1["room_id"], "room_404");
    }

    // Scopes: an agent cannot write rooms; a token with neither way in cannot read one.
    let writes: [(Method, &str, Option<Value>); 4] = [
        (Method::POST, "/v1/rooms", Some(json!({"room_id": "room_8"}))),
        (Method::POST, "/v1/rooms/room_7/messages", Some(json!({"body": {}}))),
        (Method::POST, "/v1/rooms/room_7/members", Some(json!({"members": ["agent_alpha"]}))),
        (Method::DELETE, "/v1/rooms/room_7/members/agent_alpha", None),
    ];
    for (method, path, body) in writes {
        let refused = server.call(method, path, Some(&alpha), body).await;
        assert_problem(&refused, StatusCode::FORBIDDEN, "scope_missing");
        assert_eq!(refused.1["scope"], "rooms.write");
    }
    let refused = server.call(Method::GET, "/v1/rooms/room_7", Some(&events_only), None).await;
    assert_problem(&refused, StatusCode::FORBIDDEN, "scope_missing");
    let refused = server.call(Method::GET, "/v1/rooms/room_7", None, None).await;
    assert_problem(&refused, StatusCode::UNAUTHORIZED, "unauthorized");

    let taken = server.post("/v1/rooms", &publisher, json!({"room_id": "room_7"})).await;
    assert_problem(&taken, StatusCode::CONFLICT, "room_exists");

    // Validation names the field.
    let invalid: [(&str, Value, &str); 9] = [
        ("/v1/rooms", json!({"room_id": "room/8"}), "room_id"),
        ("/v1/rooms", json!({"room_id": ""}), "room_id"),
        ("/v1/rooms", json!({"room_id": "room_8", "name": "n".repeat(201)}), "name"),
        ("/v1/rooms", json!({"room_id": "room_8", "members": ["agent_alpha", "bad agent"]}), "members[1]"),
        ("/v1/rooms/room_7/members", json!({"members": []}), "members"),
        ("/v1/rooms/room_7/messages", json!({"body": {}, "priority": "asap"}), "priority"),
        (
            "/v1/rooms/room_7/messages",
            json!({"body": {}, "deduplication_key": "has space"}),
            "deduplication_key",
        ),
        ("/v1/rooms/room%2F7/messages", json!({"body": {}}), "room_id"),
        ("/v1/rooms/room_7/messages", json!({"priority": "low"}), "body"),
    ];
    for (path, body, field) in invalid {
        let refused = server.post(path, &publisher, body.clone()).await;
        assert_problem(&refused, StatusCode::BAD_REQUEST, "invalid_field");
        assert_eq!(refused.1["field"], field, "{path} {body}: {}", refused.1);
    }
    let unknown_field =
        server.post("/v1/rooms", &publisher, json!({"room_id": "room_8", "tenant_id": "t2"})).await;
    assert_problem(&unknown_field, StatusCode::BAD_REQUEST, "unknown_field");
    let huge = server
        .post("/v1/rooms/room_7/messages", &publisher, json!({"body": {"text": "x".repeat(2_000)}}))
        .await;
    assert_problem(&huge, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    assert!(events_of(&server, &alpha).await.is_empty(), "no refusal wrote an event");
    server.stop().await;
}

async fn rooms_are_invisible_to_other_tenants(backend: Backend) {
    let server = TestServer::start(backend).await;
    let (t1, t2) = (server.publisher("t1").await, server.publisher("t2").await);
    let (t1_alpha, t2_alpha) =
        (server.agent("t1", "agent_alpha").await, server.agent("t2", "agent_alpha").await);
    let (status, _) =
        server.post("/v1/rooms", &t1, json!({"room_id": "room_7", "members": ["agent_alpha"]})).await;
    assert_eq!(status, StatusCode::CREATED);

    for (method, path, body) in [
        (Method::GET, "/v1/rooms/room_7", None),
        (Method::POST, "/v1/rooms/room_7/messages", Some(json!({"body": "from t2"}))),
        (Method::POST, "/v1/rooms/room_7/members", Some(json!({"members": ["agent_alpha"]}))),
        (Method::DELETE, "/v1/rooms/room_7/members/agent_alpha", None),
    ] {
        let refused = server.call(method, path, Some(&t2), body).await;
        assert_problem(&refused, StatusCode::NOT_FOUND, "room_not_found");
    }
    let hidden = server.call(Method::GET, "/v1/rooms/room_7", Some(&t2_alpha), None).await;
    assert_problem(&hidden, StatusCode::NOT_FOUND, "room_not_found");

    // t2 may have its own room_7; posts there stay in t2.
    let (status, _) =
        server.post("/v1/rooms", &t2, json!({"room_id": "room_7", "members": ["agent_alpha"]})).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, posted) = server.post("/v1/rooms/room_7/messages", &t2, json!({"body": "t2 only"})).await;
    assert_eq!(status, StatusCode::CREATED, "{posted}");
    assert!(events_of(&server, &t1_alpha).await.is_empty(), "t1's agent_alpha sees nothing of t2");
    let t2_events = events_of(&server, &t2_alpha).await;
    assert_eq!(t2_events.len(), 1);
    assert_eq!(t2_events[0]["tenant_id"], "t2");
    let (_, t1_room) = server.call(Method::GET, "/v1/rooms/room_7", Some(&t1), None).await;
    assert_eq!(t1_room["members"], json!(["agent_alpha"]), "t1's room is untouched");
    server.stop().await;
}
