//! The OpenAPI document, generated from the handlers' annotations and the wire types. A copy
//! is checked in at `openapi.json` in the repository root; a test fails when the two differ.

use std::collections::BTreeMap;

use inbox_core::{EventId, EventState, InboxSeq, KeyId, RecipientId, RegistrationId, RoomId, SessionId};
use inbox_rooms::ROOM_NAME_BYTES_MAX;
use inbox_store::{DELIVERY_ATTEMPTS_MAX, REASON_BYTES_MAX, RETRY_AFTER_MS_MAX, SESSIONS_LIST_MAX};
use serde_json::{Value, json};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, PartialSchema};

use crate::http::routes::{
    admin, admin_events, admin_views, agent_keys, agents, callbacks, events, inbox, rooms, sessions, streams,
    tenant_policy, tokens, ws,
};
use crate::ops::admin_views::ACTIVITY_MINUTES_MAX;
use crate::ops::callbacks::registrations::{
    RATE_PER_MINUTE_MAX, REPLAY_WINDOW_SECONDS_RANGE, ROTATION_OVERLAP_SECONDS_MAX,
};
use crate::ops::signatures::agent_keys::RETIRE_AFTER_SECONDS_MAX;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "agent-inbox",
        description = "Durable per-recipient inboxes for AI agents: publish, poll after cursor, claim with a visibility lease, acknowledge, release, heartbeat. Every error is an RFC 9457 problem with a stable code.",
        license(name = "Apache-2.0")
    ),
    paths(
        inbox::poll, inbox::head, inbox::claim, inbox::acknowledge, inbox::release, inbox::heartbeat, inbox::resync,
        agents::inbox, agents::claim, agents::ack, agents::release,
        events::publish,
        rooms::create_room, rooms::get_room, rooms::add_members, rooms::remove_member, rooms::post_message,
        sessions::subscribe, sessions::heartbeat,
        streams::sse, streams::subscribe_alias, streams::ticket, streams::cookie, ws::websocket,
        admin::list_parked, admin::requeue, admin::purge, admin::quarantine, admin::release_quarantined,
        admin::inboxes, admin_events::events, admin_events::event,
        admin_views::sessions, admin_views::callbacks, admin_views::enable_callback, admin_views::agent_keys,
        admin_views::activity,
        admin_views::quota_refusals,
        tokens::refresh, tokens::jwks,
        agent_keys::register, agent_keys::list, agent_keys::retire,
        tenant_policy::get_policy, tenant_policy::set_policy,
        callbacks::register, callbacks::list, callbacks::read, callbacks::remove, callbacks::verify,
        callbacks::rotate, callbacks::deliveries, callbacks::register_for_agent,
    ),
    // Query parameters' types are not collected with the bodies'.
    components(schemas(inbox_api::EventsOrder)),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format("JWT").build(),
            ),
        );
    }
}

/// The document as pretty JSON, with a trailing newline, for the default configuration (the
/// checked-in copy).
pub fn document() -> String {
    document_for(&crate::config::Config::default())
}

/// The document a server with `config` serves: bounds that are settings (the longest long
/// poll and lease) are this server's.
pub fn document_for(config: &crate::config::Config) -> String {
    let generated = ApiDoc::openapi().to_json().expect("the OpenAPI document serializes");
    let mut document: Value = serde_json::from_str(&generated).expect("the generated document is JSON");
    inline_scalars(&mut document);
    add_error_answers(&mut document);
    add_constraints(&mut document, config);
    let mut json = serde_json::to_string_pretty(&document).expect("the OpenAPI document serializes");
    json.push('\n');
    json
}

/// The JSON Schema a type states for itself (an id's length and pattern, a sequence's range).
fn schema_of<T: PartialSchema>() -> Value {
    serde_json::to_value(T::schema()).expect("a schema serializes")
}

/// Ids, sequences and closed sets (`TenantId`, `InboxSeq`, `Priority`, ...) each have a schema
/// of their own, which utoipa refers to. The document states each where it is used instead:
/// a plain string or integer with the type's bounds, pattern or enum (and `null` beside it
/// when the field is optional), so a field's rules are read where the field is, as they were
/// when they were written here by hand.
fn inline_scalars(document: &mut Value) {
    let Some(schemas) = document["components"]["schemas"].as_object_mut() else { return };
    let scalars: BTreeMap<String, Value> = schemas
        .iter()
        .filter(|(_, schema)| matches!(schema["type"].as_str(), Some("string" | "integer")))
        .map(|(name, schema)| {
            let mut schema = schema.clone();
            // The field's own description says what it is for.
            schema.as_object_mut().map(|s| s.remove("description"));
            (format!("#/components/schemas/{name}"), schema)
        })
        .collect();
    schemas.retain(|name, _| !scalars.contains_key(&format!("#/components/schemas/{name}")));
    inline(document, &scalars);
}

