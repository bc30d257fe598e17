//! Login profiles on disk: where an agent's profiles, secrets and local state live
//! ([`Home`]), what `login` records ([`Profile`]), and `login`/`logout` themselves. Above
//! `api` and `credentials`: a login proves its refresh token with a real call.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::api::{Api, check_base_url};
use crate::credentials::{Credentials, RefreshLock, blocking, explain_refresh_failure, refresh};
use crate::error::ClientError;
use crate::secret_store::{Secret, SecretStore, SecretStoreKind, create_private_dir};
use crate::signing::RequestSigningKey;

/// Where an agent's profiles, refresh-token files and local state live: `AGENT_INBOX_HOME`,
/// else `$XDG_CONFIG_HOME/agent-inbox`, else `~/.config/agent-inbox`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    dir: PathBuf,
}

impl Home {
    pub fn at(dir: impl Into<PathBuf>) -> Home {
        Home { dir: dir.into() }
    }

    pub fn from_env() -> Result<Home, ClientError> {
        if let Some(dir) = std::env::var_os("AGENT_INBOX_HOME").filter(|d| !d.is_empty()) {
            return Ok(Home::at(dir));
        }
        if let Some(dir) = std::env::var_os("XDG_CONFIG_HOME").filter(|d| !d.is_empty()) {
            return Ok(Home::at(PathBuf::from(dir).join("agent-inbox")));
        }
        match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
            Some(home) => Ok(Home::at(PathBuf::from(home).join(".config").join("agent-inbox"))),
            None => Err(ClientError::Config(
                "cannot tell where to keep credentials: set AGENT_INBOX_HOME or HOME".to_owned(),
            )),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn profile_path(&self, profile: &str) -> PathBuf {
        self.dir.join(format!("{profile}.json"))
    }

    pub fn refresh_token_path(&self, profile: &str) -> PathBuf {
        self.dir.join(format!("{profile}.refresh-token"))
    }

    pub fn state_path(&self, profile: &str) -> PathBuf {
        self.dir.join(format!("{profile}.state.db"))
    }

    pub fn signing_key_path(&self, profile: &str) -> PathBuf {
        self.dir.join(format!("{profile}.signing-key"))
    }

    fn lock_path(&self, profile: &str) -> PathBuf {
        self.dir.join(format!("{profile}.refresh.lock"))
    }

    pub fn secret_store(&self, profile: &str, kind: SecretStoreKind) -> SecretStore {
        SecretStore::new(kind, profile, self.refresh_token_path(profile))
    }

    /// The slot of a profile's request-signing key: the store that holds its refresh token
    /// (account `<profile>.signing-key`), or a 0600 file beside the refresh token's.
    pub fn signing_key_store(&self, profile: &str, kind: SecretStoreKind) -> SecretStore {
        SecretStore::new(kind, &format!("{profile}.signing-key"), self.signing_key_path(profile))
            .holding("request signing key")
    }

    /// The request-signing key stored for `profile`, if any.
    pub async fn load_signing_key(
        &self,
        profile: &str,
        kind: SecretStoreKind,
    ) -> Result<Option<RequestSigningKey>, ClientError> {
        check_profile_name(profile)?;
        let store = self.signing_key_store(profile, kind);
        match blocking(move || store.load()).await? {
            Some(secret) => RequestSigningKey::from_secret(&secret).map(Some),
            None => Ok(None),
        }
    }

    /// Stores `key` as the profile's request-signing key, replacing any other.
    pub async fn save_signing_key(
        &self,
        profile: &str,
        kind: SecretStoreKind,
        key: &RequestSigningKey,
    ) -> Result<(), ClientError> {
        check_profile_name(profile)?;
        let (store, secret) = (self.signing_key_store(profile, kind), key.to_secret());
        blocking(move || store.save(&secret)).await
    }

    /// Removes the profile's request-signing key; removing nothing is fine.
    pub async fn delete_signing_key(&self, profile: &str, kind: SecretStoreKind) -> Result<(), ClientError> {
        check_profile_name(profile)?;
        let store = self.signing_key_store(profile, kind);
        blocking(move || store.delete()).await
    }

    pub fn load_profile(&self, profile: &str) -> Result<Profile, ClientError> {
        check_profile_name(profile)?;
        let path = self.profile_path(profile);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Err(ClientError::Credentials(format!(
                    "not logged in (no profile {profile:?} in {}); run: agent-inbox login --server URL",
                    self.dir.display()
                )));
            }
            Err(err) => {
                return Err(ClientError::Config(format!("cannot read {}: {err}", path.display())));
            }
        };
        serde_json::from_str(&text).map_err(|err| {
            ClientError::Config(format!("{} is not a profile ({err}); log in again", path.display()))
        })
    }

    pub fn save_profile(&self, profile: &str, value: &Profile) -> Result<(), ClientError> {
        check_profile_name(profile)?;
        create_private_dir(&self.dir)
            .map_err(|err| ClientError::Config(format!("cannot create {}: {err}", self.dir.display())))?;
        let path = self.profile_path(profile);
        let text = serde_json::to_string_pretty(value).expect("a profile serializes");
        let temporary = self.dir.join(format!(".{profile}.json.{}.tmp", std::process::id()));
        std::fs::write(&temporary, text + "\n")
            .and_then(|()| std::fs::rename(&temporary, &path))
            .map_err(|err| ClientError::Config(format!("cannot write {}: {err}", path.display())))
    }

    /// The profile and credentials that refresh through its stored refresh token.
    pub fn credentials(&self, profile: &str) -> Result<(Profile, Credentials), ClientError> {
        let loaded = self.load_profile(profile)?;
        let store = self.secret_store(profile, loaded.secret_store);
        Ok((loaded, Credentials::refreshing(store, self.lock_path(profile))))
    }
}

