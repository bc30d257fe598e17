//! The `taskIds` of a `subscriptions/listen` request: the tasks extension's way for a client
//! to ask for a task's status to be pushed (`notifications/tasks`) instead of polling
//! `tasks/get`. rmcp (3.11) reads a listen request's filter into a `SubscriptionFilter` that
//! has no `taskIds` and acknowledges with that filter, so the field would be dropped on the
//! way in and missing from the acknowledgement on the way out. This module fills both gaps
//! at the stdio boundary, where the JSON is still whole: the reader hands every listen request
//! here before rmcp sees it ([`TaskListens::on_request`]), which decides which of the named
//! tasks it honors (those this agent's key opens, not expired) and keeps them by the
//! request's id; the writer adds them to the acknowledgement as it leaves
//! ([`TaskListens::on_output`]); and the server's `listen` reads them
//! ([`TaskListens::accepted`]) and sends each task's state until the subscription ends
//! ([`TaskListens::end`]).
//!
//! A client that names tasks without declaring the extension is answered, as the extension
//! says, with -32021 (Missing required client capability) and its request goes no further.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use rmcp::model::RequestId;
use serde_json::{Value, json};

use super::tasks::Tasks;

pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
const LISTEN: &str = "subscriptions/listen";
const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const MISSING_CAPABILITY: i64 = -32021;
/// Task ids one subscription follows; more are left out of its acknowledgement.
pub const TASK_IDS_MAX: usize = 64;
/// Listen requests kept at once; one rmcp refused (so no `listen` ever ends it) is dropped
/// oldest first.
const LISTENS_MAX: usize = 64;

/// The honored task ids of the open listen requests, by request id.
pub struct TaskListens {
    tasks: Option<Arc<Tasks>>,
    listens: Mutex<VecDeque<(String, Vec<String>)>>,
}

impl std::fmt::Debug for TaskListens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskListens").field("tasks", &self.tasks.is_some()).finish_non_exhaustive()
    }
}

impl TaskListens {
    /// Judges task ids with `tasks` (none: every id is refused).
    pub fn new(tasks: Option<Arc<Tasks>>) -> TaskListens {
        TaskListens { tasks, listens: Mutex::default() }
    }

    /// Looks at one message from the client. A listen request naming tasks has the ones
    /// honored kept; the answer is `Some(error line)` for one that must not reach the service.
    pub fn on_request(&self, line: &[u8]) -> Option<String> {
        if !contains(line, LISTEN.as_bytes()) {
            return None;
        }
        let message: Value = serde_json::from_slice(line).ok()?;
        if message.get("method").and_then(Value::as_str) != Some(LISTEN) {
            return None;
        }
        let id = message.get("id")?;
        let params = message.get("params")?;
        let named = params.get("notifications")?.get("taskIds")?;
        let meta = params.get("_meta");
        // Only a request of the current protocol (it carries its version and capabilities);
        // rmcp answers any other as it answers every listen request.
        meta.and_then(|meta| meta.get(PROTOCOL_VERSION))?;
        let declared = meta
            .and_then(|meta| meta.get(CLIENT_CAPABILITIES))
            .and_then(|capabilities| capabilities.get("extensions"))
            .and_then(|extensions| extensions.get(TASKS_EXTENSION))
            .is_some();
        if !declared {
            return Some(missing_capability(id));
        }
        let Some(named) = named.as_array().filter(|ids| ids.iter().all(Value::is_string)) else {
            return Some(invalid_params(id, "notifications.taskIds must be an array of task id strings"));
        };
        let mut honored: Vec<String> = Vec::new();
        for task_id in named.iter().filter_map(Value::as_str) {
            if honored.len() < TASK_IDS_MAX
                && !honored.iter().any(|kept| kept == task_id)
                && self.honors(task_id)
            {
                honored.push(task_id.to_owned());
            }
        }
        let mut listens = self.listens.lock().expect("task listens lock");
        let key = id.to_string();
        listens.retain(|(kept, _)| *kept != key);
        if listens.len() >= LISTENS_MAX {
            listens.pop_front();
        }
        listens.push_back((key, honored));
        None
    }

    /// Looks at one message to the client: the acknowledgement of a listen request that named
    /// tasks gets the honored ones; `None` leaves the line as it is.
    pub fn on_output(&self, line: &[u8]) -> Option<Vec<u8>> {
        if !contains(line, ACKNOWLEDGED.as_bytes()) {
            return None;
        }
        let mut message: Value = serde_json::from_slice(line).ok()?;
        if message.get("method").and_then(Value::as_str) != Some(ACKNOWLEDGED) {
            return None;
        }
        let key = message.get("params")?.get("_meta")?.get(SUBSCRIPTION_ID)?.to_string();
        let honored = {
            let listens = self.listens.lock().expect("task listens lock");
            listens.iter().find(|(kept, _)| *kept == key).map(|(_, honored)| honored.clone())?
        };
        if honored.is_empty() {
            return None;
        }
        let notifications = message.get_mut("params")?.get_mut("notifications")?.as_object_mut()?;
        notifications.insert("taskIds".to_owned(), json!(honored));
        let mut line = serde_json::to_vec(&message).ok()?;
        line.push(b'\n');
        Some(line)
    }

