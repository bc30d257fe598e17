//! The command line of `agent-inbox admin`: where the service is, where the admin token comes
//! from (a file or the environment, never an argument `ps` would show), and one subcommand per
//! operation.

use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser as _};
use clap::{Args, Subcommand};
use inbox_core::limits::Reason;
use inbox_core::{EventId, QuarantineClass, RecipientId};

/// Event states `events --state` filters on.
pub const EVENT_STATES: [&str; 7] =
    ["available", "retry_scheduled", "claimed", "acked", "dead_letter", "quarantined", "expired"];
/// The states of a parked event.
pub const PARKED_STATES: [&str; 2] = ["dead_letter", "quarantined"];

#[derive(Debug, Clone, Args)]
pub struct AdminArgs {
    #[command(flatten)]
    pub connect: AdminConnect,
    #[command(subcommand)]
    pub command: AdminCommand,
}

/// How `admin` reaches the service, and how it answers.
#[derive(Debug, Clone, Args)]
pub struct AdminConnect {
    /// The login profile whose service to use when --server is not given.
    #[arg(long, env = "AGENT_INBOX_PROFILE", default_value = "default", global = true)]
    pub profile: String,
    /// The service URL [default: the login profile's].
    #[arg(long, env = "AGENT_INBOX_SERVER", global = true)]
    pub server: Option<String>,
    /// A file holding an admin access token (`agent-inbox token issue --kind admin`)
    /// [default: the AGENT_INBOX_ADMIN_TOKEN variable]. There is no --token: an argument
    /// shows in the process list.
    #[arg(long, global = true)]
    pub token_file: Option<PathBuf>,
    /// Print the service's JSON instead of a table, for scripts.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Clone, Subcommand)]
pub enum AdminCommand {
    /// Every inbox of the tenant: depth, oldest unacknowledged age, head, claimed,
    /// retry-scheduled, parked, online sessions and when the agent was last seen.
    Inboxes {
        /// At most this many inboxes.
        #[arg(long)]
        limit: Option<u32>,
    },
    /// One agent's events in sequence order (oldest first, or with --newest-first), optionally
    /// in one state.
    Events {
        /// The agent (recipient id).
        agent: String,
        /// Only events in this state.
        #[arg(long, value_parser = EVENT_STATES)]
        state: Option<String>,
        /// Only events after this inbox sequence number (the last one of the previous page).
        #[arg(long)]
        after_seq: Option<u64>,
        /// Only events before this inbox sequence number (with --newest-first, the last one of
        /// the previous page).
        #[arg(long)]
        before_seq: Option<u64>,
        /// The newest events first.
        #[arg(long)]
        newest_first: bool,
        /// At most this many events [default: the service's, 100].
        #[arg(long)]
        limit: Option<u32>,
    },
    /// One event: its envelope, payload and history (every claim, acknowledgement, release,
    /// expiry, dead-lettering, quarantine and requeue, with who and why).
    Event {
        /// The agent (recipient id).
        agent: String,
        event_id: String,
    },
    /// Parked events (dead-lettered and quarantined) of the tenant or of one agent, with reasons.
    Parked {
        /// Only this agent's.
        agent: Option<String>,
        #[arg(long, value_parser = PARKED_STATES)]
        state: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Send parked events back to the agent's inbox with a fresh budget of attempts.
    Requeue(EventsArgs),
    /// Delete parked events for good (asks first on a terminal; --yes does not ask).
    Purge {
        #[command(flatten)]
        events: EventsArgs,
        /// Delete without asking. Needed when stdin is not a terminal.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Set available or claimed events aside for a person: never claimed or retried until
    /// released. A claimed event's lease ends; its holder's acknowledgement is refused.
    Quarantine {
        #[command(flatten)]
        events: EventsArgs,
        /// Why, for whoever reviews it (one line, as long as the service keeps).
        #[arg(long, value_parser = |text: &str| Reason::new(text))]
        reason: Reason,
        /// What kind of anomaly [default: other].
        #[arg(long, value_parser = PossibleValuesParser::new(QuarantineClass::ALL.map(QuarantineClass::as_str))
            .map(|name| QuarantineClass::parse(&name).expect("a possible value")))]
        class: Option<QuarantineClass>,
    },
    /// Release quarantined events back to the agent's inbox, claimable again.
    Release(EventsArgs),
    /// Agent sessions (device, transport, connected, last heartbeat, superseded), newest first.
    Sessions {
        /// Only this agent's.
        agent: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Callback registrations: state, failures, next attempt, whether and why disabled, and
    /// recent deliveries.
    Callbacks,
    /// Re-enable a callback registration disabled after failing past the bound: its failure
    /// counts start over and its agent's current head is delivered at once.
    EnableCallback {
        /// The registration (`cbreg_...`, as `admin callbacks` lists it).
        registration_id: String,
    },
    /// Agents' request-signing keys (never their material).
    Keys,
}

/// One agent and some of its events.
#[derive(Debug, Clone, Args)]
pub struct EventsArgs {
    /// The agent (recipient id).
    pub agent: RecipientId,
    /// The events, by id.
    #[arg(required = true, num_args = 1..)]
    pub event_ids: Vec<EventId>,
}