/// What `login` records next to the secret: where the service is, who we are there, and which
/// store holds the refresh token. Holds no secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    pub server_url: String,
    pub secret_store: SecretStoreKind,
    pub tenant_id: String,
    pub agent_id: String,
}

/// What a successful login did.
#[derive(Debug, Clone)]
pub struct LoginReport {
    pub profile: Profile,
    /// Where the refresh token now is, for a person.
    pub stored_in: String,
    /// Set when the OS store was present but refused, and the file was used instead.
    pub fell_back: Option<String>,
    /// A connection with the access token the login obtained (not refreshed): for follow-up
    /// calls such as registering a signing key.
    pub api: Api,
}

/// Logs in: trades `refresh_token` for fresh tokens (proving it works and rotating it at
/// once, so the pasted copy is spent), stores the new refresh token, and records the profile.
/// `store` is the preferred secret store; `None` picks the OS store when there is one.
pub async fn login(
    home: &Home,
    profile: &str,
    server_url: &str,
    refresh_token: Secret,
    store: Option<SecretStoreKind>,
) -> Result<LoginReport, ClientError> {
    check_profile_name(profile)?;
    let base = check_base_url(server_url)?;
    let file = home.refresh_token_path(profile);
    let mut secrets = match store {
        Some(kind) => SecretStore::new(kind, profile, file),
        None => SecretStore::detect(profile, file),
    };
    // Prove the store works before spending the token: store the one we were given (it is
    // about to be replaced). If the OS store refuses and no store was asked for, use the file.
    let mut fell_back = None;
    let probe = {
        let (secrets, token) = (secrets.clone(), refresh_token.clone());
        blocking(move || secrets.save(&token)).await
    };
    if let Err(err) = probe {
        if store.is_some() || secrets.kind() == SecretStoreKind::File {
            return Err(err);
        }
        fell_back = Some(err.to_string());
        secrets = secrets.file_fallback();
        let (secrets, token) = (secrets.clone(), refresh_token.clone());
        blocking(move || secrets.save(&token)).await?;
    }
    let _lock = RefreshLock::acquire(&home.lock_path(profile)).await?;
    let http = reqwest::Client::new();
    let tokens = refresh(&http, &base, &refresh_token).await.map_err(explain_refresh_failure)?;
    let rotated =
        tokens.refresh_token.clone().map(Secret::new).ok_or_else(|| {
            ClientError::Protocol("the refresh answer carried no new refresh token".to_owned())
        })?;
    {
        let (secrets, rotated) = (secrets.clone(), rotated);
        blocking(move || secrets.save(&rotated)).await?;
    }
    let api = Api::new(&base, Credentials::access_token(Secret::new(tokens.access_token)))?;
    let head = api.head().await?;
    let record = Profile {
        server_url: base,
        secret_store: secrets.kind(),
        tenant_id: head.tenant_id.to_string(),
        agent_id: head.recipient_id.to_string(),
    };
    home.save_profile(profile, &record)?;
    Ok(LoginReport { profile: record, stored_in: secrets.describe(), fell_back, api })
}

