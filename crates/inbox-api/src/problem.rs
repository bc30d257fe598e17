//! RFC 9457 problem details with a stable `code`: the only shape an error takes on the wire.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::ProblemCode;

/// `application/problem+json`.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// An RFC 9457 problem. `code` is stable and meant for programs; `detail` is a sentence for a
/// person, saying what to do next. Extra members (such as `oldest_available_seq`) ride along.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Problem {
    /// A URI naming the problem type: `urn:agent-inbox:problem:<code>`.
    #[serde(rename = "type")]
    pub problem_type: String,
    pub title: String,
    pub status: u16,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub code: ProblemCode,
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub extensions: Map<String, Value>,
}

impl Problem {
    pub fn new(status: u16, code: impl Into<ProblemCode>, title: &str, detail: impl Into<String>) -> Self {
        let code = code.into();
        Self {
            problem_type: format!("urn:agent-inbox:problem:{code}"),
            title: title.to_owned(),
            status,
            code,
            detail: detail.into(),
            instance: None,
            extensions: Map::new(),
        }
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extensions.insert(key.to_owned(), value.into());
        self
    }
}

/// The error for one item of a batch (claim by ids, acknowledge, heartbeat).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ItemError {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub code: ProblemCode,
    pub detail: String,
}
