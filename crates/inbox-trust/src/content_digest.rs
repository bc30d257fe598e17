//! RFC 9530 `Content-Digest`: the hash of the exact content bytes, carried in a header so a
//! message signature can cover the body without signing the body itself.
//!
//! A signature that covers `content-digest` is only as good as the check that the header
//! matches the bytes that arrived, so verification is strict: every digest we know how to
//! compute must match, at least one must be present, and deprecated or unknown algorithms
//! (`md5`, `sha`, `unixsum`, ...) are ignored rather than trusted (RFC 9530 §5 and §6.6).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use sha2::{Digest as _, Sha256, Sha512};

use crate::structured::{self, BareItem, Member, StructuredFieldError};

/// The field name, lower-case as RFC 9421 covers it.
pub const CONTENT_DIGEST: &str = "content-digest";

/// A hash algorithm from the RFC 9530 registry with status "Active".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DigestAlgorithm {
    Sha256,
    Sha512,
}

impl DigestAlgorithm {
    /// The registry key used in the header (`sha-256`, `sha-512`).
    pub fn key(self) -> &'static str {
        match self {
            DigestAlgorithm::Sha256 => "sha-256",
            DigestAlgorithm::Sha512 => "sha-512",
        }
    }

    /// The registry key's algorithm, or `None` for anything we do not trust.
    pub fn from_key(key: &str) -> Option<Self> {
        match key {
            "sha-256" => Some(DigestAlgorithm::Sha256),
            "sha-512" => Some(DigestAlgorithm::Sha512),
            _ => None,
        }
    }

    /// Length of the digest in bytes; a value of another length is malformed, not a mismatch.
    pub fn digest_bytes(self) -> usize {
        match self {
            DigestAlgorithm::Sha256 => 32,
            DigestAlgorithm::Sha512 => 64,
        }
    }

    /// The digest of `content`.
    pub fn digest(self, content: &[u8]) -> Vec<u8> {
        match self {
            DigestAlgorithm::Sha256 => Sha256::digest(content).to_vec(),
            DigestAlgorithm::Sha512 => Sha512::digest(content).to_vec(),
        }
    }
}

impl std::fmt::Display for DigestAlgorithm {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.key())
    }
}

/// One digest read from a `Content-Digest` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentDigest {
    pub algorithm: DigestAlgorithm,
    pub digest: Vec<u8>,
}

/// Why a `Content-Digest` header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContentDigestError {
    #[error("the request has no content-digest header; send sha-256=:<base64>: of the body")]
    Missing,
    #[error("content-digest is not a structured-field dictionary: {0}")]
    Malformed(#[from] StructuredFieldError),
    #[error("content-digest {algorithm} is not a byte sequence; write it as :<base64>:")]
    NotByteSequence { algorithm: DigestAlgorithm },
    #[error("content-digest {algorithm} is {found} bytes long, expected {expected}")]
    WrongLength { algorithm: DigestAlgorithm, expected: usize, found: usize },
    #[error("content-digest names no supported algorithm; send sha-256")]
    NoSupportedAlgorithm,
    #[error("content-digest {algorithm} does not match the body that arrived")]
    Mismatch { algorithm: DigestAlgorithm },
}

/// The `Content-Digest` header value for `content`, using sha-256 (what we send).
pub fn content_digest_header(content: &[u8]) -> String {
    content_digest_header_with(content, &[DigestAlgorithm::Sha256])
}

