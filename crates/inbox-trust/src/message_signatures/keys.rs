//! Signing and verifying keys for the two RFC 9421 algorithms we accept: `ed25519` for
//! agents and services with key pairs, `hmac-sha256` for shared webhook secrets.
//!
//! The algorithm belongs to the key, never to the message: a verifier that let the
//! `alg` parameter choose would let an attacker pick HMAC with a public key as the secret.

use ed25519_dalek::Signer as _;
use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use zeroize::Zeroizing;

/// Shortest HMAC secret we accept: as many bytes as the sha-256 output (RFC 2104 §3).
pub const HMAC_SECRET_BYTES_MIN: usize = 32;

/// An RFC 9421 §3.3 signature algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// EdDSA over edwards25519 (RFC 9421 §3.3.6).
    Ed25519,
    /// HMAC using SHA-256 (RFC 9421 §3.3.3).
    HmacSha256,
}

impl Algorithm {
    /// The name registered in the HTTP Signature Algorithms registry.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Ed25519 => "ed25519",
            Algorithm::HmacSha256 => "hmac-sha256",
        }
    }

    /// The algorithm a registry name denotes, if we implement it.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "ed25519" => Some(Algorithm::Ed25519),
            "hmac-sha256" => Some(Algorithm::HmacSha256),
            _ => None,
        }
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.name())
    }
}

/// Why key material was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("hmac-sha256 secret is {bytes} bytes; use at least {min} random bytes")]
    HmacSecretTooShort { bytes: usize, min: usize },
    #[error("ed25519 public key is not a valid curve point")]
    InvalidEd25519PublicKey,
    #[error("ed25519 public key has small order (a weak key); generate a new key pair")]
    WeakEd25519PublicKey,
    #[error("not an RFC 8410 ed25519 {expected} DER document")]
    NotEd25519Der { expected: &'static str },
}

/// A key that produces signatures. Its `Debug` output never shows secret bytes.
#[derive(Clone)]
pub struct SigningKey(SigningKeyInner);

/// Secrets are wiped from memory when dropped (ed25519-dalek's key does this itself).
#[derive(Clone)]
enum SigningKeyInner {
    Ed25519(ed25519_dalek::SigningKey),
    HmacSha256(Zeroizing<Vec<u8>>),
}

impl SigningKey {
    /// An ed25519 key from its 32-byte seed (the RFC 8032 private key).
    pub fn ed25519_from_seed(seed: &[u8; 32]) -> Self {
        SigningKey(SigningKeyInner::Ed25519(ed25519_dalek::SigningKey::from_bytes(seed)))
    }

    /// An ed25519 key from an RFC 8410 PKCS #8 v1 DER document (what `openssl genpkey
    /// -algorithm ed25519` writes, base64 inside a PEM `PRIVATE KEY` block).
    pub fn ed25519_from_pkcs8_der(der: &[u8]) -> Result<Self, KeyError> {
        let seed = der
            .strip_prefix(PKCS8_ED25519_PREFIX.as_slice())
            .and_then(|rest| <&[u8; 32]>::try_from(rest).ok())
            .ok_or(KeyError::NotEd25519Der { expected: "PKCS #8 private key" })?;
        Ok(Self::ed25519_from_seed(seed))
    }

    /// An hmac-sha256 key from a shared secret of at least [`HMAC_SECRET_BYTES_MIN`] bytes.
    pub fn hmac_sha256(secret: &[u8]) -> Result<Self, KeyError> {
        check_hmac_secret(secret)?;
        Ok(SigningKey(SigningKeyInner::HmacSha256(Zeroizing::new(secret.to_vec()))))
    }

    pub fn algorithm(&self) -> Algorithm {
        match &self.0 {
            SigningKeyInner::Ed25519(_) => Algorithm::Ed25519,
            SigningKeyInner::HmacSha256(_) => Algorithm::HmacSha256,
        }
    }

    /// The key that checks this key's signatures (for HMAC, the same secret).
    pub fn verifying_key(&self) -> VerifyingKey {
        match &self.0 {
            SigningKeyInner::Ed25519(key) => VerifyingKey(VerifyingKeyInner::Ed25519(key.verifying_key())),
            SigningKeyInner::HmacSha256(secret) => {
                VerifyingKey(VerifyingKeyInner::HmacSha256(secret.clone()))
            }
        }
    }

