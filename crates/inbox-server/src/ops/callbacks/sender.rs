//! The callback sender: every outbound request to an agent's callback URL leaves through
//! [`CallbackSender::send`], which is where the SSRF rules hold (see `ops/callbacks.rs`), with
//! the resolver it asks, the node's in-flight limits and the backoff and disabling policies.
//! It holds no node state, so the node's state can hold it.

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use inbox_core::{BackoffPolicy, DisablePolicy, UnixMillis};
use inbox_trust::message_signatures::SigningKey;
use inbox_trust::ssrf::{self, CallbackTarget, Host};
use inbox_trust::webhooks::{OutgoingWebhook, sign_webhook};
use tokio::sync::Semaphore;

use crate::config::Config;

/// Resolves a callback host name to its addresses. The system resolver by default; tests
/// inject answers (including hostile ones) to prove that no answer reaches inside.
pub trait Resolver: Send + Sync + fmt::Debug {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send + 'a>>;
}

/// The operating system's resolver (`getaddrinfo`, through tokio).
#[derive(Debug, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send + 'a>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.map(|a| a.ip()).collect()) })
    }
}

/// A resolver chosen in code rather than in configuration (see [`crate::node::Overrides`]).
#[derive(Clone, Default)]
pub struct ResolverOverride(pub Option<Arc<dyn Resolver>>);

impl ResolverOverride {
    pub fn new(resolver: impl Resolver + 'static) -> Self {
        ResolverOverride(Some(Arc::new(resolver)))
    }
}

impl fmt::Debug for ResolverOverride {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(resolver) => write!(f, "ResolverOverride({resolver:?})"),
            None => f.write_str("ResolverOverride(system)"),
        }
    }
}

impl PartialEq for ResolverOverride {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

/// Why a request to a callback did not get a 2xx answer.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("{0}")]
    Url(#[from] ssrf::UrlRefusal),
    #[error("resolving {host:?} failed: {reason}")]
    Resolve { host: String, reason: String },
    #[error("{0}")]
    RefusedAddress(#[from] ssrf::ResolvedRefusal),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("connection failed: {0}")]
    Connect(String),
    #[error("the receiver answered {status}{}", redirect_note(*.status))]
    Status { status: u16 },
    #[error("signing failed: {0}")]
    Sign(String),
}

fn redirect_note(status: u16) -> &'static str {
    if (300..400).contains(&status) { " (redirects are never followed)" } else { "" }
}

impl SendError {
    /// The HTTP status the receiver answered, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            SendError::Status { status } => Some(*status),
            _ => None,
        }
    }
}

/// One request to send: its body, content type and headers beside the signature's.
#[derive(Debug)]
pub struct Outgoing<'a> {
    pub url: &'a str,
    pub body: Vec<u8>,
    pub content_type: &'static str,
    pub headers: &'a [(&'static str, String)],
}

/// A 2xx answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Largest response body read from a receiver (a challenge answer is tiny).
const RESPONSE_BYTES_LIMIT: usize = 8 * 1024;

/// What outbound callbacks need: the SSRF policy, the resolver, and the limits.
pub struct CallbackSender {
    policy: ssrf::Policy,
    resolver: Arc<dyn Resolver>,
    pub(super) timeout: Duration,
    pub(super) in_flight: Arc<Semaphore>,
    pub(super) origins: super::origins::OriginSlots,
    pub(super) backoff: BackoffPolicy,
    pub(super) disabling: DisablePolicy,
}

impl fmt::Debug for CallbackSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallbackSender")
            .field("policy", &self.policy)
            .field("resolver", &self.resolver)
            .finish()
    }
}

impl CallbackSender {
    pub fn new(config: &Config, resolver: &ResolverOverride) -> Self {
        CallbackSender {
            policy: ssrf::Policy {
                allow_http_loopback_for_development: config.callbacks.allow_http_loopback,
                allowed_internal_hosts: config.callbacks.allow_hosts.clone(),
            },
            resolver: resolver.0.clone().unwrap_or_else(|| Arc::new(SystemResolver)),
            timeout: config.callbacks.timeout,
            in_flight: Arc::new(Semaphore::new(config.callbacks.in_flight_max as usize)),
            origins: super::origins::OriginSlots::new(config.callbacks.in_flight_per_origin_max as usize),
            backoff: BackoffPolicy {
                base_ms: config.callbacks.retry_base.as_millis() as u64,
                ceiling_ms: config.callbacks.retry_max.as_millis() as u64,
            },
            disabling: DisablePolicy {
                failures_min: config.callbacks.disable_after_failures,
                failing_ms_min: config.callbacks.disable_after.as_millis() as u64,
            },
        }
    }

    /// Parses a callback URL under the operator's policy.
    pub fn parse(&self, url: &str) -> Result<CallbackTarget, ssrf::UrlRefusal> {
        ssrf::parse_callback_url(url, &self.policy)
    }

