//! `agent-inbox daemon`: the local wake daemon. One resident process per user follows each
//! login profile's inbox with one outbound stream (SSE, then long poll, as `listen` does, with
//! the profile's refreshing credentials) and answers local clients on a Unix domain socket in
//! the user's runtime directory: `wait` asks it first, `daemon watch` prints each new head. It
//! tells; it never claims, so every lease belongs to the process doing the work.
//!
//! `daemon status` and `daemon watch` are its clients. The protocol is
//! `inbox_client::local_daemon::protocol`; the socket's path is
//! `inbox_client::local_daemon::socket_path`.

#[cfg(unix)]
mod connection;
#[cfg(unix)]
mod identities;
#[cfg(unix)]
mod listener;
#[cfg(unix)]
mod peer;
pub mod units;

use std::process::ExitCode;

use anyhow::Context as _;
use inbox_client::Home;
use inbox_client::local_daemon::{DaemonError, Identity, LocalDaemon, protocol};

use crate::cli::{DaemonArgs, DaemonCommand, DaemonWatchArgs};

#[cfg(target_os = "macos")]
pub use listener::LAUNCHD_SOCKET_NAME;

/// The exit code of `daemon watch` and `daemon status` when no daemon answers.
pub const NO_DAEMON_EXIT_CODE: u8 = 2;

pub async fn run(args: DaemonArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        Some(DaemonCommand::Status) => status().await,
        Some(DaemonCommand::Watch(watch_args)) => watch(watch_args).await,
        None => serve(args.run).await.map(|()| ExitCode::SUCCESS),
    }
}

async fn status() -> anyhow::Result<ExitCode> {
    let daemon = LocalDaemon::from_env(&Home::from_env()?);
    match daemon.status().await {
        Ok(status) => {
            println!("{}", serde_json::to_string_pretty(&status).expect("a status serializes"));
            Ok(ExitCode::SUCCESS)
        }
        Err(err) => {
            eprintln!("{err}");
            Ok(ExitCode::from(NO_DAEMON_EXIT_CODE))
        }
    }
}

