//! Faults around a running `listen`: the agent killed mid-event (before and after recording
//! its result), the service restarted, the event stream cut and refused, and a proxy that
//! closes every connection after two seconds. Nothing is lost; nothing is run twice.

use std::time::{Duration, Instant};

use inbox_client::LocalState;
use serde_json::json;

use crate::proxy::Proxy;
use crate::support::{
    AGENT, Listen, Server, TENANT, TempDir, append_handler, assert_once, wait_for, wait_until,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_after_claiming_gets_the_event_again_after_the_lease() {
    let server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let dir = TempDir::new("killed-after-claim");
    // The first run hangs (until the test ends, or its directory goes) as if the agent
    // crashed mid-work; the second completes.
    let script = format!(
        r#"d='{}'; echo "$AGENT_INBOX_EVENT_ID" >> "$d/started"
if [ ! -f "$d/first" ]; then touch "$d/first"; while [ -d "$d" ] && [ ! -f "$d/end" ]; do sleep 0.05; done; exit 0; fi
echo "$AGENT_INBOX_EVENT_ID" >> "$d/handled""#,
        dir.0.display()
    );
    let id = server.publish(&publisher, AGENT, "task", json!({})).await;
    let mut first = Listen::spawn(&server.base, &agent, &dir.0, &dir.path("state.db"), &script, &[]);
    wait_until("the first agent runs the event", Duration::from_secs(20), || async {
        dir.lines("started").len() == 1
    })
    .await;
    first.kill();
    let claimed_at = Instant::now();
    let second = Listen::spawn(&server.base, &agent, &dir.0, &dir.path("state.db"), &script, &[]);
    wait_until("the event is acknowledged by the second agent", Duration::from_secs(30), || {
        server.all_in_state(&agent, std::slice::from_ref(&id), "acked")
    })
    .await;
    assert!(claimed_at.elapsed() >= Duration::from_millis(500), "not before the 2 s lease could run out");
    assert_eq!(dir.lines("started"), vec![id.clone(), id.clone()], "{}", second.dump());
    assert_eq!(dir.lines("handled"), vec![id.clone()]);
    assert_eq!(server.events(&agent).await[&id]["delivery_attempts"], 2);
    std::fs::write(dir.path("end"), "").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_runs_once_across_a_killed_and_restarted_agent() {
    let server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let dir = TempDir::new("dedup");
    let script = format!(
        r#"d='{}'; echo "$AGENT_INBOX_EVENT_ID" >> "$d/started"
while [ -d "$d" ] && [ ! -f "$d/go" ]; do sleep 0.05; done
echo "$AGENT_INBOX_EVENT_ID" >> "$d/handled""#,
        dir.0.display()
    );
    let id = server.publish(&publisher, AGENT, "task", json!({})).await;
    let state_path = dir.path("state.db");
    let mut first = Listen::spawn(&server.base, &agent, &dir.0, &state_path, &script, &[]);
    wait_until("the handler starts", Duration::from_secs(20), || async { dir.lines("started").len() == 1 })
        .await;
    // Freeze the service, let the handler finish: the agent records the result, then its
    // acknowledgement hangs. Kill the agent there.
    server.signal("-STOP");
    std::fs::write(dir.path("go"), "").unwrap();
    let state = LocalState::open(&state_path, 100).await.unwrap();
    let inbox = format!("{TENANT}/{AGENT}");
    wait_until("the agent records the event as processed", Duration::from_secs(20), || async {
        state.processed(&inbox, &id).await.unwrap().is_some()
    })
    .await;
    first.kill();
    server.signal("-CONT");
    assert!(server.events(&agent).await[&id]["ack_state"] != "acked", "the acknowledgement never arrived");
    let second = Listen::spawn(&server.base, &agent, &dir.0, &state_path, &script, &[]);
    wait_until("the redelivered event is acknowledged", Duration::from_secs(30), || {
        server.all_in_state(&agent, std::slice::from_ref(&id), "acked")
    })
    .await;
    assert_eq!(dir.lines("handled"), vec![id.clone()], "the handler ran once: {}", second.dump());
    assert_eq!(dir.lines("started").len(), 1);
    wait_until("the agent logs the deduplication", Duration::from_secs(5), || async {
        second.logged("event finished", &[("outcome", json!("deduplicated"))])
    })
    .await;
    state.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_during_listen_loses_nothing() {
    let mut server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let dir = TempDir::new("server-restart");
    // Slow enough that events are in flight when the service dies.
    let handler = format!("{}; sleep 0.02", append_handler(&dir));
    let listen =
        Listen::spawn(&server.base, &agent, &dir.0, &dir.path("state.db"), &handler, &["--concurrency", "4"]);
    let mut published = Vec::new();
    for n in 0..20 {
        published.push(server.publish(&publisher, AGENT, "task", json!({"n": n})).await);
    }
    wait_until("some events are handled", Duration::from_secs(20), || async {
        dir.lines("handled").len() >= 5
    })
    .await;
    server.restart().await;
    for n in 20..40 {
        published.push(server.publish(&publisher, AGENT, "task", json!({"n": n})).await);
    }
    wait_until("all 40 events are acknowledged", Duration::from_secs(60), || {
        server.all_in_state(&agent, &published, "acked")
    })
    .await;
    assert_once(&dir.lines("handled"), &published);
    wait_until("the event stream is reopened after the restart", Duration::from_secs(20), || async {
        let log = listen.log.lock().unwrap();
        log.iter().filter(|l| l.contains("\"transport\":\"sse\"") && l.contains("\"connected\":true")).count()
            >= 2
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_event_stream_falls_back_to_long_polls_and_recovers_every_event() {
    let server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let proxy = Proxy::start(server.port).await;
    let dir = TempDir::new("sse-cut");
    let listen = Listen::spawn(
        &proxy.base,
        &agent,
        &dir.0,
        &dir.path("state.db"),
        &append_handler(&dir),
        &["--upgrade-after", "3s"],
    );
    wait_until("the agent streams", Duration::from_secs(20), || async {
        listen.logged("transport", &[("transport", json!("sse")), ("connected", json!(true))])
    })
    .await;
    let mut published = Vec::new();
    for n in 0..5 {
        published.push(server.publish(&publisher, AGENT, "task", json!({"n": n})).await);
    }
    wait_until("the first events are handled", Duration::from_secs(20), || async {
        dir.lines("handled").len() == 5
    })
    .await;
    // Cut mid-stream, and refuse new streams: the agent must fall back.
    proxy.refuse_streams(true);
    proxy.cut_all();
    for n in 5..15 {
        published.push(server.publish(&publisher, AGENT, "task", json!({"n": n})).await);
    }
    wait_until("the agent falls back to long polls", Duration::from_secs(30), || async {
        listen.logged("transport", &[("transport", json!("long-poll")), ("connected", json!(true))])
    })
    .await;
    wait_until("every event so far is handled", Duration::from_secs(30), || async {
        dir.lines("handled").len() == published.len()
    })
    .await;
    // Streams work again: the agent goes back to SSE and keeps handling.
    proxy.refuse_streams(false);
    let lines_before = listen.log.lock().unwrap().len();
    wait_until("the agent streams again", Duration::from_secs(30), || async {
        listen.log.lock().unwrap()[lines_before..]
            .iter()
            .any(|l| l.contains("\"transport\":\"sse\"") && l.contains("\"connected\":true"))
    })
    .await;
    for n in 15..20 {
        published.push(server.publish(&publisher, AGENT, "task", json!({"n": n})).await);
    }
    wait_until("all 20 events are acknowledged", Duration::from_secs(30), || {
        server.all_in_state(&agent, &published, "acked")
    })
    .await;
    assert_once(&dir.lines("handled"), &published);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_closing_connections_every_two_seconds_still_delivers_every_event_promptly() {
    let server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let proxy = Proxy::start(server.port).await;
    proxy.close_after(Some(Duration::from_secs(2)));
    let dir = TempDir::new("proxy-cuts");
    let listen =
        Listen::spawn(&proxy.base, &agent, &dir.0, &dir.path("state.db"), &append_handler(&dir), &[]);
    wait_until("the agent is subscribed", Duration::from_secs(20), || async {
        listen.logged("subscribed", &[])
    })
    .await;
    // One event at a time over twelve seconds (several cuts): each must arrive promptly.
    let started = Instant::now();
    let mut published = Vec::new();
    let mut latencies = Vec::new();
    while started.elapsed() < Duration::from_secs(12) {
        let sent = Instant::now();
        published.push(server.publish(&publisher, AGENT, "task", json!({"n": published.len()})).await);
        let expected = published.len();
        let handled =
            wait_for(Duration::from_secs(15), || async { dir.lines("handled").len() >= expected }).await;
        assert!(handled, "event {expected} not handled within 15 s; listen's log:\n{}", listen.dump());
        latencies.push(sent.elapsed());
    }
    wait_until("every event is acknowledged", Duration::from_secs(30), || {
        server.all_in_state(&agent, &published, "acked")
    })
    .await;
    assert_once(&dir.lines("handled"), &published);
    latencies.sort();
    let worst = *latencies.last().unwrap();
    assert!(worst < Duration::from_secs(6), "worst publish-to-handler latency {worst:?}: {}", listen.dump());
    assert!(published.len() >= 5, "{} events in 12 s", published.len());
    assert!(proxy.connections() > 3, "the proxy really cut connections");
}
