//! A2A's JSON to the store's values and back: the params of each method read with the path of
//! any refused field (`params.message.parts[0].text`), the rules no shape states checked (a
//! part holds one kind of content, a message has parts, lengths), and stored tasks and update
//! entries rendered as A2A's `Task` and `StreamResponse`.

use base64::Engine as _;
use inbox_api::a2a::{
    Artifact, Message, Part, Role, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus,
    TaskStatusUpdateEvent,
};
use inbox_api::time::format_utc;
use inbox_store::{TaskState as StoredState, TaskUpdate, UpdateKind};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::RpcError;

/// Longest `messageId`, `artifactId` or task id a client may give, in bytes.
pub const ID_BYTES_MAX: usize = 128;
/// Longest `contextId`, in bytes (the store's column).
pub const CONTEXT_ID_BYTES_MAX: usize = 256;
/// Most parts one message or artifact may hold.
pub const PARTS_MAX: usize = 64;
/// Longest `url` of a part, a `filename` or a `mediaType`.
const URL_BYTES_MAX: usize = 2_048;
const FILENAME_BYTES_MAX: usize = 256;
const MEDIA_TYPE_BYTES_MAX: usize = 128;
/// Longest artifact name and description.
const NAME_BYTES_MAX: usize = 256;
const DESCRIPTION_BYTES_MAX: usize = 2_048;

/// A refused field: its path and what is wrong, for either answer (a JSON-RPC error's
/// `fieldViolations`, or an inbox problem's `field`).
pub type Refused = (String, String);

/// Reads a method's params (an object; absent or null reads as `{}`), naming the refused field.
pub fn params<T: DeserializeOwned>(params: Value) -> Result<T, RpcError> {
    let params = match params {
        Value::Null => Value::Object(Default::default()),
        Value::Object(members) => Value::Object(members),
        other => {
            return Err(RpcError::invalid_params("params", format!("is {other}; send an object")));
        }
    };
    serde_path_to_error::deserialize(params).map_err(|err| {
        let path = err.path().to_string();
        let field = if path == "." { "params".to_owned() } else { format!("params.{path}") };
        RpcError::invalid_params(&field, err.into_inner().to_string())
    })
}

/// A refused field as invalid params.
pub fn rpc((field, description): Refused) -> RpcError {
    RpcError::invalid_params(&field, description)
}

fn refuse(field: &str, description: impl Into<String>) -> Refused {
    (field.to_owned(), description.into())
}

/// A free-text id: 1 to `max` bytes without control characters.
pub fn check_id(field: &str, text: &str, max: usize) -> Result<(), Refused> {
    if text.is_empty() {
        return Err(refuse(field, "is required"));
    }
    if text.len() > max {
        return Err(refuse(field, format!("is {} bytes; the limit is {max}", text.len())));
    }
    if text.chars().any(char::is_control) {
        return Err(refuse(field, "holds control characters; use printable text"));
    }
    Ok(())
}

fn check_text(field: &str, text: Option<&str>, max: usize) -> Result<(), Refused> {
    match text {
        Some(text) if text.len() > max => {
            Err(refuse(field, format!("is {} bytes; the limit is {max}", text.len())))
        }
        _ => Ok(()),
    }
}

/// A part: exactly one of text, raw (base64), url or data, and bounded names.
pub fn check_part(field: &str, part: &Part) -> Result<(), Refused> {
    let kinds = [part.text.is_some(), part.raw.is_some(), part.url.is_some(), part.data.is_some()];
    match kinds.iter().filter(|k| **k).count() {
        1 => {}
        0 => return Err(refuse(field, "holds no content; give one of text, raw, url or data")),
        _ => return Err(refuse(field, "holds more than one of text, raw, url and data; give one per part")),
    }
    if let Some(raw) = &part.raw {
        let standard = base64::engine::general_purpose::STANDARD.decode(raw.trim_end_matches('=')).is_ok()
            || base64::engine::general_purpose::STANDARD_NO_PAD.decode(raw.trim_end_matches('=')).is_ok();
        let url_safe =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(raw.trim_end_matches('=')).is_ok();
        if !(standard || url_safe) {
            return Err(refuse(&format!("{field}.raw"), "is not base64; send the bytes base64-encoded"));
        }
    }
    if let Some(url) = &part.url {
        check_id(&format!("{field}.url"), url, URL_BYTES_MAX)?;
        if url.chars().any(char::is_whitespace) {
            return Err(refuse(&format!("{field}.url"), "holds spaces; send a URL"));
        }
    }
    check_text(&format!("{field}.filename"), part.filename.as_deref(), FILENAME_BYTES_MAX)?;
    if let Some(media_type) = &part.media_type {
        check_id(&format!("{field}.mediaType"), media_type, MEDIA_TYPE_BYTES_MAX)?;
        if !media_type.contains('/') {
            return Err(refuse(&format!("{field}.mediaType"), "is not a media type such as text/plain"));
        }
    }
    Ok(())
}

