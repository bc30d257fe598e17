//! The whole contract of both route sets, over HTTP: publish, poll, head with ETag, claim,
//! heartbeat, release, acknowledge (idempotent under retries), long poll, refresh rotation,
//! two clients sharing one agent identity, and the operator endpoints.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use inbox_server::CallerKind;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{TestServer, assert_problem, both_backends, read};
use inbox_conformance::Backend;

both_backends!(
    canonical_routes_carry_an_event_from_publish_to_ack,
    seed_000_routes_alias_the_same_handlers,
    head_answers_304_until_the_head_moves,
    long_poll_returns_when_an_event_commits,
    acknowledge_is_idempotent_under_concurrent_retries,
    two_clients_of_one_agent_claim_disjoint_events,
    refresh_tokens_rotate_and_reuse_revokes_the_family,
    operators_requeue_and_purge_parked_events,
);

async fn canonical_routes_carry_an_event_from_publish_to_ack(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    let published = server
        .publish(
            &publisher,
            &["agent_alpha", "agent_beta"],
            json!({"text": "Please analyze the attached logs."}),
        )
        .await;
    assert_eq!(published["deliveries"].as_array().unwrap().len(), 2);

    let (status, subscribed) = server
        .post(
            "/v1/agent-sessions/subscribe",
            &agent,
            json!({"device_id": "laptop", "supported_transports": ["long-poll", "poll"], "last_seen_seq": 0}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{subscribed}");
    assert_eq!(subscribed["current_head_seq"], 1);
    assert_eq!(subscribed["recipient"]["recipient_id"], "agent_alpha");
    let session = subscribed["session_id"].as_str().unwrap().to_owned();

    let (status, page) =
        server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 0, "limit": 10})).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["head_seq"], 1);
    assert_eq!(page["next_cursor"], 1);
    assert_eq!(page["more_available"], false);
    let event = &page["events"][0];
    assert_eq!(event["recipient_id"], "agent_alpha");
    assert_eq!(event["ack_state"], "available");
    assert_eq!(event["payload"]["text"], "Please analyze the attached logs.");

    let (status, claimed) =
        server.post("/v1/inbox/claim", &agent, json!({"session_id": session, "lease_seconds": 60})).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    let claim = &claimed["claims"][0];
    let (event_id, token) = (claim["event_id"].as_str().unwrap(), claim["lease_token"].as_str().unwrap());
    assert_eq!(claim["ack_state"], "claimed");
    assert_eq!(claim["event"]["delivery_attempts"], 1);

    let (status, beat) = server
        .post(
            "/v1/inbox/heartbeat",
            &agent,
            json!({"leases": [{"event_id": event_id, "lease_token": token, "extend_by_seconds": 120}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{beat}");
    assert!(beat["leases"][0]["visibility_lease_until_utc"].is_string());

    let (status, released) = server
        .post("/v1/inbox/release", &agent, json!({"event_id": event_id, "lease_token": token, "reason": "transient_dependency_failure", "retry_after_seconds": 0}))
        .await;
    assert_eq!(status, StatusCode::OK, "{released}");
    assert_eq!(released["ack_state"], "available");

    let (_, again) = server.post("/v1/inbox/claim", &agent, json!({"event_ids": [event_id]})).await;
    let token = again["claims"][0]["lease_token"].as_str().unwrap().to_owned();
    assert_eq!(again["claims"][0]["event"]["delivery_attempts"], 2);
    for _ in 0..2 {
        let (status, acked) = server
            .post(
                "/v1/inbox/acknowledge",
                &agent,
                json!({"acks": [{"event_id": event_id, "lease_token": token, "result": "completed"}]}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{acked}");
        assert_eq!(acked["results"][0]["ack_state"], "acked");
    }
    let (_, page) = server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 0})).await;
    assert_eq!(page["events"][0]["ack_state"], "acked");
    assert!(page["events"][0].get("payload").is_none(), "the payload is cleared after ack: {page}");
    let (_, claimable) = server
        .post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 0, "include_claimable_only": true}))
        .await;
    assert_eq!(claimable["events"].as_array().unwrap().len(), 0);
    server.stop().await;
}

