//! `inbox_wait` as an MCP task (the `io.modelcontextprotocol/tasks` extension) for clients
//! that declare it: the call answers at once with a task, which completes when an event can
//! be claimed, or at its end (`timeout_seconds`, else [`TASK_SECONDS_DEFAULT`]) with no work.
//!
//! The server keeps no task: the task id *is* the task. It names its creation, its end and
//! the inbox head when it began (the cursor), sealed with an HMAC over this identity (server,
//! tenant, agent), so an id cannot be guessed or used by another agent, and a restarted server
//! answers `tasks/get` for a task an earlier process made. Every `tasks/get` asks the service
//! afresh whether work can be claimed. The HMAC key is kept beside the credentials, in the
//! agent-inbox home (`mcp-task.key`, 0600, made at first use), so it outlives the process as
//! the credentials do. Cancellations are the one thing held in memory: a cancelled task whose
//! server restarted is answered as the plain wait it was, until its end.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use inbox_api::time::format_utc;
use rmcp::model::{DetailedTask, JsonObject, Task, TaskPayload, TaskStatus};
use sha2::Sha256;

/// A task's end when the call names no `timeout_seconds`.
pub const TASK_SECONDS_DEFAULT: u64 = 300;
/// How often a client should ask: a publish is seen within this (plus one request).
pub const POLL_INTERVAL_MS: u64 = 250;
const KEY_FILE: &str = "mcp-task.key";
const PREFIX: &str = "wait.";
const TAG_BYTES: usize = 16;
const CANCELLED_MAX: usize = 10_000;

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

/// Makes and opens task ids for one identity.
pub struct Tasks {
    key: [u8; 32],
    identity: Identity,
    /// Cancelled task ids, with their ends (dropped once past).
    cancelled: Mutex<HashMap<String, u64>>,
}

impl Tasks {
    /// The tasks of `identity`, sealed with the key kept in `home` (made there at first use).
    pub fn open(home: &Path, identity: Identity) -> std::io::Result<Tasks> {
        Ok(Tasks { key: load_or_make_key(&home.join(KEY_FILE))?, identity, cancelled: Mutex::default() })
    }

    /// A new task ending `seconds` from now, begun with the inbox at `head_seq`.
    pub fn create(&self, seconds: u64, head_seq: u64) -> (String, WaitTask) {
        let now = now_ms();
        let task = WaitTask {
            created_ms: now,
            ends_ms: now + seconds * 1_000,
            head_seq,
            nonce: u64::from_le_bytes(inbox_store::random_bytes()),
        };
        (self.seal(&task), task)
    }

    /// The task an id names, if this identity made it.
    pub fn open_id(&self, task_id: &str) -> Option<WaitTask> {
        let bytes = URL_SAFE_NO_PAD.decode(task_id.strip_prefix(PREFIX)?).ok()?;
        let (body, tag) = bytes.split_at_checked(32)?;
        self.mac(body).verify_truncated_left(tag).ok()?;
        let word = |i: usize| u64::from_be_bytes(body[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        Some(WaitTask { created_ms: word(0), ends_ms: word(1), head_seq: word(2), nonce: word(3) })
    }

    pub fn cancel(&self, task_id: &str, task: &WaitTask) {
        let mut cancelled = self.cancelled.lock().expect("cancelled lock");
        let now = now_ms();
        cancelled.retain(|_, ends| *ends > now);
        if cancelled.len() < CANCELLED_MAX {
            cancelled.insert(task_id.to_owned(), task.ends_ms.max(now + 60_000));
        }
    }

    pub fn is_cancelled(&self, task_id: &str) -> bool {
        self.cancelled.lock().expect("cancelled lock").contains_key(task_id)
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

    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ends_ms - self.created_ms)
    }
}

/// The task's state for `tasks/get` (and its seed for the call's answer).
pub fn detailed(task_id: &str, task: &WaitTask, payload: TaskPayload) -> DetailedTask {
    let status = payload.status();
    let updated = if status == TaskStatus::Working {
        task.created_ms
    } else {
        now_ms().min(task.ends_ms.max(task.created_ms))
    };
    let mut base = Task::new(
        task_id,
        status,
        format_utc(task.created_ms as i64),
        format_utc(updated.max(task.created_ms) as i64),
    )
    .with_ttl_ms(task.ttl().as_millis() as u64 + 60_000)
    .with_poll_interval_ms(POLL_INTERVAL_MS);
    if status == TaskStatus::Working {
        base = base.with_status_message("waiting for work to arrive in the inbox");
    }
    DetailedTask::new(base, payload)
}

/// A completed task's payload: the tool result the bounded wait would have answered.
pub fn completed(result: &rmcp::model::CallToolResult) -> TaskPayload {
    let result: JsonObject = match serde_json::to_value(result) {
        Ok(serde_json::Value::Object(object)) => object,
        _ => JsonObject::new(),
    };
    TaskPayload::Completed { result }
}

fn now_ms() -> u64 {
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
        let (id, task) = tasks.create(30, 7);
        assert_eq!(tasks.open_id(&id), Some(task));
        let again = Tasks::open(&dir, identity("a")).unwrap();
        assert_eq!(again.open_id(&id), Some(task), "a restarted server opens it");
        assert_eq!(Tasks::open(&dir, identity("b")).unwrap().open_id(&id), None, "another agent cannot");
        let mut forged = id.clone();
        forged.replace_range(8..9, if &id[8..9] == "A" { "B" } else { "A" });
        assert_eq!(tasks.open_id(&forged), None);
        assert_eq!(tasks.open_id("wait.garbage"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
