//! The command line. Settings shared with `serve` come from the config file, then
//! `AGENT_INBOX_*` variables, then these flags.

use std::path::PathBuf;
use std::sync::LazyLock;

use clap::{Arg, ArgMatches, Args, Parser, Subcommand};
use inbox_server::config::{Setting, Value};

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
    Migrate(DatabaseArgs),
    /// Manage access tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Store a service address and a refresh token for `listen`, `wait` and the service.
    Login(LoginArgs),
    /// Forget the stored refresh token and profile.
    Logout(ProfileArgs),
    /// Run a command once per event of your inbox, until interrupted (or exit 3 when another
    /// process took over this agent under the tenant's single-active-session policy). The
    /// command's exit code decides: 0 acknowledges, 75 retries later, 65 quarantines, anything
    /// else dead-letters.
    Listen(ListenArgs),
    /// Block until work is waiting (exit 0), until --timeout passes (exit 1), or until the
    /// service is found unreachable (exit 69).
    ///
    /// Exit codes: 0 work is waiting (how many on stdout); 1 --timeout passed with no work, the
    /// service answering; 69 (EX_UNAVAILABLE) the service did not answer for
    /// --unreachable-after in a row, or when --timeout passed, so whether work waits is
    /// unknown (stderr says what did not answer, since when, and the last failure); 2 any other
    /// error. An outage shorter than --unreachable-after, such as a restart, is ridden out.
    Wait(WaitArgs),
    /// The local wake daemon: one process per user holds one stream per login profile and
    /// tells local clients (`wait`, `listen`, `daemon watch`, the SDKs) when work is waiting, over
    /// a Unix domain socket in the user's runtime directory. It never claims.
    Daemon(DaemonArgs),
    /// Serve the inbox to a language-model client as Model Context Protocol tools over stdio
    /// (stdout carries the protocol; logs go to stderr).
    Mcp(McpArgs),
    /// Install, remove or inspect the user service (systemd or launchd) that runs `listen`.
    Service {
        #[command(subcommand)]
        command: ServiceCommand,
    },
    /// Rotate or list the keys the service signs access tokens with (no restart needed); make
    /// a secrets key, or seal every secret under a new one.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Operate a running service with an admin token: inboxes, events with their history,
    /// parked events, requeue, purge, quarantine and release, sessions, callbacks, agent keys.
    Admin(crate::admin::AdminArgs),
    /// Cold storage of archived events.
    Archive {
        #[command(subcommand)]
        command: ArchiveCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum ArchiveCommand {
    /// Write archived events to a gzip JSON Lines file (one event with its metadata per line),
    /// then delete from the database exactly the rows the finished file holds.
    Export(ExportArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub server: ServeArgs,
    /// Export rows archived before this: an RFC 3339 time (2026-01-31T00:00:00Z) or an age
    /// (90d: archived more than 90 days ago). Default: the archive_retention setting.
    #[arg(long)]
    pub before: Option<String>,
    /// The file to write (it must not exist yet).
    #[arg(long)]
    pub to: std::path::PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Add a new token signing key; older keys keep verifying for --overlap, then retire.
    Rotate(RotateArgs),
    /// List the live token signing keys, newest first.
    List(DatabaseArgs),
    /// Print a new secrets key file on stdout (redirect it to a file only its service can
    /// read: `agent-inbox keys new-secrets-key > secrets.key`). The key seals the database's
    /// secrets; keep it apart from the database and its backups.
    NewSecretsKey,
    /// Seal every secret under the first key of --new-secrets-key-file while nodes serve. Every
    /// node's key file must hold the new key first (add it; nodes reload within seconds); once
    /// this is done, nodes may drop the old key.
    Rewrap(RewrapArgs),
}

#[derive(Debug, Clone, Args)]
pub struct RotateArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// How long tokens signed with the older keys stay valid, such as 24h. At least the
    /// access token lifetime, or tokens issued just before the rotation stop early.
    #[arg(long, default_value = "24h")]
    pub overlap: String,
    /// The new key's algorithm: HS256 or EdDSA [default: the token_algorithm setting, HS256].
    #[arg(long, value_parser = ["HS256", "EdDSA"])]
    pub algorithm: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct RewrapArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// The key file holding the new key (its first key; `keys new-secrets-key` makes one).
    #[arg(long)]
    pub new_secrets_key_file: PathBuf,
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
    // One flag per setting the table gives `serve` a flag (`--listen`, `--database-url`, ...).
    #[command(flatten)]
    pub settings: SettingFlags,
    /// Log as JSON lines instead of text.
    #[arg(long, env = "AGENT_INBOX_LOG_JSON")]
    pub log_json: bool,
}

impl ServeArgs {
    /// The flags that were given, as configuration (key, value) pairs.
    pub fn overrides(&self) -> Vec<(String, String)> {
        self.settings.0.iter().map(|(flat, value)| (flat.to_string(), value.clone())).collect()
    }

    /// The text given for the setting `flat` by its flag, if it was.
    pub fn flag(&self, flat: &str) -> Option<&str> {
        self.settings.0.iter().find(|(given, _)| *given == flat).map(|(_, value)| value.as_str())
    }
}

/// The flags of the settings that have one, made from the settings' table (its flat name,
/// form, help and default) when the command line is built, so `serve --help` lists exactly the
/// table's flags with the table's words; given ones are kept as (flat name, text) for
/// [`inbox_server::Config::load`].
#[derive(Debug, Clone, Default)]
pub struct SettingFlags(Vec<(&'static str, String)>);

/// Each setting with a flag and the flag's name (`lease-default`), made once: clap keeps the
/// names of a command's flags for as long as the command lives.
static SETTING_FLAGS: LazyLock<Vec<(&'static Setting, String)>> = LazyLock::new(|| {
    inbox_server::config::SETTINGS
        .iter()
        .filter_map(|setting| Some((setting, setting.flag_name()?)))
        .collect()
});

impl SettingFlags {
    fn arg(setting: &'static Setting, name: &'static str) -> Arg {
        let default = match setting.default_value() {
            Value::Unset => None,
            Value::List(list) if list.is_empty() => None,
            value => Some(format!("[default: {value}]")),
        };
        let help = setting.help();
        let short = default.iter().fold(help.clone(), |help, default| format!("{help} {default}"));
        let details = setting.details();
        let details = if details.is_empty() { String::new() } else { format!("\n\n{details}") };
        let bounds = setting.bounds_text(None);
        let bounds = (!bounds.is_empty()).then(|| format!("[bounds: {bounds}]"));
        let tail: Vec<String> =
            default.into_iter().chain(bounds).chain([format!("[env: {}]", setting.env())]).collect();
        Arg::new(setting.flat)
            .long(name)
            .value_name(setting.form.placeholder())
            .value_parser(move |text: &str| setting.check_text(text).map(|()| text.to_owned()))
            .help(short)
            .long_help(format!("{help}{details}\n\n{}", tail.join(" ")))
    }
}

impl clap::Args for SettingFlags {
    fn augment_args(command: clap::Command) -> clap::Command {
        command.args(SETTING_FLAGS.iter().map(|(setting, name)| Self::arg(setting, name)))
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Self::augment_args(command)
    }
}

impl clap::FromArgMatches for SettingFlags {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let given = SETTING_FLAGS.iter().filter_map(|(setting, _)| {
            matches.get_one::<String>(setting.flat).map(|value| (setting.flat, value.clone()))
        });
        Ok(SettingFlags(given.collect()))
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// How an operator command (`migrate`, `token`, `keys`) finds the server's database: the same
/// configuration file and settings as `serve`.
#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// TOML configuration file (the one `serve` uses).
    #[arg(long, env = "AGENT_INBOX_CONFIG")]
    pub config: Option<PathBuf>,
    /// The server's database: sqlite://path or mysql://user:password@host:port/database
    /// [default: sqlite://./data/agent-inbox.db, relative to the current directory].
    #[arg(long)]
    pub database_url: Option<String>,
    /// Create the SQLite database (and its secrets key file) if it does not exist yet. Without
    /// it a missing database is refused, since tokens signed by a new database's keys are
    /// refused by a running server.
    #[arg(long)]
    pub create_database: bool,
    /// The secrets key file the server uses (the same one) [default: as for `serve`].
    #[arg(long)]
    pub secrets_key_file: Option<String>,
}

impl DatabaseArgs {
    /// The flags that were given, as configuration (key, value) pairs.
    pub fn overrides(&self) -> Vec<(String, String)> {
        let url = self.database_url.iter().map(|url| ("database_url".to_owned(), url.clone()));
        let key = self.secrets_key_file.iter().map(|file| ("secrets_key_file".to_owned(), file.clone()));
        url.chain(key).collect()
    }
}

#[derive(Debug, Clone, Args)]
pub struct IssueArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Tenant the token is for.
    #[arg(long)]
    pub tenant: String,
    /// Subject: the agent id (for agents) or a name for a publisher or operator.
    #[arg(long)]
    pub subject: String,
    /// agent, publisher or admin.
    #[arg(long, default_value = "agent")]
    pub kind: String,
    /// Space-separated scopes [default: by --kind, see --help].
    #[arg(long, long_help = scope_help())]
    pub scope: Option<String>,
    /// Lifetime of the access token, such as 15m [default: the configured access_token_ttl].
    #[arg(long)]
    pub ttl: Option<String>,
    /// Also print a refresh token (second line).
    #[arg(long)]
    pub refresh: bool,
}

/// The long help of `--scope`, naming the default scopes of each kind.
fn scope_help() -> String {
    format!(
        "Space-separated scopes. Defaults: agent: \"{}\"; publisher: \"{}\"; admin: \"{}\".",
        inbox_server::tokens::AGENT_SCOPES,
        inbox_server::tokens::PUBLISHER_SCOPES,
        inbox_server::tokens::ADMIN_SCOPES,
    )
}

/// Which stored login to use.
#[derive(Debug, Clone, Args)]
pub struct ProfileArgs {
    /// Profile name: several logins can live side by side.
    #[arg(long, env = "AGENT_INBOX_PROFILE", default_value = "default")]
    pub profile: String,
}

#[derive(Debug, Clone, Args)]
pub struct LoginArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// The service, such as http://127.0.0.1:8080.
    #[arg(long)]
    pub server: String,
    /// The refresh token (from `agent-inbox token issue --refresh`). Leave it out, or pass -,
    /// to read it from stdin, which keeps it out of the process list and shell history.
    #[arg(long)]
    pub refresh_token: Option<String>,
    /// Where to keep the refresh token: auto (the OS secret store when there is one, else a
    /// 0600 file), secret-tool, keychain, credential-manager or file.
    #[arg(long, env = "AGENT_INBOX_SECRET_STORE", default_value = "auto")]
    pub secret_store: String,
    /// Whether `listen` signs its claims, acknowledgements, releases and heartbeats (RFC 9421):
    /// auto keeps the profile's registered key, or registers a new ed25519 key when the tenant
    /// requires signatures; generate does the same even when signatures are optional; none
    /// drops the profile's key and signs nothing. The private key is kept like the refresh
    /// token.
    #[arg(long, default_value = "auto", value_parser = ["auto", "generate", "none"])]
    pub signing_key: String,
}