fn inline(value: &mut Value, scalars: &BTreeMap<String, Value>) {
    let merge = |members: &mut serde_json::Map<String, Value>, schema: &Value| {
        for (key, value) in schema.as_object().into_iter().flatten() {
            members.entry(key.clone()).or_insert_with(|| value.clone());
        }
    };
    match value {
        Value::Array(items) => items.iter_mut().for_each(|item| inline(item, scalars)),
        Value::Object(members) => {
            members.values_mut().for_each(|member| inline(member, scalars));
            if let Some(schema) = members.get("$ref").and_then(Value::as_str).and_then(|r| scalars.get(r)) {
                members.remove("$ref");
                merge(members, schema);
            }
            // An optional one: `{"oneOf": [{"type": "null"}, <scalar>]}`.
            let optional = members.get("oneOf").and_then(Value::as_array).is_some_and(|parts| {
                parts.len() == 2
                    && parts[0] == json!({"type": "null"})
                    && matches!(parts[1]["type"].as_str(), Some("string" | "integer"))
            });
            if optional && let Some(Value::Array(mut parts)) = members.remove("oneOf") {
                let mut scalar = parts.remove(1);
                scalar["type"] = json!([scalar["type"].take(), "null"]);
                if let Some(values) = scalar.get_mut("enum").and_then(Value::as_array_mut) {
                    values.push(Value::Null);
                }
                merge(members, &scalar);
            }
        }
        _ => {}
    }
}

