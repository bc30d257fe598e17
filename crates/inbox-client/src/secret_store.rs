//! Where the refresh token lives: the OS secret store when there is one, else a file only its
//! owner can read (mode 0600). Secrets never reach logs or `Debug` output.
//!
//! The macOS login keychain and the Windows Credential Manager are reached through the
//! `keyring` crate (its native backends, no helper process). On Linux the libsecret store
//! stays behind its `secret-tool` command, the secret on its stdin (never in argv, which other
//! users can read in the process list), because `keyring`'s Secret Service backends do not
//! fit: the D-Bus one links the C libdbus into the one `agent-inbox` binary that also serves,
//! the pure-Rust one brings zbus (about ninety more crates), and both file secrets under the
//! attributes `username`/`target`/`application` where `secret-tool` filed ours under
//! `account`, so every stored login would be lost on upgrade. `keyring` 4 needs Rust 1.88,
//! this SDK 1.85: 3.6 is used.

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::error::ClientError;

/// A credential. `Debug` and `Display` print a placeholder, so it cannot leak into a log by
/// accident; `expose` is the one way to read it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Which store keeps a profile's refresh token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SecretStoreKind {
    /// libsecret (GNOME Keyring, KWallet, ...) through `secret-tool`.
    SecretTool,
    /// The macOS login keychain (generic passwords, service [`SECRET_SERVICE`], account the
    /// profile: the items `security add-generic-password` made before are found as they are).
    Keychain,
    /// The Windows Credential Manager (generic credentials).
    CredentialManager,
    /// A file with mode 0600.
    File,
}

impl SecretStoreKind {
    pub fn parse(text: &str) -> Option<SecretStoreKind> {
        match text {
            "secret-tool" | "libsecret" => Some(SecretStoreKind::SecretTool),
            "keychain" | "security" => Some(SecretStoreKind::Keychain),
            "credential-manager" | "wincred" => Some(SecretStoreKind::CredentialManager),
            "file" => Some(SecretStoreKind::File),
            _ => None,
        }
    }
}

/// The service name under which tokens are filed in OS secret stores.
pub const SECRET_SERVICE: &str = "agent-inbox";

/// One secret's slot: a profile's refresh token, or its request-signing key.
#[derive(Debug, Clone)]
pub struct SecretStore {
    kind: SecretStoreKind,
    /// The profile name: the account under [`SECRET_SERVICE`].
    account: String,
    /// The file used by [`SecretStoreKind::File`].
    file: PathBuf,
    /// What the secret is, for labels and messages.
    what: &'static str,
}

impl SecretStore {
    pub fn new(kind: SecretStoreKind, account: &str, file: PathBuf) -> SecretStore {
        SecretStore { kind, account: account.to_owned(), file, what: "refresh token" }
    }

    /// The same kind of slot for another secret (`what` names it in labels and messages).
    pub(crate) fn holding(mut self, what: &'static str) -> SecretStore {
        self.what = what;
        self
    }

    /// The OS store when there is one (on Linux: when `secret-tool` is installed), else the file.
    pub fn detect(account: &str, file: PathBuf) -> SecretStore {
        let kind = if cfg!(target_os = "macos") {
            SecretStoreKind::Keychain
        } else if cfg!(windows) {
            SecretStoreKind::CredentialManager
        } else if cfg!(target_os = "linux") && on_path("secret-tool").is_some() {
            SecretStoreKind::SecretTool
        } else {
            SecretStoreKind::File
        };
        SecretStore::new(kind, account, file)
    }

    pub fn kind(&self) -> SecretStoreKind {
        self.kind
    }

    /// The same slot in the file store: the fallback when an OS store is installed but not
    /// usable (no desktop session, a locked keychain).
    pub fn file_fallback(&self) -> SecretStore {
        SecretStore::new(SecretStoreKind::File, &self.account, self.file.clone()).holding(self.what)
    }

    /// Where the secret is, for a person.
    pub fn describe(&self) -> String {
        match self.kind {
            SecretStoreKind::SecretTool => {
                format!("the libsecret store (service {SECRET_SERVICE}, account {})", self.account)
            }
            SecretStoreKind::Keychain => {
                format!("the login keychain (service {SECRET_SERVICE}, account {})", self.account)
            }
            SecretStoreKind::CredentialManager => {
                format!("the Windows Credential Manager (service {SECRET_SERVICE}, user {})", self.account)
            }
            SecretStoreKind::File => format!("the file {} (mode 0600)", self.file.display()),
        }
    }

    /// The stored secret, or `None` when nothing is stored.
    pub fn load(&self) -> Result<Option<Secret>, ClientError> {
        match self.kind {
            SecretStoreKind::SecretTool => {
                let out = run(
                    "secret-tool",
                    &["lookup", "service", SECRET_SERVICE, "account", &self.account],
                    None,
                )?;
                Ok(out.filter(|s| !s.is_empty()).map(Secret))
            }
            SecretStoreKind::Keychain | SecretStoreKind::CredentialManager => {
                match self.os_entry()?.get_password() {
                    Ok(value) => Ok((!value.is_empty()).then_some(Secret(value))),
                    Err(keyring::Error::NoEntry) => Ok(None),
                    Err(err) => Err(self.os_store_failed("read", &err)),
                }
            }
            SecretStoreKind::File => read_secret_file(&self.file),
        }
    }

