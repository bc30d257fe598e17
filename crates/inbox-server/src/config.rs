//! Service configuration: built-in defaults, overridden by a TOML file, overridden by
//! `AGENT_INBOX_*` environment variables, overridden by command-line flags. Durations take
//! human forms (`90s`, `15m`, `30d`); every limit has a bound.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Prefix of the environment variables that override configuration keys.
pub const ENV_PREFIX: &str = "AGENT_INBOX_";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to listen on.
    pub listen: String,
    /// `sqlite://path` (the default, created on first start) or `mysql://user:pass@host/db`.
    pub database_url: String,
    pub database_connections_max: u32,
    /// How long a request waits for a database connection before it is answered
    /// `503 database_unavailable` with `Retry-After`, instead of hanging while the database is away.
    #[serde(with = "human_duration")]
    pub database_acquire_timeout: Duration,
    /// How long one MySQL statement may go unanswered (a paused or partitioned server) before
    /// the request is answered `503 database_unavailable`. Lock waits end sooner, so busy rows
    /// are retried, not refused.
    #[serde(with = "human_duration")]
    pub database_statement_timeout: Duration,
    /// How long `serve` keeps trying to reach (and migrate) the database at start before it
    /// exits; unset: for ever. Meanwhile it listens, `/healthz` answers 200 and `/readyz` 503.
    #[serde(with = "optional_human_duration", skip_serializing_if = "Option::is_none")]
    pub database_wait_max: Option<Duration>,
    #[serde(with = "human_duration")]
    pub lease_default: Duration,
    #[serde(with = "human_duration")]
    pub lease_max: Duration,
    /// Delivery attempts before an event is dead-lettered.
    pub max_attempts: u32,
    /// How long acknowledged and other terminal events stay before archiving.
    #[serde(with = "human_duration")]
    pub retention: Duration,
    /// How long archived events stay in the archive table before the scavenger deletes them
    /// (`agent-inbox archive export` moves them to a file first).
    #[serde(with = "human_duration")]
    pub archive_retention: Duration,
    /// Longest `wait_seconds` a long poll may ask for.
    #[serde(with = "human_duration")]
    pub long_poll_wait_max: Duration,
    /// Largest inline JSON payload of an event, in bytes.
    pub payload_bytes_limit: usize,
    /// Group commit: how long a busy node waits for more publishes before it commits a batch
    /// (0 to 1 ms; 0 commits what arrived during the previous commit, never waiting), and the
    /// most publishes one batch takes. An idle node never waits.
    #[serde(with = "human_duration")]
    pub publish_linger: Duration,
    pub publish_batch_max: u32,
    /// Batches one node commits at once: with two, one batch's fsync overlaps the next one's
    /// statements (heads are locked in one order, so batches never deadlock).
    pub publish_batches_in_flight: u32,
    #[serde(with = "human_duration")]
    pub access_token_ttl: Duration,
    #[serde(with = "human_duration")]
    pub refresh_token_ttl: Duration,
    /// Issuer written into, and required of, the service's own tokens.
    pub token_issuer: String,
    /// Requests per second each tenant may make (sustained), and its burst.
    pub tenant_requests_per_second: u32,
    pub tenant_requests_burst: u32,
    /// Requests per second each agent (token subject) may make, and its burst.
    pub agent_requests_per_second: u32,
    pub agent_requests_burst: u32,
    /// Failed authentications per client address per minute before it is throttled.
    pub auth_failures_per_minute: u32,
    /// Concurrent long polls and streams one agent, and one tenant, may hold open.
    pub waiters_per_agent: u32,
    pub waiters_per_tenant: u32,
    /// How often the scavenger runs, and how many rows one pass handles per kind of work.
    #[serde(with = "human_duration")]
    pub scavenge_interval: Duration,
    pub scavenge_batch: u32,
    /// Interval between stream heartbeats and the session heartbeat agents are told to use.
    #[serde(with = "human_duration")]
    pub heartbeat_interval: Duration,
    /// How often each node's notifier reads new commits from `outbox_signal`: the worst-case
    /// delay a hint for a publish made on another node adds.
    #[serde(with = "human_duration")]
    pub notify_interval: Duration,
    /// How long the notifier keeps asking for an `outbox_id` it skipped (one allocated but not
    /// yet committed when a higher one was read) before deciding it was rolled back.
    #[serde(with = "human_duration")]
    pub signal_gap_grace: Duration,
    /// How long `outbox_signal` rows are kept before the scavenger deletes them.
    #[serde(with = "human_duration")]
    pub signal_retention: Duration,
    /// Life of a single-use stream ticket (at most 60 s).
    #[serde(with = "human_duration")]
    pub stream_ticket_ttl: Duration,
    /// The reconnection delay SSE streams advise browsers to use (`retry:`).
    #[serde(with = "human_duration")]
    pub sse_retry: Duration,
    /// External identity provider: a JWKS file of public keys whose tokens are also accepted.
    pub jwks_file: Option<PathBuf>,
    /// Issuer and audience required of external tokens (when set).
    pub jwks_issuer: Option<String>,
    pub jwks_audience: Option<String>,
    /// The `@authority` signed requests are checked against, when a proxy in front rewrites
    /// `Host` (such as `inbox.example.com`); by default the request's `Host`.
    pub signatures_authority: Option<String>,
    /// How often every node re-reads the token signing keys, so a rotation (`agent-inbox keys
    /// rotate`) takes effect without a restart. Retirement is exact regardless: a node re-reads
    /// keys it has held longer than the shortest overlap (1 s) before verifying with them.
    #[serde(with = "human_duration")]
    pub signing_keys_reload_interval: Duration,
    /// Development only: accept `http://` callback URLs to loopback, and loopback addresses.
    pub callbacks_allow_http_loopback: bool,
    /// Host names (or IP literals) admitted as callback targets although they resolve to
    /// internal addresses (private, loopback, link-local...); metadata addresses stay refused.
    #[serde(with = "string_list")]
    pub callbacks_allow_hosts: Vec<String>,
    /// Webhook registrations per agent, and per tenant.
    pub callbacks_per_recipient_max: u32,
    pub callbacks_per_tenant_max: u32,
    /// Time limit of one delivery or challenge, connection included.
    #[serde(with = "human_duration")]
    pub callbacks_timeout: Duration,
    /// Failed attempts at one head before it is given up (agents still recover by polling).
    pub callbacks_attempts_max: u32,
    /// Retry delay after the first failure; it doubles per failure up to `callbacks_retry_max`.
    #[serde(with = "human_duration")]
    pub callbacks_retry_base: Duration,
    #[serde(with = "human_duration")]
    pub callbacks_retry_max: Duration,
    /// Deliveries in flight on one node, and taken for one tenant in one pass: the fan-out cap.
    pub callbacks_in_flight_max: u32,
    pub callbacks_fanout_per_tenant_max: u32,
    /// How often each node looks for due deliveries.
    #[serde(with = "human_duration")]
    pub callbacks_poll_interval: Duration,
    /// HTTPS: the PEM certificate chain and its private key (both or neither). The server then
    /// speaks HTTP/2 and HTTP/1.1 over TLS, and re-reads both files when they change (or on
    /// SIGHUP). Without them it serves cleartext HTTP/1.1, and HTTP/2 to clients that know.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Origins of browser apps on another origin allowed to call the API, exactly as the
    /// browser sends them (`https://app.example.com`, `http://127.0.0.1:5173`); empty: none.
    /// A comma-separated list in the environment or a flag.
    #[serde(with = "string_list")]
    pub cors_origins: Vec<String>,
    /// Reverse proxies (CIDRs or addresses, such as `10.0.0.0/8`) whose `Forwarded`,
    /// `X-Forwarded-For` and `X-Forwarded-Proto` are believed for the client's address (the
    /// authentication throttle, logs) and scheme (the stream cookie's `Secure` flag); empty:
    /// none, and those headers are ignored. A comma-separated list in the environment or a flag.
    #[serde(with = "string_list")]
    pub trusted_proxies: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            database_url: "sqlite://./data/agent-inbox.db".into(),
            database_connections_max: 16,
            database_acquire_timeout: Duration::from_secs(2),
            database_statement_timeout: Duration::from_secs(3),
            database_wait_max: None,
            lease_default: Duration::from_secs(120),
            lease_max: Duration::from_secs(3600),
            max_attempts: 10,
            retention: Duration::from_secs(30 * 86_400),
            archive_retention: Duration::from_secs(90 * 86_400),
            long_poll_wait_max: Duration::from_secs(25),
            payload_bytes_limit: 256 * 1024,
            publish_linger: Duration::ZERO,
            publish_batch_max: 64,
            publish_batches_in_flight: 2,
            access_token_ttl: Duration::from_secs(15 * 60),
            refresh_token_ttl: Duration::from_secs(30 * 86_400),
            token_issuer: "agent-inbox".into(),
            tenant_requests_per_second: 2_000,
            tenant_requests_burst: 4_000,
            agent_requests_per_second: 200,
            agent_requests_burst: 400,
            auth_failures_per_minute: 30,
            waiters_per_agent: 8,
            waiters_per_tenant: 2_000,
            scavenge_interval: Duration::from_secs(1),
            scavenge_batch: 500,
            heartbeat_interval: Duration::from_secs(30),
            notify_interval: Duration::from_millis(30),
            signal_gap_grace: Duration::from_secs(10),
            signal_retention: Duration::from_secs(3600),
            stream_ticket_ttl: Duration::from_secs(60),
            sse_retry: Duration::from_secs(3),
            jwks_file: None,
            jwks_issuer: None,
            jwks_audience: None,
            signatures_authority: None,
            signing_keys_reload_interval: Duration::from_secs(30),
            callbacks_allow_http_loopback: false,
            callbacks_allow_hosts: Vec::new(),
            callbacks_per_recipient_max: 5,
            callbacks_per_tenant_max: 1_000,
            callbacks_timeout: Duration::from_secs(5),
            callbacks_attempts_max: 8,
            callbacks_retry_base: Duration::from_secs(1),
            callbacks_retry_max: Duration::from_secs(300),
            callbacks_in_flight_max: 32,
            callbacks_fanout_per_tenant_max: 100,
            callbacks_poll_interval: Duration::from_millis(250),
            tls_cert: None,
            tls_key: None,
            cors_origins: Vec::new(),
            trusted_proxies: Vec::new(),
        }
    }
}

