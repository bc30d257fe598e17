//! The local wake daemon (`agent-inbox daemon`), from both sides: one resident process per
//! user holds one stream per login profile and tells local clients when work is waiting, so a
//! transient agent (a command-line run, a desktop app that comes and goes) learns of work at
//! once without a connection of its own. It tells; it never claims.
//!
//! - [`protocol`]: the JSON-lines protocol on its Unix domain socket, versioned and bounded.
//! - [`socket_path`]: where that socket is.
//! - [`LocalDaemon`]: a client of it; [`wait_for_work_local_first`] asks it first and the
//!   service when it is absent, stale or refuses, with the same answer either way.
//! - [`InboxFollower`]: what the daemon runs per identity, on the runner's own transports.
//! - [`DaemonHints`]: the daemon as a runner's best transport (`TransportConfig::local_daemon`).

mod client;
mod follow;
mod hints;
mod path;
pub mod protocol;

use std::time::Duration;

pub use client::{ANSWER_TIMEOUT, DaemonError, DaemonWait, DaemonWatch, Hint, LocalDaemon};
pub use follow::{InboxFollower, InboxView, RECHECK_INTERVAL};
pub use hints::DaemonHints;
pub use path::{SOCKET_FILE, socket_path, socket_path_from};
pub use protocol::Identity;
use tokio::time::Instant;

use crate::api::Api;
use crate::error::ClientError;
use crate::profile::Profile;
use crate::schedule::Backoff;
use crate::wait::{WaitOutcome, wait_for_work_or_unreachable};

impl Identity {
    /// The identity of login profile `profile` as recorded in `record`, with `server_url` as
    /// the client will use it (an override of the profile's, or the profile's own).
    pub fn of_profile(profile: &str, record: &Profile, server_url: Option<&str>) -> Identity {
        Identity {
            profile: profile.to_owned(),
            server_url: server_url.unwrap_or(&record.server_url).trim_end_matches('/').to_owned(),
            tenant_id: record.tenant_id.clone(),
            agent_id: record.agent_id.clone(),
        }
    }
}

/// How a [`wait_for_work_local_first`] was answered.
#[derive(Debug)]
pub enum AnsweredBy {
    /// The daemon answered; no connection to the service was made.
    Daemon,
    /// The service answered, because no daemon was asked or it could not answer (why).
    Service(Option<DaemonError>),
}

/// [`crate::wait_for_work_or_unreachable`], asking the local daemon first: when it answers,
/// the answer is the service's as the daemon saw it, and this process opens no connection;
/// when it is absent, stale, refuses or breaks off, the service is asked directly for the rest
/// of `timeout`, and found unreachable after `unreachable_after` without an answer. (A daemon
/// whose view of the service is not live refuses with `stale`, so its answers never stand for
/// an unreachable service.)
pub async fn wait_for_work_local_first(
    daemon: Option<(&LocalDaemon, &Identity)>,
    api: &Api,
    timeout: Duration,
    unreachable_after: Duration,
    backoff: Backoff,
) -> Result<(WaitOutcome, AnsweredBy), ClientError> {
    let deadline = Instant::now() + timeout;
    let why = match daemon {
        None => None,
        Some((daemon, identity)) => match daemon.wait(identity, timeout).await {
            Ok(DaemonWait::Work { claimable, .. }) => {
                return Ok((WaitOutcome::Work(claimable), AnsweredBy::Daemon));
            }
            Ok(DaemonWait::Timeout) => return Ok((WaitOutcome::Timeout, AnsweredBy::Daemon)),
            Err(err) => {
                tracing::debug!(error = %err, "asking the service directly");
                Some(err)
            }
        },
    };
    let remaining = deadline.saturating_duration_since(Instant::now());
    let outcome = wait_for_work_or_unreachable(api, remaining, unreachable_after, backoff).await?;
    Ok((outcome, AnsweredBy::Service(why)))
}