/// How a command reaches the service: a stored login profile, or a fixed access token.
#[derive(Debug, Clone, Args)]
pub struct ConnectArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// The service URL [default: the profile's].
    #[arg(long, env = "AGENT_INBOX_SERVER")]
    pub server: Option<String>,
    /// A fixed access token instead of the profile's refresh token (not refreshed).
    #[arg(long, env = "AGENT_INBOX_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The local state file (cursor and processed events) [default: <profile>.state.db in
    /// the agent-inbox config directory].
    #[arg(long, env = "AGENT_INBOX_STATE")]
    pub state: Option<PathBuf>,
}

/// The long help of `listen --exec`: what the command gets, and what its exit code decides.
const EXEC_HELP: &str = "\
The command, run with `sh -c` once per event. It gets the event JSON on stdin, and its id, type,
sequence and delivery attempt in AGENT_INBOX_EVENT_ID, AGENT_INBOX_EVENT_TYPE,
AGENT_INBOX_INBOX_SEQ and AGENT_INBOX_DELIVERY_ATTEMPT. Its stderr is passed through to ours.

Exit codes:
  0                         acknowledged: done, never delivered again
  75 (--retry-exit-code)    released: claimable again after --retry-after
  65 (--quarantine-exit-code)
                            quarantined: set aside for a person, never retried (for a payload
                            that looks like a prompt injection, say); the reason is the last
                            line the command wrote to stderr, cut to 200 bytes
  any other code            failed: dead-lettered for an operator, with the code and the last
                            stderr line as the reason
  killed by a signal        released for a retry

