//! The OpenAPI document, generated from the handlers' annotations and the wire types. A copy
//! is checked in at `openapi.json` in the repository root; a test fails when the two differ.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::routes::{
    admin, agent_keys, agents, auth, callbacks, events, inbox, rooms, sessions, streams, tenant_policy, ws,
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
        admin::list_parked, admin::requeue, admin::purge, admin::inboxes,
        auth::refresh,
        agent_keys::register, agent_keys::list, agent_keys::retire,
        tenant_policy::get_policy, tenant_policy::set_policy,
        callbacks::register, callbacks::list, callbacks::read, callbacks::remove, callbacks::verify,
        callbacks::rotate, callbacks::deliveries, callbacks::register_for_agent,
    ),
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

/// The document as pretty JSON, with a trailing newline.
pub fn document() -> String {
    let mut json = ApiDoc::openapi().to_pretty_json().expect("the OpenAPI document serializes");
    json.push('\n');
    json
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

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
}
