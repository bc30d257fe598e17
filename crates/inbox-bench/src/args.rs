//! The command line, parsed by hand: `inbox-bench store [--publishes N] [--events N]`.

/// Printed on `--help` and after a usage error.
pub const USAGE: &str = "\
usage: inbox-bench store [--publishes N] [--events N]
       inbox-bench hints [--publishes N] [--subscribers N]
       inbox-bench callbacks [--seconds N]
       inbox-bench http [--agents N] [--events N] [--seconds N]
       inbox-bench trust [--agents N] [--events N] [--rounds N]
       inbox-bench publish [--publishes N] [--rounds N]
       inbox-bench galera [--seconds N] [--events N]
       inbox-bench agent [--events-max N]
       inbox-bench history [--events N] [--http-events N] [--backend mysql|sqlite|both]
       inbox-bench streams [--streams N] [--fanout N[,N...]] [--publishes N]
       inbox-bench readview [--seed-events N] [--agents N] [--rate N] [--before-seconds N]
                            [--view-seconds N] [--after-seconds N] [--no-view]
       inbox-bench fairness [--backlog N] [--b-after N] [--phase-seconds N]
       inbox-bench soak [--minutes N] [--rate N] [--agents N] [--window-minutes N]
                        [--retention-seconds N] [--archive-retention-seconds N]
                        [--read-view-at MINUTE] [--read-view-minutes N] [--no-read-view]

  store          benchmark inbox_store::SqlStore against raw SQL on MariaDB/MySQL
  --publishes N  publishes per publish row (default 3000)
  --events N     backlog events per claim+ack row, claimed in batches of 10 (default 3000)

  hints          commit-to-hint latency on one and across two nodes, idle SSE subscribers per
                 node (memory, heartbeat CPU) and 304 head checks per second
  --publishes N  paced publishes of the latency phase (default 1000)
  --subscribers N  idle SSE streams to open on one node (default 10000)

  callbacks      webhook isolation: 10 callbacks with receivers on 127.0.0.1, one event to all
                 10 agents every 200 ms; the 9 healthy receivers' publish-to-delivery p50/p99
                 with all 10 healthy and with 1 of 10 never answering, and their ratio
  --seconds N    publishing time of each of the two runs (default 15)

  http           the HTTP API (poll, claim 10, ack; publish) beside the raw-SQL claim+ack
                 baseline, at peak and at half of peak load
  --agents N     concurrent agents (default 16)
  --events N     backlog events of the peak phase (default 6000)
  --seconds N    length of the half-load phase (default 10)

  trust          RFC 9421 signature verification cost per request, and signed versus
                 unsigned claim+ack throughput through the HTTP API
  --agents N     concurrent agents, each with its own key (default 16)
  --events N     events per phase (default 3000)
  --rounds N     phases per mode, signed and unsigned alternating (default 4)

  publish        the node as shipped (info access log) beside the SQL a user would write by
                 hand: publishing at 1, 4, 16 and 64 publishers (and at warn, for the log's
                 cost), claim(10)+ack at 1, 4 and 16 agents, the 304 head at 16 connections
  --publishes N  publishes per side and round (default 2000)
  --rounds N     paired rounds per row (default 3)

  galera         publish and claim+ack through 3 nodes on 3 Galera members beside 1 node on 1
                 member, with the members' certification failures per second; the cluster is
                 AGENT_INBOX_TEST_GALERA_URLS, else one started with scripts/galera.sh
  --seconds N    length of each publish row (default 10)
  --events N     backlog events of each claim+ack row (default 3000)
  agent          the agent side against `agent-inbox serve` on SQLite: publish-to-handler
                 latency of an SSE, a long-poll and a polling-only agent, an idle agent's
                 requests per hour, and SDK and `listen --exec true` throughput; needs the
                 agent-inbox binary beside this one (cargo build -p agent-inbox -p inbox-bench)
  --events-max N caps every phase's events (default: 300, 100, 25, 2000 and 1000)

  history        claim+ack with each event's history recorded and not (StoreConfig::
                 record_history), two stores on one database taking turns, then through the
                 HTTP API against two nodes in child processes ([inbox] history true and
                 false), on MariaDB and SQLite
  --events N     backlog events per row and setting (default 4000)
  --http-events N  the same for the HTTP row, 16 agents with an inbox each (default 8000)
  --backend B    mysql, sqlite or both (default both)

  streams        what connected agents cost one node on SQLite (in a child process): RSS per
                 idle SSE and WebSocket stream, idle CPU per 1,000 streams, time to open them,
                 and publish -> hint to the last of N subscribers of one inbox; the clients run
                 in processes of their own, from 127.x.y.z source addresses
  --streams N    idle streams, half of each transport (default 16000; the node needs an
                 open-files limit above it)
  --fanout N,..  subscriber counts of the fan-out rows (default 1000,10000)
  --publishes N  publishes per fan-out row, one every 250 ms (default 40)
  readview       claims while one connection holds an old read view (as a backup does), on
                 MariaDB: per 10 s window claim p50/p99, the claim statement's cost under
                 ANALYZE and InnoDB's history list length
  --seed-events N  acknowledged events seeded first, over all agents (default 1000000)
  --agents N     agents, an inbox each (default 8)
  --rate N       events published per second (default 150)
  --before-seconds N, --view-seconds N, --after-seconds N
                 load before, while and after the view is held (default 90, 600, 30)
  --no-view      hold no view: the control run

  fairness       fair claims beside sequence claims on MariaDB (issue 31): sender A's backlog,
                 sender B's 20 events published mid-run, the claim that took B's last one and
                 A's claim+ack throughput; claim p50/p99 with 1, 100 and 10,000 keys; B's
                 publish and publish->hint p99 while another tenant floods publishes
  --backlog N    sender A's events (default 20000)
  --b-after N    claims of 10 before B publishes (default 50)
  --phase-seconds N  noisy tenant: tenant B's 50 publishes/s for N s alone, then as long while
                 tenant A floods from 32 connections, twice over, through a node as shipped
                 (default 10)

  soak           an hour of steady load through the HTTP API (node in a child process, on
                 MariaDB) while retention turns rows over into the archive and prunes it, and a
                 backup's read view is held in the middle: p99 of publish, claim and
                 acknowledge per window, the node's RSS and open files, nothing lost (not for CI)
  --minutes N    length (default 60); --rate N events/s (default 150); --agents N (default 8)
  --read-view-at MINUTE  when the held read view starts (default 20; --no-read-view: none)
  --read-view-minutes N  how long it is held (default 10)
  --window-minutes N  reporting window (default 5)
  --retention-seconds N, --archive-retention-seconds N  (default 300 and 1200)

