//! The pure domain of agent-inbox: the vocabulary every other crate speaks, and the event
//! state machine that decides what each operation may do to an inbox row.
//!
//! Nothing here reads a clock, a random source, a socket or a database: time arrives as
//! [`UnixMillis`] arguments and randomness as byte arrays, so every rule can be tested
//! exhaustively and replayed exactly.

mod backoff;
mod disabling;
mod ids;
mod lease;
mod lifecycle;
pub mod limits;
mod payload;
mod quarantine;
mod time;

pub use backoff::BackoffPolicy;
pub use disabling::DisablePolicy;
pub use ids::{
    DeduplicationKey, EventId, EventType, FairnessKey, IdError, InboxSeq, KeyId, Recipient, RecipientId,
    RecipientKey, RecipientKind, RegistrationId, RoomId, SessionId, TenantId,
};
pub use lease::{LeaseToken, LeaseTokenHash};
pub use lifecycle::{
    AckResult, AckState, Applied, DeadLetterReason, EventLifecycle, EventState, Lease, RefusalReason,
    Transition,
};
pub use payload::{Correlation, EventBody, PayloadRef, Priority};
pub use quarantine::QuarantineClass;
pub use time::{Clock, ManualClock, UnixMillis};

/// For [`bounded_list!`] in other crates.
#[doc(hidden)]
pub use serde as __serde;
