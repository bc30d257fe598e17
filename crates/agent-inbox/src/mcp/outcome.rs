//! Tool results as a language model reads them: the service's answer as structured JSON (with
//! the same JSON as text), and every refusal as a tool error (`isError`) carrying the problem's
//! stable `code`, its sentence, and what to do next when that is not obvious.

use inbox_api::{ItemError, ProblemCode};
use inbox_client::ClientError;
use rmcp::model::CallToolResult;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::retry::retry_after;

pub fn success(value: &impl Serialize) -> CallToolResult {
    match serde_json::to_value(value) {
        Ok(value) => CallToolResult::structured(value),
        Err(err) => failure("internal", &format!("cannot encode the answer: {err}"), Map::new()),
    }
}

/// An argument the tool refuses before calling the service.
pub fn invalid_argument(detail: &str) -> CallToolResult {
    failure("invalid_argument", detail, Map::new())
}

/// A call that failed: refused by the service, or not answered.
pub fn from_error(err: &ClientError) -> CallToolResult {
    match err {
        ClientError::Refused { problem } => {
            let mut extra = problem.extensions.clone();
            extra.remove("retry_after");
            extra.insert("status".to_owned(), problem.status.into());
            if let Some(after) = retry_after(err) {
                extra.insert("retry_after_seconds".to_owned(), after.as_secs().into());
            }
            failure(problem.code.as_str(), &problem.detail, extra)
        }
        ClientError::Unreachable(_) => failure("unreachable", &err.to_string(), Map::new()),
        ClientError::Credentials(_) => failure("credentials", &err.to_string(), Map::new()),
        _ => failure("client_error", &err.to_string(), Map::new()),
    }
}

/// One item of a batch the service refused (acknowledge, heartbeat, claim by id).
pub fn from_item(event_id: &str, error: &ItemError) -> CallToolResult {
    let mut extra = Map::new();
    extra.insert("event_id".to_owned(), event_id.into());
    failure(error.code.as_str(), &error.detail, extra)
}

fn failure(code: &str, detail: &str, mut extra: Map<String, Value>) -> CallToolResult {
    let mut body = json!({ "code": code, "detail": detail });
    if let Some(hint) = hint(code) {
        body["what_to_do"] = hint.into();
    }
    if let Value::Object(fields) = &mut body {
        for (key, value) in std::mem::take(&mut extra) {
            fields.entry(key).or_insert(value);
        }
    }
    CallToolResult::structured_error(body)
}

/// What to do after a busy service: wait as asked.
const WAIT_AND_RETRY: &str =
    "the service is busy; wait retry_after_seconds (or a few seconds) and call again";

/// The next step for the refusals a model meets in ordinary work.
fn hint(code: &str) -> Option<&'static str> {
    // The codes of failures that never got a problem document from the service.
    match code {
        "unreachable" => return Some("the inbox service did not answer; try again in a little while"),
        "http_429" | "http_503" => return Some(WAIT_AND_RETRY),
        "invalid_argument" => return Some("fix the named argument and call again"),
        _ => {}
    }
    Some(match ProblemCode::parse(code) {
        ProblemCode::LeaseMismatch | ProblemCode::LeaseExpired => {
            "this lease no longer holds the event (it expired, was released, or another worker claimed \
             it): stop working on it; call inbox_claim to get work with a fresh lease_token"
        }
        ProblemCode::AlreadyAcked | ProblemCode::EventTerminal => {
            "the event is finished; nothing more to do for it"
        }
        ProblemCode::CursorResetRequired => {
            "events before oldest_available_seq were archived: call inbox_poll again with after_seq = \
             oldest_available_seq - 1"
        }
        ProblemCode::SignatureRequired | ProblemCode::SignatureInvalid => {
            "this tenant requires signed calls: log in again (agent-inbox login) so the profile has a signing \
             key, and run agent-inbox mcp on that profile rather than with --token"
        }
        ProblemCode::SessionRequired | ProblemCode::SessionSuperseded => {
            "this tenant allows one active session per agent, and that session belongs to another process \
             (such as agent-inbox listen) of this agent; let that process do the work"
        }
        ProblemCode::ScopeMissing => {
            "this token may not make this call; ask for a token with the named scope"
        }
        ProblemCode::RateLimited
        | ProblemCode::AuthThrottled
        | ProblemCode::DatabaseBusy
        | ProblemCode::DatabaseUnavailable => WAIT_AND_RETRY,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use inbox_api::Problem;

    use super::*;

    #[test]
    fn a_refusal_is_a_tool_error_with_its_code_and_extensions() {
        let problem = Problem::new(410, "cursor_reset_required", "Gone", "the cursor is too old")
            .with("oldest_available_seq", 40)
            .with("retry_after", "3");
        let result = from_error(&ClientError::Refused { problem: Box::new(problem) });
        assert_eq!(result.is_error, Some(true));
        let body = result.structured_content.unwrap();
        assert_eq!(body["code"], "cursor_reset_required");
        assert_eq!(body["detail"], "the cursor is too old");
        assert_eq!(body["status"], 410);
        assert_eq!(body["oldest_available_seq"], 40);
        assert_eq!(body["retry_after_seconds"], 3);
        assert!(body["what_to_do"].as_str().unwrap().contains("after_seq"));
    }

    #[test]
    fn an_item_error_names_its_event() {
        let error = ItemError { code: "lease_mismatch".into(), detail: "not your lease".into() };
        let body = from_item("evt_1", &error).structured_content.unwrap();
        assert_eq!(body["code"], "lease_mismatch");
        assert_eq!(body["event_id"], "evt_1");
    }
}
