//! Signed critical calls (RFC 9421 with RFC 9530 Content-Digest), end to end: a signature is
//! bound to its path and body, a nonce works once on any node, an old signature is expired,
//! tenants can require signatures, and keys are registered and rotated by the agent itself.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use inbox_server::CallerKind;
use inbox_trust::message_signatures::SigningKey;
use inbox_trust::sign_inbox_request;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{TestServer, assert_problem, both_backends, read};
use inbox_conformance::Backend;

both_backends!(
    a_signature_is_bound_to_its_path,
    replays_are_refused_inside_the_window_and_expired_outside_it,
    a_refused_signed_request_still_spends_its_nonce,
    concurrent_signed_calls_sent_twice_each_succeed_once,
    a_tampered_body_fails_the_digest,
    tenants_can_require_signatures_on_critical_calls,
    agents_manage_their_own_keys,
);

fn now_seconds() -> i64 {
    inbox_api::time::now_ms() / 1000
}

fn fresh_nonce() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).unwrap();
    URL_SAFE_NO_PAD.encode(bytes)
}

fn agent_key(seed: u8) -> SigningKey {
    SigningKey::ed25519_from_seed(&[seed; 32])
}

/// A request signed for `signed_path` and `signed_body`, sent to `sent_path` with
/// `sent_body`: the two differ only when a test moves or tampers with it.
#[allow(clippy::too_many_arguments)]
fn signed(
    server: &TestServer,
    token: &str,
    key: &SigningKey,
    keyid: &str,
    created: i64,
    nonce: &str,
    (signed_path, signed_body): (&str, &[u8]),
    (sent_path, sent_body): (&str, &[u8]),
) -> reqwest::RequestBuilder {
    let authority = server.base.trim_start_matches("http://");
    let headers =
        sign_inbox_request("POST", authority, signed_path, signed_body, key, keyid, created, nonce).unwrap();
    let mut request = server
        .client
        .post(format!("{}{sent_path}", server.base))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(sent_body.to_vec());
    for (name, value) in headers.pairs() {
        request = request.header(name, value);
    }
    request
}

/// Sends `body` to `path`, signed with a fresh nonce now.
pub(crate) async fn send_signed(
    server: &TestServer,
    token: &str,
    key: &SigningKey,
    keyid: &str,
    path: &str,
    body: &Value,
) -> (StatusCode, Value) {
    let bytes = serde_json::to_vec(body).unwrap();
    let request =
        signed(server, token, key, keyid, now_seconds(), &fresh_nonce(), (path, &bytes), (path, &bytes));
    read(request.send().await.unwrap()).await
}