/// The `Content-Digest` header value for `content` listing each of `algorithms` in order.
pub fn content_digest_header_with(content: &[u8], algorithms: &[DigestAlgorithm]) -> String {
    algorithms
        .iter()
        .map(|algorithm| {
            format!("{}={}", algorithm.key(), structured::serialize_byte_sequence(&algorithm.digest(content)))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads every digest we support from a header value, ignoring unknown algorithms whatever
/// their value's type (RFC 9530 §2: a recipient MAY ignore any digest).
pub fn parse_content_digest(value: &str) -> Result<Vec<ContentDigest>, ContentDigestError> {
    let mut digests = Vec::new();
    for (key, member) in structured::parse_dictionary(value)? {
        let Some(algorithm) = DigestAlgorithm::from_key(&key) else {
            continue;
        };
        let Member::Item(item) = member else {
            return Err(ContentDigestError::NotByteSequence { algorithm });
        };
        let BareItem::ByteSequence(digest) = item.bare_item else {
            return Err(ContentDigestError::NotByteSequence { algorithm });
        };
        if digest.len() != algorithm.digest_bytes() {
            return Err(ContentDigestError::WrongLength {
                algorithm,
                expected: algorithm.digest_bytes(),
                found: digest.len(),
            });
        }
        digests.push(ContentDigest { algorithm, digest });
    }
    Ok(digests)
}

/// Checks a header value against the content that arrived. Every supported digest must
/// match (a header with one good and one bad digest was tampered with or is buggy, and
/// either way the body is not the one described); returns the algorithms that were checked.
pub fn verify_content_digest(
    value: &str,
    content: &[u8],
) -> Result<Vec<DigestAlgorithm>, ContentDigestError> {
    let digests = parse_content_digest(value)?;
    if digests.is_empty() {
        return Err(ContentDigestError::NoSupportedAlgorithm);
    }
    for ContentDigest { algorithm, digest } in &digests {
        if algorithm.digest(content) != *digest {
            return Err(ContentDigestError::Mismatch { algorithm: *algorithm });
        }
    }
    Ok(digests.iter().map(|digest| digest.algorithm).collect())
}

/// The standard base64 of a digest, for logs and problem details (`provided-digest`).
pub fn encode_digest(digest: &[u8]) -> String {
    BASE64.encode(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9530's examples (§2, §3 and Appendix B) use `{"hello": "world"}` followed by a
    /// line feed: 19 bytes, `Content-Length: 19`.
    const RFC9530_CONTENT: &[u8] = b"{\"hello\": \"world\"}\n";
    /// RFC 9530 Appendix B.1 and B.2: `Content-Digest` of the content above with sha-256.
    const RFC9530_SHA256: &str = "sha-256=:RK/0qy18MlBSVnWgjwz6lZEWjP/lF5HF9bvEF8FabDg=:";
    /// RFC 9530 §2 and §3 example: the same content with sha-512.
    const RFC9530_SHA512: &str =
        "sha-512=:YMAam51Jz/jOATT6/zvHrLVgOYTGFy1d6GJiOHTohq4yP+pgk4vf2aCsyRZOtw8MjkM7iw7yZ/WkppmM44T3qg==:";

    /// RFC 9421 Appendix B.2's test-request carries the 18-byte content without the line
    /// feed and this sha-512 `Content-Digest`.
    const RFC9421_CONTENT: &[u8] = b"{\"hello\": \"world\"}";
    const RFC9421_SHA512: &str =
        "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:";

    #[test]
    fn creates_the_rfc_9530_sha_256_header_byte_for_byte() {
        assert_eq!(content_digest_header(RFC9530_CONTENT), RFC9530_SHA256);
    }

    #[test]
    fn creates_the_rfc_9530_sha_512_header_byte_for_byte() {
        assert_eq!(content_digest_header_with(RFC9530_CONTENT, &[DigestAlgorithm::Sha512]), RFC9530_SHA512);
    }

    #[test]
    fn creates_the_rfc_9421_test_request_digest_byte_for_byte() {
        assert_eq!(content_digest_header_with(RFC9421_CONTENT, &[DigestAlgorithm::Sha512]), RFC9421_SHA512);
    }

    #[test]
    fn verifies_the_rfc_examples() {
        assert_eq!(verify_content_digest(RFC9530_SHA256, RFC9530_CONTENT), Ok(vec![DigestAlgorithm::Sha256]));
        assert_eq!(verify_content_digest(RFC9530_SHA512, RFC9530_CONTENT), Ok(vec![DigestAlgorithm::Sha512]));
        assert_eq!(verify_content_digest(RFC9421_SHA512, RFC9421_CONTENT), Ok(vec![DigestAlgorithm::Sha512]));
    }

    #[test]
    fn a_trailing_line_feed_is_part_of_the_content() {
        assert_eq!(
            verify_content_digest(RFC9530_SHA256, RFC9421_CONTENT),
            Err(ContentDigestError::Mismatch { algorithm: DigestAlgorithm::Sha256 })
        );
    }

    #[test]
    fn several_algorithms_are_all_checked_and_unknown_ones_ignored() {
        let header = format!(
            "md5=:+thA//8pGVGk2VYuJkFNvA==:, unixsum=26869, {RFC9530_SHA256}, \
             id-sha-256=:AAAA:, {RFC9530_SHA512}, future-hash=?1;p=1.5"
        );
        assert_eq!(
            verify_content_digest(&header, RFC9530_CONTENT),
            Ok(vec![DigestAlgorithm::Sha256, DigestAlgorithm::Sha512])
        );
        let parsed = parse_content_digest(&header).unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0].algorithm, DigestAlgorithm::Sha256);
        assert_eq!(encode_digest(&parsed[0].digest), "RK/0qy18MlBSVnWgjwz6lZEWjP/lF5HF9bvEF8FabDg=");
    }

    #[test]
    fn one_bad_digest_among_good_ones_is_a_mismatch() {
        // The sha-512 here is of the content *without* the line feed.
        let header = format!("{RFC9530_SHA256}, {RFC9421_SHA512}");
        assert_eq!(
            verify_content_digest(&header, RFC9530_CONTENT),
            Err(ContentDigestError::Mismatch { algorithm: DigestAlgorithm::Sha512 })
        );
    }

    #[test]
    fn a_header_with_only_unknown_algorithms_is_refused() {
        assert_eq!(
            verify_content_digest("md5=:+thA//8pGVGk2VYuJkFNvA==:, unixsum=26869", b""),
            Err(ContentDigestError::NoSupportedAlgorithm)
        );
        assert_eq!(verify_content_digest("", b""), Err(ContentDigestError::NoSupportedAlgorithm));
    }

    #[test]
    fn malformed_values_are_refused_with_the_reason() {
        assert_eq!(
            // The RFC 3230 `Digest` style without colons reads as a token.
            verify_content_digest("sha-256=RK/0qy18MlBSVnWgjwz6lZEWjP/lF5HF9bvEF8FabDg", b""),
            Err(ContentDigestError::NotByteSequence { algorithm: DigestAlgorithm::Sha256 })
        );
        assert_eq!(
            verify_content_digest("sha-256=(:AAAA:)", b""),
            Err(ContentDigestError::NotByteSequence { algorithm: DigestAlgorithm::Sha256 })
        );
        // RFC 9530's truncated sha-512 example (32 bytes instead of 64), with the base64
        // padding restored so that it is the length, not the encoding, that is wrong.
        assert_eq!(
            verify_content_digest("sha-512=:YMAam51Jz/jOATT6/zvHrLVgOYTGFy1d6GJiOHTohq4=:", RFC9530_CONTENT),
            Err(ContentDigestError::WrongLength {
                algorithm: DigestAlgorithm::Sha512,
                expected: 64,
                found: 32
            })
        );
        assert!(matches!(
            verify_content_digest("sha-256=:RK/0qy18MlBSVnWgjwz6lZEWjP/lF5HF9bvEF8FabDg:", b""),
            Err(ContentDigestError::Malformed(_))
        ));
        assert!(matches!(
            verify_content_digest("SHA-256=:RK/0qy18MlBSVnWgjwz6lZEWjP/lF5HF9bvEF8FabDg=:", b""),
            Err(ContentDigestError::Malformed(_))
        ));
    }

    #[test]
    fn the_empty_body_has_a_digest_too() {
        // sha-256 of zero bytes, as used to assert "no content" (RFC 9530 §6.3).
        assert_eq!(content_digest_header(b""), "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:");
    }
}
