//! The OpenAPI document, generated from the handlers' annotations and the wire types. A copy
//! is checked in at `openapi.json` in the repository root; a test fails when the two differ.

use std::collections::BTreeMap;

use inbox_core::EventState;
use inbox_core::limits::{LeaseSeconds, StreamCookieSeconds, StreamTicketSeconds, WaitSeconds};
use serde_json::{Value, json};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::http::routes::{
    a2a, admin, admin_events, admin_views, agent_keys, agents, callbacks, events, inbox, rooms, sessions,
    streams, tenant_policy, tokens, ws,
};

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
        a2a::agent_card, a2a::rpc,
    ),
    // Parameters' types are not collected with the bodies'.
    components(schemas(
        inbox_api::EventsOrder, inbox_core::EventState, inbox_core::InboxSeq, inbox_core::limits::BatchLimit,
        inbox_core::limits::SessionsLimit, inbox_core::limits::ActivityMinutes,
        inbox_core::limits::KeyRetireAfterSeconds,
    )),
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
/// poll, lease and stream credential) are this server's.
pub fn document_for(config: &crate::config::Config) -> String {
    let generated = ApiDoc::openapi().to_json().expect("the OpenAPI document serializes");
    let mut document: Value = serde_json::from_str(&generated).expect("the generated document is JSON");
    serve_settings(&mut document, config);
    inline_scalars(&mut document);
    add_error_answers(&mut document);
    add_rules(&mut document);
    let mut json = serde_json::to_string_pretty(&document).expect("the OpenAPI document serializes");
    json.push('\n');
    json
}

