//! Where this node's secrets key file is, reading it, making it for the embedded SQLite
//! default, and noticing when it changes. The keys seal every secret the database holds
//! (`inbox_store::SqlStore::secrets`), so the file lives outside the database by design.
//!
//! The file is, in order: `secrets_key_file` (`--secrets-key-file`,
//! `AGENT_INBOX_SECRETS_KEY_FILE`); else the systemd credential `agent-inbox-secrets-key`
//! (`$CREDENTIALS_DIRECTORY`); else, for a SQLite file, `<database file>.secrets-key` beside it,
//! made at the first start (mode 0600) so the two-command start stays two commands. MySQL and
//! MariaDB, whose nodes must share one key, refuse to start without a file.
//!
//! A serving node re-reads the file when it changes (checked every few seconds): that is how it
//! learns a new key before a rewrap, and drops an old one after.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use inbox_store::SecretsKeys;

use crate::config::Config;

/// The systemd credential name a unit passes the key file as (`LoadCredential=`).
pub const CREDENTIAL_NAME: &str = "agent-inbox-secrets-key";

/// The keys of a node and where they came from.
#[derive(Debug, Clone)]
pub struct LoadedKeys {
    pub keys: SecretsKeys,
    /// The file, or none for an in-memory SQLite database (whose secrets die with it).
    pub file: Option<PathBuf>,
    /// Whether the file was made just now.
    pub created: bool,
}

/// The file's size and modification time, to notice a change without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
}

impl FileStamp {
    pub fn of(path: &Path) -> std::io::Result<FileStamp> {
        let meta = std::fs::metadata(path)?;
        Ok(FileStamp { len: meta.len(), modified: meta.modified().ok() })
    }
}

/// How often a serving node checks whether its key file changed.
pub const CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// A serving node's key file, and what it last loaded from it.
#[derive(Debug)]
pub struct Watch {
    file: Option<PathBuf>,
    loaded: std::sync::Mutex<(Option<FileStamp>, Vec<String>)>,
}

impl Watch {
    pub fn new(file: Option<PathBuf>, keys: SecretsKeys) -> Watch {
        let stamp = file.as_deref().and_then(|f| FileStamp::of(f).ok());
        let ids = keys.ids().into_iter().map(str::to_owned).collect();
        Watch { file, loaded: std::sync::Mutex::new((stamp, ids)) }
    }

    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// Whether the file differs from what was last loaded.
    pub fn changed(&self, stamp: FileStamp) -> bool {
        self.loaded.lock().expect("secrets key watch").0 != Some(stamp)
    }

    /// Records a successful load; returns the ids it no longer holds.
    pub fn loaded(&self, stamp: FileStamp, keys: &SecretsKeys) -> Vec<String> {
        let mut loaded = self.loaded.lock().expect("secrets key watch");
        let ids: Vec<String> = keys.ids().into_iter().map(str::to_owned).collect();
        let dropped = loaded.1.iter().filter(|id| !ids.contains(id)).cloned().collect();
        *loaded = (Some(stamp), ids);
        dropped
    }
}

/// Where this node's keys are, before the database is reached: read from the file that was
/// named (or the systemd credential, or the SQLite default beside the database), or the SQLite
/// default's path when no file is there yet. Never makes a file: [`resolve`] decides that once
/// the database says whether it already holds sealed secrets. Every refusal names the file.
pub fn locate(config: &Config) -> Result<Located, String> {
    locate_with(config, std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from))
}

/// What [`locate`] found.
#[derive(Debug, Clone)]
pub enum Located {
    Loaded(LoadedKeys),
    /// The SQLite default key file, not made yet.
    MissingDefault(PathBuf),
}

