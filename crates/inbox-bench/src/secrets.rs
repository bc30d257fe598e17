//! The secrets key file of a benchmark's database: every node (in this process or a child) and
//! every store of the benchmark seal and open secrets with it, as a deployment's nodes share
//! one. One file per database in the temporary directory, made the first time; the nodes of
//! the Galera benchmark reach one database through several members' URLs, so the file is
//! named after the database, not the URL.

use std::path::PathBuf;

use std::hash::{Hash as _, Hasher as _};

use inbox_store::{SecretsKeys, SqlStore};

use crate::BenchError;

/// The key file of `database_url`, made when missing.
pub fn key_file(database_url: &str) -> PathBuf {
    let path = key_file_path(database_url);
    if !path.exists() {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        if let Ok(mut file) = options.open(&path) {
            std::io::Write::write_all(&mut file, SecretsKeys::generate().to_file_text().as_bytes())
                .expect("write the benchmark's secrets key file");
        }
    }
    path
}

/// Loads `database_url`'s keys into `store` (run after migrating).
pub async fn prepare(store: &SqlStore, database_url: &str) -> Result<(), BenchError> {
    let keys = inbox_server::secrets_key::read(&key_file(database_url))?;
    store.secrets().prepare(keys).await?;
    Ok(())
}

/// Deletes `database_url`'s key file, with its database.
pub fn forget(database_url: &str) {
    let _ = std::fs::remove_file(key_file_path(database_url));
}

/// Named after a hash of the database's name (the URL's last segment: never the URL, which
/// may hold a password); the same in the benchmark and its child nodes, which run this binary.
fn key_file_path(database_url: &str) -> PathBuf {
    let without_query = database_url.split('?').next().unwrap_or(database_url);
    let database = without_query.rsplit('/').next().unwrap_or(without_query);
    let mut hasher = std::hash::DefaultHasher::new();
    database.hash(&mut hasher);
    std::env::temp_dir().join(format!("inbox-bench-{:016x}.secrets-key", hasher.finish()))
}