/// A configuration that cannot be used, with what to fix.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

/// The settings whose default is "unset": TOML leaves them out of the defaults' table, so they
/// are named here to be known to the file, the environment and flags.
const OPTIONAL_KEYS: &[&str] = &[
    "database_wait_max",
    "jwks_file",
    "jwks_issuer",
    "jwks_audience",
    "signatures_authority",
    "tls_cert",
    "tls_key",
];

impl Config {
    /// Layers defaults, the TOML file (if any), `AGENT_INBOX_*` variables from `env`, then
    /// `flags` (key, value) pairs, and checks the result.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        flags: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut table = toml::Table::try_from(Config::default()).map_err(|e| ConfigError(e.to_string()))?;
        let mut known: Vec<String> = table.keys().cloned().collect();
        known.extend(OPTIONAL_KEYS.iter().map(|k| k.to_string()));
        known.sort();
        let is_known = |key: &str| known.iter().any(|k| k == key);
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError(format!("cannot read config file {}: {e}", path.display())))?;
            let from_file: toml::Table = text
                .parse()
                .map_err(|e| ConfigError(format!("config file {} is not valid TOML: {e}", path.display())))?;
            for (key, value) in from_file {
                if !is_known(&key) {
                    return Err(ConfigError(format!(
                        "config file {}: unknown key {key:?}; known keys: {}",
                        path.display(),
                        known.join(", ")
                    )));
                }
                table.insert(key, value);
            }
        }
        let env: BTreeMap<String, String> =
            env.into_iter().filter(|(k, _)| k.starts_with(ENV_PREFIX)).collect();
        for key in &known {
            if let Some(value) = env.get(&format!("{ENV_PREFIX}{}", key.to_uppercase())) {
                table.insert(key.clone(), coerce(value));
            }
        }
        for (key, value) in flags {
            if !is_known(&key) {
                return Err(ConfigError(format!(
                    "unknown setting {key:?}; known keys: {}",
                    known.join(", ")
                )));
            }
            table.insert(key, coerce(&value));
        }
        let config: Config = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError(format!("invalid configuration: {}", e.message())))?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), ConfigError> {
        let bad = |what: String| Err(ConfigError(what));
        if !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&self.database_acquire_timeout) {
            return bad("database_acquire_timeout must be between 100ms and 60s".into());
        }
        if !(Duration::from_secs(2)..=Duration::from_secs(300)).contains(&self.database_statement_timeout) {
            return bad("database_statement_timeout must be between 2s and 5m".into());
        }
        crate::proxies::TrustedProxies::parse(&self.trusted_proxies).map_err(ConfigError)?;
        if self.lease_default < Duration::from_secs(1) || self.lease_default > self.lease_max {
            return bad(format!("lease_default must be between 1s and lease_max ({:?})", self.lease_max));
        }
        if self.lease_max > Duration::from_secs(24 * 3600) {
            return bad("lease_max must be at most 24h".into());
        }
        if !(1..=1000).contains(&self.max_attempts) {
            return bad("max_attempts must be between 1 and 1000".into());
        }
        if self.retention < Duration::from_secs(60) {
            return bad("retention must be at least 60s".into());
        }
        if self.archive_retention < Duration::from_secs(3600) {
            return bad("archive_retention must be at least 1h".into());
        }
        if self.long_poll_wait_max > Duration::from_secs(120) {
            return bad("long_poll_wait_max must be at most 120s (proxies cut longer requests)".into());
        }
        if self.publish_linger > Duration::from_millis(1) {
            return bad(
                "publish_linger must be between 0 and 1ms: every publish of a busy node waits it".into()
            );
        }
        if !(1..=500).contains(&self.publish_batch_max) {
            return bad("publish_batch_max must be between 1 and 500".into());
        }
        if !(1..=16).contains(&self.publish_batches_in_flight) {
            return bad("publish_batches_in_flight must be between 1 and 16".into());
        }
        if !(1024..=16 * 1024 * 1024).contains(&self.payload_bytes_limit) {
            return bad("payload_bytes_limit must be between 1024 and 16777216".into());
        }
        if self.access_token_ttl < Duration::from_secs(60)
            || self.access_token_ttl > Duration::from_secs(24 * 3600)
        {
            return bad("access_token_ttl must be between 1m and 24h".into());
        }
        if self.scavenge_interval < Duration::from_millis(100) || !(1..=500).contains(&self.scavenge_batch) {
            return bad(
                "scavenge_interval must be at least 100ms and scavenge_batch between 1 and 500".into()
            );
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&self.heartbeat_interval) {
            return bad("heartbeat_interval must be between 1s and 10m".into());
        }
        if !(Duration::from_millis(5)..=Duration::from_secs(1)).contains(&self.notify_interval) {
            return bad("notify_interval must be between 5ms and 1s".into());
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(300)).contains(&self.signal_gap_grace) {
            return bad("signal_gap_grace must be between 1s and 5m".into());
        }
        if self.signal_retention < Duration::from_secs(60) || self.signal_retention <= self.signal_gap_grace {
            return bad("signal_retention must be at least 1m and longer than signal_gap_grace".into());
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(60)).contains(&self.stream_ticket_ttl) {
            return bad("stream_ticket_ttl must be between 1s and 60s".into());
        }
        if !(Duration::from_millis(100)..=Duration::from_secs(300)).contains(&self.sse_retry) {
            return bad("sse_retry must be between 100ms and 5m".into());
        }
        if !(Duration::from_millis(100)..=Duration::from_secs(3600))
            .contains(&self.signing_keys_reload_interval)
        {
            return bad("signing_keys_reload_interval must be between 100ms and 1h".into());
        }
        if !(1..=100).contains(&self.callbacks_per_recipient_max)
            || !(1..=1_000_000).contains(&self.callbacks_per_tenant_max)
        {
            return bad(
                "callbacks_per_recipient_max must be 1 to 100 and callbacks_per_tenant_max 1 to 1000000"
                    .into(),
            );
        }
        if !(Duration::from_millis(100)..=Duration::from_secs(30)).contains(&self.callbacks_timeout) {
            return bad("callbacks_timeout must be between 100ms and 30s".into());
        }
        if !(1..=100).contains(&self.callbacks_attempts_max) {
            return bad("callbacks_attempts_max must be between 1 and 100".into());
        }
        if self.callbacks_retry_base < Duration::from_millis(10)
            || self.callbacks_retry_max < self.callbacks_retry_base
        {
            return bad(
                "callbacks_retry_base must be at least 10ms and callbacks_retry_max at least as long".into(),
            );
        }
        if !(1..=10_000).contains(&self.callbacks_in_flight_max)
            || !(1..=10_000).contains(&self.callbacks_fanout_per_tenant_max)
        {
            return bad(
                "callbacks_in_flight_max and callbacks_fanout_per_tenant_max must be 1 to 10000".into()
            );
        }
        if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&self.callbacks_poll_interval) {
            return bad("callbacks_poll_interval must be between 10ms and 1m".into());
        }
        if self.tenant_requests_per_second == 0 || self.agent_requests_per_second == 0 {
            return bad("request rates must be at least 1 per second".into());
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return bad("tls_cert and tls_key go together: give both PEM files, or neither".into());
        }
        for origin in &self.cors_origins {
            check_origin(origin).map_err(ConfigError)?;
        }
        Ok(())
    }
}

