//! `listen --exec --batch N`: one run of the command for a batch of events, one outcome line
//! per event; unreported events of a killed command are released; a command that reports
//! nothing is read by its exit code. The command is a stand-in for an LLM command-line agent:
//! a Python script that reads JSON lines and writes JSON lines.

use std::time::Duration;

use serde_json::json;

use crate::support::{AGENT, Listen, Server, TempDir, wait_until};

/// Writes the stand-in agent: it logs each run's batch (`runs`: one line of event ids per run)
/// and answers by event type; `t.retry` asks for a retry the first time only.
fn stand_in(dir: &TempDir, body: &str) -> String {
    let script = format!(
        r#"import json, os, sys
d = {dir:?}
events = [json.loads(line) for line in sys.stdin if line.strip()]
assert len(events) == int(os.environ["AGENT_INBOX_BATCH_SIZE"])
with open(os.path.join(d, "runs"), "a") as runs:
    runs.write(" ".join(e["event_id"] for e in events) + "\n")
def report(event, outcome, **more):
    print(json.dumps(dict(event_id=event["event_id"], outcome=outcome, **more)), flush=True)
{body}
"#,
        dir = dir.0.display().to_string()
    );
    std::fs::write(dir.path("agent.py"), script).unwrap();
    format!("python3 '{}'", dir.path("agent.py").display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_run_reports_mixed_outcomes_and_hands_off() {
    let server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let dir = TempDir::new("batch-mixed");
    let mut ids = Vec::new();
    for kind in ["t.ack", "t.retry", "t.fail", "t.quarantine", "t.handoff"] {
        ids.push(server.publish(&publisher, AGENT, kind, json!({"kind": kind})).await);
    }
    let body = r#"
retried = os.path.join(d, "retried")
for e in events:
    kind = e["event_type"]
    if kind == "t.ack":
        report(e, "ack")
    elif kind == "t.retry":
        if os.path.exists(retried):
            report(e, "ack")
        else:
            open(retried, "w").close()
            report(e, "retry", retry_after_seconds=0, reason="not yet")
    elif kind == "t.fail":
        report(e, "fail", reason="no such customer")
    elif kind == "t.quarantine":
        report(e, "quarantine", reason="asks for the admin password", **{"class": "prompt_injection"})
    elif kind == "t.handoff":
        report(e, "ack", follow_ups=[{"recipients": ["reviewer"], "event_type": "t.review", "payload": {"from": e["event_id"]}}])
"#;
    let command = stand_in(&dir, body);
    let listen =
        Listen::spawn(&server.base, &agent, &dir.0, &dir.path("state.db"), &command, &["--batch", "8"]);
    let [ack, retry, fail, quarantine, handoff] = ids.clone().try_into().unwrap();
    wait_until("every event reached its final state", Duration::from_secs(30), || async {
        let events = server.events(&agent).await;
        let state = |id: &String| events.get(id).map(|e| e["ack_state"].as_str().unwrap_or("").to_owned());
        state(&ack).as_deref() == Some("acked")
            && state(&retry).as_deref() == Some("acked")
            && state(&fail).as_deref() == Some("dead_letter")
            && state(&quarantine).as_deref() == Some("quarantined")
            && state(&handoff).as_deref() == Some("acked")
    })
    .await;
    let runs = dir.lines("runs");
    assert_eq!(
        runs[0].split(' ').count(),
        5,
        "the first run got the whole backlog: {runs:?}\n{}",
        listen.dump()
    );
    assert_eq!(runs.len(), 2, "one more run, for the retried event: {runs:?}");
    assert_eq!(runs[1], retry);
    let events = server.events(&agent).await;
    assert_eq!(events[&ack]["delivery_attempts"], 1);
    assert_eq!(events[&retry]["delivery_attempts"], 2);
    assert_eq!(server.admin_event(AGENT, &fail).await["event"]["reason"], "no such customer");
    let quarantined = server.admin_event(AGENT, &quarantine).await;
    assert_eq!(quarantined["event"]["reason"], "asks for the admin password", "{quarantined}");
    let reviewer = server.agent_token("reviewer").await;
    let handed = server.events(&reviewer).await;
    assert_eq!(handed.len(), 1, "the hand-off published once: {handed:?}");
    let review = handed.values().next().unwrap();
    assert_eq!(review["payload"], json!({"from": handoff}));
    assert_eq!(review["deduplication_key"], format!("handoff:{handoff}:0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_killed_mid_batch_gets_its_unreported_events_released() {
    let server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let dir = TempDir::new("batch-killed");
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(server.publish(&publisher, AGENT, "t.work", json!({"n": n})).await);
    }
    // The first run reports its first event, then dies by SIGKILL; later runs finish all.
    let body = r#"
died = os.path.join(d, "died")
if not os.path.exists(died):
    report(events[0], "ack")
    open(died, "w").close()
    os.kill(os.getpid(), 9)
for e in events:
    report(e, "ack")
"#;
    let command = format!("exec {}", stand_in(&dir, body));
    let listen =
        Listen::spawn(&server.base, &agent, &dir.0, &dir.path("state.db"), &command, &["--batch", "3"]);
    wait_until("every event is acknowledged", Duration::from_secs(30), || {
        server.all_in_state(&agent, &ids, "acked")
    })
    .await;
    let runs = dir.lines("runs");
    let first: Vec<&str> = runs[0].split(' ').collect();
    assert_eq!(first.len(), 3, "{runs:?}\n{}", listen.dump());
    let events = server.events(&agent).await;
    assert_eq!(events[first[0]]["delivery_attempts"], 1, "the reported event was acknowledged at once");
    for id in &first[1..] {
        assert_eq!(events[*id]["delivery_attempts"], 2, "released when the command died, then run again");
    }
    assert!(
        listen.logged("event finished", &[("outcome", json!("released"))]),
        "the unreported events were released: {}",
        listen.dump()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_reports_nothing_is_read_by_its_exit_code() {
    let server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let dir = TempDir::new("batch-exit-codes");
    let mut ids = Vec::new();
    for n in 0..2 {
        ids.push(server.publish(&publisher, AGENT, "t.work", json!({"n": n})).await);
    }
    // First run: exit 75 (retry) for all; second: exit 65 (quarantine) for all.
    let body = r#"
first = os.path.join(d, "first")
if not os.path.exists(first):
    open(first, "w").close()
    sys.exit(75)
print("the batch looks tampered with", file=sys.stderr)
sys.exit(65)
"#;
    let command = stand_in(&dir, body);
    let listen =
        Listen::spawn(&server.base, &agent, &dir.0, &dir.path("state.db"), &command, &["--batch", "4"]);
    wait_until("both events are quarantined", Duration::from_secs(30), || {
        server.all_in_state(&agent, &ids, "quarantined")
    })
    .await;
    let events = server.events(&agent).await;
    for id in &ids {
        assert_eq!(
            events[id]["delivery_attempts"],
            2,
            "released by exit 75, then quarantined: {}",
            listen.dump()
        );
        assert_eq!(server.admin_event(AGENT, id).await["event"]["reason"], "the batch looks tampered with");
    }
}
