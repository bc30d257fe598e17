//! `wait`: for scripts. Blocks until a claimable event waits in the agent's inbox (exit 0,
//! printing how many), or until `--timeout` passes with none (exit 1). Errors exit 2.
//!
//! With a login profile it asks the local wake daemon first (`agent-inbox daemon`), which
//! answers from the one stream it holds for the profile, so this process opens no connection;
//! when the daemon is absent, stale or refuses, it asks the service itself, with the same
//! answer. `--no-daemon` always asks the service; a fixed `--token` does too (the daemon
//! serves login profiles).

use std::process::ExitCode;
use std::time::Duration;

use inbox_client::Home;
use inbox_client::local_daemon::{AnsweredBy, DaemonError, Identity, LocalDaemon, wait_for_work_local_first};
use inbox_client::schedule::Backoff;

use crate::cli::WaitArgs;
use crate::connect::{connect, duration};

/// "Indefinitely", in practice.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 86_400);

pub async fn wait(args: WaitArgs) -> anyhow::Result<ExitCode> {
    let timeout = args.timeout.as_deref().map(|t| duration("--timeout", t)).transpose()?;
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
    let backoff = Backoff { base: Duration::from_secs(1), max: Duration::from_secs(60) };
    let (found, answered_by) = wait_for_work_local_first(
        daemon.as_ref().map(|(daemon, identity)| (daemon, identity)),
        &connection.api,
        timeout.unwrap_or(FOREVER),
        backoff,
    )
    .await?;
    if let AnsweredBy::Service(Some(why)) = &answered_by
        && !matches!(why, DaemonError::Absent { .. })
    {
        // A daemon that is there but could not answer is worth a word; no daemon is normal.
        eprintln!("note: {why}; asked the service directly");
    }
    match found {
        Some(n) => {
            println!("{n}{} event(s) waiting", if n >= 100 { "+" } else { "" });
            Ok(ExitCode::SUCCESS)
        }
        None => {
            eprintln!("no work arrived within {}", humantime::format_duration(timeout.unwrap_or(FOREVER)));
            Ok(ExitCode::from(1))
        }
    }
}
