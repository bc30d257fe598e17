//! Rotation of the access-token signing keys while the server runs, as `agent-inbox keys
//! rotate` does it: tokens of the old key stay valid through the overlap and are refused
//! after it, on every node as soon as it ends (whatever the reload interval); the new key
//! starts signing after its activation; no restart anywhere.

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use inbox_core::{RecipientId, TenantId};
use inbox_server::{CallerKind, Config, TokenService};
use inbox_store::{ConnectOptions, SqlStore, StoreConfig, TokenAlgorithm};
use reqwest::{Method, StatusCode};

use crate::harness::{TestServer, both_backends};
use inbox_conformance::Backend;

both_backends!(
    rotation_keeps_old_tokens_through_the_overlap_and_refuses_them_after,
    a_retired_key_is_refused_the_moment_its_overlap_ends,
    a_first_key_another_node_made_meanwhile_is_known_at_once,
);

const OVERLAP: Duration = Duration::from_secs(3);
const ACTIVATION: Duration = Duration::from_secs(1);

fn kid(token: &str) -> String {
    let header = token.split('.').next().unwrap();
    let header: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).unwrap()).unwrap();
    header["kid"].as_str().unwrap().to_owned()
}

async fn head_status(server: &TestServer, token: &str) -> (StatusCode, String) {
    let (status, body) = server.call(Method::GET, "/v1/inbox/head", Some(token), None).await;
    (status, body["code"].as_str().unwrap_or_default().to_owned())
}

async fn agent_token(tokens: &TokenService) -> String {
    tokens
        .issue(
            &TenantId::new("t1").unwrap(),
            &RecipientId::new("alpha").unwrap(),
            CallerKind::Agent,
            inbox_server::tokens::AGENT_SCOPES,
            None,
            false,
        )
        .await
        .unwrap()
        .access_token
}

async fn rotation_keeps_old_tokens_through_the_overlap_and_refuses_them_after(backend: Backend) {
    let tune = |config: &mut Config| config.tokens.signing_keys_reload_interval = Duration::from_millis(100);
    let server = TestServer::start_with(backend, tune).await;
    let other_node = server.start_beside(tune).await;
    let old_token = server.agent("t1", "alpha").await;
    assert_eq!(head_status(&server, &old_token).await.0, StatusCode::OK);

    // What the CLI does: a store on the real (database) clock, one call.
    let store =
        SqlStore::connect(&ConnectOptions::new(&server.db.url), StoreConfig::default()).await.unwrap();
    store.secrets().prepare(server.db.secrets_keys.clone()).await.unwrap();
    let rotated_at = Instant::now();
    let (new_key, retired) = store
        .tokens()
        .rotate_signing_keys(OVERLAP.as_millis() as u64, ACTIVATION.as_millis() as u64, TokenAlgorithm::Hs256)
        .await
        .unwrap();
    assert!(
        retired >= 1,
        "every older key got its retirement (nodes starting together may each have made one)"
    );
    assert_ne!(kid(&old_token), new_key.key_id);
    for node in [&server, &other_node] {
        assert_eq!(
            head_status(node, &old_token).await.0,
            StatusCode::OK,
            "old tokens work during the overlap"
        );
    }

    // A node's token service signs with the new key once it has activated.
    let tokens = TokenService::new(store.clone(), &Config::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let new_token = loop {
        tokens.reload_keys().await.unwrap();
        let token = agent_token(&tokens).await;
        if kid(&token) == new_key.key_id {
            break token;
        }
        assert!(Instant::now() < deadline, "the new key never started signing");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        rotated_at.elapsed() >= ACTIVATION - Duration::from_millis(100),
        "the new key waited for activation"
    );
    for node in [&server, &other_node] {
        assert_eq!(head_status(node, &new_token).await.0, StatusCode::OK, "every node accepts the new key");
    }

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, code) = head_status(&server, &old_token).await;
        if status == StatusCode::UNAUTHORIZED {
            assert_eq!(code, "invalid_token");
            break;
        }
        assert_eq!(status, StatusCode::OK);
        assert!(Instant::now() < deadline, "the old key was never retired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        rotated_at.elapsed() >= OVERLAP - Duration::from_millis(300),
        "old tokens were refused only after the overlap ({:?})",
        rotated_at.elapsed()
    );
    assert_eq!(head_status(&other_node, &old_token).await.0, StatusCode::UNAUTHORIZED, "on every node");
    assert_eq!(head_status(&server, &new_token).await.0, StatusCode::OK);
    store.close().await;
    other_node.stop().await;
    server.stop().await;
}

