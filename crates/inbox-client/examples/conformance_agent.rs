//! The Rust SDK runner's conformance agent (`clients/conformance/README.md`): an [`Agent`] whose
//! handler follows the script the event's payload carries (`"conformance": [action, ...]`, one
//! action per attempt, the last repeating) and writes what happens to the event log.
//!
//! Configured by its environment: `CONFORMANCE_BASE`, `CONFORMANCE_TOKEN`, `CONFORMANCE_STATE`
//! (a directory; the local record is `sdk.db` in it), `CONFORMANCE_LOG`, and optionally
//! `CONFORMANCE_CONCURRENCY`, `CONFORMANCE_TRANSPORT`, `CONFORMANCE_SHUTDOWN_GRACE` and
//! `CONFORMANCE_UPGRADE_AFTER`. Everything else is the SDK's default.
//!
//! SIGTERM stops the agent as `Agent::run`'s shutdown future does (exit 0); a superseded
//! session exits 3; any other error exits 1 with the reason on stderr. A `crash` action kills
//! the agent's own process group with SIGKILL (`kill -KILL 0`).
//!
//! ```sh
//! cargo build -p inbox-client --example conformance_agent
//! ```

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use inbox_api::ResyncResponse;
use inbox_client::schedule::TransportPolicy;
use inbox_client::{
    Agent, AgentConfig, Api, ClientError, Credentials, Event, HandlerError, LocalState,
    PROCESSED_CAPACITY_DEFAULT, QuarantineClass, Secret, TransportConfig, TransportKind,
};
use serde_json::{Value, json};

/// The exit code of an agent whose session a newer one superseded.
const SUPERSEDED_EXIT_CODE: u8 = 3;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Superseded(err)) => {
            eprintln!("conformance_agent: {err}");
            ExitCode::from(SUPERSEDED_EXIT_CODE)
        }
        Err(Failure::Other(reason)) => {
            eprintln!("conformance_agent: error: {reason}");
            ExitCode::FAILURE
        }
    }
}

enum Failure {
    Superseded(ClientError),
    Other(String),
}

impl From<ClientError> for Failure {
    fn from(err: ClientError) -> Failure {
        match err {
            err @ ClientError::SessionSuperseded { .. } => Failure::Superseded(err),
            err => Failure::Other(err.to_string()),
        }
    }
}

impl From<String> for Failure {
    fn from(reason: String) -> Failure {
        Failure::Other(reason)
    }
}

async fn run() -> Result<(), Failure> {
    let shutdown = terminated()?;
    let base = required("CONFORMANCE_BASE")?;
    let token = required("CONFORMANCE_TOKEN")?;
    let state_dir = PathBuf::from(required("CONFORMANCE_STATE")?);
    let log = Arc::new(Log { path: PathBuf::from(required("CONFORMANCE_LOG")?) });
    let config = config()?;

    std::fs::create_dir_all(&state_dir)
        .map_err(|err| format!("cannot create {}: {err}", state_dir.display()))?;
    let state = LocalState::open(&state_dir.join("sdk.db"), PROCESSED_CAPACITY_DEFAULT).await?;
    let api = Api::new(&base, Credentials::access_token(Secret::new(token)))?;

    let handler = {
        let log = log.clone();
        move |event: Event| {
            let log = log.clone();
            async move { handle(&log, event).await }
        }
    };
    let resync = {
        let log = log.clone();
        move |snapshot: ResyncResponse| {
            let log = log.clone();
            async move {
                let open: Vec<String> = snapshot.open_events.iter().map(|e| e.event_id.to_string()).collect();
                log.write(json!({
                    "what": "resync",
                    "open": open,
                    "resume_after_seq": snapshot.resume_after_seq,
                }));
                Ok(())
            }
        }
    };

    let agent = Agent::new(api, state.clone(), config);
    log.write(json!({ "what": "ready" }));
    let result = agent.run(handler, resync, shutdown).await;
    state.close().await;
    result?;
    Ok(())
}

/// The runner's settings: its defaults, but for what the environment names.
fn config() -> Result<AgentConfig, String> {
    let defaults = AgentConfig::default();
    let concurrency = match optional("CONFORMANCE_CONCURRENCY") {
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| format!("CONFORMANCE_CONCURRENCY {text:?} is not a whole number from 1"))?,
        None => defaults.concurrency,
    };
    let transport = optional("CONFORMANCE_TRANSPORT").unwrap_or_else(|| "sse".to_owned());
    let allowed = match TransportKind::parse(&transport) {
        Some(TransportKind::Sse) => vec![TransportKind::Sse, TransportKind::LongPoll, TransportKind::Poll],
        Some(TransportKind::LongPoll) => vec![TransportKind::LongPoll, TransportKind::Poll],
        Some(TransportKind::Poll) => vec![TransportKind::Poll],
        _ => return Err(format!("CONFORMANCE_TRANSPORT {transport:?} is not sse, long-poll or poll")),
    };
    let policy = TransportPolicy {
        upgrade_after: seconds("CONFORMANCE_UPGRADE_AFTER")?
            .unwrap_or(defaults.transport.policy.upgrade_after),
        ..defaults.transport.policy
    };
    Ok(AgentConfig {
        concurrency,
        transport: TransportConfig { allowed, policy, ..defaults.transport.clone() },
        shutdown_grace: seconds("CONFORMANCE_SHUTDOWN_GRACE")?.unwrap_or(defaults.shutdown_grace),
        ..defaults
    })
}