/// An origin as browsers send it in `Origin`: scheme, host and optional port, nothing more.
fn check_origin(origin: &str) -> Result<(), String> {
    let refuse = |why: &str| {
        Err(format!(
            "cors_origins: {origin:?} {why}; list exact origins such as https://app.example.com or http://127.0.0.1:5173"
        ))
    };
    if origin == "*" {
        return refuse("is a wildcard, which cannot carry credentials");
    }
    let Some((scheme, authority)) = origin.split_once("://") else { return refuse("has no scheme") };
    if scheme != "http" && scheme != "https" {
        return refuse("is not an http or https origin");
    }
    if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
        return refuse("must be scheme://host[:port] with no path, query or trailing slash");
    }
    if authority.chars().any(|c| c.is_ascii_uppercase()) {
        return refuse("must be lower-case, as browsers send it");
    }
    Ok(())
}

/// Environment and flag values arrive as text; numbers and booleans become TOML values so the
/// typed fields accept them.
fn coerce(value: &str) -> toml::Value {
    if let Ok(n) = value.parse::<i64>() {
        return toml::Value::Integer(n);
    }
    match value {
        "true" => toml::Value::Boolean(true),
        "false" => toml::Value::Boolean(false),
        _ => toml::Value::String(value.to_owned()),
    }
}

