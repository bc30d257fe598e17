//! `listen --exec CMD`: the SDK's agent with a command as the handler. The command runs with
//! `sh -c` once per event, with the event JSON on stdin and its id, type and sequence in the
//! environment; its exit code decides: 0 acknowledges, the retry code releases the event for a
//! later retry, anything else fails it (the service dead-letters it).
//!
//! `listen` itself exits with [`SUPERSEDED_EXIT_CODE`] when another process with the same
//! identity took over under the tenant's single-active-session policy, so a service manager can
//! tell "replaced" from "failed" and not restart it into a tug of war.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use inbox_api::{ProblemCode, ResyncResponse};
use inbox_client::schedule::{Backoff, PollSchedule, TransportPolicy};
use inbox_client::{
    Agent, AgentConfig, ClientError, ContinueAfterReset, Event, Handler, HandlerError, LocalState,
    PROCESSED_CAPACITY_DEFAULT, Resync, TransportConfig, TransportKind,
};
use tokio::io::AsyncWriteExt as _;

use crate::cli::{ListenArgs, ListenOptions};
use crate::connect::{connect, duration, with_profile_signing_key};
use crate::progress::Reporter;

/// The exit code of a `listen` whose session a newer one superseded.
pub const SUPERSEDED_EXIT_CODE: u8 = 3;

/// The exit code for an error `listen` stopped with, when it is not the generic one.
pub fn exit_code(err: &anyhow::Error) -> Option<u8> {
    matches!(err.downcast_ref::<ClientError>(), Some(ClientError::SessionSuperseded { .. }))
        .then_some(SUPERSEDED_EXIT_CODE)
}

pub async fn listen(args: ListenArgs) -> anyhow::Result<()> {
    let reporter = Reporter::start(args.options.log_json);
    let connection = connect(&args.connect)?;
    let api = with_profile_signing_key(&args.connect, connection.api).await?;
    let state = LocalState::open(&connection.state_path, PROCESSED_CAPACITY_DEFAULT).await?;
    let mut config = agent_config(&args.options)?;
    config.observer = Some(reporter.clone());
    let handler = ExecHandler {
        command: args.options.exec.clone(),
        retry_exit_code: args.options.retry_exit_code,
        retry_after: duration("--retry-after", &args.options.retry_after)?,
    };
    let resync = match &args.options.on_resync {
        Some(command) => CliResync::Command(command.clone()),
        None => CliResync::Continue,
    };
    tracing::info!(
        server = api.base_url(),
        state = %connection.state_path.display(),
        concurrency = config.concurrency,
        signing_key_id = api.signing_key_id().unwrap_or("none"),
        "listening"
    );
    let summary = Agent::new(api, state.clone(), config).run(handler, resync, shutdown_signal()).await;
    state.close().await;
    reporter.finish();
    if let Err(err @ ClientError::SessionSuperseded { .. }) = &summary {
        tracing::error!(error = %err, "stopped: a newer session of this agent took over");
    }
    let summary = summary.map_err(explain_signature_refusal)?;
    tracing::info!(
        acked = summary.acked,
        failed = summary.failed,
        released = summary.released,
        deduplicated = summary.deduplicated,
        unconfirmed = summary.unconfirmed,
        "stopped"
    );
    Ok(())
}

/// Turns a refused or missing signature into what to do about it.
fn explain_signature_refusal(err: inbox_client::ClientError) -> anyhow::Error {
    let hint = match err.code() {
        Some(ProblemCode::SignatureRequired) => {
            "this tenant requires signed calls and this profile has no signing key; run: agent-inbox login \
             --signing-key auto"
        }
        Some(ProblemCode::UnknownSigningKey) => {
            "the profile's signing key is not (or no longer) registered for this agent; run: agent-inbox login \
             --signing-key generate"
        }
        _ => return err.into(),
    };
    anyhow::Error::new(err).context(hint)
}