/// The bounds the server enforces, written into the schemas: ranges, lengths, patterns, enums
/// and formats, so generated clients and contract tools know what is refused before sending it.
/// Every number is the constant or setting its validator checks against, never a copy of it.
/// Integers are JSON integers: a whole-number float such as `5.0` is refused (400
/// `invalid_field`), as the schemas' `"type": "integer"` says.
fn add_constraints(document: &mut Value, config: &crate::config::Config) {
    let store = crate::database::store_config(config);
    let lease_max = store.lease_ms_max / 1_000;
    let wait_max = config.inbox.long_poll_wait_max.as_secs();
    let ticket_ttl_max = config.sessions.stream_ticket_ttl.as_secs();
    let cookie_ttl_max = config.tokens.access_token_ttl.as_secs();
    // Items one poll, claim, acknowledgement, heartbeat or admin batch may name or return, and
    // recipients one publish (or room) may reach.
    let batch_max = store.batch_events_max;
    let fanout_max = store.fanout_recipients_max;
    let retry_after_seconds_max = RETRY_AFTER_MS_MAX / 1_000;
    // Free text: no control characters (C0, DEL, C1); the server's limit is in bytes of
    // UTF-8, which JSON Schema cannot state: `maxLength` is the same number, in characters
    // (exact for ASCII).
    let text = |max: usize| json!({"pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*$", "maxLength": max});
    let limit = json!({"minimum": 1, "maximum": batch_max});
    // A reason an agent or operator gives: one line of 1 to `REASON_BYTES_MAX` bytes.
    let reason = json!({
        "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", "minLength": 1, "maxLength": REASON_BYTES_MAX
    });
    // Ids, sequences and closed sets state their own bounds (see `inline_scalars`); these are
    // the bounds of plain numbers, lists and free text, which are settings or constants of the
    // checks that use them.
    let table: Vec<(&str, &str, Value)> = vec![
        ("PollRequest", "limit", limit.clone()),
        ("PollRequest", "wait_seconds", json!({"maximum": wait_max})),
        ("ClaimRequest", "event_ids", json!({"minItems": 1, "maxItems": batch_max})),
        ("ClaimRequest", "limit", limit.clone()),
        ("ClaimRequest", "lease_seconds", json!({"minimum": 1, "maximum": lease_max})),
        ("AcknowledgeRequest", "acks", json!({"minItems": 1, "maxItems": batch_max})),
        ("AckEntry", "reason", reason.clone()),
        ("AckOneRequest", "reason", reason.clone()),
        ("ReleaseRequest", "retry_after_seconds", json!({"maximum": retry_after_seconds_max})),
        ("ReleaseRequest", "reason", text(REASON_BYTES_MAX)),
        ("ReleaseOneRequest", "reason", text(REASON_BYTES_MAX)),
        ("ReleaseOneRequest", "retry_after_seconds", json!({"maximum": retry_after_seconds_max})),
        ("HeartbeatRequest", "leases", json!({"minItems": 1, "maxItems": batch_max})),
        ("HeartbeatEntry", "extend_by_seconds", json!({"minimum": 1, "maximum": lease_max})),
        ("PublishRequest", "recipients", json!({"minItems": 1, "maxItems": fanout_max})),
        (
            "ParkedEventsRequest",
            "event_ids",
            json!({"minItems": 1, "maxItems": batch_max, "uniqueItems": true}),
        ),
        (
            "QuarantineRequest",
            "event_ids",
            json!({"minItems": 1, "maxItems": batch_max, "uniqueItems": true}),
        ),
        ("QuarantineRequest", "reason", reason),
        ("CreateRoomRequest", "members", json!({"maxItems": fanout_max})),
        ("RoomMembersRequest", "members", json!({"minItems": 1, "maxItems": fanout_max})),
        ("PublishRequest", "available_at_utc", json!({"format": "date-time"})),
        ("PublishRequest", "expires_at_utc", json!({"format": "date-time"})),
        ("PublishRequest", "max_attempts", json!({"minimum": 1, "maximum": DELIVERY_ATTEMPTS_MAX})),
        ("SubscribeRequest", "device_id", {
            let mut device = text(inbox_store::DEVICE_ID_BYTES_MAX);
            device["minLength"] = json!(1);
            device
        }),
        ("CallbackRegistrationRequest", "callback_url", json!({"format": "uri", "pattern": "^https://"})),
        (
            "CallbackRegistrationRequest",
            "max_rate_per_minute",
            json!({"minimum": 1, "maximum": RATE_PER_MINUTE_MAX}),
        ),
        (
            "CallbackRegistrationRequest",
            "replay_window_seconds",
            json!({"minimum": REPLAY_WINDOW_SECONDS_RANGE.start(), "maximum": REPLAY_WINDOW_SECONDS_RANGE.end()}),
        ),
        ("RotateCallbackSecretRequest", "overlap_seconds", json!({"maximum": ROTATION_OVERLAP_SECONDS_MAX})),
        ("StreamTicketRequest", "ttl_seconds", json!({"minimum": 1, "maximum": ticket_ttl_max})),
        ("StreamCookieRequest", "ttl_seconds", json!({"minimum": 1, "maximum": cookie_ttl_max})),
        (
            "CreateRoomRequest",
            "name",
            json!({
                "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", "minLength": 1, "maxLength": ROOM_NAME_BYTES_MAX
            }),
        ),
    ];
    let schemas = &mut document["components"]["schemas"];
    for (schema, property, constraints) in table {
        let (property, items) = match property.strip_suffix("/items") {
            Some(array) => (array, true),
            None => (property, false),
        };
        let mut target = &mut schemas[schema]["properties"][property];
        if items {
            target = &mut target["items"];
        }
        assert!(target.is_object(), "{schema}.{property} is in the document");
        for (key, value) in constraints.as_object().expect("constraints are an object") {
            target[key] = value.clone();
        }
    }
    // A room message is any JSON value.
    schemas["PostMessageRequest"]["properties"]["body"] =
        json!({"description": "The message: any JSON, at most the payload limit."});
    // An acknowledgement's reason and class go with the results that keep them: a quarantine
    // needs a reason, a failure may give one, a completion gives neither; only a quarantine
    // has a class.
    let quarantined = json!({"required": ["result"], "properties": {"result": {"const": "quarantined"}}});
    let keeps_reason =
        json!({"required": ["result"], "properties": {"result": {"enum": ["failed", "quarantined"]}}});
    let absent = json!({"type": "null"});
    for schema in ["AckEntry", "AckOneRequest"] {
        schemas[schema]["allOf"] = json!([
            {"if": quarantined, "then": {"required": ["reason"], "properties": {"reason": {"type": "string"}}},
             "else": {"properties": {"class": absent}}},
            {"if": keeps_reason, "else": {"properties": {"reason": absent}}},
        ]);
    }
    // Follow-ups (a hand-off) go only with `result: completed`, the default.
    let hands_off = json!({"required": ["follow_ups"], "properties": {"follow_ups": {"minItems": 1}}});
    let completed = json!({"properties": {"result": {"enum": ["completed", null]}}});
    schemas["AckEntry"]["allOf"]
        .as_array_mut()
        .expect("set above")
        .push(json!({"if": hands_off, "then": completed}));
    // A claim names its events or asks for the next `limit`, never both.
    schemas["ClaimRequest"]["not"] = json!({
        "required": ["event_ids", "limit"],
        "properties": {"event_ids": {"type": "array"}, "limit": {"type": "integer"}}
    });
    // Path and query parameters, by name wherever they appear: the routes read them as text
    // and the use cases check them, as the types named here do.
    let parameter_constraints: Vec<(&str, Value)> = vec![
        ("limit", limit),
        ("agent_id", schema_of::<RecipientId>()),
        ("recipient_id", schema_of::<RecipientId>()),
        ("room_id", schema_of::<RoomId>()),
        ("session_id", schema_of::<SessionId>()),
        ("event_id", schema_of::<EventId>()),
        ("after_seconds", json!({"maximum": RETIRE_AFTER_SECONDS_MAX})),
        ("after_seq", schema_of::<InboxSeq>()),
        ("state", json!({"enum": [EventState::DeadLetter.as_str(), EventState::Quarantined.as_str()]})),
        ("minutes", json!({"minimum": 1, "maximum": ACTIVITY_MINUTES_MAX})),
        ("registration_id", schema_of::<RegistrationId>()),
        ("key_id", schema_of::<KeyId>()),
    ];
    // A name that means something else on one path: an inbox's events filter by every state,
    // sessions list up to the store's own bound.
    let states: Vec<&str> = EventState::ALL.iter().map(|s| s.as_str()).collect();
    let path_constraints: Vec<(&str, &str, Value)> = vec![
        ("/v1/admin/inboxes/{recipient_id}/events", "state", json!({"enum": states})),
        ("/v1/admin/sessions", "limit", json!({"minimum": 1, "maximum": SESSIONS_LIST_MAX})),
    ];
    let Some(paths) = document["paths"].as_object_mut() else { return };
    for (path, item) in paths.iter_mut() {
        for operation in item.as_object_mut().into_iter().flat_map(|o| o.values_mut()) {
            let parameters = operation.get_mut("parameters").and_then(Value::as_array_mut);
            for parameter in parameters.into_iter().flatten() {
                let on_path = path_constraints.iter().find(|(p, n, _)| p == path && parameter["name"] == *n);
                let Some(constraints) = on_path.map(|(_, _, c)| c).or_else(|| {
                    parameter_constraints.iter().find(|(n, _)| parameter["name"] == *n).map(|(_, c)| c)
                }) else {
                    continue;
                };
                for (key, value) in constraints.as_object().expect("constraints are an object") {
                    parameter["schema"][key] = value.clone();
                }
            }
        }
    }
}