/// With the periodic reload far away (1 h), nodes that loaded the keys before the rotation
/// still refuse the old key the moment its overlap ends: a node re-reads keys it has held for
/// longer than the shortest overlap before it trusts them. An overlap below that minimum is
/// refused.
async fn a_retired_key_is_refused_the_moment_its_overlap_ends(backend: Backend) {
    let tune = |config: &mut Config| config.tokens.signing_keys_reload_interval = Duration::from_secs(3600);
    let server = TestServer::start_with(backend, tune).await;
    let other_node = server.start_beside(tune).await;
    let old_token = server.agent("t1", "alpha").await;
    for node in [&server, &other_node] {
        assert_eq!(head_status(node, &old_token).await.0, StatusCode::OK);
    }
    let store =
        SqlStore::connect(&ConnectOptions::new(&server.db.url), StoreConfig::default()).await.unwrap();
    store.secrets().prepare(server.db.secrets_keys.clone()).await.unwrap();
    let too_short = store
        .tokens()
        .rotate_signing_keys(inbox_store::SIGNING_KEY_OVERLAP_MS_MIN - 1, 0, TokenAlgorithm::Hs256)
        .await;
    assert!(
        matches!(
            too_short,
            Err(inbox_store::StoreError::Invalid { field: inbox_store::Field::SigningKeyOverlap, .. })
        ),
        "{too_short:?}"
    );

    let overlap = Duration::from_secs(2);
    let (_, retired) = store
        .tokens()
        .rotate_signing_keys(overlap.as_millis() as u64, 0, TokenAlgorithm::Hs256)
        .await
        .unwrap();
    assert!(retired >= 1);
    let retires_at = store.now().plus_ms(overlap.as_millis() as u64);
    let rotated_at = Instant::now();
    // Poll both nodes until each refuses; note when, by the database's clock.
    let mut refused_at = [None, None];
    while refused_at.iter().any(Option::is_none) {
        for (node, refused) in [&server, &other_node].into_iter().zip(&mut refused_at) {
            if refused.is_some() {
                continue;
            }
            let checked_at = store.now();
            let (status, code) = head_status(node, &old_token).await;
            if status == StatusCode::UNAUTHORIZED {
                assert_eq!(code, "invalid_token");
                *refused = Some(checked_at);
            } else {
                assert_eq!(status, StatusCode::OK, "{code}");
            }
        }
        assert!(rotated_at.elapsed() < Duration::from_secs(15), "the old key stayed valid: {refused_at:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for refused in refused_at.into_iter().flatten() {
        let late_ms = refused.get() - retires_at.get();
        // Requests in flight when the overlap ended may straddle it by a little.
        assert!(late_ms <= 500, "refused {late_ms} ms after the overlap ended");
        assert!(late_ms >= -200, "refused {} ms before the overlap ended", -late_ms);
    }
    store.close().await;
    other_node.stop().await;
    server.stop().await;
}

/// Two nodes starting together on an empty database may each make a first signing key: the
/// one that read only its own must take a token signed with the other's at once (it reads the
/// keys again for the first unknown key id), not refuse it until its reload interval passes.
async fn a_first_key_another_node_made_meanwhile_is_known_at_once(backend: Backend) {
    let db = inbox_conformance::Harness::new(backend).await;
    let mut config = Config::default();
    config.database.url = db.url.clone();
    let first = TokenService::new(db.store.clone(), &config).await.unwrap();
    // The other node's first key, made after this one read the keys.
    db.store.tokens().create_signing_key(TokenAlgorithm::Hs256).await.unwrap();
    let other = TokenService::new(db.store.clone(), &config).await.unwrap();
    let token = agent_token(&other).await;
    let caller = first.verify(&token).await.expect("a key made by another node is read at once");
    assert_eq!(caller.subject.as_str(), "alpha");
}
