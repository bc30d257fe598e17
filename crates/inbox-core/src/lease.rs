//! Lease tokens. A token is shown to its holder once, when the claim succeeds; the store keeps
//! only its SHA-256 hash, so a database dump cannot be used to ack or release someone's work.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use crate::IdError;

const PREFIX: &str = "lease_";
const HEX_LEN: usize = 32;

/// The secret that proves a caller holds a lease: `lease_` and 128 random bits in hex.
#[derive(Clone, PartialEq, Eq)]
pub struct LeaseToken(String);

/// What the store keeps of a [`LeaseToken`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseTokenHash(pub [u8; 32]);

impl LeaseToken {
    /// What [`LeaseToken::parse`] takes, as a JSON Schema pattern.
    pub const PATTERN: &'static str = "^lease_[0-9a-f]{32}$";

    /// Makes a token from 16 random bytes supplied by the caller.
    pub fn from_random(random: [u8; 16]) -> Self {
        let mut text = String::with_capacity(PREFIX.len() + HEX_LEN);
        text.push_str(PREFIX);
        for byte in random {
            text.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
            text.push(char::from(b"0123456789abcdef"[usize::from(byte & 0xf)]));
        }
        Self(text)
    }

    pub fn parse(text: &str) -> Result<Self, IdError> {
        let valid = text.len() == PREFIX.len() + HEX_LEN
            && text.starts_with(PREFIX)
            && text[PREFIX.len()..].bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !valid {
            return Err(IdError {
                field: "lease_token",
                problem: "is not a lease token; use the lease_token the claim returned".to_owned(),
            });
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn hash(&self) -> LeaseTokenHash {
        LeaseTokenHash(Sha256::digest(self.0.as_bytes()).into())
    }
}

impl Serialize for LeaseToken {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// Refused with the problem alone: the deserializer's path names the field.
impl<'de> Deserialize<'de> for LeaseToken {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        Self::parse(&raw).map_err(|e| serde::de::Error::custom(e.problem))
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for LeaseToken {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        crate::ids::string_schema(None, None, Self::PATTERN)
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for LeaseToken {}

/// Never print a live token, not even in debug output.
impl fmt::Debug for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LeaseToken(..)")
    }
}

impl fmt::Debug for LeaseTokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LeaseTokenHash({:02x}{:02x}{:02x}{:02x}..)", self.0[0], self.0[1], self.0[2], self.0[3])
    }
}

impl LeaseTokenHash {
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_hash_deterministically() {
        let token = LeaseToken::from_random([0xab; 16]);
        assert_eq!(token.as_str(), format!("lease_{}", "ab".repeat(16)));
        let parsed = LeaseToken::parse(token.as_str()).unwrap();
        assert_eq!(parsed.hash(), token.hash());
        assert_ne!(LeaseToken::from_random([0; 16]).hash(), token.hash());
        assert_eq!(format!("{token:?}"), "LeaseToken(..)");
        let json = serde_json::to_string(&token).unwrap();
        assert_eq!(serde_json::from_str::<LeaseToken>(&json).unwrap(), token);
        let refused = serde_json::from_str::<LeaseToken>("\"lease_XYZ\"").unwrap_err().to_string();
        assert!(refused.starts_with("is not a lease token"), "{refused}");
    }

    #[test]
    fn malformed_tokens_are_refused() {
        for bad in [
            "",
            "lease_",
            "lease_XYZ",
            "token_abababababababababababababababab",
            &format!("lease_{}", "AB".repeat(16)),
        ] {
            assert!(LeaseToken::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
