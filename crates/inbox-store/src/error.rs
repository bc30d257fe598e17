//! What can go wrong in the store, in domain terms. Database constraint, deadlock and timeout
//! errors are translated here, at the store boundary, so no caller ever matches on SQL codes.

use inbox_core::{EventId, InboxSeq, RefusalReason};

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

/// Defines [`Field`] with the list of all its values.
macro_rules! fields {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// What part of a request the store refused, in the store's own terms. The store never
        /// names a wire field: the server names each on the wire, with the path of the request
        /// that carried it (`acks[0].follow_ups[1].expires_at_utc`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Field {
            $($(#[$doc])* $name,)*
        }

        impl Field {
            pub const ALL: &[Field] = &[$(Field::$name,)*];
        }
    };
}

fields! {
    /// How many events a read returns or a claim takes; a listing's page size.
    Limit,
    /// The events a batch names.
    EventIds,
    /// The acknowledgements of a batch.
    Acks,
    /// The leases a heartbeat extends.
    Leases,
    /// A claim's lease length.
    LeaseLength,
    /// How far a heartbeat extends a lease.
    LeaseExtension,
    /// How long a released event waits before it may be claimed again.
    RetryDelay,
    /// Why: a quarantine's, a failure's or a release's.
    Reason,
    /// Whom a publish reaches.
    Recipients,
    /// When a published event expires.
    ExpiresAt,
    /// How many delivery attempts a published event gets.
    MaxAttempts,
    /// The kind of a published event's payload reference.
    PayloadRefKind,
    /// The id of a published event's payload reference.
    PayloadRefId,
    /// One of a published event's correlation ids.
    Correlation,
    /// The publishes a hand-off carries.
    FollowUps,
    /// The tenant a publish names.
    Tenant,
    /// A publish's deduplication key.
    DeduplicationKey,
    /// The device a session names.
    DeviceId,
    /// How long a stream ticket or cookie lasts.
    CredentialTtl,
    /// A callback registration's shared secret.
    CallbackSecret,
    /// The key id a callback's secret is known by.
    CallbackSecretId,
    /// An agent key's public key or shared secret.
    KeyMaterial,
    /// Which parked events an operator lists.
    ParkedState,
    /// How far back the activity view reaches.
    ActivityWindow,
    /// A meeting room's name (for `inbox-rooms`, a host of the store).
    RoomName,
    /// A meeting room's members.
    RoomMembers,
    /// A room message's body.
    MessageBody,
    // What follows never comes from a request: the caller's own values or the configuration.
    /// The transport a session touch records.
    SessionTransport,
    /// The signals a node asks for by id.
    SignalIds,
    /// How many rows one scavenger pass takes.
    ScavengeBatch,
    /// Who an operator is, as the history records them.
    Actor,
    /// A host's connection, of another backend than the store's.
    Connection,
    /// How long a retired token-signing key keeps verifying.
    SigningKeyOverlap,
    /// The database URL.
    DatabaseUrl,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The request itself is malformed or out of range; nothing was changed. `item` is the
    /// place, in the list the request gave, of what holds the field (a heartbeat's lease, an
    /// acknowledgement, a hand-off's follow-up), when it is one of many.
    #[error("{field:?} {problem}")]
    Invalid { field: Field, item: Option<usize>, problem: String },

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

impl StoreError {
    /// An "unreachable" answer for a caller that did not itself wait on the database: its
    /// request queued behind one that found the database away.
    pub fn unreachable(reason: &str) -> Self {
        StoreError::Unavailable(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            reason.to_owned(),
        )))
    }

    pub fn invalid(field: Field, problem: impl Into<String>) -> Self {
        StoreError::Invalid { field, item: None, problem: problem.into() }
    }

    /// [`StoreError::invalid`], of the `item`th of the request's list.
    pub fn invalid_item(field: Field, item: usize, problem: impl Into<String>) -> Self {
        StoreError::Invalid { field, item: Some(item), problem: problem.into() }
    }

    /// This refusal, of the `item`th of the request's list (a field refused without one).
    pub fn of_item(self, item: usize) -> Self {
        match self {
            StoreError::Invalid { field, item: None, problem } => {
                StoreError::Invalid { field, item: Some(item), problem }
            }
            other => other,
        }
    }

    /// Whether a statement was refused for a duplicate primary or unique key, on either
    /// backend: how a host's insert learns that its id is taken.
    pub fn is_unique_violation(&self) -> bool {
        matches!(self, StoreError::Database(sqlx::Error::Database(db)) if db.is_unique_violation())
    }
}
