//! Webhook isolation (issue 31): receivers that hang do not delay the deliveries of healthy
//! ones, and a receiver that keeps failing is disabled, shown to the operator with the reason,
//! and re-enabled by them through the admin API.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::admin_quarantine::{admin, get};
use crate::callback_receivers::*;
use crate::harness::{TestServer, assert_problem, both_backends, metric};
use inbox_conformance::Backend;

both_backends!(
    hanging_receivers_do_not_delay_the_others,
    a_failing_receiver_is_disabled_and_re_enabled_by_an_operator,
);

/// Registers an active callback of `agent` at `url`; returns its id.
async fn register(server: &TestServer, agent: &str, url: String) -> String {
    let token = callback_agent(server, "t1", agent).await;
    let (status, registered) = server
        .post(
            "/v1/callback-registrations",
            &token,
            json!({"callback_url": url, "secret": secret_b64(&SECRET), "max_rate_per_minute": 600}),
        )
        .await;
    assert_eq!(
        (status, registered["status"].clone()),
        (StatusCode::CREATED, json!("active")),
        "{registered}"
    );
    registered["registration_id"].as_str().unwrap().to_owned()
}

/// Four agents whose callbacks point at one receiver that never answers a hint, on a node
/// with four delivery permits: without the per-origin cap they would hold all four for the
/// whole timeout. Each healthy receiver (an origin of its own) still gets its hint in far less
/// than the timeout, and the hanging origin's deliveries are counted as deferred.
async fn hanging_receivers_do_not_delay_the_others(backend: Backend) {
    let timeout = Duration::from_secs(4);
    let server = TestServer::start_with(backend, |config| {
        development(config);
        config.callbacks.timeout = timeout;
        config.callbacks.in_flight_max = 4;
        config.callbacks.in_flight_per_origin_max = 1;
    })
    .await;
    let hanging = Receiver::start(&SECRET).await;
    hanging.state.hang_hints.store(true, Ordering::SeqCst);
    let hanging_agents = ["h1", "h2", "h3", "h4"];
    for agent in hanging_agents {
        register(&server, agent, hanging.url(&format!("/hang/{agent}"))).await;
    }
    let mut healthy = Vec::new();
    for agent in ["a1", "a2", "a3", "a4"] {
        let receiver = Receiver::start(&SECRET).await;
        register(&server, agent, receiver.url("/hook")).await;
        healthy.push(receiver);
    }
    let publisher = server.publisher("t1").await;
    server.publish(&publisher, &hanging_agents, json!({"n": 1})).await;
    wait_for("the hanging receiver to be sent a hint", || {
        hanging.requests().iter().any(|r| !r.is_challenge()).then_some(())
    })
    .await;
    let first_hang = Instant::now();

    for round in 1..=2 {
        let published_at = Instant::now();
        server.publish(&publisher, &["a1", "a2", "a3", "a4"], json!({"round": round})).await;
        for receiver in &healthy {
            wait_for("a healthy receiver's hint", || (receiver.hints("/hook").len() >= round).then_some(()))
                .await;
        }
        let took = published_at.elapsed();
        assert!(
            took < timeout / 2,
            "round {round}: healthy receivers waited {took:?} behind the hanging one"
        );
    }
    assert!(
        metric(&server, "agent_inbox_callback_origin_deferred_total").await > 0.0,
        "the hanging origin's other deliveries were deferred"
    );
    let hanging_now = hanging.requests().iter().filter(|r| !r.is_challenge()).count();
    if first_hang.elapsed() < timeout {
        assert_eq!(hanging_now, 1, "one delivery at a time to the hanging origin");
    }
    server.stop().await;
}