    /// Stores `secret`, replacing what was there. Returns only once the secret is durable.
    pub fn save(&self, secret: &Secret) -> Result<(), ClientError> {
        check_single_line(secret, self.what)?;
        match self.kind {
            SecretStoreKind::SecretTool => {
                let label = format!("agent-inbox {} ({})", self.what, self.account);
                let stored = run(
                    "secret-tool",
                    &[
                        "store",
                        &format!("--label={label}"),
                        "service",
                        SECRET_SERVICE,
                        "account",
                        &self.account,
                    ],
                    Some(secret.expose()),
                )?;
                stored.map(drop).ok_or_else(|| store_failed("secret-tool store"))
            }
            SecretStoreKind::Keychain | SecretStoreKind::CredentialManager => self
                .os_entry()?
                .set_password(secret.expose())
                .map_err(|err| self.os_store_failed("store", &err)),
            SecretStoreKind::File => write_secret_file(&self.file, secret),
        }
    }

    /// Removes the secret; removing nothing is fine.
    pub fn delete(&self) -> Result<(), ClientError> {
        match self.kind {
            SecretStoreKind::SecretTool => {
                run("secret-tool", &["clear", "service", SECRET_SERVICE, "account", &self.account], None)
                    .map(drop)
            }
            SecretStoreKind::Keychain | SecretStoreKind::CredentialManager => {
                match self.os_entry()?.delete_credential() {
                    Ok(()) | Err(keyring::Error::NoEntry) => Ok(()),
                    Err(err) => Err(self.os_store_failed("remove", &err)),
                }
            }
            SecretStoreKind::File => match std::fs::remove_file(&self.file) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                    Err(ClientError::SecretStore(format!("cannot remove {}: {err}", self.file.display())))
                }
                _ => Ok(()),
            },
        }
    }
}

impl SecretStore {
    /// The `keyring` entry of this slot. Only on the system whose store the kind names: this
    /// build has no other backend, and `keyring` without one would keep the secret in memory.
    fn os_entry(&self) -> Result<keyring::Entry, ClientError> {
        let native = match self.kind {
            SecretStoreKind::Keychain => cfg!(target_os = "macos"),
            SecretStoreKind::CredentialManager => cfg!(windows),
            SecretStoreKind::SecretTool | SecretStoreKind::File => false,
        };
        if !native {
            return Err(ClientError::SecretStore(format!(
                "{} is not on this system; set AGENT_INBOX_SECRET_STORE=file to use a 0600 file",
                self.describe()
            )));
        }
        keyring::Entry::new(SECRET_SERVICE, &self.account).map_err(|err| self.os_store_failed("open", &err))
    }

    fn os_store_failed(&self, what: &str, err: &keyring::Error) -> ClientError {
        ClientError::SecretStore(format!(
            "cannot {what} the {} in {}: {err}; unlock it, or set AGENT_INBOX_SECRET_STORE=file to use a 0600 file",
            self.what,
            self.describe()
        ))
    }
}

/// The full path of `program` when it is an executable on `PATH`.
pub fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}

fn store_failed(what: &str) -> ClientError {
    ClientError::SecretStore(format!(
        "{what} failed; unlock the secret store, or set AGENT_INBOX_SECRET_STORE=file to use a 0600 file"
    ))
}

fn check_single_line(secret: &Secret, what: &str) -> Result<(), ClientError> {
    let value = secret.expose();
    if value.is_empty() || value.contains(['\n', '\r', ' ', '"', '\'', '\\']) {
        return Err(ClientError::Credentials(format!(
            "a {what} is one word without spaces or quotes; check what was pasted"
        )));
    }
    Ok(())
}

/// Runs a secret-store tool. `Ok(None)` when it ran and said no (not found, refused);
/// an error when it could not run at all.
fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Result<Option<String>, ClientError> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| ClientError::SecretStore(format!("cannot run {program}: {err}")))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())
            .map_err(|err| ClientError::SecretStore(format!("cannot talk to {program}: {err}")))?;
    }
    let output = child
        .wait_with_output()
        .map_err(|err| ClientError::SecretStore(format!("{program} did not finish: {err}")))?;
    if !output.status.success() {
        return Ok(None);
    }
    String::from_utf8(output.stdout)
        .map(Some)
        .map_err(|_| ClientError::SecretStore(format!("{program} printed something that is not text")))
}

fn read_secret_file(path: &Path) -> Result<Option<Secret>, ClientError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => {
            return Err(ClientError::SecretStore(format!("cannot read {}: {err}", path.display())));
        }
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(path).map(|m| m.permissions().mode()).unwrap_or(0);
        if mode & 0o077 != 0 {
            return Err(ClientError::SecretStore(format!(
                "{} can be read by other users (mode {:o}); run chmod 600 on it, or log in again",
                path.display(),
                mode & 0o777
            )));
        }
    }
    let value = text.trim();
    Ok((!value.is_empty()).then(|| Secret(value.to_owned())))
}