/// Registers `key` as an ed25519 key of the token's agent and returns its key id.
async fn register_key(server: &TestServer, token: &str, key: &SigningKey, key_id: &str) -> String {
    let public = key.verifying_key().ed25519_public_bytes().unwrap();
    let (status, body) = server
        .post(
            "/v1/agent-keys",
            token,
            json!({"algorithm": "ed25519", "public_key": URL_SAFE_NO_PAD.encode(public), "key_id": key_id}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(body.get("secret").is_none(), "an ed25519 registration returns no secret");
    body["key_id"].as_str().unwrap().to_owned()
}

async fn claim_one(server: &TestServer, token: &str, key: &SigningKey, keyid: &str) -> (String, String) {
    let (status, claimed) =
        send_signed(server, token, key, keyid, "/v1/inbox/claim", &json!({"limit": 1, "lease_seconds": 60}))
            .await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    let claim = &claimed["claims"][0];
    (claim["event_id"].as_str().unwrap().to_owned(), claim["lease_token"].as_str().unwrap().to_owned())
}

/// A signature made for /release cannot be used on /acknowledge: `@path` is covered.
async fn a_signature_is_bound_to_its_path(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "alpha").await;
    let key = agent_key(1);
    let keyid = register_key(&server, &agent, &key, "alpha-k1").await;
    server.publish(&publisher, &["alpha"], json!({"n": 1})).await;
    let (event_id, lease_token) = claim_one(&server, &agent, &key, &keyid).await;

    let body = serde_json::to_vec(&json!({
        "acks": [{"event_id": event_id, "lease_token": lease_token, "result": "completed"}]
    }))
    .unwrap();
    let moved = signed(
        &server,
        &agent,
        &key,
        &keyid,
        now_seconds(),
        &fresh_nonce(),
        ("/v1/inbox/release", &body),
        ("/v1/inbox/acknowledge", &body),
    );
    let refused = read(moved.send().await.unwrap()).await;
    assert_problem(&refused, StatusCode::UNAUTHORIZED, "signature_invalid");
    assert_eq!(refused.1["reason"], "bad_signature");

    let (status, acked) = send_signed(
        &server,
        &agent,
        &key,
        &keyid,
        "/v1/inbox/acknowledge",
        &json!({"acks": [{"event_id": event_id, "lease_token": lease_token, "result": "completed"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{acked}");
    assert_eq!(acked["results"][0]["ack_state"], "acked");
    server.stop().await;
}

/// The same signed request twice is a replay (on this node or another); a captured request
/// sent after its window is expired, whatever its nonce.
async fn replays_are_refused_inside_the_window_and_expired_outside_it(backend: Backend) {
    let server = TestServer::start(backend).await;
    let other_node = server.start_beside(|_| {}).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "alpha").await;
    let key = agent_key(2);
    let keyid = register_key(&server, &agent, &key, "alpha-k2").await;
    server.publish(&publisher, &["alpha"], json!({"n": 1})).await;

    let body = serde_json::to_vec(&json!({"limit": 1})).unwrap();
    let nonce = fresh_nonce();
    let created = now_seconds();
    let path = "/v1/inbox/claim";
    let first = read(
        signed(&server, &agent, &key, &keyid, created, &nonce, (path, &body), (path, &body))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(first.0, StatusCode::OK, "{}", first.1);
    assert_eq!(first.1["claims"].as_array().unwrap().len(), 1);

    let replay = read(
        signed(&server, &agent, &key, &keyid, created, &nonce, (path, &body), (path, &body))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_problem(&replay, StatusCode::UNAUTHORIZED, "signature_replayed");
    let replay_elsewhere = read(
        signed(&other_node, &agent, &key, &keyid, created, &nonce, (path, &body), (path, &body))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(replay_elsewhere.0, StatusCode::UNAUTHORIZED, "{}", replay_elsewhere.1);
    assert!(
        ["signature_replayed", "signature_invalid"].contains(&replay_elsewhere.1["code"].as_str().unwrap()),
        "the other node's authority differs, and the nonce is spent anyway: {}",
        replay_elsewhere.1
    );
    // The same nonce, signed for the other node's authority: only the shared nonce table stops it.
    let other_authority =
        signed(&other_node, &agent, &key, &keyid, created, &nonce, (path, &body), (path, &body));
    let refused = read(other_authority.send().await.unwrap()).await;
    assert_problem(&refused, StatusCode::UNAUTHORIZED, "signature_replayed");

    let captured_long_ago = now_seconds() - 400;
    let late = read(
        signed(
            &server,
            &agent,
            &key,
            &keyid,
            captured_long_ago,
            &fresh_nonce(),
            (path, &body),
            (path, &body),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_problem(&late, StatusCode::UNAUTHORIZED, "signature_expired");

    let metrics =
        server.client.get(format!("{}/metrics", server.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("agent_inbox_signature_replays_total"), "replays are counted");
    other_node.stop().await;
    server.stop().await;
}

/// The nonce is recorded before the operation; a request refused after that still spends it, so the captured request cannot be replayed later with a token that lacks
/// nothing (the token is not covered by the signature). A replayed acknowledgement is refused
/// whole.
async fn a_refused_signed_request_still_spends_its_nonce(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "alpha").await;
    let poll_only = server.token("t1", "alpha", CallerKind::Agent, "inbox.poll").await;
    let key = agent_key(6);
    let keyid = register_key(&server, &agent, &key, "alpha-k6").await;
    server.publish(&publisher, &["alpha"], json!({"n": 1})).await;
    let path = "/v1/inbox/claim";
    let claim = serde_json::to_vec(&json!({"limit": 1})).unwrap();
    let (created, nonce) = (now_seconds(), fresh_nonce());
    let send =
        |token: &str| signed(&server, token, &key, &keyid, created, &nonce, (path, &claim), (path, &claim));
    assert_problem(
        &read(send(&poll_only).send().await.unwrap()).await,
        StatusCode::FORBIDDEN,
        "scope_missing",
    );
    let replay = read(send(&agent).send().await.unwrap()).await;
    assert_problem(&replay, StatusCode::UNAUTHORIZED, "signature_replayed");
    assert_eq!(replay.1["reason"], "replayed_nonce");

    let (event_id, lease_token) = claim_one(&server, &agent, &key, &keyid).await;
    let path = "/v1/inbox/acknowledge";
    let ack =
        serde_json::to_vec(&json!({"acks": [{"event_id": event_id, "lease_token": lease_token}]})).unwrap();
    let (created, nonce) = (now_seconds(), fresh_nonce());
    let send = || signed(&server, &agent, &key, &keyid, created, &nonce, (path, &ack), (path, &ack));
    let (status, acked) = read(send().send().await.unwrap()).await;
    assert_eq!(
        (status, acked["results"][0]["ack_state"].as_str()),
        (StatusCode::OK, Some("acked")),
        "{acked}"
    );
    assert_problem(&read(send().send().await.unwrap()).await, StatusCode::UNAUTHORIZED, "signature_replayed");
    server.stop().await;
}

/// Many signed claims at once, each sent twice at the same moment: the node records their
/// nonces together, and of each pair exactly one claims while the other is a replay that
/// claims nothing.
async fn concurrent_signed_calls_sent_twice_each_succeed_once(backend: Backend) {
    const PAIRS: usize = 12;
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "alpha").await;
    let key = agent_key(7);
    let keyid = register_key(&server, &agent, &key, "alpha-k7").await;
    for n in 0..PAIRS {
        server.publish(&publisher, &["alpha"], json!({"n": n})).await;
    }
    let path = "/v1/inbox/claim";
    let body = serde_json::to_vec(&json!({"limit": 1, "lease_seconds": 60})).unwrap();
    let created = now_seconds();
    let nonces: Vec<String> = (0..PAIRS).map(|_| fresh_nonce()).collect();
    let sends = nonces.iter().chain(&nonces).map(|nonce| {
        let request = signed(&server, &agent, &key, &keyid, created, nonce, (path, &body), (path, &body));
        async move { (nonce.clone(), read(request.send().await.unwrap()).await) }
    });
    let answers = futures_util::future::join_all(sends).await;

    let mut claimed = std::collections::HashSet::new();
    for nonce in &nonces {
        let pair: Vec<&(StatusCode, Value)> =
            answers.iter().filter(|(n, _)| n == nonce).map(|(_, answer)| answer).collect();
        let ok: Vec<_> = pair.iter().filter(|(status, _)| *status == StatusCode::OK).collect();
        assert_eq!(ok.len(), 1, "one of the pair succeeds: {pair:?}");
        let replay = pair.iter().find(|(status, _)| *status != StatusCode::OK).unwrap();
        assert_problem(replay, StatusCode::UNAUTHORIZED, "signature_replayed");
        for claim in ok[0].1["claims"].as_array().unwrap() {
            assert!(claimed.insert(claim["event_id"].as_str().unwrap().to_owned()), "claimed twice");
        }
    }
    let (status, rest) = send_signed(&server, &agent, &key, &keyid, path, &json!({"limit": 50})).await;
    assert_eq!(status, StatusCode::OK, "{rest}");
    for claim in rest["claims"].as_array().unwrap() {
        assert!(claimed.insert(claim["event_id"].as_str().unwrap().to_owned()), "claimed twice");
    }
    assert_eq!(claimed.len(), PAIRS, "every event was claimed by a successful call; the replays took none");
    server.stop().await;
}

/// The body is covered through Content-Digest: a changed body fails even with every header
/// intact.
async fn a_tampered_body_fails_the_digest(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "alpha").await;
    let key = agent_key(3);
    let keyid = register_key(&server, &agent, &key, "alpha-k3").await;
    server.publish(&publisher, &["alpha"], json!({"n": 1})).await;
    let (event_id, lease_token) = claim_one(&server, &agent, &key, &keyid).await;

    let honest = serde_json::to_vec(&json!({"event_id": event_id, "lease_token": lease_token})).unwrap();
    let tampered = serde_json::to_vec(
        &json!({"event_id": event_id, "lease_token": lease_token, "retry_after_seconds": 3600}),
    )
    .unwrap();
    let path = "/v1/inbox/release";
    let request = signed(
        &server,
        &agent,
        &key,
        &keyid,
        now_seconds(),
        &fresh_nonce(),
        (path, &honest),
        (path, &tampered),
    );
    let refused = read(request.send().await.unwrap()).await;
    assert_problem(&refused, StatusCode::UNAUTHORIZED, "content_digest_mismatch");

    let (status, released) = send_signed(
        &server,
        &agent,
        &key,
        &keyid,
        path,
        &json!({"event_id": event_id, "lease_token": lease_token}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{released}");
    server.stop().await;
}

/// With the tenant's policy on, unsigned critical calls are refused and signed ones (ed25519
/// or hmac-sha256, on both route sets) pass; reads need no signature; other tenants are
/// unaffected.
async fn tenants_can_require_signatures_on_critical_calls(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let admin = server.token("t1", "operator", CallerKind::Admin, "admin").await;
    let agent = server.agent("t1", "alpha").await;
    let outsider = server.agent("t2", "alpha").await;

    let (status, policy) =
        server.post("/v1/admin/tenant-policy", &admin, json!({"signatures_required": true})).await;
    assert_eq!(status, StatusCode::OK, "{policy}");
    assert_eq!(policy["signatures_required"], true);
    let (status, read_back) =
        server.call(reqwest::Method::GET, "/v1/admin/tenant-policy", Some(&admin), None).await;
    assert_eq!((status, read_back["signatures_required"].clone()), (StatusCode::OK, json!(true)));
    assert_problem(
        &server.post("/v1/admin/tenant-policy", &agent, json!({"signatures_required": false})).await,
        StatusCode::FORBIDDEN,
        "scope_missing",
    );

    server.publish(&publisher, &["alpha"], json!({"n": 1})).await;
    let unsigned = server.post("/v1/inbox/claim", &agent, json!({"limit": 1})).await;
    assert_problem(&unsigned, StatusCode::UNAUTHORIZED, "signature_required");
    let unsigned_alias = server.post("/api/v1/agents/alpha/inbox/claim", &agent, json!({})).await;
    assert_problem(&unsigned_alias, StatusCode::UNAUTHORIZED, "signature_required");
    let (status, _) = server.post("/v1/inbox/poll-after-cursor", &agent, json!({"after_seq": 0})).await;
    assert_eq!(status, StatusCode::OK, "polling is not a critical call");
    let (status, _) = server.post("/v1/inbox/claim", &outsider, json!({"limit": 1})).await;
    assert_eq!(status, StatusCode::OK, "another tenant's policy is its own");

    // An hmac-sha256 key: the service generates the secret and shows it once.
    let (status, issued) = server.post("/v1/agent-keys", &agent, json!({"algorithm": "hmac-sha256"})).await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    let secret = URL_SAFE_NO_PAD.decode(issued["secret"].as_str().unwrap()).unwrap();
    assert_eq!(secret.len(), 32);
    let hmac = SigningKey::hmac_sha256(&secret).unwrap();
    let hmac_id = issued["key_id"].as_str().unwrap().to_owned();
    let (status, listed) = server.call(reqwest::Method::GET, "/v1/agent-keys", Some(&agent), None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(listed["keys"][0].get("secret").is_none(), "a secret is never shown again: {listed}");

    let (event_id, lease_token) = claim_one(&server, &agent, &hmac, &hmac_id).await;
    let (status, hb) = send_signed(
        &server,
        &agent,
        &hmac,
        &hmac_id,
        "/v1/inbox/heartbeat",
        &json!({"leases": [{"event_id": event_id, "lease_token": lease_token, "extend_by_seconds": 60}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{hb}");
    assert!(hb["leases"][0]["visibility_lease_until_utc"].is_string(), "{hb}");
    let path = format!("/api/v1/agents/alpha/inbox/{event_id}/ack");
    let (status, acked) =
        send_signed(&server, &agent, &hmac, &hmac_id, &path, &json!({"lease_token": lease_token})).await;
    assert_eq!(status, StatusCode::OK, "{acked}");
    assert_eq!(acked["ack_state"], "acked");

    // A key of another agent, or an unknown key, does not sign for this agent.
    let beta = server.agent("t1", "beta").await;
    let beta_key = agent_key(9);
    register_key(&server, &beta, &beta_key, "beta-k1").await;
    let foreign =
        send_signed(&server, &agent, &beta_key, "beta-k1", "/v1/inbox/claim", &json!({"limit": 1})).await;
    assert_problem(&foreign, StatusCode::UNAUTHORIZED, "unknown_signing_key");
    let unknown =
        send_signed(&server, &agent, &hmac, "no-such-key", "/v1/inbox/claim", &json!({"limit": 1})).await;
    assert_problem(&unknown, StatusCode::UNAUTHORIZED, "unknown_signing_key");

    let (status, _) =
        server.post("/v1/admin/tenant-policy", &admin, json!({"signatures_required": false})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = server.post("/v1/inbox/claim", &agent, json!({"limit": 1})).await;
    assert_eq!(status, StatusCode::OK, "signatures are optional again: {body}");
    server.stop().await;
}

/// The first key needs only the token; more keys, and retiring one, need a signature by a
/// current key, so a stolen token cannot replace them. A retired key stops verifying.
async fn agents_manage_their_own_keys(backend: Backend) {
    let server = TestServer::start(backend).await;
    let agent = server.agent("t1", "alpha").await;
    let first = agent_key(4);
    let first_id = register_key(&server, &agent, &first, "alpha-first").await;
    let next = agent_key(5);
    let next_public = URL_SAFE_NO_PAD.encode(next.verifying_key().ed25519_public_bytes().unwrap());
    let add = json!({"algorithm": "ed25519", "public_key": next_public, "key_id": "alpha-next"});

    let unsigned = server.post("/v1/agent-keys", &agent, add.clone()).await;
    assert_problem(&unsigned, StatusCode::UNAUTHORIZED, "signature_required");
    let (status, added) = send_signed(&server, &agent, &first, &first_id, "/v1/agent-keys", &add).await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    let again = send_signed(&server, &agent, &first, &first_id, "/v1/agent-keys", &add).await;
    assert_problem(&again, StatusCode::CONFLICT, "key_exists");
    let bad = server
        .post(
            "/v1/agent-keys",
            &server.agent("t1", "gamma").await,
            json!({"algorithm": "ed25519", "public_key": "AAAA"}),
        )
        .await;
    assert_problem(&bad, StatusCode::BAD_REQUEST, "invalid_field");
    // The identity point: a weak key, which any `R = [s]B` would match.
    let mut identity = [0u8; 32];
    identity[0] = 1;
    let weak = server
        .post(
            "/v1/agent-keys",
            &server.agent("t1", "gamma").await,
            json!({"algorithm": "ed25519", "public_key": URL_SAFE_NO_PAD.encode(identity)}),
        )
        .await;
    assert_problem(&weak, StatusCode::BAD_REQUEST, "invalid_field");
    assert!(weak.1["detail"].as_str().is_some_and(|d| d.contains("small order")), "{}", weak.1);
    let publisher = server.publisher("t1").await;
    assert_problem(
        &server.post("/v1/agent-keys", &publisher, json!({"algorithm": "hmac-sha256"})).await,
        StatusCode::FORBIDDEN,
        "kind_not_allowed",
    );

    // Retire the first key, signed with the next one.
    let empty: &[u8] = b"";
    let authority = server.base.trim_start_matches("http://");
    let path = format!("/v1/agent-keys/{first_id}");
    let headers = sign_inbox_request(
        "DELETE",
        authority,
        &path,
        empty,
        &next,
        "alpha-next",
        now_seconds(),
        &fresh_nonce(),
    )
    .unwrap();
    let mut request = server.client.delete(format!("{}{path}", server.base)).bearer_auth(&agent);
    for (name, value) in headers.pairs() {
        request = request.header(name, value);
    }
    let (status, body) = read(request.send().await.unwrap()).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let retired =
        send_signed(&server, &agent, &first, &first_id, "/v1/inbox/claim", &json!({"limit": 1})).await;
    assert_problem(&retired, StatusCode::UNAUTHORIZED, "unknown_signing_key");
    let (status, body) =
        send_signed(&server, &agent, &next, "alpha-next", "/v1/inbox/claim", &json!({"limit": 1})).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // An operator can retire a key of an agent that lost its keys.
    let admin = server.token("t1", "operator", CallerKind::Admin, "admin").await;
    let (status, body) =
        server.call(reqwest::Method::DELETE, "/v1/agent-keys/alpha-next", Some(&admin), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, listed) = server.call(reqwest::Method::GET, "/v1/agent-keys", Some(&agent), None).await;
    assert_eq!((status, listed["keys"].as_array().unwrap().len()), (StatusCode::OK, 0));
    let bootstrap = server.post("/v1/agent-keys", &agent, json!({"algorithm": "hmac-sha256"})).await;
    assert_eq!(bootstrap.0, StatusCode::CREATED, "with no live key, the token may register one again");
    server.stop().await;
}
