//! Every refusal is a precise problem document, and a refused request changes nothing that
//! was committed.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::harness::{TestServer, assert_problem, both_backends};
use inbox_conformance::Backend;

both_backends!(
    malformed_requests_get_precise_problems_and_change_nothing,
    event_and_lease_refusals,
    cursor_reset_points_to_resync,
    resync_pages_through_open_events,
    rate_limits_answer_429_with_retry_after,
    authentication_refusals,
    forwarding_headers_count_only_from_trusted_proxies,
    whole_number_floats_are_integers_and_bodies_are_objects,
    messages_name_the_wire_fields_in_plain_words,
    fanout_bounds_are_the_served_documents,
);

/// The fan-out bound the served OpenAPI document states (`maxItems` of a publish's recipients
/// and of a room's members) is the one the server enforces: that many are taken, one more is
/// refused with the field named.
async fn fanout_bounds_are_the_served_documents(backend: Backend) {
    let server = TestServer::start(backend).await;
    let (status, document) = server.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    let max_items = |schema: &str, property: &str| {
        document["components"]["schemas"][schema]["properties"][property]["maxItems"].as_u64().unwrap()
            as usize
    };
    let agents = |n: usize| (0..n).map(|i| format!("agent_{i:04}")).collect::<Vec<_>>();
    let publisher = server.publisher("t1").await;
    let refused = |(status, body): (StatusCode, serde_json::Value), field: &str| {
        assert_eq!(
            (status, body["field"].as_str()),
            (StatusCode::BAD_REQUEST, Some(field)),
            "{}",
            body["detail"]
        );
    };

    let recipients_max = max_items("PublishRequest", "recipients");
    let publish = |n: usize| json!({"recipients": agents(n), "event_type": "t", "payload": {}});
    let (status, body) = server.post("/v1/events", &publisher, publish(recipients_max)).await;
    assert_eq!(status, StatusCode::CREATED, "{}", body["detail"]);
    refused(server.post("/v1/events", &publisher, publish(recipients_max + 1)).await, "recipients");

    let created_max = max_items("CreateRoomRequest", "members");
    let create = |room: &str, n: usize| json!({"room_id": room, "members": agents(n)});
    let (status, body) = server.post("/v1/rooms", &publisher, create("full", created_max)).await;
    assert_eq!(status, StatusCode::CREATED, "{}", body["detail"]);
    refused(server.post("/v1/rooms", &publisher, create("over", created_max + 1)).await, "members");

    let added_max = max_items("RoomMembersRequest", "members");
    let (status, body) = server.post("/v1/rooms", &publisher, create("empty", 0)).await;
    assert_eq!(status, StatusCode::CREATED, "{}", body["detail"]);
    let add = |n: usize| json!({"members": agents(n)});
    refused(server.post("/v1/rooms/empty/members", &publisher, add(added_max + 1)).await, "members");
    let (status, body) = server.post("/v1/rooms/empty/members", &publisher, add(added_max)).await;
    assert!(status.is_success(), "{status}: {}", body["detail"]);
    server.stop().await;
}

/// Problems speak the wire's names and plain words: `expires_at_utc` (not an internal name),
/// a number is not "items", a token that is not a JWT is said so (no library enum names), a
/// query-string error names its parameter; publish takes the name events answer with.
async fn messages_name_the_wire_fields_in_plain_words(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    let (status, body) = server
        .post(
            "/v1/events",
            &publisher,
            json!({"recipients": ["agent_alpha"], "event_type": "t", "available_at_utc": "2030-01-02T00:00:00Z",
                   "expires_at_utc": "2030-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("expires_at_utc")), "{body}");
    assert!(body["detail"].as_str().unwrap().contains("later than available_at_utc"), "{body}");
    let (status, body) = server
        .post(
            "/v1/events",
            &publisher,
            json!({"recipients": ["agent_alpha"], "event_type": "t", "expires_at_utc": "2001-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("expires_at_utc")), "{body}");
    assert!(body["detail"].as_str().unwrap().contains("already in the past"), "{body}");
    let (status, body) = server
        .post(
            "/v1/events",
            &publisher,
            json!({"recipients": ["agent_alpha"], "event_type": "t", "availability_at_utc": "2030-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "seed 001's availability_at_utc is taken on publish: {body}");
    let (_, page) = server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 0})).await;
    assert!(page["events"][0]["availability_at_utc"].as_str().unwrap().starts_with("2030-01-01T00:00:00"));
    let (_, body) =
        server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 0, "limit": 0})).await;
    assert_eq!(body["detail"], "limit: is 0; send between 1 and 500", "{body}");
    let (_, body) = server.call(Method::GET, "/v1/inbox/head", Some("not-a-jwt"), None).await;
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("not a JWT") && !detail.contains("InvalidToken"), "{body}");
    let (status, body) = server.call(Method::GET, "/v1/inbox/resync?limit=many", Some(&agent), None).await;
    assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("limit")), "{body}");
    server.stop().await;
}

