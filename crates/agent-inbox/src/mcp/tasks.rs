//! `inbox_wait` as an MCP task (the `io.modelcontextprotocol/tasks` extension) for clients
//! that declare it: the call answers at once with a task, which completes when an event can
//! be claimed, or at its end (`timeout_seconds`, else [`TASK_SECONDS_DEFAULT`]) with no work.
//!
//! The task id names the task: its creation, its end and the inbox head when it began (the
//! cursor), sealed with an HMAC over this identity (server, tenant, agent), so an id cannot be
//! guessed or used by another agent, and a restarted server answers `tasks/get` for a task an
//! earlier process made. The HMAC key is kept beside the credentials, in the agent-inbox home
//! (`mcp-task.key`, 0600, made at first use), so it outlives the process as the credentials do.
//! A finished task's outcome is final: it is kept in the same home (`task_store.rs`) the moment
//! the task finishes, and every later `tasks/get` reads it from there, whatever claims,
//! publishes or cancellations come after. A task is forgotten at its expiry (its ttl: its end
//! and [`LINGER_MS`]), after which `tasks/get` answers that it has expired.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use inbox_api::time::format_utc;
use rmcp::model::{DetailedTask, Task, TaskPayload, TaskStatus};
use sha2::{Digest as _, Sha256};

use super::task_store::{Finished, Kept, Outcome, RecordKey, TaskStore};

/// A task's end when the call names no `timeout_seconds`.
pub const TASK_SECONDS_DEFAULT: u64 = 300;
/// How often a client should ask: a publish is seen within this (plus one request).
pub const POLL_INTERVAL_MS: u64 = 250;
const KEY_FILE: &str = "mcp-task.key";
const PREFIX: &str = "wait.";
const TAG_BYTES: usize = 16;
/// How long a task is kept after its end, for a client's last `tasks/get`.
pub const LINGER_MS: u64 = 60_000;

/// Who the tasks belong to: a task made for one identity is unknown to every other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub server: String,
    pub tenant: String,
    pub agent: String,
}

/// One task's durable state, carried in its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitTask {
    pub created_ms: u64,
    pub ends_ms: u64,
    /// The inbox head when the wait began.
    pub head_seq: u64,
    nonce: u64,
}

