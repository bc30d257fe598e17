//! Where `inbox_wait`'s tasks keep their final state: a directory in the agent-inbox home
//! (`mcp-tasks/`, 0700), beside the key that seals the task ids, so a finished task reads the
//! same from every server process of the home, after a restart or a SIGKILL too.
//!
//! A task holds a place (an empty `.task` file) from its creation until its expiry; at most
//! [`PLACES_MAX`] tasks hold one at a time, so a server asked for more answers the bounded
//! wait instead of making a task. Its outcome, once it finishes, is a `.done` file of at most
//! [`RECORD_BYTES_MAX`] bytes, written whole to a temporary file and then linked into place:
//! the first outcome linked is the one every reader sees, and no later one replaces it. Every
//! file name starts with the task's expiry, so expired files are dropped by reading names alone.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use rmcp::model::JsonObject;
use serde::{Deserialize, Serialize};

/// Tasks holding a place at one time, in one agent-inbox home (for every identity).
pub const PLACES_MAX: usize = 4096;
/// The largest outcome kept; a larger tool result is kept as a short refusal instead.
pub const RECORD_BYTES_MAX: usize = 16 * 1024;
const DIR: &str = "mcp-tasks";

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// The tool result the wait answered (work waiting, the end with none, or a refusal).
    Completed {
        result: JsonObject,
    },
    Cancelled,
}

/// A task's final state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finished {
    #[serde(flatten)]
    pub outcome: Outcome,
    /// When it finished (milliseconds since the epoch): its `lastUpdatedAt` from then on.
    pub finished_ms: u64,
}

/// The outcome that holds after [`TaskStore::finish`], and whether it was this call's.
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    pub finished: Finished,
    pub first: bool,
}

/// Names one task's files: its expiry and a digest of its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordKey {
    pub expires_ms: u64,
    pub digest: String,
}

#[derive(Debug)]
pub struct TaskStore {
    dir: PathBuf,
}

impl TaskStore {
    /// The store of the agent-inbox home `home`, made there at first use.
    pub fn open(home: &Path) -> std::io::Result<TaskStore> {
        let dir = home.join(DIR);
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&dir)?;
        Ok(TaskStore { dir })
    }

    /// Takes a place for a new task, dropping expired files on the way; `false` when
    /// [`PLACES_MAX`] live tasks hold one (servers taking places at the same instant may pass
    /// it by one each).
    pub fn reserve(&self, key: &RecordKey, now_ms: u64) -> std::io::Result<bool> {
        let mut places = 0;
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            match expiry(name) {
                Some(expires_ms) if expires_ms <= now_ms => remove(&entry.path()),
                Some(_) if name.ends_with(".task") => places += 1,
                _ => {}
            }
        }
        if places >= PLACES_MAX {
            return Ok(false);
        }
        match create_new(&self.path(key, "task")) {
            Ok(_) => Ok(true),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(true),
            Err(err) => Err(err),
        }
    }

    /// The task's final state, if it has finished.
    pub fn read(&self, key: &RecordKey) -> std::io::Result<Option<Finished>> {
        match std::fs::read(self.path(key, "done")) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|err| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("a task record is unreadable: {err}"),
                )
            }),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Records how the task ended, unless it already has an outcome: then that one holds.
    pub fn finish(&self, key: &RecordKey, finished: Finished) -> std::io::Result<Kept> {
        let finished = bounded(finished);
        let bytes = serde_json::to_vec(&finished).map_err(std::io::Error::other)?;
        let nonce = hex::encode(inbox_store::random_bytes::<8>());
        let temporary = self.dir.join(format!("{:013}-{}-{nonce}.tmp", key.expires_ms, key.digest));
        let written = create_new(&temporary).and_then(|mut file| {
            file.write_all(&bytes)?;
            file.sync_all()
        });
        // A hard link fails when the name exists: the first outcome stays.
        let linked = written.and_then(|()| std::fs::hard_link(&temporary, self.path(key, "done")));
        remove(&temporary);
        match linked {
            Ok(()) => Ok(Kept { finished, first: true }),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => match self.read(key)? {
                Some(theirs) => Ok(Kept { finished: theirs, first: false }),
                None => Err(std::io::Error::other("a task record vanished while it was read")),
            },
            Err(err) => Err(err),
        }
    }

    fn path(&self, key: &RecordKey, kind: &str) -> PathBuf {
        self.dir.join(format!("{:013}-{}.{kind}", key.expires_ms, key.digest))
    }
}