    /// The tasks a listen request asked for that it was granted.
    pub fn accepted(&self, id: &RequestId) -> Vec<String> {
        let key = request_key(id);
        let listens = self.listens.lock().expect("task listens lock");
        listens.iter().find(|(kept, _)| *kept == key).map(|(_, honored)| honored.clone()).unwrap_or_default()
    }

    /// The listen request ended.
    pub fn end(&self, id: &RequestId) {
        let key = request_key(id);
        self.listens.lock().expect("task listens lock").retain(|(kept, _)| *kept != key);
    }

    fn honors(&self, task_id: &str) -> bool {
        let Some(tasks) = &self.tasks else { return false };
        tasks.open_id(task_id).is_some_and(|task| !task.expired())
    }
}

fn request_key(id: &RequestId) -> String {
    serde_json::to_value(id).map(|value| value.to_string()).unwrap_or_default()
}

fn contains(line: &[u8], needle: &[u8]) -> bool {
    line.windows(needle.len()).any(|window| window == needle)
}

fn missing_capability(id: &Value) -> String {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": MISSING_CAPABILITY,
            "message": "Missing required client capability: taskIds need the io.modelcontextprotocol/tasks extension",
            "data": { "requiredCapabilities": { "extensions": { TASKS_EXTENSION: {} } } },
        },
    })
    .to_string()
}

fn invalid_params(id: &Value, problem: &str) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32602, "message": format!("Invalid params: {problem}") } })
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::tasks::Identity;

    fn listen(id: &str, task_ids: Value, extension: bool) -> Vec<u8> {
        let extensions = if extension { json!({ TASKS_EXTENSION: {} }) } else { json!({}) };
        serde_json::to_vec(&json!({
            "jsonrpc": "2.0", "id": id, "method": LISTEN,
            "params": {
                "_meta": { PROTOCOL_VERSION: "2026-07-28", CLIENT_CAPABILITIES: { "extensions": extensions } },
                "notifications": { "taskIds": task_ids },
            },
        }))
        .unwrap()
    }

    fn ack(id: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "jsonrpc": "2.0", "method": ACKNOWLEDGED,
            "params": { "_meta": { SUBSCRIPTION_ID: id }, "notifications": {} },
        }))
        .unwrap()
    }

    #[test]
    fn own_tasks_are_honored_and_written_into_the_acknowledgement() {
        let dir = std::env::temp_dir().join(format!("mcp-task-listen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let identity =
            Identity { server: "http://127.0.0.1:1".into(), tenant: "demo".into(), agent: "a".into() };
        let tasks = Arc::new(Tasks::open(&dir, identity).unwrap());
        let (own, _) = tasks.create(30, 0).unwrap().unwrap();
        let listens = TaskListens::new(Some(tasks));

        let request = listen("listen-1", json!([own, "wait.forged", own]), true);
        assert_eq!(listens.on_request(&request), None);
        let id = RequestId::String("listen-1".into());
        assert_eq!(listens.accepted(&id), vec![own.clone()], "only its own task, once");
        let written: Value = serde_json::from_slice(&listens.on_output(&ack("listen-1")).unwrap()).unwrap();
        assert_eq!(written["params"]["notifications"]["taskIds"], json!([own]));
        assert_eq!(listens.on_output(&ack("listen-2")), None, "another subscription is left alone");
        listens.end(&id);
        assert!(listens.accepted(&id).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn naming_tasks_without_the_extension_is_refused() {
        let listens = TaskListens::new(None);
        let refusal = listens.on_request(&listen("7", json!(["wait.x"]), false)).unwrap();
        let refusal: Value = serde_json::from_str(&refusal).unwrap();
        assert_eq!(refusal["error"]["code"], MISSING_CAPABILITY);
        assert_eq!(refusal["id"], "7");
        assert!(refusal["error"]["data"]["requiredCapabilities"]["extensions"][TASKS_EXTENSION].is_object());
        let bad = listens.on_request(&listen("8", json!("wait.x"), true)).unwrap();
        assert!(bad.contains("-32602"), "{bad}");
        let other = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        assert_eq!(listens.on_request(other), None);
    }
}