fn agent_config(options: &ListenOptions) -> anyhow::Result<AgentConfig> {
    let defaults = AgentConfig::default();
    let optional =
        |flag: &str, value: &Option<String>| value.as_deref().map(|v| duration(flag, v)).transpose();
    let best = TransportKind::parse(&options.transport)
        .with_context(|| format!("--transport {:?} is not sse, long-poll or poll", options.transport))?;
    let allowed = match best {
        TransportKind::Sse => vec![TransportKind::Sse, TransportKind::LongPoll, TransportKind::Poll],
        TransportKind::LongPoll => vec![TransportKind::LongPoll, TransportKind::Poll],
        TransportKind::Poll => vec![TransportKind::Poll],
    };
    let poll = PollSchedule {
        interval_min: optional("--poll-min", &options.poll_min)?.unwrap_or(defaults.poll.interval_min),
        interval_max: optional("--poll-max", &options.poll_max)?.unwrap_or(defaults.poll.interval_max),
        ..defaults.poll
    };
    if poll.interval_min > poll.interval_max || poll.interval_min < Duration::from_millis(10) {
        bail!("--poll-min must be at least 10ms and at most --poll-max");
    }
    let reconnect = Backoff {
        base: defaults.transport.reconnect.base.min(poll.interval_max),
        max: optional("--reconnect-max", &options.reconnect_max)?.unwrap_or(poll.interval_max),
    };
    let policy = TransportPolicy {
        stream_life_min: optional("--stream-life-min", &options.stream_life_min)?
            .unwrap_or(defaults.transport.policy.stream_life_min),
        upgrade_after: optional("--upgrade-after", &options.upgrade_after)?
            .unwrap_or(defaults.transport.policy.upgrade_after),
        ..defaults.transport.policy
    };
    Ok(AgentConfig {
        device_id: options.device_id.clone(),
        concurrency: usize::from(options.concurrency),
        lease: optional("--lease", &options.lease)?,
        transport: TransportConfig { allowed, policy, reconnect, ..TransportConfig::default() },
        poll,
        shutdown_grace: optional("--shutdown-grace", &options.shutdown_grace)?
            .unwrap_or(defaults.shutdown_grace),
        ..defaults
    })
}

/// Completes on SIGTERM (a service manager stopping us) or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = interrupt => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}

/// Runs the `--exec` command for an event.
#[derive(Debug)]
struct ExecHandler {
    command: String,
    retry_exit_code: i32,
    retry_after: Duration,
}

impl Handler for ExecHandler {
    async fn handle(&self, event: Event) -> Result<(), HandlerError> {
        let mut command = shell(&self.command);
        command
            .env("AGENT_INBOX_EVENT_ID", event.event_id())
            .env("AGENT_INBOX_EVENT_TYPE", event.event_type())
            .env("AGENT_INBOX_INBOX_SEQ", event.inbox_seq().to_string())
            .env("AGENT_INBOX_DELIVERY_ATTEMPT", event.envelope.delivery_attempts.to_string());
        let code = run_with_stdin(command, event.to_json())
            .await
            .map_err(|err| HandlerError::retry(self.retry_after, format!("cannot run the command: {err}")))?;
        exit_outcome(code, self.retry_exit_code, self.retry_after)
    }
}

/// What an exit status means: `None` is death by a signal (an OOM kill, our own shutdown),
/// which is worth a retry.
fn exit_outcome(code: Option<i32>, retry_exit_code: i32, retry_after: Duration) -> Result<(), HandlerError> {
    match code {
        Some(0) => Ok(()),
        Some(code) if code == retry_exit_code => {
            Err(HandlerError::retry(retry_after, format!("the command exited with {code} (retry)")))
        }
        Some(code) => Err(HandlerError::permanent(format!("the command exited with {code}"))),
        None => Err(HandlerError::retry(retry_after, "the command was killed by a signal")),
    }
}

/// What to do after a cursor reset.
#[derive(Debug)]
enum CliResync {
    Continue,
    Command(String),
}

impl Resync for CliResync {
    async fn resync(&self, snapshot: ResyncResponse) -> Result<(), HandlerError> {
        let command = match self {
            CliResync::Continue => return ContinueAfterReset.resync(snapshot).await,
            CliResync::Command(command) => command,
        };
        let json = serde_json::to_string(&snapshot).expect("a snapshot serializes");
        let retry = Duration::from_secs(30);
        let code = run_with_stdin(shell(command), json)
            .await
            .map_err(|err| HandlerError::retry(retry, format!("cannot run --on-resync: {err}")))?;
        exit_outcome(code, 75, retry)
    }
}

fn shell(command: &str) -> tokio::process::Command {
    let mut child = tokio::process::Command::new("sh");
    child
        .arg("-c")
        .arg(command)
        // The handler gets the event, not our credentials.
        .env_remove("AGENT_INBOX_TOKEN")
        .stdin(Stdio::piped())
        .kill_on_drop(true);
    child
}

/// Runs `command` with `input` on its stdin; returns its exit code (`None`: killed by a signal).
async fn run_with_stdin(mut command: tokio::process::Command, input: String) -> std::io::Result<Option<i32>> {
    let mut child = command.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        // A command that does not read its input closes the pipe early; that is its business.
        match stdin.write_all(input.as_bytes()).await {
            Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => return Err(err),
            _ => {}
        }
        drop(stdin);
    }
    Ok(child.wait().await?.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_map_to_ack_retry_and_failure() {
        let after = Duration::from_secs(30);
        assert_eq!(exit_outcome(Some(0), 75, after), Ok(()));
        assert!(
            matches!(exit_outcome(Some(75), 75, after), Err(HandlerError::Retry { after: a, .. }) if a == after)
        );
        assert!(matches!(exit_outcome(Some(3), 75, after), Err(HandlerError::Permanent { .. })));
        assert!(matches!(exit_outcome(Some(75), 99, after), Err(HandlerError::Permanent { .. })));
        assert!(matches!(exit_outcome(None, 75, after), Err(HandlerError::Retry { .. })));
    }
}
