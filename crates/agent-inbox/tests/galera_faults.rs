//! Three service nodes, each on its own member of a private 3-member MariaDB Galera cluster
//! (started by `scripts/galera.sh` for this test only, never the shared one), under publishers
//! and competing consumers while one member is SIGKILLed and started again and another is
//! paused (SIGSTOP) and resumed. Then a drain, and the invariants: every publish answered 201
//! is acknowledged, each lease at most once; no event is held by two live leases; a stale token
//! is refused; each recipient's sequence is dense and keeps each publisher's order; and no
//! client saw an error other than a 503 (or a cut connection) from a node whose member was down.
//!
//! Runs when `AGENT_INBOX_TEST_GALERA_URLS` is set (the machine has Galera; `scripts/test.sh`
//! sets it). About 30 s of load and 30 s of cluster start and member restart.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::{issue_token, secrets_key_file};
use inbox_testkit::{Serve, ServeChild};

const RECIPIENTS: [&str; 2] = ["agent_a", "agent_b"];
const LEASE_SECONDS: u64 = 4;

/// A private cluster, stopped (only its own members) when dropped.
struct Cluster {
    dir: PathBuf,
    urls: Vec<String>,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/galera.sh")
}

impl Cluster {
    fn start() -> Cluster {
        let dir = std::env::temp_dir().join(format!("agent-inbox-galera-faults-{}", std::process::id()));
        let out = Command::new(script()).arg("start").arg(&dir).output().expect("run scripts/galera.sh");
        assert!(out.status.success(), "galera.sh start: {}", String::from_utf8_lossy(&out.stderr));
        let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let urls = line
            .strip_prefix("AGENT_INBOX_TEST_GALERA_URLS=")
            .expect("galera.sh prints the URLs")
            .split(',')
            .map(|u| u.trim_end_matches('/').to_owned())
            .collect();
        Cluster { dir, urls }
    }