/// Runs one attempt of an event's script.
async fn handle(log: &Log, event: Event) -> Result<(), HandlerError> {
    let id = event.event_id().to_string();
    let attempt = log.starts(&id);
    let action = action(event.payload(), attempt);
    log.write(json!({ "what": "start", "event": id, "attempt": attempt }));
    let verb = action.get("do").and_then(Value::as_str).unwrap_or("complete");
    if verb == "crash" {
        crash();
    }
    if let Some(sleep) = action.get("sleep").and_then(Value::as_f64).filter(|s| *s > 0.0) {
        tokio::time::sleep(Duration::from_secs_f64(sleep)).await;
    }
    let text = |key: &str| action.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let (outcome, result) = match verb {
        "retry" => {
            let after = action.get("after").and_then(Value::as_f64).unwrap_or(0.0).max(0.0);
            let after = Duration::try_from_secs_f64(after).unwrap_or(Duration::ZERO);
            ("retry", Err(HandlerError::retry(after, "the script asked for a retry")))
        }
        "fatal" => ("fatal", Err(HandlerError::permanent(text("reason")))),
        "quarantine" => {
            let class = text("class");
            let class = QuarantineClass::parse(&class).unwrap_or_else(|| {
                eprintln!("conformance_agent: unknown quarantine class {class:?}; using other");
                QuarantineClass::Other
            });
            ("quarantine", Err(HandlerError::quarantine_as(class, text("reason"))))
        }
        "complete" => ("complete", Ok(())),
        other => {
            eprintln!("conformance_agent: unknown action {other:?}; completing");
            ("complete", Ok(()))
        }
    };
    log.write(json!({ "what": "end", "event": id, "outcome": outcome }));
    result
}

/// The action for attempt `attempt` (from 0): the script's entry, its last one past the end,
/// or `complete` without a script.
fn action(payload: Option<&Value>, attempt: usize) -> Value {
    let script = payload.and_then(|p| p.get("conformance")).and_then(Value::as_array);
    match script {
        Some(actions) if !actions.is_empty() => actions[attempt.min(actions.len() - 1)].clone(),
        _ => json!({ "do": "complete" }),
    }
}

/// SIGKILLs this process's group (the driver starts each agent as a session leader), so nothing
/// of the agent runs on: no acknowledgement, no release, no shutdown.
fn crash() -> ! {
    let _ = std::process::Command::new("kill").args(["-KILL", "0"]).status();
    // `kill` did not run (or did not kill us): die by our own hand, still without cleanup.
    std::process::abort()
}

/// A future that completes on SIGTERM (or SIGINT). The handlers are installed at once, before
/// `ready` is logged, so a SIGTERM that follows it is never the default (death by the signal).
fn terminated() -> Result<impl std::future::Future<Output = ()> + Send, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(|err| format!("cannot handle SIGTERM: {err}"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|err| format!("cannot handle SIGINT: {err}"))?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// The event log: JSON lines, each appended with one write.
#[derive(Debug)]
struct Log {
    path: PathBuf,
}

impl Log {
    fn write(&self, mut line: Value) {
        let t = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        line["t"] = json!(t);
        line["pid"] = json!(std::process::id());
        let mut text = line.to_string();
        text.push('\n');
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .and_then(|mut file| file.write_all(text.as_bytes()));
        if let Err(err) = written {
            eprintln!("conformance_agent: cannot write to the log {}: {err}", self.path.display());
        }
    }

    /// How many `start` lines the log holds for `event_id`.
    fn starts(&self, event_id: &str) -> usize {
        starts_in(&self.path, event_id)
    }
}

fn starts_in(path: &Path, event_id: &str) -> usize {
    let Ok(text) = std::fs::read_to_string(path) else { return 0 };
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["what"] == "start" && line["event"] == event_id)
        .count()
}

fn optional(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn required(name: &str) -> Result<String, String> {
    optional(name).ok_or_else(|| format!("{name} is not set"))
}

/// A number of seconds (may be fractional) from the environment.
fn seconds(name: &str) -> Result<Option<Duration>, String> {
    optional(name)
        .map(|text| {
            text.trim()
                .parse::<f64>()
                .ok()
                .and_then(|s| if s >= 0.0 { Duration::try_from_secs_f64(s).ok() } else { None })
                .ok_or_else(|| format!("{name} {text:?} is not a number of seconds"))
        })
        .transpose()
}