/// Removes a profile's refresh token, request-signing key and record. The signing key stays
/// registered with the service: retire it first ([`Api::retire_signing_key`]).
pub fn logout(home: &Home, profile: &str) -> Result<(), ClientError> {
    let loaded = home.load_profile(profile)?;
    home.secret_store(profile, loaded.secret_store).delete()?;
    home.signing_key_store(profile, loaded.secret_store).delete()?;
    std::fs::remove_file(home.profile_path(profile))
        .map_err(|err| ClientError::Config(format!("cannot remove the profile: {err}")))
}

fn check_profile_name(profile: &str) -> Result<(), ClientError> {
    let ok = !profile.is_empty()
        && profile.len() <= 64
        && profile.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(ClientError::Config(format!("profile {profile:?} must be 1 to 64 letters, digits, '-' or '_'")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_names_are_plain_words() {
        assert!(check_profile_name("default").is_ok());
        assert!(check_profile_name("agent_alpha-2").is_ok());
        assert!(check_profile_name("../etc").is_err());
        assert!(check_profile_name("").is_err());
    }

    #[tokio::test]
    async fn a_signing_key_is_kept_in_its_own_owner_only_slot() {
        let dir = std::env::temp_dir().join(format!("inbox-client-signing-{}", std::process::id()));
        let home = Home::at(&dir);
        assert!(home.load_signing_key("default", SecretStoreKind::File).await.unwrap().is_none());
        let key = RequestSigningKey::generate_ed25519().unwrap();
        home.save_signing_key("default", SecretStoreKind::File, &key).await.unwrap();
        let loaded = home.load_signing_key("default", SecretStoreKind::File).await.unwrap().unwrap();
        assert_eq!((loaded.key_id(), loaded.public_key()), (key.key_id(), key.public_key()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(home.signing_key_path("default")).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(!home.refresh_token_path("default").exists(), "a slot of its own");
        home.delete_signing_key("default", SecretStoreKind::File).await.unwrap();
        assert!(home.load_signing_key("default", SecretStoreKind::File).await.unwrap().is_none());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn profiles_round_trip_and_a_missing_one_says_to_log_in() {
        let dir = std::env::temp_dir().join(format!("inbox-client-home-{}", std::process::id()));
        let home = Home::at(&dir);
        let missing = home.load_profile("default").unwrap_err().to_string();
        assert!(missing.contains("agent-inbox login"), "{missing}");
        let profile = Profile {
            server_url: "http://127.0.0.1:8080".into(),
            secret_store: SecretStoreKind::File,
            tenant_id: "demo".into(),
            agent_id: "agent_alpha".into(),
        };
        home.save_profile("default", &profile).unwrap();
        assert_eq!(home.load_profile("default").unwrap(), profile);
        let _ = std::fs::remove_dir_all(dir);
    }
}
