//! The signature base (RFC 9421 §2.5): the exact byte string that is signed, built from a
//! request's component values and the signature parameters. It sits above `components` and
//! `params` so neither of those needs the other: one `\n` between lines, none at the end.

use super::components::{Component, RequestParts, SignatureBaseError};
use super::params::SignatureParams;

/// Builds the RFC 9421 §2.5 signature base: one `"<identifier>": <value>` line per covered
/// component, in the order the parameters list them, then the `@signature-params` line.
pub fn signature_base(parts: &RequestParts, params: &SignatureParams) -> Result<String, SignatureBaseError> {
    params.check_serializable()?;
    let mut base = String::new();
    let mut seen: Vec<&Component> = Vec::new();
    for component in params.components() {
        if seen.contains(&component) {
            return Err(SignatureBaseError::DuplicateComponent { component: component.to_string() });
        }
        seen.push(component);
        base.push_str(&component.identifier());
        base.push_str(": ");
        base.push_str(&parts.component_value(component)?);
        base.push('\n');
    }
    base.push_str("\"@signature-params\": ");
    base.push_str(&params.serialize());
    Ok(base)
}