async fn seed_000_routes_alias_the_same_handlers(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    for n in 0..3 {
        server.publish(&publisher, &["agent_alpha"], json!({"n": n})).await;
    }
    let (status, page) = server
        .call(Method::GET, "/api/v1/agents/agent_alpha/inbox?after_cursor=1&limit=1", Some(&agent), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["events"][0]["inbox_seq"], 2);
    assert_eq!(page["events"][0]["sequence_number"], 2, "seed 000's name beside the canonical one");
    assert!(page["events"][0].get("correlation_id").is_some(), "{page}");
    assert_eq!((page["next_cursor"].clone(), page["has_more"].clone()), (json!(2), json!(true)));

    let (status, claimed) =
        server.call(Method::POST, "/api/v1/agents/agent_alpha/inbox/claim", Some(&agent), None).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    let claims = claimed["claims"].as_array().unwrap();
    assert_eq!(claims.len(), 3);
    let id = |i: usize| claims[i]["event_id"].as_str().unwrap().to_owned();
    let token = |i: usize| claims[i]["lease_token"].as_str().unwrap().to_owned();

    let (status, acked) = server
        .post(
            &format!("/api/v1/agents/agent_alpha/inbox/{}/ack", id(0)),
            &agent,
            json!({"lease_token": token(0)}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{acked}");
    assert_eq!(acked["ack_state"], "acked");
    let wrong = server
        .post(
            &format!("/api/v1/agents/agent_alpha/inbox/{}/ack", id(1)),
            &agent,
            json!({"lease_token": token(2)}),
        )
        .await;
    assert_problem(&wrong, StatusCode::CONFLICT, "lease_mismatch");
    let (status, released) = server
        .post(
            &format!("/api/v1/agents/agent_alpha/inbox/{}/release", id(1)),
            &agent,
            json!({"lease_token": token(1), "retry_after_seconds": 30}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{released}");
    assert_eq!(released["ack_state"], "available");
    assert!(released["next_retry_at_utc"].is_string());
    let other = server.call(Method::GET, "/api/v1/agents/agent_beta/inbox", Some(&agent), None).await;
    assert_problem(&other, StatusCode::FORBIDDEN, "tenant_mismatch");
    server.stop().await;
}

async fn head_answers_304_until_the_head_moves(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    server.publish(&publisher, &["agent_alpha"], json!({})).await;
    let first = server.request(Method::GET, "/v1/inbox/head", Some(&agent), None).send().await.unwrap();
    let etag = first.headers()["etag"].to_str().unwrap().to_owned();
    assert_eq!(etag, "\"t1:agent_alpha:1\"");
    let conditional = || {
        server
            .request(Method::GET, "/v1/inbox/head", Some(&agent), None)
            .header("if-none-match", etag.clone())
    };
    assert_eq!(conditional().send().await.unwrap().status(), StatusCode::NOT_MODIFIED);
    server.publish(&publisher, &["agent_alpha"], json!({})).await;
    let (status, head) = read(conditional().send().await.unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(head["head_seq"], 2);
    server.stop().await;
}

async fn long_poll_returns_when_an_event_commits(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    let started = Instant::now();
    let (waited, _) = tokio::join!(
        server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 0, "wait_seconds": 20})),
        async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            server.publish(&publisher, &["agent_alpha"], json!({"wake": true})).await
        }
    );
    assert_eq!(waited.0, StatusCode::OK, "{}", waited.1);
    assert_eq!(waited.1["events"][0]["payload"]["wake"], true);
    assert!(started.elapsed() < Duration::from_secs(10), "released by the commit, not the deadline");
    let empty_started = Instant::now();
    let (status, empty) =
        server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 1, "wait_seconds": 1})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(empty["events"].as_array().unwrap().len(), 0);
    assert!(
        empty_started.elapsed() >= Duration::from_millis(900),
        "an empty long poll waits for its deadline"
    );
    let too_long =
        server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 0, "wait_seconds": 26})).await;
    assert_problem(&too_long, StatusCode::BAD_REQUEST, "invalid_field");
    server.stop().await;
}

async fn acknowledge_is_idempotent_under_concurrent_retries(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    server.publish(&publisher, &["agent_alpha"], json!({})).await;
    let (_, claimed) = server.post("/v1/inbox/claim", &agent, json!({})).await;
    let ack = json!({"acks": [{"event_id": claimed["claims"][0]["event_id"], "lease_token": claimed["claims"][0]["lease_token"]}]});
    let mut retries = Vec::new();
    for _ in 0..8 {
        retries.push(server.post("/v1/inbox/acknowledge", &agent, ack.clone()));
    }
    for (status, body) in join_all(retries).await {
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["results"][0]["ack_state"], "acked", "{body}");
    }
    server.stop().await;
}

async fn two_clients_of_one_agent_claim_disjoint_events(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    for n in 0..60 {
        server.publish(&publisher, &["agent_alpha"], json!({"n": n})).await;
    }
    // Two independent clients (own connection pools), as two processes would be.
    let drain = |client: reqwest::Client| {
        let (base, agent) = (server.base.clone(), agent.clone());
        async move {
            let mut seen = Vec::new();
            loop {
                let response = client
                    .post(format!("{base}/v1/inbox/claim"))
                    .bearer_auth(&agent)
                    .json(&json!({"limit": 5}))
                    .send()
                    .await
                    .unwrap();
                let (status, body) = read(response).await;
                assert_eq!(status, StatusCode::OK, "{body}");
                let claims = body["claims"].as_array().unwrap().clone();
                if claims.is_empty() {
                    return seen;
                }
                let acks: Vec<Value> = claims
                    .iter()
                    .map(|c| json!({"event_id": c["event_id"], "lease_token": c["lease_token"]}))
                    .collect();
                let response = client
                    .post(format!("{base}/v1/inbox/acknowledge"))
                    .bearer_auth(&agent)
                    .json(&json!({"acks": acks}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), StatusCode::OK);
                seen.extend(claims.iter().map(|c| c["event_id"].as_str().unwrap().to_owned()));
            }
        }
    };
    let (a, b) = tokio::join!(drain(reqwest::Client::new()), drain(reqwest::Client::new()));
    let (a, b): (HashSet<String>, HashSet<String>) = (a.into_iter().collect(), b.into_iter().collect());
    assert!(a.is_disjoint(&b), "an event was processed by both clients");
    assert_eq!(a.len() + b.len(), 60, "every event was processed once");
    server.stop().await;
}

