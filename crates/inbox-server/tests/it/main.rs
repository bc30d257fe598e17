//! End-to-end tests over real HTTP against a real server on port 0, on SQLite and on MariaDB.
//! One test binary, a module per area.

mod harness;

mod a2a;
mod admin_history;
mod admin_quarantine;
mod admin_views;
mod authorization;
mod callback_isolation;
mod callback_receivers;
mod callback_ssrf;
mod callbacks;
mod console;
mod contract;
mod external_idp;
mod fair_delivery;
mod handoff;
mod head_cache;
mod isolation;
mod nudges;
mod quotas;
mod refusals;
mod rooms;
mod rotation;
mod secrets;
mod sessions;
mod signatures;
mod stream_capacity;
mod stream_clients;
mod stream_credentials;
mod streams;
mod transport;
