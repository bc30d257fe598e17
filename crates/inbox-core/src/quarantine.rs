//! Why an event was quarantined, in a few words an operator can count: the class of a
//! quarantine is its metric label, so the set is small and fixed.

use serde::{Deserialize, Serialize};

/// The kind of anomaly that set an event aside for a person. Unknown or missing classes are
/// [`QuarantineClass::Other`], so the label's cardinality stays bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum QuarantineClass {
    /// The payload reads like instructions aimed at the agent rather than data for it.
    PromptInjection,
    /// The payload does not parse or does not match what the event type promises.
    MalformedPayload,
    /// A signature or digest on the event does not verify.
    BadSignature,
    /// The event breaks a rule of the tenant or the agent.
    Policy,
    #[default]
    Other,
}

impl QuarantineClass {
    pub const ALL: [QuarantineClass; 5] = [
        QuarantineClass::PromptInjection,
        QuarantineClass::MalformedPayload,
        QuarantineClass::BadSignature,
        QuarantineClass::Policy,
        QuarantineClass::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            QuarantineClass::PromptInjection => "prompt_injection",
            QuarantineClass::MalformedPayload => "malformed_payload",
            QuarantineClass::BadSignature => "bad_signature",
            QuarantineClass::Policy => "policy",
            QuarantineClass::Other => "other",
        }
    }

    pub fn parse(text: &str) -> Option<QuarantineClass> {
        QuarantineClass::ALL.into_iter().find(|c| c.as_str() == text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_text_and_serde() {
        for class in QuarantineClass::ALL {
            assert_eq!(QuarantineClass::parse(class.as_str()), Some(class));
            let json = serde_json::to_string(&class).unwrap();
            assert_eq!(json, format!("\"{}\"", class.as_str()));
            assert_eq!(serde_json::from_str::<QuarantineClass>(&json).unwrap(), class);
        }
        assert_eq!(QuarantineClass::parse("spam"), None);
        assert_eq!(QuarantineClass::default(), QuarantineClass::Other);
    }
}
