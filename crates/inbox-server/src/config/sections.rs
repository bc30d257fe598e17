//! Every setting, declared once: its section, key, type, default, flat name, flag, bounds and
//! help (the first paragraph of its doc comment). [`settings!`] makes the section structs,
//! their defaults and [`SETTINGS`] from these lines; the inbox's defaults are the store's
//! [`StoreConfig`], which enforces them.

use std::path::PathBuf;
use std::time::Duration;

use inbox_store::{DELIVERY_ATTEMPTS_MAX, StoreConfig};

use super::check;
use super::forms::Form;
use super::setting::Bound::{Above, AtLeast, AtMost, Rule, With};
use super::setting::{between, count, days, ms, secs, setting, settings};

settings! {
    /// The database: where it is, its pool, and how long to wait for it.
    [database] DatabaseConfig {
        /// The database: sqlite://path (created on first start) or
        /// mysql://user:password@host:port/database.
        url: String = "sqlite://./data/agent-inbox.db".into(), flat: "database_url", form: Form::Url,
            flag: true;
        /// Connections in the database pool of this node.
        connections_max: u32 = 16, flat: "database_connections_max";
        /// How long a request waits for a database connection before it is answered
        /// `503 database_unavailable` with `Retry-After`.
        ///
        /// So a request does not hang while the database is away.
        acquire_timeout: Duration = Duration::from_secs(2), flat: "database_acquire_timeout",
            bounds: &between(ms(100), secs(60));
        /// How long one MySQL statement may go unanswered (a paused or partitioned server)
        /// before the request is answered `503 database_unavailable`.
        ///
        /// Lock waits end sooner, so busy rows are retried, not refused.
        statement_timeout: Duration = Duration::from_secs(3), flat: "database_statement_timeout",
            bounds: &between(secs(2), secs(300));
        /// How long `serve` keeps trying to reach (and migrate) the database at start before it
        /// exits; unset: for ever.
        ///
        /// Meanwhile it listens, `/healthz` answers 200 and `/readyz` 503.
        wait_max: Option<Duration> = None, flat: "database_wait_max";
    }

    /// The HTTP listener and who may call it from where.
    [http] HttpConfig {
        /// Address to listen on.
        listen: String = "127.0.0.1:8080".into(), form: Form::Address, flag: true;
        /// Origins of browser apps on another origin allowed to call the API, such as
        /// https://app.example.com,http://127.0.0.1:5173.
        ///
        /// Exactly as the browser sends them; empty: none. A comma-separated list in the
        /// environment or a flag.
        cors_origins: Vec<String> = Vec::new(), flag: true,
            bounds: &[Rule("exact origins, scheme://host[:port]", check::cors_origins)];
        /// Reverse proxies whose `Forwarded` / `X-Forwarded-*` headers are believed: CIDRs or
        /// addresses, such as 10.0.0.0/8,::1.
        ///
        /// Believed for the client's address (the authentication throttle, logs) and scheme
        /// (the stream cookie's `Secure` flag); empty: none, and those headers are ignored. A
        /// comma-separated list in the environment or a flag.
        trusted_proxies: Vec<String> = Vec::new(), flag: true,
            bounds: &[Rule("CIDRs or IP addresses", check::trusted_proxies)];
        /// How long a connection may stay unwritable (its client reads nothing) before it is
        /// closed.
        ///
        /// Also the TCP user timeout, so a peer that vanished (half-open TCP) is found within
        /// one heartbeat interval plus this.
        write_stall_timeout: Duration = Duration::from_secs(30), bounds: &between(secs(1), secs(600));
    }

    /// Native HTTPS.
    [tls] TlsConfig {
        /// HTTPS: the PEM certificate chain (with `tls_key`), re-read when the file changes or on
        /// SIGHUP.
        ///
        /// The server then speaks HTTP/2 and HTTP/1.1 over TLS. Without it and its key it
        /// serves cleartext HTTP/1.1, and HTTP/2 to clients that know.
        cert: Option<PathBuf> = None, flat: "tls_cert", flag: true, bounds: &[With("tls_key")],
            why: "give both PEM files, or neither";
        /// HTTPS: the PEM private key of `tls_cert`.
        key: Option<PathBuf> = None, flat: "tls_key", flag: true, bounds: &[With("tls_cert")],
            why: "give both PEM files, or neither";
    }

    /// The inbox: leases, attempts, retention, payloads, long polls, group commit and the scavenger.
    [inbox] InboxConfig {
        /// Lease length of a claim that asks for none, such as 120s.
        lease_default: Duration = Duration::from_millis(store().lease_ms_default), flag: true,
            bounds: &[AtLeast(secs(1)), AtMost(setting("lease_max"))];
        /// Longest lease a claim or heartbeat may ask for, such as 1h.
        lease_max: Duration = Duration::from_millis(store().lease_ms_max), flag: true,
            bounds: &[AtMost(days(1))];
        /// Delivery attempts before an event is dead-lettered.
        max_attempts: u32 = store().max_attempts_default, flag: true,
            bounds: &between(count(1), count(DELIVERY_ATTEMPTS_MAX as u64));
        /// How long acknowledged and other terminal events stay before archiving, such as 30d.
        retention: Duration = Duration::from_millis(store().retention_ms), flag: true,
            bounds: &[AtLeast(secs(60))];
        /// How long archived events stay in the archive table before the scavenger deletes them.
        ///
        /// `agent-inbox archive export` moves them to a file first.
        archive_retention: Duration = Duration::from_millis(store().archive_retention_ms),
            bounds: &[AtLeast(secs(3_600))];
        /// Longest `wait_seconds` a long poll may ask for, such as 25s.
        long_poll_wait_max: Duration = Duration::from_secs(25), flag: true, bounds: &[AtMost(secs(120))],
            why: "proxies cut longer requests";
        /// How often a waiting long poll re-reads the database when no hint arrives, such as 5s.
        ///
        /// Hints reach it within the notifier's interval, so this only bounds how late a long
        /// poll learns of a commit the notifier missed (a gap it gave up on, a database stall).
        long_poll_recheck: Duration = Duration::from_secs(5), bounds: &between(secs(1), secs(60));
        /// Largest inline JSON payload of an event, in bytes.
        payload_bytes_limit: usize = store().payload_bytes_limit, form: Form::Bytes, flag: true,
            bounds: &between(count(1_024), count(16 * 1_024 * 1_024));
        /// Group commit: how long a busy node waits for more publishes before it commits a batch.
        ///
        /// 0 commits what arrived during the previous commit, never waiting. An idle node never
        /// waits.
        publish_linger: Duration = Duration::ZERO, bounds: &[AtMost(ms(1))],
            why: "every publish of a busy node waits it";
        /// Group commit: the most publishes one batch takes.
        publish_batch_max: u32 = 64, bounds: &between(count(1), count(500));
        /// Batches one node commits at once.
        ///
        /// With two, one batch's fsync overlaps the next one's statements (heads are locked in
        /// one order, so batches never deadlock).
        publish_batches_in_flight: u32 = 2, bounds: &between(count(1), count(16));
        /// The most publishes of any one tenant a batch takes while other tenants' publishes wait.
        ///
        /// Fair shares of the batcher (issue 31): the rest go in the next batch, so a tenant's
        /// flood cannot make every other tenant's publish wait for a batch of its own. A tenant
        /// alone still fills batches up to `publish_batch_max`.
        publish_tenant_share: u32 = 8, bounds: &between(count(1), count(500));
        /// How often the scavenger runs (leases, expiry, retention, silent sessions, old signals).
        scavenge_interval: Duration = Duration::from_secs(1), bounds: &[AtLeast(ms(100))];
        /// Rows one scavenger pass handles per kind of work.
        scavenge_batch: u32 = 500, bounds: &between(count(1), count(500));
        /// Record each event's history (claims, acknowledgements, releases, quarantines, ...)
        /// for operators.
        ///
        /// Lease expiries, dead-lettering and requeues too, kept with the event's row for the
        /// operators' per-event view. Off saves the appended text per transition.
        history: bool = store().record_history, flag: true;
    }

    /// Agent sessions and the streams that keep them alive.
    [sessions] SessionsConfig {
        /// Interval between stream heartbeats, and the session heartbeat agents are told to use.
        heartbeat_interval: Duration = Duration::from_secs(30), bounds: &between(secs(1), secs(600));
        /// Life of a single-use stream ticket.
        stream_ticket_ttl: Duration = Duration::from_secs(60), bounds: &between(secs(1), secs(60));
        /// The reconnection delay SSE streams advise browsers to use (`retry:`).
        sse_retry: Duration = Duration::from_secs(3), bounds: &between(ms(100), secs(300));
    }

    /// Access and refresh tokens, and an external identity provider.
    [tokens] TokensConfig {
        /// Life of an access token.
        access_token_ttl: Duration = Duration::from_secs(15 * 60), bounds: &between(secs(60), days(1));
        /// Life of a refresh token (each use rotates it).
        refresh_token_ttl: Duration = Duration::from_secs(30 * 86_400);
        /// Issuer written into, and required of, the service's own tokens.
        issuer: String = "agent-inbox".into(), flat: "token_issuer";
        /// External identity provider: a JWKS file of public keys whose tokens are also accepted.
        jwks_file: Option<PathBuf> = None;
        /// Issuer required of external tokens, when set.
        jwks_issuer: Option<String> = None;
        /// Audience required of external tokens, when set.
        jwks_audience: Option<String> = None;
        /// The algorithm of the token signing keys this service makes: HS256 (only the service
        /// can verify) or EdDSA (anyone can, with `/.well-known/jwks.json`).
        ///
        /// For the first key, and each `agent-inbox keys rotate`. A key keeps its algorithm for
        /// life, so a change takes effect at the next rotation.
        algorithm: String = "HS256".into(), flat: "token_algorithm",
            bounds: &[Rule("HS256 or EdDSA", check::token_algorithm)];
        /// How often every node re-reads the token signing keys, so a rotation takes effect
        /// without a restart.
        ///
        /// Retirement is exact regardless: a node re-reads keys it has held longer than the
        /// shortest overlap (1 s) before verifying with them.
        signing_keys_reload_interval: Duration = Duration::from_secs(30),
            bounds: &between(ms(100), secs(3_600));
    }

    /// The key file that seals the database's secrets (token keys, callback secrets, agents'
    /// hmac keys), kept outside the database (see `secrets_key.rs`).
    [secrets] SecretsConfig {
        /// The secrets key file that seals the database's secrets (`agent-inbox keys
        /// new-secrets-key > FILE` makes one).
        ///
        /// Unset: the systemd credential `agent-inbox-secrets-key`, else for SQLite
        /// `<database file>.secrets-key`, made at the first start; MySQL/MariaDB refuse to start
        /// without one.
        key_file: Option<PathBuf> = None, flat: "secrets_key_file", flag: true;
    }

    /// Inbound RFC 9421 request signatures.
    [signatures] SignaturesConfig {
        /// The `@authority` signed requests are checked against, when a proxy in front rewrites
        /// `Host`, such as inbox.example.com; unset: the request's `Host`.
        authority: Option<String> = None, flat: "signatures_authority";
    }

    /// Outbound callbacks (webhooks): targets, limits, retries and the dispatcher.
    [callbacks] CallbacksConfig {
        /// Development only: accept `http://` callback URLs to loopback, and loopback addresses.
        allow_http_loopback: bool = false, flat: "callbacks_allow_http_loopback";
        /// Host names (or IP literals) admitted as callback targets although they resolve to
        /// internal addresses.
        ///
        /// Private, loopback, link-local and the like; metadata addresses stay refused.
        allow_hosts: Vec<String> = Vec::new(), flat: "callbacks_allow_hosts";
        /// Webhook registrations per agent.
        per_recipient_max: u32 = 5, flat: "callbacks_per_recipient_max",
            bounds: &between(count(1), count(100));
        /// Webhook registrations per tenant.
        per_tenant_max: u32 = 1_000, flat: "callbacks_per_tenant_max",
            bounds: &between(count(1), count(1_000_000));
        /// Time limit of one delivery or challenge, connection included.
        timeout: Duration = Duration::from_secs(5), flat: "callbacks_timeout",
            bounds: &between(ms(100), secs(30));
        /// Failed attempts at one head before it is given up (agents still recover by polling).
        attempts_max: u32 = 8, flat: "callbacks_attempts_max", bounds: &between(count(1), count(100));
        /// Retry delay after the first failure; it doubles per failure up to `callbacks_retry_max`.
        retry_base: Duration = Duration::from_secs(1), flat: "callbacks_retry_base",
            bounds: &[AtLeast(ms(10))];
        /// Longest retry delay.
        retry_max: Duration = Duration::from_secs(300), flat: "callbacks_retry_max",
            bounds: &[AtLeast(setting("callbacks_retry_base"))];
        /// Deliveries in flight on one node.
        in_flight_max: u32 = 32, flat: "callbacks_in_flight_max", bounds: &between(count(1), count(10_000));
        /// Deliveries taken for one tenant in one pass: the fan-out cap.
        fanout_per_tenant_max: u32 = 100, flat: "callbacks_fanout_per_tenant_max",
            bounds: &between(count(1), count(10_000));
        /// Deliveries in flight on one node to one origin (scheme, host and port).
        ///
        /// A receiver that stops answering holds at most this many of
        /// `callbacks_in_flight_max`, whatever number of registrations point at it (one
        /// registration never has more than one in flight).
        in_flight_per_origin_max: u32 = 4, flat: "callbacks_in_flight_per_origin_max",
            bounds: &between(count(1), setting("callbacks_in_flight_max"));
        /// Failures in a row (across heads) that, lasting `callbacks_disable_after`, disable a
        /// registration until an operator re-enables it; 0 never disables.
        disable_after_failures: u32 = 50, flat: "callbacks_disable_after_failures",
            bounds: &[AtMost(count(1_000_000))];
        /// How long the failures in a row of `callbacks_disable_after_failures` must have lasted.
        disable_after: Duration = Duration::from_secs(24 * 3_600), flat: "callbacks_disable_after",
            bounds: &[AtMost(days(90))];
        /// How often each node looks for due deliveries.
        poll_interval: Duration = Duration::from_millis(250), flat: "callbacks_poll_interval",
            bounds: &between(ms(10), secs(60));
    }

    /// The notifier that tails `outbox_signal`, and the signals' retention.
    [signals] SignalsConfig {
        /// How often each node's notifier reads new commits from `outbox_signal`.
        ///
        /// The worst-case delay a hint for a publish made on another node adds.
        notify_interval: Duration = Duration::from_millis(30), bounds: &between(ms(5), secs(1));
        /// How long the notifier keeps asking for an `outbox_id` it skipped before deciding it
        /// was rolled back.
        ///
        /// An id skipped is one allocated but not yet committed when a higher one was read.
        gap_grace: Duration = Duration::from_secs(10), flat: "signal_gap_grace",
            bounds: &between(secs(1), secs(300));
        /// How long `outbox_signal` rows are kept before the scavenger deletes them.
        retention: Duration = Duration::from_secs(3_600), flat: "signal_retention",
            bounds: &[AtLeast(secs(60)), Above(setting("signal_gap_grace"))];
    }

    /// Per-node request rates, authentication throttling and waiter caps.
    [limits] LimitsConfig {
        /// Requests per second each tenant may make, sustained.
        tenant_requests_per_second: u32 = 2_000, bounds: &[AtLeast(count(1))];
        /// Requests each tenant may make in a burst.
        tenant_requests_burst: u32 = 4_000;
        /// Requests per second each agent (token subject) may make, sustained.
        agent_requests_per_second: u32 = 200, bounds: &[AtLeast(count(1))];
        /// Requests each agent may make in a burst.
        agent_requests_burst: u32 = 400;
        /// Failed authentications per client address per minute before it is throttled.
        auth_failures_per_minute: u32 = 30;
        /// Concurrent long polls and streams one agent may hold open.
        waiters_per_agent: u32 = 8;
        /// Concurrent long polls and streams one tenant may hold open.
        waiters_per_tenant: u32 = 2_000;
        /// Open SSE and WebSocket streams this node holds at most; past it a new stream is
        /// answered `503 streams_at_capacity` with `Retry-After`.
        ///
        /// Each needs a file descriptor: `serve` raises its open-files limit and warns when it
        /// is lower.
        streams_max: u32 = 10_000, bounds: &between(count(1), count(1_000_000));
    }
}

/// The store's defaults, where the store enforces the setting: defined once, there.
fn store() -> StoreConfig {
    StoreConfig::default()
}

impl TokensConfig {
    /// [`Self::algorithm`], checked when the configuration loads.
    pub fn algorithm(&self) -> inbox_store::TokenAlgorithm {
        inbox_store::TokenAlgorithm::parse(&self.algorithm).unwrap_or_default()
    }
}
