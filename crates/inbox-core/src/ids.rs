//! Typed identifiers. Each one is checked once, where it enters the system, so that no
//! crate passes a bare `String` or `i64` whose meaning or shape is a guess.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

/// Why a value was refused as an identifier; the message names the field and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {problem}")]
pub struct IdError {
    pub field: &'static str,
    pub problem: String,
}

impl IdError {
    fn new(field: &'static str, problem: impl Into<String>) -> Self {
        Self { field, problem: problem.into() }
    }
}

/// Defines a string identifier with a length limit and an allowed alphabet.
macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident, field = $field:literal, max = $max:literal, allowed = $allowed:expr,
     pattern = $pattern:expr, hint = $hint:literal $(, length = $length:literal)?) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            pub const BYTES_MAX: usize = $max;
            /// The allowed alphabet as a JSON Schema pattern (checked against the validator by
            /// a test), for the OpenAPI document.
            pub const PATTERN: &'static str = $pattern;

            pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
                let value = value.into();
                // Ids that name their length rule in one sentence (`length = "must be 1 to {}
                // characters long"`) keep it, for empty and over-long values alike.
                $(if value.is_empty() || value.len() > $max {
                    return Err(IdError::new($field, format!($length, $max)));
                })?
                if value.is_empty() {
                    return Err(IdError::new($field, "must not be empty"));
                }
                if value.len() > $max {
                    return Err(IdError::new(
                        $field,
                        format!("is {} bytes long; the limit is {}", value.len(), $max),
                    ));
                }
                let allowed: fn(u8) -> bool = $allowed;
                // Every allowed byte is ASCII: name the first character that is not allowed
                // (whole, not its first UTF-8 byte read as Latin-1).
                if let Some(bad) = value.chars().find(|c| !c.is_ascii() || !allowed(*c as u8)) {
                    return Err(IdError::new(
                        $field,
                        format!("contains {bad:?}; use only {}", $hint),
                    ));
                }
                Ok(Self(value))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        /// Refused with the problem alone: the deserializer's path names the field.
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let raw = String::deserialize(deserializer)?;
                Self::new(raw).map_err(|e| serde::de::Error::custom(e.problem))
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                string_schema(Some(1), Some($max), $pattern)
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::ToSchema for $name {}
    };
}

/// A string's JSON Schema: its length bounds and pattern.
#[cfg(feature = "openapi")]
pub(crate) fn string_schema(
    min_length: Option<usize>,
    max_length: Option<usize>,
    pattern: &str,
) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .min_length(min_length)
        .max_length(max_length)
        .pattern(Some(pattern))
        .into()
}

/// The bytes of [`word_byte`] as a JSON Schema pattern.
const WORD_PATTERN: &str = "^[A-Za-z0-9_.:-]+$";

fn word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':')
}

string_id!(
    /// A tenant: the isolation boundary. Nothing crosses from one tenant to another.
    TenantId, field = "tenant_id", max = 64, allowed = word_byte,
    pattern = WORD_PATTERN, hint = "letters, digits, '_', '-', '.' and ':'"
);
string_id!(
    /// What kind of party a recipient is (`agent` for every recipient agent-inbox serves today).
    RecipientKind, field = "recipient_kind", max = 32,
    allowed = |b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-',
    pattern = "^[a-z0-9_-]+$", hint = "lower-case letters, digits, '_' and '-'"
);
string_id!(
    /// A recipient within its tenant and kind, such as an agent id.
    RecipientId, field = "recipient_id", max = 128,
    allowed = |b| word_byte(b) || b == b'@', pattern = "^[A-Za-z0-9_.:@-]+$",
    hint = "letters, digits, '_', '-', '.', ':' and '@'"
);
string_id!(
    /// The kind of work an event announces, such as `meeting_room.message_posted`.
    EventType, field = "event_type", max = 128, allowed = word_byte,
    pattern = WORD_PATTERN, hint = "letters, digits, '_', '-', '.' and ':'"
);
string_id!(
    /// The publisher's key for idempotent publishing: one event per recipient and key.
    DeduplicationKey, field = "deduplication_key", max = 200,
    allowed = |b| b.is_ascii_graphic(), pattern = "^[!-~]+$",
    hint = "printable ASCII without spaces"
);
string_id!(
    /// The source an event is fair to (a room, a project, a person): under a tenant's fair
    /// claims, one key's backlog cannot hold another key's events back. Defaults to the
    /// publishing subject.
    FairnessKey, field = "fairness_key", max = 200,
    allowed = |b| b.is_ascii_graphic(), pattern = "^[!-~]+$",
    hint = "printable ASCII without spaces"
);
string_id!(
    /// An agent session (one device or process) that claims events.
    SessionId, field = "session_id", max = 64, allowed = word_byte,
    pattern = WORD_PATTERN, hint = "letters, digits, '_', '-', '.' and ':'"
);
string_id!(
    /// A signing key's id: what a signature's `keyid` parameter names (agent keys) and what a
    /// callback delivery's signature names (callback secrets). Unique within a tenant.
    KeyId, field = "key_id", max = 64, allowed = word_byte,
    pattern = WORD_PATTERN, hint = "letters, digits, '_', '-', '.' and ':'",
    length = "must be 1 to {} characters long"
);
string_id!(
    /// A callback registration's id.
    RegistrationId, field = "registration_id", max = 64, allowed = word_byte,
    pattern = WORD_PATTERN, hint = "letters, digits, '_', '-', '.' and ':'",
    length = "must be 1 to {} characters long"
);
string_id!(
    /// A meeting room's id, unique within its tenant, shaped like a tenant id so it fits every
    /// correlation field and URL path without escaping.
    RoomId, field = "room_id", max = 64, allowed = word_byte,
    pattern = WORD_PATTERN, hint = "letters, digits, '_', '-', '.' and ':'",
    length = "must be 1 to {} characters long"
);

