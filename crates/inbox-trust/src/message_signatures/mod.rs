//! RFC 9421 HTTP Message Signatures for requests in both directions: agents signing their
//! claim, acknowledge, release and heartbeat calls, and the service signing webhooks.
//!
//! [`sign`] and [`verify`] are pure: the current time comes in through the policy and the
//! key comes from a lookup function, so the caller decides where keys live and how they
//! rotate (publish a new `keyid`, keep the old one until its last signature has expired).
//! Replay protection is split the same way: [`verify`] insists on a nonce and a short
//! window and reports how long the nonce must be remembered; the caller remembers it
//! (in the shared database) and refuses a second use.

mod base;
mod components;
mod keys;
mod params;

pub use crate::structured::StructuredFieldError;
pub use base::signature_base;
pub use components::{Component, RequestParts, SignatureBaseError};
pub use keys::{Algorithm, HMAC_SECRET_BYTES_MIN, KeyError, SigningKey, VerifyingKey};
pub use params::{
    SignatureHeaderError, SignatureParameter, SignatureParams, inbox_request_components, parse_signature,
    parse_signature_input, serialize_signature, serialize_signature_input,
};

use crate::content_digest::{self, CONTENT_DIGEST, ContentDigestError};

/// Longest signature validity we accept, `expires - created` (the design's 5 minutes).
pub const WINDOW_SECONDS_MAX: i64 = 300;

/// How far apart the signer's and the verifier's clocks may be.
pub const CLOCK_SKEW_SECONDS_DEFAULT: i64 = 30;

/// Longest nonce we accept; nonces are stored, so their size is bounded.
pub const NONCE_BYTES_LIMIT: usize = 128;

/// Longest keyid we accept.
pub const KEYID_BYTES_LIMIT: usize = 256;

/// The header names, lower-case.
pub const SIGNATURE_INPUT: &str = "signature-input";
pub const SIGNATURE: &str = "signature";

/// The two header values a signature adds to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureHeaders {
    pub signature_input: String,
    pub signature: String,
}

/// Why a request could not be signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    #[error("{0}")]
    Label(#[from] SignatureHeaderError),
    #[error("{0}")]
    Base(#[from] SignatureBaseError),
    #[error("parameters declare alg {declared} but the key is {key}")]
    AlgorithmMismatch { declared: Algorithm, key: Algorithm },
}

/// Signs `parts` under `label` with `key`. Set the `Content-Digest` header on `parts` (with
/// [`content_digest::content_digest_header`]) before signing if `content-digest` is covered.
pub fn sign(
    parts: &RequestParts,
    label: &str,
    params: &SignatureParams,
    key: &SigningKey,
) -> Result<SignatureHeaders, SignError> {
    params::check_label(label)?;
    if let Some(declared) = params.alg() {
        if declared != key.algorithm() {
            return Err(SignError::AlgorithmMismatch { declared, key: key.algorithm() });
        }
    }
    let base = signature_base(parts, params)?;
    let signature = key.sign(base.as_bytes());
    Ok(SignatureHeaders {
        signature_input: serialize_signature_input(label, params),
        signature: serialize_signature(label, &signature),
    })
}

/// What a verifier demands of a signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyPolicy {
    /// Unix seconds, now.
    pub now: i64,
    /// The label to verify; `None` accepts a request with exactly one signature.
    pub label: Option<String>,
    /// Components the signature must cover.
    pub required_components: Vec<Component>,
    /// Longest accepted `expires - created`; without `expires`, the signature lapses this
    /// long after `created`.
    pub window_seconds_max: i64,
    pub clock_skew_seconds: i64,
    pub require_expires: bool,
    pub require_nonce: bool,
    /// The `tag` the signature must carry, if any.
    pub expected_tag: Option<String>,
}

impl VerifyPolicy {
    /// agent-inbox's rule for signed calls and webhooks: method, path, authority and body
    /// digest covered; created, expires (at most 5 minutes later), keyid and nonce present.
    pub fn inbox(now: i64) -> Self {
        VerifyPolicy {
            now,
            label: None,
            required_components: inbox_request_components(),
            window_seconds_max: WINDOW_SECONDS_MAX,
            clock_skew_seconds: CLOCK_SKEW_SECONDS_DEFAULT,
            require_expires: true,
            require_nonce: true,
            expected_tag: None,
        }
    }
}

/// A signature that verified, with what the caller needs to refuse its replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedSignature {
    pub label: String,
    pub keyid: String,
    pub algorithm: Algorithm,
    pub created: i64,
    /// When the signature stops being accepted: `expires`, or `created` plus the window.
    pub expires: i64,
    pub nonce: Option<String>,
    pub tag: Option<String>,
    pub components: Vec<Component>,
    /// Remember `(keyid, nonce)` until this unix second: until then the same signature
    /// would verify again, so a second use must be refused as a replay.
    pub remember_nonce_until: i64,
}

