//! The agent side end to end: the SDK (`inbox-client`) in process and the `listen`, `wait`,
//! `login` and `service` commands as processes, against the real `agent-inbox serve` binary,
//! through crashes, restarts, cut streams and a proxy that closes connections.
//!
//! Tests wait on conditions with deadlines, never on bare sleeps.

mod batch;
mod daemon;
mod exec;
mod faults;
mod handoff_chain;
mod login;
mod proxy;
mod sdk;
mod service;
mod signing;
mod support;
mod takeover;
mod wakes;