fn locate_with(config: &Config, credentials: Option<PathBuf>) -> Result<Located, String> {
    if let Some(path) = &config.secrets.key_file {
        return read(path)
            .map(|keys| Located::Loaded(LoadedKeys { keys, file: Some(path.clone()), created: false }));
    }
    if let Some(path) = credentials.map(|dir| dir.join(CREDENTIAL_NAME)).filter(|path| path.exists()) {
        return read(&path)
            .map(|keys| Located::Loaded(LoadedKeys { keys, file: Some(path), created: false }));
    }
    match sqlite_file(&config.database.url) {
        Some(SqliteFile::Memory) => {
            Ok(Located::Loaded(LoadedKeys { keys: SecretsKeys::generate(), file: None, created: true }))
        }
        Some(SqliteFile::Path(database)) => {
            let path = default_path(&database);
            if path.exists() {
                return read(&path)
                    .map(|keys| Located::Loaded(LoadedKeys { keys, file: Some(path), created: false }));
            }
            Ok(Located::MissingDefault(path))
        }
        None => Err(format!(
            "no secrets key file: every node of a MySQL/MariaDB deployment needs the same one, and the database \
             must not hold it. Make one with `agent-inbox keys new-secrets-key > /etc/agent-inbox/secrets.key` \
             (then chmod 600, copy it to every node, and keep it apart from database backups) and name it with \
             secrets_key_file, --secrets-key-file or AGENT_INBOX_SECRETS_KEY_FILE, or pass it as the systemd \
             credential {CREDENTIAL_NAME}"
        )),
    }
}

/// The keys of `located`, making the SQLite default's key file when the database has never
/// sealed anything (`sealing_key` is the key it records as sealing, if any); a database that
/// has is refused, since a new key cannot open what the lost one sealed.
pub fn resolve(located: &Located, sealing_key: Option<&str>) -> Result<LoadedKeys, String> {
    match (located, sealing_key) {
        (Located::Loaded(loaded), _) => Ok(loaded.clone()),
        (Located::MissingDefault(path), None) => {
            create(path).map(|keys| LoadedKeys { keys, file: Some(path.clone()), created: true })
        }
        (Located::MissingDefault(path), Some(key_id)) => Err(format!(
            "the secrets key file {} is missing, and the database holds secrets sealed under its key {key_id}: \
             restore the file from its backup, or name where it is with secrets_key_file (--secrets-key-file)",
            path.display()
        )),
    }
}

/// Reads and parses a key file, naming it in every refusal.
pub fn read(path: &Path) -> Result<SecretsKeys, String> {
    let text = zeroize::Zeroizing::new(std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read the secrets key file {}: {e} (make one with `agent-inbox keys new-secrets-key > FILE`)",
            path.display()
        )
    })?);
    warn_if_readable_by_others(path);
    SecretsKeys::parse(&text).map_err(|e| format!("the secrets key file {} {e}", path.display()))
}

/// `<database file>.secrets-key`: beside the database, named after it.
pub fn default_path(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push(".secrets-key");
    PathBuf::from(name)
}

/// Makes a key file with one fresh key, readable by its owner only; never overwrites one
/// (a second process starting at the same moment reads the first one's file instead). The key
/// is written to a file of its own first and linked into place whole, so no reader sees half.
fn create(path: &Path) -> Result<SecretsKeys, String> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| {
            format!("cannot create the directory of the secrets key file {}: {e}", path.display())
        })?;
    }
    let keys = SecretsKeys::generate();
    let mut partial = path.as_os_str().to_owned();
    partial.push(format!(".partial-{}", hex::encode(inbox_store::random_bytes::<6>())));
    let partial = PathBuf::from(partial);
    let written = write_private(&partial, keys.to_file_text().as_bytes())
        .and_then(|()| std::fs::hard_link(&partial, path));
    let _ = std::fs::remove_file(&partial);
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return read(path),
        Err(e) => return Err(format!("cannot create the secrets key file {}: {e}", path.display())),
    }
    tracing::info!(
        file = %path.display(),
        key_id = keys.first().id(),
        "made a secrets key file beside the SQLite database; back it up apart from the database (docs/deploy.md)"
    );
    Ok(keys)
}

