//! How the agent commands find their service and credentials: a fixed access token (with
//! `--server`), or a stored login profile whose refresh token is rotated as it is used, and
//! whose request-signing key (if `login` set one up) signs the critical calls.

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

/// `api` signing with the profile's request-signing key, when the profile's credentials are in
/// use and `login` stored a key; otherwise `api` as it is.
pub async fn with_profile_signing_key(args: &ConnectArgs, api: Api) -> anyhow::Result<Api> {
    if args.token.is_some() {
        return Ok(api);
    }
    let profile = &args.profile.profile;
    let home = Home::from_env()?;
    let kind = home.load_profile(profile)?.secret_store;
    let key = home.load_signing_key(profile, kind).await.context("cannot read the profile's signing key")?;
    Ok(match key {
        Some(key) => api.with_signing_key(key),
        None => api,
    })
}

/// Parses a human duration flag such as `30s` or `5m`.
pub fn duration(flag: &str, value: &str) -> anyhow::Result<std::time::Duration> {
    inbox_server::config::parse_duration(value).map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}
