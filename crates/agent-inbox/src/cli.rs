//! The command line. Settings shared with `serve` come from the config file, then
//! `AGENT_INBOX_*` variables, then these flags.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "agent-inbox", version, about = "Durable inboxes and wake-up hints for AI agents")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service (migrates the database first).
    Serve(ServeArgs),
    /// Apply schema migrations and exit.
    Migrate(ServeArgs),
    /// Manage access tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a signed access token on stdout (and with --refresh, a refresh token).
    Issue(IssueArgs),
}

/// Where the configuration comes from, and flags that override it.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// TOML configuration file.
    #[arg(long, env = "AGENT_INBOX_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long)]
    pub listen: Option<String>,
    /// sqlite://path or mysql://user:password@host:port/database [default: sqlite://./data/agent-inbox.db].
    #[arg(long)]
    pub database_url: Option<String>,
    /// Default lease length, such as 120s.
    #[arg(long)]
    pub lease_default: Option<String>,
    /// Longest lease a claim or heartbeat may ask for, such as 1h.
    #[arg(long)]
    pub lease_max: Option<String>,
    /// Delivery attempts before an event is dead-lettered.
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// How long terminal events are kept before archiving, such as 30d.
    #[arg(long)]
    pub retention: Option<String>,
    /// Longest long-poll wait, such as 25s.
    #[arg(long)]
    pub long_poll_wait_max: Option<String>,
    /// Largest inline payload in bytes.
    #[arg(long)]
    pub payload_bytes_limit: Option<usize>,
    /// Log as JSON lines instead of text.
    #[arg(long, env = "AGENT_INBOX_LOG_JSON")]
    pub log_json: bool,
}

impl ServeArgs {
    /// The flags that were given, as configuration (key, value) pairs.
    pub fn overrides(&self) -> Vec<(String, String)> {
        let mut pairs = Vec::new();
        let mut push = |key: &str, value: Option<String>| {
            if let Some(value) = value {
                pairs.push((key.to_owned(), value));
            }
        };
        push("listen", self.listen.clone());
        push("database_url", self.database_url.clone());
        push("lease_default", self.lease_default.clone());
        push("lease_max", self.lease_max.clone());
        push("max_attempts", self.max_attempts.map(|v| v.to_string()));
        push("retention", self.retention.clone());
        push("long_poll_wait_max", self.long_poll_wait_max.clone());
        push("payload_bytes_limit", self.payload_bytes_limit.map(|v| v.to_string()));
        pairs
    }
}

#[derive(Debug, Clone, Args)]
pub struct IssueArgs {
    #[command(flatten)]
    pub server: ServeArgs,
    /// Tenant the token is for.
    #[arg(long)]
    pub tenant: String,
    /// Subject: the agent id (for agents) or a name for a publisher or operator.
    #[arg(long)]
    pub subject: String,
    /// agent, publisher or admin.
    #[arg(long, default_value = "agent")]
    pub kind: String,
    /// Space-separated scopes [default: the agent scopes for agents, events.publish rooms.write for publishers, admin for admins].
    #[arg(long)]
    pub scope: Option<String>,
    /// Lifetime of the access token, such as 15m [default: the configured access_token_ttl].
    #[arg(long)]
    pub ttl: Option<String>,
    /// Also print a refresh token (second line).
    #[arg(long)]
    pub refresh: bool,
}
