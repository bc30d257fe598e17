//! Inbound RFC 9421 signatures on an agent's critical calls (claim, acknowledge, release,
//! heartbeat, and seed 000's aliases): the [`SignedJson`] extractor verifies before the
//! handler runs whenever the request carries a signature or the tenant requires one.
//!
//! The rule is `inbox_trust`'s [`VerifyPolicy::inbox`]: `@method`, `@path`, `@authority`
//! and `content-digest` covered; `created`, `expires` (at most 5 minutes later), `keyid` and
//! `nonce` present. The key must be a live key of the calling agent. Its nonce is then
//! remembered in the database until the signature could no longer verify, so a replay sent
//! to any node inside the window is refused (`signature_replayed`), and one outside it fails
//! as expired. Every refusal names what to fix, and counts as a failed authentication for the
//! client address's throttle.
//!
//! The extractors verify and then spend the nonce themselves ([`spend`]), as the last step of
//! extraction: after every other extractor and the body's parse succeeded, before the handler
//! runs. So no handler can forget it, a replay changes nothing, and a request refused later (a
//! missing scope, say) still spent its nonce. Spending goes through the node's
//! [`crate::nonce_writer`], which records the nonces of concurrent requests in one statement.
//!
//! Keys and tenant policies are cached per node for a few seconds
//! ([`crate::ops::signatures::KEY_CACHE_TTL`],
//! [`crate::tenant_policies`]), which is how long a retirement or a policy
//! change made on another node takes to reach this one.

use std::net::IpAddr;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use inbox_api::ProblemCode;
use inbox_core::UnixMillis;
use inbox_store::{KeyId, NonceUse, SignatureNonce};
use inbox_trust::message_signatures::{
    RequestParts, SIGNATURE, SIGNATURE_INPUT, VerifiedSignature, VerifyError, VerifyPolicy,
    check_signature_headers,
};
use serde::de::DeserializeOwned;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::http::extract::{parse_json, parse_json_or_empty, read_body};
use crate::node::AppState;
use crate::ops::signatures::nonce_hash;

/// A JSON body whose request passed signature verification (or needed none); a signature's
/// nonce is already spent when the handler sees it.
#[derive(Debug)]
pub struct SignedJson<T>(pub T);

/// A body (possibly empty, any content type) whose request passed signature verification; a
/// signature's nonce is already spent.
#[derive(Debug)]
pub struct SignedBody {
    pub body: Bytes,
}

/// A verified signature's nonce, not yet recorded: the extractor spends it with [`spend`].
#[derive(Debug, Clone)]
struct PendingNonce {
    record: SignatureNonce,
    key_id: String,
    nonce: String,
    /// The client address, for the failed-authentication throttle.
    client: Option<IpAddr>,
}

impl PendingNonce {
    /// The refusal of a replay: counted, throttled and explained like any signature failure.
    fn replayed(&self, state: &AppState) -> ApiError {
        state.metrics.signature_replays_total().add([], 1);
        refuse_client(
            state,
            self.client,
            ProblemCode::SignatureReplayed,
            format!(
                "nonce {:?} of key {:?} was already used; sign every request with a fresh nonce",
                self.nonce, self.key_id
            ),
            "replayed_nonce",
        )
    }
}

/// Records a signed request's nonce now, before the operation: a replay is refused here, and
/// a request refused later (say for a missing scope) cannot be replayed either.
async fn spend(state: &AppState, nonce: Option<PendingNonce>) -> Result<(), ApiError> {
    let Some(nonce) = nonce else { return Ok(()) };
    let started = Instant::now();
    let remembered = state.nonces.remember(nonce.record).await;
    state.metrics.signature_nonce_seconds().observe([], started.elapsed());
    match remembered? {
        NonceUse::Fresh => Ok(()),
        NonceUse::Replayed => Err(nonce.replayed(state)),
    }
}

/// A verified signature and its not yet recorded nonce.
#[derive(Debug)]
struct Verified {
    signature: VerifiedSignature,
    nonce: PendingNonce,
}

/// A JSON body verified when signed, but accepted unsigned whatever the tenant's policy: for
/// the call that registers an agent's first key.
#[derive(Debug)]
pub struct OptionallySignedJson<T> {
    pub value: T,
    pub signature: Option<VerifiedSignature>,
}

impl<T: DeserializeOwned + Send> FromRequest<AppState> for SignedJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        require_json(&request)?;
        let (caller, parts, body) = split(request, state).await?;
        let nonce = verify_request(state, &caller, &parts, &body, true).await?.map(|v| v.nonce);
        // Parsed before the nonce is spent: a body that is not even well-formed spends nothing.
        let value = parse_json(&body)?;
        spend(state, nonce).await?;
        Ok(SignedJson(value))
    }
}

impl FromRequest<AppState> for SignedBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let (caller, parts, body) = split(request, state).await?;
        let nonce = verify_request(state, &caller, &parts, &body, true).await?.map(|v| v.nonce);
        spend(state, nonce).await?;
        Ok(SignedBody { body })
    }
}

