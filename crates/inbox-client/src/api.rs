//! The service's HTTP API as typed calls: one method per endpoint the agent uses, bearer
//! authentication with one retry after a refresh on 401, RFC 9421 signatures on the critical
//! calls when a signing key is set, and RFC 9457 problem decoding into
//! [`ClientError::Refused`]. Nothing here decides what to do next; the runner does.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use inbox_api::{
    AcknowledgeRequest, AcknowledgeResponse, AgentKeyRequest, AgentKeyResponse, AgentKeysResponse,
    ClaimRequest, ClaimResponse, HeadResponse, HeartbeatRequest, HeartbeatResponse, PollRequest,
    PollResponse, ProblemCode, PublishRequest, PublishResponse, ReleaseRequest, ReleaseResponse,
    ResyncResponse, SessionHeartbeatRequest, SessionHeartbeatResponse, SigningAlgorithm, SubscribeRequest,
    SubscribeResponse,
};
use inbox_core::KeyId;
use inbox_trust::Algorithm;
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::credentials::Credentials;
use crate::error::ClientError;
use crate::secret_store::Secret;
use crate::signing::{RequestSigningKey, authority_of};
use crate::wire::{REQUEST_TIMEOUT, decode, problem};

/// Extra time a long poll gets beyond the wait it asked for.
const LONG_POLL_GRACE: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection to one agent-inbox service as one identity. Cheap to clone.
#[derive(Clone)]
pub struct Api {
    inner: Arc<Inner>,
}

struct Inner {
    base: String,
    /// Pooled connections for request/response calls.
    http: reqwest::Client,
    /// Streams get their own connections (no pooling), so a stream never shares a
    /// connection with a request that a proxy could hold up behind it, and each stream is
    /// the first request on its connection.
    streams: reqwest::Client,
    credentials: Credentials,
    /// Signs claim, acknowledge, release and heartbeat (and key changes) when set.
    signing_key: Option<RequestSigningKey>,
    /// The `@authority` signatures cover: what the service sees in `Host`.
    authority: String,
}

impl fmt::Debug for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.inner.base)
            .field("signing_key_id", &self.signing_key_id())
            .finish_non_exhaustive()
    }
}

