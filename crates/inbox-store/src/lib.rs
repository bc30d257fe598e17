//! The durable inbox of agent-inbox: publishing into a recipient's inbox in the caller's
//! transaction, reading after a cursor, visibility leases, the scavenger, retention, the
//! operator's tools and the server's other durable state, on MySQL/MariaDB or SQLite with one
//! implementation and one conformance suite (the `inbox-conformance` crate).
//!
//! [`SqlStore`] owns the pools, the clock and the configuration and lends out one handle per
//! subsystem: [`SqlStore::inbox`], [`SqlStore::sessions`], [`SqlStore::tokens`],
//! [`SqlStore::signatures`], [`SqlStore::callbacks`] and [`SqlStore::signals`]; secrets in
//! those subsystems are sealed with keys the database never holds ([`SqlStore::secrets`]). A host
//! application publishes inside its own transaction with [`Inbox::publish_in`], on its own
//! connection or on one of the store's ([`host`]); the meeting rooms (`inbox-rooms`) are
//! built that way.
//!
//! All SQL of the inbox lives in this crate. Decisions about what an event may do come from
//! [`inbox_core`]'s state machine; this crate makes them durable and concurrent.

mod a2a;
mod callbacks;
mod clock;
mod config;
mod db;
mod dialect;
mod engine;
mod engine_check;
mod entropy;
mod error;
pub mod host;
mod inbox;
mod migrate;
mod purge_lag;
mod queries;
mod secrets;
mod sessions;
mod signals;
mod signatures;
mod store;
mod tokens;

pub use a2a::{
    A2A_KEY_PREFIX, A2a, ARTIFACTS_BYTES_MAX, ARTIFACTS_PER_TASK_MAX, CancelRefusal, DuePush,
    HISTORY_MESSAGES_MAX, NOTE_BYTES_MAX, NewPushConfig, Overfull, PUSH_CONFIGS_PER_TASK_MAX, PushConfig,
    PushResult, ReconcileReport, Report, ReportReceipt, ReportRefusal, SendMessage, SendRefusal, SendTarget,
    Sent, Task, TaskCursor, TaskId, TaskOutcome, TaskPage, TaskQuery, TaskState, TaskStatus, TaskUpdate,
    UpdateKind,
};
pub use callbacks::{
    CALLBACK_ATTEMPTS_LIST_MAX, CallbackAttempt, CallbackLimits, CallbackRegistration, Callbacks,
    DeliveryResult, Disabled, DueDelivery, NewCallbackRegistration, PreviousSecret, RegistrationId,
    VerificationState,
};
pub use clock::{DatabaseClock, system_now};
pub use config::StoreConfig;
pub use db::{ConnectOptions, DbConnection};
pub use dialect::Dialect;
pub use engine::{Engine, EngineReport, GALERA_SYNC_WAIT, Product};
pub use engine_check::ClaimPlanCheck;
pub use entropy::random_bytes;
pub use error::{Field, ItemOutcome, ItemRefusal, Refusal, StoreError};
pub use inbox::{
    ACTIVITY_WINDOW_MS_MAX, ACTOR_SUBJECT_BYTES_MAX, ARCHIVE_BATCH_MAX, AckItem, AckReceipt, Acknowledge,
    Actor, ArchiveKey, ArchivedRow, BACKLOGS_MAX, Backlog, CLAIM_INDEX, ClaimByIds, ClaimNext, ClaimOrder,
    ClaimPlan, ClaimedEvent, DELIVERY_ATTEMPTS_MAX, Delivery, EventDetail, EventRecord, EventState,
    EventsQuery, FOLLOW_UPS_MAX, HANDOFF_KEY_PREFIX, HISTORY_ENTRIES_MAX, HandOff, HandOffReceipt, Heartbeat,
    HeartbeatItem, HeartbeatReceipt, HistoryAction, HistoryEntry, Inbox, InboxHead, InboxStats,
    MinuteActivity, ParkedQuery, PollPage, PollQuery, Publish, PublishReceipt, QuarantineRequest,
    REASON_BYTES_MAX, RETRY_AFTER_MS_MAX, Release, ReleaseReceipt, ScavengeReport, TenantUsage,
    UNACKED_ESTIMATE_MAX, archive_key_of_line, handoff_key,
};
pub use purge_lag::PurgeLag;
pub use secrets::{
    PrepareReport, SECRETS_KEY_LINE_PREFIX, SECRETS_KEYS_PER_FILE_MAX, SealedCensus, SecretBytes, Secrets,
    SecretsKey, SecretsKeyError, SecretsKeys,
};
pub use sessions::{
    DEVICE_ID_BYTES_MAX, OpenedSession, SESSIONS_LIST_MAX, SessionRecord, SessionStanding, SessionTouch,
    SessionView, Sessions, StreamCredential, StreamGrant,
};
pub use signals::{SIGNALS_READ_MAX, Signal, SignalKind, Signals};
pub use signatures::{
    AGENT_KEYS_LIST_MAX, AGENT_KEYS_PER_AGENT_MAX, AgentKey, KeyId, NONCES_DELETE_MAX, NewAgentKey, NonceUse,
    SignatureNonce, Signatures, TenantPolicy, TenantPolicyChange,
};
pub use store::SqlStore;
pub use tokens::{
    RefreshGrant, RefreshRefusal, SIGNING_KEY_OVERLAP_MS_MIN, SigningKey, TokenAlgorithm, Tokens,
};