/// Prints one line per new head: the head alone, or (`--json`) the daemon's hint line. A
/// daemon whose view goes stale is asked again a second later; a daemon that goes away ends
/// the watch with exit code 2.
async fn watch(args: DaemonWatchArgs) -> anyhow::Result<ExitCode> {
    use std::io::Write as _;
    let home = Home::from_env()?;
    let profile = &args.profile.profile;
    let record = home.load_profile(profile)?;
    let identity = Identity::of_profile(profile, &record, None);
    let daemon = LocalDaemon::from_env(&home);
    let mut printed = None::<u64>;
    loop {
        let (mut watching, head) = match daemon.watch(&identity).await {
            Ok(watching) => watching,
            Err(DaemonError::Refused { code: protocol::ErrorCode::Stale, .. }) => {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
            Err(err) => {
                eprintln!("{err}");
                return Ok(ExitCode::from(NO_DAEMON_EXIT_CODE));
            }
        };
        let mut last = printed.unwrap_or(head);
        loop {
            let hint = match watching.next().await {
                Ok(hint) => hint,
                Err(DaemonError::Refused { code: protocol::ErrorCode::Stale, .. }) => break,
                Err(err) => {
                    eprintln!("{err}");
                    return Ok(ExitCode::from(NO_DAEMON_EXIT_CODE));
                }
            };
            let line = if args.json {
                protocol::answer_line(&protocol::Answer::Hint {
                    head_seq: hint.head_seq,
                    claimable: hint.claimable,
                })
            } else {
                format!("{}\n", hint.head_seq)
            };
            let mut stdout = std::io::stdout().lock();
            if stdout.write_all(line.as_bytes()).and_then(|()| stdout.flush()).is_err() {
                // The reader went away (a closed pipe): nothing left to tell.
                return Ok(ExitCode::SUCCESS);
            }
            last = last.max(hint.head_seq);
            printed = Some(last);
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

#[cfg(not(unix))]
async fn serve(_args: crate::cli::DaemonRunArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "the local wake daemon needs Unix domain sockets (Linux, macOS); on this system `wait` and `listen` ask the service directly"
    )
}

#[cfg(unix)]
async fn serve(args: crate::cli::DaemonRunArgs) -> anyhow::Result<()> {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::watch;

    use self::connection::Shared;
    use self::identities::Identities;
    use self::listener::Origin;

    let _log = inbox_server::logging::init(args.log_json, "info");
    let home = Home::from_env()?;
    let path = inbox_client::local_daemon::socket_path(&home);
    let listening = listener::listen(&path)?;
    let idle_exit = match args.idle_exit.as_deref() {
        Some("0") | Some("never") => None,
        Some(text) => Some(crate::connect::duration("--idle-exit", text)?),
        // Socket activation starts the daemon again on the next connection.
        None => (listening.origin == Origin::Inherited).then_some(IDLE_EXIT_ACTIVATED),
    };
    let uid = peer::own_uid().context("cannot tell which user this daemon runs as")?;
    let identities = Identities::new(home, args.profiles.clone());
    let followed = identities.start_all();
    let (clients, clients_seen) = watch::channel(0usize);
    let shared = Arc::new(Shared {
        identities,
        uid,
        socket: listening.path.display().to_string(),
        listener: listening.origin.as_str(),
        clients,
        waits_answered: Default::default(),
    });
    tracing::info!(
        socket = %listening.path.display(),
        listener = listening.origin.as_str(),
        profiles = %followed.join(","),
        idle_exit = idle_exit.map(|d| humantime::format_duration(d).to_string()).unwrap_or_else(|| "never".into()),
        "local wake daemon listening"
    );
    let clients_max = Arc::new(tokio::sync::Semaphore::new(CLIENTS_MAX));
    let mut shutdown = std::pin::pin!(crate::listen::shutdown_signal());
    let mut idle = std::pin::pin!(idle_for(clients_seen, idle_exit));
    let mut checks = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            accepted = listening.listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let shared = shared.clone();
                    match clients_max.clone().try_acquire_owned() {
                        Ok(permit) => {
                            shared.clients.send_modify(|n| *n += 1);
                            tokio::spawn(async move {
                                connection::serve(stream, shared.clone()).await;
                                shared.clients.send_modify(|n| *n -= 1);
                                drop(permit);
                            });
                        }
                        Err(_) => {
                            tokio::spawn(connection::refuse_busy(stream, CLIENTS_MAX));
                        }
                    }
                }
                Err(err) => {
                    // Out of descriptors, say: keep serving the clients there are.
                    tracing::warn!(error = %err, "cannot accept a local client");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = &mut shutdown => {
                tracing::info!("stopping");
                break;
            }
            _ = &mut idle => {
                tracing::info!("no local client for a while; exiting (socket activation starts the daemon again)");
                break;
            }
            _ = checks.tick() => if !listening.still_reachable() {
                tracing::warn!(socket = %listening.path.display(), "the socket was removed or replaced; no client can reach this daemon, so it exits");
                break;
            },
        }
    }
    Ok(())
}

/// Local clients served at once; one more is told so and hung up on.
#[cfg(unix)]
const CLIENTS_MAX: usize = 256;

/// How long a socket-activated daemon stays without local clients before it exits.
#[cfg(unix)]
pub const IDLE_EXIT_ACTIVATED: std::time::Duration = std::time::Duration::from_secs(600);

/// Completes once no client has been connected for `idle` (never when `None`).
#[cfg(unix)]
async fn idle_for(mut clients: tokio::sync::watch::Receiver<usize>, idle: Option<std::time::Duration>) {
    let Some(idle) = idle else { return std::future::pending().await };
    loop {
        while *clients.borrow_and_update() > 0 {
            if clients.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(idle) => return,
            _ = clients.changed() => {}
        }
    }
}