impl Api {
    /// `base_url` like `http://127.0.0.1:8080`.
    pub fn new(base_url: &str, credentials: Credentials) -> Result<Api, ClientError> {
        let base = check_base_url(base_url)?;
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("agent-inbox-client/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| ClientError::Config(format!("cannot build an HTTP client: {err}")))?;
        let streams = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_max_idle_per_host(0)
            .user_agent(concat!("agent-inbox-client/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| ClientError::Config(format!("cannot build an HTTP client: {err}")))?;
        let authority = authority_of(&base)?;
        let inner = Inner { base, http, streams, credentials, signing_key: None, authority };
        Ok(Api { inner: Arc::new(inner) })
    }

    /// The same connection, signing every claim, acknowledge, release and heartbeat with
    /// `key` (RFC 9421: fresh nonce and creation time per request, so retries are never
    /// replays). Required when the tenant's policy is `signatures_required`.
    pub fn with_signing_key(&self, key: RequestSigningKey) -> Api {
        self.rebuilt(|inner| inner.signing_key = Some(key))
    }

    /// The same connection, signing for `authority` instead of the URL's host and port: for a
    /// proxy that rewrites `Host` to something the agent does not connect to.
    pub fn with_signature_authority(&self, authority: &str) -> Api {
        self.rebuilt(|inner| inner.authority = authority.to_owned())
    }

    pub fn signing_key_id(&self) -> Option<&str> {
        self.inner.signing_key.as_ref().map(RequestSigningKey::key_id)
    }

    fn rebuilt(&self, change: impl FnOnce(&mut Inner)) -> Api {
        let mut inner = Inner {
            base: self.inner.base.clone(),
            http: self.inner.http.clone(),
            streams: self.inner.streams.clone(),
            credentials: self.inner.credentials.clone(),
            signing_key: self.inner.signing_key.clone(),
            authority: self.inner.authority.clone(),
        };
        change(&mut inner);
        Api { inner: Arc::new(inner) }
    }

    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    /// The access token the next request would carry (refreshed first when due), for a caller
    /// that reads its claims, such as which scopes it holds. Never log it.
    pub async fn access_token(&self) -> Result<Secret, ClientError> {
        self.inner.credentials.bearer(&self.inner.http, &self.inner.base).await
    }

    pub async fn subscribe(&self, request: &SubscribeRequest) -> Result<SubscribeResponse, ClientError> {
        self.call(Method::POST, "/v1/agent-sessions/subscribe", Some(request), REQUEST_TIMEOUT).await
    }

    /// Poll after cursor; a long poll when `wait_seconds` is set. A long poll gets a
    /// connection of its own, like a stream, so a proxy's cut is timed from its start.
    pub async fn poll(&self, request: &PollRequest) -> Result<PollResponse, ClientError> {
        let wait = Duration::from_secs(u64::from(request.wait_seconds.map_or(0, |w| w.get())));
        let client = if wait.is_zero() { Client::Pooled } else { Client::Stream };
        self.call_with(
            client,
            Method::POST,
            "/v1/inbox/poll-after-cursor",
            Some(request),
            REQUEST_TIMEOUT + wait + LONG_POLL_GRACE,
            false,
        )
        .await
    }

    pub async fn head(&self) -> Result<HeadResponse, ClientError> {
        self.call::<(), _>(Method::GET, "/v1/inbox/head", None, REQUEST_TIMEOUT).await
    }

    pub async fn claim(&self, request: &ClaimRequest) -> Result<ClaimResponse, ClientError> {
        self.call_signed(Method::POST, "/v1/inbox/claim", Some(request)).await
    }

    pub async fn acknowledge(
        &self,
        request: &AcknowledgeRequest,
    ) -> Result<AcknowledgeResponse, ClientError> {
        self.call_signed(Method::POST, "/v1/inbox/acknowledge", Some(request)).await
    }

    pub async fn release(&self, request: &ReleaseRequest) -> Result<ReleaseResponse, ClientError> {
        self.call_signed(Method::POST, "/v1/inbox/release", Some(request)).await
    }

    pub async fn heartbeat(&self, request: &HeartbeatRequest) -> Result<HeartbeatResponse, ClientError> {
        self.call_signed(Method::POST, "/v1/inbox/heartbeat", Some(request)).await
    }

    /// The agent's live signing keys, and whether its tenant requires signed calls.
    pub async fn signing_keys(&self) -> Result<AgentKeysResponse, ClientError> {
        self.call::<(), _>(Method::GET, "/v1/agent-keys", None, REQUEST_TIMEOUT).await
    }

    /// Registers `key`'s public half (ed25519) as a signing key of the agent. An agent's first
    /// key needs only the access token; any further key must be signed by a current one, so
    /// set that with [`Self::with_signing_key`] first.
    pub async fn register_signing_key(
        &self,
        key: &RequestSigningKey,
    ) -> Result<AgentKeyResponse, ClientError> {
        let public_key = key.public_key().ok_or_else(|| {
            ClientError::Config(
                "only ed25519 keys are registered by their public key; hmac-sha256 secrets are issued by the \
                 service (POST /v1/agent-keys with algorithm hmac-sha256)"
                    .to_owned(),
            )
        })?;
        let algorithm = match key.algorithm() {
            Algorithm::Ed25519 => SigningAlgorithm::Ed25519,
            Algorithm::HmacSha256 => SigningAlgorithm::HmacSha256,
        };
        let key_id = KeyId::new(key.key_id())
            .map_err(|err| ClientError::Config(format!("the signing key's id is refused: {err}")))?;
        let request = AgentKeyRequest { algorithm, public_key: Some(public_key), key_id: Some(key_id) };
        self.call_signed(Method::POST, "/v1/agent-keys", Some(&request)).await
    }

    /// Retires one of the agent's keys now; the request is signed with the current key.
    pub async fn retire_signing_key(&self, key_id: &str) -> Result<(), ClientError> {
        let path = format!("/v1/agent-keys/{key_id}");
        self.call_with::<(), serde::de::IgnoredAny>(
            Client::Pooled,
            Method::DELETE,
            &path,
            None,
            REQUEST_TIMEOUT,
            true,
        )
        .await
        .map(drop)
    }

    pub async fn session_heartbeat(
        &self,
        session_id: &str,
        request: &SessionHeartbeatRequest,
    ) -> Result<SessionHeartbeatResponse, ClientError> {
        let path = format!("/v1/agent-sessions/{session_id}/heartbeat");
        self.call(Method::POST, &path, Some(request), REQUEST_TIMEOUT).await
    }

    pub async fn resync(&self) -> Result<ResyncResponse, ClientError> {
        self.call::<(), _>(Method::GET, "/v1/inbox/resync", None, REQUEST_TIMEOUT).await
    }

    /// One page of the resync snapshot: at most `limit` open events after `after_seq` (the
    /// last `inbox_seq` of the previous page).
    pub async fn resync_page(&self, after_seq: u64, limit: u32) -> Result<ResyncResponse, ClientError> {
        let path = format!("/v1/inbox/resync?after_seq={after_seq}&limit={limit}");
        self.call::<(), _>(Method::GET, &path, None, REQUEST_TIMEOUT).await
    }

    /// Publishes an event (needs a publisher token): for tools and tests built on the SDK.
    pub async fn publish(&self, request: &PublishRequest) -> Result<PublishResponse, ClientError> {
        self.call(Method::POST, "/v1/events", Some(request), REQUEST_TIMEOUT).await
    }

    /// Opens a Server-Sent Events stream at `path` (the `sse_url` of subscribe), resuming after
    /// `last_event_id`. The answer's body is the stream; read it with `chunk()`.
    pub async fn open_sse(&self, path: &str, last_event_id: u64) -> Result<reqwest::Response, ClientError> {
        let url = self.url(path);
        for attempt in 0..2 {
            let token = self.inner.credentials.bearer(&self.inner.http, &self.inner.base).await?;
            let response = self
                .inner
                .streams
                .get(&url)
                .bearer_auth(token.expose())
                .header("accept", "text/event-stream")
                .header("last-event-id", last_event_id.to_string())
                .timeout(Duration::from_secs(24 * 3600))
                .send()
                .await
                .map_err(|err| ClientError::from_request(&err))?;
            if response.status() == StatusCode::UNAUTHORIZED
                && attempt == 0
                && self.inner.credentials.invalidate(&token).await
            {
                continue;
            }
            if !response.status().is_success() {
                return Err(problem(response).await);
            }
            return Ok(response);
        }
        unreachable!("the loop returns on its second attempt")
    }

    pub(crate) async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Req>,
        timeout: Duration,
    ) -> Result<Resp, ClientError> {
        self.call_with(Client::Pooled, method, path, body, timeout, false).await
    }

    /// A critical call: signed when a signing key is set.
    async fn call_signed<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Req>,
    ) -> Result<Resp, ClientError> {
        self.call_with(Client::Pooled, method, path, body, REQUEST_TIMEOUT, true).await
    }

    async fn call_with<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        client: Client,
        method: Method,
        path: &str,
        body: Option<&Req>,
        timeout: Duration,
        sign: bool,
    ) -> Result<Resp, ClientError> {
        let url = self.url(path);
        let http = match client {
            Client::Pooled => &self.inner.http,
            Client::Stream => &self.inner.streams,
        };
        // Serialized once: the signature's Content-Digest covers these exact bytes.
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|err| ClientError::Protocol(format!("cannot encode the request: {err}")))?;
        let signing_key = self.inner.signing_key.as_ref().filter(|_| sign);
        for attempt in 0..2 {
            let token = self.inner.credentials.bearer(&self.inner.http, &self.inner.base).await?;
            let mut request = http.request(method.clone(), &url).bearer_auth(token.expose()).timeout(timeout);
            if let Some(body) = &body {
                request = request.header("content-type", "application/json").body(body.clone());
            }
            if let Some(key) = signing_key {
                // Signed per attempt: a retry carries a fresh nonce.
                // `@path` is the path without its query.
                let signed_path = path.split('?').next().unwrap_or(path);
                let signed = key.sign(
                    method.as_str(),
                    &self.inner.authority,
                    signed_path,
                    body.as_deref().unwrap_or_default(),
                )?;
                for (name, value) in signed.pairs() {
                    request = request.header(name, value);
                }
            }
            let response = request.send().await.map_err(|err| ClientError::from_request(&err))?;
            if response.status() != StatusCode::UNAUTHORIZED {
                return decode(response).await;
            }
            // Only a refused access token is worth a refresh; a refused signature is not.
            let refused = problem(response).await;
            if attempt == 0 && is_token_refusal(&refused) && self.inner.credentials.invalidate(&token).await {
                continue;
            }
            return Err(refused);
        }
        unreachable!("the loop returns on its second attempt")
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.inner.base)
    }
}

