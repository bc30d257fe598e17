//! The database goes away and comes back, on a private `mariadbd` this test starts, pauses
//! and kills (never the machine's own). The node starts before its database and becomes
//! ready by itself; while the database is paused or dead requests get `503
//! database_unavailable` with `Retry-After` within the bounded wait, open SSE streams keep their
//! heartbeats, and `listen` keeps running; afterwards every publish answered 201 is in the
//! inbox, `listen` handled each of its events once, and the scavenger and notifier work again.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::mariadb::PrivateMariaDb;
use common::{issue_token, poll_all, secrets_key_file};
use inbox_testkit::{Serve, ServeChild};

/// The server's bounded waits in these tests: a request must be answered within the acquire
/// timeout plus one second.
const ACQUIRE_TIMEOUT: &str = "1s";
const STATEMENT_TIMEOUT: &str = "2s";
const ANSWER_WITHIN: Duration = Duration::from_millis(2_000 + 800);

/// `serve` on a port chosen beforehand, so its address is known before it is ready.
fn serve(database_url: &str, log: &Path) -> ServeChild {
    Serve::new(common::BIN, database_url)
        .arg_path("--secrets-key-file", &secrets_key_file(log.parent().expect("a log in a directory")))
        .args(["--lease-default", "3s"])
        .env("AGENT_INBOX_DATABASE_ACQUIRE_TIMEOUT", ACQUIRE_TIMEOUT)
        .env("AGENT_INBOX_DATABASE_STATEMENT_TIMEOUT", STATEMENT_TIMEOUT)
        .env("AGENT_INBOX_HEARTBEAT_INTERVAL", "1s")
        .env("AGENT_INBOX_SCAVENGE_INTERVAL", "200ms")
        .env("AGENT_INBOX_LOG", "info")
        .log_to(log)
        .spawn()
        .expect("start agent-inbox serve")
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap()
}

async fn status_of(client: &reqwest::Client, url: &str) -> Option<u16> {
    client.get(url).send().await.ok().map(|r| r.status().as_u16())
}

async fn publish(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    to: &str,
    n: u64,
) -> reqwest::Result<reqwest::Response> {
    client
        .post(format!("{base}/v1/events"))
        .bearer_auth(token)
        .json(&json!({ "recipients": [to], "event_type": "task.assigned", "payload": { "n": n } }))
        .send()
        .await
}

