//! `login` and `logout`: keep a service address and a rotating refresh token for the other
//! agent commands. The token is read from stdin unless given as a flag, spent at once (which
//! proves it works), and its successor stored in the OS secret store or a 0600 file.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use anyhow::{Context as _, bail};
use inbox_client::{Home, Secret, SecretStoreKind};

use crate::cli::{LoginArgs, ProfileArgs};

pub async fn login(args: LoginArgs) -> anyhow::Result<()> {
    let preference = match args.secret_store.as_str() {
        "auto" => None,
        other => Some(SecretStoreKind::parse(other).with_context(|| {
            format!("--secret-store {other:?} is not one of auto, secret-tool, keychain, file")
        })?),
    };
    let token = match args.refresh_token.as_deref() {
        Some(token) if token != "-" => token.trim().to_owned(),
        _ => read_token_from_stdin()?,
    };
    if token.is_empty() {
        bail!("no refresh token given; pipe it in, or pass --refresh-token");
    }
    let home = Home::from_env()?;
    let report =
        inbox_client::login(&home, &args.profile.profile, &args.server, Secret::new(token), preference)
            .await
            .context("login failed")?;
    if let Some(reason) = &report.fell_back {
        eprintln!("note: the OS secret store did not work ({reason}); using a file instead");
    }
    println!(
        "logged in to {} as {} (tenant {}); the refresh token is in {}",
        report.profile.server_url, report.profile.agent_id, report.profile.tenant_id, report.stored_in
    );
    Ok(())
}

pub fn logout(args: ProfileArgs) -> anyhow::Result<()> {
    let home = Home::from_env()?;
    inbox_client::logout(&home, &args.profile)?;
    println!("logged out: profile {} and its refresh token removed", args.profile);
    Ok(())
}

fn read_token_from_stdin() -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("refresh token: ");
        std::io::stderr().flush().ok();
    }
    let mut line = String::new();
    stdin.lock().read_line(&mut line).context("cannot read the refresh token from stdin")?;
    Ok(line.trim().to_owned())
}