fn check_parts(field: &str, parts: &[Part]) -> Result<(), Refused> {
    if parts.is_empty() {
        return Err(refuse(
            &format!("{field}.parts"),
            "is empty; a message or artifact needs at least one part",
        ));
    }
    if parts.len() > PARTS_MAX {
        return Err(refuse(
            &format!("{field}.parts"),
            format!("holds {} parts; the limit is {PARTS_MAX}", parts.len()),
        ));
    }
    parts.iter().enumerate().try_for_each(|(i, part)| check_part(&format!("{field}.parts[{i}]"), part))
}

/// A message from `role`: its id, its parts, its context.
pub fn check_message(field: &str, message: &Message, role: Role) -> Result<(), Refused> {
    check_id(&format!("{field}.messageId"), &message.message_id, ID_BYTES_MAX)?;
    if message.role != role {
        return Err(refuse(
            &format!("{field}.role"),
            format!("is {}; this message must be {}", message.role.as_str(), role.as_str()),
        ));
    }
    check_parts(field, &message.parts)?;
    if let Some(context) = &message.context_id {
        check_id(&format!("{field}.contextId"), context, CONTEXT_ID_BYTES_MAX)?;
    }
    Ok(())
}

/// An artifact: its parts, names and (when given) id.
pub fn check_artifact(field: &str, artifact: &Artifact) -> Result<(), Refused> {
    if !artifact.artifact_id.is_empty() {
        check_id(&format!("{field}.artifactId"), &artifact.artifact_id, ID_BYTES_MAX)?;
    }
    check_text(&format!("{field}.name"), artifact.name.as_deref(), NAME_BYTES_MAX)?;
    check_text(&format!("{field}.description"), artifact.description.as_deref(), DESCRIPTION_BYTES_MAX)?;
    check_parts(field, &artifact.parts)
}

/// A count of messages to return (`historyLength`), when given: at least 0.
pub fn history_length(field: &str, value: Option<i64>) -> Result<Option<usize>, RpcError> {
    match value {
        None => Ok(None),
        Some(n) if n < 0 => Err(RpcError::invalid_params(field, format!("is {n}; send 0 or more"))),
        Some(n) => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
    }
}

pub fn state(state: StoredState) -> TaskState {
    match state {
        StoredState::Submitted => TaskState::Submitted,
        StoredState::Working => TaskState::Working,
        StoredState::InputRequired => TaskState::InputRequired,
        StoredState::AuthRequired => TaskState::AuthRequired,
        StoredState::Completed => TaskState::Completed,
        StoredState::Failed => TaskState::Failed,
        StoredState::Canceled => TaskState::Canceled,
        StoredState::Rejected => TaskState::Rejected,
    }
}

pub fn stored_state(state: TaskState) -> StoredState {
    match state {
        TaskState::Submitted => StoredState::Submitted,
        TaskState::Working => StoredState::Working,
        TaskState::InputRequired => StoredState::InputRequired,
        TaskState::AuthRequired => StoredState::AuthRequired,
        TaskState::Completed => StoredState::Completed,
        TaskState::Failed => StoredState::Failed,
        TaskState::Canceled => StoredState::Canceled,
        TaskState::Rejected => StoredState::Rejected,
    }
}

/// A stored message (kept as the server checked it) read back; one that no longer reads is
/// left out rather than failing the whole task.
fn message_of(value: &Value) -> Option<Message> {
    serde_json::from_value(value.clone()).ok()
}

/// The status message: the agent's, else the store's note as a message of the agent's (its id
/// made from the task and the update, so every read names it alike).
fn status_message(
    task_id: &str,
    context_id: &str,
    seq: u64,
    message: Option<&Value>,
    note: Option<&str>,
) -> Option<Message> {
    if let Some(message) = message.and_then(message_of) {
        return Some(message);
    }
    note.map(|note| Message {
        message_id: format!("{task_id}-status-{seq}"),
        context_id: Some(context_id.to_owned()),
        task_id: Some(task_id.to_owned()),
        role: Role::Agent,
        parts: vec![Part::text(note)],
        metadata: None,
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
    })
}

