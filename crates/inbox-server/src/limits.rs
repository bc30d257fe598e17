//! Per-node limits: request rates per tenant and per agent (token buckets), throttling of
//! failed authentication per client address, caps on concurrent long polls and streams per
//! agent and tenant, and the node's cap on open streams (`streams_max`).
//! Every table here is bounded: idle entries are swept when a table grows past its cap.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use inbox_api::ProblemCode;

use crate::config::Config;
use crate::error::ApiError;

/// Entries kept per table before idle ones are swept.
const TABLE_ENTRIES_MAX: usize = 50_000;
const IDLE_AFTER: Duration = Duration::from_secs(600);

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    refilled: Instant,
}

/// A set of token buckets with one rate and burst.
#[derive(Debug)]
struct Buckets<K> {
    per_second: f64,
    burst: f64,
    table: Mutex<HashMap<K, Bucket>>,
}

impl<K: Hash + Eq + Clone> Buckets<K> {
    fn new(per_second: u32, burst: u32) -> Self {
        Self {
            per_second: f64::from(per_second),
            burst: f64::from(burst.max(per_second)),
            table: Mutex::default(),
        }
    }

    /// Takes one token, or says how many seconds until one is available.
    fn take(&self, key: &K, now: Instant) -> Result<(), u64> {
        let mut table = self.table.lock().expect("limits lock");
        if table.len() >= TABLE_ENTRIES_MAX {
            table.retain(|_, b| now.duration_since(b.refilled) < IDLE_AFTER);
        }
        let bucket = table.entry(key.clone()).or_insert(Bucket { tokens: self.burst, refilled: now });
        let elapsed = now.duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.per_second).min(self.burst);
        bucket.refilled = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - bucket.tokens) / self.per_second).ceil().max(1.0) as u64)
        }
    }
}

#[derive(Debug)]
pub struct Limits {
    tenants: Buckets<String>,
    agents: Buckets<(String, String)>,
    auth_failures: Buckets<IpAddr>,
    waiters_per_agent: u32,
    waiters_per_tenant: u32,
    waiters: Arc<Mutex<HashMap<String, u32>>>,
    streams_max: u32,
    streams: Arc<AtomicU32>,
}

/// Seconds a client refused for the node's capacity is asked to wait before it tries again
/// (its reconnect may reach another node behind the load balancer sooner).
const STREAMS_AT_CAPACITY_RETRY_SECONDS: u64 = 5;

impl Limits {
    pub fn new(config: &Config) -> Self {
        let per_minute = config.limits.auth_failures_per_minute.max(1);
        Self {
            tenants: Buckets::new(
                config.limits.tenant_requests_per_second,
                config.limits.tenant_requests_burst,
            ),
            agents: Buckets::new(config.limits.agent_requests_per_second, config.limits.agent_requests_burst),
            // A bucket refilling per_minute tokens a minute, holding at most per_minute.
            auth_failures: Buckets {
                per_second: f64::from(per_minute) / 60.0,
                burst: f64::from(per_minute),
                table: Mutex::default(),
            },
            waiters_per_agent: config.limits.waiters_per_agent,
            waiters_per_tenant: config.limits.waiters_per_tenant,
            waiters: Arc::default(),
            streams_max: config.limits.streams_max,
            streams: Arc::default(),
        }
    }