/// Why a signature was refused. Each variant names one thing the signer can fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the request has no {header} header; sign the request")]
    MissingHeader { header: &'static str },
    #[error("the {header} header is malformed: {source}")]
    MalformedHeader { header: &'static str, source: SignatureHeaderError },
    #[error("the request carries signatures {labels:?}; the verifier must name the one to check")]
    LabelRequired { labels: Vec<String> },
    #[error("no signature labelled {label:?} in the {header} header")]
    SignatureNotFound { label: String, header: &'static str },
    #[error("the signature does not cover {component}; add it to the covered components")]
    ComponentNotCovered { component: String },
    #[error("the signature has no {parameter} parameter")]
    MissingParameter { parameter: &'static str },
    #[error("signature parameter {parameter} is {bytes} bytes, more than {limit}")]
    ParameterTooLong { parameter: &'static str, bytes: usize, limit: usize },
    #[error("the signature expired at {expires}, it is now {now}; sign again")]
    Expired { expires: i64, now: i64 },
    #[error("the signature was created at {created}, in the future (now {now}); check the signer's clock")]
    CreatedInFuture { created: i64, now: i64 },
    #[error("the signature expires at {expires}, not after it was created at {created}")]
    InvalidWindow { created: i64, expires: i64 },
    #[error("the signature is valid for {window_seconds} s, longer than the {window_seconds_max} s allowed")]
    WindowTooLong { window_seconds: i64, window_seconds_max: i64 },
    #[error("the signature's tag is {found:?}, expected {expected:?}")]
    TagMismatch { expected: String, found: Option<String> },
    #[error("no key is known as {keyid:?}; register the key or use a current keyid")]
    UnknownKey { keyid: String },
    #[error("the signature declares alg {declared} but key {keyid:?} is {key}")]
    AlgorithmMismatch { keyid: String, declared: Algorithm, key: Algorithm },
    #[error("{0}")]
    SignatureBase(#[from] SignatureBaseError),
    #[error("the signature does not match the request and key")]
    BadSignature,
    #[error("{0}")]
    ContentDigest(#[from] ContentDigestError),
}

impl VerifyError {
    /// Whether the body did not match its signed `Content-Digest`.
    pub fn is_digest_mismatch(&self) -> bool {
        matches!(self, VerifyError::ContentDigest(ContentDigestError::Mismatch { .. }))
    }
}

/// Verifies the signature on `parts` (read from its `Signature-Input` and `Signature`
/// headers) against `policy`, looking its key up by keyid, and checks `body` against the
/// signed `Content-Digest` when that is covered. A convenience over
/// [`check_signature_headers`] and [`UnverifiedSignature::verify_with_key`] for callers
/// whose key lookup is synchronous.
pub fn verify(
    parts: &RequestParts,
    body: &[u8],
    policy: &VerifyPolicy,
    resolve_key: impl FnOnce(&str) -> Option<VerifyingKey>,
) -> Result<VerifiedSignature, VerifyError> {
    let unverified = check_signature_headers(parts, policy)?;
    let key = resolve_key(unverified.keyid())
        .ok_or_else(|| VerifyError::UnknownKey { keyid: unverified.keyid().to_owned() })?;
    unverified.verify_with_key(body, &key)
}

/// The first, cheap half of verification: parses the headers, selects the signature and
/// checks it against the policy (coverage, parameters, time window, tag). What remains is
/// the key lookup, which may need the database, and the cryptography.
///
/// Record the nonce only after [`UnverifiedSignature::verify_with_key`] succeeds, or anyone
/// could burn another agent's nonces with forged requests.
pub fn check_signature_headers<'a>(
    parts: &'a RequestParts,
    policy: &VerifyPolicy,
) -> Result<UnverifiedSignature<'a>, VerifyError> {
    let (label, params, signature) = select_signature(parts, policy)?;

    for required in &policy.required_components {
        if !params.components().contains(required) {
            return Err(VerifyError::ComponentNotCovered { component: required.to_string() });
        }
    }
    let keyid = params.keyid().ok_or(VerifyError::MissingParameter { parameter: "keyid" })?;
    check_length("keyid", keyid, KEYID_BYTES_LIMIT)?;
    match params.nonce() {
        Some(nonce) => check_length("nonce", nonce, NONCE_BYTES_LIMIT)?,
        None if policy.require_nonce => {
            return Err(VerifyError::MissingParameter { parameter: "nonce" });
        }
        None => {}
    }
    let (created, expires) = check_window(&params, policy)?;
    if let Some(expected) = &policy.expected_tag {
        if params.tag() != Some(expected.as_str()) {
            return Err(VerifyError::TagMismatch {
                expected: expected.clone(),
                found: params.tag().map(str::to_owned),
            });
        }
    }
    Ok(UnverifiedSignature {
        parts,
        label,
        params,
        signature,
        created,
        expires,
        remember_nonce_until: expires.saturating_add(policy.clock_skew_seconds),
    })
}

/// A signature whose headers satisfied the policy, waiting for its key.
#[derive(Debug, Clone)]
pub struct UnverifiedSignature<'a> {
    parts: &'a RequestParts,
    label: String,
    params: SignatureParams,
    signature: Vec<u8>,
    created: i64,
    expires: i64,
    remember_nonce_until: i64,
}

impl UnverifiedSignature<'_> {
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The key to look up. Present: [`check_signature_headers`] refuses a signature without.
    pub fn keyid(&self) -> &str {
        self.params.keyid().unwrap_or_default()
    }

    pub fn params(&self) -> &SignatureParams {
        &self.params
    }

    /// The second half of verification: the declared algorithm against the key's, the
    /// signature against the rebuilt signature base, then the body against its digest.
    pub fn verify_with_key(self, body: &[u8], key: &VerifyingKey) -> Result<VerifiedSignature, VerifyError> {
        let keyid = self.keyid().to_owned();
        if let Some(declared) = self.params.alg() {
            if declared != key.algorithm() {
                return Err(VerifyError::AlgorithmMismatch { keyid, declared, key: key.algorithm() });
            }
        }
        let base = signature_base(self.parts, &self.params)?;
        if !key.verify(base.as_bytes(), &self.signature) {
            return Err(VerifyError::BadSignature);
        }
        if self.params.components().contains(&Component::field(CONTENT_DIGEST)) {
            let header = self.parts.field_value(CONTENT_DIGEST).ok_or(ContentDigestError::Missing)?;
            content_digest::verify_content_digest(&header, body)?;
        }
        Ok(VerifiedSignature {
            label: self.label,
            keyid,
            algorithm: key.algorithm(),
            created: self.created,
            expires: self.expires,
            nonce: self.params.nonce().map(str::to_owned),
            tag: self.params.tag().map(str::to_owned),
            components: self.params.components().to_vec(),
            remember_nonce_until: self.remember_nonce_until,
        })
    }
}

/// Finds the signature the policy asks for in both headers.
fn select_signature(
    parts: &RequestParts,
    policy: &VerifyPolicy,
) -> Result<(String, SignatureParams, Vec<u8>), VerifyError> {
    let input_value =
        parts.field_value(SIGNATURE_INPUT).ok_or(VerifyError::MissingHeader { header: SIGNATURE_INPUT })?;
    let signature_value =
        parts.field_value(SIGNATURE).ok_or(VerifyError::MissingHeader { header: SIGNATURE })?;
    let inputs = parse_signature_input(&input_value)
        .map_err(|source| VerifyError::MalformedHeader { header: SIGNATURE_INPUT, source })?;
    let signatures = parse_signature(&signature_value)
        .map_err(|source| VerifyError::MalformedHeader { header: SIGNATURE, source })?;

    if inputs.is_empty() {
        return Err(VerifyError::MissingHeader { header: SIGNATURE_INPUT });
    }
    let (label, params) = match &policy.label {
        Some(label) => inputs.into_iter().find(|(candidate, _)| candidate == label).ok_or_else(|| {
            VerifyError::SignatureNotFound { label: label.clone(), header: SIGNATURE_INPUT }
        })?,
        None => {
            if inputs.len() != 1 {
                return Err(VerifyError::LabelRequired {
                    labels: inputs.into_iter().map(|(label, _)| label).collect(),
                });
            }
            inputs.into_iter().next().ok_or(VerifyError::MissingHeader { header: SIGNATURE_INPUT })?
        }
    };
    let signature = signatures
        .into_iter()
        .find(|(candidate, _)| *candidate == label)
        .map(|(_, bytes)| bytes)
        .ok_or_else(|| VerifyError::SignatureNotFound { label: label.clone(), header: SIGNATURE })?;
    Ok((label, params, signature))
}

/// Checks `created` and `expires` against the clock and the window; returns both, with
/// `expires` filled in from the window when the signature has none.
fn check_window(params: &SignatureParams, policy: &VerifyPolicy) -> Result<(i64, i64), VerifyError> {
    let now = policy.now;
    let created = params.created().ok_or(VerifyError::MissingParameter { parameter: "created" })?;
    if created > now.saturating_add(policy.clock_skew_seconds) {
        return Err(VerifyError::CreatedInFuture { created, now });
    }
    let expires = match params.expires() {
        Some(expires) => {
            if expires <= created {
                return Err(VerifyError::InvalidWindow { created, expires });
            }
            let window_seconds = expires - created;
            if window_seconds > policy.window_seconds_max {
                return Err(VerifyError::WindowTooLong {
                    window_seconds,
                    window_seconds_max: policy.window_seconds_max,
                });
            }
            expires
        }
        None if policy.require_expires => {
            return Err(VerifyError::MissingParameter { parameter: "expires" });
        }
        None => created.saturating_add(policy.window_seconds_max),
    };
    if now > expires.saturating_add(policy.clock_skew_seconds) {
        return Err(VerifyError::Expired { expires, now });
    }
    Ok((created, expires))
}

fn check_length(parameter: &'static str, value: &str, limit: usize) -> Result<(), VerifyError> {
    if value.len() > limit {
        return Err(VerifyError::ParameterTooLong { parameter, bytes: value.len(), limit });
    }
    Ok(())
}

#[cfg(test)]
mod rfc9421_vectors;
#[cfg(test)]
mod tests;
