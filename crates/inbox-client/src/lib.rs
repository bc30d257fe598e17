//! The agent side of agent-inbox: an async SDK for agents that are often offline.
//!
//! An [`Agent`] subscribes, then hears about new work over Server-Sent Events, falling back to
//! long polls when streams fail or are cut by a proxy, and to adaptive polling (about 1 s after
//! work, growing with jitter to 5 min while idle or disconnected) when long polls fail too.
//! What no hint announces (a retry's delay, another process's lease running out) the runner
//! remembers from its scans and releases, and wakes for, connected or not. A service that does
//! not answer at all is probed every 0.5 s growing to 2 s, so its return is noticed soon.
//! On every hint, timer or reconnection it polls after its persisted cursor, claims, runs a
//! [`Handler`] under lease heartbeats, and acknowledges or releases. A local SQLite file keeps
//! the cursor and the ids of processed events, so a redelivered event is acknowledged without
//! running the handler again, across restarts. Access tokens are refreshed with a rotating
//! refresh token kept in the OS secret store, or a 0600 file. With a [`RequestSigningKey`]
//! ([`Api::with_signing_key`]), claims, acknowledgements, releases and heartbeats carry RFC 9421
//! signatures, as tenants that require them expect.
//!
//! Every push is a hint; the inbox is the record. Nothing here trusts a hint's content: the
//! runner always reads the inbox itself.
//!
//! What this runner promises alike with `listen` and the TypeScript and Python runners, with the
//! default numbers and the test that proves each promise, is one table in the repository:
//! [`clients/GUARANTEES.md`](../../../clients/GUARANTEES.md).
//!
//! ```no_run
//! use inbox_client::{Agent, AgentConfig, Api, ContinueAfterReset, Credentials, Event, LocalState, Secret};
//!
//! # async fn example() -> Result<(), inbox_client::ClientError> {
//! let api = Api::new("http://127.0.0.1:8080", Credentials::access_token(Secret::new("eyJ...")))?;
//! let state = LocalState::open("agent.state.db".as_ref(), 10_000).await?;
//! let handler = |event: Event| async move {
//!     println!("{} {}", event.event_type(), event.event_id());
//!     Ok(())
//! };
//! Agent::new(api, state, AgentConfig::default())
//!     .run(handler, ContinueAfterReset, std::future::pending::<()>())
//!     .await?;
//! # Ok(()) }
//! ```

mod admin;
mod agent;
mod api;
mod contract;
mod credentials;
pub mod cursor;
mod error;
mod jitter;
pub mod local_daemon;
mod local_state;
mod profile;
mod resync;
pub mod schedule;
mod secret_store;
mod signing;
pub mod sse;
mod transport;
#[cfg(test)]
mod vectors;
mod wait;
mod wire;
mod work;

pub use admin::{Admin, AdminAnswer, EventsQuery, ParkedQuery};
pub use agent::Agent;
pub use api::{Api, check_base_url};
pub use contract::{
    AgentConfig, ContinueAfterReset, Done, Event, HandingOff, Handler, HandlerError, Observer, Outcome,
    Progress, Resync, RunSummary,
};
pub use credentials::Credentials;
pub use error::ClientError;
/// The kinds of anomaly a quarantine names ([`HandlerError::quarantine_as`]).
pub use inbox_core::QuarantineClass;
pub use local_state::{LocalState, PROCESSED_CAPACITY_DEFAULT, Processed};
pub use profile::{Home, LoginReport, Profile, login, logout};
pub use secret_store::{SECRET_SERVICE, Secret, SecretStore, SecretStoreKind, on_path};
pub use signing::RequestSigningKey;
pub use transport::{TransportConfig, TransportKind, TransportStatus};
pub use wait::{ServiceUnreachable, WaitOutcome, claimable_now, wait_for_work, wait_for_work_or_unreachable};
pub use wire::REQUEST_TIMEOUT;