With --batch N, one run of the command gets up to N events, one event JSON per line on stdin
(AGENT_INBOX_BATCH_SIZE says how many), and reports one outcome per event as a JSON line on
stdout, taking effect as it arrives:
  {\"event_id\": ID, \"outcome\": \"ack\"}              (may carry \"follow_ups\": [publish, ...],
                                                   handed off with the acknowledgement, or, for an
                                                   a2a.message event, \"a2a\": {\"message\",
                                                   \"artifacts\", \"state\"}, its A2A task's outcome)
  {\"event_id\": ID, \"outcome\": \"retry\", \"retry_after_seconds\": N, \"reason\": TEXT}
  {\"event_id\": ID, \"outcome\": \"fail\", \"reason\": TEXT}
  {\"event_id\": ID, \"outcome\": \"quarantine\", \"reason\": TEXT, \"class\": CLASS}
An event it does not report takes the exit code's meaning above when it reported none at all;
otherwise, or when the command was killed, the event is released for a retry.";

/// What `listen` does with events; shared with `service install`, which passes it on.
#[derive(Debug, Clone, Args)]
pub struct ListenOptions {
    /// The command, run with `sh -c` once per event: the event JSON on stdin, its id, type and
    /// sequence in AGENT_INBOX_EVENT_ID, AGENT_INBOX_EVENT_TYPE and AGENT_INBOX_INBOX_SEQ.
    /// Exit 0 acknowledges; --retry-exit-code (75) releases for a retry;
    /// --quarantine-exit-code (65) quarantines it, with the last line the command wrote to
    /// stderr as the reason; anything else fails the event (it is dead-lettered).
    #[arg(long, long_help = EXEC_HELP)]
    pub exec: String,
    /// Events handled at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub concurrency: u16,
    /// Run the command once for up to N events (1 to 256): one event JSON per line on its
    /// stdin, one outcome JSON line per event on its stdout (see --help for the protocol).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub batch: Option<u16>,
    /// The exit code that means "try again later" (75 is EX_TEMPFAIL).
    #[arg(long, default_value_t = 75)]
    pub retry_exit_code: i32,
    /// The exit code that means "set this event aside for a person" (65 is EX_DATAERR): the
    /// event is quarantined, never retried, with the command's last stderr line (at most 200
    /// bytes) as the reason, or "the command exited with 65" when it wrote none.
    #[arg(long, default_value_t = 65)]
    pub quarantine_exit_code: i32,
    /// How long a released event waits before it is claimable again, such as 30s or 1.5 (a
    /// bare number is seconds); a fraction rounds up to whole seconds, never sooner. The
    /// agent runs it again then, stream connected or not.
    #[arg(long, default_value = "30s")]
    pub retry_after: String,
    /// A command run (with `sh -c`) after a cursor reset, with the resync snapshot JSON on
    /// stdin; exit 0 continues, 75 retries later, anything else stops the agent [default:
    /// log a warning and continue].
    #[arg(long)]
    pub on_resync: Option<String>,
    /// Lease asked for per event, such as 5m [default: the service's]; heartbeats extend it
    /// while the command runs.
    #[arg(long)]
    pub lease: Option<String>,
    /// The best transport to try: sse, long-poll or poll; worse ones are the fallbacks. With
    /// sse and a login profile, the local wake daemon's hints come first when it runs.
    #[arg(long, default_value = "sse")]
    pub transport: String,
    /// Never hear hints from the local wake daemon (`agent-inbox daemon`); hold a stream of
    /// our own.
    #[arg(long)]
    pub no_daemon: bool,
    /// Shortest adaptive poll interval, after work was found [default: 1s].
    #[arg(long)]
    pub poll_min: Option<String>,
    /// Longest adaptive poll interval, while idle or disconnected [default: 5m].
    #[arg(long)]
    pub poll_max: Option<String>,
    /// Longest wait between attempts to reopen a failing stream or long poll while the
    /// service itself answers [default: --poll-max]. While the service does not answer at
    /// all, the agent probes it every 0.5 s growing to 2 s (with jitter), so it notices the
    /// service's return within about 2 s.
    #[arg(long)]
    pub reconnect_max: Option<String>,
    /// A stream that ends sooner than this counts as cut (by a proxy) [default: 20s].
    #[arg(long)]
    pub stream_life_min: Option<String>,
    /// How long to stay on a fallback transport before trying the better one [default: 5m].
    #[arg(long)]
    pub upgrade_after: Option<String>,
    /// On SIGINT/SIGTERM, how long running commands get to finish before their events are
    /// released [default: 30s].
    #[arg(long)]
    pub shutdown_grace: Option<String>,
    /// A name for this machine, shown in the service's session records.
    #[arg(long)]
    pub device_id: Option<String>,
    /// Log as JSON lines instead of text (when stderr is not a terminal).
    #[arg(long, env = "AGENT_INBOX_LOG_JSON")]
    pub log_json: bool,
}

impl ListenOptions {
    /// The options as `listen` arguments, for a service definition.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec![
            "--exec".to_owned(),
            self.exec.clone(),
            "--concurrency".to_owned(),
            self.concurrency.to_string(),
            "--retry-exit-code".to_owned(),
            self.retry_exit_code.to_string(),
            "--quarantine-exit-code".to_owned(),
            self.quarantine_exit_code.to_string(),
            "--retry-after".to_owned(),
            self.retry_after.clone(),
            "--transport".to_owned(),
            self.transport.clone(),
        ];
        let optional = [
            ("--on-resync", &self.on_resync),
            ("--lease", &self.lease),
            ("--poll-min", &self.poll_min),
            ("--poll-max", &self.poll_max),
            ("--reconnect-max", &self.reconnect_max),
            ("--stream-life-min", &self.stream_life_min),
            ("--upgrade-after", &self.upgrade_after),
            ("--shutdown-grace", &self.shutdown_grace),
            ("--device-id", &self.device_id),
        ];
        for (flag, value) in optional {
            if let Some(value) = value {
                args.push(flag.to_owned());
                args.push(value.clone());
            }
        }
        if let Some(batch) = self.batch {
            args.push("--batch".to_owned());
            args.push(batch.to_string());
        }
        if self.log_json {
            args.push("--log-json".to_owned());
        }
        if self.no_daemon {
            args.push("--no-daemon".to_owned());
        }
        args
    }
}

#[derive(Debug, Clone, Args)]
pub struct ListenArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(flatten)]
    pub options: ListenOptions,
}