impl RecipientKind {
    /// The kind of every agent recipient.
    pub fn agent() -> Self {
        Self("agent".to_owned())
    }
}

/// A recipient: kind and id, unique within a tenant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Recipient {
    pub kind: RecipientKind,
    pub id: RecipientId,
}

impl Recipient {
    pub fn agent(id: RecipientId) -> Self {
        Self { kind: RecipientKind::agent(), id }
    }
}

/// One inbox: the tenant and the recipient that owns it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecipientKey {
    pub tenant_id: TenantId,
    pub recipient: Recipient,
}

/// A position in one recipient's inbox. Sequence numbers start at 1; cursor 0 means
/// "before the first event". Per recipient, sequence order is commit order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
#[serde(transparent)]
pub struct InboxSeq(pub u64);

impl InboxSeq {
    pub const ZERO: InboxSeq = InboxSeq(0);
    /// Sequences are stored as signed 64-bit integers.
    pub const MAX: InboxSeq = InboxSeq(i64::MAX as u64);

    pub fn new(value: u64) -> Result<Self, IdError> {
        if value > Self::MAX.0 {
            return Err(IdError::new("inbox_seq", format!("must be at most {}", Self::MAX.0)));
        }
        Ok(Self(value))
    }

    pub fn get(self) -> u64 {
        self.0
    }

    pub fn next(self) -> InboxSeq {
        InboxSeq(self.0 + 1)
    }
}

impl fmt::Display for InboxSeq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Refused past [`InboxSeq::MAX`], with the problem alone (the path names the field).
impl<'de> Deserialize<'de> for InboxSeq {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = u64::deserialize(deserializer)?;
        Self::new(raw).map_err(|e| serde::de::Error::custom(e.problem))
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for InboxSeq {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, SchemaFormat, Type};
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
            .minimum(Some(0u64))
            .maximum(Some(Self::MAX.0))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for InboxSeq {}

/// An event's identity: a UUIDv7, so ids sort roughly by creation time.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventId(Uuid);

impl EventId {
    /// A UUID in text, as [`EventId::parse`] takes it, as a JSON Schema pattern.
    pub const PATTERN: &'static str =
        "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";

    /// Builds a UUIDv7 from a creation time and ten random bytes.
    pub fn new_v7(now: crate::UnixMillis, random: [u8; 10]) -> Self {
        let millis = u64::try_from(now.get()).unwrap_or(0);
        Self(uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid())
    }

    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(Uuid::from_bytes(bytes))
    }

    pub fn from_slice(bytes: &[u8]) -> Result<Self, IdError> {
        Uuid::from_slice(bytes).map(Self).map_err(|_| IdError::new("event_id", "must be 16 bytes"))
    }

    pub fn parse(text: &str) -> Result<Self, IdError> {
        Uuid::try_parse(text).map(Self).map_err(|_| {
            IdError::new(
                "event_id",
                format!("{text:?} is not a UUID such as 0197f0ab-44f7-7f1a-b0ef-1f5d0f9a1c70"),
            )
        })
    }

    pub fn as_bytes(&self) -> &[u8; 16] {
        self.0.as_bytes()
    }

    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl std::str::FromStr for EventId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        Self::parse(s)
    }
}

impl fmt::Debug for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EventId({})", self.0.hyphenated())
    }
}

impl Serialize for EventId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0.hyphenated())
    }
}

