//! Credentials: a fixed access token, or a login profile whose rotating refresh token (kept in
//! the secret store) buys short-lived access tokens before they expire. Each refresh token
//! works once, so the new one is made durable *before* the new access token is used, and
//! refreshes are serialized across processes sharing a profile by a lock file: two processes
//! spending the same refresh token would make the service revoke the whole token family.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use inbox_api::ProblemCode;
use serde::{Deserialize, Serialize};

use crate::api::{self, Api, check_base_url};
use crate::error::ClientError;
use crate::schedule::refresh_due;
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
    let tokens = api::refresh(&http, &base, &refresh_token).await.map_err(explain_refresh_failure)?;
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
        tenant_id: head.tenant_id,
        agent_id: head.recipient_id,
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

/// Access tokens for requests. Cheap to clone; clones share the cached token.
#[derive(Clone)]
pub struct Credentials {
    inner: Arc<Source>,
}

enum Source {
    Fixed(Secret),
    Refreshing(Refresher),
}

struct Refresher {
    store: SecretStore,
    lock_path: PathBuf,
    current: tokio::sync::Mutex<Option<AccessToken>>,
}

struct AccessToken {
    secret: Secret,
    obtained: Instant,
    lifetime: Duration,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.inner {
            Source::Fixed(_) => f.write_str("Credentials::AccessToken(<redacted>)"),
            Source::Refreshing(r) => write!(f, "Credentials::Refreshing({})", r.store.describe()),
        }
    }
}

impl Credentials {
    /// A fixed access token: it is never refreshed, so the agent stops when it expires.
    pub fn access_token(token: Secret) -> Credentials {
        Credentials { inner: Arc::new(Source::Fixed(token)) }
    }

    /// Access tokens bought with the refresh token in `store`, rotated on every refresh.
    pub fn refreshing(store: SecretStore, lock_path: PathBuf) -> Credentials {
        let refresher = Refresher { store, lock_path, current: tokio::sync::Mutex::new(None) };
        Credentials { inner: Arc::new(Source::Refreshing(refresher)) }
    }

    /// A token for the next request, refreshed first when it is close to expiry.
    pub(crate) async fn bearer(&self, http: &reqwest::Client, base: &str) -> Result<Secret, ClientError> {
        let refresher = match &*self.inner {
            Source::Fixed(token) => return Ok(token.clone()),
            Source::Refreshing(refresher) => refresher,
        };
        let mut current = refresher.current.lock().await;
        if let Some(token) = &*current {
            if !refresh_due(token.obtained.elapsed(), token.lifetime) {
                return Ok(token.secret.clone());
            }
        }
        let _lock = RefreshLock::acquire(&refresher.lock_path).await?;
        // Read the store under the lock: another process may have rotated the token since.
        let store = refresher.store.clone();
        let Some(refresh_token) = blocking(move || store.load()).await? else {
            return Err(ClientError::Credentials(format!(
                "no refresh token in {}; run: agent-inbox login",
                refresher.store.describe()
            )));
        };
        let obtained = Instant::now();
        let tokens = api::refresh(http, base, &refresh_token).await.map_err(explain_refresh_failure)?;
        let rotated = tokens.refresh_token.map(Secret::new).ok_or_else(|| {
            ClientError::Protocol("the refresh answer carried no new refresh token".to_owned())
        })?;
        let store = refresher.store.clone();
        blocking(move || store.save(&rotated)).await?;
        let secret = Secret::new(tokens.access_token);
        *current = Some(AccessToken {
            secret: secret.clone(),
            obtained,
            lifetime: Duration::from_secs(tokens.expires_in),
        });
        tracing::debug!(expires_in_seconds = tokens.expires_in, "access token refreshed");
        Ok(secret)
    }

    /// The service refused `used` as unauthorized: forget it so the next call refreshes.
    /// Returns whether retrying can help (it cannot with a fixed token).
    pub(crate) async fn invalidate(&self, used: &Secret) -> bool {
        match &*self.inner {
            Source::Fixed(_) => false,
            Source::Refreshing(refresher) => {
                let mut current = refresher.current.lock().await;
                if current.as_ref().is_some_and(|t| &t.secret == used) {
                    *current = None;
                }
                true
            }
        }
    }
}

fn explain_refresh_failure(err: ClientError) -> ClientError {
    match err.code() {
        Some(ProblemCode::InvalidRefreshToken | ProblemCode::RefreshTokenReused) => {
            ClientError::Credentials(format!(
                "the refresh token was refused ({}); log in again with a new one: agent-inbox login",
                err.code().map(ProblemCode::as_str).unwrap_or_default()
            ))
        }
        _ => err,
    }
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

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ClientError> + Send + 'static,
) -> Result<T, ClientError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| ClientError::SecretStore(format!("the secret store task failed: {err}")))?
}

/// A lock file held while a refresh token is spent and replaced. Created exclusively; removed
/// on drop; taken over when older than [`RefreshLock::STALE`] (its holder died mid-refresh).
struct RefreshLock {
    path: PathBuf,
}

impl RefreshLock {
    const STALE: Duration = Duration::from_secs(60);
    const WAIT_MAX: Duration = Duration::from_secs(90);

    async fn acquire(path: &Path) -> Result<RefreshLock, ClientError> {
        if let Some(dir) = path.parent() {
            create_private_dir(dir)
                .map_err(|err| ClientError::Config(format!("cannot create {}: {err}", dir.display())))?;
        }
        let started = Instant::now();
        loop {
            match std::fs::OpenOptions::new().write(true).create_new(true).open(path) {
                Ok(_) => return Ok(RefreshLock { path: path.to_owned() }),
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                    let age = std::fs::metadata(path)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|m| SystemTime::now().duration_since(m).ok());
                    if age.is_some_and(|age| age > Self::STALE) {
                        let _ = std::fs::remove_file(path);
                        continue;
                    }
                    if started.elapsed() > Self::WAIT_MAX {
                        return Err(ClientError::Credentials(format!(
                            "another process holds {} for too long; remove it if no agent is running",
                            path.display()
                        )));
                    }
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                Err(err) => {
                    return Err(ClientError::Config(format!("cannot create {}: {err}", path.display())));
                }
            }
        }
    }
}

impl Drop for RefreshLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
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

    #[test]
    fn debug_output_of_credentials_holds_no_token() {
        let fixed = Credentials::access_token(Secret::new("eyJhbGciOi.secret.part"));
        assert!(!format!("{fixed:?}").contains("secret"));
    }

    #[tokio::test]
    async fn the_refresh_lock_excludes_a_second_holder_until_dropped() {
        let dir = std::env::temp_dir().join(format!("inbox-client-lock-{}", std::process::id()));
        let path = dir.join("p.refresh.lock");
        let first = RefreshLock::acquire(&path).await.unwrap();
        assert!(path.exists());
        let second = tokio::spawn({
            let path = path.clone();
            async move { RefreshLock::acquire(&path).await.map(|_| ()) }
        });
        assert!(!second.is_finished());
        drop(first);
        second.await.unwrap().unwrap();
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(dir);
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
