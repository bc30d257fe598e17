//! `wait`: for scripts. Blocks until a claimable event waits in the agent's inbox (exit 0,
//! printing how many), or until `--timeout` passes with none (exit 1). Errors exit 2.

use std::process::ExitCode;
use std::time::Duration;

use inbox_client::schedule::Backoff;
use inbox_client::wait_for_work;

use crate::cli::WaitArgs;
use crate::connect::{connect, duration};

/// "Indefinitely", in practice.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 86_400);

pub async fn wait(args: WaitArgs) -> anyhow::Result<ExitCode> {
    let timeout = args.timeout.as_deref().map(|t| duration("--timeout", t)).transpose()?;
    let connection = connect(&args.connect)?;
    let backoff = Backoff { base: Duration::from_secs(1), max: Duration::from_secs(60) };
    let found = wait_for_work(&connection.api, timeout.unwrap_or(FOREVER), backoff).await?;
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