/// Which connections a request uses.
#[derive(Debug, Clone, Copy)]
enum Client {
    Pooled,
    Stream,
}

/// Whether a 401 is about the access token (expired, revoked, malformed) rather than about a
/// signature, which a new token would not fix.
fn is_token_refusal(err: &ClientError) -> bool {
    err.code().is_some_and(|code| {
        matches!(code, ProblemCode::Unauthorized | ProblemCode::InvalidToken | ProblemCode::TokenExpired)
            || code.as_str().starts_with("http_")
    })
}

/// Normalizes a server URL (no trailing slash) and refuses what this build cannot reach.
pub fn check_base_url(base_url: &str) -> Result<String, ClientError> {
    let base = base_url.trim().trim_end_matches('/');
    let host = base.strip_prefix("https://").or_else(|| base.strip_prefix("http://"));
    if host.is_none_or(str::is_empty) {
        return Err(ClientError::Config(format!(
            "{base_url:?} is not a server URL such as https://inbox.example or http://127.0.0.1:8080"
        )));
    }
    Ok(base.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls_are_normalized_and_unreachable_ones_named() {
        assert_eq!(check_base_url("http://127.0.0.1:8080/").unwrap(), "http://127.0.0.1:8080");
        assert_eq!(check_base_url(" http://inbox.lan ").unwrap(), "http://inbox.lan");
        assert_eq!(check_base_url("https://inbox.example/").unwrap(), "https://inbox.example");
        assert!(check_base_url("inbox.example").unwrap_err().to_string().contains("is not a server URL"));
        assert!(check_base_url("http://").is_err());
    }
}
