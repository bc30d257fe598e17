//! The configuration's sections, one per subsystem, each with its defaults (defined here once;
//! the inbox's come from the store's [`StoreConfig`], which enforces them).

use std::path::PathBuf;
use std::time::Duration;

use inbox_store::StoreConfig;
use serde::{Deserialize, Serialize};

/// The database: where it is, its pool, and how long to wait for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `sqlite://path` (the default, created on first start) or `mysql://user:pass@host/db`.
    pub url: String,
    pub connections_max: u32,
    /// How long a request waits for a database connection before it is answered
    /// `503 database_unavailable` with `Retry-After`, instead of hanging while the database is away.
    #[serde(with = "super::forms::human_duration")]
    pub acquire_timeout: Duration,
    /// How long one MySQL statement may go unanswered (a paused or partitioned server) before
    /// the request is answered `503 database_unavailable`. Lock waits end sooner, so busy rows
    /// are retried, not refused.
    #[serde(with = "super::forms::human_duration")]
    pub statement_timeout: Duration,
    /// How long `serve` keeps trying to reach (and migrate) the database at start before it
    /// exits; unset: for ever. Meanwhile it listens, `/healthz` answers 200 and `/readyz` 503.
    #[serde(with = "super::forms::optional_human_duration", skip_serializing_if = "Option::is_none")]
    pub wait_max: Option<Duration>,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: "sqlite://./data/agent-inbox.db".into(),
            connections_max: 16,
            acquire_timeout: Duration::from_secs(2),
            statement_timeout: Duration::from_secs(3),
            wait_max: None,
        }
    }
}

/// The HTTP listener and who may call it from where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Address to listen on.
    pub listen: String,
    /// Origins of browser apps on another origin allowed to call the API, exactly as the
    /// browser sends them (`https://app.example.com`, `http://127.0.0.1:5173`); empty: none.
    /// A comma-separated list in the environment or a flag.
    #[serde(with = "super::forms::string_list")]
    pub cors_origins: Vec<String>,
    /// Reverse proxies (CIDRs or addresses, such as `10.0.0.0/8`) whose `Forwarded`,
    /// `X-Forwarded-For` and `X-Forwarded-Proto` are believed for the client's address (the
    /// authentication throttle, logs) and scheme (the stream cookie's `Secure` flag); empty:
    /// none, and those headers are ignored. A comma-separated list in the environment or a flag.
    #[serde(with = "super::forms::string_list")]
    pub trusted_proxies: Vec<String>,
    /// How long a connection may stay unwritable (its client reads nothing) before it is
    /// closed; also the TCP user timeout, so a peer that vanished (half-open TCP) is found
    /// within one heartbeat interval plus this.
    #[serde(with = "super::forms::human_duration")]
    pub write_stall_timeout: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            cors_origins: Vec::new(),
            trusted_proxies: Vec::new(),
            write_stall_timeout: Duration::from_secs(30),
        }
    }
}

/// Native HTTPS.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[derive(Default)]
pub struct TlsConfig {
    /// HTTPS: the PEM certificate chain and its private key (both or neither). The server then
    /// speaks HTTP/2 and HTTP/1.1 over TLS, and re-reads both files when they change (or on
    /// SIGHUP). Without them it serves cleartext HTTP/1.1, and HTTP/2 to clients that know.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// The inbox: leases, attempts, retention, payloads, long polls, group commit and the scavenger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InboxConfig {
    #[serde(with = "super::forms::human_duration")]
    pub lease_default: Duration,
    #[serde(with = "super::forms::human_duration")]
    pub lease_max: Duration,
    /// Delivery attempts before an event is dead-lettered.
    pub max_attempts: u32,
    /// How long acknowledged and other terminal events stay before archiving.
    #[serde(with = "super::forms::human_duration")]
    pub retention: Duration,
    /// How long archived events stay in the archive table before the scavenger deletes them
    /// (`agent-inbox archive export` moves them to a file first).
    #[serde(with = "super::forms::human_duration")]
    pub archive_retention: Duration,
    /// Longest `wait_seconds` a long poll may ask for.
    #[serde(with = "super::forms::human_duration")]
    pub long_poll_wait_max: Duration,
    /// Largest inline JSON payload of an event, in bytes.
    pub payload_bytes_limit: usize,
    /// Group commit: how long a busy node waits for more publishes before it commits a batch
    /// (0 to 1 ms; 0 commits what arrived during the previous commit, never waiting), and the
    /// most publishes one batch takes. An idle node never waits.
    #[serde(with = "super::forms::human_duration")]
    pub publish_linger: Duration,
    pub publish_batch_max: u32,
    /// Batches one node commits at once: with two, one batch's fsync overlaps the next one's
    /// statements (heads are locked in one order, so batches never deadlock).
    pub publish_batches_in_flight: u32,
    /// Fair shares of the batcher (issue 31): while publishes of more than one tenant wait, one
    /// batch takes at most this many of any one tenant's, the rest going in the next batch, so a
    /// tenant's flood cannot make every other tenant's publish wait for a batch of its own. A
    /// tenant alone still fills batches up to `publish_batch_max`.
    pub publish_tenant_share: u32,
    /// How often the scavenger runs, and how many rows one pass handles per kind of work.
    #[serde(with = "super::forms::human_duration")]
    pub scavenge_interval: Duration,
    pub scavenge_batch: u32,
    /// Record each event's history (claims, acknowledgements, releases, lease expiries,
    /// dead-lettering, quarantines, requeues) with its row, for operators' per-event view.
    /// On by default; off saves the appended text per transition.
    pub history: bool,
}