    /// Reserves one of the node's `streams_max` stream slots, given back when the guard drops;
    /// past the cap, `503 streams_at_capacity` with `Retry-After`, never a hang.
    pub fn hold_stream(&self) -> Result<StreamSlot, ApiError> {
        let taken = self.streams.fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
            (open < self.streams_max).then_some(open + 1)
        });
        match taken {
            Ok(_) => Ok(StreamSlot { streams: self.streams.clone() }),
            Err(_) => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ProblemCode::StreamsAtCapacity,
                format!(
                    "this node holds its most open streams ({}, streams_max); reconnect after Retry-After, or poll meanwhile",
                    self.streams_max
                ),
            )
            .retry_after(STREAMS_AT_CAPACITY_RETRY_SECONDS)),
        }
    }

    /// Counts one request against the tenant's and the agent's rates.
    pub fn admit(&self, tenant: &str, agent: &str) -> Result<(), ApiError> {
        let now = Instant::now();
        let refuse = |seconds: u64, whose: &str| {
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ProblemCode::RateLimited,
                format!("{whose} is sending requests faster than allowed; retry after {seconds} s"),
            )
            .retry_after(seconds)
        };
        self.agents.take(&(tenant.to_owned(), agent.to_owned()), now).map_err(|s| refuse(s, "this agent"))?;
        self.tenants.take(&tenant.to_owned(), now).map_err(|s| refuse(s, "this tenant"))?;
        Ok(())
    }

    /// Refuses a client address that has failed authentication too often.
    pub fn auth_throttled(&self, addr: IpAddr) -> Result<(), ApiError> {
        let table = self.auth_failures.table.lock().expect("limits lock");
        let Some(bucket) = table.get(&addr) else { return Ok(()) };
        let tokens = (bucket.tokens
            + bucket.refilled.elapsed().as_secs_f64() * self.auth_failures.per_second)
            .min(self.auth_failures.burst);
        if tokens >= 1.0 {
            return Ok(());
        }
        let seconds = ((1.0 - tokens) / self.auth_failures.per_second).ceil().max(1.0) as u64;
        Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            ProblemCode::AuthThrottled,
            format!("too many failed authentications from this address; retry after {seconds} s"),
        )
        .retry_after(seconds))
    }

    pub fn record_auth_failure(&self, addr: IpAddr) {
        let _ = self.auth_failures.take(&addr, Instant::now());
    }

    /// The answer to a failed authentication from `addr`: `refusal` while the address has
    /// failures left (and the failure is counted), else `429 auth_throttled`. Only failures
    /// are throttled, so a valid credential from a throttled address (every client behind one
    /// proxy) still works.
    pub fn refuse_auth(&self, addr: Option<IpAddr>, refusal: ApiError) -> ApiError {
        let Some(addr) = addr else { return refusal };
        match self.auth_throttled(addr) {
            Ok(()) => {
                self.record_auth_failure(addr);
                refusal
            }
            Err(throttled) => throttled,
        }
    }

    /// Reserves a long-poll or stream slot for the agent and its tenant; the slot is given back
    /// when the guard drops.
    pub fn hold_waiter(&self, tenant: &str, agent: &str) -> Result<WaiterGuard, ApiError> {
        let agent_key = format!("a\u{0}{tenant}\u{0}{agent}");
        let tenant_key = format!("t\u{0}{tenant}");
        let mut waiters = self.waiters.lock().expect("limits lock");
        let agent_count = waiters.get(&agent_key).copied().unwrap_or(0);
        let tenant_count = waiters.get(&tenant_key).copied().unwrap_or(0);
        if agent_count >= self.waiters_per_agent || tenant_count >= self.waiters_per_tenant {
            let whose = if agent_count >= self.waiters_per_agent { "this agent" } else { "this tenant" };
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ProblemCode::TooManyWaiters,
                format!("{whose} already holds the most long polls and streams allowed; close one or poll without waiting"),
            )
            .retry_after(1));
        }
        *waiters.entry(agent_key.clone()).or_default() += 1;
        *waiters.entry(tenant_key.clone()).or_default() += 1;
        Ok(WaiterGuard { waiters: self.waiters.clone(), keys: [agent_key, tenant_key] })
    }
}

/// One of the node's open streams, counted until it drops.
#[derive(Debug)]
pub struct StreamSlot {
    streams: Arc<AtomicU32>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A held long-poll or stream slot.
#[derive(Debug)]
pub struct WaiterGuard {
    waiters: Arc<Mutex<HashMap<String, u32>>>,
    keys: [String; 2],
}

impl Drop for WaiterGuard {
    fn drop(&mut self) {
        let mut waiters = self.waiters.lock().expect("limits lock");
        for key in &self.keys {
            if let Some(count) = waiters.get_mut(key) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    waiters.remove(key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_holds_at_most_streams_max_streams() {
        let mut config = Config::default();
        config.limits.streams_max = 2;
        let limits = Limits::new(&config);
        let a = limits.hold_stream().unwrap();
        let _b = limits.hold_stream().unwrap();
        let refused = limits.hold_stream().unwrap_err();
        assert_eq!(
            (refused.status, refused.code),
            (StatusCode::SERVICE_UNAVAILABLE, ProblemCode::StreamsAtCapacity)
        );
        assert_eq!(refused.retry_after_seconds, Some(STREAMS_AT_CAPACITY_RETRY_SECONDS));
        drop(a);
        assert!(limits.hold_stream().is_ok(), "a closed stream gives its slot back");
    }

    #[test]
    fn buckets_allow_the_burst_then_refuse_with_a_wait() {
        let buckets: Buckets<&str> = Buckets::new(2, 3);
        let start = Instant::now();
        for _ in 0..3 {
            assert!(buckets.take(&"t", start).is_ok());
        }
        assert_eq!(buckets.take(&"t", start), Err(1));
        assert!(buckets.take(&"t", start + Duration::from_millis(500)).is_ok(), "refilled at 2 per second");
        assert!(buckets.take(&"other", start).is_ok(), "keys are independent");
    }

    #[test]
    fn waiter_slots_are_capped_and_returned() {
        let mut config = Config::default();
        config.limits.waiters_per_agent = 2;
        config.limits.waiters_per_tenant = 3;
        let limits = Limits::new(&config);
        let a = limits.hold_waiter("t", "a").unwrap();
        let _b = limits.hold_waiter("t", "a").unwrap();
        assert_eq!(limits.hold_waiter("t", "a").unwrap_err().code, "too_many_waiters");
        let _c = limits.hold_waiter("t", "b").unwrap();
        assert_eq!(limits.hold_waiter("t", "c").unwrap_err().code, ProblemCode::TooManyWaiters, "tenant cap");
        drop(a);
        assert!(limits.hold_waiter("t", "c").is_ok());
    }
}