/// Makes and opens task ids for one identity, and keeps their outcomes.
pub struct Tasks {
    key: [u8; 32],
    identity: Identity,
    store: TaskStore,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks")
            .field("identity", &self.identity)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Tasks {
    /// The tasks of `identity`, sealed with the key kept in `home` (made there at first use),
    /// their outcomes kept there too.
    pub fn open(home: &Path, identity: Identity) -> std::io::Result<Tasks> {
        Ok(Tasks { key: load_or_make_key(&home.join(KEY_FILE))?, identity, store: TaskStore::open(home)? })
    }

    /// A new task ending `seconds` from now, begun with the inbox at `head_seq`; `None` when the
    /// home holds as many live tasks as it keeps (the caller answers without a task then).
    pub fn create(&self, seconds: u64, head_seq: u64) -> std::io::Result<Option<(String, WaitTask)>> {
        let now = now_ms();
        let task = WaitTask {
            created_ms: now,
            ends_ms: now + seconds * 1_000,
            head_seq,
            nonce: u64::from_le_bytes(inbox_store::random_bytes()),
        };
        let task_id = self.seal(&task);
        Ok(self.store.reserve(&record_key(&task_id, &task), now)?.then_some((task_id, task)))
    }

    /// The task's final state, once it has finished.
    pub fn outcome(&self, task_id: &str, task: &WaitTask) -> std::io::Result<Option<Finished>> {
        self.store.read(&record_key(task_id, task))
    }

    /// Finishes the task now with `outcome`, unless it has finished already: the first
    /// outcome kept is the task's for good.
    pub fn finish(&self, task_id: &str, task: &WaitTask, outcome: Outcome) -> std::io::Result<Kept> {
        // A task that ended with no work finished at its end, however late this is.
        let finished = Finished { outcome, finished_ms: now_ms().min(task.ends_ms).max(task.created_ms) };
        self.store.finish(&record_key(task_id, task), finished)
    }

    /// The task an id names, if this identity made it.
    pub fn open_id(&self, task_id: &str) -> Option<WaitTask> {
        let bytes = URL_SAFE_NO_PAD.decode(task_id.strip_prefix(PREFIX)?).ok()?;
        let (body, tag) = bytes.split_at_checked(32)?;
        self.mac(body).verify_truncated_left(tag).ok()?;
        let word = |i: usize| u64::from_be_bytes(body[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        Some(WaitTask { created_ms: word(0), ends_ms: word(1), head_seq: word(2), nonce: word(3) })
    }

    fn seal(&self, task: &WaitTask) -> String {
        let mut body = Vec::with_capacity(32 + TAG_BYTES);
        for word in [task.created_ms, task.ends_ms, task.head_seq, task.nonce] {
            body.extend(word.to_be_bytes());
        }
        let tag = self.mac(&body).finalize().into_bytes();
        body.extend(&tag[..TAG_BYTES]);
        format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(body))
    }

    fn mac(&self, body: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        for part in [
            "agent-inbox mcp inbox_wait task v1",
            &self.identity.server,
            &self.identity.tenant,
            &self.identity.agent,
        ] {
            mac.update(part.as_bytes());
            mac.update(&[0]);
        }
        mac.update(body);
        mac
    }
}

impl WaitTask {
    pub fn ended(&self) -> bool {
        now_ms() >= self.ends_ms
    }

    /// Past its expiry a task is forgotten, its outcome too.
    pub fn expired(&self) -> bool {
        now_ms() >= self.expires_ms()
    }

    pub fn expires_ms(&self) -> u64 {
        self.ends_ms.saturating_add(LINGER_MS)
    }

    /// The time to live from creation the task reports: to its expiry.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.expires_ms().saturating_sub(self.created_ms))
    }
}

/// The task's state for `tasks/get` (and the seed of the call's answer): working until it
/// has an outcome, then that outcome as of when it finished.
pub fn detailed(task_id: &str, task: &WaitTask, finished: Option<&Finished>) -> DetailedTask {
    let (payload, updated_ms) = match finished {
        None => (TaskPayload::Working, task.created_ms),
        Some(Finished { outcome: Outcome::Completed { result }, finished_ms }) => {
            (TaskPayload::Completed { result: result.clone() }, *finished_ms)
        }
        Some(Finished { outcome: Outcome::Cancelled, finished_ms }) => (TaskPayload::Cancelled, *finished_ms),
    };
    let status = payload.status();
    let mut base = Task::new(
        task_id,
        status,
        format_utc(task.created_ms as i64),
        format_utc(updated_ms.max(task.created_ms) as i64),
    )
    .with_ttl_ms(task.ttl().as_millis() as u64)
    .with_poll_interval_ms(POLL_INTERVAL_MS);
    if status == TaskStatus::Working {
        base = base.with_status_message("waiting for work to arrive in the inbox");
    }
    DetailedTask::new(base, payload)
}

/// Where a task's files are: its expiry, and its id's digest (the id is long and names more
/// than a file name should).
fn record_key(task_id: &str, task: &WaitTask) -> RecordKey {
    RecordKey {
        expires_ms: task.expires_ms(),
        digest: hex::encode(&Sha256::digest(task_id.as_bytes())[..16]),
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn load_or_make_key(path: &Path) -> std::io::Result<[u8; 32]> {
    match std::fs::read(path) {
        Ok(bytes) if bytes.len() == 32 => return Ok(bytes.try_into().expect("32 bytes")),
        Ok(_) => {
            return Err(std::io::Error::other(format!("{} is not a 32-byte key; remove it", path.display())));
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(err),
    }
    let key: [u8; 32] = inbox_store::random_bytes();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(mut file) => {
            std::io::Write::write_all(&mut file, &key)?;
            Ok(key)
        }
        // Another server of this home made it first: use theirs.
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => load_or_make_key(path),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(agent: &str) -> Identity {
        Identity { server: "http://127.0.0.1:1".into(), tenant: "demo".into(), agent: agent.into() }
    }

    #[test]
    fn an_id_opens_only_for_its_identity_and_key() {
        let dir = std::env::temp_dir().join(format!("mcp-task-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tasks = Tasks::open(&dir, identity("a")).unwrap();
        let (id, task) = tasks.create(30, 7).unwrap().expect("a place for the task");
        assert_eq!(tasks.open_id(&id), Some(task));
        let again = Tasks::open(&dir, identity("a")).unwrap();
        assert_eq!(again.open_id(&id), Some(task), "a restarted server opens it");
        assert_eq!(Tasks::open(&dir, identity("b")).unwrap().open_id(&id), None, "another agent cannot");
        let mut forged = id.clone();
        forged.replace_range(8..9, if &id[8..9] == "A" { "B" } else { "A" });
        assert_eq!(tasks.open_id(&forged), None);
        assert_eq!(tasks.open_id("wait.garbage"), None);

        assert_eq!(tasks.outcome(&id, &task).unwrap(), None);
        let cancelled = tasks.finish(&id, &task, Outcome::Cancelled).unwrap();
        assert!(cancelled.first);
        let late =
            tasks.finish(&id, &task, Outcome::completed(&rmcp::model::CallToolResult::default())).unwrap();
        assert_eq!((late.first, &late.finished), (false, &cancelled.finished), "the first outcome holds");
        assert_eq!(again.outcome(&id, &task).unwrap(), Some(cancelled.finished));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
