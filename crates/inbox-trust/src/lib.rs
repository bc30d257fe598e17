//! The pure building blocks of agent-inbox's trust layer, shared by the server and the
//! client: RFC 9530 `Content-Digest`, RFC 9421 HTTP Message Signatures, and the SSRF rules
//! for webhook callback URLs.
//!
//! Nothing here performs I/O, reads a clock or draws randomness: the current time, nonces,
//! keys and DNS answers are arguments. The server and the client own the side effects
//! (remembering nonces in the database, resolving names, connecting to the checked
//! address); this crate owns the decisions, so each one is tested exhaustively here.

pub mod content_digest;
pub mod message_signatures;
pub mod requests;
pub mod ssrf;
mod structured;
pub mod webhooks;

pub use message_signatures::Algorithm;
pub use requests::{SignedRequestHeaders, sign_inbox_request};
