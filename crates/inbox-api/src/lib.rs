//! The JSON of agent-inbox's HTTP API, as plain serde types: the contract of seed 001
//! (subscribe, poll after cursor, head, claim, acknowledge, release, heartbeat), publishing,
//! rooms, real-time stream signals, operators' endpoints, RFC 9457 problem details with their
//! stable codes, and the scopes a token carries.
//!
//! Field names follow the seed exactly. Times are RFC 3339 UTC strings (`..._utc`). Requests
//! refuse unknown fields, so a typo is an error rather than a silently ignored option.
//!
//! Values with rules are typed: ids, lease tokens and sequences are `inbox-core`'s types, closed
//! sets (priorities, results, quarantine classes, transports, algorithms) are enums, and each
//! checks itself as it is deserialized, so a request that parses holds only valid values. The
//! OpenAPI document (feature `openapi`) takes each bound, pattern and enum from the type that
//! checks it. Free text (reasons, names, URLs, times) stays `String`.
//!
//! In answers a closed set is text that names its enum for the document (`value_type`): a
//! client older than the server still reads a state, priority or transport added since (the
//! Rust SDK matches through the enum's `parse` and treats a state it does not know as open).

pub mod a2a;
mod admin;
mod admin_views;
mod callbacks;
mod events;
mod inbox;
mod problem;
mod problem_code;
mod rooms;
mod scope;
mod sessions;
mod signatures;
mod streams;
pub mod time;
mod tokens;

pub use admin::*;
pub use admin_views::*;
pub use callbacks::*;
pub use events::*;
pub use inbox::*;
pub use problem::*;
pub use problem_code::ProblemCode;
pub use rooms::*;
pub use scope::{Scope, UnknownScope};
pub use sessions::*;
pub use signatures::*;
pub use streams::*;
pub use tokens::*;