/// Writes the file under a temporary name created 0600, syncs it, then renames it over the old
/// one: a crash leaves either the old token or the new one, never half of one.
fn write_secret_file(path: &Path, secret: &Secret) -> Result<(), ClientError> {
    let fail = |what: &str, err: std::io::Error| {
        ClientError::SecretStore(format!("cannot {what} {}: {err}", path.display()))
    };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    create_private_dir(dir).map_err(|err| fail("create the directory of", err))?;
    let temporary = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("secret"),
        std::process::id()
    ));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(&temporary).map_err(|err| fail("write", err))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        // An old temporary file could have been created with other permissions.
        file.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(|err| fail("protect", err))?;
    }
    file.write_all(secret.expose().as_bytes()).map_err(|err| fail("write", err))?;
    file.write_all(b"\n").map_err(|err| fail("write", err))?;
    file.sync_all().map_err(|err| fail("sync", err))?;
    drop(file);
    std::fs::rename(&temporary, path).map_err(|err| fail("replace", err))?;
    if let Ok(dir) = std::fs::File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Creates `dir` (and parents) readable by its owner only.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder.create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("inbox-client-secret-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn secrets_never_show_in_debug_output() {
        let secret = Secret::new("rt_0123456789abcdef");
        assert_eq!(format!("{secret:?}"), "Secret(<redacted>)");
        assert!(!format!("{:?}", Some(secret.clone())).contains("0123"));
        assert_eq!(secret.expose(), "rt_0123456789abcdef");
    }

    #[test]
    fn the_file_store_round_trips_with_owner_only_permissions() {
        let dir = temp_dir("file");
        let store =
            SecretStore::new(SecretStoreKind::File, "default", dir.join("nested/default.refresh-token"));
        assert_eq!(store.load().unwrap(), None);
        store.save(&Secret::new("rt_first")).unwrap();
        store.save(&Secret::new("rt_second")).unwrap();
        assert_eq!(store.load().unwrap(), Some(Secret::new("rt_second")));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode =
                std::fs::metadata(dir.join("nested/default.refresh-token")).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
            let dir_mode = std::fs::metadata(dir.join("nested")).unwrap().permissions().mode();
            assert_eq!(dir_mode & 0o777, 0o700);
            std::fs::set_permissions(
                dir.join("nested/default.refresh-token"),
                std::fs::Permissions::from_mode(0o644),
            )
            .unwrap();
            let refused = store.load().unwrap_err().to_string();
            assert!(refused.contains("can be read by other users"), "{refused}");
        }
        store.delete().unwrap();
        store.delete().unwrap();
        assert_eq!(store.load().unwrap(), None);
        assert!(store.describe().contains("mode 0600"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn malformed_tokens_are_refused_before_they_are_stored() {
        let dir = temp_dir("malformed");
        let store = SecretStore::new(SecretStoreKind::File, "default", dir.join("t"));
        assert!(store.save(&Secret::new("rt_a\nrt_b")).is_err());
        assert!(store.save(&Secret::new("")).is_err());
        assert!(!dir.join("t").exists());
    }

    #[test]
    fn store_kinds_parse_from_their_names() {
        assert_eq!(SecretStoreKind::parse("file"), Some(SecretStoreKind::File));
        assert_eq!(SecretStoreKind::parse("secret-tool"), Some(SecretStoreKind::SecretTool));
        assert_eq!(SecretStoreKind::parse("keychain"), Some(SecretStoreKind::Keychain));
        assert_eq!(SecretStoreKind::parse("credential-manager"), Some(SecretStoreKind::CredentialManager));
        assert_eq!(SecretStoreKind::parse("vault"), None);
        assert_eq!(serde_json::to_string(&SecretStoreKind::SecretTool).unwrap(), "\"secret-tool\"");
        assert_eq!(
            serde_json::to_string(&SecretStoreKind::CredentialManager).unwrap(),
            "\"credential-manager\""
        );
    }

    /// A kind whose store is not on this system is refused, never kept in `keyring`'s
    /// in-memory stand-in (which would lose the token at exit).
    #[test]
    fn an_os_store_of_another_system_is_refused() {
        let dir = temp_dir("foreign");
        for kind in [SecretStoreKind::Keychain, SecretStoreKind::CredentialManager] {
            let native = match kind {
                SecretStoreKind::Keychain => cfg!(target_os = "macos"),
                _ => cfg!(windows),
            };
            if native {
                continue;
            }
            let store = SecretStore::new(kind, "default", dir.join("t"));
            let refused = store.save(&Secret::new("rt_x")).unwrap_err().to_string();
            assert!(refused.contains("is not on this system"), "{refused}");
            assert!(store.load().is_err());
            assert!(store.delete().is_err());
        }
        assert!(!dir.join("t").exists());
    }
}
