//! Rotation of the access-token signing keys while the server runs, as `agent-inbox keys
//! rotate` does it: tokens of the old key stay valid through the overlap and are refused
//! after it; the new key starts signing after its activation; no restart anywhere.

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use inbox_core::{RecipientId, TenantId};
use inbox_server::{CallerKind, Config, TokenService};
use inbox_store::{ConnectOptions, SqlStore, StoreConfig};
use reqwest::{Method, StatusCode};

use crate::harness::{TestServer, both_backends};
use inbox_store::conformance::Backend;

both_backends!(rotation_keeps_old_tokens_through_the_overlap_and_refuses_them_after);

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
            inbox_server::auth::AGENT_SCOPES,
            None,
            false,
        )
        .await
        .unwrap()
        .access_token
}

async fn rotation_keeps_old_tokens_through_the_overlap_and_refuses_them_after(backend: Backend) {
    let tune = |config: &mut Config| config.signing_keys_reload_interval = Duration::from_millis(100);
    let server = TestServer::start_with(backend, tune).await;
    let other_node = server.start_beside(tune).await;
    let old_token = server.agent("t1", "alpha").await;
    assert_eq!(head_status(&server, &old_token).await.0, StatusCode::OK);

    // What the CLI does: a store on the real (database) clock, one call.
    let store =
        SqlStore::connect(&ConnectOptions::new(&server.db.url), StoreConfig::default()).await.unwrap();
    let rotated_at = Instant::now();
    let (new_key, retired) =
        store.rotate_signing_keys(OVERLAP.as_millis() as u64, ACTIVATION.as_millis() as u64).await.unwrap();
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
