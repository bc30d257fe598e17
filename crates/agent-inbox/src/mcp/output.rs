//! The tools' output schemas. A tool's `structuredContent` is the service's own answer, so its
//! schema is that answer's schema in the OpenAPI document the server generates from the wire
//! types (`openapi.json`, embedded at build time) with its references inlined: one source,
//! and a wire change that regenerates the document changes the tools' schemas with it.
//! `inbox_wait` answers with a shape of its own, written here.

use std::sync::{Arc, LazyLock};

use rmcp::model::JsonObject;
use serde_json::{Map, Value, json};

/// The OpenAPI document of this build's service (JSON Schema 2020-12 in OpenAPI 3.1).
const OPENAPI: &str = include_str!("../../../../openapi.json");

static COMPONENTS: LazyLock<Map<String, Value>> = LazyLock::new(|| {
    let document: Value = serde_json::from_str(OPENAPI).expect("openapi.json is JSON");
    document["components"]["schemas"].as_object().cloned().expect("openapi.json has component schemas")
});

/// The schema of the component `name` (such as `PollResponse`), references inlined.
pub fn component(name: &str) -> Arc<JsonObject> {
    let mut schema = Value::Object(
        COMPONENTS
            .get(name)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_else(|| panic!("openapi.json has no component schema {name}")),
    );
    inline(&mut schema, 0);
    match schema {
        Value::Object(object) => Arc::new(object),
        _ => unreachable!("a component schema is an object"),
    }
}

/// `inbox_wait`'s answer, as a bounded wait and as a task's result.
pub fn wait() -> Arc<JsonObject> {
    let schema = json!({
        "type": "object",
        "required": ["work_waiting", "claimable", "claimable_count_capped", "head_seq"],
        "properties": {
            "work_waiting": {"type": "boolean", "description": "an event can be claimed now"},
            "claimable": {"type": "integer", "minimum": 0, "description": "how many (counted up to 100)"},
            "claimable_count_capped": {"type": "boolean", "description": "true means 100 or more"},
            "head_seq": {"type": "integer", "minimum": 0, "description": "the inbox's newest sequence number"}
        }
    });
    match schema {
        Value::Object(object) => Arc::new(object),
        _ => unreachable!(),
    }
}

/// Replaces every `{"$ref": "#/components/schemas/X"}` with X's schema. The wire types have no
/// recursive references; the depth bound turns a future cycle into a loud failure.
fn inline(value: &mut Value, depth: usize) {
    assert!(depth < 32, "openapi.json's component references nest too deep (a cycle?)");
    match value {
        Value::Object(object) => {
            if let Some(Value::String(reference)) = object.get("$ref") {
                let name = reference.trim_start_matches("#/components/schemas/");
                let mut target = COMPONENTS
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| panic!("openapi.json refers to a missing schema {reference}"));
                inline(&mut target, depth + 1);
                *value = target;
                return;
            }
            for child in object.values_mut() {
                inline(child, depth + 1);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| inline(item, depth + 1)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_schema_is_an_object_schema_without_references() {
        for name in [
            "PollResponse",
            "ClaimResponse",
            "AckOutcome",
            "ReleaseResponse",
            "HeartbeatOutcome",
            "PublishResponse",
        ] {
            let schema = component(name);
            assert_eq!(schema.get("type"), Some(&json!("object")), "{name}");
            let text = serde_json::to_string(&*schema).unwrap();
            assert!(!text.contains("$ref"), "{name} still refers elsewhere: {text}");
        }
        assert_eq!(wait()["required"].as_array().unwrap().len(), 4);
    }
}
