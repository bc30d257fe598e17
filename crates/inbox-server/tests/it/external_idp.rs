//! Tokens from an external identity provider, verified against a configured JWKS file: an
//! Ed25519 key signs them here as the provider would; the server accepts them, and refuses
//! ones from an unknown key, with the wrong issuer, or expired.

use std::time::{SystemTime, UNIX_EPOCH};

use ed25519_dalek::SigningKey;
use ed25519_dalek::pkcs8::EncodePrivateKey;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::harness::{TestServer, assert_problem};
use inbox_conformance::Backend;

fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

fn sign(key: &SigningKey, kid: &str, claims: serde_json::Value) -> String {
    let der = key.to_pkcs8_der().expect("a PKCS#8 key");
    let encoding = EncodingKey::from_ed_der(der.as_bytes());
    let header = Header { kid: Some(kid.to_owned()), ..Header::new(Algorithm::EdDSA) };
    jsonwebtoken::encode(&header, &claims, &encoding).expect("sign")
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_of_a_configured_identity_provider_are_accepted() {
    let provider_key = SigningKey::from_bytes(&[7; 32]);
    let stranger_key = SigningKey::from_bytes(&[9; 32]);
    let jwks = json!({"keys": [{
        "kty": "OKP", "crv": "Ed25519", "kid": "idp-2026", "alg": "EdDSA", "use": "sig",
        "x": base64url(provider_key.verifying_key().as_bytes()),
    }]});
    let path = std::env::temp_dir().join(format!("agent-inbox-jwks-{}.json", std::process::id()));
    std::fs::write(&path, jwks.to_string()).unwrap();
    let server = TestServer::start_with(Backend::Sqlite, |c| {
        c.tokens.jwks_file = Some(path.clone());
        c.tokens.jwks_issuer = Some("https://idp.example".into());
    })
    .await;
    let claims = |iss: &str, exp: u64| json!({"iss": iss, "sub": "agent_alpha", "tid": "t1", "kind": "agent", "scope": "inbox.poll", "exp": exp, "iat": now()});
    let good = sign(&provider_key, "idp-2026", claims("https://idp.example", now() + 600));
    let (status, head) = server.call(Method::GET, "/v1/inbox/head", Some(&good), None).await;
    assert_eq!(status, StatusCode::OK, "{head}");
    assert_eq!(
        (head["tenant_id"].clone(), head["recipient_id"].clone()),
        (json!("t1"), json!("agent_alpha"))
    );

    let forged = sign(&stranger_key, "idp-2026", claims("https://idp.example", now() + 600));
    assert_problem(
        &server.call(Method::GET, "/v1/inbox/head", Some(&forged), None).await,
        StatusCode::UNAUTHORIZED,
        "invalid_token",
    );
    let wrong_issuer = sign(&provider_key, "idp-2026", claims("https://evil.example", now() + 600));
    assert_problem(
        &server.call(Method::GET, "/v1/inbox/head", Some(&wrong_issuer), None).await,
        StatusCode::UNAUTHORIZED,
        "invalid_token",
    );
    let expired = sign(&provider_key, "idp-2026", claims("https://idp.example", now() - 3_600));
    assert_problem(
        &server.call(Method::GET, "/v1/inbox/head", Some(&expired), None).await,
        StatusCode::UNAUTHORIZED,
        "token_expired",
    );
    let unknown_kid = sign(&provider_key, "other", claims("https://idp.example", now() + 600));
    assert_problem(
        &server.call(Method::GET, "/v1/inbox/head", Some(&unknown_kid), None).await,
        StatusCode::UNAUTHORIZED,
        "invalid_token",
    );
    let missing_scope = server.post("/v1/inbox/claim", &good, json!({})).await;
    assert_problem(&missing_scope, StatusCode::FORBIDDEN, "scope_missing");
    server.stop().await;
    std::fs::remove_file(path).unwrap();
}
