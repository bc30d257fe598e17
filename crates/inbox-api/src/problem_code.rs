//! The stable problem `code`s the service answers with, as one enum: the server can only
//! refuse with a code listed here, and clients match on variants instead of strings.
//!
//! On the wire a code is its snake_case string, exactly as before. A code this build does not
//! know (from a newer server, or made up by a client for its own failures) reads as
//! [`ProblemCode::Other`], so an older client keeps working and still shows the code.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! problem_codes {
    ($($variant:ident => $wire:literal,)+) => {
        /// A problem's stable `code`.
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[non_exhaustive]
        pub enum ProblemCode {
            $($variant,)+
            /// A code this build does not know.
            Other(String),
        }

        impl ProblemCode {
            /// Every code the service can answer with (every variant but `Other`).
            pub const ALL: &'static [ProblemCode] = &[$(ProblemCode::$variant,)+];

            /// The code as it is written on the wire.
            pub fn as_str(&self) -> &str {
                match self {
                    $(ProblemCode::$variant => $wire,)+
                    ProblemCode::Other(code) => code,
                }
            }

            /// The code a wire string names; `Other` when this build does not know it.
            pub fn parse(text: &str) -> ProblemCode {
                match text {
                    $($wire => ProblemCode::$variant,)+
                    other => ProblemCode::Other(other.to_owned()),
                }
            }
        }
    };
}

problem_codes! {
    AlreadyAcked => "already_acked",
    AlreadyExists => "already_exists",
    AuthThrottled => "auth_throttled",
    CallbackHostUnresolvable => "callback_host_unresolvable",
    CallbackLimitReached => "callback_limit_reached",
    CallbackRegistrationNotFound => "callback_registration_not_found",
    CallbackUrlRefused => "callback_url_refused",
    ContentDigestMismatch => "content_digest_mismatch",
    CsrfMismatch => "csrf_mismatch",
    CursorResetRequired => "cursor_reset_required",
    DatabaseBusy => "database_busy",
    DatabaseUnavailable => "database_unavailable",
    EventNotFound => "event_not_found",
    EventTerminal => "event_terminal",
    InternalError => "internal_error",
    InvalidField => "invalid_field",
    InvalidQuery => "invalid_query",
    InvalidRefreshToken => "invalid_refresh_token",
    InvalidStreamCookie => "invalid_stream_cookie",
    InvalidTicket => "invalid_ticket",
    InvalidToken => "invalid_token",
    KeyExists => "key_exists",
    KeyLimitReached => "key_limit_reached",
    KindNotAllowed => "kind_not_allowed",
    LeaseExpired => "lease_expired",
    LeaseMismatch => "lease_mismatch",
    LeaseStillLive => "lease_still_live",
    MalformedJson => "malformed_json",
    MethodNotAllowed => "method_not_allowed",
    NotClaimable => "not_claimable",
    NotFound => "not_found",
    NotParked => "not_parked",
    NotQuarantined => "not_quarantined",
    NotReady => "not_ready",
    OriginMismatch => "origin_mismatch",
    PayloadTooLarge => "payload_too_large",
    RateLimited => "rate_limited",
    RefreshTokenReused => "refresh_token_reused",
    RoomExists => "room_exists",
    RoomNotFound => "room_not_found",
    RouteNotFound => "route_not_found",
    ScopeMissing => "scope_missing",
    SessionNotFound => "session_not_found",
    SessionRequired => "session_required",
    SessionSuperseded => "session_superseded",
    SignatureExpired => "signature_expired",
    SignatureInvalid => "signature_invalid",
    SignatureReplayed => "signature_replayed",
    SignatureRequired => "signature_required",
    StreamsAtCapacity => "streams_at_capacity",
    TenantMismatch => "tenant_mismatch",
    TenantPendingLimit => "tenant_pending_limit",
    TenantStorageLimit => "tenant_storage_limit",
    TokenExpired => "token_expired",
    TooManyWaiters => "too_many_waiters",
    Unauthorized => "unauthorized",
    UnknownField => "unknown_field",
    UnknownOp => "unknown_op",
    UnknownSigningKey => "unknown_signing_key",
    UnsupportedMediaType => "unsupported_media_type",
    UnsupportedMessage => "unsupported_message",
    WebsocketUpgradeRequired => "websocket_upgrade_required",
}

impl ProblemCode {
    /// Whether this is a code the service itself answers with (not `Other`).
    pub fn is_known(&self) -> bool {
        !matches!(self, ProblemCode::Other(_))
    }
}

impl FromStr for ProblemCode {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<ProblemCode, Self::Err> {
        Ok(ProblemCode::parse(text))
    }
}

impl From<&str> for ProblemCode {
    fn from(text: &str) -> ProblemCode {
        ProblemCode::parse(text)
    }
}

impl From<String> for ProblemCode {
    fn from(text: String) -> ProblemCode {
        ProblemCode::parse(&text)
    }
}

impl From<&String> for ProblemCode {
    fn from(text: &String) -> ProblemCode {
        ProblemCode::parse(text)
    }
}

impl From<&ProblemCode> for ProblemCode {
    fn from(code: &ProblemCode) -> ProblemCode {
        code.clone()
    }
}

impl From<ProblemCode> for String {
    fn from(code: ProblemCode) -> String {
        code.as_str().to_owned()
    }
}

impl fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Comparing with the wire string, for tests and logs that hold the code as text.
impl PartialEq<str> for ProblemCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ProblemCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for ProblemCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ProblemCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ProblemCode, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Ok(ProblemCode::parse(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_wire_string() {
        for code in ProblemCode::ALL {
            assert!(code.is_known());
            assert_eq!(&ProblemCode::parse(code.as_str()), code);
            let json = serde_json::to_string(code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            assert_eq!(&serde_json::from_str::<ProblemCode>(&json).unwrap(), code);
        }
    }

    #[test]
    fn codes_are_snake_case_and_distinct() {
        let mut seen = std::collections::BTreeSet::new();
        for code in ProblemCode::ALL {
            let text = code.as_str();
            assert!(text.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{text}");
            assert!(seen.insert(text), "{text} is listed twice");
        }
    }

    #[test]
    fn an_unknown_code_from_a_newer_server_is_kept_as_other() {
        let code: ProblemCode = serde_json::from_str("\"quota_exceeded\"").unwrap();
        assert_eq!(code, ProblemCode::Other("quota_exceeded".to_owned()));
        assert!(!code.is_known());
        assert_eq!(serde_json::to_string(&code).unwrap(), "\"quota_exceeded\"");
        assert_eq!(code, "quota_exceeded");
    }
}
