//! Each agent's public A2A card: where its JSON-RPC interface is, what it can do (streaming and
//! push notifications; no extended card), and how a caller authenticates (the service's own
//! bearer tokens, with the scope it needs). Any agent id of any tenant has one, as any agent
//! has an inbox: nothing on it says whether the agent ever ran.

use inbox_api::Scope;
use inbox_api::a2a::{
    A2A_JSONRPC_BINDING, A2A_PROTOCOL_VERSION, AgentCapabilities, AgentCard, AgentInterface, AgentSkill,
};
use inbox_core::{RecipientId, TenantId};
use serde_json::{Map, json};

use crate::error::ApiError;

/// The name the card's security scheme goes by.
pub const SECURITY_SCHEME: &str = "agentInboxBearer";

/// The path of an agent's JSON-RPC interface.
pub fn interface_path(tenant: &TenantId, agent: &RecipientId) -> String {
    format!("/a2a/{tenant}/{agent}")
}

/// An agent's card, its interface URL under `origin` (`https://host:port`, from the request;
/// a relative URL when the request named no usable host).
pub fn card(tenant: &str, agent: &str, origin: Option<&str>) -> Result<AgentCard, ApiError> {
    let tenant = TenantId::new(tenant).map_err(|e| ApiError::invalid_field("tenant_id", e.problem))?;
    let agent = RecipientId::new(agent).map_err(|e| ApiError::invalid_field("agent_id", e.problem))?;
    let url = format!("{}{}", origin.unwrap_or(""), interface_path(&tenant, &agent));
    let mut schemes = Map::new();
    schemes.insert(
        SECURITY_SCHEME.to_owned(),
        json!({"httpAuthSecurityScheme": {
            "scheme": "Bearer",
            "bearerFormat": "JWT",
            "description": format!(
                "An access token of this agent-inbox service for tenant {tenant} with the {} scope (or {}): \
                 agent-inbox token issue --kind publisher --tenant {tenant} --subject <you> --scope {}",
                Scope::A2aSend, Scope::EventsPublish, Scope::A2aSend
            ),
        }}),
    );
    Ok(AgentCard {
        name: agent.to_string(),
        description: format!(
            "Agent {agent} of tenant {tenant}, reached through its durable agent-inbox inbox: a message is kept \
             until the agent takes it, however long it is away, and its task moves as the agent works \
             (submitted until then). SubscribeToTask resumes after the SSE id a Last-Event-ID header names."
        ),
        supported_interfaces: vec![AgentInterface {
            url,
            protocol_binding: A2A_JSONRPC_BINDING.to_owned(),
            protocol_version: A2A_PROTOCOL_VERSION.to_owned(),
        }],
        provider: None,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        documentation_url: None,
        capabilities: AgentCapabilities {
            streaming: true,
            push_notifications: true,
            extended_agent_card: false,
        },
        security_schemes: schemes,
        security_requirements: vec![json!({"schemes": {SECURITY_SCHEME: {"list": []}}})],
        default_input_modes: vec!["text/plain".to_owned(), "application/json".to_owned()],
        default_output_modes: vec!["text/plain".to_owned(), "application/json".to_owned()],
        skills: vec![AgentSkill {
            id: "inbox".to_owned(),
            name: format!("Messages to {agent}"),
            description: "Send a message; the agent answers with artifacts when it has done the work."
                .to_owned(),
            tags: vec!["inbox".to_owned(), "asynchronous".to_owned()],
            examples: Vec::new(),
        }],
    })
}