    pub(crate) fn sign(&self, message: &[u8]) -> Vec<u8> {
        match &self.0 {
            SigningKeyInner::Ed25519(key) => key.sign(message).to_bytes().to_vec(),
            SigningKeyInner::HmacSha256(secret) => {
                let mut mac = new_hmac(secret);
                mac.update(message);
                mac.finalize().into_bytes().to_vec()
            }
        }
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("SigningKey").field("algorithm", &self.algorithm()).finish_non_exhaustive()
    }
}

/// A key that checks signatures. For ed25519 it is public; for HMAC it is the shared
/// secret, so its `Debug` output hides the bytes either way.
#[derive(Clone, PartialEq, Eq)]
pub struct VerifyingKey(VerifyingKeyInner);

#[derive(Clone, PartialEq, Eq)]
enum VerifyingKeyInner {
    Ed25519(ed25519_dalek::VerifyingKey),
    HmacSha256(Zeroizing<Vec<u8>>),
}

impl VerifyingKey {
    /// An ed25519 public key from its 32 bytes. A small-order key is refused here, once,
    /// so that [`VerifyingKey::verify`] need not check it on every request.
    pub fn ed25519_from_bytes(bytes: &[u8; 32]) -> Result<Self, KeyError> {
        let key =
            ed25519_dalek::VerifyingKey::from_bytes(bytes).map_err(|_| KeyError::InvalidEd25519PublicKey)?;
        if key.is_weak() {
            return Err(KeyError::WeakEd25519PublicKey);
        }
        Ok(VerifyingKey(VerifyingKeyInner::Ed25519(key)))
    }

    /// An ed25519 public key from an RFC 8410 SubjectPublicKeyInfo DER document (a PEM
    /// `PUBLIC KEY` block).
    pub fn ed25519_from_spki_der(der: &[u8]) -> Result<Self, KeyError> {
        let bytes = der
            .strip_prefix(SPKI_ED25519_PREFIX.as_slice())
            .and_then(|rest| <&[u8; 32]>::try_from(rest).ok())
            .ok_or(KeyError::NotEd25519Der { expected: "SubjectPublicKeyInfo public key" })?;
        Self::ed25519_from_bytes(bytes)
    }

    /// An hmac-sha256 key from a shared secret of at least [`HMAC_SECRET_BYTES_MIN`] bytes.
    pub fn hmac_sha256(secret: &[u8]) -> Result<Self, KeyError> {
        check_hmac_secret(secret)?;
        Ok(VerifyingKey(VerifyingKeyInner::HmacSha256(Zeroizing::new(secret.to_vec()))))
    }

    pub fn algorithm(&self) -> Algorithm {
        match &self.0 {
            VerifyingKeyInner::Ed25519(_) => Algorithm::Ed25519,
            VerifyingKeyInner::HmacSha256(_) => Algorithm::HmacSha256,
        }
    }

    /// The ed25519 public key bytes, for publishing; `None` for a shared secret.
    pub fn ed25519_public_bytes(&self) -> Option<[u8; 32]> {
        match &self.0 {
            VerifyingKeyInner::Ed25519(key) => Some(key.to_bytes()),
            VerifyingKeyInner::HmacSha256(_) => None,
        }
    }

    /// Whether `signature` is this key's signature of `message`. The HMAC comparison is
    /// constant-time. For ed25519, a non-canonical `s` is refused (no malleable signatures)
    /// and small-order keys never get this far ([`VerifyingKey::ed25519_from_bytes`]); what
    /// `verify_strict` checks on top, a small-order `R`, lets no one forge another key's
    /// signature, and skipping it saves a point decompression per request.
    pub(crate) fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        match &self.0 {
            VerifyingKeyInner::Ed25519(key) => ed25519_dalek::Signature::from_slice(signature)
                .is_ok_and(|signature| ed25519_dalek::Verifier::verify(key, message, &signature).is_ok()),
            VerifyingKeyInner::HmacSha256(secret) => {
                let mut mac = new_hmac(secret);
                mac.update(message);
                mac.verify_slice(signature).is_ok()
            }
        }
    }
}

impl std::fmt::Debug for VerifyingKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("VerifyingKey").field("algorithm", &self.algorithm()).finish_non_exhaustive()
    }
}

