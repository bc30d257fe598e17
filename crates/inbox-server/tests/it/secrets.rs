//! Secrets out of the database's reach, end to end: a copy of the database alone (the SQLite
//! file; a MariaDB dump) mints no token and holds no secret the service handed out; a rewrap
//! with two nodes serving under load fails no request and every secret keeps working; a wrong
//! or unreadable key file refuses to start; EdDSA tokens verify with the published keys.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use inbox_conformance::{Backend, Harness, write_private};
use inbox_server::{CallerKind, Config};
use inbox_store::{SecretsKeys, TokenAlgorithm};
use inbox_trust::message_signatures::SigningKey;
use jsonwebtoken::{Algorithm, DecodingKey};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::{Connection as _, Row as _};

use crate::callback_receivers::{Receiver, callback_agent, development, secret_b64, verify_with, wait_for};
use crate::harness::{TestServer, both_backends};
use crate::signatures::send_signed;

both_backends!(
    a_copy_of_the_database_alone_mints_no_token_and_holds_no_secret,
    rewrap_with_two_nodes_serving_fails_nothing,
    a_wrong_or_unreadable_key_file_refuses_to_start,
    eddsa_tokens_verify_with_the_published_keys,
    requests_never_decrypt_a_secret,
);

const SECRET: [u8; 32] = [0x42; 32];

/// Every form a secret could be written in: its bytes, hex, base64 (both alphabets, padded
/// or not).
fn forms(secret: &[u8]) -> Vec<Vec<u8>> {
    vec![
        secret.to_vec(),
        hex::encode(secret).into_bytes(),
        hex::encode_upper(secret).into_bytes(),
        STANDARD.encode(secret).into_bytes(),
        STANDARD_NO_PAD.encode(secret).into_bytes(),
        URL_SAFE.encode(secret).into_bytes(),
        URL_SAFE_NO_PAD.encode(secret).into_bytes(),
    ]
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The keys an attacker would try from one stored value: the value, and what it decodes to as
/// hex or base64.
fn candidate_keys(value: &[u8]) -> Vec<Vec<u8>> {
    let mut keys = vec![value.to_vec()];
    if let Ok(text) = std::str::from_utf8(value) {
        let text = text.trim();
        keys.extend(hex::decode(text).ok());
        for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
            keys.extend(engine.decode(text).ok());
        }
    }
    keys.retain(|k| !k.is_empty());
    keys
}

/// Whether `key` verifies `token` as an HS256 JWT (the signature alone: a minted token needs
/// nothing more).
fn hs256_verifies(token: &str, key: &[u8]) -> bool {
    let (message, signature) = token.rsplit_once('.').unwrap();
    jsonwebtoken::crypto::verify(
        signature,
        message.as_bytes(),
        &DecodingKey::from_secret(key),
        Algorithm::HS256,
    )
    .unwrap_or(false)
}