#[derive(Debug, Clone, Args)]
pub struct WaitArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Give up after this long, such as 10m, with exit code 1, or 69 when the service is not
    /// answering at that time [default: wait indefinitely].
    #[arg(long)]
    pub timeout: Option<String>,
    /// Exit 69 once the service has not answered for this long in a row, such as 2m; `never`
    /// rides out any outage (until --timeout). Until then it is asked again every 0.5-2 s, so
    /// a restart is ridden out and noticed within about 2 s [default: 30s].
    #[arg(long)]
    pub unreachable_after: Option<String>,
    /// Ask the service directly, never the local wake daemon (`agent-inbox daemon`).
    #[arg(long)]
    pub no_daemon: bool,
}

#[derive(Debug, Clone, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DaemonArgs {
    #[command(subcommand)]
    pub command: Option<DaemonCommand>,
    #[command(flatten)]
    pub run: DaemonRunArgs,
}

#[derive(Debug, Clone, Subcommand)]
pub enum DaemonCommand {
    /// Print one line per new head of the profile's inbox, as the running daemon tells it (a
    /// requeued event repeats the current head): `agent-inbox daemon watch | while read -r
    /// head; do ...; done`. Exits 2 when no daemon answers.
    Watch(DaemonWatchArgs),
    /// Print what the running daemon serves, as JSON. Exits 2 when no daemon answers.
    Status,
}