impl Default for InboxConfig {
    /// The store's defaults, where the store enforces the setting: defined once, there.
    fn default() -> Self {
        let store = StoreConfig::default();
        Self {
            lease_default: Duration::from_millis(store.lease_ms_default),
            lease_max: Duration::from_millis(store.lease_ms_max),
            max_attempts: store.max_attempts_default,
            retention: Duration::from_millis(store.retention_ms),
            archive_retention: Duration::from_millis(store.archive_retention_ms),
            long_poll_wait_max: Duration::from_secs(25),
            payload_bytes_limit: store.payload_bytes_limit,
            publish_linger: Duration::ZERO,
            publish_batch_max: 64,
            publish_batches_in_flight: 2,
            publish_tenant_share: 8,
            scavenge_interval: Duration::from_secs(1),
            scavenge_batch: 500,
            history: store.record_history,
        }
    }
}

/// Agent sessions and the streams that keep them alive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionsConfig {
    /// Interval between stream heartbeats and the session heartbeat agents are told to use.
    #[serde(with = "super::forms::human_duration")]
    pub heartbeat_interval: Duration,
    /// Life of a single-use stream ticket (at most 60 s).
    #[serde(with = "super::forms::human_duration")]
    pub stream_ticket_ttl: Duration,
    /// The reconnection delay SSE streams advise browsers to use (`retry:`).
    #[serde(with = "super::forms::human_duration")]
    pub sse_retry: Duration,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval: Duration::from_secs(30),
            stream_ticket_ttl: Duration::from_secs(60),
            sse_retry: Duration::from_secs(3),
        }
    }
}

/// Access and refresh tokens, and an external identity provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TokensConfig {
    #[serde(with = "super::forms::human_duration")]
    pub access_token_ttl: Duration,
    #[serde(with = "super::forms::human_duration")]
    pub refresh_token_ttl: Duration,
    /// Issuer written into, and required of, the service's own tokens.
    pub issuer: String,
    /// External identity provider: a JWKS file of public keys whose tokens are also accepted.
    pub jwks_file: Option<PathBuf>,
    /// Issuer and audience required of external tokens (when set).
    pub jwks_issuer: Option<String>,
    pub jwks_audience: Option<String>,
    /// The algorithm of the token signing keys this service makes (the first key, and each
    /// `agent-inbox keys rotate`): `HS256` (the default; only the service can verify) or `EdDSA`
    /// (Ed25519: anyone can verify with the public keys at `/.well-known/jwks.json`). A key
    /// keeps its algorithm for life, so a change takes effect at the next rotation.
    pub algorithm: String,
    /// How often every node re-reads the token signing keys, so a rotation (`agent-inbox keys
    /// rotate`) takes effect without a restart. Retirement is exact regardless: a node re-reads
    /// keys it has held longer than the shortest overlap (1 s) before verifying with them.
    #[serde(with = "super::forms::human_duration")]
    pub signing_keys_reload_interval: Duration,
}

impl Default for TokensConfig {
    fn default() -> Self {
        Self {
            access_token_ttl: Duration::from_secs(15 * 60),
            refresh_token_ttl: Duration::from_secs(30 * 86_400),
            issuer: "agent-inbox".into(),
            jwks_file: None,
            jwks_issuer: None,
            jwks_audience: None,
            algorithm: "HS256".into(),
            signing_keys_reload_interval: Duration::from_secs(30),
        }
    }
}

impl TokensConfig {
    /// [`Self::algorithm`], checked when the configuration loads.
    pub fn algorithm(&self) -> inbox_store::TokenAlgorithm {
        inbox_store::TokenAlgorithm::parse(&self.algorithm).unwrap_or_default()
    }
}