The server is AGENT_INBOX_BENCH_MYSQL_URL, else AGENT_INBOX_TEST_MYSQL_URL, else
mysql://root@127.0.0.1:3306/test. The benchmark creates and drops its own database there
(`agent` uses a SQLite file in a temporary directory instead).";

/// The largest count either option accepts, so a typo cannot start an hour-long run.
const COUNT_MAX: usize = 100_000;

/// What one invocation asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Store(StoreArgs),
    Hints(crate::hints::HintsArgs),
    Callbacks(crate::callbacks::CallbacksArgs),
    Http(crate::http::HttpArgs),
    Trust(crate::trust::TrustArgs),
    Publish(crate::publishing::PublishArgs),
    Galera(crate::galera::GaleraArgs),
    Agent(crate::agent::AgentArgs),
    History(crate::history::HistoryArgs),
    ReadView(crate::readview::ReadViewArgs),
    Fairness(crate::fairness::FairnessArgs),
    Soak(crate::soak::SoakArgs),
    /// The hidden child process of `hints`: idle SSE clients for the node at this address.
    HintsIdleClients(String),
    Streams(crate::streams::StreamsArgs),
    /// The hidden child process of `streams`: stream clients for the node at this address.
    StreamsClients(String),
    /// The hidden child process of `http`: a service node on this database URL, listening on
    /// this address.
    Node {
        database_url: String,
        listen: String,
        /// Whether the node records each event's history (`[inbox] history`).
        history: bool,
        settings: crate::node::NodeSettings,
    },
    Help,
}

/// Sizes of the `store` benchmark's rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreArgs {
    pub publishes: usize,
    pub events: usize,
}

impl Default for StoreArgs {
    fn default() -> Self {
        Self { publishes: 3_000, events: 3_000 }
    }
}