/// How the daemon runs.
#[derive(Debug, Clone, Args)]
pub struct DaemonRunArgs {
    /// Serve only this login profile; repeat for several [default: every profile in the
    /// agent-inbox config directory, and any other a client asks about].
    #[arg(long = "profile")]
    pub profiles: Vec<String>,
    /// Exit after this long without a local client, such as 10m; 0 or never keeps running
    /// [default: 10m when started by socket activation, else never].
    #[arg(long)]
    pub idle_exit: Option<String>,
    /// Log as JSON lines instead of text.
    #[arg(long, env = "AGENT_INBOX_LOG_JSON")]
    pub log_json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct DaemonWatchArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Print the daemon's JSON line per hint ({"v":1,"type":"hint","head_seq":..,"claimable":..})
    /// instead of the head alone.
    #[arg(long)]
    pub json: bool,
}

/// `mcp` connects like `listen`, but keeps no local state: lease tokens travel in tool calls.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// The service URL [default: the profile's].
    #[arg(long, env = "AGENT_INBOX_SERVER")]
    pub server: Option<String>,
    /// A fixed access token instead of the profile's refresh token (not refreshed).
    #[arg(long, env = "AGENT_INBOX_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Log as JSON lines (on stderr) instead of text.
    #[arg(long, env = "AGENT_INBOX_LOG_JSON")]
    pub log_json: bool,
    /// Also be a Claude Code channel: declare the `claude/channel` capability and tell the
    /// session when work arrives (a count and event types, never a payload), so an idle
    /// session takes its next turn. Speaks the initialize handshake only (MCP 2025-11-25),
    /// the one Claude Code takes channel notifications on.
    #[arg(long)]
    pub claude_channel: bool,
}

