//! Work no hint announces, found in time by a runner whose stream is connected (so its timer is
//! only the 5-minute safety net): an event whose lease a crashed process held, an event the
//! handler released for a retry (after a fractional delay, never sooner than asked), and a
//! service that was down, found again soon after it returns.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inbox_client::{
    Agent, AgentConfig, Api, ClientError, ContinueAfterReset, Credentials, Event, Handler, HandlerError,
    LocalState, Observer, Progress, RunSummary, Secret,
};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::support::{AGENT, Listen, Server, TempDir, wait_until};

/// Records when each event's handler started, in order.
type Runs = Arc<Mutex<Vec<(String, Instant)>>>;

/// Whether the agent's hint transport is connected, and how many scans it made since.
#[derive(Clone, Default)]
struct Watch {
    connected: Arc<AtomicBool>,
    scans_connected: Arc<tokio::sync::watch::Sender<u32>>,
}

impl Observer for Watch {
    fn progress(&self, progress: &Progress<'_>) {
        match progress {
            Progress::Transport(status) => self.connected.store(status.connected, Ordering::Release),
            Progress::Scanned { .. } if self.connected.load(Ordering::Acquire) => {
                self.scans_connected.send_modify(|n| *n += 1);
            }
            _ => {}
        }
    }
}

impl Watch {
    /// Completes after a scan made while connected: the stream's connection forces one.
    async fn scanned_while_connected(&self) {
        let mut scans = self.scans_connected.subscribe();
        scans.wait_for(|n| *n > 0).await.unwrap();
    }
}

/// An agent in this process with the default schedule (a connected stream leaves only the
/// 5-minute safety net); the sender stops it.
struct Running {
    watch: Watch,
    stop: oneshot::Sender<()>,
    run: JoinHandle<Result<RunSummary, ClientError>>,
    _state: LocalState,
    _dir: TempDir,
}

async fn start_agent(
    server: &Server,
    token: &str,
    name: &str,
    concurrency: usize,
    watch: Watch,
    handler: impl Handler,
) -> Running {
    let dir = TempDir::new(name);
    let state = LocalState::open(&dir.path("state.db"), 100).await.unwrap();
    let config = AgentConfig {
        concurrency,
        shutdown_grace: Duration::from_secs(1),
        observer: Some(Arc::new(watch.clone())),
        ..AgentConfig::default()
    };
    let api = Api::new(&server.base, Credentials::access_token(Secret::new(token))).unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let run = tokio::spawn(Agent::new(api, state.clone(), config).run(handler, ContinueAfterReset, async {
        let _ = stopped.await;
    }));
    Running { watch, stop, run, _state: state, _dir: dir }
}

impl Running {
    async fn connected(&self) {
        wait_until("the agent's event stream is connected", Duration::from_secs(20), || async {
            self.watch.connected.load(Ordering::Acquire)
        })
        .await;
    }

    async fn stop(self) -> RunSummary {
        self.stop.send(()).unwrap();
        self.run.await.unwrap().unwrap()
    }
}

fn runs_of(runs: &Runs, id: &str) -> Vec<Instant> {
    runs.lock().unwrap().iter().filter(|(e, _)| e == id).map(|(_, at)| *at).collect()
}

/// A handler that records its runs; on `first_of`'s first run it waits for a scan made
/// while connected, then returns `first` at once. The cycle that follows that event's end
/// then comes within 200 ms of the scan and claims without scanning: the cycle that used to
/// forget when the next event becomes claimable and sleep the 5-minute safety net.
fn finishing_after_a_scan(
    runs: &Runs,
    watch: &Watch,
    first_of: &str,
    first: Result<(), HandlerError>,
) -> impl Handler {
    let (runs, watch, first_of) = (runs.clone(), watch.clone(), first_of.to_owned());
    move |event: Event| {
        let id = event.event_id().to_string();
        let n_runs = {
            let mut runs = runs.lock().unwrap();
            runs.push((id.clone(), Instant::now()));
            runs.iter().filter(|(e, _)| *e == id).count()
        };
        let (watch, first_of, first) = (watch.clone(), first_of.clone(), first.clone());
        async move {
            if id != first_of || n_runs > 1 {
                return Ok(());
            }
            watch.scanned_while_connected().await;
            first
        }
    }
}