/// A copy of the database alone: the SQLite file (through `VACUUM INTO`, so it holds what is
/// committed), or a `mariadb-dump` loaded into a database of its own. Returns the copy's bytes
/// (the file, or the dump's text) and every value of every table of the copy.
async fn copy_of_database(db: &Harness, dir: &std::path::Path) -> (Vec<u8>, Vec<Vec<u8>>) {
    match db.backend {
        Backend::Sqlite => {
            let copy = dir.join("copy.db");
            let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
            sqlx::query(&format!("VACUUM INTO '{}'", copy.display())).execute(&mut conn).await.unwrap();
            conn.close().await.unwrap();
            let bytes = std::fs::read(&copy).unwrap();
            let mut conn =
                sqlx::SqliteConnection::connect(&format!("sqlite://{}", copy.display())).await.unwrap();
            let tables: Vec<String> = sqlx::query(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
            )
            .fetch_all(&mut conn)
            .await
            .unwrap()
            .iter()
            .map(|r| r.get("name"))
            .collect();
            let mut values = Vec::new();
            for table in tables {
                let columns: Vec<String> = sqlx::query("SELECT name FROM pragma_table_info(?)")
                    .bind(&table)
                    .fetch_all(&mut conn)
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| r.get("name"))
                    .collect();
                for column in columns {
                    let sql = format!(
                        "SELECT hex(\"{column}\") AS v FROM \"{table}\" WHERE \"{column}\" IS NOT NULL"
                    );
                    for row in sqlx::query(&sql).fetch_all(&mut conn).await.unwrap() {
                        values.push(hex::decode(row.get::<String, _>("v")).unwrap());
                    }
                }
            }
            conn.close().await.unwrap();
            (bytes, values)
        }
        Backend::MySql | Backend::Galera => {
            let (host, port) =
                db.server_addr().rsplit_once(':').map(|(h, p)| (h.to_owned(), p.to_owned())).unwrap();
            let (user, database) = {
                let rest = db.url.split_once("://").unwrap().1;
                let (credentials, location) = rest.rsplit_once('@').unwrap();
                (
                    credentials.split(':').next().unwrap().to_owned(),
                    location.rsplit_once('/').unwrap().1.to_owned(),
                )
            };
            let client = |program: &str| {
                let mut command = std::process::Command::new(program);
                command.args(["--host", &host, "--port", &port, "--user", &user]);
                command
            };
            let dump = client("mariadb-dump").arg(&database).output().expect("mariadb-dump runs");
            assert!(dump.status.success(), "mariadb-dump: {}", String::from_utf8_lossy(&dump.stderr));
            let copy = format!("{database}_copy");
            let created =
                client("mariadb").args(["-e", &format!("CREATE DATABASE `{copy}`")]).output().unwrap();
            assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
            let mut load = client("mariadb")
                .arg(&copy)
                .stdin(std::process::Stdio::piped())
                .spawn()
                .expect("the mariadb client runs");
            std::io::Write::write_all(load.stdin.as_mut().unwrap(), &dump.stdout).unwrap();
            drop(load.stdin.take());
            assert!(load.wait().unwrap().success(), "the dump loads");
            let url = format!("{}/{copy}", db.url.rsplit_once('/').unwrap().0);
            let mut conn = sqlx::MySqlConnection::connect(&url).await.unwrap();
            let columns: Vec<(String, String)> = sqlx::query(
                "SELECT CAST(table_name AS CHAR) AS t, CAST(column_name AS CHAR) AS c FROM information_schema.columns \
                 WHERE table_schema = DATABASE() AND table_name IN \
                 (SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE')",
            )
            .fetch_all(&mut conn)
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get("t"), r.get("c")))
            .collect();
            assert!(columns.len() > 50, "every table of the copy: {columns:?}");
            let mut values = Vec::new();
            for (table, column) in columns {
                let sql = format!(
                    "SELECT HEX(CAST(`{column}` AS BINARY)) AS v FROM `{table}` WHERE `{column}` IS NOT NULL"
                );
                for row in sqlx::query(&sql).fetch_all(&mut conn).await.unwrap() {
                    values.push(hex::decode(row.get::<String, _>("v")).unwrap());
                }
            }
            sqlx::query(&format!("DROP DATABASE `{copy}`")).execute(&mut conn).await.unwrap();
            conn.close().await.unwrap();
            (dump.stdout, values)
        }
    }
}