impl McpArgs {
    pub fn connect(&self) -> ConnectArgs {
        ConnectArgs {
            profile: self.profile.clone(),
            server: self.server.clone(),
            token: self.token.clone(),
            state: None,
        }
    }
}

// Parsed once per process; the size of a variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// Write and enable a user service running `listen` (systemd --user on Linux, a launchd
    /// agent on macOS). It only makes outbound connections. With --daemon: the local wake
    /// daemon instead, started by its socket on the first local connection.
    Install(ServiceInstallArgs),
    /// Stop, disable and remove the user service.
    Uninstall(ServiceArgs),
    /// Show whether the user service is installed and running.
    Status(ServiceArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ServiceArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// The local wake daemon's service rather than a profile's listener.
    #[arg(long)]
    pub daemon: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ServiceInstallArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Print the service definition and where it would go; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Install the local wake daemon (`agent-inbox daemon`) instead of a listener: a systemd
    /// user socket and service (socket activation; the daemon exits after 10 idle minutes) or a
    /// launchd agent with a Sockets entry. It serves every login profile; it runs no command.
    #[arg(long, conflicts_with = "exec")]
    pub daemon: bool,
    /// What `listen` runs (required unless --daemon).
    #[command(flatten)]
    pub listen: Option<ListenOptions>,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// `serve`'s flags are the table's: given ones reach the configuration by their flat
    /// names, and a value not of the setting's form is refused by the flag.
    #[test]
    fn serve_flags_are_the_settings_tables() {
        Cli::command().debug_assert();
        let serve = Cli::command().find_subcommand("serve").cloned().expect("serve");
        let flags: Vec<&str> = serve.get_arguments().filter_map(|arg| arg.get_long()).collect();
        for setting in inbox_server::config::SETTINGS {
            let name = setting.flat.replace('_', "-");
            assert_eq!(flags.contains(&name.as_str()), setting.flag, "--{name}");
        }
        let cli =
            Cli::try_parse_from(["agent-inbox", "serve", "--lease-default", "90s", "--history", "false"])
                .unwrap();
        let Command::Serve(args) = cli.command else { panic!("serve") };
        assert_eq!(
            args.overrides(),
            [("lease_default".into(), "90s".into()), ("history".into(), "false".into())]
        );
        assert_eq!(args.flag("lease_default"), Some("90s"));
        let err = Cli::try_parse_from(["agent-inbox", "serve", "--lease-default", "soon"]).unwrap_err();
        assert!(err.to_string().contains("\"soon\" is not a duration"), "{err}");
        let err = Cli::try_parse_from(["agent-inbox", "serve", "--max-attempts", "many"]).unwrap_err();
        assert!(err.to_string().contains("is not a whole number"), "{err}");
    }
}
