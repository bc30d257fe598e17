//! What can go wrong in the store, in domain terms. Database constraint, deadlock and timeout
//! errors are translated here, at the store boundary, so no caller ever matches on SQL codes.

use inbox_core::{EventId, IdError, InboxSeq, RefusalReason};

/// Why one event in a batch was not acted on. The other events in the batch are unaffected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no such event in this inbox")]
    NotFound,
    #[error(transparent)]
    Refused(#[from] RefusalReason),
}

/// A refusal tied to the event it concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("event {event_id}: {reason}")]
pub struct ItemRefusal {
    pub event_id: EventId,
    pub reason: Refusal,
}

/// One outcome per item of a batch request, in request order.
pub type ItemOutcome<T> = Result<T, ItemRefusal>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The request itself is malformed or out of range; nothing was changed.
    #[error("{field} {problem}")]
    Invalid { field: &'static str, problem: String },

    #[error(
        "payload is {bytes} bytes; the limit is {limit} bytes (store large data elsewhere and send a payload_ref)"
    )]
    PayloadTooLarge { bytes: usize, limit: usize },

    /// The cursor points before data that retention has already archived.
    #[error("cursor {after_seq} is older than retained data; resync, then continue after {}", oldest_available_seq.get().saturating_sub(1))]
    CursorResetRequired { after_seq: InboxSeq, oldest_available_seq: InboxSeq, head_seq: InboxSeq },

    /// The request names a domain object (such as a meeting room) that does not exist in the
    /// caller's tenant; nothing was changed.
    #[error("no {what} {id:?} exists in this tenant; check the id or create it first")]
    NotFound { what: &'static str, id: String },

    /// A create named an id that is already taken in the caller's tenant; nothing was changed.
    #[error("{what} {id:?} already exists in this tenant; choose another id")]
    AlreadyExists { what: &'static str, id: String },

    /// A create would pass a configured limit (registrations per recipient, keys per agent);
    /// nothing was changed.
    #[error("the limit of {limit} {what}s is reached; remove one first")]
    LimitReached { what: &'static str, limit: u64 },

    /// The operation needs a request signed with one of the agent's live keys (such as
    /// registering a key for an agent that already has one); nothing was changed.
    #[error("{what} needs a request signed with one of the agent's live keys")]
    SignatureRequired { what: &'static str },

    /// A single-event operation was refused.
    #[error(transparent)]
    Event(#[from] ItemRefusal),

    /// Deadlocks, lock-wait timeouts or a busy database persisted through every retry.
    #[error("the database stayed too busy through {attempts} attempts; retry shortly")]
    Contention { attempts: u32 },

    /// The database could not be reached or the connection broke.
    #[error("the database is unreachable: {0}")]
    Unavailable(#[source] sqlx::Error),

    /// The engine broke a property claims rely on (see `SqlStore::check_engine`).
    #[error(
        "the database engine {engine} cannot run agent-inbox: {property}; use MySQL 8.0+ or MariaDB 10.6+ (alone, in a Galera cluster or in Group Replication)"
    )]
    EngineRefused { engine: String, property: String },

    /// The claim statement's plan cannot use the claim index (see
    /// `SqlStore::check_claim_plan`): every claim would read the whole inbox.
    #[error(
        "the claim statement cannot use index ix_agent_inbox_claim ({0}), so every claim would read the whole inbox; recreate the index as migration 0012 defines it (the index may have been dropped or altered by hand)"
    )]
    ClaimIndexUnusable(String),

    #[error("schema migration failed: {0}")]
    Migration(String),

    #[error("unexpected database error: {0}")]
    Database(#[source] sqlx::Error),

    /// A secret could not be sealed or opened: no secrets key is loaded, the key file lacks a
    /// key in use, or a sealed value does not belong to its row. Never names a secret.
    #[error("secrets: {0}")]
    Sealing(String),

    /// A stored row that does not decode: a bug or manual tampering, never bad input.
    #[error("stored row is corrupt: {0}")]
    Corrupt(String),
}

impl From<IdError> for StoreError {
    fn from(err: IdError) -> Self {
        StoreError::Invalid { field: err.field, problem: err.problem }
    }
}

impl StoreError {
    /// An "unreachable" answer for a caller that did not itself wait on the database: its
    /// request queued behind one that found the database away.
    pub fn unreachable(reason: &str) -> Self {
        StoreError::Unavailable(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            reason.to_owned(),
        )))
    }

    pub fn invalid(field: &'static str, problem: impl Into<String>) -> Self {
        StoreError::Invalid { field, problem: problem.into() }
    }

    /// Whether a statement was refused for a duplicate primary or unique key, on either
    /// backend: how a host's insert learns that its id is taken.
    pub fn is_unique_violation(&self) -> bool {
        matches!(self, StoreError::Database(sqlx::Error::Database(db)) if db.is_unique_violation())
    }
}
