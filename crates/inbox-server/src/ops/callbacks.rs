//! Outbound webhooks: the registration challenge and the delivery worker that sends signed
//! thin hints (`inbox.updated`, `head_seq`) to verified callbacks.
//!
//! Every request leaves through [`Webhooks::send`], which is where the SSRF rules hold: the
//! URL was parsed strictly at registration and is parsed again here; the host name is
//! resolved through the [`Resolver`] and **every** address is checked
//! (`inbox_trust::ssrf::check_resolved`); the connection is pinned to the checked address
//! (`reqwest::ClientBuilder::resolve`), so no second lookup can swap in another (DNS
//! rebinding); proxies from the environment are ignored (a proxy would resolve the name
//! itself); redirects are never followed; time and response size are bounded.
//!
//! Deliveries are driven by the database (`inbox_store` callbacks): any node may send a due
//! delivery, exactly one does, and a failing callback is retried with backoff, logged, and
//! finally given up on for that head. The inbox itself is never touched: an agent whose
//! callback fails still finds its events by polling.
//!
//! One receiver cannot slow the others (`dispatch.rs`): a registration has at most one
//! delivery in flight, an origin at most `callbacks_in_flight_per_origin_max` of the node's
//! `callbacks_in_flight_max`, and the worker reads on past the deliveries it defers. A
//! registration that keeps failing is backed off by its failures in a row and, past
//! `callbacks_disable_after_failures` and `callbacks_disable_after`, disabled until an
//! operator re-enables it (`registrations::enable`).

mod dispatch;
mod origins;
pub mod registrations;

pub use dispatch::Dispatcher;

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use inbox_api::time::format_utc;
use inbox_api::{CallbackChallenge, CallbackChallengeAnswer};
use inbox_core::{BackoffPolicy, DisablePolicy, EventId, UnixMillis};
use inbox_store::{CallbackAttempt, CallbackRegistration};
use inbox_trust::message_signatures::SigningKey;
use inbox_trust::ssrf::{self, CallbackTarget, Host};
use inbox_trust::webhooks::{OutgoingWebhook, challenge_string, check_challenge_response, sign_webhook};
use tokio::sync::Semaphore;

use crate::AppState;
use crate::config::Config;

/// Largest response body read from a receiver (a challenge answer is tiny).
const RESPONSE_BYTES_LIMIT: usize = 8 * 1024;
/// How long a challenge stays answerable.
pub const CHALLENGE_TTL: Duration = Duration::from_secs(30);

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

/// A resolver chosen in code rather than in configuration (see [`crate::Overrides`]).
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

/// A 2xx answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// What outbound webhooks need: the SSRF policy, the resolver, and the limits.
pub struct Webhooks {
    policy: ssrf::Policy,
    resolver: Arc<dyn Resolver>,
    timeout: Duration,
    in_flight: Arc<Semaphore>,
    origins: origins::OriginSlots,
    backoff: BackoffPolicy,
    disabling: DisablePolicy,
}

impl fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhooks").field("policy", &self.policy).field("resolver", &self.resolver).finish()
    }
}