/// Ids, sequences, closed sets and bounded values (`TenantId`, `InboxSeq`, `Priority`,
/// `Reason`, `EventIds`, ...) each have a schema of their own, which utoipa refers to. The
/// document states each where it is used instead: a plain string, integer or list with the
/// type's bounds, pattern or enum (and `null` beside it when the field is optional), so a
/// field's rules are read where the field is, as they were when they were written here by hand.
fn inline_scalars(document: &mut Value) {
    let Some(schemas) = document["components"]["schemas"].as_object_mut() else { return };
    let scalars: BTreeMap<String, Value> = schemas
        .iter()
        .filter(|(_, schema)| is_scalar(schema))
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

/// A string, an integer or a list: a value, not an object with fields of its own.
fn is_scalar(schema: &Value) -> bool {
    matches!(schema["type"].as_str(), Some("string" | "integer" | "array"))
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
            let target = members.get("$ref").and_then(Value::as_str).and_then(|r| scalars.get(r));
            if let Some(schema) = target {
                // A list's items may be scalars too.
                let mut schema = schema.clone();
                inline(&mut schema, scalars);
                members.remove("$ref");
                merge(members, &schema);
            }
            // An optional one: `{"oneOf": [{"type": "null"}, <scalar>]}`.
            let optional = members.get("oneOf").and_then(Value::as_array).is_some_and(|parts| {
                parts.len() == 2 && parts[0] == json!({"type": "null"}) && is_scalar(&parts[1])
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

/// Bounds that are this server's settings (the longest lease, long poll, stream ticket and
/// cookie), each stated on the schema of the type that carries it, before the types are
/// inlined: every other bound is a constant its type states itself (`inbox_core::limits`).
fn serve_settings(document: &mut Value, config: &crate::config::Config) {
    let store = crate::database::store_config(config);
    let schemas = &mut document["components"]["schemas"];
    served_maximum::<LeaseSeconds>(schemas, store.lease_ms_max / 1_000);
    served_maximum::<WaitSeconds>(schemas, config.inbox.long_poll_wait_max.as_secs());
    let ticket_max = config.sessions.stream_ticket_ttl.as_secs().min(StreamTicketSeconds::MAX);
    served_maximum::<StreamTicketSeconds>(schemas, ticket_max);
    let cookie_max = config.tokens.access_token_ttl.as_secs().min(StreamCookieSeconds::MAX);
    served_maximum::<StreamCookieSeconds>(schemas, cookie_max);
}

/// States `maximum` on the schema of `T`, wherever it is used.
fn served_maximum<T: ToSchema>(schemas: &mut Value, maximum: u64) {
    let schema = &mut schemas[T::name().as_ref()];
    assert!(schema.is_object(), "{} is in the document", T::name());
    schema["maximum"] = json!(maximum);
}

/// What no type states alone: rules across fields, and the one parameter whose values depend
/// on its route. Integers are JSON integers: a whole-number float such as `5.0` is refused
/// (400 `invalid_field`), as the schemas' `"type": "integer"` says.
fn add_rules(document: &mut Value) {
    let schemas = &mut document["components"]["schemas"];
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
    // Parked events are dead letters or quarantined ones (an inbox's events are in any state,
    // as `EventState` says).
    let parked = json!({"enum": [EventState::DeadLetter.as_str(), EventState::Quarantined.as_str()]});
    let parameters = document["paths"]["/v1/admin/parked"]["get"]["parameters"].as_array_mut();
    let state =
        parameters.into_iter().flatten().find(|p| p["name"] == "state").expect("parked takes a state");
    state["schema"]["enum"] = parked["enum"].clone();
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
            // An agent's A2A card is public; its JSON-RPC interface answers refused input as
            // JSON-RPC errors (HTTP 200), not problems.
            let card = path.ends_with("/.well-known/agent-card.json");
            let json_rpc = path.starts_with("/a2a/") && !card;
            let Some(responses) = operation["responses"].as_object_mut() else { continue };
            let mut add = |status: &str, description: &str, headers: Option<&Value>| {
                let response = responses.entry(status).or_insert_with(|| json!({"description": description}));
                if let Some(headers) = headers {
                    response["headers"] = headers.clone();
                }
            };
            if !json_rpc {
                add(
                    "400",
                    "invalid_field, malformed_json, unknown_field, ...: the input is refused, with the field",
                    None,
                );
            }
            if open {
                add("401", "invalid_refresh_token or refresh_token_reused", None);
            } else if !card {
                add(
                    "401",
                    "unauthorized or invalid_token: send a valid 'Authorization: Bearer <token>'",
                    None,
                );
                add("403", "scope_missing or tenant_mismatch: the token may not do this", None);
            }
            if (has_path_params || has_body) && !json_rpc && !card {
                add("404", "no such resource (an id in the path or the body)", None);
            }
            if has_body && !json_rpc {
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
    use std::collections::BTreeSet;
    use std::path::PathBuf;
    use std::time::Duration;

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

    /// The bounds that are settings are this server's, stated wherever their type is used;
    /// every other bound is its type's, stated by the type (`inbox_core::limits`), so it needs
    /// no check here beyond one that the types were inlined.
    #[test]
    fn settings_are_the_servers() {
        let mut config = crate::config::Config::default();
        config.inbox.lease_max = Duration::from_secs(7_200);
        config.inbox.long_poll_wait_max = Duration::from_secs(40);
        config.sessions.stream_ticket_ttl = Duration::from_secs(30);
        let document: Value = serde_json::from_str(&document_for(&config)).unwrap();
        let schemas = &document["components"]["schemas"];
        let cookie_max = config.tokens.access_token_ttl.as_secs();
        for (schema, property, maximum) in [
            ("ClaimRequest", "lease_seconds", 7_200),
            ("HeartbeatEntry", "extend_by_seconds", 7_200),
            ("PollRequest", "wait_seconds", 40),
            ("StreamTicketRequest", "ttl_seconds", 30),
            ("StreamCookieRequest", "ttl_seconds", cookie_max),
        ] {
            assert_eq!(
                schemas[schema]["properties"][property]["maximum"],
                json!(maximum),
                "{schema}.{property}"
            );
        }
        let retry = &schemas["ReleaseRequest"]["properties"]["retry_after_seconds"];
        assert_eq!(retry["maximum"], json!(inbox_core::limits::RETRY_AFTER_SECONDS_MAX));
        let reason = &schemas["AckEntry"]["properties"]["reason"];
        assert_eq!(reason["maxLength"], json!(inbox_core::limits::REASON_BYTES_MAX));
    }

    /// Every field a refusal of the store can name on the wire is a field of a request (a
    /// body's, at any depth, or a parameter), as the wire spells it: the store names none
    /// itself (a refusal once named `expires_at`, which no request has).
    #[test]
    fn every_refused_field_is_in_the_requests() {
        use crate::error::{Places, store_refusal_at, wire_field};
        use inbox_store::{Field, StoreError};

        fn fields(schema: &Value, at: &str, schemas: &Value, found: &mut BTreeSet<String>, depth: usize) {
            let schema = match schema["$ref"].as_str() {
                Some(target) => &schemas[target.trim_start_matches("#/components/schemas/")],
                None => schema,
            };
            for part in schema["oneOf"].as_array().into_iter().flatten() {
                fields(part, at, schemas, found, depth);
            }
            for (name, property) in schema["properties"].as_object().into_iter().flatten() {
                let path = format!("{at}{name}");
                found.insert(path.clone());
                if depth < 4 {
                    fields(property, &format!("{path}."), schemas, found, depth + 1);
                    fields(&property["items"], &format!("{path}[]."), schemas, found, depth + 1);
                }
            }
        }
        let document: Value = serde_json::from_str(&super::document()).unwrap();
        let schemas = &document["components"]["schemas"];
        let mut found = BTreeSet::new();
        for operation in
            document["paths"].as_object().unwrap().values().flat_map(|p| p.as_object().unwrap().values())
        {
            let body = &operation["requestBody"]["content"]["application/json"]["schema"];
            fields(body, "", schemas, &mut found, 0);
            for parameter in operation["parameters"].as_array().into_iter().flatten() {
                found.insert(parameter["name"].as_str().unwrap().to_owned());
            }
        }
        let named = |field: Field, item: Option<usize>, at: &str| {
            let refusal = StoreError::Invalid { field, item, problem: "is refused".to_owned() };
            let problem = store_refusal_at(refusal, at, Places::InOrder);
            let name = problem.extensions["field"].as_str().expect("a field is named").to_owned();
            let mut plain = String::new();
            let mut in_index = false;
            for c in name.chars() {
                match c {
                    '[' => (in_index, plain) = (true, plain + "[]"),
                    ']' => in_index = false,
                    _ if in_index => {}
                    c => plain.push(c),
                }
            }
            plain
        };
        // Plain requests, and a hand-off's follow-ups (`acks[i].`).
        for &field in Field::ALL {
            if wire_field(field).is_none() {
                continue;
            }
            let forms =
                [named(field, None, ""), named(field, None, "acks[0]."), named(field, Some(1), "acks[0].")];
            let item = named(field, Some(1), "");
            assert!(
                forms.iter().chain([&item]).any(|form| found.contains(form)),
                "{field:?} is named {forms:?} or {item}, none of them a request's field"
            );
        }
        for field in [Field::LeaseExtension, Field::Reason] {
            assert!(found.contains(&named(field, Some(1), "")), "{field:?} of an item");
        }
        for field in
            [Field::ExpiresAt, Field::Recipients, Field::MaxAttempts, Field::Tenant, Field::PayloadRefKind]
        {
            let name = named(field, Some(1), "acks[0].");
            assert!(found.contains(&name), "{field:?} of a follow-up: {name}");
        }
    }
}