impl<'de> Deserialize<'de> for EventId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        Self::parse(&raw).map_err(|e| serde::de::Error::custom(e.problem))
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for EventId {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{SchemaFormat, Type};
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::Custom("uuid".to_owned())))
            .pattern(Some(Self::PATTERN))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for EventId {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::UnixMillis;

    #[test]
    fn ids_refuse_empty_long_and_odd_values_with_the_field_named() {
        assert_eq!(TenantId::new("").unwrap_err().to_string(), "tenant_id must not be empty");
        let long = "a".repeat(65);
        assert!(TenantId::new(long).unwrap_err().to_string().contains("limit is 64"));
        let err = RecipientId::new("agent alpha").unwrap_err();
        assert_eq!(err.field, "recipient_id");
        assert!(err.problem.contains("' '"));
        let err = RecipientId::new("agent_m\u{ed}a").unwrap_err();
        assert_eq!(err.problem, "contains '\u{ed}'; use only letters, digits, '_', '-', '.', ':' and '@'");
        assert!(RecipientKind::new("Agent").is_err());
        assert!(DeduplicationKey::new("msg:room_7:920155").is_ok());
        assert!(DeduplicationKey::new("two words").is_err());
    }

    #[test]
    fn event_ids_are_version_7_and_round_trip_through_text() {
        let id = EventId::new_v7(UnixMillis(1_752_337_323_000), [7; 10]);
        assert_eq!(id.as_uuid().get_version_num(), 7);
        assert_eq!(EventId::parse(&id.to_string()).unwrap(), id);
        let later = EventId::new_v7(UnixMillis(1_752_337_323_001), [0; 10]);
        assert!(later > id, "v7 ids sort by creation time");
        assert!(EventId::parse("evt_1").is_err());
    }

    /// Whether `c` is in the one character class of a `^[...]+$` pattern.
    fn in_class(pattern: &str, c: char) -> bool {
        let class: Vec<char> = pattern
            .strip_prefix("^[")
            .and_then(|p| p.strip_suffix("]+$"))
            .expect("a ^[...]+$ pattern")
            .chars()
            .collect();
        let mut i = 0;
        while i < class.len() {
            if i + 2 < class.len() && class[i + 1] == '-' {
                if (class[i]..=class[i + 2]).contains(&c) {
                    return true;
                }
                i += 3;
            } else {
                if class[i] == c {
                    return true;
                }
                i += 1;
            }
        }
        false
    }

    #[test]
    fn each_pattern_allows_exactly_what_its_validator_allows() {
        fn check(name: &str, pattern: &str, valid: impl Fn(String) -> bool) {
            for c in (0u8..=127).map(char::from) {
                assert_eq!(in_class(pattern, c), valid(c.to_string()), "{name}: {c:?} against {pattern}");
            }
        }
        check("TenantId", TenantId::PATTERN, |s| TenantId::new(s).is_ok());
        check("RecipientKind", RecipientKind::PATTERN, |s| RecipientKind::new(s).is_ok());
        check("RecipientId", RecipientId::PATTERN, |s| RecipientId::new(s).is_ok());
        check("EventType", EventType::PATTERN, |s| EventType::new(s).is_ok());
        check("DeduplicationKey", DeduplicationKey::PATTERN, |s| DeduplicationKey::new(s).is_ok());
        check("FairnessKey", FairnessKey::PATTERN, |s| FairnessKey::new(s).is_ok());
        check("SessionId", SessionId::PATTERN, |s| SessionId::new(s).is_ok());
        check("KeyId", KeyId::PATTERN, |s| KeyId::new(s).is_ok());
        check("RegistrationId", RegistrationId::PATTERN, |s| RegistrationId::new(s).is_ok());
        check("RoomId", RoomId::PATTERN, |s| RoomId::new(s).is_ok());
    }

    #[test]
    fn refusals_when_deserializing_leave_the_field_to_the_path() {
        let err = serde_json::from_str::<RecipientId>("\"a b\"").unwrap_err().to_string();
        assert!(err.starts_with("contains ' '; use only"), "{err}");
        let err = serde_json::from_str::<EventId>("\"evt_1\"").unwrap_err().to_string();
        assert!(err.starts_with("\"evt_1\" is not a UUID"), "{err}");
        let err =
            serde_json::from_str::<InboxSeq>(&(i64::MAX as u64 + 1).to_string()).unwrap_err().to_string();
        assert!(err.starts_with("must be at most"), "{err}");
        assert_eq!(serde_json::from_str::<InboxSeq>("7").unwrap(), InboxSeq(7));
    }

    #[test]
    fn inbox_seq_fits_a_signed_column() {
        assert!(InboxSeq::new(i64::MAX as u64).is_ok());
        assert!(InboxSeq::new(i64::MAX as u64 + 1).is_err());
    }

    #[test]
    fn key_registration_and_room_ids_keep_their_one_sentence_length_rule() {
        for (err, field) in [
            (KeyId::new("").unwrap_err(), "key_id"),
            (RegistrationId::new("r".repeat(65)).unwrap_err(), "registration_id"),
            (RoomId::new("").unwrap_err(), "room_id"),
        ] {
            assert_eq!(err.to_string(), format!("{field} must be 1 to 64 characters long"));
        }
        assert_eq!(
            RoomId::new("room 1").unwrap_err().to_string(),
            "room_id contains ' '; use only letters, digits, '_', '-', '.' and ':'"
        );
        assert_eq!(KeyId::new("ak_1.x:y").unwrap().as_str(), "ak_1.x:y");
    }
}
