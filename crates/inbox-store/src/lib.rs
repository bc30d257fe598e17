//! The durable inbox of agent-inbox: publishing into a recipient's inbox in the caller's
//! transaction, reading after a cursor, visibility leases, the scavenger, retention, the
//! operator's tools and the built-in meeting-room domain, on MySQL/MariaDB or SQLite with one
//! implementation and one conformance suite.
//!
//! All SQL lives in this crate. Decisions about what an event may do come from
//! [`inbox_core`]'s state machine; this crate makes them durable and concurrent.

mod admin;
mod agent_keys;
mod auth;
mod callbacks;
mod clock;
mod cold_storage;
mod config;
pub mod conformance;
mod db;
mod dialect;
mod engine;
mod entropy;
mod error;
mod leases;
mod migrate;
mod model;
mod nonces;
mod publish;
mod publish_batch;
mod read;
mod record;
mod rooms;
mod scavenge;
mod sessions;
mod signals;
mod store;
mod tenant_policy;
mod tickets;

pub use admin::{BACKLOGS_MAX, Backlog};
pub use agent_keys::{AGENT_KEYS_PER_AGENT_MAX, AgentKey, KeyId, NewAgentKey};
pub use auth::{RefreshGrant, RefreshRefusal, SIGNING_KEY_OVERLAP_MS_MIN, SigningKey};
pub use callbacks::{
    CALLBACK_ATTEMPTS_LIST_MAX, CallbackAttempt, CallbackLimits, CallbackRegistration, DeliveryResult,
    DueDelivery, NewCallbackRegistration, PreviousSecret, RegistrationId, VerificationState,
};
pub use clock::{DatabaseClock, system_now};
pub use cold_storage::{ARCHIVE_BATCH_MAX, ArchiveKey, ArchivedRow, archive_key_of_line};
pub use config::StoreConfig;
pub use db::{ConnectOptions, DbConnection};
pub use dialect::Dialect;
pub use engine::{Engine, EngineReport, Product};
pub use entropy::random_bytes;
pub use error::{ItemOutcome, ItemRefusal, Refusal, StoreError};
pub use leases::{REASON_BYTES_MAX, RETRY_AFTER_MS_MAX};
pub use model::{
    AckItem, AckReceipt, Acknowledge, ClaimByIds, ClaimNext, ClaimedEvent, Delivery, EventRecord, Heartbeat,
    HeartbeatItem, HeartbeatReceipt, InboxHead, InboxStats, ParkedQuery, PollPage, PollQuery, Publish,
    PublishReceipt, Release, ReleaseReceipt, ScavengeReport,
};
pub use nonces::{NONCES_DELETE_MAX, NonceUse, SignatureNonce};
pub use rooms::{
    MESSAGE_POSTED_EVENT_TYPE, MessageId, NewRoom, PostMessage, PostedMessage, ROOM_NAME_BYTES_MAX, Room,
    RoomId,
};
pub use sessions::{OpenedSession, SessionRecord, SessionStanding, SessionTouch};
pub use signals::{SIGNALS_READ_MAX, Signal, SignalKind};
pub use store::SqlStore;
pub use tenant_policy::{TenantPolicy, TenantPolicyChange};
pub use tickets::{StreamCredential, StreamGrant};
