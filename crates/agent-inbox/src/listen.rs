//! `listen --exec CMD`: the SDK's agent with a command as the handler. The command runs with
//! `sh -c` once per event, with the event JSON on stdin and its id, type and sequence in the
//! environment; its exit code decides: 0 acknowledges, the retry code releases the event for a
//! later retry, the quarantine code sets it aside for a person (the reason is the last line the
//! command wrote to stderr), anything else fails it (the service dead-letters it).
//!
//! `listen` itself exits with [`SUPERSEDED_EXIT_CODE`] when another process with the same
//! identity took over under the tenant's single-active-session policy, so a service manager can
//! tell "replaced" from "failed" and not restart it into a tug of war.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use inbox_api::{ProblemCode, ResyncResponse};
use inbox_client::local_daemon::{DaemonHints, Identity, LocalDaemon};
use inbox_client::schedule::{Backoff, PollSchedule, TransportPolicy};
use inbox_client::{
    Agent, AgentConfig, ClientError, ContinueAfterReset, Done, Event, Handler, HandlerError, Home,
    LocalState, PROCESSED_CAPACITY_DEFAULT, Resync, TransportConfig, TransportKind,
};

use crate::batch::{Batcher, ExitOutcome};
use crate::cli::{ListenArgs, ListenOptions};
use crate::connect::{connect, duration, with_profile_signing_key};
use crate::exec::{Finished, run_with_stdin, shell};
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
    config.transport.local_daemon = local_daemon(&args)?;
    let codes = ExitCodes::of(&args.options)?;
    let retry_after = duration("--retry-after", &args.options.retry_after)?;
    let batch = args.options.batch.map(|max| {
        // Every event of a batch is a running handler, its lease heartbeated meanwhile.
        config.concurrency = config.concurrency.max(usize::from(max));
        let exit: ExitOutcome =
            Arc::new(move |finished| exit_outcome(finished, codes, retry_after).map(Done::from));
        Batcher::start(args.options.exec.clone(), usize::from(max), retry_after, exit)
    });
    let handler = ExecHandler { command: args.options.exec.clone(), codes, retry_after, batch };
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
        quarantined = summary.quarantined,
        deduplicated = summary.deduplicated,
        unconfirmed = summary.unconfirmed,
        "stopped"
    );
    Ok(())
}

/// The local wake daemon to hear hints from first: for a login profile, unless `--no-daemon`
/// or a transport worse than SSE was asked for (the daemon speaks only for profiles; a fixed
/// `--token` names none).
fn local_daemon(args: &ListenArgs) -> anyhow::Result<Option<DaemonHints>> {
    let best = TransportKind::parse(&args.options.transport);
    if args.connect.token.is_some()
        || args.options.no_daemon
        || !matches!(best, Some(TransportKind::Sse | TransportKind::Daemon))
    {
        return Ok(None);
    }
    let home = Home::from_env()?;
    let profile = &args.connect.profile.profile;
    let record = home.load_profile(profile)?;
    Ok(Some(DaemonHints {
        daemon: LocalDaemon::from_env(&home),
        identity: Identity::of_profile(profile, &record, args.connect.server.as_deref()),
    }))
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
        TransportKind::Daemon | TransportKind::Sse => {
            vec![TransportKind::Sse, TransportKind::LongPoll, TransportKind::Poll]
        }
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
pub(crate) async fn shutdown_signal() {
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
    codes: ExitCodes,
    retry_after: Duration,
    /// `--batch N`: events go to one run of the command per batch.
    batch: Option<Batcher>,
}

impl Handler for ExecHandler {
    async fn handle(&self, event: Event) -> Result<Done, HandlerError> {
        if let Some(batch) = &self.batch {
            return batch.handle(event).await;
        }
        let mut command = shell(&self.command);
        command
            .env("AGENT_INBOX_EVENT_ID", event.event_id().to_string())
            .env("AGENT_INBOX_EVENT_TYPE", event.event_type())
            .env("AGENT_INBOX_INBOX_SEQ", event.inbox_seq().to_string())
            .env("AGENT_INBOX_DELIVERY_ATTEMPT", event.envelope.delivery_attempts.to_string());
        let finished = run_with_stdin(command, event.to_json())
            .await
            .map_err(|err| HandlerError::retry(self.retry_after, format!("cannot run the command: {err}")))?;
        exit_outcome(&finished, self.codes, self.retry_after).map(Done::from)
    }
}

/// The exit codes that mean something other than success or failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ExitCodes {
    retry: i32,
    /// `None` for `--on-resync`, which cannot quarantine anything.
    quarantine: Option<i32>,
}