/// A receiver that answers every hint 500 is disabled after 3 failures in a row (the bound
/// set low, with no minimum duration); the admin API shows when and why, the tenant's own view
/// shows it too, and nothing more is sent. An operator re-enables it: the counts start over
/// and the current head is delivered at once.
async fn a_failing_receiver_is_disabled_and_re_enabled_by_an_operator(backend: Backend) {
    let server = TestServer::start_with(backend, |config| {
        development(config);
        config.callbacks.retry_base = Duration::from_millis(20);
        config.callbacks.retry_max = Duration::from_millis(40);
        config.callbacks.disable_after_failures = 3;
        config.callbacks.disable_after = Duration::ZERO;
    })
    .await;
    let receiver = Receiver::start(&SECRET).await;
    receiver.state.fail_hints.store(true, Ordering::SeqCst);
    let id = register(&server, "alpha", receiver.url("/hook")).await;
    let ops = admin(&server, "t1").await;
    let publisher = server.publisher("t1").await;
    server.publish(&publisher, &["alpha"], json!({"n": 1})).await;

    let view = admin_view_until(&server, &ops, &id, |v| v["disabled_at_utc"].is_string()).await;
    let reason = view["disabled_reason"].as_str().unwrap();
    assert!(reason.starts_with("3 failed deliveries in a row"), "{view}");
    assert!(reason.contains("the receiver answered 500"), "{view}");
    assert_eq!(view["consecutive_failures"], 3, "{view}");
    assert!(view["failing_since_utc"].is_string(), "{view}");
    assert_eq!(view["recent_deliveries"][0]["outcome"], "disabled", "{view}");
    assert_eq!(metric(&server, "agent_inbox_callback_endpoints_disabled_total{tenant=\"t1\"}").await, 1.0);
    let agent = callback_agent(&server, "t1", "alpha").await;
    let (status, own) =
        server.call(Method::GET, &format!("/v1/callback-registrations/{id}"), Some(&agent), None).await;
    assert_eq!(
        (status, own["disabled_reason"].as_str()),
        (StatusCode::OK, Some(reason)),
        "the tenant sees it"
    );

    let sent = receiver.hints("/hook").len();
    server.publish(&publisher, &["alpha"], json!({"n": 2})).await;
    let (status, head) = server.call(Method::GET, "/v1/inbox/head", Some(&agent), None).await;
    assert_eq!((status, head["head_seq"].clone()), (StatusCode::OK, json!(2)), "the inbox is the record");
    // Many passes (every 20 ms) go by: a disabled registration is never due.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.hints("/hook").len(), sent, "nothing is sent to a disabled callback");

    let not_admin = server.post(&format!("/v1/admin/callbacks/{id}/enable"), &agent, json!({})).await;
    assert_eq!(not_admin.0, StatusCode::FORBIDDEN, "{}", not_admin.1);
    let unknown =
        server.post("/v1/admin/callbacks/cbreg_000000000000000000000000/enable", &ops, json!({})).await;
    assert_problem(&unknown, StatusCode::NOT_FOUND, "callback_registration_not_found");

    receiver.state.fail_hints.store(false, Ordering::SeqCst);
    let (status, enabled) = server.post(&format!("/v1/admin/callbacks/{id}/enable"), &ops, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{enabled}");
    assert!(enabled.get("disabled_at_utc").is_none(), "{enabled}");
    assert_eq!(
        (enabled["consecutive_failures"].clone(), enabled["failed_attempts"].clone()),
        (json!(0), json!(0))
    );
    let delivered = wait_for("the current head after re-enabling", || {
        receiver.hints("/hook").into_iter().find(|h| h.json()["head_seq"] == 2)
    })
    .await;
    assert_eq!(delivered.json()["signal_type"], "inbox.updated");
    let view = admin_view_until(&server, &ops, &id, |v| v["delivered_head_seq"] == 2).await;
    assert!(view.get("disabled_reason").is_none(), "{view}");
    let again = server.post(&format!("/v1/admin/callbacks/{id}/enable"), &ops, json!({})).await;
    assert_eq!(again.0, StatusCode::OK, "re-enabling an enabled registration changes nothing: {}", again.1);
    server.stop().await;
}

/// The registration as `GET /v1/admin/callbacks` shows it, once `found` holds.
async fn admin_view_until(server: &TestServer, ops: &str, id: &str, found: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let all = get(server, "/v1/admin/callbacks", ops).await;
        let view =
            all["registrations"].as_array().unwrap().iter().find(|r| r["registration_id"] == id).cloned();
        if let Some(view) = view.filter(&found) {
            return view;
        }
        assert!(Instant::now() < deadline, "timed out waiting on the admin view: {all}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