/// JSON Schema's `integer` (the OpenAPI document) admits `5.0`, so the server does too; a
/// payload keeps its numbers as sent; a body that is an array is refused, not read as a
/// struct.
async fn whole_number_floats_are_integers_and_bodies_are_objects(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    server.publish(&publisher, &["agent_alpha"], json!({"ratio": 1.0})).await;
    let (status, page) =
        server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 0.0, "limit": 5.0})).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["events"][0]["payload"].to_string(), r#"{"ratio":1.0}"#, "the payload is untouched");
    assert_problem(
        &server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 0, "limit": 5.5})).await,
        StatusCode::BAD_REQUEST,
        "invalid_field",
    );
    let (status, body) = server.post("/v1/inbox/claim", &agent, json!([null, 5])).await;
    assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("body")), "{body}");
    server.stop().await;
}

async fn malformed_requests_get_precise_problems_and_change_nothing(backend: Backend) {
    let server = TestServer::start_with(backend, |c| c.inbox.payload_bytes_limit = 4_096).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    server.publish(&publisher, &["agent_alpha"], json!({"keep": true})).await;
    let (_, before) = server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 0})).await;

    let raw = |body: &'static str, content_type: &'static str| {
        server
            .client
            .post(format!("{}/v1/inbox/claim", server.base))
            .bearer_auth(&agent)
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    let read = |r: reqwest::Response| crate::harness::read(r);
    assert_problem(
        &read(raw("{\"limit\": 1", "application/json").await.unwrap()).await,
        StatusCode::BAD_REQUEST,
        "malformed_json",
    );
    assert_problem(
        &read(raw("{} {}", "application/json").await.unwrap()).await,
        StatusCode::BAD_REQUEST,
        "malformed_json",
    );
    assert_problem(
        &read(raw("{\"limit\": 1}", "text/plain").await.unwrap()).await,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    );
    assert_problem(
        &server.post("/v1/inbox/claim", &agent, json!({"limmit": 1})).await,
        StatusCode::BAD_REQUEST,
        "unknown_field",
    );
    let wrong_type = server.post("/v1/inbox/claim", &agent, json!({"limit": "ten"})).await;
    assert_problem(&wrong_type, StatusCode::BAD_REQUEST, "invalid_field");
    assert_eq!(wrong_type.1["field"], "limit");
    assert_problem(
        &server.post("/v1/inbox/claim", &agent, json!({"limit": 0})).await,
        StatusCode::BAD_REQUEST,
        "invalid_field",
    );
    assert_problem(
        &server.post("/v1/inbox/claim", &agent, json!({"limit": 501})).await,
        StatusCode::BAD_REQUEST,
        "invalid_field",
    );
    assert_problem(
        &server.post("/v1/inbox/claim", &agent, json!({"lease_seconds": 99_999})).await,
        StatusCode::BAD_REQUEST,
        "invalid_field",
    );
    assert_problem(
        &server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": -1})).await,
        StatusCode::BAD_REQUEST,
        "invalid_field",
    );
    assert_problem(
        &server.post("/v1/inbox/claim", &agent, json!({"event_ids": ["not-a-uuid"]})).await,
        StatusCode::BAD_REQUEST,
        "invalid_field",
    );
    let big = "x".repeat(5_000);
    assert_problem(
        &server
            .post(
                "/v1/events",
                &publisher,
                json!({"recipients": ["agent_alpha"], "event_type": "t", "payload": big}),
            )
            .await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
    );
    let huge = "x".repeat(200_000);
    assert_problem(
        &server
            .post(
                "/v1/events",
                &publisher,
                json!({"recipients": ["agent_alpha"], "event_type": "t", "payload": huge}),
            )
            .await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
    );
    assert_problem(
        &server.post("/v1/events", &publisher, json!({"recipients": [], "event_type": "t"})).await,
        StatusCode::BAD_REQUEST,
        "invalid_field",
    );
    assert_problem(
        &server.post("/v1/events", &publisher, json!({"recipients": ["a b"], "event_type": "t"})).await,
        StatusCode::BAD_REQUEST,
        "invalid_field",
    );
    assert_problem(
        &server
            .post(
                "/v1/events",
                &publisher,
                json!({"recipients": ["a"], "event_type": "t", "priority": "asap"}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "invalid_field",
    );
    assert_problem(
        &server
            .post(
                "/v1/events",
                &publisher,
                json!({"recipients": ["a"], "event_type": "t", "expires_at_utc": "tomorrow"}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "invalid_field",
    );
    assert_problem(
        &server.call(Method::DELETE, "/v1/inbox/claim", Some(&agent), None).await,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    );
    assert_problem(
        &server.call(Method::GET, "/v1/nothing-here", Some(&agent), None).await,
        StatusCode::NOT_FOUND,
        "route_not_found",
    );

    let (_, after) = server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 0})).await;
    assert_eq!(before, after, "refused requests changed nothing");
    server.stop().await;
}

async fn event_and_lease_refusals(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    server.publish(&publisher, &["agent_alpha"], json!({})).await;
    let (_, claimed) = server.post("/v1/inbox/claim", &agent, json!({})).await;
    let (id, token) = (claimed["claims"][0]["event_id"].clone(), claimed["claims"][0]["lease_token"].clone());
    let foreign = "lease_00000000000000000000000000000000";

    let release = |event_id: serde_json::Value, lease_token: serde_json::Value| {
        server.post("/v1/inbox/release", &agent, json!({"event_id": event_id, "lease_token": lease_token}))
    };
    assert_problem(&release(id.clone(), json!(foreign)).await, StatusCode::CONFLICT, "lease_mismatch");
    assert_problem(
        &release(json!("0197f0ab-44f7-7f1a-b0ef-1f5d0f9a1c70"), token.clone()).await,
        StatusCode::NOT_FOUND,
        "event_not_found",
    );
    assert_problem(&release(id.clone(), json!("lease_XYZ")).await, StatusCode::BAD_REQUEST, "invalid_field");
    let (_, ack) = server
        .post("/v1/inbox/acknowledge", &agent, json!({"acks": [{"event_id": id, "lease_token": foreign}]}))
        .await;
    assert_eq!(ack["results"][0]["error"]["code"], "lease_mismatch", "{ack}");
    assert_problem(
        &server
            .post(
                "/v1/inbox/release",
                &agent,
                json!({"event_id": id, "lease_token": token, "retry_after_seconds": 10_000_000}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "invalid_field",
    );
    let (_, again) = server.post("/v1/inbox/claim", &agent, json!({"event_ids": [id]})).await;
    assert_eq!(again["rejected"][0]["error"]["code"], "not_claimable", "{again}");

    // The rightful holder is unaffected by all of the above.
    let (status, acked) = server
        .post("/v1/inbox/acknowledge", &agent, json!({"acks": [{"event_id": id, "lease_token": token}]}))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(acked["results"][0]["ack_state"], "acked");
    let (_, late) = server
        .post("/v1/inbox/acknowledge", &agent, json!({"acks": [{"event_id": id, "lease_token": foreign}]}))
        .await;
    assert_eq!(late["results"][0]["error"]["code"], "already_acked");
    server.stop().await;
}

/// The resync route pages: `?after_seq=` the last open event's seq, `?limit=` per page.
async fn resync_pages_through_open_events(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    for _ in 0..5 {
        server.publish(&publisher, &["agent_alpha"], json!({})).await;
    }
    let page = |query: &'static str| server.call(Method::GET, query, Some(&agent), None);
    let seqs = |body: &serde_json::Value| -> Vec<u64> {
        body["open_events"].as_array().unwrap().iter().map(|e| e["inbox_seq"].as_u64().unwrap()).collect()
    };
    let (status, first) = page("/v1/inbox/resync?limit=2").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(
        (seqs(&first), &first["more_available"], &first["resume_after_seq"]),
        (vec![1, 2], &json!(true), &json!(5))
    );
    let (_, second) = page("/v1/inbox/resync?after_seq=2&limit=2").await;
    assert_eq!((seqs(&second), &second["more_available"]), (vec![3, 4], &json!(true)));
    let (_, last) = page("/v1/inbox/resync?after_seq=4&limit=2").await;
    assert_eq!((seqs(&last), &last["more_available"]), (vec![5], &json!(false)));
    let (_, all) = page("/v1/inbox/resync").await;
    assert_eq!(seqs(&all), vec![1, 2, 3, 4, 5], "one page of up to 500 by default");
    assert_problem(&page("/v1/inbox/resync?limit=0").await, StatusCode::BAD_REQUEST, "invalid_field");
    assert_problem(&page("/v1/inbox/resync?after=2").await, StatusCode::BAD_REQUEST, "invalid_query");
    server.stop().await;
}

async fn cursor_reset_points_to_resync(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    for _ in 0..3 {
        server.publish(&publisher, &["agent_alpha"], json!({})).await;
    }
    let (_, claimed) = server.post("/v1/inbox/claim", &agent, json!({"limit": 2})).await;
    let acks: Vec<_> = claimed["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| json!({"event_id": c["event_id"], "lease_token": c["lease_token"]}))
        .collect();
    server.post("/v1/inbox/acknowledge", &agent, json!({"acks": acks})).await;
    // Retention runs in the server's scavenger; rather than wait out the window, run a
    // scavenger pass through a second store on the same database whose clock is moved past it.
    server.db.clock.advance_ms(server.db.store.config().retention_ms + 60_000);
    server.db.store.inbox().scavenge(100).await.unwrap();

    let reset = server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 0})).await;
    assert_problem(&reset, StatusCode::GONE, "cursor_reset_required");
    assert_eq!(reset.1["oldest_available_seq"], 3);
    assert_eq!(reset.1["resync_url"], "/v1/inbox/resync");
    let (status, resync) = server.call(Method::GET, "/v1/inbox/resync", Some(&agent), None).await;
    assert_eq!(status, StatusCode::OK, "{resync}");
    assert_eq!(resync["head_seq"], 3);
    assert_eq!(resync["open_events"].as_array().unwrap().len(), 1);
    assert_eq!(resync["open_events"][0]["inbox_seq"], 3);
    let (status, _) = server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 2})).await;
    assert_eq!(status, StatusCode::OK);
    let metrics =
        server.client.get(format!("{}/metrics", server.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("agent_inbox_cursor_resets_total{tenant=\"t1\"} 1"), "{metrics}");
    server.stop().await;
}

