//! Nudges: an operator's requeue or release from quarantine takes events behind the head back
//! to the inbox without moving the head, and still wakes the agent's streams, on this node at
//! once and on every other node through the `inbox.nudged` signal, so an agent whose cursor
//! has passed the events claims them now rather than at its next safety-net poll; the agent's
//! callbacks are sent its head again. Changes that take nothing back (a quarantine, a purge)
//! wake nobody.

use std::time::{Duration, Instant};

use inbox_conformance::Backend;
use reqwest::StatusCode;
use serde_json::json;

use crate::admin_quarantine::{AGENT, admin, claim, claimable, publish_one};
use crate::callback_receivers::{Receiver, SECRET, callback_agent, development, secret_b64, wait_for};
use crate::harness::{TestServer, both_backends};
use crate::stream_clients::{HINT_DEADLINE, Sse};

both_backends!(
    a_requeue_wakes_the_streams_of_every_node,
    a_release_from_quarantine_wakes_the_stream,
    a_requeue_ends_long_polls_on_every_node_as_nudged,
    a_requeue_sends_the_agents_callbacks_its_head_again,
);

/// Parks one event as a dead letter (its one attempt failed) and returns its id.
async fn dead_letter(server: &TestServer, publisher: &str, agent: &str) -> String {
    let event = publish_one(server, publisher, 1).await;
    let lease = claim(server, agent, &event, None).await;
    let failed = json!({"acks": [{"event_id": event, "lease_token": lease, "result": "failed", "reason": "no parser"}]});
    let (status, acked) = server.post("/v1/inbox/acknowledge", agent, failed).await;
    assert_eq!(status, StatusCode::OK, "{acked}");
    assert_eq!(acked["results"][0]["ack_state"], "dead_letter", "{acked}");
    event
}

async fn a_requeue_wakes_the_streams_of_every_node(backend: Backend) {
    let a = TestServer::start(backend).await;
    let b = a.start_beside(|_| {}).await;
    let (publisher, agent, ops) =
        (a.publisher("t1").await, a.agent("t1", AGENT).await, admin(&a, "t1").await);
    let mut on_a = Sse::open(&a, "/v1/streams/sse", Some(&agent), &[]).await;
    let mut on_b = Sse::open(&b, "/v1/streams/sse", Some(&agent), &[]).await;
    let event = dead_letter(&a, &publisher, &agent).await;
    on_a.wait_for_head(1).await;
    on_b.wait_for_head(1).await;
    on_a.assert_quiet("a dead letter takes nothing back to the inbox").await;
    on_b.assert_quiet("a dead letter takes nothing back to the inbox").await;

    let requeued_at = Instant::now();
    let batch = json!({"recipient_id": AGENT, "event_ids": [event]});
    let (status, requeued) = a.post("/v1/admin/parked/requeue", &ops, batch.clone()).await;
    assert_eq!(status, StatusCode::OK, "{requeued}");
    assert_eq!(requeued["results"][0]["ok"], true, "{requeued}");
    for (node, stream) in [("a", &mut on_a), ("b", &mut on_b)] {
        let hint = stream.next_hint(HINT_DEADLINE).await.unwrap_or_else(|| panic!("node {node}: no hint"));
        assert_eq!(hint["head_seq"], 1, "node {node}: the head did not move: {hint}");
        assert!(requeued_at.elapsed() < HINT_DEADLINE, "node {node}");
    }
    assert_eq!(
        claimable(&a, &agent).await,
        std::slice::from_ref(&event),
        "the hint leads to the requeued event"
    );

    // Requeuing what is no longer parked takes nothing back: no second hint.
    let (_, again) = a.post("/v1/admin/parked/requeue", &ops, batch).await;
    assert_eq!(again["results"][0]["ok"], false, "{again}");
    on_b.assert_quiet("a refused requeue takes nothing back").await;
    b.stop().await;
    a.stop().await;
}

async fn a_release_from_quarantine_wakes_the_stream(backend: Backend) {
    let server = TestServer::start(backend).await;
    let (publisher, agent, ops) =
        (server.publisher("t1").await, server.agent("t1", AGENT).await, admin(&server, "t1").await);
    let mut stream = Sse::open(&server, "/v1/streams/sse", Some(&agent), &[]).await;
    let event = publish_one(&server, &publisher, 1).await;
    stream.wait_for_head(1).await;

    let batch = json!({"recipient_id": AGENT, "event_ids": [event]});
    let quarantine = json!({"recipient_id": AGENT, "event_ids": [event], "reason": "looks malformed"});
    let (status, quarantined) = server.post("/v1/admin/quarantine", &ops, quarantine).await;
    assert_eq!(status, StatusCode::OK, "{quarantined}");
    stream.assert_quiet("a quarantine takes nothing back to the inbox").await;
    assert!(claimable(&server, &agent).await.is_empty(), "a quarantined event is not claimed");

    let (status, released) = server.post("/v1/admin/quarantine/release", &ops, batch).await;
    assert_eq!(status, StatusCode::OK, "{released}");
    let hint = stream.next_hint(HINT_DEADLINE).await.expect("a hint for the released event");
    assert_eq!(hint["head_seq"], 1, "{hint}");
    assert_eq!(claimable(&server, &agent).await, [event], "the hint leads to the released event");
    server.stop().await;
}

