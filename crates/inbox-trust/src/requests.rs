//! Signing an agent's critical calls (claim, acknowledge, release, heartbeat) the way the
//! service verifies them: one call that returns the three headers to add.
//!
//! The client SDK calls [`sign_inbox_request`] with its own clock and a fresh random nonce;
//! the service checks the result under [`VerifyPolicy::inbox`], so both sides agree on the
//! covered components (`@method`, `@path`, `@authority`, `content-digest`) and parameters
//! (`created`, `expires`, `keyid`, `alg`, `nonce`) by construction.

use crate::content_digest::{CONTENT_DIGEST, content_digest_header};
#[cfg(doc)]
use crate::message_signatures::VerifyPolicy;
use crate::message_signatures::{
    RequestParts, SIGNATURE, SIGNATURE_INPUT, SignError, SignatureParams, SigningKey, sign,
};

/// The label of the one signature an agent puts on a request.
pub const REQUEST_SIGNATURE_LABEL: &str = "sig1";

/// How long a signed request stays acceptable (`expires - created`). Shorter than the
/// 5-minute maximum, so the service remembers fewer nonces; long enough for a retry.
pub const REQUEST_SIGNATURE_WINDOW_SECONDS: i64 = 120;

/// The headers a signed request adds: set all three, with these lower-case names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedRequestHeaders {
    /// `Content-Digest`: sha-256 of the exact body bytes sent.
    pub content_digest: String,
    pub signature_input: String,
    pub signature: String,
}

impl SignedRequestHeaders {
    /// `(name, value)` pairs, ready for any HTTP client.
    pub fn pairs(&self) -> [(&'static str, &str); 3] {
        [
            (CONTENT_DIGEST, self.content_digest.as_str()),
            (SIGNATURE_INPUT, self.signature_input.as_str()),
            (SIGNATURE, self.signature.as_str()),
        ]
    }
}

/// Signs one request to the service.
///
/// - `authority`: host, plus `:port` when the port is not the scheme's default, exactly as
///   the `Host` header will carry it (with `url` crate: `host_str()` and `port()`, which
///   omits default ports). A service behind a proxy that rewrites `Host` is configured with
///   its public authority instead.
/// - `path`: the absolute path without the query (`/v1/inbox/claim`).
/// - `body`: the exact bytes sent (empty for a request without a body).
/// - `now`: unix seconds; `nonce`: a fresh random value (16 random bytes, hex or base64url),
///   never reused with the same key.
#[allow(clippy::too_many_arguments)]
pub fn sign_inbox_request(
    method: &str,
    authority: &str,
    path: &str,
    body: &[u8],
    key: &SigningKey,
    keyid: &str,
    now: i64,
    nonce: &str,
) -> Result<SignedRequestHeaders, SignError> {
    let content_digest = content_digest_header(body);
    // The service normalizes `@authority` the same way whatever the scheme: only the
    // scheme's default port is stripped, and the authority given here carries none.
    let parts =
        RequestParts::new(method, "https", authority, path).with_header(CONTENT_DIGEST, &content_digest);
    let params = SignatureParams::for_inbox_request(now, REQUEST_SIGNATURE_WINDOW_SECONDS, keyid, nonce)
        .with_alg(key.algorithm());
    let headers = sign(&parts, REQUEST_SIGNATURE_LABEL, &params, key)?;
    Ok(SignedRequestHeaders {
        content_digest,
        signature_input: headers.signature_input,
        signature: headers.signature,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message_signatures::{VerifyError, VerifyPolicy, verify};

    const NOW: i64 = 1_750_000_000;

    fn parts_with(headers: &SignedRequestHeaders, path: &str) -> RequestParts {
        let mut parts = RequestParts::new("POST", "https", "inbox.example.com:8443", path);
        for (name, value) in headers.pairs() {
            parts = parts.with_header(name, value);
        }
        parts
    }

    #[test]
    fn a_signed_request_verifies_under_the_inbox_policy() {
        let key = SigningKey::ed25519_from_seed(&[3; 32]);
        let body = br#"{"acks":[]}"#;
        let headers = sign_inbox_request(
            "POST",
            "inbox.example.com:8443",
            "/v1/inbox/acknowledge",
            body,
            &key,
            "ak_1",
            NOW,
            "n1",
        )
        .unwrap();
        let parts = parts_with(&headers, "/v1/inbox/acknowledge");
        let verified = verify(&parts, body, &VerifyPolicy::inbox(NOW + 10), |keyid| {
            (keyid == "ak_1").then(|| key.verifying_key())
        })
        .unwrap();
        assert_eq!(verified.nonce.as_deref(), Some("n1"));
        assert_eq!(verified.expires, NOW + REQUEST_SIGNATURE_WINDOW_SECONDS);
    }

    #[test]
    fn the_signature_is_bound_to_path_and_body() {
        let key = SigningKey::hmac_sha256(&[9; 32]).unwrap();
        let body = br#"{"event_id":"e"}"#;
        let headers = sign_inbox_request(
            "POST",
            "inbox.example.com:8443",
            "/v1/inbox/release",
            body,
            &key,
            "k",
            NOW,
            "n",
        )
        .unwrap();
        let lookup = |_: &str| Some(key.verifying_key());
        let moved = parts_with(&headers, "/v1/inbox/acknowledge");
        assert_eq!(
            verify(&moved, body, &VerifyPolicy::inbox(NOW), lookup).unwrap_err(),
            VerifyError::BadSignature
        );
        let original = parts_with(&headers, "/v1/inbox/release");
        let tampered =
            verify(&original, br#"{"event_id":"f"}"#, &VerifyPolicy::inbox(NOW), lookup).unwrap_err();
        assert!(tampered.is_digest_mismatch(), "{tampered}");
    }
}