/// Whoever holds a copy of the database but not the key file: tries every value of every
/// table as an HS256 key (raw, hex- and base64-decoded) against a token the service issued,
/// and looks for the webhook and hmac agent-key secrets the service handed out, in every form.
async fn a_copy_of_the_database_alone_mints_no_token_and_holds_no_secret(backend: Backend) {
    let server = TestServer::start_with(backend, development).await;
    let agent = callback_agent(&server, "t1", "alpha").await;
    let admin = server.token("t1", "ops", CallerKind::Admin, "admin").await;
    let (status, issued) = server.post("/v1/agent-keys", &agent, json!({"algorithm": "hmac-sha256"})).await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    let agent_secret = URL_SAFE_NO_PAD.decode(issued["secret"].as_str().unwrap()).unwrap();
    let receiver = Receiver::start(&SECRET).await;
    let (status, registered) = server
        .post("/v1/callback-registrations", &agent, json!({"callback_url": receiver.url("/hook")}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{registered}");
    let webhook_secret = URL_SAFE_NO_PAD.decode(registered["secret"].as_str().unwrap()).unwrap();
    let (status, rotated) = server
        .post(
            &format!("/v1/callback-registrations/{}/rotate", registered["registration_id"].as_str().unwrap()),
            &agent,
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let rotated_secret = URL_SAFE_NO_PAD.decode(rotated["secret"].as_str().unwrap()).unwrap();
    // The token key itself, read as a node reads it, proves the checker finds a key that works.
    let token_key = db_token_key(&server.db).await;
    assert!(hs256_verifies(&admin, &token_key), "the checker recognizes the real key");

    let dir = std::env::temp_dir()
        .join(format!("agent-inbox-copy-{}", hex::encode(inbox_store::random_bytes::<6>())));
    std::fs::create_dir_all(&dir).unwrap();
    let (copy, values) = copy_of_database(&server.db, &dir).await;
    assert!(values.len() > 20, "the copy holds the rows: {} values", values.len());
    let mut tried = 0;
    for value in &values {
        for key in candidate_keys(value) {
            tried += 1;
            assert!(!hs256_verifies(&admin, &key), "a value of the copy verifies the service's token");
        }
    }
    assert!(tried > values.len(), "hex and base64 forms were tried too");
    for (what, secret) in [
        ("the token key", token_key.as_slice()),
        ("the hmac agent key", &agent_secret),
        ("the webhook secret", &webhook_secret),
        ("the rotated webhook secret", &rotated_secret),
    ] {
        for form in forms(secret) {
            assert!(!contains(&copy, &form), "{what} is in the copy");
            assert!(!values.iter().any(|v| contains(v, &form)), "{what} is a value of the copy");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    server.stop().await;
}

async fn db_token_key(db: &Harness) -> Vec<u8> {
    db.store.tokens().access_signing_keys(TokenAlgorithm::Hs256).await.unwrap()[0].secret.to_vec()
}

/// Writes a key file in one step (a node never reads half of it).
fn write_key_file(path: &std::path::Path, keys: &SecretsKeys) {
    let partial = path.with_extension("partial");
    write_private(&partial, keys.to_file_text().as_bytes());
    std::fs::rename(&partial, path).unwrap();
}

/// Whether the node's `/metrics` says it holds (`1`) or dropped (`0`) `key_id`.
async fn node_says(server: &TestServer, key_id: &str, value: &str) -> bool {
    let (_, text) = server.call(Method::GET, "/metrics", None, None).await;
    let line = format!("agent_inbox_secrets_key_loaded{{key_id=\"{key_id}\"}} {value}");
    text.as_str().is_some_and(|t| t.lines().any(|l| l == line))
}

async fn until_both(what: &str, nodes: [&TestServer; 2], key_id: &str, value: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in nodes {
        while !node_says(node, key_id, value).await {
            assert!(Instant::now() < deadline, "timed out waiting until every node {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Two nodes serve publishes and hmac-signed claims and acknowledgements while the secrets key
/// is rotated: the new key joins both key files, the rewrap moves every secret under it, the
/// old key leaves both files. No request fails; afterwards the tokens issued before, the agent's
/// hmac key and the webhook secret still work, and everything is sealed under the new key.
async fn rewrap_with_two_nodes_serving_fails_nothing(backend: Backend) {
    let first = TestServer::start_with(backend, development).await;
    let db = first.db.clone();
    let second_file = db.secrets_key_file.with_extension("second");
    write_key_file(&second_file, &db.secrets_keys);
    let second = first
        .start_beside(|config| {
            development(config);
            config.secrets.key_file = Some(second_file.clone());
        })
        .await;
    let nodes = [&first, &second];
    let publisher = first.publisher("t1").await;
    let agent = callback_agent(&first, "t1", "alpha").await;
    let (status, issued) = first.post("/v1/agent-keys", &agent, json!({"algorithm": "hmac-sha256"})).await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    let hmac = SigningKey::hmac_sha256(&URL_SAFE_NO_PAD.decode(issued["secret"].as_str().unwrap()).unwrap())
        .unwrap();
    let hmac_id = issued["key_id"].as_str().unwrap().to_owned();
    let receiver = Receiver::start(&SECRET).await;
    let (status, registered) = first
        .post(
            "/v1/callback-registrations",
            &agent,
            json!({"callback_url": receiver.url("/hook"), "secret_id": "s1", "secret": secret_b64(&SECRET),
                   "max_rate_per_minute": 600}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{registered}");
    assert_eq!(registered["status"], "active", "{registered}");

    // The load: publish on one node, claim and acknowledge (signed) on the other, in turns.
    let stop = Arc::new(AtomicBool::new(false));
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let rounds = Arc::new(AtomicU64::new(0));
    let load = {
        let (stop, failures, rounds) = (stop.clone(), failures.clone(), rounds.clone());
        let bases = [first.base.clone(), second.base.clone()];
        let (client, publisher, agent, hmac, hmac_id) =
            (first.client.clone(), publisher.clone(), agent.clone(), hmac.clone(), hmac_id.clone());
        let tokens = first.tokens.clone();
        let db = db.clone();
        tokio::spawn(async move {
            let mut turn = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let (one, other) = (&bases[turn % 2], &bases[(turn + 1) % 2]);
                turn += 1;
                let fail = |what: String| failures.lock().unwrap().push(what);
                let body =
                    json!({"recipients": ["alpha"], "event_type": "task.assigned", "payload": {"n": turn}});
                match client.post(format!("{one}/v1/events")).bearer_auth(&publisher).json(&body).send().await
                {
                    Ok(r) if r.status() == StatusCode::CREATED => {}
                    Ok(r) => fail(format!("publish: {} {}", r.status(), r.text().await.unwrap_or_default())),
                    Err(e) => fail(format!("publish: {e}")),
                }
                let node = TestServer::at(other, client.clone(), tokens.clone(), db.clone());
                let (status, claimed) = send_signed(
                    &node,
                    &agent,
                    &hmac,
                    &hmac_id,
                    "/v1/inbox/claim",
                    &json!({"limit": 1, "lease_seconds": 60}),
                )
                .await;
                if status != StatusCode::OK {
                    fail(format!("claim: {status} {claimed}"));
                    continue;
                }
                for claim in claimed["claims"].as_array().into_iter().flatten() {
                    let ack = json!({"acks": [{"event_id": claim["event_id"], "lease_token": claim["lease_token"], "result": "completed"}]});
                    let (status, acked) =
                        send_signed(&node, &agent, &hmac, &hmac_id, "/v1/inbox/acknowledge", &ack).await;
                    if status != StatusCode::OK {
                        fail(format!("acknowledge: {status} {acked}"));
                    }
                }
                rounds.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let rounds_before = async |at_least: u64| {
        let deadline = Instant::now() + Duration::from_secs(30);
        let start = rounds.load(Ordering::Relaxed);
        while rounds.load(Ordering::Relaxed) < start + at_least {
            assert!(Instant::now() < deadline, "the load stalled");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    rounds_before(5).await;

    // 1. The new key joins every node's key file, after the old one.
    let new = SecretsKeys::generate();
    let new_id = new.first().id().to_owned();
    let old_id = db.secrets_keys.first().id().to_owned();
    let both = db.secrets_keys.and(&new);
    write_key_file(&db.secrets_key_file, &both);
    write_key_file(&second_file, &both);
    until_both("holds the new key", nodes, &new_id, "1").await;
    rounds_before(5).await;

    // 2. The rewrap, as `agent-inbox keys rewrap` runs it, while the nodes serve.
    db.store.secrets().use_keys(both.clone());
    let rewrapping = db.second_node_without_keys().await;
    rewrapping.secrets().use_keys(both.clone());
    let resealed = rewrapping.secrets().rewrap(&new_id).await.unwrap();
    assert!(resealed >= 3, "the token key, the agent key and the webhook secret: {resealed}");
    let rewrapped_at = Instant::now();
    rounds_before(5).await;

    // 3. The old key leaves every key file.
    write_key_file(&db.secrets_key_file, &new);
    write_key_file(&second_file, &new);
    until_both("dropped the old key", nodes, &old_id, "0").await;
    db.store.secrets().use_keys(new.clone());
    rounds_before(5).await;
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    let failures = failures.lock().unwrap().clone();
    assert!(failures.is_empty(), "{} request(s) failed during the rotation: {failures:?}", failures.len());

    // Every secret still works: the tokens issued before, the hmac key, the webhook secret.
    for node in nodes {
        let (status, _) = node.call(Method::GET, "/v1/inbox/head", Some(&agent), None).await;
        assert_eq!(status, StatusCode::OK, "a token issued before the rotation");
        let (status, body) =
            send_signed(node, &agent, &hmac, &hmac_id, "/v1/inbox/claim", &json!({"limit": 1})).await;
        assert_eq!(status, StatusCode::OK, "the hmac agent key: {body}");
    }
    let fresh = second.agent("t1", "beta").await;
    let (status, _) = first.call(Method::GET, "/v1/inbox/head", Some(&fresh), None).await;
    assert_eq!(status, StatusCode::OK, "a token issued after the rotation");
    let seen = receiver.hints("/hook").len();
    first.publish(&publisher, &["alpha"], json!({"after": "rewrap"})).await;
    let hint = wait_for("a hint after the rewrap", || receiver.hints("/hook").into_iter().nth(seen)).await;
    assert_eq!(verify_with(&hint, &[("s1", &SECRET)]), Ok("s1".to_owned()), "signed with the webhook secret");
    assert!(rewrapped_at.elapsed() > Duration::ZERO);
    let census = db.store.secrets().census().await.unwrap();
    assert_eq!(census.not_under(&new_id), 0, "{census:?}");
    let _ = std::fs::remove_file(&second_file);
    second.stop().await;
    first.stop().await;
}

/// Runs a server to its end (it refuses to start) and returns why.
async fn refusal(config: Config) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let run = inbox_server::run(config, listener, std::future::pending());
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the server stops by itself")
        .expect_err("the server refuses to start")
        .to_string()
}

/// A key file that cannot open the database's secrets, one that cannot be read, and (on
/// MySQL) none at all: each stops the start with a sentence naming the file or how to make one.
async fn a_wrong_or_unreadable_key_file_refuses_to_start(backend: Backend) {
    let db = Harness::new(backend).await;
    db_token_key(&db).await;
    let dir = std::env::temp_dir()
        .join(format!("agent-inbox-wrong-{}", hex::encode(inbox_store::random_bytes::<6>())));
    std::fs::create_dir_all(&dir).unwrap();
    let config = |key_file: Option<std::path::PathBuf>| {
        let mut config = Config::default();
        config.database.url = db.url.clone();
        config.secrets.key_file = key_file;
        config
    };
    let wrong = dir.join("wrong.key");
    write_private(&wrong, SecretsKeys::generate().to_file_text().as_bytes());
    let why = refusal(config(Some(wrong.clone()))).await;
    assert!(
        why.contains(&wrong.display().to_string()) && why.contains(db.secrets_keys.first().id()),
        "{why}"
    );
    let missing = dir.join("missing.key");
    let why = refusal(config(Some(missing.clone()))).await;
    assert!(why.contains(&missing.display().to_string()) && why.contains("cannot read"), "{why}");
    let garbage = dir.join("garbage.key");
    write_private(&garbage, b"not a key\n");
    let why = refusal(config(Some(garbage.clone()))).await;
    assert!(why.contains(&garbage.display().to_string()) && why.contains("is not a secrets key"), "{why}");
    if backend == Backend::MySql {
        let why = refusal(config(None)).await;
        assert!(why.contains("agent-inbox keys new-secrets-key > "), "{why}");
    }
    // The right file starts.
    let server = TestServer::start_on_harness(Arc::new(db)).await;
    server.stop().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// With `token_algorithm = "EdDSA"` the service signs Ed25519 tokens that anyone verifies with
/// the public keys of `/.well-known/jwks.json`; a token that names the key but another
/// algorithm (HS256 with the public key as its secret) is refused. Under HS256 the set is empty.
async fn eddsa_tokens_verify_with_the_published_keys(backend: Backend) {
    let server = TestServer::start_with(backend, |config| config.tokens.algorithm = "EdDSA".into()).await;
    let token = server.agent("t1", "alpha").await;
    let header = jsonwebtoken::decode_header(&token).unwrap();
    assert_eq!(header.alg, Algorithm::EdDSA);
    let (status, jwks) = server.call(Method::GET, "/.well-known/jwks.json", None, None).await;
    assert_eq!(status, StatusCode::OK, "{jwks}");
    let set: jsonwebtoken::jwk::JwkSet = serde_json::from_value(jwks.clone()).unwrap();
    let jwk = set.find(header.kid.as_deref().unwrap()).expect("the token's key is published");
    let mut validation = jsonwebtoken::Validation::new(Algorithm::EdDSA);
    validation.set_issuer(&["agent-inbox"]);
    let verified =
        jsonwebtoken::decode::<Value>(&token, &DecodingKey::from_jwk(jwk).unwrap(), &validation).unwrap();
    assert_eq!(verified.claims["sub"], "alpha");
    let (status, _) = server.call(Method::GET, "/v1/inbox/head", Some(&token), None).await;
    assert_eq!(status, StatusCode::OK);

    let public = URL_SAFE_NO_PAD.decode(jwks["keys"][0]["x"].as_str().unwrap()).unwrap();
    let forged_header =
        jsonwebtoken::Header { kid: header.kid.clone(), ..jsonwebtoken::Header::new(Algorithm::HS256) };
    let now = inbox_api::time::now_ms() / 1000;
    let claims = json!({"iss": "agent-inbox", "sub": "alpha", "tid": "t1", "kind": "admin", "scope": "admin",
                        "iat": now, "exp": now + 600});
    let forged =
        jsonwebtoken::encode(&forged_header, &claims, &jsonwebtoken::EncodingKey::from_secret(&public))
            .unwrap();
    let (status, body) = server.call(Method::GET, "/v1/inbox/head", Some(&forged), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    server.stop().await;

    let hs256 = TestServer::start(backend).await;
    let (status, jwks) = hs256.call(Method::GET, "/.well-known/jwks.json", None, None).await;
    assert_eq!((status, jwks), (StatusCode::OK, json!({"keys": []})));
    let token = hs256.agent("t1", "alpha").await;
    assert_eq!(jsonwebtoken::decode_header(&token).unwrap().alg, Algorithm::HS256, "HS256 stays the default");
    assert_eq!(hs256.db.store.tokens().access_signing_keys(TokenAlgorithm::Hs256).await.unwrap().len(), 1);
    hs256.stop().await;
}

/// The node's count of decrypted secrets (`agent_inbox_secrets_decryptions`).
async fn decryptions(server: &TestServer) -> u64 {
    let (_, text) = server.call(Method::GET, "/metrics", None, None).await;
    let text = text.as_str().unwrap().to_owned();
    let line = text.lines().find(|l| l.starts_with("agent_inbox_secrets_decryptions ")).expect("the gauge");
    line.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64
}

/// Once a node has opened the secrets it uses, serving requests decrypts nothing more: token
/// checks, hmac-signed claims and acknowledgements and signed webhook deliveries, across the
/// reloads of token keys (every second), agent keys and due registrations.
async fn requests_never_decrypt_a_secret(backend: Backend) {
    let server = TestServer::start_with(backend, development).await;
    let publisher = server.publisher("t1").await;
    let agent = callback_agent(&server, "t1", "alpha").await;
    let (status, issued) = server.post("/v1/agent-keys", &agent, json!({"algorithm": "hmac-sha256"})).await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    let hmac = SigningKey::hmac_sha256(&URL_SAFE_NO_PAD.decode(issued["secret"].as_str().unwrap()).unwrap())
        .unwrap();
    let hmac_id = issued["key_id"].as_str().unwrap().to_owned();
    let receiver = Receiver::start(&SECRET).await;
    let (status, registered) = server
        .post(
            "/v1/callback-registrations",
            &agent,
            json!({"callback_url": receiver.url("/hook"), "secret_id": "s1", "secret": secret_b64(&SECRET),
                   "max_rate_per_minute": 600}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{registered}");
    let round = async |n: u64| {
        let seen = receiver.hints("/hook").len();
        server.publish(&publisher, &["alpha"], json!({"n": n})).await;
        let (status, claimed) =
            send_signed(&server, &agent, &hmac, &hmac_id, "/v1/inbox/claim", &json!({"limit": 10})).await;
        assert_eq!(status, StatusCode::OK, "{claimed}");
        for claim in claimed["claims"].as_array().unwrap() {
            let ack = json!({"acks": [{"event_id": claim["event_id"], "lease_token": claim["lease_token"], "result": "completed"}]});
            let (status, acked) =
                send_signed(&server, &agent, &hmac, &hmac_id, "/v1/inbox/acknowledge", &ack).await;
            assert_eq!(status, StatusCode::OK, "{acked}");
        }
        wait_for("a hint", || receiver.hints("/hook").into_iter().nth(seen)).await;
    };
    round(0).await;
    let before = decryptions(&server).await;
    assert!(before >= 1, "the node opened its secrets once: {before}");
    let started = Instant::now();
    let mut n = 1;
    while n < 20 || started.elapsed() < Duration::from_millis(2_500) {
        round(n).await;
        n += 1;
    }
    assert_eq!(decryptions(&server).await, before, "{n} rounds of requests decrypted secrets");
    server.stop().await;
}
