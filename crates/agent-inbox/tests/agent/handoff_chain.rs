//! A chain of agents, A → B → C, each handing its work on with a fenced hand-off (`listen
//! --batch` outcome lines with follow_ups) while workers are SIGKILLed mid-handler and paused
//! (SIGSTOP) past their 2 s leases, so leases expire under live workers whose late hand-offs
//! must be refused. Every input yields exactly one event at C, and every follow-up was
//! committed by the last lease of the event it acknowledged (a stale lease would show as a
//! follow-up naming an earlier attempt than the event's final one). On SQLite and MariaDB.

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use inbox_conformance::Backend;
use serde_json::{Value, json};

use crate::support::{Listen, Server, TempDir, wait_until};

const INPUTS: usize = 40;
const FAULTS_FOR: Duration = Duration::from_secs(12);
const DONE_WITHIN: Duration = Duration::from_secs(120);

/// The stand-in agent of one link: hands each event on to `next` with the provenance it got
/// (an acknowledged event's payload is gone) plus its own link's: the event it came from and
/// that event's delivery attempt, under the link's `name`. It dawdles a little first.
fn link_command(dir: &TempDir, name: &str, next: &str) -> String {
    let script = format!(
        r#"import json, random, sys, time
events = [json.loads(line) for line in sys.stdin if line.strip()]
time.sleep(random.uniform(0.3, 1.2))
for e in events:
    payload = dict(e["payload"])
    payload[{name:?}] = {{"from": e["event_id"], "attempt": e["delivery_attempts"]}}
    follow_up = {{"recipients": [{next:?}], "event_type": "chain.step", "payload": payload}}
    print(json.dumps({{"event_id": e["event_id"], "outcome": "ack", "follow_ups": [follow_up]}}), flush=True)
"#
    );
    let path = dir.path(&format!("{name}.py"));
    std::fs::write(&path, script).unwrap();
    format!("python3 '{}'", path.display())
}

struct Worker {
    name: String,
    token: String,
    home: std::path::PathBuf,
    state: std::path::PathBuf,
    command: String,
    listen: Listen,
}

impl Worker {
    fn spawn(server: &Server, dir: &TempDir, name: &str, token: &str, command: &str) -> Worker {
        let home = dir.path(&format!("{name}-home"));
        std::fs::create_dir_all(&home).unwrap();
        let state = dir.path(&format!("{name}.db"));
        let listen = Listen::spawn(&server.base, token, &home, &state, command, &["--batch", "4"]);
        Worker {
            name: name.to_owned(),
            token: token.to_owned(),
            home,
            state,
            command: command.to_owned(),
            listen,
        }
    }

    fn respawn(&mut self, server: &Server) {
        self.listen.kill();
        self.listen = Listen::spawn(
            &server.base,
            &self.token,
            &self.home,
            &self.state,
            &self.command,
            &["--batch", "4"],
        );
    }

    fn signal(&self, signal: &str) {
        let pid = self.listen.child.id().to_string();
        let _ = Command::new("kill").args([signal, &pid]).status();
    }
}

async fn a_chain_hands_off_exactly_once_through_faults(backend: Backend) {
    let server = Server::start_on(backend, &[]).await;
    let publisher = server.publisher_token().await;
    let (a, b, c) = (
        server.agent_token("chain_a").await,
        server.agent_token("chain_b").await,
        server.agent_token("chain_c").await,
    );
    let dir = TempDir::new("handoff-chain");
    let to_b = link_command(&dir, "a", "chain_b");
    let to_c = link_command(&dir, "b", "chain_c");
    let mut workers = [
        Worker::spawn(&server, &dir, "a1", &a, &to_b),
        Worker::spawn(&server, &dir, "a2", &a, &to_b),
        Worker::spawn(&server, &dir, "b1", &b, &to_c),
        Worker::spawn(&server, &dir, "b2", &b, &to_c),
    ];
    for input in 0..INPUTS {
        server.publish(&publisher, "chain_a", "chain.input", json!({"input": input})).await;
    }
    let mut seed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    println!("fault seed {seed}");
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut kills, mut pauses) = (0, 0);
    let started = Instant::now();
    while started.elapsed() < FAULTS_FOR {
        let worker = &mut workers[next(4) as usize];
        if next(2) == 0 {
            worker.respawn(&server);
            kills += 1;
        } else {
            // Longer than the 2 s lease: the lease ends under a live worker.
            worker.signal("-STOP");
            tokio::time::sleep(Duration::from_millis(2_500 + next(1_000))).await;
            worker.signal("-CONT");
            pauses += 1;
        }
        tokio::time::sleep(Duration::from_millis(200 + next(500))).await;
    }
    println!("faults: {kills} workers SIGKILLed and restarted, {pauses} paused past their lease");
    wait_until("every input reached C", DONE_WITHIN, || async { server.events(&c).await.len() >= INPUTS })
        .await;
    let (at_a, at_b, at_c) = (server.events(&a).await, server.events(&b).await, server.events(&c).await);
    for event in at_b.values() {
        let from = event["deduplication_key"].as_str().unwrap();
        assert!(
            from.starts_with("handoff:") && from.ends_with(":0"),
            "B's events are A's hand-offs: {event}"
        );
    }
    let dump = || workers.iter().map(|w| format!("--- {}\n{}", w.name, w.listen.dump())).collect::<String>();

    let inputs: Vec<u64> = at_c.values().map(|e| e["payload"]["input"].as_u64().unwrap()).collect();
    assert_eq!(inputs.len(), INPUTS, "exactly one event at C per input");
    assert_eq!(
        inputs.iter().collect::<HashSet<_>>().len(),
        INPUTS,
        "no input twice at C: {inputs:?}\n{}",
        dump()
    );
    assert_eq!(at_b.len(), INPUTS, "exactly one event at B per input");
    for event in at_c.values() {
        check_fenced(event, "b", &at_b);
        check_fenced(event, "a", &at_a);
    }
    let redelivered =
        at_a.values().chain(at_b.values()).filter(|e| e["delivery_attempts"].as_u64() > Some(1)).count();
    let refused: usize = workers
        .iter()
        .map(|w| {
            w.listen.log.lock().unwrap().iter().filter(|l| l.contains("\"outcome\":\"unconfirmed\"")).count()
        })
        .sum();
    println!(
        "{redelivered} events delivered more than once; {refused} hand-offs refused (in the logs of the last workers)"
    );
    assert!(redelivered > 0, "the faults hit no work in progress, so the fence went untested\n{}", dump());
}

/// The follow-up `link` made on the way to C's `event` came from the acknowledgement of its
/// source's last lease, and that source is acknowledged.
fn check_fenced(event: &Value, link: &str, sources: &HashMap<String, Value>) {
    let made = &event["payload"][link];
    let from = made["from"].as_str().unwrap_or_else(|| panic!("no {link} provenance in {event}"));
    let source = &sources[from];
    assert_eq!(source["ack_state"], "acked", "{source}");
    assert_eq!(
        made["attempt"], source["delivery_attempts"],
        "a follow-up committed under a stale lease: {event} from {source}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_hands_off_exactly_once_through_faults_on_sqlite() {
    a_chain_hands_off_exactly_once_through_faults(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_hands_off_exactly_once_through_faults_on_mariadb() {
    a_chain_hands_off_exactly_once_through_faults(Backend::MySql).await;
}
