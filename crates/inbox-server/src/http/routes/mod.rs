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

/// Every router under `/v1/admin/...`: the app mounts these, and the console hands its calls
/// to exactly these (`http/console/proxy.rs`), so a new admin route file is added here once.
pub fn admin_routers() -> axum::Router<crate::AppState> {
    admin::router().merge(admin_events::router()).merge(admin_views::router()).merge(tenant_policy::router())
}
