//! The HTTP routes, one file per resource, each with its own `router()`.

pub mod admin;
pub mod admin_events;
pub mod admin_views;
pub mod agent_keys;
pub mod agents;
pub mod auth;
pub mod callbacks;
pub mod events;
pub mod health;
pub mod inbox;
pub mod rooms;
pub mod sessions;
pub mod streams;
pub mod tenant_policy;
pub mod ws;