/// `AGENT_INBOX_*` variables that belong to the clients, the tests or a handler's
/// environment, not to the server: never warned about.
const CLIENT_VARIABLES: &[&str] = &[
    "BENCH_MYSQL_URL",
    "BIN",
    "CONFIG",
    "DELIVERY_ATTEMPT",
    "HOME",
    "INBOX_SEQ",
    "LOG",
    "LOG_JSON",
    "PROFILE",
    "REFRESH_TOKEN",
    "SECRET_STORE",
    "SERVER",
    "STATE",
    "TEST_MYSQL_URL",
    "TOKEN",
    "URL",
];

/// A warning for each `AGENT_INBOX_*` variable that names no setting (a typo is otherwise
/// silently ignored, unlike in the TOML file), with the closest setting's variable.
pub fn unknown_environment(env: impl IntoIterator<Item = (String, String)>) -> Vec<String> {
    let mut known: Vec<String> =
        toml::Table::try_from(Config::default()).map(|t| t.keys().cloned().collect()).unwrap_or_default();
    known.extend(OPTIONAL_KEYS.iter().map(|k| k.to_string()));
    let mut warnings: Vec<String> = env
        .into_iter()
        .filter_map(|(name, _)| {
            let key = name.strip_prefix(ENV_PREFIX)?.to_owned();
            let setting = key.to_lowercase();
            if known.contains(&setting)
                || CLIENT_VARIABLES.contains(&key.as_str())
                || key.starts_with("EVENT_")
            {
                return None;
            }
            let closest = known.iter().min_by_key(|k| edit_distance(k, &setting))?;
            Some(format!(
                "{name} is not a setting and is ignored; did you mean {ENV_PREFIX}{}?",
                closest.to_uppercase()
            ))
        })
        .collect();
    warnings.sort();
    warnings
}