impl ExitCodes {
    fn of(options: &ListenOptions) -> anyhow::Result<ExitCodes> {
        let (retry, quarantine) = (options.retry_exit_code, options.quarantine_exit_code);
        if retry == quarantine {
            bail!("--retry-exit-code and --quarantine-exit-code are both {retry}; give them different codes");
        }
        for (flag, code) in [("--retry-exit-code", retry), ("--quarantine-exit-code", quarantine)] {
            if !(1..=255).contains(&code) {
                bail!("{flag} must be an exit code from 1 to 255 (got {code})");
            }
        }
        Ok(ExitCodes { retry, quarantine: Some(quarantine) })
    }
}

/// What an exit status means: `None` is death by a signal (an OOM kill, our own shutdown),
/// which is worth a retry.
fn exit_outcome(finished: &Finished, codes: ExitCodes, retry_after: Duration) -> Result<(), HandlerError> {
    match finished.code {
        Some(0) => Ok(()),
        Some(code) if code == codes.retry => {
            Err(HandlerError::retry(retry_after, format!("the command exited with {code} (retry)")))
        }
        Some(code) if Some(code) == codes.quarantine => Err(HandlerError::quarantine(
            finished.last_stderr_line.clone().unwrap_or_else(|| format!("the command exited with {code}")),
        )),
        Some(code) => Err(HandlerError::permanent(match &finished.last_stderr_line {
            Some(line) => format!("the command exited with {code}: {line}"),
            None => format!("the command exited with {code}"),
        })),
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
        let finished = run_with_stdin(shell(command), json)
            .await
            .map_err(|err| HandlerError::retry(retry, format!("cannot run --on-resync: {err}")))?;
        exit_outcome(&finished, ExitCodes { retry: 75, quarantine: None }, retry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: Option<i32>, stderr: Option<&str>) -> Finished {
        Finished { code, last_stderr_line: stderr.map(str::to_owned) }
    }

    #[test]
    fn exit_codes_map_to_ack_retry_quarantine_and_failure() {
        let after = Duration::from_secs(30);
        let codes = ExitCodes { retry: 75, quarantine: Some(65) };
        assert_eq!(exit_outcome(&exited(Some(0), None), codes, after), Ok(()));
        assert!(matches!(
            exit_outcome(&exited(Some(75), None), codes, after),
            Err(HandlerError::Retry { after: a, .. }) if a == after
        ));
        assert!(matches!(
            exit_outcome(&exited(Some(3), None), codes, after),
            Err(HandlerError::Permanent { .. })
        ));
        let other = ExitCodes { retry: 99, quarantine: Some(65) };
        assert!(matches!(
            exit_outcome(&exited(Some(75), None), other, after),
            Err(HandlerError::Permanent { .. })
        ));
        assert!(matches!(exit_outcome(&exited(None, None), codes, after), Err(HandlerError::Retry { .. })));
    }

    #[test]
    fn quarantine_and_failure_take_their_reason_from_stderr() {
        let after = Duration::from_secs(30);
        let codes = ExitCodes { retry: 75, quarantine: Some(65) };
        assert_eq!(
            exit_outcome(&exited(Some(65), Some("looks like a prompt injection")), codes, after),
            Err(HandlerError::quarantine("looks like a prompt injection"))
        );
        assert_eq!(
            exit_outcome(&exited(Some(65), None), codes, after),
            Err(HandlerError::quarantine("the command exited with 65"))
        );
        assert_eq!(
            exit_outcome(&exited(Some(3), Some("no such customer")), codes, after),
            Err(HandlerError::permanent("the command exited with 3: no such customer"))
        );
        let resync = ExitCodes { retry: 75, quarantine: None };
        assert!(matches!(
            exit_outcome(&exited(Some(65), None), resync, after),
            Err(HandlerError::Permanent { .. })
        ));
    }
}
