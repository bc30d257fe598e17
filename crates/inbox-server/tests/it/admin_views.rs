//! The operators' views of a tenant over real HTTP: each inbox's backlog with its
//! retry-scheduled count, online sessions and last sign of life; the sessions themselves;
//! callback registrations with their delivery log; agents' keys without their material; and
//! activity per minute. Another tenant's operator sees none of it.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use inbox_conformance::Backend;
use inbox_server::CallerKind;
use inbox_trust::message_signatures::SigningKey;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::admin_quarantine::{AGENT, admin, claim, get, publish_one};
use crate::harness::{TestServer, both_backends};

both_backends!(
    inboxes_and_sessions_show_who_is_online,
    callbacks_and_agent_keys_are_listed_for_the_tenant,
    activity_counts_each_minute,
);

async fn subscribe(server: &TestServer, token: &str, device: &str) -> String {
    let body = json!({"device_id": device, "supported_transports": ["long-poll"]});
    let (status, body) = server.post("/v1/agent-sessions/subscribe", token, body).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["session_id"].as_str().unwrap().to_owned()
}

async fn inboxes_and_sessions_show_who_is_online(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", AGENT).await;
    let beta = server.agent("t1", "agent_beta").await;
    let ops = admin(&server, "t1").await;
    let (status, _) =
        server.post("/v1/admin/tenant-policy", &ops, json!({"single_active_session": true})).await;
    assert_eq!(status, StatusCode::OK);
    let ids = [
        publish_one(&server, &publisher, 1).await,
        publish_one(&server, &publisher, 2).await,
        publish_one(&server, &publisher, 3).await,
    ];
    server.publish(&publisher, &["agent_beta"], json!({})).await;
    let laptop = subscribe(&server, &agent, "laptop").await;
    let desktop = subscribe(&server, &agent, "desktop").await;
    let lease = claim(&server, &agent, &ids[0], Some(&desktop)).await;
    let release = json!({"event_id": ids[0], "lease_token": lease, "retry_after_seconds": 600});
    let (status, released) = server.post("/v1/inbox/release", &agent, release).await;
    assert_eq!((status, &released["ack_state"]), (StatusCode::OK, &json!("available")), "{released}");
    claim(&server, &agent, &ids[1], Some(&desktop)).await;

    let inboxes = get(&server, "/v1/admin/inboxes", &ops).await;
    let row = |who: &str| {
        inboxes["inboxes"].as_array().unwrap().iter().find(|r| r["recipient_id"] == who).cloned().unwrap()
    };
    let alpha = row(AGENT);
    assert_eq!(
        [&alpha["depth"], &alpha["claimed"], &alpha["retry_scheduled"], &alpha["parked"], &alpha["head_seq"]],
        [&json!(3), &json!(1), &json!(1), &json!(0), &json!(3)],
        "{alpha}"
    );
    assert_eq!(alpha["online_sessions"], 1, "the superseded laptop session is not online: {alpha}");
    assert!(alpha["last_seen_at_utc"].as_str().is_some_and(|t| t.ends_with('Z')), "{alpha}");
    let quiet = row("agent_beta");
    assert_eq!((&quiet["online_sessions"], quiet.get("last_seen_at_utc")), (&json!(0), None), "{quiet}");

    let sessions = get(&server, "/v1/admin/sessions", &ops).await;
    let listed = sessions["sessions"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{sessions}");
    let by_id = |id: &str| listed.iter().find(|s| s["session_id"] == id).cloned().unwrap();
    let (old, new) = (by_id(&laptop), by_id(&desktop));
    assert_eq!(
        (&old["status"], &old["device_id"], &old["agent_id"]),
        (&json!("superseded"), &json!("laptop"), &json!(AGENT))
    );
    assert_eq!(old["superseded_by_session_id"], desktop.as_str(), "{old}");
    assert!(old["superseded_at_utc"].is_string(), "{old}");
    assert_eq!((&new["status"], &new["device_id"]), (&json!("active"), &json!("desktop")), "{new}");
    assert!(new["connected_at_utc"].is_string() && new["last_heartbeat_at_utc"].is_string(), "{new}");
    assert_eq!(new["auth_subject"], AGENT);
    assert!(new.get("superseded_by_session_id").is_none(), "{new}");

    subscribe(&server, &beta, "ci").await;
    let betas = get(&server, "/v1/admin/sessions?recipient_id=agent_beta", &ops).await;
    assert_eq!(betas["sessions"].as_array().unwrap().len(), 1, "{betas}");
    assert_eq!(betas["sessions"][0]["agent_id"], "agent_beta");
    let one = get(&server, "/v1/admin/sessions?limit=1", &ops).await;
    assert_eq!(one["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(one["sessions"][0]["agent_id"], "agent_beta", "most recently heard from first");

    let other = admin(&server, "t2").await;
    assert_eq!(get(&server, "/v1/admin/sessions", &other).await["sessions"], json!([]));
    server.stop().await;
}

async fn callbacks_and_agent_keys_are_listed_for_the_tenant(backend: Backend) {
    let server = TestServer::start_with(backend, |config| config.callbacks.allow_http_loopback = true).await;
    let agent = server.token("t1", AGENT, CallerKind::Agent, "callback.register").await;
    let beta = server.agent("t1", "agent_beta").await;
    let ops = admin(&server, "t1").await;
    // Nothing listens on this port: the challenge fails and is logged.
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let url = format!("http://{unused}/hook");
    let (status, registered) =
        server.post("/v1/callback-registrations", &agent, json!({"callback_url": url})).await;
    assert_eq!(status, StatusCode::CREATED, "{registered}");
    let id = registered["registration_id"].as_str().unwrap().to_owned();
    let (status, verified) =
        server.post(&format!("/v1/callback-registrations/{id}/verify"), &agent, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{verified}");

    let callbacks = get(&server, "/v1/admin/callbacks", &ops).await;
    let registrations = callbacks["registrations"].as_array().unwrap();
    assert_eq!(registrations.len(), 1, "{callbacks}");
    let listed = &registrations[0];
    assert_eq!((&listed["registration_id"], &listed["recipient_id"]), (&json!(id), &json!(AGENT)));
    assert_eq!((&listed["status"], &listed["callback_url"]), (&json!("pending_verification"), &json!(url)));
    assert!(listed.get("secret").is_none(), "never a secret: {listed}");
    assert!(listed["last_error"].is_string(), "{listed}");
    assert!(listed["next_attempt_at_utc"].is_string() && listed["failed_attempts"].is_u64(), "{listed}");
    let deliveries = listed["recent_deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 1, "{listed}");
    assert_eq!(deliveries[0]["kind"], "challenge");
    assert!(deliveries[0]["error"].is_string(), "{listed}");

    let mut keys = Vec::new();
    for (token, seed) in [(&agent, 1u8), (&beta, 2u8)] {
        let public =
            SigningKey::ed25519_from_seed(&[seed; 32]).verifying_key().ed25519_public_bytes().unwrap();
        let body = json!({"algorithm": "ed25519", "public_key": URL_SAFE_NO_PAD.encode(public)});
        let (status, key) = server.post("/v1/agent-keys", token, body).await;
        assert_eq!(status, StatusCode::CREATED, "{key}");
        keys.push(key["key_id"].as_str().unwrap().to_owned());
    }
    let (status, _) =
        server.call(Method::DELETE, &format!("/v1/agent-keys/{}", keys[1]), Some(&ops), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let listed = get(&server, "/v1/admin/agent-keys", &ops).await;
    let all = listed["keys"].as_array().unwrap();
    assert_eq!(all.len(), 2, "retired keys are listed too: {listed}");
    let key = |id: &str| all.iter().find(|k| k["key_id"] == id).cloned().unwrap();
    let (live, retired) = (key(&keys[0]), key(&keys[1]));
    assert_eq!((&live["agent_id"], &live["algorithm"]), (&json!(AGENT), &json!("ed25519")));
    assert!(live["created_at_utc"].is_string() && live.get("retired_at_utc").is_none(), "{live}");
    assert_eq!(retired["agent_id"], "agent_beta");
    assert!(retired["retired_at_utc"].is_string(), "{retired}");
    for k in all {
        let fields: Vec<&String> = k.as_object().unwrap().keys().collect();
        assert!(
            fields.iter().all(|f| !f.contains("public") && !f.contains("secret") && !f.contains("material")),
            "{k}"
        );
    }

    let other = admin(&server, "t2").await;
    assert_eq!(get(&server, "/v1/admin/callbacks", &other).await["registrations"], json!([]));
    assert_eq!(get(&server, "/v1/admin/agent-keys", &other).await["keys"], json!([]));
    server.stop().await;
}

fn sum(minutes: &[Value], field: &str) -> u64 {
    minutes.iter().map(|m| m[field].as_u64().unwrap()).sum()
}

async fn activity_counts_each_minute(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", AGENT).await;
    let ops = admin(&server, "t1").await;
    let ids = [
        publish_one(&server, &publisher, 1).await,
        publish_one(&server, &publisher, 2).await,
        publish_one(&server, &publisher, 3).await,
    ];
    let lease = claim(&server, &agent, &ids[0], None).await;
    let (_, acked) = server
        .post("/v1/inbox/acknowledge", &agent, json!({"acks": [{"event_id": ids[0], "lease_token": lease}]}))
        .await;
    assert_eq!(acked["results"][0]["ack_state"], "acked");

    let hour = get(&server, "/v1/admin/activity", &ops).await;
    let minutes = hour["minutes"].as_array().unwrap();
    assert_eq!(minutes.len(), 60, "the last hour by default, one entry per minute");
    let starts: Vec<&str> = minutes.iter().map(|m| m["minute_start_utc"].as_str().unwrap()).collect();
    assert!(starts.windows(2).all(|w| w[0] < w[1]), "oldest first: {starts:?}");
    assert!(starts.iter().all(|s| s.ends_with(":00Z") || s.ends_with(":00.000Z")), "{starts:?}");
    assert_eq!((sum(minutes, "published"), sum(minutes, "acked")), (3, 1), "{hour}");
    assert_eq!(minutes.last().unwrap()["depth"], 2, "the depth now ends the series");
    assert_eq!(minutes[0]["depth"], 0, "an hour ago the inbox was empty");

    let five = get(&server, "/v1/admin/activity?minutes=5", &ops).await;
    assert_eq!(five["minutes"].as_array().unwrap().len(), 5);
    let other = get(&server, "/v1/admin/activity?minutes=5", &admin(&server, "t2").await).await;
    let theirs = other["minutes"].as_array().unwrap();
    assert_eq!((sum(theirs, "published"), sum(theirs, "acked"), sum(theirs, "depth")), (0, 0, 0), "{other}");
    server.stop().await;
}
