//! The real binary, killed with SIGKILL under publish and claim load, then restarted on the
//! same database: every publish that was answered 201 is still there, every ack that was
//! answered 200 is still acked, and after the dead server's leases run out every event is
//! processed. Runs on SQLite and on MariaDB.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inbox_conformance::{Backend, Harness};
use inbox_core::{RecipientId, TenantId};
use inbox_server::{CallerKind, Config, TokenService};
use serde_json::{Value, json};

use common::{poll_all, post, start_on, wait_ready};

async fn crash_and_recover(backend: Backend) {
    let db = Harness::new(backend).await;
    let mut config = Config::default();
    config.database.url = db.url.clone();
    let tokens = TokenService::new(db.store.clone(), &config).await.expect("token service");
    let tenant = TenantId::new("t1").unwrap();
    let issue = |subject: &str, kind, scope: &str| {
        let (tokens, tenant, subject, scope) =
            (&tokens, tenant.clone(), RecipientId::new(subject).unwrap(), scope.to_owned());
        async move { tokens.issue(&tenant, &subject, kind, &scope, None, false).await.unwrap().access_token }
    };
    let publisher = issue("app", CallerKind::Publisher, "events.publish").await;
    let agent = issue("agent_alpha", CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES).await;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();

    let mut server = start_on(&db, &[]);
    wait_ready(&client, &server.base).await;
    let committed: Arc<Mutex<HashSet<String>>> = Arc::default();
    let acked: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut load = Vec::new();
    // Eight publishers, so the node commits their publishes in batches (group commit).
    for p in 0..8 {
        let (client, base, token, committed) =
            (client.clone(), server.base.clone(), publisher.clone(), committed.clone());
        load.push(tokio::spawn(async move {
            for n in 0.. {
                let body = json!({"recipients": ["agent_alpha"], "event_type": "task.assigned", "payload": {"p": p, "n": n}});
                let Ok(response) = client.post(format!("{base}/v1/events")).bearer_auth(&token).json(&body).send().await else { return };
                if response.status() != 201 {
                    return;
                }
                let Ok(body) = response.json::<Value>().await else { return };
                committed.lock().unwrap().insert(body["deliveries"][0]["event_id"].as_str().unwrap().to_owned());
            }
        }));
    }
    for _ in 0..2 {
        let (client, base, token, acked) =
            (client.clone(), server.base.clone(), agent.clone(), acked.clone());
        load.push(tokio::spawn(async move {
            loop {
                let Ok(response) = client
                    .post(format!("{base}/v1/inbox/claim"))
                    .bearer_auth(&token)
                    .json(&json!({"limit": 5}))
                    .send()
                    .await
                else {
                    return;
                };
                let Ok(claimed) = response.json::<Value>().await else { return };
                let Some(claims) = claimed["claims"].as_array() else { return };
                let acks: Vec<Value> = claims
                    .iter()
                    .map(|c| json!({"event_id": c["event_id"], "lease_token": c["lease_token"]}))
                    .collect();
                if acks.is_empty() {
                    continue;
                }
                let Ok(response) = client
                    .post(format!("{base}/v1/inbox/acknowledge"))
                    .bearer_auth(&token)
                    .json(&json!({"acks": acks}))
                    .send()
                    .await
                else {
                    return;
                };
                let Ok(results) = response.json::<Value>().await else { return };
                let mut acked = acked.lock().unwrap();
                for r in
                    results["results"].as_array().into_iter().flatten().filter(|r| r["ack_state"] == "acked")
                {
                    acked.insert(r["event_id"].as_str().unwrap().to_owned());
                }
            }
        }));
    }
    // Let the load build up, then kill the server without warning.
    let deadline = Instant::now() + Duration::from_secs(20);
    while committed.lock().unwrap().len() < 200 || acked.lock().unwrap().len() < 50 {
        assert!(Instant::now() < deadline, "the load made no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.child.kill().expect("SIGKILL the server");
    server.child.wait().unwrap();
    for task in load {
        task.await.unwrap();
    }
    let committed = committed.lock().unwrap().clone();
    let acked = acked.lock().unwrap().clone();

    let mut server = start_on(&db, &[]);
    wait_ready(&client, &server.base).await;
    let all = poll_all(&client, &server.base, &agent).await;
    let present: HashSet<String> = all.iter().map(|e| e["event_id"].as_str().unwrap().to_owned()).collect();
    let missing: Vec<&String> = committed.difference(&present).collect();
    assert!(missing.is_empty(), "{} answered publishes are gone after SIGKILL: {missing:?}", missing.len());
    for event in &all {
        if acked.contains(event["event_id"].as_str().unwrap()) {
            assert_eq!(event["ack_state"], "acked", "an answered ack was lost: {event}");
        }
    }
    // Leases held by the dead server run out (2 s) and the scavenger returns them: drain all.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, claimed) =
            post(&client, &server.base, &agent, "/v1/inbox/claim", json!({"limit": 100})).await;
        let acks: Vec<Value> = claimed["claims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| json!({"event_id": c["event_id"], "lease_token": c["lease_token"]}))
            .collect();
        if !acks.is_empty() {
            post(&client, &server.base, &agent, "/v1/inbox/acknowledge", json!({"acks": acks})).await;
        }
        let open = poll_all(&client, &server.base, &agent)
            .await
            .iter()
            .filter(|e| e["ack_state"] != "acked")
            .count();
        if open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} events were never processed after the restart");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_sigkill_under_load_loses_nothing() {
    crash_and_recover(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_sigkill_under_load_loses_nothing() {
    crash_and_recover(Backend::MySql).await;
}