impl Webhooks {
    pub fn new(config: &Config, resolver: &ResolverOverride) -> Self {
        Webhooks {
            policy: ssrf::Policy {
                allow_http_loopback_for_development: config.callbacks.allow_http_loopback,
                allowed_internal_hosts: config.callbacks.allow_hosts.clone(),
            },
            resolver: resolver.0.clone().unwrap_or_else(|| Arc::new(SystemResolver)),
            timeout: config.callbacks.timeout,
            in_flight: Arc::new(Semaphore::new(config.callbacks.in_flight_max as usize)),
            origins: origins::OriginSlots::new(config.callbacks.in_flight_per_origin_max as usize),
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
        let mut request = client
            .post(target.to_string())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        for (name, value) in &headers {
            request = request.header(*name, value);
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

/// A fresh delivery id (a UUIDv7, like seed 001's `delivery_id`).
pub fn delivery_id(now: UnixMillis) -> String {
    EventId::new_v7(now, inbox_store::random_bytes::<10>()).to_string()
}

/// The outcome of one challenge.
#[derive(Debug)]
pub struct ChallengeOutcome {
    pub delivery_id: String,
    pub expires_at: UnixMillis,
    /// `Err` carries what the tenant should fix.
    pub result: Result<(), String>,
}

/// Sends a registration challenge and, when the receiver answers it correctly before it
/// expires, marks the registration verified. Every attempt is logged.
async fn challenge(state: &AppState, registration: &CallbackRegistration) -> ChallengeOutcome {
    let webhooks = &state.trust.webhooks;
    let now = state.store.now();
    let delivery_id = delivery_id(now);
    let timestamp = now.get().div_euclid(1000);
    let nonce = hex::encode(inbox_store::random_bytes::<16>());
    let expires_at = now.plus_ms(CHALLENGE_TTL.as_millis() as u64);
    let challenge = challenge_string(&delivery_id, timestamp, &nonce);
    let body = CallbackChallenge {
        signal_type: "callback.challenge".to_owned(),
        registration_id: registration.registration_id.to_string(),
        delivery_id: delivery_id.clone(),
        timestamp,
        nonce,
        expires_at_utc: format_utc(expires_at.get()),
        challenge: challenge.clone(),
    };
    let body = serde_json::to_vec(&body).unwrap_or_default();
    let secrets = [(registration.key_id.as_str(), registration.secret.as_slice())];
    let started = Instant::now();
    let timeout = webhooks.timeout.min(CHALLENGE_TTL);
    let sent = webhooks.send(&registration.callback_url, body, &secrets, &delivery_id, now, timeout).await;
    let answered_at = state.store.now();
    let (result, http_status) = match sent {
        Err(err) => (Err(format!("the challenge could not be delivered: {err}")), err.status()),
        Ok(answer) if answered_at > expires_at => {
            (Err("the challenge was answered after it expired".to_owned()), Some(answer.status))
        }
        Ok(answer) => {
            let answer_ok = serde_json::from_slice::<CallbackChallengeAnswer>(&answer.body).is_ok_and(|a| {
                check_challenge_response(&registration.secret, &challenge, &a.challenge_response)
            });
            if answer_ok {
                (Ok(()), Some(answer.status))
            } else {
                (
                    Err("the receiver did not answer with {\"challenge_response\": base64(HMAC-SHA256(secret, challenge))}"
                        .to_owned()),
                    Some(answer.status),
                )
            }
        }
    };
    let store = &state.store;
    let stored = match &result {
        Ok(()) => store
            .callbacks()
            .mark_verified(&registration.tenant_id, &registration.registration_id)
            .await
            .map(drop),
        Err(error) => {
            store
                .callbacks()
                .record_error(&registration.tenant_id, &registration.registration_id, error)
                .await
        }
    };
    if let Err(err) = stored {
        tracing::warn!(error = %err, registration_id = %registration.registration_id, "recording a challenge failed");
    }
    let attempt = CallbackAttempt {
        delivery_id: delivery_id.clone(),
        registration_id: registration.registration_id.clone(),
        tenant_id: registration.tenant_id.clone(),
        kind: "challenge".to_owned(),
        head_seq: None,
        attempt: 1,
        outcome: if result.is_ok() { "verified" } else { "verification_failed" }.to_owned(),
        http_status,
        error: result.as_ref().err().cloned(),
        duration_ms: started.elapsed().as_millis() as u64,
        created_at: now,
    };
    if let Err(err) = store.callbacks().record_attempt(&attempt).await {
        tracing::warn!(error = %err, "logging a challenge attempt failed");
    }
    let outcome = if result.is_ok() { "verified" } else { "failed" };
    state.metrics.callback_challenges_total().add([outcome.to_owned()], 1);
    ChallengeOutcome { delivery_id, expires_at, result }
}