/// Operations whose body may be left out (an empty body means `{}`).
const OPTIONAL_BODIES: &[&str] = &[
    "/v1/streams/tickets",
    "/v1/streams/cookie",
    "/v1/agent-sessions/{session_id}/heartbeat",
    "/api/v1/agents/{agent_id}/inbox/claim",
];

/// Every operation's refusals, as the server really answers them: RFC 9457 problems
/// (`application/problem+json`, the `Problem` schema) for malformed input (400), a missing or
/// bad token (401), a missing scope or another tenant's resource (403), an unknown id (404),
/// an oversized or non-JSON body (413, 415), rate limits and throttles (429) and a database
/// that is away (503), the last two with `Retry-After`. Statuses an annotation documents
/// itself (409, 410, ...) keep their descriptions and get the problem media type.
fn add_error_answers(document: &mut Value) {
    let problem = json!({"schema": {"$ref": "#/components/schemas/Problem"}});
    let retry_after = json!({"Retry-After": {
        "description": "Seconds to wait before trying again.",
        "required": true,
        "schema": {"type": "integer", "minimum": 1}
    }});
    let Some(paths) = document["paths"].as_object_mut() else { return };
    for (path, item) in paths.iter_mut() {
        let Some(operations) = item.as_object_mut() else { continue };
        for operation in operations.values_mut() {
            if OPTIONAL_BODIES.contains(&path.as_str())
                && let Some(body) = operation.get_mut("requestBody")
            {
                body["required"] = json!(false);
            }
            let has_body = operation.get("requestBody").is_some();
            let has_path_params = path.contains('{');
            let open = path == "/v1/auth/refresh";
            let Some(responses) = operation["responses"].as_object_mut() else { continue };
            let mut add = |status: &str, description: &str, headers: Option<&Value>| {
                let response = responses.entry(status).or_insert_with(|| json!({"description": description}));
                if let Some(headers) = headers {
                    response["headers"] = headers.clone();
                }
            };
            add(
                "400",
                "invalid_field, malformed_json, unknown_field, ...: the input is refused, with the field",
                None,
            );
            if !open {
                add(
                    "401",
                    "unauthorized or invalid_token: send a valid 'Authorization: Bearer <token>'",
                    None,
                );
                add("403", "scope_missing or tenant_mismatch: the token may not do this", None);
            } else {
                add("401", "invalid_refresh_token or refresh_token_reused", None);
            }
            if has_path_params || has_body {
                add("404", "no such resource (an id in the path or the body)", None);
            }
            if has_body {
                add("413", "payload_too_large: the body is over the limit", None);
                add("415", "unsupported_media_type: send the body as application/json", None);
            }
            add(
                "429",
                "rate_limited or auth_throttled: slow down for Retry-After seconds",
                Some(&retry_after),
            );
            add("503", "database_unavailable: come back after Retry-After seconds", Some(&retry_after));
            for (status, response) in responses.iter_mut() {
                if status.as_str() >= "400" {
                    response["content"] = json!({"application/problem+json": problem});
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use inbox_core::{DeduplicationKey, EventType, FairnessKey, TenantId};

    use super::*;

    /// The checked-in copy must match the code. Regenerate it with
    /// `UPDATE_OPENAPI=1 cargo test -p inbox-server openapi`.
    #[test]
    fn checked_in_openapi_matches_the_code() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../openapi.json");
        let generated = super::document();
        if std::env::var_os("UPDATE_OPENAPI").is_some() {
            std::fs::write(&path, &generated).expect("write openapi.json");
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == generated,
            "openapi.json differs from the handlers' annotations; run UPDATE_OPENAPI=1 cargo test -p inbox-server openapi"
        );
        let parsed: serde_json::Value = serde_json::from_str(&generated).unwrap();
        for path in [
            "/v1/inbox/poll-after-cursor",
            "/v1/inbox/claim",
            "/v1/events",
            "/api/v1/agents/{agent_id}/inbox",
        ] {
            assert!(parsed["paths"].get(path).is_some(), "{path} is documented");
        }
    }

    /// Every `$ref` names a schema the document holds (the admin events' `order` once named one
    /// that was never written), and no id, sequence or enum is left a schema of its own: each
    /// is stated where its field is.
    #[test]
    fn references_resolve_and_scalars_are_inline() {
        fn references<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
            match value {
                Value::Array(items) => items.iter().for_each(|item| references(item, found)),
                Value::Object(members) => {
                    for (key, member) in members {
                        match member.as_str() {
                            Some(target) if key == "$ref" => found.push(target),
                            _ => references(member, found),
                        }
                    }
                }
                _ => {}
            }
        }
        let document: Value = serde_json::from_str(&super::document()).unwrap();
        let schemas = document["components"]["schemas"].as_object().unwrap();
        let mut found = Vec::new();
        references(&document, &mut found);
        for target in found {
            let name = target.strip_prefix("#/components/schemas/").unwrap_or(target);
            assert!(schemas.contains_key(name), "{target} is not in the document");
        }
        for (name, schema) in schemas {
            assert!(!matches!(schema["type"].as_str(), Some("string" | "integer")), "{name} is not inlined");
        }
    }

    /// A parameter documented as `in: path` must be a `{name}` of its route: query parameters
    /// of `IntoParams` structs need `#[into_params(parameter_in = Query)]`.
    #[test]
    fn path_parameters_are_in_their_paths() {
        let parsed: serde_json::Value = serde_json::from_str(&super::document()).unwrap();
        for (path, operations) in parsed["paths"].as_object().unwrap() {
            for operation in operations.as_object().unwrap().values() {
                for parameter in operation["parameters"].as_array().into_iter().flatten() {
                    let name = parameter["name"].as_str().unwrap();
                    if parameter["in"] == "path" {
                        assert!(
                            path.contains(&format!("{{{name}}}")),
                            "{path}: {name} is not a path parameter"
                        );
                    }
                }
            }
        }
    }

    /// Each bound the document states is the one its validator checks against: the constants
    /// the checks use and, for a server whose settings are not the defaults, its settings. A
    /// bound copied by hand into the document drifts when the limit changes; this fails then.
    #[test]
    fn bounds_are_the_validators() {
        let mut config = crate::config::Config::default();
        config.inbox.lease_max = Duration::from_secs(7_200);
        config.inbox.long_poll_wait_max = Duration::from_secs(40);
        config.sessions.stream_ticket_ttl = Duration::from_secs(30);
        let store = crate::database::store_config(&config);
        let document: Value = serde_json::from_str(&document_for(&config)).unwrap();
        let schemas = &document["components"]["schemas"];

        let batch = json!(store.batch_events_max);
        let fanout = json!(store.fanout_recipients_max);
        let reason = json!(REASON_BYTES_MAX);
        assert_eq!(
            schemas["SubscribeRequest"]["properties"]["supported_transports"]["items"]["enum"],
            json!(inbox_api::Transport::ALL.map(inbox_api::Transport::as_str)),
            "the transports a subscribe may name are the ones the server offers"
        );
        let bounds: Vec<(&str, &str, &str, Value)> = vec![
            ("PollRequest", "limit", "maximum", batch.clone()),
            ("ClaimRequest", "limit", "maximum", batch.clone()),
            ("ClaimRequest", "event_ids", "maxItems", batch.clone()),
            ("AcknowledgeRequest", "acks", "maxItems", batch.clone()),
            ("HeartbeatRequest", "leases", "maxItems", batch.clone()),
            ("ParkedEventsRequest", "event_ids", "maxItems", batch.clone()),
            ("QuarantineRequest", "event_ids", "maxItems", batch),
            ("PublishRequest", "recipients", "maxItems", fanout.clone()),
            ("CreateRoomRequest", "members", "maxItems", fanout.clone()),
            ("RoomMembersRequest", "members", "maxItems", fanout),
            ("AckEntry", "reason", "maxLength", reason.clone()),
            ("AckOneRequest", "reason", "maxLength", reason.clone()),
            ("QuarantineRequest", "reason", "maxLength", reason.clone()),
            ("ReleaseRequest", "reason", "maxLength", reason.clone()),
            ("ReleaseOneRequest", "reason", "maxLength", reason),
            ("ReleaseRequest", "retry_after_seconds", "maximum", json!(RETRY_AFTER_MS_MAX / 1_000)),
            ("ReleaseOneRequest", "retry_after_seconds", "maximum", json!(RETRY_AFTER_MS_MAX / 1_000)),
            ("ClaimRequest", "lease_seconds", "maximum", json!(store.lease_ms_max / 1_000)),
            ("HeartbeatEntry", "extend_by_seconds", "maximum", json!(store.lease_ms_max / 1_000)),
            ("PollRequest", "wait_seconds", "maximum", json!(config.inbox.long_poll_wait_max.as_secs())),
            (
                "StreamTicketRequest",
                "ttl_seconds",
                "maximum",
                json!(config.sessions.stream_ticket_ttl.as_secs()),
            ),
            (
                "StreamCookieRequest",
                "ttl_seconds",
                "maximum",
                json!(config.tokens.access_token_ttl.as_secs()),
            ),
            ("SubscribeRequest", "device_id", "maxLength", json!(inbox_store::DEVICE_ID_BYTES_MAX)),
            ("PublishRequest", "max_attempts", "maximum", json!(DELIVERY_ATTEMPTS_MAX)),
            ("CallbackRegistrationRequest", "max_rate_per_minute", "maximum", json!(RATE_PER_MINUTE_MAX)),
            (
                "CallbackRegistrationRequest",
                "replay_window_seconds",
                "minimum",
                json!(REPLAY_WINDOW_SECONDS_RANGE.start()),
            ),
            (
                "CallbackRegistrationRequest",
                "replay_window_seconds",
                "maximum",
                json!(REPLAY_WINDOW_SECONDS_RANGE.end()),
            ),
            (
                "RotateCallbackSecretRequest",
                "overlap_seconds",
                "maximum",
                json!(ROTATION_OVERLAP_SECONDS_MAX),
            ),
            ("CreateRoomRequest", "name", "maxLength", json!(ROOM_NAME_BYTES_MAX)),
            ("PublishRequest", "event_type", "maxLength", json!(EventType::BYTES_MAX)),
            ("PublishRequest", "deduplication_key", "maxLength", json!(DeduplicationKey::BYTES_MAX)),
            ("PostMessageRequest", "deduplication_key", "maxLength", json!(DeduplicationKey::BYTES_MAX)),
            ("PublishRequest", "fairness_key", "maxLength", json!(FairnessKey::BYTES_MAX)),
            (
                "TenantPolicyRequest",
                "pending_events_max",
                "maximum",
                json!(inbox_api::PENDING_EVENTS_MAX_LIMIT),
            ),
            ("TenantPolicyRequest", "stored_bytes_max", "maximum", json!(inbox_api::STORED_BYTES_MAX_LIMIT)),
            ("CallbackRegistrationRequest", "secret_id", "maxLength", json!(KeyId::BYTES_MAX)),
            ("RotateCallbackSecretRequest", "secret_id", "maxLength", json!(KeyId::BYTES_MAX)),
        ];
        for (schema, property, keyword, bound) in bounds {
            let stated = &schemas[schema]["properties"][property][keyword];
            assert_eq!(stated, &bound, "{schema}.{property} {keyword}");
        }

        // Ids, wherever a request body or a parameter bounds one, are as long as their type
        // allows; each is found at least once.
        let ids = [
            ("tenant_id", TenantId::BYTES_MAX),
            ("recipient_id", RecipientId::BYTES_MAX),
            ("agent_id", RecipientId::BYTES_MAX),
            ("session_id", SessionId::BYTES_MAX),
            ("room_id", RoomId::BYTES_MAX),
            ("key_id", KeyId::BYTES_MAX),
            ("registration_id", RegistrationId::BYTES_MAX),
        ];
        let mut stated: Vec<(String, Value)> = Vec::new();
        for schema in schemas.as_object().unwrap().values() {
            for (name, property) in schema["properties"].as_object().into_iter().flatten() {
                stated.push((name.clone(), property["maxLength"].clone()));
                stated.push((name.clone(), property["items"]["maxLength"].clone()));
            }
        }
        let parameters: Vec<(&String, &Value)> = document["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, item)| {
                item.as_object().unwrap().values().map(move |operation| (path, operation))
            })
            .flat_map(|(path, operation)| {
                operation["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(move |parameter| (path, parameter))
            })
            .collect();
        stated.extend(
            parameters
                .iter()
                .map(|(_, p)| (p["name"].as_str().unwrap().to_owned(), p["schema"]["maxLength"].clone())),
        );
        for (id, bytes_max) in ids {
            let lengths: Vec<&Value> = stated
                .iter()
                .filter(|(name, max)| name == id && !max.is_null())
                .map(|(_, max)| max)
                .collect();
            assert!(!lengths.is_empty(), "no {id} states its length");
            assert!(
                lengths.iter().all(|max| **max == json!(bytes_max)),
                "{id}: {lengths:?}, not {bytes_max}"
            );
        }

        // Query parameters: every page's `limit` is the batch bound, but the sessions list's.
        let mut limits = 0;
        for (path, parameter) in &parameters {
            let maximum = &parameter["schema"]["maximum"];
            match parameter["name"].as_str().unwrap() {
                "limit" if *path == "/v1/admin/sessions" => assert_eq!(maximum, &json!(SESSIONS_LIST_MAX)),
                "limit" => {
                    limits += 1;
                    assert_eq!(maximum, &json!(store.batch_events_max), "{path} limit");
                }
                "minutes" => assert_eq!(maximum, &json!(ACTIVITY_MINUTES_MAX), "{path} minutes"),
                "after_seconds" => {
                    assert_eq!(maximum, &json!(RETIRE_AFTER_SECONDS_MAX), "{path} after_seconds")
                }
                _ => {}
            }
        }
        assert!(limits > 0, "pages take a limit");
    }
}
