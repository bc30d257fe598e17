//! How the agent commands find their service and credentials: a fixed access token (with
//! `--server`), or a stored login profile whose refresh token is rotated as it is used.

use std::path::PathBuf;

use anyhow::Context as _;
use inbox_client::{Api, Credentials, Home, Secret};

use crate::cli::ConnectArgs;

/// A ready connection and the local state file to use with it.
#[derive(Debug)]
pub struct Connection {
    pub api: Api,
    pub state_path: PathBuf,
}

pub fn connect(args: &ConnectArgs) -> anyhow::Result<Connection> {
    let profile = &args.profile.profile;
    let home = Home::from_env()?;
    let state_path = args.state.clone().unwrap_or_else(|| home.state_path(profile));
    let api = match &args.token {
        Some(token) => {
            let server = match &args.server {
                Some(server) => server.clone(),
                None => home
                    .load_profile(profile)
                    .map(|p| p.server_url)
                    .context("--token needs --server (or a profile that names the service)")?,
            };
            Api::new(&server, Credentials::access_token(Secret::new(token.trim())))?
        }
        None => {
            let (stored, credentials) = home.credentials(profile)?;
            let server = args.server.clone().unwrap_or(stored.server_url);
            Api::new(&server, credentials)?
        }
    };
    Ok(Connection { api, state_path })
}

/// Parses a human duration flag such as `30s` or `5m`.
pub fn duration(flag: &str, value: &str) -> anyhow::Result<std::time::Duration> {
    humantime::parse_duration(value)
        .with_context(|| format!("{flag} {value:?} is not a duration such as 30s or 5m"))
}