/// A [`SignedJson`] whose body may be left out (seed 000's claim): an empty body is
/// `T::default()`, and any content type is taken. As with [`SignedBody`], the nonce is spent
/// before the body is parsed.
#[derive(Debug)]
pub struct SignedJsonOrEmpty<T>(pub T);

impl<T: DeserializeOwned + Default + Send> FromRequest<AppState> for SignedJsonOrEmpty<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let SignedBody { body } = SignedBody::from_request(request, state).await?;
        parse_json_or_empty(&body).map(SignedJsonOrEmpty)
    }
}

impl<T: DeserializeOwned> FromRequest<AppState> for OptionallySignedJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        require_json(&request)?;
        let (caller, parts, body) = split(request, state).await?;
        let signature = verify_and_remember(state, &caller, &parts, &body).await?;
        Ok(OptionallySignedJson { value: parse_json(&body)?, signature })
    }
}

/// Like [`OptionallySignedJson`], for a request whose body (of any type, or none) the
/// handler does not read.
#[derive(Debug)]
pub struct OptionallySignedBody {
    pub signature: Option<VerifiedSignature>,
}

impl FromRequest<AppState> for OptionallySignedBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let (caller, parts, body) = split(request, state).await?;
        let signature = verify_and_remember(state, &caller, &parts, &body).await?;
        Ok(OptionallySignedBody { signature })
    }
}

/// Verifies a signature if the request has one, and remembers its nonce at once.
async fn verify_and_remember(
    state: &AppState,
    caller: &Caller,
    parts: &Parts,
    body: &[u8],
) -> Result<Option<VerifiedSignature>, ApiError> {
    let Some(verified) = verify_request(state, caller, parts, body, false).await? else {
        return Ok(None);
    };
    spend(state, Some(verified.nonce)).await?;
    Ok(Some(verified.signature))
}

/// For transports that cannot carry a per-request HTTP signature (WebSocket messages):
/// refuses the critical operation when the caller's tenant requires signed calls.
pub async fn refuse_unsigned_if_required(state: &AppState, caller: &Caller) -> Result<(), ApiError> {
    if state.tenant_policies.get(&state.store, &caller.tenant_id).await?.signatures_required {
        return Err(ApiError::unauthorized(
            ProblemCode::SignatureRequired,
            "this tenant requires signed claim, acknowledge, release and heartbeat calls, which WebSocket \
             messages cannot carry; send them as signed HTTP requests",
        )
        .with("reason", "missing"));
    }
    Ok(())
}

/// The caller (authenticated by an earlier extractor, or now), the parts and the body.
async fn split(request: Request, state: &AppState) -> Result<(Caller, Parts, Bytes), ApiError> {
    let (mut parts, body) = request.into_parts();
    let caller = match parts.extensions.get::<Caller>() {
        Some(caller) => caller.clone(),
        None => Caller::from_request_parts(&mut parts, state).await?,
    };
    let body = read_body(body, state.body_bytes_limit()).await?;
    Ok((caller, parts, body))
}

fn require_json(request: &Request) -> Result<(), ApiError> {
    let json = request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| {
        v.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
    });
    if json {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ProblemCode::UnsupportedMediaType,
        "send the body as JSON with 'Content-Type: application/json'",
    ))
}

/// Verifies the request's signature when it carries one, or when `enforce_policy` and the
/// tenant requires one. Returns the verified signature with its nonce, which the extractor
/// then spends (`None`: unsigned and allowed).
async fn verify_request(
    state: &AppState,
    caller: &Caller,
    parts: &Parts,
    body: &[u8],
    enforce_policy: bool,
) -> Result<Option<Verified>, ApiError> {
    let signed = parts.headers.contains_key(SIGNATURE_INPUT) || parts.headers.contains_key(SIGNATURE);
    if !signed {
        if enforce_policy
            && state.tenant_policies.get(&state.store, &caller.tenant_id).await?.signatures_required
        {
            return Err(refuse(
                state,
                parts,
                ProblemCode::SignatureRequired,
                "this tenant requires signed claim, acknowledge, release and heartbeat calls; sign the request \
                 (RFC 9421, see POST /v1/agent-keys) with Content-Digest, Signature-Input and Signature"
                    .to_owned(),
                "missing",
            ));
        }
        return Ok(None);
    }
    let started = Instant::now();
    let verified = verify_signed(state, caller, parts, body).await.map(|(signature, record)| {
        let nonce = PendingNonce {
            key_id: signature.keyid.clone(),
            nonce: signature.nonce.clone().unwrap_or_default(),
            record,
            client: client_address(parts),
        };
        Verified { signature, nonce }
    });
    let result = if verified.is_ok() { "valid" } else { "refused" };
    state.metrics.signature_verifications_total().add([result.to_owned()], 1);
    state.metrics.signature_verify_seconds().observe([], started.elapsed());
    match verified {
        Ok(verified) => Ok(Some(verified)),
        Err(Failure::Refused((code, detail, reason))) => Err(refuse(state, parts, code, detail, reason)),
        Err(Failure::Store(err)) => Err(err.into()),
    }
}

