//! The bounds every setting must keep, checked once the layers are merged: a configuration
//! that cannot work stops the start with the setting to fix.

use std::time::Duration;

use inbox_store::DELIVERY_ATTEMPTS_MAX;

use super::{Config, ConfigError};

impl Config {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        let bad = |what: String| Err(ConfigError(what));
        if !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&self.database.acquire_timeout) {
            return bad("database_acquire_timeout must be between 100ms and 60s".into());
        }
        if !(Duration::from_secs(2)..=Duration::from_secs(300)).contains(&self.database.statement_timeout) {
            return bad("database_statement_timeout must be between 2s and 5m".into());
        }
        crate::proxies::TrustedProxies::parse(&self.http.trusted_proxies).map_err(ConfigError)?;
        if self.inbox.lease_default < Duration::from_secs(1)
            || self.inbox.lease_default > self.inbox.lease_max
        {
            return bad(format!(
                "lease_default must be between 1s and lease_max ({:?})",
                self.inbox.lease_max
            ));
        }
        if self.inbox.lease_max > Duration::from_secs(24 * 3600) {
            return bad("lease_max must be at most 24h".into());
        }
        if !(1..=DELIVERY_ATTEMPTS_MAX).contains(&self.inbox.max_attempts) {
            return bad(format!("max_attempts must be between 1 and {DELIVERY_ATTEMPTS_MAX}"));
        }
        if self.inbox.retention < Duration::from_secs(60) {
            return bad("retention must be at least 60s".into());
        }
        if self.inbox.archive_retention < Duration::from_secs(3600) {
            return bad("archive_retention must be at least 1h".into());
        }
        if self.inbox.long_poll_wait_max > Duration::from_secs(120) {
            return bad("long_poll_wait_max must be at most 120s (proxies cut longer requests)".into());
        }
        if self.inbox.publish_linger > Duration::from_millis(1) {
            return bad(
                "publish_linger must be between 0 and 1ms: every publish of a busy node waits it".into()
            );
        }
        if !(1..=500).contains(&self.inbox.publish_batch_max) {
            return bad("publish_batch_max must be between 1 and 500".into());
        }
        if !(1..=500).contains(&self.inbox.publish_tenant_share) {
            return bad("publish_tenant_share must be between 1 and 500".into());
        }
        if !(1..=16).contains(&self.inbox.publish_batches_in_flight) {
            return bad("publish_batches_in_flight must be between 1 and 16".into());
        }
        if !(1024..=16 * 1024 * 1024).contains(&self.inbox.payload_bytes_limit) {
            return bad("payload_bytes_limit must be between 1024 and 16777216".into());
        }
        if self.tokens.access_token_ttl < Duration::from_secs(60)
            || self.tokens.access_token_ttl > Duration::from_secs(24 * 3600)
        {
            return bad("access_token_ttl must be between 1m and 24h".into());
        }
        if inbox_store::TokenAlgorithm::parse(&self.tokens.algorithm).is_none() {
            return bad(format!("token_algorithm is {:?}; use HS256 or EdDSA", self.tokens.algorithm));
        }
        if self.inbox.scavenge_interval < Duration::from_millis(100)
            || !(1..=500).contains(&self.inbox.scavenge_batch)
        {
            return bad(
                "scavenge_interval must be at least 100ms and scavenge_batch between 1 and 500".into()
            );
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&self.sessions.heartbeat_interval) {
            return bad("heartbeat_interval must be between 1s and 10m".into());
        }
        if !(Duration::from_millis(5)..=Duration::from_secs(1)).contains(&self.signals.notify_interval) {
            return bad("notify_interval must be between 5ms and 1s".into());
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(300)).contains(&self.signals.gap_grace) {
            return bad("signal_gap_grace must be between 1s and 5m".into());
        }
        if self.signals.retention < Duration::from_secs(60)
            || self.signals.retention <= self.signals.gap_grace
        {
            return bad("signal_retention must be at least 1m and longer than signal_gap_grace".into());
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(60)).contains(&self.sessions.stream_ticket_ttl) {
            return bad("stream_ticket_ttl must be between 1s and 60s".into());
        }
        if !(Duration::from_millis(100)..=Duration::from_secs(300)).contains(&self.sessions.sse_retry) {
            return bad("sse_retry must be between 100ms and 5m".into());
        }
        if !(Duration::from_millis(100)..=Duration::from_secs(3600))
            .contains(&self.tokens.signing_keys_reload_interval)
        {
            return bad("signing_keys_reload_interval must be between 100ms and 1h".into());
        }
        if !(1..=100).contains(&self.callbacks.per_recipient_max)
            || !(1..=1_000_000).contains(&self.callbacks.per_tenant_max)
        {
            return bad(
                "callbacks_per_recipient_max must be 1 to 100 and callbacks_per_tenant_max 1 to 1000000"
                    .into(),
            );
        }
        if !(Duration::from_millis(100)..=Duration::from_secs(30)).contains(&self.callbacks.timeout) {
            return bad("callbacks_timeout must be between 100ms and 30s".into());
        }
        if !(1..=100).contains(&self.callbacks.attempts_max) {
            return bad("callbacks_attempts_max must be between 1 and 100".into());
        }
        if self.callbacks.retry_base < Duration::from_millis(10)
            || self.callbacks.retry_max < self.callbacks.retry_base
        {
            return bad(
                "callbacks_retry_base must be at least 10ms and callbacks_retry_max at least as long".into(),
            );
        }
        if !(1..=10_000).contains(&self.callbacks.in_flight_max)
            || !(1..=10_000).contains(&self.callbacks.fanout_per_tenant_max)
        {
            return bad(
                "callbacks_in_flight_max and callbacks_fanout_per_tenant_max must be 1 to 10000".into()
            );
        }
        if !(1..=self.callbacks.in_flight_max).contains(&self.callbacks.in_flight_per_origin_max) {
            return bad("callbacks_in_flight_per_origin_max must be 1 to callbacks_in_flight_max".into());
        }
        if self.callbacks.disable_after_failures > 1_000_000
            || self.callbacks.disable_after > Duration::from_secs(90 * 86_400)
        {
            return bad(
                "callbacks_disable_after_failures must be 0 (never) to 1000000 and callbacks_disable_after at most 90 days".into(),
            );
        }
        if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&self.callbacks.poll_interval) {
            return bad("callbacks_poll_interval must be between 10ms and 1m".into());
        }
        if self.limits.tenant_requests_per_second == 0 || self.limits.agent_requests_per_second == 0 {
            return bad("request rates must be at least 1 per second".into());
        }
        if !(1..=1_000_000).contains(&self.limits.streams_max) {
            return bad("streams_max must be between 1 and 1000000".into());
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&self.http.write_stall_timeout) {
            return bad("write_stall_timeout must be between 1s and 10m".into());
        }
        if self.tls.cert.is_some() != self.tls.key.is_some() {
            return bad("tls_cert and tls_key go together: give both PEM files, or neither".into());
        }
        for origin in &self.http.cors_origins {
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
