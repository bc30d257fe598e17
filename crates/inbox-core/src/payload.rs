//! What an event carries: its priority, the correlation ids that tie it to domain objects, and
//! its body (inline JSON, a reference to a domain row, or nothing).

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::IdError;

/// Claim order within an inbox: more urgent first, then by sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    Urgent,
    High,
    #[default]
    Normal,
    Low,
}

impl Priority {
    pub const ALL: [Priority; 4] = [Priority::Urgent, Priority::High, Priority::Normal, Priority::Low];

    /// The stored rank: lower is claimed first, so one ascending index serves the claim query.
    pub fn rank(self) -> u8 {
        match self {
            Priority::Urgent => 0,
            Priority::High => 1,
            Priority::Normal => 2,
            Priority::Low => 3,
        }
    }

    pub fn from_rank(rank: u8) -> Option<Priority> {
        Priority::ALL.get(usize::from(rank)).copied()
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Urgent => "urgent",
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Low => "low",
        }
    }
}

/// Ids of the domain objects an event concerns.
// One type from the wire to the database: the API's request and envelope carry it as is (its
// doc line above is the OpenAPI description). All optional, each at most `BYTES_MAX` bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Correlation {
    pub company_id: Option<String>,
    pub workspace_id: Option<String>,
    pub project_id: Option<String>,
    pub meeting_room_id: Option<String>,
    pub message_id: Option<String>,
    pub routing_decision_id: Option<String>,
    pub memory_update_id: Option<String>,
    pub assignment_id: Option<String>,
}

impl Correlation {
    pub const BYTES_MAX: usize = 128;

    /// Each field with its wire and column name, in schema order.
    pub fn fields(&self) -> [(&'static str, Option<&str>); 8] {
        [
            ("company_id", self.company_id.as_deref()),
            ("workspace_id", self.workspace_id.as_deref()),
            ("project_id", self.project_id.as_deref()),
            ("meeting_room_id", self.meeting_room_id.as_deref()),
            ("message_id", self.message_id.as_deref()),
            ("routing_decision_id", self.routing_decision_id.as_deref()),
            ("memory_update_id", self.memory_update_id.as_deref()),
            ("assignment_id", self.assignment_id.as_deref()),
        ]
    }

    pub fn validate(&self) -> Result<(), IdError> {
        for (field, value) in self.fields() {
            let Some(value) = value else { continue };
            if value.is_empty() || value.len() > Self::BYTES_MAX || value.chars().any(char::is_control) {
                return Err(IdError {
                    field,
                    problem: format!("must be 1 to {} bytes without control characters", Self::BYTES_MAX),
                });
            }
        }
        Ok(())
    }
}

/// A pointer to the domain row that holds an event's data, for payloads kept elsewhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayloadRef {
    pub kind: String,
    pub id: String,
}

impl PayloadRef {
    pub const KIND_BYTES_MAX: usize = 64;
    pub const ID_BYTES_MAX: usize = 128;

    pub fn validate(&self) -> Result<(), IdError> {
        let ok = |v: &str, max: usize| !v.is_empty() && v.len() <= max && !v.chars().any(char::is_control);
        if !ok(&self.kind, Self::KIND_BYTES_MAX) {
            return Err(IdError {
                field: "payload_ref.kind",
                problem: format!("must be 1 to {} bytes", Self::KIND_BYTES_MAX),
            });
        }
        if !ok(&self.id, Self::ID_BYTES_MAX) {
            return Err(IdError {
                field: "payload_ref.id",
                problem: format!("must be 1 to {} bytes", Self::ID_BYTES_MAX),
            });
        }
        Ok(())
    }
}

/// An event's content. Inline JSON is kept as the exact text the publisher sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventBody {
    /// No body: the event type and correlation ids say everything.
    Empty,
    /// Inline JSON text, already checked to be well-formed.
    Json(String),
    /// The data lives in a domain row the recipient fetches itself.
    Reference(PayloadRef),
}

impl EventBody {
    /// Checks that `text` is one well-formed JSON value and keeps it byte for byte.
    pub fn json(text: impl Into<String>) -> Result<EventBody, IdError> {
        let text = text.into();
        serde_json::from_str::<&RawValue>(&text)
            .map_err(|err| IdError { field: "payload", problem: format!("is not valid JSON ({err})") })?;
        Ok(EventBody::Json(text))
    }

    /// Size counted against the payload limit.
    pub fn json_bytes(&self) -> usize {
        match self {
            EventBody::Json(text) => text.len(),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_ranks_round_trip_in_claim_order() {
        for p in Priority::ALL {
            assert_eq!(Priority::from_rank(p.rank()), Some(p));
        }
        assert!(Priority::Urgent.rank() < Priority::Low.rank());
        assert_eq!(Priority::from_rank(4), None);
    }

    #[test]
    fn json_bodies_must_parse_and_keep_their_text() {
        assert_eq!(EventBody::json(r#"{"a": 1}"#).unwrap(), EventBody::Json(r#"{"a": 1}"#.into()));
        assert!(EventBody::json("{").is_err());
        assert!(EventBody::json("{} {}").is_err());
    }

    #[test]
    fn correlation_ids_are_bounded() {
        let mut c = Correlation { meeting_room_id: Some("room_7".into()), ..Default::default() };
        assert!(c.validate().is_ok());
        c.assignment_id = Some("x".repeat(129));
        assert_eq!(c.validate().unwrap_err().field, "assignment_id");
    }
}
