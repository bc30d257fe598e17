//! The tenant's single-active-session policy from the agent's side: a second agent with the
//! same identity subscribes and takes over; the first finishes what it runs and stops with
//! the superseded error (the SDK) or exit code 3 (`listen`), and no event is handled twice or
//! lost on the way.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inbox_client::schedule::PollSchedule;
use inbox_client::{
    Agent, AgentConfig, Api, ClientError, ContinueAfterReset, Credentials, Event, LocalState, RunSummary,
    Secret,
};
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::support::{AGENT, Listen, Server, TempDir, assert_once, wait_until};

const EVENTS: usize = 30;

/// Which agent handled which event, in order.
type Handled = Arc<Mutex<Vec<(&'static str, String)>>>;

fn handled_by(handled: &Handled, agent: &str) -> usize {
    handled.lock().unwrap().iter().filter(|(by, _)| *by == agent).count()
}

/// Starts an agent in this process whose handler takes a little while (so work is in flight
/// when the other agent takes over); the sender stops it.
fn start(
    server: &Server,
    token: &str,
    state: &LocalState,
    name: &'static str,
    handled: &Handled,
) -> (oneshot::Sender<()>, JoinHandle<Result<RunSummary, ClientError>>) {
    let api = Api::new(&server.base, Credentials::access_token(Secret::new(token))).unwrap();
    let config = AgentConfig {
        concurrency: 2,
        poll: PollSchedule {
            interval_min: Duration::from_millis(100),
            interval_max: Duration::from_secs(2),
            ..PollSchedule::default()
        },
        shutdown_grace: Duration::from_secs(5),
        ..AgentConfig::default()
    };
    let handler = {
        let handled = handled.clone();
        move |event: Event| {
            let handled = handled.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(100)).await; // the work itself
                handled.lock().unwrap().push((name, event.event_id().to_string()));
                Ok(())
            }
        }
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let running =
        tokio::spawn(Agent::new(api, state.clone(), config).run(handler, ContinueAfterReset, async move {
            let _ = stopped.await;
        }));
    (stop, running)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sdk_agent_takes_over_and_the_first_stops_superseded() {
    let server = Server::start(&[]).await;
    server.set_tenant_policy(json!({"single_active_session": true})).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let dir = TempDir::new("takeover-sdk");
    // Separate state files: only the service keeps the two apart.
    let first_state = LocalState::open(&dir.path("first.db"), 100).await.unwrap();
    let second_state = LocalState::open(&dir.path("second.db"), 100).await.unwrap();
    let mut published = Vec::new();
    for n in 0..EVENTS {
        published.push(server.publish(&publisher, AGENT, "task", json!({"n": n})).await);
    }
    let handled: Handled = Arc::default();
    let (_stop_first, first) = start(&server, &agent, &first_state, "first", &handled);
    wait_until("the first agent handled a few events", Duration::from_secs(20), || async {
        handled_by(&handled, "first") >= 3
    })
    .await;

    let (stop_second, second) = start(&server, &agent, &second_state, "second", &handled);
    let stopped = tokio::time::timeout(Duration::from_secs(20), first)
        .await
        .expect("the first agent stops once the second subscribed")
        .unwrap();
    match stopped {
        Err(ClientError::SessionSuperseded { session_id }) => assert!(session_id.starts_with("sess_")),
        other => panic!("expected the superseded error, got {other:?}"),
    }
    let by_first = handled_by(&handled, "first");
    wait_until("every event is acknowledged", Duration::from_secs(30), || {
        server.all_in_state(&agent, &published, "acked")
    })
    .await;
    stop_second.send(()).unwrap();
    let summary = second.await.unwrap().expect("the second agent ran until stopped");
    assert_eq!(handled_by(&handled, "first"), by_first, "the first agent handled nothing after it stopped");
    assert_eq!(summary.acked as usize, EVENTS - by_first, "the second agent took the rest");
    let ids: Vec<String> = handled.lock().unwrap().iter().map(|(_, id)| id.clone()).collect();
    assert_once(&ids, &published);
    let events = server.events(&agent).await;
    let redelivered: Vec<_> = events.values().filter(|e| e["delivery_attempts"] != 1).collect();
    assert!(redelivered.is_empty(), "in-flight work finished under its lease: {redelivered:?}");
    first_state.close().await;
    second_state.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_listen_process_takes_over_and_the_first_exits_superseded() {
    let server = Server::start(&[]).await;
    server.set_tenant_policy(json!({"single_active_session": true})).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let dir = TempDir::new("takeover-cli");
    let handler = |name: &str| {
        format!(
            "sleep 0.1; echo \"$AGENT_INBOX_EVENT_ID\" >> '{}'; echo \"$AGENT_INBOX_EVENT_ID\" >> '{}'",
            dir.path("handled").display(),
            dir.path(name).display()
        )
    };
    let concurrency = ["--concurrency", "2"];
    let mut first = Listen::spawn(
        &server.base,
        &agent,
        &dir.0,
        &dir.path("first.db"),
        &handler("by-first"),
        &concurrency,
    );
    wait_until("the first process subscribed", Duration::from_secs(20), || async {
        first.logged("subscribed", &[])
    })
    .await;
    let mut published = Vec::new();
    for n in 0..EVENTS {
        published.push(server.publish(&publisher, AGENT, "task", json!({"n": n})).await);
    }
    wait_until("the first process handled a few events", Duration::from_secs(20), || async {
        dir.lines("by-first").len() >= 3
    })
    .await;

    let second = Listen::spawn(
        &server.base,
        &agent,
        &dir.0,
        &dir.path("second.db"),
        &handler("by-second"),
        &concurrency,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = first.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the first process is still running: {}", first.dump());
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(status.code(), Some(3), "exit code 3 means superseded: {}", first.dump());
    assert!(first.logged("stopped: a newer session of this agent took over", &[]), "{}", first.dump());
    let stderr = first.dump();
    let error = stderr.lines().find(|l| l.starts_with("error: ")).expect("an error line");
    assert!(error.contains("was superseded") && error.contains("one active session per agent"), "{error}");
    let by_first = dir.lines("by-first").len();

    wait_until("every event is acknowledged", Duration::from_secs(60), || {
        server.all_in_state(&agent, &published, "acked")
    })
    .await;
    assert_once(&dir.lines("handled"), &published);
    assert_eq!(dir.lines("by-first").len(), by_first, "nothing ran in the first process after it exited");
    assert!(!dir.lines("by-second").is_empty(), "the second process took over: {}", second.dump());
    drop(second);
}