    /// Resolves the target's host and checks every address; returns the one to connect to.
    pub async fn check(&self, target: &CallbackTarget) -> Result<std::net::SocketAddr, SendError> {
        let addresses = match &target.host {
            Host::Ip(address) => vec![*address],
            Host::Domain(name) => {
                let lookup = self.resolver.resolve(name, target.port);
                match tokio::time::timeout(self.timeout, lookup).await {
                    Ok(Ok(addresses)) => addresses,
                    Ok(Err(err)) => {
                        return Err(SendError::Resolve { host: name.clone(), reason: err.to_string() });
                    }
                    Err(_) => return Err(SendError::Timeout(self.timeout)),
                }
            }
        };
        Ok(ssrf::check_resolved(target, &addresses, &self.policy)?)
    }

    /// Sends one signed POST to `url` and returns a 2xx answer. Every SSRF rule is applied
    /// here, on every request, whatever was checked at registration.
    pub async fn send(
        &self,
        url: &str,
        body: Vec<u8>,
        secrets: &[(&str, &[u8])],
        delivery_id: &str,
        now: UnixMillis,
        timeout: Duration,
    ) -> Result<Answer, SendError> {
        let outgoing = Outgoing { url, body, content_type: "application/json", headers: &[] };
        self.send_with(outgoing, secrets, delivery_id, now, timeout).await
    }

    /// How long one request may take (`callbacks_timeout`).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// One of the node's in-flight request permits (`callbacks_in_flight_max`), if one is free:
    /// every outbound request, a callback's or an A2A webhook's, holds one while it runs.
    pub fn try_permit(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.in_flight.clone().try_acquire_owned().ok()
    }

    /// The backoff after `failures` failed attempts in a row, with `jitter` in [0, 1).
    pub fn backoff_ms(&self, failures: u32, jitter: f64) -> u64 {
        self.backoff.delay_ms(failures, jitter)
    }

    /// [`Self::send`] with its own content type and headers (an A2A push notification's
    /// `Authorization` and token), under the same rules and signatures.
    pub async fn send_with(
        &self,
        outgoing: Outgoing<'_>,
        secrets: &[(&str, &[u8])],
        delivery_id: &str,
        now: UnixMillis,
        timeout: Duration,
    ) -> Result<Answer, SendError> {
        let Outgoing { url, body, content_type, headers: extra } = outgoing;
        let target = self.parse(url)?;
        let started = Instant::now();
        let address = self.check(&target).await?;
        let timeout = timeout.saturating_sub(started.elapsed()).max(Duration::from_millis(50));

        let keys = secrets
            .iter()
            .map(|(keyid, secret)| {
                SigningKey::hmac_sha256(secret)
                    .map(|key| (*keyid, key))
                    .map_err(|e| SendError::Sign(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let key_refs: Vec<(&str, &SigningKey)> = keys.iter().map(|(keyid, key)| (*keyid, key)).collect();
        let nonce = hex::encode(inbox_store::random_bytes::<16>());
        let path = target.path_and_query.split('?').next().unwrap_or("/");
        let authority = target.authority();
        let webhook = OutgoingWebhook {
            authority: &authority,
            path,
            body: &body,
            delivery_id,
            timestamp: now.get().div_euclid(1000),
            nonce: &nonce,
        };
        let headers = sign_webhook(&webhook, &key_refs).map_err(|e| SendError::Sign(e.to_string()))?;

        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(timeout)
            .connect_timeout(timeout)
            .pool_max_idle_per_host(0)
            .user_agent(concat!("agent-inbox/", env!("CARGO_PKG_VERSION")));
        if let Host::Domain(name) = &target.host {
            builder = builder.resolve(name, address);
        }
        let client = builder.build().map_err(|e| SendError::Connect(e.to_string()))?;
        let mut request =
            client.post(target.to_string()).header(reqwest::header::CONTENT_TYPE, content_type).body(body);
        for (name, value) in &headers {
            request = request.header(*name, value);
        }
        for (name, value) in extra {
            request = request.header(*name, value.as_str());
        }
        let exchange = async {
            let mut response = request.send().await.map_err(|e| classify(e, timeout))?;
            let status = response.status().as_u16();
            if !response.status().is_success() {
                return Err(SendError::Status { status });
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(|e| classify(e, timeout))? {
                let room = RESPONSE_BYTES_LIMIT.saturating_sub(body.len());
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if room <= chunk.len() {
                    break;
                }
            }
            Ok(Answer { status, body })
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(SendError::Timeout(timeout)),
        }
    }
}

fn classify(err: reqwest::Error, timeout: Duration) -> SendError {
    if err.is_timeout() { SendError::Timeout(timeout) } else { SendError::Connect(error_chain(&err)) }
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}
