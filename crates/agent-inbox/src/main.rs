//! `agent-inbox`: the one binary. `serve` runs the service, `migrate` applies the schema,
//! `token issue` prints an access token (and optionally a refresh token) for an operator.
//! The agent side: `login` stores credentials, `listen` runs a command per event, `wait`
//! blocks until work exists, `service` installs `listen` as a user service, `mcp` serves the
//! inbox as Model Context Protocol tools to a language-model client. `admin` is the operators'
//! view of a running service: inboxes, events and their history, parked events, quarantine.

mod admin;
mod archive;
mod batch;
mod cli;
mod connect;
mod daemon;
mod exec;
mod keys;
mod listen;
mod login;
mod mcp;
mod open_files;
mod progress;
mod serve;
mod service;
mod token;
mod wait;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

/// How long what a command leaves running on the runtime gets to stop once the command is
/// done. Spawned tasks are dropped at their next await; this bounds the exit only if one never
/// gets there (issue 40: a pool task of sqlx that spun held `token issue` for 14 minutes).
const RUNTIME_SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    // `wait` reserves exit code 1 for "no work before the timeout"; its errors exit 2.
    let error_code = if matches!(cli.command, cli::Command::Wait(_)) { 2 } else { 1 };
    let result = runtime.block_on(async move {
        match cli.command {
            cli::Command::Serve(args) => serve::serve(args).await.map(|()| ExitCode::SUCCESS),
            cli::Command::Migrate(args) => serve::migrate(args).await.map(|()| ExitCode::SUCCESS),
            cli::Command::Token { command: cli::TokenCommand::Issue(args) } => {
                token::issue(args).await.map(|()| ExitCode::SUCCESS)
            }
            cli::Command::Login(args) => login::login(args).await.map(|()| ExitCode::SUCCESS),
            cli::Command::Logout(args) => login::logout(args).await.map(|()| ExitCode::SUCCESS),
            cli::Command::Listen(args) => listen::listen(args).await.map(|()| ExitCode::SUCCESS),
            cli::Command::Wait(args) => wait::wait(args).await,
            cli::Command::Daemon(args) => daemon::run(args).await,
            cli::Command::Mcp(args) => mcp::run(args).await.map(|()| ExitCode::SUCCESS),
            cli::Command::Service { command } => service::run(command).map(|()| ExitCode::SUCCESS),
            cli::Command::Keys { command } => keys::run(command).await.map(|()| ExitCode::SUCCESS),
            cli::Command::Admin(args) => admin::run(args).await.map(|()| ExitCode::SUCCESS),
            cli::Command::Archive { command: cli::ArchiveCommand::Export(args) } => {
                archive::export(args).await.map(|()| ExitCode::SUCCESS)
            }
        }
    });
    let stopping = Instant::now();
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN_WAIT);
    if stopping.elapsed() >= RUNTIME_SHUTDOWN_WAIT {
        eprintln!(
            "warning: work left running did not stop within {}s; exiting without it",
            RUNTIME_SHUTDOWN_WAIT.as_secs()
        );
    }
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(listen::exit_code(&err).unwrap_or(error_code))
        }
    }
}