/// Writes a new file only its owner can read, and syncs it.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(file = %path.display(), "the secrets key file can be read by other users; chmod 600 it");
        }
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_path: &Path) {}

enum SqliteFile {
    Memory,
    Path(PathBuf),
}

/// The file of a `sqlite:` URL; none for MySQL.
fn sqlite_file(url: &str) -> Option<SqliteFile> {
    let rest = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or(rest);
    if path.is_empty() || path.contains(":memory:") || url.contains("mode=memory") {
        return Some(SqliteFile::Memory);
    }
    Some(SqliteFile::Path(PathBuf::from(path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("agent-inbox-secrets-key-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn config(url: &str, key_file: Option<&Path>) -> Config {
        let mut config = Config::default();
        config.database.url = url.to_owned();
        config.secrets.key_file = key_file.map(Path::to_path_buf);
        config
    }

    fn loaded(located: Located) -> LoadedKeys {
        match located {
            Located::Loaded(loaded) => loaded,
            Located::MissingDefault(path) => panic!("no key file at {}", path.display()),
        }
    }

    #[test]
    fn sqlite_makes_its_key_beside_a_database_that_never_sealed_anything() {
        let dir = dir("sqlite");
        let url = format!("sqlite://{}/inbox.db", dir.display());
        let path = dir.join("inbox.db.secrets-key");
        let located = locate_with(&config(&url, None), None).unwrap();
        assert!(matches!(&located, Located::MissingDefault(p) if *p == path), "{located:?}");
        let err = resolve(&located, Some("sk_0123456789ab")).unwrap_err();
        assert!(err.contains("is missing") && err.contains("sk_0123456789ab"), "{err}");
        assert!(!path.exists(), "no key is made for a database that sealed with another");
        let first = resolve(&located, None).unwrap();
        assert!(first.created);
        assert_eq!(first.file.as_deref(), Some(path.as_path()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let again = loaded(locate_with(&config(&url, None), None).unwrap());
        assert!(!again.created);
        assert_eq!(again.keys, first.keys);
        assert_eq!(
            resolve(&located, None).unwrap().keys,
            first.keys,
            "a file made meanwhile is read, not replaced"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn mysql_without_a_key_file_says_how_to_make_one() {
        let err = locate_with(&config("mysql://root@db/inbox", None), None).unwrap_err();
        assert!(err.contains("agent-inbox keys new-secrets-key >"), "{err}");
    }

    #[test]
    fn a_named_file_wins_then_the_systemd_credential() {
        let dir = dir("named");
        let named = dir.join("named.key");
        let named_keys = SecretsKeys::generate();
        std::fs::write(&named, named_keys.to_file_text().as_bytes()).unwrap();
        let credentials = dir.join("credentials");
        std::fs::create_dir_all(&credentials).unwrap();
        let credential_keys = SecretsKeys::generate();
        std::fs::write(credentials.join(CREDENTIAL_NAME), credential_keys.to_file_text().as_bytes()).unwrap();
        let url = "mysql://root@db/inbox";
        let found = loaded(locate_with(&config(url, Some(&named)), Some(credentials.clone())).unwrap());
        assert_eq!(found.keys, named_keys);
        let found = loaded(locate_with(&config(url, None), Some(credentials)).unwrap());
        assert_eq!(found.keys, credential_keys);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn unreadable_and_wrong_files_are_named() {
        let dir = dir("wrong");
        let missing = dir.join("missing.key");
        let err = locate_with(&config("mysql://root@db/inbox", Some(&missing)), None).unwrap_err();
        assert!(err.contains("missing.key") && err.contains("cannot read"), "{err}");
        let garbage = dir.join("garbage.key");
        std::fs::write(&garbage, "not a key\n").unwrap();
        let err = locate_with(&config("mysql://root@db/inbox", Some(&garbage)), None).unwrap_err();
        assert!(err.contains("garbage.key") && err.contains("line 1 is not a secrets key"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
