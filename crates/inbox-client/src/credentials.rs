//! Credentials: a fixed access token, or a rotating refresh token (kept in the secret store)
//! that buys short-lived access tokens before they expire. Each refresh token works once, so
//! the new one is made durable *before* the new access token is used, and refreshes are
//! serialized across processes sharing a profile by a lock file: two processes
//! spending the same refresh token would make the service revoke the whole token family.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use inbox_api::{ProblemCode, RefreshRequest, TokenResponse};

use crate::error::ClientError;
use crate::schedule::refresh_due;
use crate::secret_store::{Secret, SecretStore, create_private_dir};
use crate::wire::{REQUEST_TIMEOUT, decode};

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
        let tokens = refresh(http, base, &refresh_token).await.map_err(explain_refresh_failure)?;
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

/// Trades a refresh token for new tokens. No access token is involved.
pub(crate) async fn refresh(
    http: &reqwest::Client,
    base: &str,
    refresh_token: &Secret,
) -> Result<TokenResponse, ClientError> {
    let body = RefreshRequest { refresh_token: refresh_token.expose().to_owned() };
    let response = http
        .post(format!("{base}/v1/auth/refresh"))
        .json(&body)
        .timeout(REQUEST_TIMEOUT)
        .send()
        .await
        .map_err(|err| ClientError::from_request(&err))?;
    decode(response).await
}

pub(crate) fn explain_refresh_failure(err: ClientError) -> ClientError {
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

pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ClientError> + Send + 'static,
) -> Result<T, ClientError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| ClientError::SecretStore(format!("the secret store task failed: {err}")))?
}

/// A lock file held while a refresh token is spent and replaced. Created exclusively; removed
/// on drop; taken over when older than [`RefreshLock::STALE`] (its holder died mid-refresh).
pub(crate) struct RefreshLock {
    path: PathBuf,
}

impl RefreshLock {
    const STALE: Duration = Duration::from_secs(60);
    const WAIT_MAX: Duration = Duration::from_secs(90);

    pub(crate) async fn acquire(path: &Path) -> Result<RefreshLock, ClientError> {
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
}