/// `SEQUENCE { INTEGER 0, SEQUENCE { OID 1.3.101.112 }, OCTET STRING { OCTET STRING (32) } }`
/// up to the seed: the only shape RFC 8410 §7 gives an ed25519 private key without attributes.
const PKCS8_ED25519_PREFIX: [u8; 16] =
    [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];

/// `SEQUENCE { SEQUENCE { OID 1.3.101.112 }, BIT STRING (0 unused bits, 32 bytes) }` up to
/// the key: RFC 8410 §4.
const SPKI_ED25519_PREFIX: [u8; 12] =
    [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00];

fn check_hmac_secret(secret: &[u8]) -> Result<(), KeyError> {
    if secret.len() < HMAC_SECRET_BYTES_MIN {
        return Err(KeyError::HmacSecretTooShort { bytes: secret.len(), min: HMAC_SECRET_BYTES_MIN });
    }
    Ok(())
}

fn new_hmac(secret: &[u8]) -> Hmac<Sha256> {
    // HMAC accepts keys of any length (RFC 2104 §2), so this cannot fail.
    <Hmac<Sha256> as hmac::Mac>::new_from_slice(secret).expect("hmac accepts any key length")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_secrets_shorter_than_32_bytes_are_refused() {
        assert_eq!(
            SigningKey::hmac_sha256(b"short").unwrap_err(),
            KeyError::HmacSecretTooShort { bytes: 5, min: 32 }
        );
        assert!(VerifyingKey::hmac_sha256(&[7; 32]).is_ok());
    }

    #[test]
    fn debug_output_hides_secrets() {
        let key = SigningKey::hmac_sha256(&[0xab; 32]).unwrap();
        let text = format!("{key:?} {:?}", key.verifying_key());
        assert!(!text.contains("171"), "{text}");
        assert!(!text.to_lowercase().contains("ab, ab"), "{text}");
        assert!(text.contains("HmacSha256"));
    }

    #[test]
    fn der_documents_of_the_wrong_shape_are_refused() {
        assert!(SigningKey::ed25519_from_pkcs8_der(&[0x30, 0x2e]).is_err());
        assert!(VerifyingKey::ed25519_from_spki_der(&[0; 44]).is_err());
    }

    #[test]
    fn a_signature_verifies_only_with_the_matching_key() {
        let key = SigningKey::ed25519_from_seed(&[1; 32]);
        let other = SigningKey::ed25519_from_seed(&[2; 32]);
        let signature = key.sign(b"message");
        assert!(key.verifying_key().verify(b"message", &signature));
        assert!(!other.verifying_key().verify(b"message", &signature));
        assert!(!key.verifying_key().verify(b"messagE", &signature));
        assert!(!key.verifying_key().verify(b"message", &signature[..63]));
    }

    #[test]
    fn small_order_public_keys_are_refused() {
        // The identity (y = 1) and the point of order 2 (y = -1): every signature made with
        // `R = [s]B` would match the identity.
        let identity = {
            let mut bytes = [0u8; 32];
            bytes[0] = 1;
            bytes
        };
        let order_two = {
            let mut bytes = [0xff; 32];
            bytes[0] = 0xec;
            bytes[31] = 0x7f;
            bytes
        };
        for bytes in [identity, order_two] {
            assert_eq!(VerifyingKey::ed25519_from_bytes(&bytes).unwrap_err(), KeyError::WeakEd25519PublicKey);
        }
        let good = SigningKey::ed25519_from_seed(&[1; 32]).verifying_key().ed25519_public_bytes().unwrap();
        assert!(VerifyingKey::ed25519_from_bytes(&good).is_ok());
    }

    #[test]
    fn a_signature_with_the_group_order_added_to_s_is_refused() {
        // l = 2^252 + 27742317777372353535851937790883648493, little-endian.
        const L: [u8; 32] = [
            0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
        ];
        let key = SigningKey::ed25519_from_seed(&[4; 32]);
        let mut signature = key.sign(b"message");
        assert!(key.verifying_key().verify(b"message", &signature));
        let mut carry = 0u16;
        for (byte, l) in signature[32..].iter_mut().zip(L) {
            let sum = u16::from(*byte) + u16::from(l) + carry;
            *byte = sum as u8;
            carry = sum >> 8;
        }
        assert_eq!(carry, 0);
        assert!(
            !key.verifying_key().verify(b"message", &signature),
            "s + l is the same scalar, but malleable"
        );
    }
}