/// Levenshtein distance, for suggesting the setting a misspelt name meant.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// A duration as settings and flags take it: `90s`, `15m`, `30d`, or a bare number of
/// seconds (`90`), the same on the server and in the clients.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if let Ok(seconds) = text.trim().parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    humantime::parse_duration(text.trim()).map_err(|e| {
        format!("{text:?} is not a duration such as 90s, 15m or 30d (or a number of seconds) ({e})")
    })
}

/// `database_url` with any password replaced by `***`, for banners, logs and problems.
pub fn redact_database_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let Some((credentials, host)) = rest.rsplit_once('@') else { return url.to_owned() };
    match credentials.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

/// The password in `database_url`, if it has one, so text that may quote it can be redacted.
pub fn database_password(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let (credentials, _) = rest.rsplit_once('@')?;
    credentials.split_once(':').map(|(_, password)| password).filter(|p| !p.is_empty())
}

/// A list of strings: a TOML array, or comma-separated text from the environment or a flag.
mod string_list {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(value: &[String], serializer: S) -> Result<S::Ok, S::Error> {
        value.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            List(Vec<String>),
            Text(String),
        }
        Ok(match Raw::deserialize(deserializer)? {
            Raw::List(list) => list,
            Raw::Text(text) => {
                text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
            }
        })
    }
}

