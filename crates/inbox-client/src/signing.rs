//! The key an agent signs its critical calls with (claim, acknowledge, release, heartbeat),
//! and the RFC 9421 headers each such request gets.
//!
//! Every request is signed afresh: the current time as `created`, a new random nonce, so a
//! retry after a lost answer is a new signature the service accepts, never a replay it
//! refuses. The private key leaves this module only as a [`Secret`] for the secret store.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use inbox_trust::message_signatures::SigningKey;
use inbox_trust::{Algorithm, SignedRequestHeaders, sign_inbox_request};

use crate::error::ClientError;
use crate::secret_store::Secret;

/// Random bytes in each nonce (RFC 9421 §7.2.2 asks for enough to never repeat).
const NONCE_BYTES: usize = 16;
/// Longest key id the service accepts.
const KEY_ID_BYTES_MAX: usize = 64;

/// An agent's request-signing key: its key id at the service and the private key (an ed25519
/// seed, or an hmac-sha256 secret the service issued). `Debug` never shows the key.
#[derive(Clone)]
pub struct RequestSigningKey {
    key_id: String,
    key: SigningKey,
    /// The ed25519 seed or hmac secret, kept to write the key to the secret store.
    material: Vec<u8>,
}

impl fmt::Debug for RequestSigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestSigningKey")
            .field("key_id", &self.key_id)
            .field("algorithm", &self.algorithm())
            .finish_non_exhaustive()
    }
}

impl RequestSigningKey {
    /// A new ed25519 key pair under a fresh key id (`ak_` and 16 hex digits), to be registered
    /// with [`crate::Api::register_signing_key`].
    pub fn generate_ed25519() -> Result<RequestSigningKey, ClientError> {
        let seed = random::<32>()?;
        let id = random::<8>()?;
        let key_id = format!("ak_{}", id.iter().map(|b| format!("{b:02x}")).collect::<String>());
        RequestSigningKey::ed25519(&key_id, &seed)
    }

    /// An ed25519 key from its 32-byte seed (the RFC 8032 private key).
    pub fn ed25519(key_id: &str, seed: &[u8; 32]) -> Result<RequestSigningKey, ClientError> {
        check_key_id(key_id)?;
        let key = SigningKey::ed25519_from_seed(seed);
        Ok(RequestSigningKey { key_id: key_id.to_owned(), key, material: seed.to_vec() })
    }

    /// An hmac-sha256 key: the secret `POST /v1/agent-keys` returned once (base64url decoded).
    pub fn hmac_sha256(key_id: &str, secret: &[u8]) -> Result<RequestSigningKey, ClientError> {
        check_key_id(key_id)?;
        let key = SigningKey::hmac_sha256(secret)
            .map_err(|err| ClientError::Config(format!("signing key {key_id:?}: {err}")))?;
        Ok(RequestSigningKey { key_id: key_id.to_owned(), key, material: secret.to_vec() })
    }

    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    pub fn algorithm(&self) -> Algorithm {
        self.key.algorithm()
    }

    /// The ed25519 public key, base64url as `POST /v1/agent-keys` takes it; `None` for hmac.
    pub fn public_key(&self) -> Option<String> {
        self.key.verifying_key().ed25519_public_bytes().map(|bytes| URL_SAFE_NO_PAD.encode(bytes))
    }

    /// The key as one line for the secret store: `<algorithm>/<key id>/<base64url key>`
    /// (`/` occurs in neither a key id nor base64url).
    pub fn to_secret(&self) -> Secret {
        Secret::new(format!(
            "{}/{}/{}",
            self.algorithm(),
            self.key_id,
            URL_SAFE_NO_PAD.encode(&self.material)
        ))
    }

    /// Reads what [`Self::to_secret`] wrote.
    pub fn from_secret(secret: &Secret) -> Result<RequestSigningKey, ClientError> {
        let unreadable = || {
            ClientError::SecretStore(
                "the stored signing key is not <algorithm>/<key id>/<key>; log in again with --signing-key \
                 generate"
                    .to_owned(),
            )
        };
        let mut parts = secret.expose().trim().splitn(3, '/');
        let (Some(algorithm), Some(key_id), Some(material)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(unreadable());
        };
        let material = URL_SAFE_NO_PAD.decode(material).map_err(|_| unreadable())?;
        match Algorithm::from_name(algorithm).ok_or_else(unreadable)? {
            Algorithm::Ed25519 => {
                let seed = <[u8; 32]>::try_from(material.as_slice()).map_err(|_| unreadable())?;
                RequestSigningKey::ed25519(key_id, &seed)
            }
            Algorithm::HmacSha256 => RequestSigningKey::hmac_sha256(key_id, &material),
        }
    }