async fn rate_limits_answer_429_with_retry_after(backend: Backend) {
    let server = TestServer::start_with(backend, |c| {
        c.limits.agent_requests_per_second = 1;
        c.limits.agent_requests_burst = 3;
    })
    .await;
    let agent = server.agent("t1", "agent_alpha").await;
    let other = server.agent("t1", "agent_beta").await;
    for _ in 0..3 {
        let (status, _) = server.call(Method::GET, "/v1/inbox/head", Some(&agent), None).await;
        assert_eq!(status, StatusCode::OK);
    }
    let response = server.request(Method::GET, "/v1/inbox/head", Some(&agent), None).send().await.unwrap();
    let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    assert_problem(&crate::harness::read(response).await, StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    assert_eq!(retry_after.as_deref(), Some("1"));
    let (status, _) = server.call(Method::GET, "/v1/inbox/head", Some(&other), None).await;
    assert_eq!(status, StatusCode::OK, "another agent has its own budget");
    server.stop().await;
}

async fn authentication_refusals(backend: Backend) {
    let server = TestServer::start_with(backend, |c| c.limits.auth_failures_per_minute = 5).await;
    assert_problem(
        &server.call(Method::GET, "/v1/inbox/head", None, None).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    assert_problem(
        &server.call(Method::GET, "/v1/inbox/head", Some("not.a.jwt"), None).await,
        StatusCode::UNAUTHORIZED,
        "invalid_token",
    );
    // A token signed with a key this server never made.
    let forged = "eyJhbGciOiJIUzI1NiIsImtpZCI6ImZvcmdlZCJ9.eyJpc3MiOiJhZ2VudC1pbmJveCIsInN1YiI6ImEiLCJ0aWQiOiJ0MSIsImV4cCI6NDEwMjQ0NDgwMH0.c2lnbmF0dXJl";
    assert_problem(
        &server.call(Method::GET, "/v1/inbox/head", Some(forged), None).await,
        StatusCode::UNAUTHORIZED,
        "invalid_token",
    );
    for _ in 0..3 {
        server.call(Method::GET, "/v1/inbox/head", Some("bad"), None).await;
    }
    let throttled = server.call(Method::GET, "/v1/inbox/head", Some("bad"), None).await;
    assert_problem(&throttled, StatusCode::TOO_MANY_REQUESTS, "auth_throttled");
    // Only failures are throttled: a valid caller from the same address (every client behind
    // one proxy) is served.
    let agent = server.agent("t1", "agent_alpha").await;
    let (status, body) = server.call(Method::GET, "/v1/inbox/head", Some(&agent), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    server.stop().await;
}

/// `X-Forwarded-For` and `X-Forwarded-Proto` are believed from a trusted proxy only: for the
/// failed-authentication throttle (one client's failures do not throttle another behind the
/// same proxy) and for the stream cookie's `Secure` flag.
async fn forwarding_headers_count_only_from_trusted_proxies(backend: Backend) {
    let secure_cookie = |server: &TestServer, agent: String| {
        let request = server
            .request(Method::POST, "/v1/streams/cookie", Some(&agent), None)
            .header("x-forwarded-proto", "https");
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), StatusCode::CREATED);
            response.headers()["set-cookie"].to_str().unwrap().contains("; Secure")
        }
    };
    let bad_from = |server: &TestServer, client: &'static str| {
        server
            .request(Method::GET, "/v1/inbox/head", Some("bad"), None)
            .header("x-forwarded-for", client)
            .send()
    };

    let direct = TestServer::start_with(backend, |c| c.limits.auth_failures_per_minute = 2).await;
    let agent = direct.agent("t1", "agent_alpha").await;
    assert!(!secure_cookie(&direct, agent).await, "a client's own X-Forwarded-Proto is not believed");
    for _ in 0..2 {
        bad_from(&direct, "198.51.100.1").await.unwrap();
    }
    let other = bad_from(&direct, "198.51.100.2").await.unwrap();
    assert_eq!(
        other.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "a client's own X-Forwarded-For is not believed"
    );
    direct.stop().await;

    let proxied = TestServer::start_with(backend, |c| {
        c.limits.auth_failures_per_minute = 2;
        c.http.trusted_proxies = vec!["127.0.0.0/8".into(), "::1".into()];
    })
    .await;
    let agent = proxied.agent("t1", "agent_alpha").await;
    assert!(secure_cookie(&proxied, agent).await, "the trusted proxy says the client used https");
    for _ in 0..2 {
        bad_from(&proxied, "198.51.100.1").await.unwrap();
    }
    let throttled = bad_from(&proxied, "198.51.100.1").await.unwrap();
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    let other = bad_from(&proxied, "198.51.100.2").await.unwrap();
    assert_eq!(
        other.status(),
        StatusCode::UNAUTHORIZED,
        "another client behind the proxy has its own budget"
    );
    proxied.stop().await;
}