/// Parses the arguments after the program name; the error is a message for a person.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut args = args.into_iter();
    match args.next().as_deref() {
        Some("store") => {}
        Some("hints") => return parse_hints(args),
        Some("callbacks") => return parse_callbacks(args),
        Some("http") => return parse_http(args),
        Some("trust") => return parse_trust(args),
        Some("publish") => return parse_publish(args),
        Some("galera") => return parse_galera(args),
        Some("agent") => return parse_agent(args),
        Some("history") => return parse_history(args),
        Some("streams") => return parse_streams(args),
        Some("streams-clients") => {
            let addr = args.next().ok_or("streams-clients needs the node's address")?;
            return Ok(Command::StreamsClients(addr));
        }
        Some("readview") => return parse_readview(args),
        Some("fairness") => return parse_fairness(args),
        Some("soak") => return parse_soak(args),
        Some("hints-idle-clients") => {
            let addr = args.next().ok_or("hints-idle-clients needs the node's address")?;
            return Ok(Command::HintsIdleClients(addr));
        }
        Some("node") => {
            let database_url = args.next().ok_or("node needs the database URL")?;
            let mut listen = "127.0.0.1:0".to_owned();
            let mut history = true;
            let mut settings = crate::node::NodeSettings::default();
            let seconds = |value: &str| value.parse::<u64>().ok().map(std::time::Duration::from_secs);
            while let Some(flag) = args.next() {
                match (flag.as_str(), args.next()) {
                    ("--listen", Some(address)) => listen = address,
                    ("--history", Some(on)) if on == "true" || on == "false" => history = on == "true",
                    ("--retention-seconds", Some(n)) if seconds(&n).is_some() => {
                        settings.retention = seconds(&n)
                    }
                    ("--archive-retention-seconds", Some(n)) if seconds(&n).is_some() => {
                        settings.archive_retention = seconds(&n)
                    }
                    ("--log", Some(level)) => settings.log = Some(level),
                    ("--tenant-requests-per-second", Some(n)) if n.parse::<u32>().is_ok() => {
                        settings.tenant_requests_per_second = n.parse().ok()
                    }
                    _ => {
                        return Err(
                            "node takes the database URL, then --listen ADDRESS, --history true|false, \
                             --retention-seconds N, --archive-retention-seconds N, --log LEVEL and \
                             --tenant-requests-per-second N"
                                .to_owned(),
                        );
                    }
                }
            }
            return Ok(Command::Node { database_url, listen, history, settings });
        }
        Some("--help" | "-h" | "help") => return Ok(Command::Help),
        Some(other) => {
            return Err(format!(
                "unknown command {other:?}; use `store`, `hints`, `callbacks`, `http`, `trust`, `publish`, `galera`, `agent`, `history`, `streams`, `readview`, `fairness` or `soak`"
            ));
        }
        None => {
            return Err(
                "name a benchmark to run: `store`, `hints`, `callbacks`, `http`, `trust`, `publish`, `galera`, `agent`, `history`, `streams`, `readview`, `fairness` or `soak`"
                    .to_owned(),
            );
        }
    }
    let mut store = StoreArgs::default();
    while let Some(flag) = args.next() {
        let target = match flag.as_str() {
            "--publishes" => &mut store.publishes,
            "--events" => &mut store.events,
            "--help" | "-h" => return Ok(Command::Help),
            other => return Err(format!("unknown option {other:?}")),
        };
        *target = count_after(&flag, &mut args)?;
    }
    Ok(Command::Store(store))
}

fn parse_history(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    use crate::history::{Backends, HistoryArgs};
    let mut history = HistoryArgs::default();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--events" => history.events = count_after(&flag, &mut args)?,
            "--http-events" => history.http_events = count_after(&flag, &mut args)?,
            "--backend" => {
                history.backends = match args.next().as_deref() {
                    Some("mysql") => Backends::MySql,
                    Some("sqlite") => Backends::Sqlite,
                    Some("both") => Backends::Both,
                    other => return Err(format!("--backend takes mysql, sqlite or both, not {other:?}")),
                }
            }
            "--help" | "-h" => return Ok(Command::Help),
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(Command::History(history))
}

