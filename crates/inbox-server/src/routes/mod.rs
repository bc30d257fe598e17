//! The HTTP routes, one file per resource, each with its own `router()`.

pub mod admin;
pub mod agents;
pub mod auth;
pub mod events;
pub mod health;
pub mod inbox;
pub mod sessions;
