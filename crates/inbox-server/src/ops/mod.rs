//! The use cases, one module per subsystem (the names the store uses): what HTTP, the
//! WebSocket and seed 000's aliases all call, so a rule holds whichever transport asked.

pub mod admin;
pub mod admin_views;
pub mod callbacks;
pub mod handoff;
pub mod health;
pub mod inbox;
pub mod rooms;
pub mod sessions;
pub mod signals;
pub mod signatures;
pub mod streams;
pub mod tokens;