fn parse_streams(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut streams = crate::streams::StreamsArgs::default();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--streams" => streams.streams = count_after(&flag, &mut args)?,
            "--publishes" => streams.publishes = count_after(&flag, &mut args)?,
            "--fanout" => {
                let list = args.next().ok_or("--fanout needs a list of counts")?;
                streams.fanout = list
                    .split(',')
                    .map(|n| match n.parse::<usize>() {
                        Ok(n) if (1..=COUNT_MAX).contains(&n) => Ok(n),
                        _ => Err(format!("--fanout takes counts from 1 to {COUNT_MAX}, not {n:?}")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--help" | "-h" => return Ok(Command::Help),
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(Command::Streams(streams))
}

fn parse_readview(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut readview = crate::readview::ReadViewArgs::default();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--help" | "-h" => return Ok(Command::Help),
            "--no-view" => readview.no_view = true,
            "--seed-events" => readview.seed_events = number_after(&flag, &mut args, 10_000_000)?,
            "--agents" => readview.agents = number_after(&flag, &mut args, 64)? as usize,
            "--rate" => readview.rate = number_after(&flag, &mut args, 5_000)?,
            "--before-seconds" => readview.before_seconds = number_after(&flag, &mut args, 7_200)?,
            "--view-seconds" => readview.view_seconds = number_after(&flag, &mut args, 7_200)?,
            "--after-seconds" => readview.after_seconds = number_after(&flag, &mut args, 7_200)?,
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(Command::ReadView(readview))
}

fn parse_fairness(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut fairness = crate::fairness::FairnessArgs::default();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--help" | "-h" => return Ok(Command::Help),
            "--backlog" => fairness.backlog = number_after(&flag, &mut args, 1_000_000)? as usize,
            "--b-after" => fairness.b_after = number_after(&flag, &mut args, 100_000)? as usize,
            "--phase-seconds" => fairness.phase_seconds = number_after(&flag, &mut args, 600)?,
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(Command::Fairness(fairness))
}

/// The whole number that follows `flag`, within `1..=max`.
fn number_after(flag: &str, args: &mut impl Iterator<Item = String>, max: u64) -> Result<u64, String> {
    let value = args.next().ok_or_else(|| format!("{flag} needs a number after it"))?;
    value
        .parse::<u64>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| format!("{flag} is {value:?}; give a whole number from 1 to {max}"))
}

fn parse_soak(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut soak = crate::soak::SoakArgs::default();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--help" | "-h" => return Ok(Command::Help),
            "--minutes" => soak.minutes = number_after(&flag, &mut args, 24 * 60)?,
            "--rate" => soak.rate = number_after(&flag, &mut args, 5_000)?,
            "--agents" => soak.agents = number_after(&flag, &mut args, 64)? as usize,
            "--window-minutes" => soak.window_minutes = number_after(&flag, &mut args, 60)?,
            "--retention-seconds" => soak.retention_seconds = number_after(&flag, &mut args, 86_400)?,
            "--archive-retention-seconds" => {
                soak.archive_retention_seconds = number_after(&flag, &mut args, 86_400)?
            }
            "--read-view-at" => soak.read_view_at_minute = number_after(&flag, &mut args, 24 * 60)?,
            "--read-view-minutes" => soak.read_view_minutes = number_after(&flag, &mut args, 24 * 60)?,
            "--no-read-view" => soak.read_view_at_minute = 0,
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(Command::Soak(soak))
}

fn parse_hints(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut hints = crate::hints::HintsArgs::default();
    while let Some(flag) = args.next() {
        let target = match flag.as_str() {
            "--publishes" => &mut hints.publishes,
            "--subscribers" => &mut hints.subscribers,
            "--help" | "-h" => return Ok(Command::Help),
            other => return Err(format!("unknown option {other:?}")),
        };
        *target = count_after(&flag, &mut args)?;
    }
    Ok(Command::Hints(hints))
}

fn parse_callbacks(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut callbacks = crate::callbacks::CallbacksArgs::default();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--seconds" => callbacks.seconds = number_after(&flag, &mut args, 600)?,
            "--help" | "-h" => return Ok(Command::Help),
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(Command::Callbacks(callbacks))
}

fn parse_trust(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut trust = crate::trust::TrustArgs::default();
    while let Some(flag) = args.next() {
        if matches!(flag.as_str(), "--help" | "-h") {
            return Ok(Command::Help);
        }
        let number = count_after(&flag, &mut args)?;
        match flag.as_str() {
            "--agents" => trust.agents = number.min(256),
            "--events" => trust.events = number,
            "--rounds" => trust.rounds = number.min(50),
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(Command::Trust(trust))
}

fn parse_publish(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut publish = crate::publishing::PublishArgs::default();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--help" | "-h" => return Ok(Command::Help),
            "--publishes" => publish.publishes = count_after(&flag, &mut args)?,
            "--rounds" => publish.rounds = count_after(&flag, &mut args)?.max(1),
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(Command::Publish(publish))
}

fn parse_galera(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut galera = crate::galera::GaleraArgs::default();
    while let Some(flag) = args.next() {
        if matches!(flag.as_str(), "--help" | "-h") {
            return Ok(Command::Help);
        }
        let number = count_after(&flag, &mut args)?;
        match flag.as_str() {
            "--seconds" => galera.seconds = number.min(600) as u64,
            "--events" => galera.events = number,
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(Command::Galera(galera))
}

fn parse_agent(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut agent = crate::agent::AgentArgs { events_max: None };
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--help" | "-h" => return Ok(Command::Help),
            "--events-max" => agent.events_max = Some(count_after(&flag, &mut args)?),
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(Command::Agent(agent))
}

fn parse_http(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut http = crate::http::HttpArgs::default();
    while let Some(flag) = args.next() {
        if matches!(flag.as_str(), "--help" | "-h") {
            return Ok(Command::Help);
        }
        let number = count_after(&flag, &mut args)?;
        match flag.as_str() {
            "--agents" => http.agents = number.min(256),
            "--events" => http.events = number,
            "--seconds" => http.seconds = number.min(600) as u64,
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(Command::Http(http))
}

/// The whole number that follows `flag`, within `1..=COUNT_MAX`.
fn count_after(flag: &str, args: &mut impl Iterator<Item = String>) -> Result<usize, String> {
    let value = args.next().ok_or_else(|| format!("{flag} needs a number after it"))?;
    value
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=COUNT_MAX).contains(n))
        .ok_or_else(|| format!("{flag} is {value:?}; give a whole number from 1 to {COUNT_MAX}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn store_takes_its_sizes_and_refuses_strays() {
        assert_eq!(parse(words("store")), Ok(Command::Store(StoreArgs::default())));
        assert_eq!(
            parse(words("store --events 50 --publishes 7")),
            Ok(Command::Store(StoreArgs { publishes: 7, events: 50 }))
        );
        assert!(parse(words("store --events")).is_err());
        assert!(parse(words("store --events 0")).is_err());
        assert!(parse(words("store --events many")).is_err());
        assert!(parse(words("store --fast")).is_err());
        assert!(parse(words("publsh")).is_err(), "an unknown benchmark");
        assert_eq!(
            parse(words("publish --publishes 500")),
            Ok(Command::Publish(crate::publishing::PublishArgs { publishes: 500, rounds: 3 }))
        );
        assert_eq!(
            parse(words("hints --subscribers 50")),
            Ok(Command::Hints(crate::hints::HintsArgs { publishes: 1_000, subscribers: 50 }))
        );
        assert!(parse(words("hints --subscribers 0")).is_err());
        assert_eq!(
            parse(words("callbacks --seconds 5")),
            Ok(Command::Callbacks(crate::callbacks::CallbacksArgs { seconds: 5 }))
        );
        assert!(parse(words("callbacks --seconds 0")).is_err());
        assert_eq!(
            parse(words("galera --seconds 3")),
            Ok(Command::Galera(crate::galera::GaleraArgs { seconds: 3, events: 3_000 }))
        );
        assert!(parse(words("galera --members 3")).is_err());
        assert!(parse(Vec::new()).is_err());
        assert_eq!(parse(words("agent")), Ok(Command::Agent(crate::agent::AgentArgs { events_max: None })));
        assert_eq!(
            parse(words("agent --events-max 3")),
            Ok(Command::Agent(crate::agent::AgentArgs { events_max: Some(3) }))
        );
        assert!(parse(words("agent --events-max 0")).is_err());
    }
}