/// A stored task as A2A's `Task`: its newest `history_length` messages (all when absent, none
/// at 0), its artifacts when asked.
pub fn task(task: &inbox_store::Task, history_length: Option<usize>, artifacts: bool) -> Task {
    let (id, context) = (task.task_id.as_str(), task.context_id.as_str());
    let keep = history_length.unwrap_or(usize::MAX).min(task.history.len());
    Task {
        id: id.to_owned(),
        context_id: context.to_owned(),
        status: TaskStatus {
            state: state(task.state()),
            message: status_message(
                id,
                context,
                task.status.seq,
                task.status.message.as_ref(),
                task.status.note.as_deref(),
            ),
            timestamp: Some(format_utc(task.status.at.get())),
        },
        artifacts: match artifacts {
            true => task.artifacts.iter().filter_map(|a| serde_json::from_value(a.clone()).ok()).collect(),
            false => Vec::new(),
        },
        history: task.history[task.history.len() - keep..].iter().filter_map(message_of).collect(),
        metadata: None,
    }
}

/// An entry of a task's update log as the event a stream or webhook carries.
pub fn update(task_id: &str, context_id: &str, update: &TaskUpdate) -> StreamResponse {
    let status = || TaskStatus {
        state: state(update.state),
        message: status_message(
            task_id,
            context_id,
            update.seq,
            update.message.as_ref(),
            update.note.as_deref(),
        ),
        timestamp: Some(format_utc(update.at.get())),
    };
    match update.kind {
        UpdateKind::Task => StreamResponse::Task(Task {
            id: task_id.to_owned(),
            context_id: context_id.to_owned(),
            status: status(),
            artifacts: Vec::new(),
            history: Vec::new(),
            metadata: None,
        }),
        UpdateKind::Status => StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: task_id.to_owned(),
            context_id: context_id.to_owned(),
            status: status(),
            metadata: None,
        }),
        UpdateKind::Artifact => StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: task_id.to_owned(),
            context_id: context_id.to_owned(),
            artifact: update
                .artifact
                .as_ref()
                .and_then(|a| serde_json::from_value(a.clone()).ok())
                .unwrap_or_default(),
            append: false,
            last_chunk: true,
            metadata: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn params_name_the_refused_field() {
        let refused =
            params::<inbox_api::a2a::SendMessageRequest>(json!({"message": {"role": "ROLE_NOBODY"}}))
                .unwrap_err();
        assert_eq!(refused.code, -32602);
        assert!(refused.message.starts_with("params.message.role "), "{}", refused.message);
        let refused = params::<inbox_api::a2a::GetTaskRequest>(json!([1])).unwrap_err();
        assert!(refused.message.starts_with("params is [1]"), "{}", refused.message);
    }

    #[test]
    fn parts_hold_exactly_one_kind_of_content() {
        assert!(check_part("p", &Part::text("hi")).is_ok());
        let empty = check_part("p", &Part::default()).unwrap_err();
        assert_eq!(empty.0, "p");
        let two = Part { text: Some("a".into()), url: Some("https://x".into()), ..Part::default() };
        assert!(check_part("p", &two).unwrap_err().1.contains("more than one"));
        let raw = Part { raw: Some("not base64!".into()), ..Part::default() };
        assert_eq!(check_part("p", &raw).unwrap_err().0, "p.raw");
        let bytes =
            Part { raw: Some("aGVsbG8=".into()), media_type: Some("text/plain".into()), ..Part::default() };
        assert!(check_part("p", &bytes).is_ok());
    }

    #[test]
    fn a_message_needs_its_id_role_and_parts() {
        let message: Message =
            serde_json::from_value(json!({"messageId": "", "role": "ROLE_USER", "parts": []})).unwrap();
        assert_eq!(
            check_message("params.message", &message, Role::User).unwrap_err().0,
            "params.message.messageId"
        );
        let message = Message { message_id: "m".into(), ..message };
        assert_eq!(
            check_message("params.message", &message, Role::User).unwrap_err().0,
            "params.message.parts"
        );
        assert_eq!(check_message("m", &message, Role::Agent).unwrap_err().0, "m.role");
    }
}