/// Another process claims an event with a 2 s lease and crashes: the agent, connected, runs
/// it within 3 s of the lease's end although nothing is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_held_by_a_crashed_process_is_taken_soon_after_it_ends_while_connected() {
    let server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let held = server.publish(&publisher, AGENT, "task", json!({})).await;
    let claimed: Value = server
        .client
        .post(format!("{}/v1/inbox/claim", server.base))
        .bearer_auth(&agent)
        .json(&json!({"limit": 1, "lease_seconds": 2}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(claimed["claims"][0]["event_id"], held.as_str(), "{claimed}");
    let lease_ends = Instant::now() + Duration::from_secs(2);
    let quick = server.publish(&publisher, AGENT, "task", json!({})).await;
    let (runs, watch) = (Runs::default(), Watch::default());
    let handler = finishing_after_a_scan(&runs, &watch, &quick, Ok(()));
    let running = start_agent(&server, &agent, "crashed-lease", 2, watch, handler).await;
    wait_until("the crashed process's event is handled", Duration::from_secs(15), || async {
        !runs_of(&runs, &held).is_empty()
    })
    .await;
    let ran = runs_of(&runs, &held)[0];
    assert!(ran >= lease_ends - Duration::from_millis(100), "run while another held the lease");
    let late = ran.saturating_duration_since(lease_ends);
    assert!(late <= Duration::from_secs(3), "run {late:?} after the lease ended");
    assert_eq!(runs_of(&runs, &quick).len(), 1);
    assert_eq!(running.stop().await.acked, 2);
}

/// A handler asks for a retry after 1.5 s: the event runs again no sooner than that (the
/// service counts whole seconds: 2 s) and within 3 s, while the stream is connected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_event_runs_again_after_its_fractional_delay_while_connected() {
    let server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let id = server.publish(&publisher, AGENT, "task", json!({})).await;
    let (runs, watch) = (Runs::default(), Watch::default());
    let retry = Err(HandlerError::retry(Duration::from_millis(1_500), "busy"));
    let handler = finishing_after_a_scan(&runs, &watch, &id, retry);
    let running = start_agent(&server, &agent, "fractional-retry", 2, watch, handler).await;
    running.watch.scanned_while_connected().await;
    let released = Instant::now();
    wait_until("the event ran twice", Duration::from_secs(15), || async { runs_of(&runs, &id).len() == 2 })
        .await;
    let gap = runs_of(&runs, &id)[1] - released;
    assert!(gap >= Duration::from_millis(1_500), "ran again {gap:?} after a retry asked for 1.5 s");
    assert!(gap <= Duration::from_millis(3_000), "ran again only {gap:?} after a retry asked for 1.5 s");
    let summary = running.stop().await;
    assert_eq!((summary.released, summary.acked), (1, 1));
}

/// The service is down for 8 s (long enough for a backoff that doubles from 1 s to be waiting
/// 4–8 s): the agent finds it again within 3 s of its return, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_comes_back_is_found_within_three_seconds() {
    let mut server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let runs: Runs = Arc::default();
    let recording = {
        let runs = runs.clone();
        move |event: Event| {
            runs.lock().unwrap().push((event.event_id().to_string(), Instant::now()));
            async { Ok(()) }
        }
    };
    let running = start_agent(&server, &agent, "outage", 1, Watch::default(), recording).await;
    running.connected().await;
    server.kill();
    tokio::time::sleep(Duration::from_secs(8)).await;
    server.start_again().await;
    let back = Instant::now();
    let id = server.publish(&publisher, AGENT, "task", json!({})).await;
    wait_until("the event published after the return is handled", Duration::from_secs(20), || async {
        !runs_of(&runs, &id).is_empty()
    })
    .await;
    let found = runs_of(&runs, &id)[0] - back;
    assert!(found <= Duration::from_secs(3), "found the service {found:?} after its return");
    assert_eq!(running.stop().await.acked, 1);
}

/// `listen --retry-after 1.5` (a bare number is seconds): a command that exits 75 runs again
/// no sooner than 1.5 s later and within a second more, with its stream connected and the
/// default 5-minute ceiling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_runs_a_released_event_again_after_a_bare_fractional_retry_after() {
    let server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let dir = TempDir::new("listen-retry-after");
    let script = format!(
        r#"d='{}'; echo "start $(date +%s.%N)" >> "$d/runs"
if [ ! -f "$d/first" ]; then touch "$d/first"; echo "end $(date +%s.%N)" >> "$d/runs"; exit 75; fi"#,
        dir.0.display()
    );
    let mut command = std::process::Command::new(crate::support::BIN);
    command
        .args(["listen", "--server", &server.base, "--state"])
        .arg(dir.path("state.db"))
        .args(["--exec", &script, "--log-json", "--retry-after", "1.5", "--shutdown-grace", "1s"])
        .env("AGENT_INBOX_TOKEN", &agent)
        .env("AGENT_INBOX_HOME", &dir.0)
        .env("AGENT_INBOX_LOG", "info,inbox_client=debug");
    let listen = Listen::spawn_command(command);
    wait_until("listen's event stream is connected", Duration::from_secs(20), || async {
        listen.logged("transport", &[("transport", json!("sse")), ("connected", json!(true))])
    })
    .await;
    let id = server.publish(&publisher, AGENT, "task", json!({})).await;
    wait_until("the event is acknowledged", Duration::from_secs(15), || {
        server.all_in_state(&agent, std::slice::from_ref(&id), "acked")
    })
    .await;
    let times: Vec<f64> =
        dir.lines("runs").iter().map(|l| l.split_once(' ').unwrap().1.parse().unwrap()).collect();
    assert_eq!(times.len(), 3, "start, end, start: {:?}\n{}", dir.lines("runs"), listen.dump());
    let gap = times[2] - times[1];
    assert!(gap >= 1.5, "ran again {gap:.3} s after a retry asked for 1.5 s");
    assert!(gap <= 3.0, "ran again only {gap:.3} s after a retry asked for 1.5 s");
}