    fn member(&self, command: &str, member: usize) {
        let out =
            Command::new(script()).args([command, &member.to_string()]).arg(&self.dir).output().unwrap();
        assert!(
            out.status.success(),
            "galera.sh {command} {member}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn sql(&self, member: usize, statement: &str) {
        let port = self.urls[member - 1].rsplit(':').next().unwrap().to_owned();
        let out = Command::new("mariadb")
            .args(["--no-defaults", "--protocol=tcp", "-h127.0.0.1", &format!("-P{port}"), "-uroot"])
            .args(["-e", statement])
            .output()
            .unwrap();
        assert!(out.status.success(), "{statement}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Cluster {
    /// Waits (at most 60 s) until `member` is back in the cluster and has caught up.
    async fn wait_synced(&self, member: usize) {
        let port = self.urls[member - 1].rsplit(':').next().unwrap().to_owned();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = Command::new("mariadb")
                .args(["--no-defaults", "--protocol=tcp", "-h127.0.0.1", &format!("-P{port}"), "-uroot"])
                .args(["--connect-timeout=2", "-N", "-e", "SHOW STATUS LIKE 'wsrep_local_state_comment'"])
                .output()
                .unwrap();
            if String::from_utf8_lossy(&out.stdout).contains("Synced") {
                return;
            }
            assert!(Instant::now() < deadline, "member {member} did not sync again within 60 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for member in 1..=3 {
            let _ = Command::new(script()).args(["resume", &member.to_string()]).arg(&self.dir).output();
        }
        let _ = Command::new(script()).arg("stop").arg(&self.dir).output();
        if std::thread::panicking() {
            eprintln!("the cluster's and nodes' logs are kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// How long a node whose member was killed or paused may take to answer `/readyz` again: its
/// pool's connections to the member time out (8 s each, below) and reconnect. Losing nothing is
/// what this test checks, not how fast; on a loaded CI machine this once took over 30 s.
const RECOVERY: Duration = Duration::from_secs(90);

fn serve(url: &str, log: &Path) -> ServeChild {
    Serve::new(common::BIN, url)
        .arg_path("--secrets-key-file", &secrets_key_file(log.parent().expect("a log in a directory")))
        // Longer than a cluster reconfiguration (the survivors wait evs.suspect_timeout, 3 s,
        // before they evict a silent member), so nodes on healthy members wait it out.
        .env("AGENT_INBOX_DATABASE_STATEMENT_TIMEOUT", "8s")
        .env("AGENT_INBOX_DATABASE_ACQUIRE_TIMEOUT", "8s")
        .env("AGENT_INBOX_SCAVENGE_INTERVAL", "500ms")
        // The publishers send as fast as the cluster answers, which on a quick run passes the
        // per-subject default (200/s): rate limits are not what this test is about.
        .env("AGENT_INBOX_AGENT_REQUESTS_PER_SECOND", "100000")
        .env("AGENT_INBOX_AGENT_REQUESTS_BURST", "100000")
        .env("AGENT_INBOX_TENANT_REQUESTS_PER_SECOND", "100000")
        .env("AGENT_INBOX_TENANT_REQUESTS_BURST", "100000")
        .env("AGENT_INBOX_LOG", "warn")
        .log_to(log)
        .spawn()
        .expect("start agent-inbox serve")
}

/// What the clients saw.
#[derive(Default)]
struct Seen {
    /// (recipient, publisher) -> event ids answered 201, in the order they were published.
    committed: BTreeMap<(String, usize), Vec<String>>,
    /// event id -> the live lease (token, expiry by the client's clock).
    leases: HashMap<String, (String, Instant)>,
    /// event id -> acknowledgements answered as done.
    acked: HashMap<String, u32>,
    /// Events whose acknowledgement got no clear answer (its node's member went down): it may
    /// have committed, so the event may never come back.
    uncertain: std::collections::HashSet<String>,
    /// Publishes whose answer was an error: (publisher, n). One may still have committed (a
    /// COMMIT whose answer was lost with its member), and then its event is in the inbox.
    uncertain_publishes: std::collections::HashSet<(u64, u64)>,
    /// event id -> (publisher, n), from the payloads claims returned.
    payloads: HashMap<String, (u64, u64)>,
    /// Tokens of leases that ended without an ack and were replaced by a later claim.
    stale_tokens: Vec<(String, String, String)>,
    /// Errors answered by node i (index) while its member was not down, or anything not a 503.
    wrong: Vec<String>,
    outage_answers: u64,
}

/// Which members are down (killed or paused) right now, shared with the clients.
type Down = Arc<Mutex<[bool; 3]>>;

fn judge(seen: &Mutex<Seen>, down: &Down, node: usize, what: &str, status: Option<u16>, detail: String) {
    let member_down = down.lock().unwrap()[node];
    let mut seen = seen.lock().unwrap();
    match status {
        Some(503) | None if member_down => seen.outage_answers += 1,
        _ => seen.wrong.push(format!("node {node} {what}: {status:?} {detail}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn galera_members_killed_and_paused_lose_nothing() {
    if inbox_conformance::galera_urls().is_none() {
        eprintln!("AGENT_INBOX_TEST_GALERA_URLS is not set: no Galera on this machine (scripts/galera.sh)");
        return;
    }
    let cluster = Cluster::start();
    cluster.sql(1, "CREATE DATABASE agent_inbox_faults CHARACTER SET utf8mb4 COLLATE utf8mb4_bin");
    let urls: Vec<String> = cluster.urls.iter().map(|u| format!("{u}/agent_inbox_faults")).collect();
    // Migrate once, before the nodes (they would serialize on the cluster-wide lock anyway).
    let migrated = Command::new(env!("CARGO_BIN_EXE_agent-inbox"))
        .args(["migrate", "--database-url", &urls[0]])
        .output()
        .unwrap();
    assert!(migrated.status.success(), "{}", String::from_utf8_lossy(&migrated.stderr));
    let nodes: Vec<ServeChild> =
        (0..3).map(|i| serve(&urls[i], &cluster.dir.join(format!("node{i}.log")))).collect();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    for node in &nodes {
        common::wait_ready(&client, &node.base).await;
    }
    let publisher = issue_token(&urls[0], &secrets_key_file(&cluster.dir), "app", "publisher");
    let agents: Vec<String> = RECIPIENTS
        .iter()
        .map(|r| issue_token(&urls[0], &secrets_key_file(&cluster.dir), r, "agent"))
        .collect();
    let bases: Vec<String> = nodes.iter().map(|n| n.base.clone()).collect();

    let seen: Arc<Mutex<Seen>> = Arc::default();
    let down: Down = Arc::default();
    let stop_publishing = Arc::new(AtomicBool::new(false));
    let stop_consuming = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();

    // Publishers: one per node, each to both recipients in turn.
    for (p, base) in bases.iter().enumerate() {
        let (client, base, token, seen, down, stop) = (
            client.clone(),
            base.clone(),
            publisher.clone(),
            seen.clone(),
            down.clone(),
            stop_publishing.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let to = RECIPIENTS[(n % 2) as usize];
                let sent = client
                    .post(format!("{base}/v1/events"))
                    .bearer_auth(&token)
                    .json(&json!({ "recipients": [to], "event_type": "task.assigned", "payload": { "p": p, "n": n } }))
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status() == 201 => {
                        let body: Value = r.json().await.unwrap();
                        let id = body["deliveries"][0]["event_id"].as_str().unwrap_or_default().to_owned();
                        seen.lock().unwrap().committed.entry((to.to_owned(), p)).or_default().push(id);
                    }
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let body = r.text().await.unwrap_or_default();
                        judge(&seen, &down, p, "publish", Some(status), body);
                        seen.lock().unwrap().uncertain_publishes.insert((p as u64, n));
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(err) => {
                        judge(&seen, &down, p, "publish", None, err.to_string());
                        seen.lock().unwrap().uncertain_publishes.insert((p as u64, n));
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        }));
    }
    // Competing consumers: for each recipient, one on every node.
    for (r, agent) in agents.iter().enumerate() {
        for (c, base) in bases.iter().enumerate() {
            let (client, base, token, seen, down, stop) = (
                client.clone(),
                base.clone(),
                agent.clone(),
                seen.clone(),
                down.clone(),
                stop_consuming.clone(),
            );
            let recipient = RECIPIENTS[r];
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let sent = Instant::now();
                    let claimed = client
                        .post(format!("{base}/v1/inbox/claim"))
                        .bearer_auth(&token)
                        .json(&json!({ "limit": 5, "lease_seconds": LEASE_SECONDS }))
                        .send()
                        .await;
                    let claims = match claimed {
                        Ok(r) if r.status() == 200 => {
                            r.json::<Value>().await.unwrap()["claims"].as_array().cloned().unwrap_or_default()
                        }
                        Ok(r) => {
                            let status = r.status().as_u16();
                            judge(&seen, &down, c, "claim", Some(status), r.text().await.unwrap_or_default());
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            continue;
                        }
                        Err(err) => {
                            judge(&seen, &down, c, "claim", None, err.to_string());
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            continue;
                        }
                    };
                    if claims.is_empty() {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                    let mut acks = Vec::new();
                    {
                        let mut seen = seen.lock().unwrap();
                        for claim in &claims {
                            let id = claim["event_id"].as_str().unwrap().to_owned();
                            let token = claim["lease_token"].as_str().unwrap().to_owned();
                            let payload = &claim["event"]["payload"];
                            if let (Some(p), Some(n)) = (payload["p"].as_u64(), payload["n"].as_u64()) {
                                seen.payloads.insert(id.clone(), (p, n));
                            }
                            let expires = sent + Duration::from_secs(LEASE_SECONDS);
                            if let Some((old_token, old_expiry)) =
                                seen.leases.insert(id.clone(), (token.clone(), expires))
                            {
                                // A new lease while the old one lived is a double grant.
                                if Instant::now() + Duration::from_millis(200) < old_expiry {
                                    seen.wrong.push(format!("{id} claimed again while its lease lived"));
                                }
                                seen.stale_tokens.push((recipient.to_owned(), id.clone(), old_token));
                            }
                            if seen.acked.contains_key(&id) {
                                seen.wrong.push(format!("{id} claimed again after it was acknowledged"));
                            }
                            acks.push(json!({ "event_id": id, "lease_token": token, "result": "completed" }));
                        }
                    }
                    let acked = client
                        .post(format!("{base}/v1/inbox/acknowledge"))
                        .bearer_auth(&token)
                        .json(&json!({ "acks": acks }))
                        .send()
                        .await;
                    match acked {
                        Ok(r) if r.status() == 200 => {
                            let body: Value = r.json().await.unwrap();
                            let mut seen = seen.lock().unwrap();
                            for item in body["results"].as_array().cloned().unwrap_or_default() {
                                // Not acked: the lease ran out while the ack travelled; it comes back.
                                if item["ack_state"] == "acked" {
                                    *seen
                                        .acked
                                        .entry(item["event_id"].as_str().unwrap().to_owned())
                                        .or_default() += 1;
                                }
                            }
                        }
                        Ok(r) => {
                            let status = r.status().as_u16();
                            judge(
                                &seen,
                                &down,
                                c,
                                "acknowledge",
                                Some(status),
                                r.text().await.unwrap_or_default(),
                            );
                            let ids = acks.iter().map(|a| a["event_id"].as_str().unwrap().to_owned());
                            seen.lock().unwrap().uncertain.extend(ids);
                        }
                        Err(err) => {
                            judge(&seen, &down, c, "acknowledge", None, err.to_string());
                            let ids = acks.iter().map(|a| a["event_id"].as_str().unwrap().to_owned());
                            seen.lock().unwrap().uncertain.extend(ids);
                        }
                    }
                }
            }));
        }
    }

    // The faults: member 3 killed and started again, then member 2 paused and resumed.
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(4)).await;
    down.lock().unwrap()[2] = true;
    cluster.member("kill", 3);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let restarted = {
        let dir = cluster.dir.clone();
        tokio::task::spawn_blocking(move || {
            Command::new(script()).args(["restart", "3"]).arg(dir).output().unwrap()
        })
    };
    let restarted = restarted.await.unwrap();
    assert!(restarted.status.success(), "restart member 3: {}", String::from_utf8_lossy(&restarted.stderr));
    // Give node 3 a moment to find its member again before counting its answers.
    cluster.wait_synced(3).await;
    inbox_testkit::wait_ready(&client, &bases[2], RECOVERY).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    down.lock().unwrap()[2] = false;
    down.lock().unwrap()[1] = true;
    cluster.member("pause", 2);
    tokio::time::sleep(Duration::from_secs(5)).await;
    cluster.member("resume", 2);
    cluster.wait_synced(2).await;
    inbox_testkit::wait_ready(&client, &bases[1], RECOVERY).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    down.lock().unwrap()[1] = false;
    let load_for = Duration::from_secs(30).saturating_sub(started.elapsed());
    tokio::time::sleep(load_for).await;
    stop_publishing.store(true, Ordering::Relaxed);

    // The drain: consumers go on until every committed publish is acknowledged (or its ack's
    // answer was lost with its member; the database says below whether it committed).
    let drained = |seen: &Seen| {
        seen.committed.values().flatten().all(|id| seen.acked.contains_key(id) || seen.uncertain.contains(id))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !drained(&seen.lock().unwrap()) {
        assert!(Instant::now() < deadline, "the drain did not finish within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // An uncertain ack that did not commit: its lease runs out and a consumer acks it again.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut open = 0;
        for (r, _) in RECIPIENTS.iter().enumerate() {
            open += common::poll_all(&client, &bases[0], &agents[r])
                .await
                .iter()
                .filter(|e| e["ack_state"] != "acked")
                .count();
        }
        if open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} events still not acknowledged 30 s after the drain");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let committed: usize = seen.lock().unwrap().committed.values().map(Vec::len).sum();
    stop_consuming.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }

    let seen = std::mem::take(&mut *seen.lock().unwrap());
    eprintln!(
        "{committed} publishes committed over {:?}, {} answers from nodes whose member was down, {} leases replaced",
        started.elapsed(),
        seen.outage_answers,
        seen.stale_tokens.len()
    );
    assert!(
        seen.wrong.is_empty(),
        "errors that should not have reached a client: {:#?}",
        &seen.wrong[..seen.wrong.len().min(20)]
    );
    assert!(committed > 100, "the load ran ({committed} publishes)");
    let all_committed: Vec<&String> = seen.committed.values().flatten().collect();
    assert!(
        all_committed.iter().all(|id| seen.acked.get(*id).copied().unwrap_or(0) <= 1),
        "no event acknowledged twice (an ack answered done is final)"
    );
    assert!(
        all_committed.iter().all(|id| seen.acked.contains_key(*id) || seen.uncertain.contains(*id)),
        "every committed publish acknowledged"
    );
    let committed_ids: std::collections::HashSet<&String> = all_committed.iter().copied().collect();
    // An event nobody was told about may exist only if its publish got an error answer.
    let accounted = |id: &String| {
        committed_ids.contains(id)
            || seen.payloads.get(id).is_some_and(|pn| seen.uncertain_publishes.contains(pn))
    };
    assert!(seen.acked.keys().all(accounted), "nothing acknowledged that was not published");

    // Stale tokens are refused.
    for (recipient, id, stale) in seen.stale_tokens.iter().take(20) {
        let r = RECIPIENTS.iter().position(|x| x == recipient).unwrap();
        let (status, body) = common::post(
            &client,
            &bases[0],
            &agents[r],
            "/v1/inbox/acknowledge",
            json!({ "acks": [{ "event_id": id, "lease_token": stale, "result": "completed" }] }),
        )
        .await;
        assert!(
            !(status == 200 && body["results"][0]["ack_state"] == "acked"),
            "a stale token was accepted: {body}"
        );
    }

    // Each recipient's sequence is dense and keeps each publisher's order.
    for (r, recipient) in RECIPIENTS.iter().enumerate() {
        let events = common::poll_all(&client, &bases[0], &agents[r]).await;
        let seqs: Vec<u64> = events.iter().map(|e| e["inbox_seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "{recipient}: dense sequence");
        let position: HashMap<&str, usize> =
            events.iter().enumerate().map(|(i, e)| (e["event_id"].as_str().unwrap(), i)).collect();
        for p in 0..3 {
            let mine = seen.committed.get(&(recipient.to_string(), p)).cloned().unwrap_or_default();
            let at: Vec<usize> = mine.iter().map(|id| position[id.as_str()]).collect();
            assert!(at.windows(2).all(|w| w[0] < w[1]), "{recipient}: publisher {p}'s order is kept");
        }
        assert!(
            events.iter().all(|e| accounted(&e["event_id"].as_str().unwrap().to_owned())),
            "{recipient}: every event in the inbox was published"
        );
    }
    drop(nodes);
    drop(cluster);
}