/// A long poll after the dead letter, waiting up to 20 s.
async fn long_poll(server: &TestServer, agent: &str) -> serde_json::Value {
    let body = json!({"after_seq": 1, "wait_seconds": 20});
    let (status, page) = server.post("/v1/inbox/poll-after-cursor", agent, body).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page
}

/// A long poll sees no event after its cursor either way; a nudge ends it at once with
/// `nudged: true` (on the node that requeued, and through the signal on another), where
/// before it waited out its `wait_seconds`.
async fn a_requeue_ends_long_polls_on_every_node_as_nudged(backend: Backend) {
    let a = TestServer::start(backend).await;
    let b = a.start_beside(|_| {}).await;
    let (publisher, agent, ops) =
        (a.publisher("t1").await, a.agent("t1", AGENT).await, admin(&a, "t1").await);
    let event = dead_letter(&a, &publisher, &agent).await;
    let started = Instant::now();
    let (on_a, on_b, ()) = tokio::join!(long_poll(&a, &agent), long_poll(&b, &agent), async {
        // Both polls are waiting by now; a requeue that came first would wake nobody.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let batch = json!({"recipient_id": AGENT, "event_ids": [event]});
        let (status, requeued) = a.post("/v1/admin/parked/requeue", &ops, batch).await;
        assert_eq!(status, StatusCode::OK, "{requeued}");
    });
    for (node, page) in [("a", &on_a), ("b", &on_b)] {
        assert_eq!(page["nudged"], true, "node {node}: {page}");
        assert_eq!(page["events"], json!([]), "node {node}: nothing new after the cursor");
    }
    assert!(
        started.elapsed() < Duration::from_millis(500) + HINT_DEADLINE,
        "ended by the nudge, not the wait"
    );
    // An ordinary long poll says nothing of nudges.
    let (_, quiet) =
        a.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 1, "wait_seconds": 1})).await;
    assert!(quiet.get("nudged").is_none(), "{quiet}");
    b.stop().await;
    a.stop().await;
}

/// A webhook receiver hears of a requeue as its head sent once more: the same `head_seq`, a new
/// delivery, which a receiver that claims on every hint answers with a claim.
async fn a_requeue_sends_the_agents_callbacks_its_head_again(backend: Backend) {
    let server = TestServer::start_with(backend, development).await;
    let receiver = Receiver::start(&SECRET).await;
    let agent = callback_agent(&server, "t1", AGENT).await;
    let (publisher, ops) = (server.publisher("t1").await, admin(&server, "t1").await);
    let registration = json!({
        "callback_url": receiver.url("/hook"),
        "auth_mode": "hmac-sha256",
        "secret_id": "cbksec_nudge",
        "secret": secret_b64(&SECRET),
        "max_rate_per_minute": 600
    });
    let (status, registered) = server.post("/v1/callback-registrations", &agent, registration).await;
    assert_eq!(
        (status, registered["status"].as_str()),
        (StatusCode::CREATED, Some("active")),
        "{registered}"
    );
    let event = dead_letter(&server, &publisher, &agent).await;
    let first = wait_for("the hint of the publish", || receiver.hints("/hook").into_iter().next()).await;
    assert_eq!(first.json()["head_seq"], 1);

    let batch = json!({"recipient_id": AGENT, "event_ids": [event]});
    let (status, requeued) = server.post("/v1/admin/parked/requeue", &ops, batch).await;
    assert_eq!(status, StatusCode::OK, "{requeued}");
    let second = wait_for("the head sent again", || receiver.hints("/hook").get(1).cloned()).await;
    assert_eq!(second.json()["head_seq"], 1, "the head did not move");
    assert_ne!(second.json()["delivery_id"], first.json()["delivery_id"], "a new delivery");
    assert_eq!(claimable(&server, &agent).await, std::slice::from_ref(&event));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.hints("/hook").len(), 2, "once per requeue");
    server.stop().await;
}
