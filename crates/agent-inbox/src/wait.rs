//! `wait`: for scripts. Blocks until a claimable event waits in the agent's inbox (exit 0,
//! printing how many), until `--timeout` passes with none (exit 1), or until the service has
//! not answered for `--unreachable-after` (exit [`UNREACHABLE_EXIT_CODE`], saying on stderr
//! what did not answer and since when). Errors exit 2.
//!
//! With a login profile it asks the local wake daemon first (`agent-inbox daemon`), which
//! answers from the one stream it holds for the profile, so this process opens no connection;
//! when the daemon is absent, stale or refuses, it asks the service itself, with the same
//! answer. `--no-daemon` always asks the service; a fixed `--token` does too (the daemon
//! serves login profiles). A daemon that cannot reach the service answers `stale`, so an
//! unreachable service is always found by this process's own looks.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use inbox_client::local_daemon::{AnsweredBy, DaemonError, Identity, LocalDaemon, wait_for_work_local_first};
use inbox_client::schedule::Backoff;
use inbox_client::{ClientError, Home, ServiceUnreachable, WaitOutcome};

use crate::cli::WaitArgs;
use crate::connect::{connect, duration};

/// The exit code of a `wait` that found the service unreachable: sysexits.h's EX_UNAVAILABLE
/// ("a service is unavailable"), a code scripts and service managers already read that way.
/// Not 1 (no work) or 2 (an error), and not 3, which `listen` exits with when another session
/// took over.
pub const UNREACHABLE_EXIT_CODE: u8 = 69;

/// `--unreachable-after` unless given: a restart (seconds) is ridden out many times over, and a
/// script still learns of an outage within half a minute.
const UNREACHABLE_AFTER_DEFAULT: Duration = Duration::from_secs(30);

/// "Indefinitely", in practice.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 86_400);

pub async fn wait(args: WaitArgs) -> anyhow::Result<ExitCode> {
    let timeout = args.timeout.as_deref().map(|t| duration("--timeout", t)).transpose()?;
    let unreachable_after = match args.unreachable_after.as_deref() {
        None => UNREACHABLE_AFTER_DEFAULT,
        Some("never") => FOREVER,
        Some(text) => duration("--unreachable-after", text)?,
    };
    let connection = connect(&args.connect)?;
    let daemon = match (&args.connect.token, args.no_daemon) {
        (None, false) => {
            let home = Home::from_env()?;
            let profile = &args.connect.profile.profile;
            let record = home.load_profile(profile)?;
            let identity = Identity::of_profile(profile, &record, args.connect.server.as_deref());
            Some((LocalDaemon::from_env(&home), identity))
        }
        _ => None,
    };
    // While the service does not answer, it is asked every 0.5-2 s, as `listen` asks it.
    let (outcome, answered_by) = wait_for_work_local_first(
        daemon.as_ref().map(|(daemon, identity)| (daemon, identity)),
        &connection.api,
        timeout.unwrap_or(FOREVER),
        unreachable_after,
        Backoff::OUTAGE,
    )
    .await?;
    if let AnsweredBy::Service(Some(why)) = &answered_by
        && !matches!(why, DaemonError::Absent { .. })
    {
        // A daemon that is there but could not answer is worth a word; no daemon is normal.
        eprintln!("note: {why}; asked the service directly");
    }
    match outcome {
        WaitOutcome::Work(n) => {
            println!("{n}{} event(s) waiting", if n >= 100 { "+" } else { "" });
            Ok(ExitCode::SUCCESS)
        }
        WaitOutcome::Timeout => {
            eprintln!("no work arrived within {}", humantime::format_duration(timeout.unwrap_or(FOREVER)));
            Ok(ExitCode::from(1))
        }
        WaitOutcome::Unreachable(unreachable) => {
            eprintln!("{}", unreachable_line(connection.api.base_url(), &unreachable, &answered_by));
            Ok(ExitCode::from(UNREACHABLE_EXIT_CODE))
        }
    }
}

/// What did not answer, since when, and the last failure, in one line.
fn unreachable_line(server_url: &str, unreachable: &ServiceUnreachable, answered_by: &AnsweredBy) -> String {
    let unanswered_for = Duration::from_secs(unreachable.unanswered_for.as_secs());
    let since = SystemTime::now().checked_sub(unreachable.unanswered_for).unwrap_or(SystemTime::UNIX_EPOCH);
    let last = match &unreachable.last_error {
        ClientError::Unreachable(why) => why.clone(),
        ClientError::Refused { problem } => format!("answered {} {}", problem.status, problem.code),
        other => other.to_string(),
    };
    let daemon = match answered_by {
        AnsweredBy::Service(Some(DaemonError::Absent { path, .. })) => {
            format!("; no local daemon answers at {} either", path.display())
        }
        _ => String::new(),
    };
    format!(
        "the service at {server_url} is unreachable: no answer since {} ({} without one; last: {last}){daemon}; whether work waits is unknown: check that the service runs at that address",
        humantime::format_rfc3339_seconds(since),
        humantime::format_duration(unanswered_for),
    )
}