/// The expiry a file name starts with.
fn expiry(name: &str) -> Option<u64> {
    name.split_once('-')?.0.parse().ok()
}

fn create_new(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

fn remove(path: &Path) {
    if let Err(err) = std::fs::remove_file(path)
        && err.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(error = %err, path = %path.display(), "cannot remove a task file");
    }
}

/// The outcome as kept: a result too large for [`RECORD_BYTES_MAX`] becomes a refusal saying so.
fn bounded(finished: Finished) -> Finished {
    let size = serde_json::to_vec(&finished).map_or(usize::MAX, |bytes| bytes.len());
    if size <= RECORD_BYTES_MAX {
        return finished;
    }
    let refusal = super::outcome::from_error(&inbox_client::ClientError::Protocol(format!(
        "the wait's answer ({size} bytes) is too large to keep as a task's result; call inbox_wait without a task"
    )));
    Finished { outcome: Outcome::completed(&refusal), finished_ms: finished.finished_ms }
}

impl Outcome {
    pub fn completed(result: &rmcp::model::CallToolResult) -> Outcome {
        let result = match serde_json::to_value(result) {
            Ok(serde_json::Value::Object(object)) => object,
            _ => JsonObject::new(),
        };
        Outcome::Completed { result }
    }

    pub fn status(&self) -> &'static str {
        match self {
            Outcome::Completed { .. } => "completed",
            Outcome::Cancelled => "cancelled",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(name: &str) -> (PathBuf, TaskStore) {
        let dir = std::env::temp_dir().join(format!("mcp-task-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = TaskStore::open(&dir).unwrap();
        (dir, store)
    }

    fn key(expires_ms: u64, digest: &str) -> RecordKey {
        RecordKey { expires_ms, digest: digest.to_owned() }
    }

    #[test]
    fn the_first_outcome_holds() {
        let (dir, store) = store("first");
        let key = key(2_000, "a");
        assert_eq!(store.read(&key).unwrap(), None);
        let mut result = JsonObject::new();
        result.insert("isError".into(), false.into());
        let completed = Finished { outcome: Outcome::Completed { result }, finished_ms: 10 };
        assert_eq!(
            store.finish(&key, completed.clone()).unwrap(),
            Kept { finished: completed.clone(), first: true }
        );
        let cancelled = Finished { outcome: Outcome::Cancelled, finished_ms: 11 };
        assert_eq!(
            store.finish(&key, cancelled).unwrap(),
            Kept { finished: completed.clone(), first: false }
        );
        assert_eq!(TaskStore::open(&dir).unwrap().read(&key).unwrap(), Some(completed));
        let names: Vec<_> =
            std::fs::read_dir(dir.join(DIR)).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "no temporary file is left: {names:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn places_are_bounded_and_freed_at_expiry() {
        let (dir, store) = store("places");
        for n in 0..PLACES_MAX {
            assert!(store.reserve(&key(1_000, &format!("t{n}")), 0).unwrap());
        }
        assert!(!store.reserve(&key(5_000, "late"), 999).unwrap(), "every place is held");
        store.finish(&key(1_000, "t0"), Finished { outcome: Outcome::Cancelled, finished_ms: 1 }).unwrap();
        assert!(store.reserve(&key(5_000, "late"), 1_000).unwrap(), "expired places are dropped");
        let left: Vec<_> =
            std::fs::read_dir(dir.join(DIR)).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 1, "only the new place is left");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_outcome_too_large_is_kept_as_a_short_refusal() {
        let (dir, store) = store("large");
        let mut result = JsonObject::new();
        result.insert("text".into(), "x".repeat(RECORD_BYTES_MAX).into());
        let kept =
            store.finish(&key(1, "big"), Finished { outcome: Outcome::Completed { result }, finished_ms: 1 });
        let Outcome::Completed { result } = kept.unwrap().finished.outcome else { panic!("completed") };
        assert_eq!(result["isError"], true);
        assert!(serde_json::to_vec(&result).unwrap().len() < 1_000);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