/// A 503 during an outage: the right code, a `Retry-After`, and quickly.
async fn assert_outage_answer(response: reqwest::Response, took: Duration, what: &str) {
    let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    let body: Value = response.json().await.unwrap_or_default();
    assert_eq!(body["code"], "database_unavailable", "{what}: {body}");
    assert!(retry_after.is_some_and(|s| s.parse::<u64>().is_ok()), "{what}: a Retry-After");
    assert!(took <= ANSWER_WITHIN, "{what}: answered after {took:?}, beyond the bounded wait");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_started_before_its_database_serves_once_the_database_is_up() {
    let mut db = PrivateMariaDb::install("late");
    let node = serve(&db.url(), &db.dir().join("serve.log"));
    let client = client();

    let deadline = Instant::now() + Duration::from_secs(10);
    while status_of(&client, &format!("{}/healthz", node.base)).await != Some(200) {
        assert!(Instant::now() < deadline, "the node did not listen without its database");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let readyz = client.get(format!("{}/readyz", node.base)).send().await.unwrap();
    assert_eq!(readyz.status(), 503);
    let problem: Value = readyz.json().await.unwrap();
    assert_eq!(problem["code"], "not_ready", "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("waiting for the database at mysql://root@127.0.0.1"), "{detail}");
    let started = Instant::now();
    let refused = client
        .post(format!("{}/v1/events", node.base))
        .bearer_auth("x")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    assert_outage_answer(refused, started.elapsed(), "an API call before the database").await;

    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(status_of(&client, &format!("{}/readyz", node.base)).await, Some(503), "still waiting");
    db.start();
    let up = Instant::now();
    while status_of(&client, &format!("{}/readyz", node.base)).await != Some(200) {
        assert!(up.elapsed() < Duration::from_secs(10), "the node never became ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = up.elapsed();
    eprintln!("ready {took:?} after the database answered");
    // The issue asks for 2 s; a loaded CI machine gets one more.
    assert!(took < Duration::from_secs(3), "ready only {took:?} after the database was up");

    let url = db.url();
    let (publisher, agent) = (
        issue_token(&url, &secrets_key_file(db.dir()), "app", "publisher"),
        issue_token(&url, &secrets_key_file(db.dir()), "agent_late", "agent"),
    );
    let published = publish(&client, &node.base, &publisher, "agent_late", 1).await.unwrap();
    assert_eq!(published.status(), 201);
    let (status, claimed) =
        common::post(&client, &node.base, &agent, "/v1/inbox/claim", json!({ "limit": 1 })).await;
    assert_eq!(status, 200, "{claimed}");
    let claim = &claimed["claims"][0];
    let ack = json!({ "acks": [{ "event_id": claim["event_id"], "lease_token": claim["lease_token"], "result": "completed" }] });
    let (status, acked) = common::post(&client, &node.base, &agent, "/v1/inbox/acknowledge", ack).await;
    assert_eq!(status, 200, "{acked}");
}

/// What the load saw.
#[derive(Default)]
struct Seen {
    /// Event ids answered 201, per recipient.
    committed: BTreeMap<&'static str, HashSet<String>>,
    /// Event ids the claimer acknowledged (answered 200).
    acked: HashSet<String>,
    outage_answers: u64,
    /// Anything else: a 5xx other than the outage's 503, a hang, a broken connection.
    wrong: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_then_killed_database_loses_nothing_and_everything_resumes() {
    let mut db = PrivateMariaDb::install("outage");
    db.start();
    let url = db.url();
    let node = serve(&url, &db.dir().join("serve.log"));
    let client = client();
    common::wait_ready(&client, &node.base).await;
    let publisher = issue_token(&url, &secrets_key_file(db.dir()), "app", "publisher");
    let claimer = issue_token(&url, &secrets_key_file(db.dir()), "agent_claim", "agent");
    let listener_token = issue_token(&url, &secrets_key_file(db.dir()), "agent_listen", "agent");

    let handled_file = db.dir().join("handled.txt");
    let mut listen = Command::new(env!("CARGO_BIN_EXE_agent-inbox"))
        .args(["listen", "--server", &node.base, "--token", &listener_token])
        .arg("--state")
        .arg(db.dir().join("listen.state.db"))
        .args(["--exec", &format!("echo \"$AGENT_INBOX_EVENT_ID\" >> {}", handled_file.display())])
        .args(["--poll-max", "2s", "--reconnect-max", "1s"])
        .env("AGENT_INBOX_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(db.dir().join("listen.log")).unwrap())
        .spawn()
        .expect("start listen");

    let seen: Arc<Mutex<Seen>> = Arc::default();
    let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for (p, to) in [(0u64, "agent_listen"), (1, "agent_claim")] {
        let (client, base, token, seen, stopped) =
            (client.clone(), node.base.clone(), publisher.clone(), seen.clone(), stopped.clone());
        load.push(tokio::spawn(async move {
            let mut n = p * 1_000_000;
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let sent = Instant::now();
                match publish(&client, &base, &token, to, n).await {
                    Ok(response) if response.status() == 201 => {
                        let body: Value = response.json().await.unwrap();
                        let id = body["deliveries"][0]["event_id"].as_str().unwrap().to_owned();
                        seen.lock().unwrap().committed.entry(to).or_default().insert(id);
                    }
                    Ok(response) if response.status() == 503 => {
                        let took = sent.elapsed();
                        assert_outage_answer(response, took, "a publish").await;
                        seen.lock().unwrap().outage_answers += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Ok(response) => {
                        let status = response.status();
                        let text = response.text().await.unwrap_or_default();
                        seen.lock().unwrap().wrong.push(format!("publish {status}: {text}"));
                    }
                    Err(err) => seen.lock().unwrap().wrong.push(format!("publish failed: {err}")),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
    }
    {
        let (client, base, token, seen, stopped) =
            (client.clone(), node.base.clone(), claimer.clone(), seen.clone(), stopped.clone());
        load.push(tokio::spawn(async move {
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                let sent = Instant::now();
                let claimed = client
                    .post(format!("{base}/v1/inbox/claim"))
                    .bearer_auth(&token)
                    .json(&json!({ "limit": 10 }))
                    .send()
                    .await;
                let claims = match claimed {
                    Ok(r) if r.status() == 200 => r.json::<Value>().await.unwrap()["claims"].clone(),
                    Ok(r) if r.status() == 503 => {
                        assert_outage_answer(r, sent.elapsed(), "a claim").await;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    Ok(r) => {
                        seen.lock().unwrap().wrong.push(format!("claim {}", r.status()));
                        continue;
                    }
                    Err(err) => {
                        seen.lock().unwrap().wrong.push(format!("claim failed: {err}"));
                        continue;
                    }
                };
                for claim in claims.as_array().unwrap() {
                    let ack = json!({ "acks": [{ "event_id": claim["event_id"], "lease_token": claim["lease_token"], "result": "completed" }] });
                    let sent = Instant::now();
                    match client.post(format!("{base}/v1/inbox/acknowledge")).bearer_auth(&token).json(&ack).send().await {
                        Ok(r) if r.status() == 200 => {
                            seen.lock().unwrap().acked.insert(claim["event_id"].as_str().unwrap().to_owned());
                        }
                        // The lease runs out and the event comes back: nothing is lost.
                        Ok(r) if r.status() == 503 => assert_outage_answer(r, sent.elapsed(), "an ack").await,
                        Ok(r) if r.status() == 409 => {}
                        Ok(r) => seen.lock().unwrap().wrong.push(format!("ack {}", r.status())),
                        Err(err) => seen.lock().unwrap().wrong.push(format!("ack failed: {err}")),
                    }
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        }));
    }

    // An SSE stream open before the outage keeps its heartbeats through the pause.
    let mut stream = client
        .get(format!("{}/v1/streams/sse", node.base))
        .bearer_auth(&claimer)
        .header("accept", "text/event-stream")
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    tokio::time::sleep(Duration::from_secs(2)).await;

    db.pause();
    let paused = Instant::now();
    let mut heartbeats = 0;
    let mut buffer = String::new();
    while paused.elapsed() < Duration::from_secs(10) {
        let left = Duration::from_secs(10).saturating_sub(paused.elapsed());
        if let Ok(chunk) = tokio::time::timeout(left, stream.chunk()).await {
            let chunk = chunk.expect("the stream stays open").expect("the stream stays open");
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            heartbeats = buffer.matches("event: heartbeat").count();
        }
    }
    let readyz = status_of(&client, &format!("{}/readyz", node.base)).await;
    db.resume();
    assert_eq!(readyz, Some(503), "/readyz reflects the outage");
    assert!(heartbeats >= 2, "SSE heartbeats continued during the pause: {heartbeats}\n{buffer}");
    assert!(seen.lock().unwrap().outage_answers > 0, "the load met the outage");
    common::wait_ready(&client, &node.base).await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    db.kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    db.start();
    common::wait_ready(&client, &node.base).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stopped.store(true, std::sync::atomic::Ordering::Relaxed);
    for task in load {
        task.await.expect("no load task panicked");
    }

    // The notifier resumed: a new stream hears of a new publish.
    let mut stream = client
        .get(format!("{}/v1/streams/sse", node.base))
        .bearer_auth(&claimer)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let published = publish(&client, &node.base, &publisher, "agent_claim", 99).await.unwrap();
    assert_eq!(published.status(), 201);
    let head = published.json::<Value>().await.unwrap()["deliveries"][0]["inbox_seq"].as_u64().unwrap();
    let mut buffer = String::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !buffer.contains(&format!("\"head_seq\":{head}")) {
        let chunk = tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), stream.chunk())
            .await
            .expect("a hint after the restart")
            .unwrap()
            .unwrap();
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }

    // Every publish answered 201 is in its inbox; every ack answered 200 holds.
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    assert!(
        seen.wrong.is_empty(),
        "answers that were neither success nor the outage's 503: {:?}",
        seen.wrong
    );
    let claim_inbox: BTreeMap<String, Value> = poll_all(&client, &node.base, &claimer)
        .await
        .into_iter()
        .map(|e| (e["event_id"].as_str().unwrap().to_owned(), e))
        .collect();
    for id in &seen.committed["agent_claim"] {
        assert!(claim_inbox.contains_key(id), "publish {id} was answered 201 and is gone");
    }
    for id in &seen.acked {
        assert_eq!(claim_inbox[id]["ack_state"], "acked", "ack of {id} was answered 200");
    }

    // The scavenger resumed: what the claimer held when the load stopped comes back after its
    // lease, and the drain finishes.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, claimed) =
            common::post(&client, &node.base, &claimer, "/v1/inbox/claim", json!({ "limit": 100 })).await;
        assert_eq!(status, 200, "{claimed}");
        let acks: Vec<Value> = claimed["claims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| json!({ "event_id": c["event_id"], "lease_token": c["lease_token"], "result": "completed" }))
            .collect();
        if !acks.is_empty() {
            let (status, body) =
                common::post(&client, &node.base, &claimer, "/v1/inbox/acknowledge", json!({ "acks": acks }))
                    .await;
            assert_eq!(status, 200, "{body}");
        }
        let open = poll_all(&client, &node.base, &claimer)
            .await
            .into_iter()
            .filter(|e| e["ack_state"] != "acked")
            .count();
        if open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} events never came back to be claimed");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // listen kept running and handled each of its events once.
    let expected = &seen.committed["agent_listen"];
    let deadline = Instant::now() + Duration::from_secs(60);
    let handled = loop {
        let text = std::fs::read_to_string(&handled_file).unwrap_or_default();
        let handled: Vec<String> = text.lines().map(str::to_owned).collect();
        let distinct: HashSet<&String> = handled.iter().collect();
        if expected.iter().all(|id| distinct.contains(id)) {
            break handled;
        }
        assert!(listen.try_wait().unwrap().is_none(), "listen exited during the outage");
        assert!(
            Instant::now() < deadline,
            "listen handled {} of {} events",
            expected.iter().filter(|id| distinct.contains(id)).count(),
            expected.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut counts: BTreeMap<&String, usize> = BTreeMap::new();
    for id in &handled {
        *counts.entry(id).or_default() += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "handled more than once: {twice:?}");
    assert!(listen.try_wait().unwrap().is_none(), "listen is still running");
    let _ = listen.kill();
    let _ = listen.wait();
}