/// A duration that may be left unset.
mod optional_human_duration {
    use std::time::Duration;

    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<Duration>, serializer: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(value) => super::human_duration::serialize(value, serializer),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
        super::human_duration::deserialize(deserializer).map(Some)
    }
}

mod human_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&humantime::format_duration(*value))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Seconds(u64),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Seconds(seconds) => Ok(Duration::from_secs(seconds)),
            Raw::Text(text) => super::parse_duration(&text).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn unknown_environment_variables_are_warned_with_the_closest_setting() {
        let warnings = unknown_environment(env(&[
            ("AGENT_INBOX_LEASE_DEFALT", "5m"),
            ("AGENT_INBOX_LEASE_DEFAULT", "5m"),
            ("AGENT_INBOX_TRUSTED_PROXIES", "10.0.0.0/8"),
            ("AGENT_INBOX_JWKS_FILE", "/etc/jwks.json"),
            ("AGENT_INBOX_TOKEN", "t"),
            ("AGENT_INBOX_EVENT_ID", "e"),
            ("AGENT_INBOX_TEST_MYSQL_URL", "mysql://"),
            ("AGENT_INBOX_LOG_JSON", "1"),
            ("PATH", "/bin"),
        ]));
        assert_eq!(
            warnings,
            [
                "AGENT_INBOX_LEASE_DEFALT is not a setting and is ignored; did you mean AGENT_INBOX_LEASE_DEFAULT?"
            ]
        );
    }

    #[test]
    fn bare_numbers_are_seconds_in_every_source() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert!(parse_duration("soon").unwrap_err().contains("number of seconds"));
        let dir = std::env::temp_dir().join(format!("agent-inbox-config-seconds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("config.toml");
        std::fs::write(&file, "lease_default = \"90\"\nretention = 3600\n").unwrap();
        let config = Config::load(Some(&file), env(&[("AGENT_INBOX_LEASE_MAX", "7200")]), []).unwrap();
        assert_eq!(config.lease_default, Duration::from_secs(90));
        assert_eq!(config.retention, Duration::from_secs(3600));
        assert_eq!(config.lease_max, Duration::from_secs(7200));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn file_then_environment_then_flags() {
        let dir = std::env::temp_dir().join(format!("agent-inbox-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("config.toml");
        std::fs::write(&file, "listen = \"0.0.0.0:9000\"\nretention = \"7d\"\nlease_default = \"90s\"\n")
            .unwrap();
        let config = Config::load(
            Some(&file),
            env(&[
                ("AGENT_INBOX_LISTEN", "127.0.0.1:7000"),
                ("AGENT_INBOX_MAX_ATTEMPTS", "3"),
                ("HOME", "/x"),
            ]),
            env(&[("lease_default", "15m")]),
        )
        .unwrap();
        assert_eq!(config.listen, "127.0.0.1:7000", "environment beats the file");
        assert_eq!(config.retention, Duration::from_secs(7 * 86_400), "the file beats defaults");
        assert_eq!(config.lease_default, Duration::from_secs(900), "flags beat everything");
        assert_eq!(config.max_attempts, 3);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn mistakes_are_named() {
        let err = Config::load(None, env(&[("AGENT_INBOX_RETENTION", "soon")]), []).unwrap_err();
        assert!(err.to_string().contains("\"soon\" is not a duration"), "{err}");
        let err = Config::load(None, [], env(&[("lease_defualt", "1m")])).unwrap_err();
        assert!(err.to_string().contains("unknown setting \"lease_defualt\""), "{err}");
        let err = Config::load(None, [], env(&[("lease_default", "2h")])).unwrap_err();
        assert!(err.to_string().contains("lease_default must be"), "{err}");
        let err = Config::load(None, [], env(&[("tls_cert", "/x/cert.pem")])).unwrap_err();
        assert!(err.to_string().contains("tls_cert and tls_key go together"), "{err}");
        let err = Config::load(None, [], env(&[("cors_origins", "https://app.example.com/")])).unwrap_err();
        assert!(err.to_string().contains("no path, query or trailing slash"), "{err}");
        let err = Config::load(None, [], env(&[("cors_origins", "*")])).unwrap_err();
        assert!(err.to_string().contains("wildcard"), "{err}");
    }

    #[test]
    fn passwords_are_redacted() {
        let url = "mysql://inbox:s3cr:et@db.internal:3306/agent_inbox";
        assert_eq!(redact_database_url(url), "mysql://inbox:***@db.internal:3306/agent_inbox");
        assert_eq!(database_password(url), Some("s3cr:et"));
        assert_eq!(redact_database_url("mysql://root@127.0.0.1/x"), "mysql://root@127.0.0.1/x");
        assert_eq!(database_password("mysql://root@127.0.0.1/x"), None);
        assert_eq!(redact_database_url("sqlite://./data/agent-inbox.db"), "sqlite://./data/agent-inbox.db");
        let config = Config::load(None, env(&[("AGENT_INBOX_DATABASE_WAIT_MAX", "90s")]), []).unwrap();
        assert_eq!(config.database_wait_max, Some(Duration::from_secs(90)));
        assert_eq!(Config::load(None, [], []).unwrap().database_wait_max, None, "for ever by default");
    }

    #[test]
    fn lists_and_unset_settings_come_from_the_environment_too() {
        let config = Config::load(
            None,
            env(&[
                ("AGENT_INBOX_CORS_ORIGINS", "https://a.example, http://127.0.0.1:5173"),
                ("AGENT_INBOX_JWKS_ISSUER", "https://idp.example"),
                ("AGENT_INBOX_TLS_CERT", "/etc/inbox/cert.pem"),
                ("AGENT_INBOX_TLS_KEY", "/etc/inbox/key.pem"),
            ]),
            [],
        )
        .unwrap();
        assert_eq!(config.cors_origins, ["https://a.example", "http://127.0.0.1:5173"]);
        assert_eq!(config.jwks_issuer.as_deref(), Some("https://idp.example"));
        assert_eq!(config.tls_key.as_deref(), Some(Path::new("/etc/inbox/key.pem")));
        let dir = std::env::temp_dir().join(format!("agent-inbox-config-list-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("config.toml");
        std::fs::write(
            &file,
            "cors_origins = [\"https://b.example\"]\nsignatures_authority = \"inbox.example\"\n",
        )
        .unwrap();
        let config = Config::load(Some(&file), [], []).unwrap();
        assert_eq!(config.cors_origins, ["https://b.example"]);
        assert_eq!(config.signatures_authority.as_deref(), Some("inbox.example"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