async fn refresh_tokens_rotate_and_reuse_revokes_the_family(backend: Backend) {
    let server = TestServer::start(backend).await;
    let issued = server
        .tokens
        .issue(
            &"t1".parse().unwrap(),
            &"agent_alpha".parse().unwrap(),
            CallerKind::Agent,
            inbox_server::tokens::AGENT_SCOPES,
            None,
            true,
        )
        .await
        .unwrap();
    let first = issued.refresh_token.unwrap();
    let refresh = |token: &str| {
        server.call(Method::POST, "/v1/auth/refresh", None, Some(json!({"refresh_token": token})))
    };
    let (status, rotated) = refresh(&first).await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let second = rotated["refresh_token"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    let access = rotated["access_token"].as_str().unwrap();
    let (status, _) = server.call(Method::GET, "/v1/inbox/head", Some(access), None).await;
    assert_eq!(status, StatusCode::OK, "the new access token works");

    assert_problem(&refresh(&first).await, StatusCode::UNAUTHORIZED, "refresh_token_reused");
    assert_problem(&refresh(&second).await, StatusCode::UNAUTHORIZED, "invalid_refresh_token");
    assert_problem(&refresh("rt_nonsense").await, StatusCode::UNAUTHORIZED, "invalid_refresh_token");
    server.stop().await;
}

async fn operators_requeue_and_purge_parked_events(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    let admin = server.token("t1", "ops", CallerKind::Admin, "admin").await;
    server.publish(&publisher, &["agent_alpha"], json!({"n": 1})).await;
    server.publish(&publisher, &["agent_alpha"], json!({"n": 2})).await;
    let (_, claimed) = server.post("/v1/inbox/claim", &agent, json!({"limit": 2})).await;
    let acks: Vec<Value> = claimed["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| json!({"event_id": c["event_id"], "lease_token": c["lease_token"], "result": "failed"}))
        .collect();
    let (_, results) = server.post("/v1/inbox/acknowledge", &agent, json!({"acks": acks})).await;
    assert_eq!(results["results"][0]["ack_state"], "dead_letter");
    let ids: Vec<String> = claimed["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["event_id"].as_str().unwrap().to_owned())
        .collect();

    let (status, parked) =
        server.call(Method::GET, "/v1/admin/parked?state=dead_letter", Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK, "{parked}");
    assert_eq!(parked["events"].as_array().unwrap().len(), 2);
    assert_eq!(parked["events"][0]["dead_letter_state"], "handler_failed");
    let (status, inboxes) = server.call(Method::GET, "/v1/admin/inboxes", Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(inboxes["inboxes"][0]["parked"], 2);

    let (_, requeued) = server
        .post(
            "/v1/admin/parked/requeue",
            &admin,
            json!({"recipient_id": "agent_alpha", "event_ids": [ids[0]]}),
        )
        .await;
    assert_eq!(requeued["results"][0]["ok"], true, "{requeued}");
    let (_, purged) = server
        .post(
            "/v1/admin/parked/purge",
            &admin,
            json!({"recipient_id": "agent_alpha", "event_ids": [ids[1], ids[0]]}),
        )
        .await;
    assert_eq!(purged["results"][0]["ok"], true);
    assert_eq!(purged["results"][1]["error"]["code"], "not_parked", "{purged}");
    let (_, again) = server.post("/v1/inbox/claim", &agent, json!({})).await;
    assert_eq!(again["claims"][0]["event_id"], ids[0].as_str(), "the requeued event is claimable");
    let not_admin = server.call(Method::GET, "/v1/admin/parked", Some(&agent), None).await;
    assert_problem(&not_admin, StatusCode::FORBIDDEN, "scope_missing");
    server.stop().await;
}

/// Drives every future concurrently on this task and returns their outputs in order.
async fn join_all<F: Future<Output = T>, T>(futures: Vec<F>) -> Vec<T> {
    let mut pinned: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut results: Vec<Option<T>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, future) in results.iter_mut().zip(pinned.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *slot = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
    })
    .await;
    results.into_iter().map(|r| r.expect("every future finished")).collect()
}