    /// The three headers for one request, signed now with a fresh nonce. `authority` is what
    /// the service sees as `@authority` (the `Host` header); `path` has no query; `body` is
    /// the exact bytes sent.
    pub(crate) fn sign(
        &self,
        method: &str,
        authority: &str,
        path: &str,
        body: &[u8],
    ) -> Result<SignedRequestHeaders, ClientError> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let nonce = URL_SAFE_NO_PAD.encode(random::<NONCE_BYTES>()?);
        sign_inbox_request(method, authority, path, body, &self.key, &self.key_id, now, &nonce)
            .map_err(|err| ClientError::Config(format!("cannot sign with key {:?}: {err}", self.key_id)))
    }
}

/// The `@authority` a request to `base` (a checked server URL) carries: its host, and the port
/// when it is not the scheme's default, exactly as the HTTP client writes `Host`.
pub(crate) fn authority_of(base: &str) -> Result<String, ClientError> {
    let url = reqwest::Url::parse(base)
        .map_err(|err| ClientError::Config(format!("{base:?} is not a server URL: {err}")))?;
    let host = url.host_str().ok_or_else(|| ClientError::Config(format!("{base:?} names no host")))?;
    Ok(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    })
}

fn check_key_id(key_id: &str) -> Result<(), ClientError> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':');
    if key_id.is_empty() || key_id.len() > KEY_ID_BYTES_MAX || !key_id.bytes().all(allowed) {
        return Err(ClientError::Config(format!(
            "signing key id {key_id:?} must be 1 to {KEY_ID_BYTES_MAX} letters, digits, '_', '-', '.' or ':'"
        )));
    }
    Ok(())
}

fn random<const N: usize>() -> Result<[u8; N], ClientError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)
        .map_err(|err| ClientError::Config(format!("the operating system's random source failed: {err}")))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use inbox_trust::message_signatures::{RequestParts, VerifyPolicy, verify};

    use super::*;

    #[test]
    fn keys_round_trip_through_the_secret_store_format_and_hide_in_debug_output() {
        let key = RequestSigningKey::generate_ed25519().unwrap();
        assert!(key.key_id().starts_with("ak_") && key.key_id().len() == 19, "{}", key.key_id());
        let secret = key.to_secret();
        let back = RequestSigningKey::from_secret(&secret).unwrap();
        assert_eq!((back.key_id(), back.algorithm()), (key.key_id(), Algorithm::Ed25519));
        assert_eq!(back.public_key(), key.public_key());
        assert!(!format!("{key:?}").contains(secret.expose().rsplit('/').next().unwrap()));

        let hmac = RequestSigningKey::hmac_sha256("k.1", &[7; 32]).unwrap();
        let back = RequestSigningKey::from_secret(&hmac.to_secret()).unwrap();
        assert_eq!(
            (back.key_id(), back.algorithm(), back.public_key()),
            ("k.1", Algorithm::HmacSha256, None)
        );

        for bad in ["", "ed25519/k", "ed25519/k/!!", "rsa/k/AAAA", "ed25519/k/AAAA", "ed25519/a b/AAAA"] {
            assert!(RequestSigningKey::from_secret(&Secret::new(bad)).is_err(), "{bad:?}");
        }
        assert!(RequestSigningKey::hmac_sha256("k", &[1; 8]).is_err(), "a short secret is refused");
    }

    #[test]
    fn each_signature_is_fresh_and_verifies_as_the_service_checks_it() {
        let key = RequestSigningKey::ed25519("ak_1", &[5; 32]).unwrap();
        let body = br#"{"limit":10}"#;
        let first = key.sign("POST", "127.0.0.1:8080", "/v1/inbox/claim", body).unwrap();
        let second = key.sign("POST", "127.0.0.1:8080", "/v1/inbox/claim", body).unwrap();
        assert_ne!(first.signature_input, second.signature_input, "a new nonce every time");
        let mut parts = RequestParts::new("POST", "https", "127.0.0.1:8080", "/v1/inbox/claim");
        for (name, value) in first.pairs() {
            parts = parts.with_header(name, value);
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
        let verifying = SigningKey::ed25519_from_seed(&[5; 32]).verifying_key();
        let verified =
            verify(&parts, body, &VerifyPolicy::inbox(now), |id| (id == "ak_1").then(|| verifying.clone()))
                .unwrap();
        assert_eq!(verified.nonce.map(|n| n.len()), Some(22), "16 random bytes, base64url");
    }

    #[test]
    fn the_authority_is_what_the_host_header_carries() {
        assert_eq!(authority_of("http://127.0.0.1:8080").unwrap(), "127.0.0.1:8080");
        assert_eq!(authority_of("https://inbox.example").unwrap(), "inbox.example");
        assert_eq!(authority_of("https://inbox.example:443").unwrap(), "inbox.example");
        assert_eq!(authority_of("http://inbox.example:80").unwrap(), "inbox.example");
        assert_eq!(authority_of("https://inbox.example:8443").unwrap(), "inbox.example:8443");
        assert_eq!(authority_of("http://[::1]:8080").unwrap(), "[::1]:8080");
    }
}