/// The key file that seals the database's secrets (token keys, callback secrets, agents'
/// hmac keys), kept outside the database (see `secrets_key.rs`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecretsConfig {
    /// The secrets key file (`agent-inbox keys new-secrets-key` makes one). Unset: the systemd
    /// credential `agent-inbox-secrets-key`, else for SQLite `<database file>.secrets-key`, made
    /// at the first start; MySQL/MariaDB refuse to start without one.
    pub key_file: Option<PathBuf>,
}

/// Inbound RFC 9421 request signatures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[derive(Default)]
pub struct SignaturesConfig {
    /// The `@authority` signed requests are checked against, when a proxy in front rewrites
    /// `Host` (such as `inbox.example.com`); by default the request's `Host`.
    pub authority: Option<String>,
}

/// Outbound callbacks (webhooks): targets, limits, retries and the dispatcher.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CallbacksConfig {
    /// Development only: accept `http://` callback URLs to loopback, and loopback addresses.
    pub allow_http_loopback: bool,
    /// Host names (or IP literals) admitted as callback targets although they resolve to
    /// internal addresses (private, loopback, link-local...); metadata addresses stay refused.
    #[serde(with = "super::forms::string_list")]
    pub allow_hosts: Vec<String>,
    /// Webhook registrations per agent, and per tenant.
    pub per_recipient_max: u32,
    pub per_tenant_max: u32,
    /// Time limit of one delivery or challenge, connection included.
    #[serde(with = "super::forms::human_duration")]
    pub timeout: Duration,
    /// Failed attempts at one head before it is given up (agents still recover by polling).
    pub attempts_max: u32,
    /// Retry delay after the first failure; it doubles per failure up to `callbacks_retry_max`.
    #[serde(with = "super::forms::human_duration")]
    pub retry_base: Duration,
    #[serde(with = "super::forms::human_duration")]
    pub retry_max: Duration,
    /// Deliveries in flight on one node, and taken for one tenant in one pass: the fan-out cap.
    pub in_flight_max: u32,
    pub fanout_per_tenant_max: u32,
    /// Deliveries in flight on one node to one origin (scheme, host and port): a receiver that
    /// stops answering holds at most this many of `callbacks_in_flight_max`, whatever number of
    /// registrations point at it (one registration never has more than one in flight).
    pub in_flight_per_origin_max: u32,
    /// A registration whose deliveries have failed this many times in a row (across heads)
    /// *and* for at least `callbacks_disable_after` is disabled until an operator re-enables
    /// it; 0 never disables.
    pub disable_after_failures: u32,
    #[serde(with = "super::forms::human_duration")]
    pub disable_after: Duration,
    /// How often each node looks for due deliveries.
    #[serde(with = "super::forms::human_duration")]
    pub poll_interval: Duration,
}

impl Default for CallbacksConfig {
    fn default() -> Self {
        Self {
            allow_http_loopback: false,
            allow_hosts: Vec::new(),
            per_recipient_max: 5,
            per_tenant_max: 1_000,
            timeout: Duration::from_secs(5),
            attempts_max: 8,
            retry_base: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
            in_flight_max: 32,
            fanout_per_tenant_max: 100,
            in_flight_per_origin_max: 4,
            disable_after_failures: 50,
            disable_after: Duration::from_secs(24 * 3600),
            poll_interval: Duration::from_millis(250),
        }
    }
}

/// The notifier that tails `outbox_signal`, and the signals' retention.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SignalsConfig {
    /// How often each node's notifier reads new commits from `outbox_signal`: the worst-case
    /// delay a hint for a publish made on another node adds.
    #[serde(with = "super::forms::human_duration")]
    pub notify_interval: Duration,
    /// How long the notifier keeps asking for an `outbox_id` it skipped (one allocated but not
    /// yet committed when a higher one was read) before deciding it was rolled back.
    #[serde(with = "super::forms::human_duration")]
    pub gap_grace: Duration,
    /// How long `outbox_signal` rows are kept before the scavenger deletes them.
    #[serde(with = "super::forms::human_duration")]
    pub retention: Duration,
}

impl Default for SignalsConfig {
    fn default() -> Self {
        Self {
            notify_interval: Duration::from_millis(30),
            gap_grace: Duration::from_secs(10),
            retention: Duration::from_secs(3600),
        }
    }
}

/// Per-node request rates, authentication throttling and waiter caps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
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
    /// Open SSE and WebSocket streams this node holds at most; past it a new stream is
    /// answered `503 streams_at_capacity` with `Retry-After` (another node, or later). Each
    /// needs a file descriptor: `serve` raises its open-files limit and warns when it is lower.
    pub streams_max: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            tenant_requests_per_second: 2_000,
            tenant_requests_burst: 4_000,
            agent_requests_per_second: 200,
            agent_requests_burst: 400,
            auth_failures_per_minute: 30,
            waiters_per_agent: 8,
            waiters_per_tenant: 2_000,
            streams_max: 10_000,
        }
    }
}
