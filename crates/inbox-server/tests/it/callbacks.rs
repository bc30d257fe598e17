//! Webhook callbacks end to end: challenge-response registration, signed thin hints, retries
//! that never touch the inbox, registration limits, secret rotation, and the SSRF defences
//! (refused address forms, DNS rebinding, redirects). Receivers are small axum servers on
//! 127.0.0.1, reached under the development setting that admits http to loopback; host names
//! are answered by a scripted resolver.

use std::sync::atomic::Ordering;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use inbox_trust::webhooks::{MATM_DELIVERY_ID, MATM_KEY_ID, MATM_NONCE, MATM_TIMESTAMP};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::callback_receivers::*;
use crate::harness::{TestServer, assert_problem, both_backends};
use inbox_conformance::Backend;

both_backends!(
    challenge_activates_a_registration_and_hints_arrive_signed,
    a_timing_out_callback_is_retried_and_the_event_stays_claimable,
    registration_limits_and_secret_rotation,
);

/// A registration with a secret is challenged at once and becomes active; deliveries are
/// the thin hint, signed with every header of seed 001. A registration whose receiver cannot
/// answer stays pending and receives nothing else.
async fn challenge_activates_a_registration_and_hints_arrive_signed(backend: Backend) {
    let server = TestServer::start_with(backend, development).await;
    let receiver = Receiver::start(&SECRET).await;
    let agent = callback_agent(&server, "t1", "alpha").await;
    let publisher = server.publisher("t1").await;

    let (status, registered) = server
        .post(
            "/v1/callback-registrations",
            &agent,
            json!({
                "callback_url": receiver.url("/hook/active"),
                "auth_mode": "hmac-sha256",
                "secret_id": "cbksec_2026_07",
                "secret": secret_b64(&SECRET),
                "delivery_scope": ["signal_only"],
                "max_rate_per_minute": 600
            }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{registered}");
    assert_eq!(registered["status"], "active", "{registered}");
    assert_eq!(registered["secret_id"], "cbksec_2026_07");
    assert!(registered.get("secret").is_none(), "a secret the tenant chose is never echoed");
    assert!(registered["challenge_delivery_id"].is_string() && registered["expires_at_utc"].is_string());
    let challenge =
        receiver.requests().into_iter().find(Received::is_challenge).expect("a challenge was sent");
    assert_eq!(verify_with(&challenge, &[("cbksec_2026_07", &SECRET)]), Ok("cbksec_2026_07".to_owned()));
    assert_eq!(challenge.json()["delivery_id"], registered["challenge_delivery_id"]);

    // A second registration whose receiver does not know the (generated) secret.
    let (status, pending) = server
        .post("/v1/callback-registrations", &agent, json!({"callback_url": receiver.url("/hook/pending")}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{pending}");
    assert_eq!(pending["status"], "pending_verification");
    let generated = URL_SAFE_NO_PAD.decode(pending["secret"].as_str().unwrap()).unwrap();
    assert_eq!(generated.len(), 32);
    let pending_id = pending["registration_id"].as_str().unwrap().to_owned();
    let (status, still_pending) =
        server.post(&format!("/v1/callback-registrations/{pending_id}/verify"), &agent, json!({})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(still_pending["status"], "pending_verification", "the receiver answered with another secret");
    assert!(still_pending["last_error"].as_str().unwrap().contains("challenge_response"), "{still_pending}");

    let published = server.publish(&publisher, &["alpha"], json!({"secret": "never in a hint"})).await;
    let hint = wait_for("a hint", || receiver.hints("/hook/active").into_iter().next()).await;
    for name in [
        MATM_DELIVERY_ID,
        MATM_TIMESTAMP,
        MATM_NONCE,
        MATM_KEY_ID,
        "content-digest",
        "signature-input",
        "signature",
    ] {
        assert!(hint.header(name).is_some(), "{name} is sent");
    }
    assert_eq!(hint.header(MATM_KEY_ID), Some("cbksec_2026_07"));
    assert_eq!(verify_with(&hint, &[("cbksec_2026_07", &SECRET)]), Ok("cbksec_2026_07".to_owned()));
    let body = hint.json();
    assert_eq!(body["signal_type"], "inbox.updated");
    assert_eq!((body["tenant_id"].clone(), body["recipient_id"].clone()), (json!("t1"), json!("alpha")));
    assert_eq!(body["head_seq"], published["deliveries"][0]["inbox_seq"]);
    assert_eq!(body["delivery_id"].as_str(), hint.header(MATM_DELIVERY_ID));
    assert!(!String::from_utf8_lossy(&hint.body).contains("never in a hint"), "hints carry no event data");
    assert!(receiver.hints("/hook/pending").is_empty(), "a pending registration gets nothing but challenges");

    // Once the receiver knows the secret, verifying activates it and it hears about the backlog.
    *receiver.state.secret.lock().unwrap() = generated.clone();
    let (_, verified) =
        server.post(&format!("/v1/callback-registrations/{pending_id}/verify"), &agent, json!({})).await;
    assert_eq!(verified["status"], "active", "{verified}");
    let backlog = wait_for("a hint to the newly verified callback", || {
        receiver.hints("/hook/pending").into_iter().next()
    })
    .await;
    assert_eq!(backlog.json()["head_seq"], 1);

    let (status, log) = server
        .call(Method::GET, &format!("/v1/callback-registrations/{pending_id}/deliveries"), Some(&agent), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let outcomes: Vec<&str> =
        log["attempts"].as_array().unwrap().iter().map(|a| a["outcome"].as_str().unwrap()).collect();
    assert!(outcomes.contains(&"verification_failed") && outcomes.contains(&"verified"), "{log}");
    let (status, listed) = server.call(Method::GET, "/v1/callback-registrations", Some(&agent), None).await;
    assert_eq!((status, listed["registrations"].as_array().unwrap().len()), (StatusCode::OK, 2));
    let other = callback_agent(&server, "t1", "beta").await;
    let hidden = server
        .call(Method::GET, &format!("/v1/callback-registrations/{pending_id}"), Some(&other), None)
        .await;
    assert_problem(&hidden, StatusCode::NOT_FOUND, "callback_registration_not_found");
    server.stop().await;
}

/// A callback that does not answer in time is retried with backoff until it does; every
/// attempt is logged; meanwhile the event is claimable as always.
async fn a_timing_out_callback_is_retried_and_the_event_stays_claimable(backend: Backend) {
    let server = TestServer::start_with(backend, development).await;
    let receiver = Receiver::start(&SECRET).await;
    receiver.state.hints_to_stall.store(2, Ordering::SeqCst);
    let agent = callback_agent(&server, "t1", "alpha").await;
    let publisher = server.publisher("t1").await;
    let (status, registered) = server
        .post(
            "/v1/callback-registrations",
            &agent,
            json!({"callback_url": receiver.url("/slow"), "secret": secret_b64(&SECRET)}),
        )
        .await;
    assert_eq!(
        (status, registered["status"].clone()),
        (StatusCode::CREATED, json!("active")),
        "{registered}"
    );
    let id = registered["registration_id"].as_str().unwrap().to_owned();

    let published = server.publish(&publisher, &["alpha"], json!({"n": 1})).await;
    let event_id = published["deliveries"][0]["event_id"].as_str().unwrap().to_owned();
    let (status, claimed) = server.post("/v1/inbox/claim", &agent, json!({"limit": 1})).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    assert_eq!(claimed["claims"][0]["event_id"], event_id, "the inbox does not wait for the callback");
    let lease = claimed["claims"][0]["lease_token"].as_str().unwrap().to_owned();

    let log = delivery_log_until(&server, &agent, &id, |a| a["outcome"] == "delivered").await;
    let hints: Vec<&Value> =
        log["attempts"].as_array().unwrap().iter().filter(|a| a["kind"] == "hint").collect();
    let failed: Vec<&&Value> = hints.iter().filter(|a| a["outcome"] == "failed").collect();
    assert!(failed.len() >= 2, "two timed-out attempts before the delivery: {log}");
    assert!(failed.iter().all(|a| a["error"].as_str().unwrap().contains("no answer within")), "{log}");
    let attempts: Vec<u64> = hints.iter().map(|a| a["attempt"].as_u64().unwrap()).collect();
    assert!(attempts.contains(&3), "attempts count up while failing: {attempts:?}");
    assert!(receiver.hints("/slow").len() >= 3);

    let (status, acked) = server
        .post(
            "/v1/inbox/acknowledge",
            &agent,
            json!({"acks": [{"event_id": event_id, "lease_token": lease, "result": "completed"}]}),
        )
        .await;
    assert_eq!((status, acked["results"][0]["ack_state"].clone()), (StatusCode::OK, json!("acked")));
    server.stop().await;
}

/// Registrations per agent are capped (seed 000's alias counts too); a rotated secret signs
/// beside the old one through the overlap, so a receiver with either verifies.
async fn registration_limits_and_secret_rotation(backend: Backend) {
    let server = TestServer::start_with(backend, |config| {
        development(config);
        config.callbacks.per_recipient_max = 2;
    })
    .await;
    let receiver = Receiver::start(&SECRET).await;
    let agent = callback_agent(&server, "t1", "alpha").await;
    let publisher = server.publisher("t1").await;
    let (status, first) = server
        .post(
            "/api/v1/agents/alpha/callbacks",
            &agent,
            json!({"callback_url": receiver.url("/a"), "secret": secret_b64(&SECRET), "secret_id": "old"}),
        )
        .await;
    assert_eq!((status, first["status"].clone()), (StatusCode::CREATED, json!("active")), "{first}");
    assert_problem(
        &server
            .post("/api/v1/agents/beta/callbacks", &agent, json!({"callback_url": receiver.url("/b")}))
            .await,
        StatusCode::FORBIDDEN,
        "tenant_mismatch",
    );
    let (status, _) =
        server.post("/v1/callback-registrations", &agent, json!({"callback_url": receiver.url("/b")})).await;
    assert_eq!(status, StatusCode::CREATED);
    let third =
        server.post("/v1/callback-registrations", &agent, json!({"callback_url": receiver.url("/c")})).await;
    assert_problem(&third, StatusCode::CONFLICT, "callback_limit_reached");
    let no_scope = server.agent("t1", "alpha").await;
    assert_problem(
        &server
            .post("/v1/callback-registrations", &no_scope, json!({"callback_url": receiver.url("/d")}))
            .await,
        StatusCode::FORBIDDEN,
        "scope_missing",
    );

    let id = first["registration_id"].as_str().unwrap().to_owned();
    let new_secret = [0x77; 32];
    let (status, rotated) = server
        .post(
            &format!("/v1/callback-registrations/{id}/rotate"),
            &agent,
            json!({"secret_id": "new", "secret": secret_b64(&new_secret), "overlap_seconds": 3600}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    assert_eq!(
        (rotated["secret_id"].clone(), rotated["previous_secret_id"].clone()),
        (json!("new"), json!("old"))
    );
    server.publish(&publisher, &["alpha"], json!({"n": 1})).await;
    let hint = wait_for("a hint after the rotation", || receiver.hints("/a").into_iter().next()).await;
    assert_eq!(hint.header(MATM_KEY_ID), Some("new"));
    assert_eq!(verify_with(&hint, &[("new", &new_secret)]), Ok("new".to_owned()));
    assert_eq!(
        verify_with(&hint, &[("old", &SECRET)]),
        Ok("old".to_owned()),
        "the old secret still verifies"
    );
    assert!(verify_with(&hint, &[("old", &new_secret)]).is_err());

    let (status, _) =
        server.call(Method::DELETE, &format!("/v1/callback-registrations/{id}"), Some(&agent), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) =
        server.post("/v1/callback-registrations", &agent, json!({"callback_url": receiver.url("/c")})).await;
    assert_eq!(status, StatusCode::CREATED, "a deleted registration frees its place");
    server.stop().await;
}