/// A refusal: stable code, detail, and a short machine-readable reason.
type Refusal = (ProblemCode, String, &'static str);

enum Failure {
    Refused(Refusal),
    Store(inbox_store::StoreError),
}

impl From<Refusal> for Failure {
    fn from(refusal: Refusal) -> Self {
        Failure::Refused(refusal)
    }
}

/// The verified signature and the nonce record the operation must write.
async fn verify_signed(
    state: &AppState,
    caller: &Caller,
    parts: &Parts,
    body: &[u8],
) -> Result<(VerifiedSignature, SignatureNonce), Failure> {
    let now = state.store.now();
    let request = request_parts(state, parts);
    let policy = VerifyPolicy::inbox(now.get().div_euclid(1000));
    let unverified = check_signature_headers(&request, &policy).map_err(verify_refusal)?;
    let unknown = || {
        (
            ProblemCode::UnknownSigningKey,
            format!(
                "no live signing key {:?} belongs to agent {:?}; register it with POST /v1/agent-keys or sign \
                 with a current key",
                unverified.keyid(),
                caller.subject.as_str()
            ),
            "unknown_key",
        )
    };
    let key_id = KeyId::new(unverified.keyid()).map_err(|_| unknown())?;
    let key = state
        .key_cache
        .agent_key(&state.store, &caller.tenant_id, &key_id)
        .await
        .map_err(Failure::Store)?
        .filter(|key| key.agent_id == caller.subject && key.retired_at.is_none_or(|at| at > now))
        .ok_or_else(unknown)?;
    let verified = unverified.verify_with_key(body, &key.verifying).map_err(verify_refusal)?;
    let nonce = verified.nonce.as_deref().unwrap_or_default();
    let until = UnixMillis(verified.remember_nonce_until.saturating_mul(1000));
    let hash = nonce_hash(&caller.tenant_id, key_id.as_str(), nonce);
    Ok((verified, SignatureNonce { hash, until }))
}

/// The request as the signer saw it: method, the authority (configured, or `Host`), path,
/// query and the header fields.
fn request_parts(state: &AppState, parts: &Parts) -> RequestParts {
    let authority = state
        .config
        .signatures
        .authority
        .clone()
        .or_else(|| parts.headers.get(header::HOST).and_then(|v| v.to_str().ok()).map(str::to_owned))
        .or_else(|| parts.uri.authority().map(|a| a.to_string()))
        .unwrap_or_default();
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = RequestParts::new(parts.method.as_str(), "https", &authority, path_and_query);
    for (name, value) in &parts.headers {
        if let Ok(value) = value.to_str() {
            request.headers.push((name.as_str().to_owned(), value.to_owned()));
        }
    }
    request
}

fn verify_refusal(err: VerifyError) -> Refusal {
    let detail = err.to_string();
    match err {
        VerifyError::Expired { .. } => (ProblemCode::SignatureExpired, detail, "expired"),
        VerifyError::BadSignature => (
            ProblemCode::SignatureInvalid,
            "the signature does not match this request (method, path, authority, Content-Digest) and key; \
             sign exactly what you send"
                .to_owned(),
            "bad_signature",
        ),
        VerifyError::ContentDigest(ref digest) => {
            if err.is_digest_mismatch() {
                (
                    ProblemCode::ContentDigestMismatch,
                    "the body does not match its Content-Digest; send the exact bytes you signed".to_owned(),
                    "digest_mismatch",
                )
            } else {
                (ProblemCode::SignatureInvalid, digest.to_string(), "content_digest")
            }
        }
        VerifyError::UnknownKey { .. } => (ProblemCode::UnknownSigningKey, detail, "unknown_key"),
        VerifyError::CreatedInFuture { .. } => (ProblemCode::SignatureInvalid, detail, "created_in_future"),
        VerifyError::WindowTooLong { .. } | VerifyError::InvalidWindow { .. } => {
            (ProblemCode::SignatureInvalid, detail, "window")
        }
        VerifyError::ComponentNotCovered { .. } => {
            (ProblemCode::SignatureInvalid, detail, "component_not_covered")
        }
        VerifyError::MissingParameter { .. } | VerifyError::ParameterTooLong { .. } => {
            (ProblemCode::SignatureInvalid, detail, "parameter")
        }
        _ => (ProblemCode::SignatureInvalid, detail, "malformed"),
    }
}

fn refuse(
    state: &AppState,
    parts: &Parts,
    code: ProblemCode,
    detail: String,
    reason: &'static str,
) -> ApiError {
    refuse_client(state, client_address(parts), code, detail, reason)
}

fn refuse_client(
    state: &AppState,
    client: Option<IpAddr>,
    code: ProblemCode,
    detail: String,
    reason: &'static str,
) -> ApiError {
    state.metrics.auth_failures_total().add([code.to_string()], 1);
    state.limits.refuse_auth(client, ApiError::unauthorized(code, detail).with("reason", reason))
}

fn client_address(parts: &Parts) -> Option<IpAddr> {
    crate::proxies::ClientAddr::of(&parts.extensions)
}
